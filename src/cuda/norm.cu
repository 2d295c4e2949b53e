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
#include <numeric>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels/norm.h"
#include "cuda/allocator.h"
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


// ---- group_norm and batch norm's training forward
// Both normalise segments: a batch-norm channel (the runs x[i, ch, :] of [a, c, b]) or a
// group-norm row (one run of (c / group) * hxw elements). Three kernels:
//  1. statistics: a segment is cut into chunks whose size depends on the shape alone (the same
//     bits on every run and every GPU); a block sums its chunk as shifted float64 sums
//     s1 = sum(x - x0), s2 = sum((x - x0)^2), x0 the segment's first element (so the variance
//     s2 / n - (s1 / n)^2 cancels little: no second read), in a fixed order, to scratch.
//     Channels-last batch norm (b = 1, rows of c channels) reads a pack of channels per thread
//     over a range of rows, so warps load whole rows;
//  2. a warp per segment adds its chunks in order: mean, biased variance, rstd = 1 / sqrt(var +
//     eps) in the accumulation type (float32, float64 for float64), as the CPU kernel rounds them;
//  3. y = (x - mean) * rstd * weight + bias in that type, each step rounded (no contraction,
//     as the composition's separate ops), one rounding to the storage type.
// H200, bf16 [32, 64, 56, 56] channels-last training forward: 278 us as the composition's passes.

struct SegmentNorm {
  const void* x = nullptr;
  void* y = nullptr;
  const void* weight = nullptr;  // [c] accumulation type, or null
  const void* bias = nullptr;
  void* mean = nullptr;    // batch norm: [c] accumulation type; group norm: [n * group] storage type
  void* second = nullptr;  // batch norm: biased variance; group norm: rstd
  DType dtype = kFloat32;
  int64_t a = 0, segments = 0, b = 0;                                // statistics: x as [a, segments, b]
  int64_t outer = 0, c = 0, inner = 0, channels_per_segment = 1;     // normalisation: x as [outer, c, inner]
  double eps = 0;
  BatchNormParams bn;  // batch norm: the per-channel tail's outputs (batch_norm_channel_tail)
};

template <typename A>
__device__ __forceinline__ A mul_rn(A x, A y) {
  if constexpr (std::is_same_v<A, float>) return __fmul_rn(x, y);
  else return __dmul_rn(x, y);
}
template <typename A>
__device__ __forceinline__ A add_rn(A x, A y) {
  if constexpr (std::is_same_v<A, float>) return __fadd_rn(x, y);
  else return __dadd_rn(x, y);
}

constexpr int kStatThreads = 256;

// (s1, s2) of a block in a fixed order; thread 0 gets the total.
__device__ __forceinline__ double2 block_sum2(double s1, double s2) {
  __shared__ double2 smem[kStatThreads / 32];
  for (int off = 16; off > 0; off >>= 1) {
    s1 += __shfl_down_sync(0xffffffffu, s1, off);
    s2 += __shfl_down_sync(0xffffffffu, s2, off);
  }
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = make_double2(s1, s2);
  __syncthreads();
  double2 t = make_double2(0, 0);
  if (threadIdx.x == 0)
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
      t.x += smem[w].x;
      t.y += smem[w].y;
    }
  return t;
}

// Channels-first: block = (segment, chunk) of the segment's a * b elements in [run, j] order, V
// elements per load (b % V == 0, chunk % V == 0).
template <typename T, int V, typename I>
__global__ void __launch_bounds__(kStatThreads) segment_stats_kernel(const T* __restrict__ x, double2* __restrict__ partial,
                                                                   I segments, I b, I count, I chunk, int chunks) {
  const I s = static_cast<I>(blockIdx.x / chunks), ck = static_cast<I>(blockIdx.x % chunks);
  const double x0 = static_cast<double>(to_compute(x[s * b]));
  const I q0 = ck * chunk / V, q1 = min(count, (ck + 1) * chunk) / V, bv = b / V;
  double s1 = 0, s2 = 0;
  for (I q = q0 + static_cast<I>(threadIdx.x); q < q1; q += kStatThreads) {
    const I run = q / bv, j = q - run * bv;
    const Pack<T, V> v = reinterpret_cast<const Pack<T, V>*>(x + (run * segments + s) * b)[j];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const double d = static_cast<double>(to_compute(v.v[e])) - x0;
      s1 += d;
      s2 += d * d;
    }
  }
  const double2 t = block_sum2(s1, s2);
  if (threadIdx.x == 0) partial[blockIdx.x] = t;
}

// Channels-last: x [rows, c]; block (blockIdx.x: a tile of tx packs of V channels, blockIdx.y:
// a chunk of rows), thread (threadIdx.x % tx: its pack, threadIdx.x / tx: a row lane). Partials
// [c, chunks].
template <typename T, int V, typename I>
__global__ void __launch_bounds__(kStatThreads) rows_stats_kernel(const T* __restrict__ x, double2* __restrict__ partial,
                                                                I rows, I c, I chunk_rows, int tx) {
  __shared__ double2 smem[kStatThreads * V];
  const int lane = static_cast<int>(threadIdx.x) % tx, ty = static_cast<int>(threadIdx.x) / tx, nty = kStatThreads / tx;
  const I pack = static_cast<I>(blockIdx.x) * tx + lane, cv = c / V;
  const I r0 = static_cast<I>(blockIdx.y) * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  double s1[V] = {}, s2[V] = {};
  Pack<T, V> x0{};
  if (pack < cv) {
    x0 = reinterpret_cast<const Pack<T, V>*>(x)[pack];
    for (I r = r0 + ty; r < r1; r += nty) {
      const Pack<T, V> v = reinterpret_cast<const Pack<T, V>*>(x + r * c)[pack];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const double d = static_cast<double>(to_compute(v.v[e])) - static_cast<double>(to_compute(x0.v[e]));
        s1[e] += d;
        s2[e] += d * d;
      }
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) smem[threadIdx.x * V + e] = make_double2(s1[e], s2[e]);
  __syncthreads();
  if (ty == 0 && pack < cv) {
    for (int e = 0; e < V; ++e) {
      double2 t = make_double2(0, 0);
      for (int k = 0; k < nty; ++k) {
        const double2 u = smem[(k * tx + lane) * V + e];
        t.x += u.x;
        t.y += u.y;
      }
      partial[(pack * V + e) * gridDim.y + blockIdx.y] = t;
    }
  }
}

// A warp per segment: its chunks in order, then the statistics.
template <typename T, typename A, bool kBatchNorm>
__global__ void segment_finish_kernel(const T* __restrict__ x, const double2* __restrict__ partial, A* __restrict__ stat,
                                      void* mean_out, void* second_out, int64_t segments, int64_t shift_stride,
                                      int chunks, double count, double eps, const __grid_constant__ BatchNormParams bn) {
  const int64_t s = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (s >= segments) return;  // whole warps leave together
  double s1 = 0, s2 = 0;
  for (int k = lane; k < chunks; k += 32) {
    const double2 u = partial[s * chunks + k];
    s1 += u.x;
    s2 += u.y;
  }
  for (int off = 16; off > 0; off >>= 1) {
    s1 += __shfl_down_sync(0xffffffffu, s1, off);
    s2 += __shfl_down_sync(0xffffffffu, s2, off);
  }
  if (lane != 0) return;
  const double m1 = s1 / count;
  const double mean = static_cast<double>(to_compute(x[s * shift_stride])) + m1;
  const double var = fmax(s2 / count - m1 * m1, 0.0);
  const A mean_a = static_cast<A>(mean), var_a = static_cast<A>(var);
  const A rstd = A(1) / sqrt(add_rn(var_a, static_cast<A>(eps)));
  stat[2 * s] = mean_a;
  stat[2 * s + 1] = rstd;
  if constexpr (kBatchNorm) {
    static_cast<A*>(mean_out)[s] = mean_a;
    static_cast<A*>(second_out)[s] = var_a;
    batch_norm_channel_tail<A>(bn, s, mean_a, var_a, rstd);
  } else {
    static_cast<T*>(mean_out)[s] = from_compute<T>(mean_a);
    static_cast<T*>(second_out)[s] = from_compute<T>(rstd);
  }
}

// The divisors of the normalisation's index map.
template <typename I>
struct NormDivs {
  cuda_device::IndexDiv<I> inner, c, cps, nstat;
};

// y over x [outer, c, inner]; element (o, ch, i) uses weight[ch] and statistics row
// ((o * c + ch) / cps) % nstat. kConsecutive: inner == 1, the V elements of a load are V
// channels; otherwise inner % V == 0 and they share one. kFixed (with kConsecutive, cps == 1
// and nstat == c): the grid's stride in elements is a multiple of c, so each thread sees the
// same V channels on every step and loads their parameters once.
// (v - mean) * rstd, then * weight and + bias where given, each step rounded (no contraction).
template <typename A>
__device__ __forceinline__ A normalise_value(A v, A mean, A rstd, const A* w, A wv, const A* bias, A bv) {
  A r = mul_rn(v - mean, rstd);
  if (w) r = mul_rn(r, wv);
  if (bias) r = add_rn(r, bv);
  return r;
}

template <typename T, typename A, int V, bool kConsecutive, bool kFixed, typename I>
__global__ void segment_normalize_kernel(const T* __restrict__ x, T* __restrict__ y, const A* __restrict__ stat,
                                         const A* __restrict__ w, const A* __restrict__ bias, I packs, I c, I inner, I cps,
                                         I nstat, const __grid_constant__ NormDivs<I> dv) {
  const I q0 = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x, stride = static_cast<I>(gridDim.x) * blockDim.x;
  if constexpr (kFixed) {
    A mean[V], rstd[V], wv[V], bv[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      I ch, unused;
      dv.c(q0 * V + e, unused, ch);
      mean[e] = stat[2 * ch];
      rstd[e] = stat[2 * ch + 1];
      wv[e] = w ? w[ch] : A(1);
      bv[e] = bias ? bias[ch] : A(0);
    }
    for (I q = q0; q < packs; q += stride) {
      const Pack<T, V> v = reinterpret_cast<const Pack<T, V>*>(x)[q];
      Pack<T, V> out;
#pragma unroll
      for (int e = 0; e < V; ++e)
        out.v[e] = from_compute<T>(normalise_value(static_cast<A>(to_compute(v.v[e])), mean[e], rstd[e], w, wv[e], bias, bv[e]));
      reinterpret_cast<Pack<T, V>*>(y)[q] = out;
    }
  } else {
    for (I q = q0; q < packs; q += stride) {
      const Pack<T, V> v = reinterpret_cast<const Pack<T, V>*>(x)[q];
      Pack<T, V> out;
      I lin, unused;  // o * c + ch of the first element
      dv.inner(q * V, lin, unused);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const I l = kConsecutive ? lin + e : lin;
        I ch, st, t;
        dv.c(l, t, ch);
        dv.cps(l, t, st);
        dv.nstat(t, t, st);
        out.v[e] = from_compute<T>(normalise_value(static_cast<A>(to_compute(v.v[e])), stat[2 * st], stat[2 * st + 1], w,
                                                   w ? w[ch] : A(0), bias, bias ? bias[ch] : A(0)));
      }
      reinterpret_cast<Pack<T, V>*>(y)[q] = out;
    }
  }
}

// Chunks per segment: enough blocks to fill an H200 for a large tensor, at least 2048
// elements (rows: 8 per row lane) per block; a function of the shape alone.
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, typename I>
void launch_segment_norm(const SegmentNorm& p, bool batch_norm, const KernelLaunch& launch, const char* name) {
  using A = compute_t<T>;
  constexpr int V = 16 / sizeof(T);
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  const int64_t count = p.a * p.b, total = count * p.segments;
  constexpr int64_t kTargetBlocks = 1024;
  const bool rows = p.b == 1 && p.segments > 1;

  // 1. statistics
  int64_t chunks = 1, chunk = count;
  int tx = 1;
  const bool vec_rows = rows && aligned && p.segments % V == 0;  // x [a, segments]
  const int vr = vec_rows ? V : 1;
  if (rows) {
    const int64_t cv = p.segments / vr;
    tx = static_cast<int>(std::min<int64_t>(32, pow2_ceil(cv)));
    const int64_t nty = kStatThreads / tx, tiles = ceil_div(cv, tx);
    chunk = std::max<int64_t>(8 * nty, ceil_div(ceil_div(p.a, std::max<int64_t>(1, kTargetBlocks / tiles)), nty) * nty);
    chunks = ceil_div(p.a, chunk);
  } else {
    const int64_t min_chunk = 2048;
    chunk = std::max<int64_t>(min_chunk, ceil_div(ceil_div(total, kTargetBlocks), min_chunk) * min_chunk);
    chunks = ceil_div(count, chunk);
  }
  ANVIL_CHECK(chunks < 65536 && p.segments * chunks < 0x7FFFFFFF, ShapeError, name, " too many statistics chunks (",
              p.segments, " x ", chunks, ")");
  allocator::Scratch scratch(launch.device(), sizeof(double2) * p.segments * chunks + sizeof(A) * 2 * p.segments,
                             launch.stream());
  double2* partial = static_cast<double2*>(scratch.get());
  A* stat = reinterpret_cast<A*>(partial + p.segments * chunks);
  if (rows) {
    const dim3 grid(static_cast<unsigned>(ceil_div(p.segments / vr, tx)), static_cast<unsigned>(chunks));
    auto kernel = vec_rows ? rows_stats_kernel<T, V, I> : rows_stats_kernel<T, 1, I>;
    kernel<<<grid, kStatThreads, 0, launch.stream()>>>(x, partial, static_cast<I>(p.a), static_cast<I>(p.segments),
                                                       static_cast<I>(chunk), tx);
  } else {
    const bool vec = aligned && p.b % V == 0;
    auto kernel = vec ? segment_stats_kernel<T, V, I> : segment_stats_kernel<T, 1, I>;
    kernel<<<static_cast<unsigned>(p.segments * chunks), kStatThreads, 0, launch.stream()>>>(
        x, partial, static_cast<I>(p.segments), static_cast<I>(p.b), static_cast<I>(count), static_cast<I>(chunk),
        static_cast<int>(chunks));
  }
  launch.check(name);

  // 2. per-segment statistics
  const unsigned finish_blocks = static_cast<unsigned>(ceil_div(p.segments * 32, 256));
  auto finish = batch_norm ? segment_finish_kernel<T, A, true> : segment_finish_kernel<T, A, false>;
  finish<<<finish_blocks, 256, 0, launch.stream()>>>(x, partial, stat, p.mean, p.second, p.segments, rows ? 1 : p.b,
                                                     static_cast<int>(chunks), static_cast<double>(count), p.eps, p.bn);
  launch.check(name);

  // 3. normalisation
  const A* w = static_cast<const A*>(p.weight);
  const A* bias = static_cast<const A*>(p.bias);
  const I c = static_cast<I>(p.c), inner = static_cast<I>(p.inner), cps = static_cast<I>(p.channels_per_segment);
  const I nstat = static_cast<I>(p.segments);
  using Div = cuda_device::IndexDiv<I>;
  const NormDivs<I> dv{Div(p.inner), Div(p.c), Div(p.channels_per_segment), Div(p.segments)};
  auto run = [&](auto kernel, int v, unsigned blocks) {
    const int64_t packs = total / v;
    kernel<<<blocks, KernelLaunch::kThreads, 0, launch.stream()>>>(x, y, stat, w, bias, static_cast<I>(packs), c, inner,
                                                                  cps, nstat, dv);
  };
  if (aligned && p.inner % V == 0) {
    run(segment_normalize_kernel<T, A, V, false, false, I>, V, launch.blocks(total / V));
  } else if (aligned && p.inner == 1 && p.c % V == 0) {
    // Channels-last batch norm: a grid whose stride is a multiple of c fixes each thread's channels.
    unsigned blocks = launch.blocks(total / V);
    const int64_t per_block = int64_t{KernelLaunch::kThreads} * V;
    const int64_t unit = p.c / std::gcd(p.c, per_block);  // blocks must be a multiple of this
    if (p.channels_per_segment == 1 && p.segments == p.c && unit <= blocks) {
      blocks = static_cast<unsigned>(blocks / unit * unit);
      run(segment_normalize_kernel<T, A, V, true, true, I>, V, blocks);
    } else {
      run(segment_normalize_kernel<T, A, V, true, false, I>, V, blocks);
    }
  } else {
    run(segment_normalize_kernel<T, A, 1, false, false, I>, 1, launch.blocks(total));
  }
  launch.check(name);
}

void run_segment_norm(const SegmentNorm& p, const char* name, bool batch_norm) {
  if (p.a * p.b * p.segments == 0) return;
  KernelLaunch launch(p.y);
  dispatch_float_types(p.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.a * p.b * p.segments < (int64_t{1} << 31)) launch_segment_norm<T, int32_t>(p, batch_norm, launch, name);
    else launch_segment_norm<T, int64_t>(p, batch_norm, launch, name);
  });
}

// normalize (p = 2): a block per tile of 32 * V consecutive inner positions of one outer index;
// a lane owns V consecutive positions (one packed load per channel; V > 1 only when V divides
// inner, so a lane's positions are all inside or all past the end), the block's
// warps split the channels, their partial sums of squares meet in shared memory, and each warp
// then writes its channels' quotients (the second read of x mostly hits L2). Float32 (float64)
// compute, one rounding. The first version (a thread per position looping over every channel,
// 2-byte loads) ran Wan2.2's tiled decode norms at 0.2 ms a call on the H200, a sixth of that
// decode's time.
constexpr int kL2Warps = 8;

template <typename T, int V>
__global__ void __launch_bounds__(kL2Warps * 32) l2_normalize_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                      int64_t c, int64_t inner, int64_t tiles,
                                                                      double eps) {
  using A = compute_t<T>;
  __shared__ A partial[kL2Warps][32 * V];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t o = blockIdx.x / tiles, i0 = blockIdx.x % tiles * (32 * V) + lane * V;
  const int64_t base = o * c * inner + i0;
  A ss[V] = {};
  if (i0 < inner) {
#pragma unroll 4
    for (int64_t ch = warp; ch < c; ch += kL2Warps) {
      if constexpr (V > 1) {
        const cuda_device::Pack<T, V> v = *reinterpret_cast<const cuda_device::Pack<T, V>*>(x + base + ch * inner);
#pragma unroll
        for (int k = 0; k < V; ++k) ss[k] += to_compute(v.v[k]) * to_compute(v.v[k]);
      } else {
        const A v = to_compute(x[base + ch * inner]);
        ss[0] += v * v;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) partial[warp][lane * V + k] = ss[k];
  __syncthreads();
  if (i0 >= inner) return;
  A d[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    A t = 0;
#pragma unroll
    for (int w = 0; w < kL2Warps; ++w) t += partial[w][lane * V + k];
    d[k] = max(sqrt(t), static_cast<A>(eps));
  }
#pragma unroll 4
  for (int64_t ch = warp; ch < c; ch += kL2Warps) {
    if constexpr (V > 1) {
      const cuda_device::Pack<T, V> v = *reinterpret_cast<const cuda_device::Pack<T, V>*>(x + base + ch * inner);
      cuda_device::Pack<T, V> r;
#pragma unroll
      for (int k = 0; k < V; ++k) r.v[k] = from_compute<T>(to_compute(v.v[k]) / d[k]);
      *reinterpret_cast<cuda_device::Pack<T, V>*>(y + base + ch * inner) = r;
    } else {
      y[base + ch * inner] = from_compute<T>(to_compute(x[base + ch * inner]) / d[0]);
    }
  }
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

// ---- group_norm and batch norm's training forward (see the section comment below)

FusedPlan group_norm_plan(const GroupNormParams&) { return FusedPlan::Fused; }
FusedPlan batch_norm_train_plan(const BatchNormParams&) { return FusedPlan::Fused; }
// Positions along inner coalesce; with fewer than 16 a thread's loads stride through the row.
FusedPlan l2_normalize_plan(const L2NormalizeParams& p) { return p.inner >= 16 ? FusedPlan::Fused : FusedPlan::Composed; }

void l2_normalize(const L2NormalizeParams& p) {
  if (p.outer * p.c * p.inner == 0) return;
  KernelLaunch launch(p.y);
  dispatch_float_types(p.dtype, "[normalize]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // 8-byte packs where inner and both pointers allow (every channel row then starts aligned).
    constexpr int V = sizeof(T) >= 8 ? 1 : static_cast<int>(8 / sizeof(T));
    const bool packed = V > 1 && p.inner % V == 0 && reinterpret_cast<uintptr_t>(p.x) % 8 == 0 &&
                        reinterpret_cast<uintptr_t>(p.y) % 8 == 0;
    auto run = [&](auto kernel, int64_t per_tile) {
      const int64_t tiles = (p.inner + per_tile - 1) / per_tile;
      ANVIL_CHECK(p.outer * tiles < (int64_t{1} << 31), ShapeError, "[normalize] too many positions for one launch: ",
                  p.outer, " x ", p.inner);
      kernel<<<static_cast<unsigned>(p.outer * tiles), kL2Warps * 32, 0, launch.stream()>>>(
          static_cast<const T*>(p.x), static_cast<T*>(p.y), p.c, p.inner, tiles, p.eps);
    };
    if (packed) run(l2_normalize_kernel<T, V>, 32 * V);
    else run(l2_normalize_kernel<T, 1>, 32);
  });
  launch.check("[normalize]");
}

void group_norm(const GroupNormParams& p) {
  // [n, c, hxw] as segments [1, n * group, (c / group) * hxw]; the weight's channel of element
  // (o, ch, i) of [n, c, hxw] and its statistics row (o * c + ch) / (c / group).
  SegmentNorm s;
  s.x = p.x;
  s.y = p.y;
  s.weight = p.weight;
  s.bias = p.bias;
  s.mean = p.mean;
  s.second = p.rstd;
  s.dtype = p.dtype;
  s.a = 1;
  s.segments = p.n * p.group;
  s.b = p.c / p.group * p.hxw;
  s.outer = p.n;
  s.c = p.c;
  s.inner = p.hxw;
  s.channels_per_segment = p.c / p.group;
  s.eps = p.eps;
  run_segment_norm(s, "[group_norm]", /*batch_norm=*/false);
}

void batch_norm_train(const BatchNormParams& p) {
  SegmentNorm s;
  s.x = p.x;
  s.y = p.y;
  s.weight = p.weight;
  s.bias = p.bias;
  s.mean = p.mean;
  s.second = p.var;
  s.dtype = p.dtype;
  s.a = p.a;
  s.segments = p.c;
  s.b = p.b;
  s.outer = p.a;
  s.c = p.c;
  s.inner = p.b;
  s.channels_per_segment = 1;
  s.eps = p.eps;
  s.bn = p;
  run_segment_norm(s, "[batch_norm]", /*batch_norm=*/true);
}

}  // namespace anvil::cuda_backend
