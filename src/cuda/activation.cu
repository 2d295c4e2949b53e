// silu_mul on CUDA: out[r, c] = silu(gate[r, c]) * up[r, c], silu(g) = g / (1 + exp(-g)), in
// float32 (float64 for float64) with one rounding. gate and up may be the two halves of a fused
// gate_up projection (row strides of 2 * cols). A grid-stride loop over 16-byte packs of
// [rows, cols / V], two packs of each operand in flight per thread; contiguous operands are one
// long row, so the common case does no index division.
#include <algorithm>

#include "core/align.h"
#include "core/dispatch.h"
#include "core/kernels/activation.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/row_ops.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::compute_t;
using cuda_device::from_compute;
using cuda_device::Pack;
using cuda_device::to_compute;

using cuda_device::silu_mul_one;

// V elements per pack (16 bytes, or 1 for misaligned rows); packs_per_row = cols / V.
template <typename T, int V>
__global__ void __launch_bounds__(256) silu_mul_kernel(const __grid_constant__ SiluMulParams p, int64_t packs_per_row) {
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();
  using P = Pack<T, V>;
  const int64_t total = p.rows * packs_per_row, nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto load = [&](int64_t i, P& g, P& u, int64_t& out_off) {
    int64_t r = 0, c = i;
    if (p.rows > 1) cuda_device::divmod(i, packs_per_row, r, c);
    g = reinterpret_cast<const P*>(static_cast<const T*>(p.gate) + r * p.stride_gate_row)[c];
    u = reinterpret_cast<const P*>(static_cast<const T*>(p.up) + r * p.stride_up_row)[c];
    out_off = r * p.stride_out_row + c * V;
  };
  auto store = [&](int64_t out_off, const P& g, const P& u) {
    P y;
#pragma unroll
    for (int e = 0; e < V; ++e) y.v[e] = from_compute<T>(silu_mul_one(to_compute(g.v[e]), to_compute(u.v[e])));
    *reinterpret_cast<P*>(static_cast<T*>(p.out) + out_off) = y;
  };
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += 2 * nthreads) {
    const bool second = i + nthreads < total;
    P g0, u0, g1, u1;
    int64_t o0, o1;
    load(i, g0, u0, o0);
    load(second ? i + nthreads : i, g1, u1, o1);  // unguarded, so both loads are in flight at once
    store(o0, g0, u0);
    if (second) store(o1, g1, u1);
  }
}


template <typename T>
void launch_silu_mul(const SiluMulParams& p_in, const KernelLaunch& launch) {
  constexpr int V = 16 / sizeof(T);
  SiluMulParams p = p_in;
  if (p.rows > 1 && p.stride_gate_row == p.cols && p.stride_up_row == p.cols && p.stride_out_row == p.cols) {
    p.cols *= p.rows;  // dense operands: one row
    p.rows = 1;
  }
  auto stride_ok = [&](int64_t s) { return p.rows <= 1 || s % V == 0; };
  const bool vec = p.cols % V == 0 && aligned16(p.gate) && aligned16(p.up) && aligned16(p.out) &&
                   stride_ok(p.stride_gate_row) && stride_ok(p.stride_up_row) && stride_ok(p.stride_out_row);
  const int64_t ppr = vec ? p.cols / V : p.cols;
  const unsigned grid = launch.blocks(p.rows * ppr, 2);
  launch_pdl("[silu_mul]", vec ? silu_mul_kernel<T, V> : silu_mul_kernel<T, 1>, dim3(grid), dim3(256), 0, launch.stream(),
             p, ppr);
}

}  // namespace

void silu_mul(const SiluMulParams& p) {
  if (p.rows == 0 || p.cols == 0) return;
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[silu_mul]",
                       [&](auto tag) { launch_silu_mul<typename decltype(tag)::type>(p, launch); });
  launch.check("[silu_mul]");
}

}  // namespace anvil::cuda_backend
