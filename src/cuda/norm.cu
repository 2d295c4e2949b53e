// rms_norm on CUDA, plain and fused with the residual add:
//   h = round(x + residual) (written to residual_out), out = h * rsqrt(mean(h^2) + eps) * weight.
// A row is read once and kept in registers (kItems packs of 16 bytes per thread, loaded before
// the first use): up to 32 lanes of a warp take a short row (128-column per-head norms, several
// rows per warp), a block takes a long one (hidden sizes). Rows past the block's registers are
// read again for the output.
// The reduction order depends on cols alone (packs of 16 bytes, summed in a fixed order), never
// on alignment or on the residual: add_rms_norm is bit-identical to rms_norm(add(x, residual)),
// as docs/SEMANTICS.md promises. Misaligned rows load the same packs element by element.
// Compute is float32 (float64 for float64) with one rounding of the output.
#include <algorithm>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels/norm.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::compute_t;
using cuda_device::from_compute;
using cuda_device::Pack;
using cuda_device::to_compute;

constexpr int kMaxThreads = 512;
constexpr int kItems = 4;  // packs per thread per batch

// Sum over `group` threads (a power of two); every thread gets the same value. Whole-block
// groups go through shared memory, read back in a fixed order.
template <typename A>
__device__ __forceinline__ A group_sum(A v, int group, A* smem) {
  for (int off = 1; off < std::min(group, 32); off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (group > 32) {
    const int warps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < warps; ++w) v += smem[w];
    __syncthreads();
  }
  return v;
}

// Pack q (elements [q * V, q * V + V)) of a row; kVec: one 16-byte load, else element loads
// clamped to the row (the elements past cols are masked by the callers).
template <bool kVec, typename U, int V>
__device__ __forceinline__ Pack<U, V> load_pack(const U* row, int q, int cols) {
  if constexpr (kVec) {
    return reinterpret_cast<const Pack<U, V>*>(row)[q];
  } else {
    Pack<U, V> v;
    const U* src = row + q * V;
    if (q * V + V <= cols) {
#pragma unroll
      for (int e = 0; e < V; ++e) v.v[e] = src[e];
    } else {  // the last pack of a row whose cols is not a multiple of V
      const int last = cols - 1 - q * V;
#pragma unroll
      for (int e = 0; e < V; ++e) v.v[e] = src[std::min(e, last)];
    }
    return v;
  }
}

template <bool kVec, typename U, int V>
__device__ __forceinline__ void store_pack(U* row, int q, int cols, const Pack<U, V>& v) {
  if constexpr (kVec) {
    reinterpret_cast<Pack<U, V>*>(row)[q] = v;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (q * V + e < cols) row[q * V + e] = v.v[e];
    }
  }
}

// T: x / residual / out dtype, W: weight dtype (T or float32). `group` threads per row: <= 32
// (several rows per block) or blockDim.x. kInRegs: the row fits one batch (kItems packs per
// thread); the two-pass instance for longer rows is separate so it cannot spill the common one.
template <typename T, typename W, bool kVec, bool kInRegs>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_kernel(const __grid_constant__ RmsNormParams p, int group) {
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();
  using A = compute_t<T>;
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  using P = Pack<T, V>;
  using PW = Pack<W, V>;
  __shared__ A smem[kMaxThreads / 32];
  const int rows_per_block = blockDim.x / group, lane = threadIdx.x % group;
  // cols < 2^31 (checked at launch): pack indices within a row are 32-bit.
  const int cols = static_cast<int>(p.cols), packs = (cols + V - 1) / V, batch = group * kItems;
  const bool fused = p.residual != nullptr, weighted = p.weight != nullptr;
  const A eps = static_cast<A>(p.eps);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * rows_per_block;

  // `base` is uniform over the block, so every thread reaches every barrier.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < p.rows; base += stride) {
    const int64_t row = base + threadIdx.x / group;
    const bool active = row < p.rows;
    const int64_t rc = std::min(row, p.rows - 1);  // loads of inactive lanes stay in bounds
    const T* x = static_cast<const T*>(p.x) + rc * p.stride_x_row;
    const T* res = fused ? static_cast<const T*>(p.residual) + rc * p.stride_residual_row : nullptr;
    T* h_out = fused ? static_cast<T*>(p.residual_out) + rc * p.stride_residual_out_row : nullptr;
    T* out = static_cast<T*>(p.out) + rc * p.stride_out_row;

    // One batch of packs q0 + lane + i * group into h (x, or round(x + residual) stored to
    // residual_out when `store_h`); returns this thread's sum of squares over them.
    auto load_batch = [&](int q0, P(&h)[kItems], bool from_h, bool store_h) {
      const T* src = from_h ? h_out : x;
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        h[i] = load_pack<kVec, T, V>(src, std::min(q0 + lane + i * group, packs - 1), cols);
      if (fused && !from_h) {
        P r[kItems];
#pragma unroll
        for (int i = 0; i < kItems; ++i)
          r[i] = load_pack<kVec, T, V>(res, std::min(q0 + lane + i * group, packs - 1), cols);
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
#pragma unroll
          for (int e = 0; e < V; ++e) h[i].v[e] = from_compute<T>(to_compute(h[i].v[e]) + to_compute(r[i].v[e]));
          const int q = q0 + lane + i * group;
          if (store_h && active && q < packs) store_pack<kVec, T, V>(h_out, q, cols, h[i]);
        }
      }
      A sumsq = 0;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const int q = q0 + lane + i * group;
        A s = 0;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const A f = q * V + e < cols ? to_compute(h[i].v[e]) : A(0);
          s = cuda_device::fma_rn(f, f, s);
        }
        if (q < packs) sumsq += s;
      }
      return sumsq;
    };
    auto load_weights = [&](int q0, PW(&w)[kItems]) {
      if (!weighted) return;
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        w[i] = load_pack<kVec, W, V>(static_cast<const W*>(p.weight), std::min(q0 + lane + i * group, packs - 1), cols);
    };
    auto store_batch = [&](int q0, const P(&h)[kItems], const PW(&w)[kItems], A rstd) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const int q = q0 + lane + i * group;
        if (q >= packs) break;
        P y;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const A v = to_compute(h[i].v[e]) * rstd;
          y.v[e] = from_compute<T>(weighted ? v * static_cast<A>(to_compute(w[i].v[e])) : v);
        }
        store_pack<kVec, T, V>(out, q, cols, y);
      }
    };

    P h[kItems];
    PW w[kItems];
    A sumsq = 0;
    if constexpr (kInRegs) {
      sumsq = load_batch(0, h, false, true);
      if constexpr (kVec) load_weights(0, w);  // in flight across the reduction (element loads would spill)
    } else {
      for (int q0 = 0; q0 < packs; q0 += batch) sumsq += load_batch(q0, h, false, true);
    }
    sumsq = group_sum(active ? sumsq : A(0), group, smem);
    if (!active) continue;
    const A rstd = A(1) / sqrt(sumsq / static_cast<A>(p.cols) + eps);
    if constexpr (kInRegs) {
      if constexpr (!kVec) load_weights(0, w);
      store_batch(0, h, w, rstd);
    } else {
      // Second pass: this thread re-reads the h it stored itself (program order makes it visible).
      for (int q0 = 0; q0 < packs; q0 += batch) {
        load_batch(q0, h, fused, false);
        load_weights(q0, w);
        store_batch(q0, h, w, rstd);
      }
    }
  }
}

int pow2_ceil(int64_t v) {
  int r = 1;
  while (r < v && r < (1 << 30)) r <<= 1;
  return r;
}

template <typename T, typename W>
void launch_rms_norm(const RmsNormParams& p, const KernelLaunch& launch) {
  constexpr int V = 16 / sizeof(T);
  const bool fused = p.residual != nullptr;
  auto aligned = [](const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  auto stride_ok = [&](int64_t s) { return p.rows <= 1 || s % V == 0; };
  const bool vec = p.cols % V == 0 && aligned(p.x, 16) && aligned(p.out, 16) && stride_ok(p.stride_x_row) &&
                   stride_ok(p.stride_out_row) && (p.weight == nullptr || aligned(p.weight, sizeof(W) * V)) &&
                   (!fused || (aligned(p.residual, 16) && aligned(p.residual_out, 16) &&
                               stride_ok(p.stride_residual_row) && stride_ok(p.stride_residual_out_row)));
  // About kItems packs per thread: a group of lanes for short rows, a block for long ones. The
  // split depends on cols only (see the file comment).
  const int64_t packs = (p.cols + V - 1) / V;
  const int group = std::min(pow2_ceil((packs + kItems - 1) / kItems), kMaxThreads);
  const int threads = group > 32 ? group : 256;
  const int rows_per_block = threads / group;
  const int64_t blocks = std::min<int64_t>((p.rows + rows_per_block - 1) / rows_per_block, 0x7FFFFFFF);
  const dim3 grid(static_cast<unsigned>(blocks));
  const bool in_regs = packs <= int64_t{group} * kItems;
  auto kernel = vec ? (in_regs ? rms_norm_kernel<T, W, true, true> : rms_norm_kernel<T, W, true, false>)
                    : (in_regs ? rms_norm_kernel<T, W, false, true> : rms_norm_kernel<T, W, false, false>);
  launch_pdl("[rms_norm]", kernel, grid, dim3(threads), 0, launch.stream(), p, group);
}

}  // namespace

void rms_norm(const RmsNormParams& p) {
  if (p.rows == 0 || p.cols == 0) return;
  const char* name = p.residual ? "[add_rms_norm]" : "[rms_norm]";
  ANVIL_CHECK(p.cols < (int64_t{1} << 31), ShapeError, name, " the CUDA kernel takes rows of under 2^31 columns, got ",
              p.cols);
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.weight != nullptr && p.weight_dtype != p.dtype) {
      ANVIL_CHECK(p.weight_dtype == kFloat32, DTypeError, name, " weight must be ", dtype_name(p.dtype), " or float32");
      if constexpr (!std::is_same_v<T, float>) launch_rms_norm<T, float>(p, launch);
    } else {
      launch_rms_norm<T, T>(p, launch);
    }
  });
  launch.check(name);
}

// group_norm and batch norm's training forward have no CUDA kernels yet: the ops compose.
FusedPlan group_norm_plan(const GroupNormParams&) { return FusedPlan::Composed; }
void group_norm(const GroupNormParams&) { throw DeviceError("[group_norm] no fused CUDA kernel: plan is composed"); }
FusedPlan batch_norm_train_plan(const BatchNormParams&) { return FusedPlan::Composed; }
void batch_norm_train(const BatchNormParams&) {
  throw DeviceError("[batch_norm] no fused CUDA kernel: plan is composed");
}

}  // namespace anvil::cuda_backend
