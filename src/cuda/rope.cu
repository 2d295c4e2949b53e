// rope on CUDA (neox style): for c < half = rotary_dim / 2 and angle = float(pos) * inv_freq[c],
//   out[c] = x[c] cos - x[c + half] sin,  out[c + half] = x[c + half] cos + x[c] sin,
// columns >= rotary_dim copied. sincosf is the accurate one (positions reach 32K and more, where
// __sinf's error grows with the argument); float64 takes sin / cos in double of the float angle.
// Products and sums are not contracted into FMAs, as a plain CPU loop computes them.
// A thread takes one pack of V columns (16 bytes, or 1 when rows are misaligned) for up to
// kReuse rows that share a position: positions are broadcast over the heads dim, so the angles of
// a pack are computed once for several heads.
#include <algorithm>

#include "core/dispatch.h"
#include "core/kernels.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::compute_t;
using cuda_device::from_compute;
using cuda_device::Pack;
using cuda_device::to_compute;

constexpr int kReuse = 4;

// Rows are (outer, j): j runs over the broadcast dim `bd` (size 1 when positions broadcast over
// no dim), outer over the rest (params.sizes[bd] is set to 1 for the offsets of outer).
struct RopeSplit {
  int64_t bd_size = 1, bd_stride_x = 0, bd_stride_out = 0;
  int64_t chunks = 1;     // ceil(bd_size / kReuse)
  int64_t rot_slots = 0;  // packs of the rotated half
  int64_t slots = 0;      // rot_slots + packs of the copied columns
  int64_t total = 0;      // outer rows * chunks * slots
};

__device__ __forceinline__ void rotate(float a, float b, float c, float s, float& ya, float& yb) {
  ya = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  yb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}
__device__ __forceinline__ void rotate(double a, double b, double c, double s, double& ya, double& yb) {
  ya = __dsub_rn(__dmul_rn(a, c), __dmul_rn(b, s));
  yb = __dadd_rn(__dmul_rn(b, c), __dmul_rn(a, s));
}

template <typename T, int V>
__global__ void __launch_bounds__(256) rope_kernel(const __grid_constant__ RopeParams p, const RopeSplit sp) {
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();
  using A = compute_t<T>;
  using P = Pack<T, V>;
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t half = p.rotary_dim / 2, nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < sp.total; i += nthreads) {
    int64_t rest, slot, outer, chunk;
    cuda_device::divmod(i, sp.slots, rest, slot);
    cuda_device::divmod(rest, sp.chunks, outer, chunk);
    int64_t xo = 0, oo = 0, po = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      int64_t q, r;
      cuda_device::divmod(outer, p.sizes[d], q, r);
      xo += r * p.stride_x[d];
      oo += r * p.stride_out[d];
      po += r * p.stride_pos[d];
      outer = q;
    }
    const int64_t j0 = chunk * kReuse;
    const int nj = static_cast<int>(std::min<int64_t>(kReuse, sp.bd_size - j0));
    xo += j0 * sp.bd_stride_x;
    oo += j0 * sp.bd_stride_out;

    // Every load of the item (position, frequencies, kReuse rows clamped to the valid ones)
    // is issued before the first use.
    if (slot < sp.rot_slots) {
      const int64_t c = slot * V;
      const int64_t pos = p.pos_dtype == kInt64 ? static_cast<const int64_t*>(p.positions)[po]
                                                : static_cast<const int32_t*>(p.positions)[po];
      float freq[V];
#pragma unroll
      for (int e = 0; e < V; ++e) freq[e] = p.inv_freq[c + e];
      P a[kReuse], b[kReuse];
#pragma unroll
      for (int j = 0; j < kReuse; ++j) {
        const T* xr = x + xo + std::min(j, nj - 1) * sp.bd_stride_x + c;
        a[j] = *reinterpret_cast<const P*>(xr);
        b[j] = *reinterpret_cast<const P*>(xr + half);
      }
      A cs[V], sn[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float angle = static_cast<float>(pos) * freq[e];
        if constexpr (std::is_same_v<A, float>) {
          sincosf(angle, &sn[e], &cs[e]);
        } else {
          sincos(static_cast<double>(angle), &sn[e], &cs[e]);
        }
      }
#pragma unroll
      for (int j = 0; j < kReuse; ++j) {
        if (j >= nj) break;
        P ya, yb;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          A ra, rb;
          rotate(to_compute(a[j].v[e]), to_compute(b[j].v[e]), cs[e], sn[e], ra, rb);
          ya.v[e] = from_compute<T>(ra);
          yb.v[e] = from_compute<T>(rb);
        }
        *reinterpret_cast<P*>(out + oo + j * sp.bd_stride_out + c) = ya;
        *reinterpret_cast<P*>(out + oo + j * sp.bd_stride_out + c + half) = yb;
      }
    } else {
      const int64_t c = p.rotary_dim + (slot - sp.rot_slots) * V;
      P v[kReuse];
#pragma unroll
      for (int j = 0; j < kReuse; ++j)
        v[j] = *reinterpret_cast<const P*>(x + xo + std::min(j, nj - 1) * sp.bd_stride_x + c);
#pragma unroll
      for (int j = 0; j < kReuse; ++j) {
        if (j < nj) *reinterpret_cast<P*>(out + oo + j * sp.bd_stride_out + c) = v[j];
      }
    }
  }
}

template <typename T>
void launch_rope(const RopeParams& p_in, const KernelLaunch& launch) {
  constexpr int V16 = 16 / sizeof(T);
  RopeParams p = p_in;
  RopeSplit sp;
  // The broadcast dim of positions with the most rows shares its angles.
  int bd = -1;
  for (int d = 0; d < p.ndim; ++d) {
    if (p.stride_pos[d] == 0 && p.sizes[d] > 1 && (bd < 0 || p.sizes[d] > p.sizes[bd])) bd = d;
  }
  if (bd >= 0) {
    sp.bd_size = p.sizes[bd];
    sp.bd_stride_x = p.stride_x[bd];
    sp.bd_stride_out = p.stride_out[bd];
    p.sizes[bd] = 1;
  }
  const int64_t half = p.rotary_dim / 2, pass = p.head_dim - p.rotary_dim;
  bool vec = half % V16 == 0 && pass % V16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
  for (int d = 0; d < p_in.ndim; ++d) {
    if (p_in.sizes[d] > 1) vec = vec && p_in.stride_x[d] % V16 == 0 && p_in.stride_out[d] % V16 == 0;
  }
  const int V = vec ? V16 : 1;
  sp.chunks = (sp.bd_size + kReuse - 1) / kReuse;
  sp.rot_slots = half / V;
  sp.slots = sp.rot_slots + pass / V;
  sp.total = p.rows / sp.bd_size * sp.chunks * sp.slots;
  if (sp.total == 0) return;
  const unsigned grid = launch.blocks(sp.total);
  launch_pdl("[rope]", vec ? rope_kernel<T, V16> : rope_kernel<T, 1>, dim3(grid), dim3(256), 0, launch.stream(), p, sp);
}

}  // namespace

void rope(const RopeParams& p) {
  if (p.rows == 0 || p.head_dim == 0) return;
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[rope]", [&](auto tag) { launch_rope<typename decltype(tag)::type>(p, launch); });
  launch.check("[rope]");
}

}  // namespace anvil::cuda_backend
