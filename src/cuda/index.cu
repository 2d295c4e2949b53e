// index_select, gather and scatter (with and without accumulation) on CUDA. An index outside
// [0, size) is never followed: gather-like ops write 0 in its place, scatter skips it, and the
// kernel sets the sticky device-side flag that the next synchronisation turns into IndexError.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/index.h"
#include "core/kernels/attention.h"
#include "cuda/device/atomic.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::divmod;
constexpr int kThreads = KernelLaunch::kThreads;

using cuda_device::global_thread;
using cuda_device::grid_threads;

// ---- index_select: in [outer, in_dim, inner] -> out [outer, n_index, inner], moved in units
// U of up to 16 bytes (inner counted in units).
template <typename U>
__global__ void __launch_bounds__(kThreads) index_select_kernel(const U* in, U* out, const int64_t* index,
                                                                int64_t outer, int64_t in_dim, int64_t n_index,
                                                                int64_t inner, int* error) {
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();
  const int64_t n = outer * n_index * inner, stride = grid_threads();
  for (int64_t idx = global_thread(); idx < n; idx += stride) {
    int64_t t, i, o, j;
    divmod(idx, inner, t, i);
    divmod(t, n_index, o, j);
    const int64_t k = index[j];
    if (k < 0 || k >= in_dim) {
      *error = 1;
      out[idx] = U{};
      continue;
    }
    out[idx] = in[(o * in_dim + k) * inner + i];
  }
}

// ---- gather / scatter: p runs over index's shape.
struct GatherOffsets {
  int64_t self = 0;  // without the `dim` term, which comes from the index value
  int64_t index = 0;
  int64_t other = 0;  // gather: out, scatter: src
};

__device__ __forceinline__ GatherOffsets gather_offsets(const GatherParams& p, int64_t i) {
  GatherOffsets g;
  for (int d = p.ndim - 1; d >= 0; --d) {
    int64_t q = 0, r = i;
    if (d > 0) divmod(i, p.sizes[d], q, r);
    g.index += r * p.index_strides[d];
    g.other += r * p.other_strides[d];
    if (d != p.dim) g.self += r * p.self_strides[d];
    i = q;
  }
  return g;
}

template <typename U>
__global__ void __launch_bounds__(kThreads) gather_kernel(const __grid_constant__ GatherParams p, int* error) {
  const U* self = static_cast<const U*>(p.self);
  U* out = static_cast<U*>(p.out_or_src);
  const int64_t stride = grid_threads();
  for (int64_t i = global_thread(); i < p.numel; i += stride) {
    GatherOffsets g = gather_offsets(p, i);
    int64_t k = p.index[g.index];
    if (p.flat && k < 0) k += p.self_dim_size;
    if (k < 0 || k >= p.self_dim_size) {
      *error = 1;
      out[g.other] = U{};
      continue;
    }
    out[g.other] = self[g.self + k * p.self_strides[p.dim]];
  }
}

template <typename T>
struct AddFn {
  T v;
  __device__ T operator()(T old) const {
    using M = opmath_t<T>;
    bool div_by_zero = false;
    return static_cast<T>(apply_binary<M>(BinaryOp::Add, static_cast<M>(old), static_cast<M>(v), M(1), &div_by_zero));
  }
};

// Hardware atomics where they exist; complex adds its two parts separately (each is atomic
// and addition is per component, so the sum is exact to the same rounding).
template <typename T>
__device__ __forceinline__ void atomic_add(T* addr, T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    atomicAdd(addr, v);
  } else if constexpr (std::is_same_v<T, Complex64>) {
    atomicAdd(&addr->re, v.re);
    atomicAdd(&addr->im, v.im);
  } else if constexpr (sizeof(T) == 4) {
    atomicAdd(reinterpret_cast<unsigned int*>(addr), static_cast<unsigned int>(v));  // wraps as two's complement
  } else if constexpr (sizeof(T) == 8) {
    atomicAdd(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v));
  } else {
    cuda_device::atomic_update_narrow(addr, AddFn<T>{v});
  }
}

// One kernel for both scatters: plain scatter moves bits (T is an unsigned word of the element's
// size; with duplicate indices one of the writes wins, as in PyTorch), scatter_add adds atomically.
template <typename T, bool kAdd>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(const __grid_constant__ GatherParams p, T scalar, int* error) {
  T* self = static_cast<T*>(p.self);
  const T* src = static_cast<const T*>(p.out_or_src);
  const int64_t stride = grid_threads();
  for (int64_t i = global_thread(); i < p.numel; i += stride) {
    GatherOffsets g = gather_offsets(p, i);
    int64_t k = p.index[g.index];
    if (p.flat && k < 0) k += p.self_dim_size;
    if (k < 0 || k >= p.self_dim_size) {
      *error = 1;
      continue;
    }
    T* dst = self + g.self + k * p.self_strides[p.dim];
    const T v = src ? src[g.other] : scalar;
    if constexpr (kAdd) atomic_add(dst, v);
    else *dst = v;
  }
}

// The widest unit (16, 8, 4, 2 or 1 bytes) that divides a row and aligns both pointers.
int index_select_unit(const IndexSelectParams& p, size_t row_bytes) {
  for (int unit : {16, 8, 4, 2}) {
    if (row_bytes % unit == 0 && reinterpret_cast<uintptr_t>(p.in) % unit == 0 &&
        reinterpret_cast<uintptr_t>(p.out) % unit == 0)
      return unit;
  }
  return 1;
}

template <typename U>
void launch_index_select(const IndexSelectParams& p, int64_t inner_units, const KernelLaunch& launch) {
  const int64_t n = p.outer * p.n_index * inner_units;
  launch_pdl("[index_select]", index_select_kernel<U>, dim3(launch.blocks(n)), dim3(kThreads), 0, launch.stream(),
             static_cast<const U*>(p.in), static_cast<U*>(p.out), p.index, p.outer, p.in_dim, p.n_index, inner_units,
             index_error_flag());
}

// ---- bincount. Bins that fit in shared memory are counted per block there and merged into
// the output with one global atomic per non-zero bin and block; more bins go to the output
// directly. Each thread keeps a run: consecutive values of its stride that are equal add up in
// a register and reach the bins as one atomic when the value changes, so a hot bin (a mask, a
// class histogram) costs an atomic per run, not one per value. Values outside [0, bins) are
// skipped; with `range` set, the pass also flags negative values and finds max(x).
template <typename T>
__device__ __forceinline__ void bin_add(T* addr, T v) {
  if constexpr (std::is_same_v<T, int64_t>) atomicAdd(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v));
  else atomicAdd(addr, v);
}

// A: the per-bin accumulator (uint32 counts in shared memory, else the output type); W void
// counts. kShared: A bins in dynamic shared memory, else A == Out and the bins are the output.
// P: values per load, 16 bytes of counts from a 16-byte aligned x (1: element loads, weights).
template <typename I, typename W, typename A, typename Out, bool kShared, int P>
__global__ void __launch_bounds__(kThreads) bincount_kernel(const __grid_constant__ BincountParams p) {
  extern __shared__ __align__(16) unsigned char bincount_smem[];
  constexpr bool kCounts = std::is_same_v<W, void>;
  static_assert(P == 1 || (kCounts && P * sizeof(I) == 16), "packed loads take counts of 16-byte packs");
  constexpr int kUnroll = 8;  // loads in flight per thread before their values are binned
  A* bins = kShared ? reinterpret_cast<A*>(bincount_smem) : reinterpret_cast<A*>(p.out);
  if constexpr (kShared) {
    for (int b = threadIdx.x; b < p.bins; b += blockDim.x) bins[b] = A{};
    __syncthreads();
  }
  const I* x = static_cast<const I*>(p.x);
  const unsigned long long nbins = static_cast<unsigned long long>(p.bins);
  const int64_t stride = grid_threads(), np = p.n / P;  // whole packs; the tail below
  long long cur = -1, hi = 0;  // the run's value (-1: none) and the largest value seen
  bool negative = false;
  A run{};
  auto see = [&](long long v, A add) {
    negative |= v < 0;
    hi = v > hi ? v : hi;
    const bool in = static_cast<unsigned long long>(v) < nbins;
    if (in && v == cur) {
      run += add;
      return;
    }
    if (cur >= 0) bin_add(&bins[cur], run);
    cur = in ? v : -1;
    run = in ? add : A{};
  };
  union Pack {
    uint4 raw;
    I e[P];
  };
  for (int64_t i0 = global_thread(); i0 < np; i0 += kUnroll * stride) {
    Pack v[kUnroll];
    A add[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * stride;
      if constexpr (P > 1) {
        if (i < np) v[u].raw = reinterpret_cast<const uint4*>(x)[i];
      } else {
        if (i < np) v[u].e[0] = x[i];
      }
      if constexpr (kCounts) add[u] = A(1);
      else add[u] = i < np ? static_cast<A>(static_cast<const W*>(p.weights)[i]) : A{};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i0 + u * stride >= np) break;
#pragma unroll
      for (int e = 0; e < P; ++e) see(static_cast<long long>(v[u].e[e]), add[u]);
    }
  }
  if constexpr (P > 1) {  // the values past the last whole pack
    if (global_thread() == 0)
      for (int64_t i = np * P; i < p.n; ++i) see(static_cast<long long>(x[i]), A(1));
  }
  if (cur >= 0) bin_add(&bins[cur], run);
  if (p.range != nullptr) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const long long h2 = __shfl_xor_sync(0xffffffffu, hi, o);
      hi = h2 > hi ? h2 : hi;
    }
    negative = __any_sync(0xffffffffu, negative);
    if ((threadIdx.x & 31) == 0) {
      if (negative) atomicOr(reinterpret_cast<unsigned long long*>(p.range), 1ull);
      atomicMax(reinterpret_cast<long long*>(p.range) + 1, hi);
    }
  }
  if constexpr (kShared) {
    __syncthreads();
    Out* out = static_cast<Out*>(p.out);
    for (int b = threadIdx.x; b < p.bins; b += blockDim.x)
      if (bins[b] != A{}) bin_add(&out[b], static_cast<Out>(bins[b]));
  }
}

template <typename I, typename W, typename A, typename Out>
void launch_bincount(const BincountParams& p, const KernelLaunch& launch) {
  constexpr size_t kSmem = 48 * 1024;
  // >= 64 values per thread: a block's bins are zeroed and merged once per 16384 values (H200,
  // 4M int64: 19.6 us at 64 per thread, 24.5 us at 16; ncu, the kernel alone).
  const unsigned blocks = launch.blocks(p.n, 64);
  // Counts of a 16-byte aligned x load 16 bytes at a time.
  constexpr int kPack = std::is_same_v<W, void> ? 16 / sizeof(I) : 1;
  const bool packed = kPack > 1 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  const size_t smem = static_cast<size_t>(p.bins) * sizeof(A);
  if (smem <= kSmem) {
    if (packed) bincount_kernel<I, W, A, Out, true, kPack><<<blocks, kThreads, smem, launch.stream()>>>(p);
    else bincount_kernel<I, W, A, Out, true, 1><<<blocks, kThreads, smem, launch.stream()>>>(p);
  } else {
    if (packed) bincount_kernel<I, W, Out, Out, false, kPack><<<blocks, kThreads, 0, launch.stream()>>>(p);
    else bincount_kernel<I, W, Out, Out, false, 1><<<blocks, kThreads, 0, launch.stream()>>>(p);
  }
}

}  // namespace

void index_select(const IndexSelectParams& p) {
  if (p.outer == 0 || p.n_index == 0 || p.inner == 0) return;
  KernelLaunch launch(p.out);
  const size_t row_bytes = static_cast<size_t>(p.inner) * element_size(p.dtype);
  const int unit = index_select_unit(p, row_bytes);
  const int64_t inner_units = static_cast<int64_t>(row_bytes / unit);
  switch (unit) {
    case 16: launch_index_select<uint4>(p, inner_units, launch); break;
    case 8: launch_index_select<uint2>(p, inner_units, launch); break;
    case 4: launch_index_select<uint32_t>(p, inner_units, launch); break;
    case 2: launch_index_select<uint16_t>(p, inner_units, launch); break;
    default: launch_index_select<uint8_t>(p, inner_units, launch); break;
  }
  launch.check("[index_select]");
}

void gather(const GatherParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.self);
  dispatch_element_size(element_size(p.dtype), "[gather]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    gather_kernel<U><<<launch.blocks(p.numel), kThreads, 0, launch.stream()>>>(p, index_error_flag());
  });
  launch.check("[gather]");
}

void scatter(const GatherParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.self);
  if (p.accumulate) {
    dispatch_arith_types(p.dtype, "[scatter_add]", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_arith_v<T>)
        scatter_kernel<T, true><<<launch.blocks(p.numel), kThreads, 0, launch.stream()>>>(p, scalar_as<T>(p.scalar0),
                                                                                    index_error_flag());
    });
    launch.check("[scatter_add]");
    return;
  }
  // Plain scatter moves bits: the scalar is encoded on the host in the element's bit pattern.
  uint64_t bits = dispatch_all_types(p.dtype, "[scatter]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = scalar_as<T>(p.scalar0);
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
  });
  dispatch_element_size(element_size(p.dtype), "[scatter]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    scatter_kernel<U, false><<<launch.blocks(p.numel), kThreads, 0, launch.stream()>>>(p, static_cast<U>(bits),
                                                                               index_error_flag());
  });
  launch.check("[scatter]");
}

void bincount(const BincountParams& p) {
  if (p.n == 0) return;
  KernelLaunch launch(p.out);
  auto with_input = [&](auto itag) {
    using I = typename decltype(itag)::type;
    if (p.weights == nullptr) launch_bincount<I, void, unsigned int, int64_t>(p, launch);
    else if (p.out_dtype == kFloat32) launch_bincount<I, float, float, float>(p, launch);
    else launch_bincount<I, double, double, double>(p, launch);
  };
  if (p.x_dtype == kInt32) with_input(TypeTag<int32_t>{});
  else with_input(TypeTag<int64_t>{});
  launch.check("[bincount]");
}


// ---- nonzero. Count: one block per chunk (grid-stride over chunks) sums its true elements;
// one block then scans the chunk counts into exclusive offsets and the total. Fill: one block per
// chunk walks it in tiles of kThreads elements, in order: a warp ballot gives each true element
// its rank in the warp, the warps' totals its warp's offset in the tile, so the rows come out in
// row-major order without atomics.
namespace {

constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) nonzero_chunk_counts(const __grid_constant__ NonzeroParams p) {
  __shared__ int64_t warp_sum[kWarps];
  for (int64_t c = blockIdx.x; c < p.chunks; c += gridDim.x) {
    const int64_t b = c * p.chunk, e = b + p.chunk < p.n ? b + p.chunk : p.n;
    int64_t k = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kThreads) k += p.mask[i] != 0;
    for (int o = 16; o > 0; o >>= 1) k += __shfl_down_sync(0xffffffffu, k, o);
    if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = k;
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t total = 0;
      for (int w = 0; w < kWarps; ++w) total += warp_sum[w];
      p.counts[c] = total;
    }
    __syncthreads();
  }
}

// One block of kScan threads: counts[0, chunks) -> exclusive offsets, counts[chunks] = total.
constexpr int kScan = 1024;
__global__ void __launch_bounds__(kScan) nonzero_offsets(const __grid_constant__ NonzeroParams p) {
  __shared__ int64_t warp_sum[kScan / 32];
  __shared__ int64_t carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t t0 = 0; t0 < p.chunks; t0 += kScan) {
    const int64_t i = t0 + threadIdx.x;
    const int64_t v = i < p.chunks ? p.counts[i] : 0;
    int64_t incl = v;  // inclusive scan within the warp
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    if (lane == 31) warp_sum[warp] = incl;
    __syncthreads();
    int64_t before = carry;
    for (int w = 0; w < warp; ++w) before += warp_sum[w];
    if (i < p.chunks) p.counts[i] = before + incl - v;
    __syncthreads();  // every thread has read carry and warp_sum
    if (threadIdx.x == kScan - 1) carry = before + incl;
    __syncthreads();
  }
  if (threadIdx.x == 0) p.counts[p.chunks] = carry;
}

__global__ void __launch_bounds__(kThreads) nonzero_fill_kernel(const __grid_constant__ NonzeroParams p) {
  __shared__ int warp_count[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t c = blockIdx.x; c < p.chunks; c += gridDim.x) {
    const int64_t b = c * p.chunk, e = b + p.chunk < p.n ? b + p.chunk : p.n;
    int64_t base = p.counts[c];
    for (int64_t t0 = b; t0 < e; t0 += kThreads) {
      const int64_t i = t0 + threadIdx.x;
      const bool f = i < e && p.mask[i] != 0;
      const unsigned ballot = __ballot_sync(0xffffffffu, f);
      if (lane == 0) warp_count[warp] = __popc(ballot);
      __syncthreads();
      int before = 0, tile = 0;
      for (int w = 0; w < kWarps; ++w) {
        before += w < warp ? warp_count[w] : 0;
        tile += warp_count[w];
      }
      if (f) {
        int64_t* row = p.out + (base + before + __popc(ballot & ((1u << lane) - 1u))) * p.ndim;
        int64_t r = i;
        for (int d = p.ndim - 1; d >= 0; --d) {
          row[d] = r % p.sizes[d];
          r /= p.sizes[d];
        }
      }
      base += tile;
      __syncthreads();  // warp_count is rewritten by the next tile
    }
  }
}

}  // namespace

void nonzero_count(const NonzeroParams& p) {
  if (p.chunks == 0) return;
  KernelLaunch launch(p.counts);
  const unsigned blocks = static_cast<unsigned>(p.chunks < launch.max_blocks() ? p.chunks : launch.max_blocks());
  nonzero_chunk_counts<<<blocks, kThreads, 0, launch.stream()>>>(p);
  nonzero_offsets<<<1, kScan, 0, launch.stream()>>>(p);
  launch.check("[nonzero]");
}

void nonzero_fill(const NonzeroParams& p) {
  if (p.chunks == 0) return;
  KernelLaunch launch(p.counts);
  const unsigned blocks = static_cast<unsigned>(p.chunks < launch.max_blocks() ? p.chunks : launch.max_blocks());
  nonzero_fill_kernel<<<blocks, kThreads, 0, launch.stream()>>>(p);
  launch.check("[nonzero]");
}

}  // namespace anvil::cuda_backend

// ---- cache_write: one thread per unit U (up to 16 bytes) of a [batch, heads, rows] x cols row;
// the destination row comes from pos[b] on the device.
namespace anvil::cuda_backend {
namespace {

template <typename U>
__global__ void __launch_bounds__(kThreads) cache_write_kernel(const __grid_constant__ CacheWriteParams p,
                                                               int64_t units_per_row) {
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();
  const int64_t n = p.batch * p.n_heads * p.rows * units_per_row, stride = grid_threads();
  for (int64_t idx = global_thread(); idx < n; idx += stride) {
    int64_t r, c, bh, l, b, h;
    divmod(idx, units_per_row, r, c);
    divmod(r, p.rows, bh, l);
    divmod(bh, p.n_heads, b, h);
    const int64_t row = p.pos[b] + l;
    if (row < 0 || row >= p.cache_rows) continue;
    const int64_t dst = b * p.stride_cache[0] + h * p.stride_cache[1] + row * p.stride_cache[2];
    const int64_t src = b * p.stride_src[0] + h * p.stride_src[1] + l * p.stride_src[2];
    reinterpret_cast<U*>(static_cast<char*>(p.cache) + dst * p.elem_size)[c] =
        reinterpret_cast<const U*>(static_cast<const char*>(p.src) + src * p.elem_size)[c];
  }
}

}  // namespace

void cache_write(const CacheWriteParams& p) {
  if (p.batch * p.n_heads * p.rows * p.cols == 0) return;
  KernelLaunch launch(p.cache);
  // The widest unit that divides every row start and the row length.
  const int64_t row_bytes = p.cols * p.elem_size;
  auto fits = [&](int64_t u) {
    auto ok = [&](const void* base, const int64_t* s) {
      return reinterpret_cast<uintptr_t>(base) % u == 0 && (s[0] * p.elem_size) % u == 0 &&
             (s[1] * p.elem_size) % u == 0 && (s[2] * p.elem_size) % u == 0;
    };
    return row_bytes % u == 0 && ok(p.cache, p.stride_cache) && ok(p.src, p.stride_src);
  };
  const int64_t unit = fits(16) ? 16 : fits(8) ? 8 : fits(4) ? 4 : fits(2) ? 2 : 1;
  const int64_t units = row_bytes / unit, n = p.batch * p.n_heads * p.rows * units;
  const unsigned blocks = launch.blocks(n);
  auto kernel = unit == 16 ? cache_write_kernel<uint4>
                : unit == 8  ? cache_write_kernel<uint2>
                : unit == 4  ? cache_write_kernel<uint32_t>
                : unit == 2  ? cache_write_kernel<uint16_t>
                             : cache_write_kernel<uint8_t>;
  launch_pdl("[cache_write]", kernel, dim3(blocks), dim3(kThreads), 0, launch.stream(), p, units);
  launch.check("[cache_write]");
}

}  // namespace anvil::cuda_backend
