// softmax / log_softmax on CUDA over the middle dim of a contiguous [outer, dim_size, inner].
//  inner == 1, rows: a row is held in registers and read once. Short rows (<= 32 * kItems)
//    take a group of up to 32 lanes of a warp; longer rows a block, or a cluster of up to 16
//    blocks that exchange their max and then their sum through distributed shared memory. Rows
//    too long even for a cluster's registers are read three times. A few long rows (a decode
//    step's logits) instead split into parts of 2048 columns over many SMs: one kernel writes
//    each part's (max, sum), a programmatic dependent combines them and writes the part (the
//    input read twice, the second time from L2).
//  inner > 1, strided: a thread per (outer, inner) column, online (max, sum) then a second pass.
// PyTorch semantics: max-subtracted, NaN anywhere gives a NaN row, an all -inf row gives NaN,
// softmax = exp(x - max) * (1 / sum), log_softmax = (x - max) - log(sum).
// Compute is float32, float64 when the input or the output is float64.
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels/softmax.h"
#include "cuda/allocator.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/dispatch.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/reduce.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

namespace cg = cooperative_groups;
using cuda_device::from_compute;
using cuda_device::pdl_launch_dependents;
using cuda_device::pdl_wait;
using cuda_device::to_compute;

constexpr int kMaxThreads = 1024;
constexpr int kMaxCluster = 8;  // the portable cluster size on sm_90 (16 where allowed)
// Values per thread held in registers: 8 blocks of 1024 threads hold a 163840-column float row.
template <typename A>
inline constexpr int kItems = sizeof(A) == 4 ? 20 : 8;

template <typename A>
struct MaxSum {
  A m, s;  // running max, sum of exp(x - m)
};

// max that propagates NaN.
template <typename A>
__device__ __forceinline__ A max_nan(A a, A b) {
  return (a > b || a != a) ? a : b;
}

template <typename A>
__device__ __forceinline__ A exp_a(A v) {
  if constexpr (std::is_same_v<A, float>) return expf(v);
  else return exp(v);
}
template <typename A>
__device__ __forceinline__ A log_a(A v) {
  if constexpr (std::is_same_v<A, float>) return logf(v);
  else return log(v);
}

// One element into a running (max, sum). exp(-inf - m) is 0 without computing it, so a leading
// -inf cannot make the sum NaN before a finite max arrives.
template <typename A>
__device__ __forceinline__ MaxSum<A> push(MaxSum<A> acc, A x) {
  const A m = max_nan(acc.m, x);
  const A s = acc.m == m ? acc.s : acc.s * exp_a(acc.m - m);
  return {m, s + (x == -INFINITY ? A(0) : exp_a(x - m))};
}

template <typename Out, typename A>
__device__ __forceinline__ void store_at(void* out, int64_t i, A v) {
  static_cast<Out*>(out)[i] = from_compute<Out>(v);
}

// f(TypeTag<Out>) for the out dtype (checked on the host): one store loop per out dtype, chosen
// once per launch.
template <typename F>
__device__ __forceinline__ void with_out_type(DType t, F&& f) {
  cuda_device::dispatch_float_types_device(t, f);
}

// One element: the out dtype is a run-time switch at the store (uniform per launch), which keeps
// instances per (input, compute) pair instead of per (input, output) pair.
template <typename A>
__device__ __forceinline__ void store_out(void* out, DType t, int64_t i, A v) {
  with_out_type(t, [&](auto tag) { store_at<typename decltype(tag)::type>(out, i, v); });
}

template <typename A>
__device__ __forceinline__ A finish(A x, A m, A inv_sum, A log_sum, bool log) {
  return log ? (x - m) - log_sum : exp_a(x - m) * inv_sum;
}

// ---- rows (inner == 1): max first, then the sum of exp(x - max), each reduced over the row
// part's threads and then over the cluster. Every thread ends with the same value: butterflies
// are symmetric and the block and cluster steps read their partials in a fixed order.
// (H200, [1, 151936] float32: 16.5 us with one online (max, sum) reduction, where every
// combine costs two exps, on 8-block clusters; 10.6 us with this split on 16-block clusters.)
// init / combine: the reducer interface of cuda_device::block_reduce (float32 there).
struct MaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return max_nan(a, b);
  }
  __device__ float init() const { return -INFINITY; }
  __device__ float combine(float a, float b) const { return max_nan(a, b); }
};
struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
  __device__ float init() const { return 0.f; }
  __device__ float combine(float a, float b) const { return a + b; }
};

template <typename A>
struct RowShared {
  A warp_vals[kMaxThreads / 32];
  A block_val[2];  // this block's partial per phase, read by the cluster's other blocks
  A bcast;
};

template <typename A, typename Op>
__device__ __forceinline__ A row_reduce(A v, Op op, A identity, int group, int cluster, int phase, RowShared<A>& sh) {
  for (int off = 1; off < std::min(group, 32); off <<= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (group > 32) {
    const int warps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0) sh.warp_vals[threadIdx.x / 32] = v;
    __syncthreads();
    v = sh.warp_vals[0];
    for (int w = 1; w < warps; ++w) v = op(v, sh.warp_vals[w]);
    __syncthreads();
  }
  if (cluster > 1) {
    // One lane per block reads its partial, warp 0 combines, the block reads the result. A
    // block_val is rewritten only after the next cluster barrier, when every block has read it.
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) sh.block_val[phase] = v;
    cl.sync();
    if (threadIdx.x < 32) {
      A r = threadIdx.x < cluster ? *cl.map_shared_rank(&sh.block_val[phase], static_cast<int>(threadIdx.x)) : identity;
      for (int off = 1; off < 32; off <<= 1) r = op(r, __shfl_xor_sync(0xffffffffu, r, off));
      if (threadIdx.x == 0) sh.bcast = r;
    }
    __syncthreads();
    v = sh.bcast;
  }
  return v;
}

// `group` threads per row part: <= 32 lanes of a warp (several rows per block) or the whole
// block; with `cluster` > 1 the row is cut in `cluster` parts of `chunk` columns, one per block
// of a cluster. kInRegs: a part fits in kItems values per thread; else it is read three times
// (max, sum, output), a separate instance so its batches do not spill the common one. K: the
// values per thread (kItems, or 4 for rows of at most 4 x 32 columns: a short row's lanes then
// issue 4 loads, not kItems clamped ones).
template <typename In, typename A, bool kInRegs, int K = kItems<A>>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_rows_kernel(const __grid_constant__ SoftmaxParams p, int group, int cluster, int64_t chunk) {
  constexpr int B = 8;  // loads in flight per batch when the part is not in registers
  __shared__ RowShared<A> sh;
  const In* in = static_cast<const In*>(p.in);
  const int64_t dim = p.dim_size;
  const int rows_per_block = blockDim.x / group;
  const int lane = threadIdx.x % group;
  const int part = cluster > 1 ? static_cast<int>(blockIdx.x % cluster) : 0;
  const int64_t groups = static_cast<int64_t>(gridDim.x / cluster) * rows_per_block;
  const int64_t first = static_cast<int64_t>(blockIdx.x / cluster) * rows_per_block;
  const int64_t begin = part * chunk, end = std::min(dim, begin + chunk);
  const int n_local = static_cast<int>(std::min<int64_t>(end - begin, INT32_MAX));

  // `base` is uniform over the block (and cluster): every thread takes part in every barrier.
  for (int64_t base = first; base < p.outer; base += groups) {
    const int64_t row = base + threadIdx.x / group;
    const bool active = row < p.outer;
    // Loads are clamped into the part (and inactive lanes onto the last row) instead of
    // guarded, so all of a thread's loads are in flight before the first use.
    const In* src = in + std::min(row, p.outer - 1) * dim + begin;
    const int64_t off = row * dim + begin;
    // Batches of the looped path: B columns lane + (c0 + i) * group, clamped.
    auto load_batch = [&](int c0, In(&raw)[B]) {
#pragma unroll
      for (int i = 0; i < B; ++i) raw[i] = src[std::min(lane + (c0 + i) * group, n_local - 1)];
    };

    A v[K];
    A m = -INFINITY;
    if constexpr (kInRegs) {
      In raw[K];
#pragma unroll
      for (int i = 0; i < K; ++i) raw[i] = src[std::min(lane + i * group, n_local - 1)];
#pragma unroll
      for (int i = 0; i < K; ++i) {
        v[i] = active && lane + i * group < n_local ? static_cast<A>(to_compute(raw[i])) : A(-INFINITY);
        m = max_nan(m, v[i]);
      }
    } else {
      for (int c0 = 0; lane + c0 * group < n_local; c0 += B) {
        In raw[B];
        load_batch(c0, raw);
#pragma unroll
        for (int i = 0; i < B; ++i) {
          if (lane + (c0 + i) * group < n_local) m = max_nan(m, static_cast<A>(to_compute(raw[i])));
        }
      }
      if (!active) m = -INFINITY;
    }
    m = row_reduce(m, MaxOp{}, A(-INFINITY), group, cluster, 0, sh);

    // exp(-inf - m) = 0 and an all -inf row gives exp(nan) = nan, as PyTorch.
    A s = 0;
    if constexpr (kInRegs) {
#pragma unroll
      for (int i = 0; i < K; ++i) {
        const A e = lane + i * group < n_local ? exp_a(v[i] - m) : A(0);
        s += e;
        if (!p.log) v[i] = e;
      }
    } else {
      for (int c0 = 0; lane + c0 * group < n_local; c0 += B) {
        In raw[B];
        load_batch(c0, raw);
#pragma unroll
        for (int i = 0; i < B; ++i) {
          if (lane + (c0 + i) * group < n_local) s += exp_a(static_cast<A>(to_compute(raw[i])) - m);
        }
      }
    }
    s = row_reduce(active ? s : A(0), SumOp{}, A(0), group, cluster, 1, sh);

    if (active) {
      const A inv_sum = A(1) / s, log_sum = log_a(s);
      auto store_part = [&](auto out_tag) {
        using Out = typename decltype(out_tag)::type;
        Out* out = static_cast<Out*>(p.out) + off;
        if constexpr (kInRegs) {
#pragma unroll
          for (int i = 0; i < K; ++i) {
            const int c = lane + i * group;
            if (c < n_local) out[c] = from_compute<Out>(p.log ? (v[i] - m) - log_sum : v[i] * inv_sum);
          }
        } else {
          for (int c0 = 0; lane + c0 * group < n_local; c0 += B) {
            In raw[B];
            load_batch(c0, raw);
#pragma unroll
            for (int i = 0; i < B; ++i) {
              const int c = lane + (c0 + i) * group;
              const A x = static_cast<A>(to_compute(raw[i]));
              if (c < n_local) out[c] = from_compute<Out>(p.log ? (x - m) - log_sum : exp_a(x - m) * inv_sum);
            }
          }
        }
      };
      with_out_type(p.out_dtype, store_part);
    }
  }
  if (cluster > 1) cg::this_cluster().sync();  // keep block_val alive until the last remote read
}

// ---- split rows (few long rows, float32 compute): two kernels launched as programmatic
// dependents. softmax_parts_kernel: a block per (row, part of kSplitChunk columns) writes the
// part's max m_b and sum s_b of exp(x - m_b) (-inf columns add 0, so an all -inf part is
// (-inf, 0)). softmax_finish_kernel, the same grid, loads its part before waiting for the
// partials (the input is not written by the first kernel), combines them in part order into
// the row's max M and sum S = sum_b s_b exp(m_b - M) and writes its part. Where no part has a
// finite max, M = -inf makes S NaN: the all -inf row gives NaN as PyTorch.
constexpr int kSplitThreads = 256;
constexpr int kSplitItems = 8;
constexpr int kSplitChunk = kSplitThreads * kSplitItems;

// The block's max (NaN kept) or sum of v, every thread ending with it: cuda_device::block_reduce
// into thread 0, then broadcast through red[kSplitThreads / 32].
template <typename R>
__device__ __forceinline__ float block_all(float v, R r, float* red) {
  v = cuda_device::block_reduce(v, r, red);
  if (threadIdx.x == 0) red[kSplitThreads / 32] = v;
  __syncthreads();
  return red[kSplitThreads / 32];
}

// The part's columns of `row`, clamped into the row (loads in flight before the first use).
template <typename In>
__device__ __forceinline__ void load_part(const In* row, int64_t dim, int64_t begin, float (&v)[kSplitItems]) {
  In raw[kSplitItems];
#pragma unroll
  for (int i = 0; i < kSplitItems; ++i) raw[i] = row[std::min(begin + threadIdx.x + i * kSplitThreads, dim - 1)];
#pragma unroll
  for (int i = 0; i < kSplitItems; ++i)
    v[i] = begin + threadIdx.x + i * kSplitThreads < dim ? to_compute(raw[i]) : -INFINITY;
}

template <typename In>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_parts_kernel(const __grid_constant__ SoftmaxParams p, int parts, float2* partials) {
  __shared__ float red[kSplitThreads / 32 + 1];
  pdl_wait();
  pdl_launch_dependents();  // after the wait: the finishing kernel reads the input early
  const int64_t row = blockIdx.x / parts, begin = int64_t{blockIdx.x % parts} * kSplitChunk;
  float v[kSplitItems];
  load_part(static_cast<const In*>(p.in) + row * p.dim_size, p.dim_size, begin, v);
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSplitItems; ++i) m = max_nan(m, v[i]);
  m = block_all(m, MaxOp{}, red);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kSplitItems; ++i) s += v[i] == -INFINITY ? 0.f : expf(v[i] - m);
  s = block_all(s, SumOp{}, red);
  if (threadIdx.x == 0) partials[blockIdx.x] = make_float2(m, s);
}

template <typename In>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_finish_kernel(const __grid_constant__ SoftmaxParams p, int parts, const float2* partials) {
  __shared__ float red[kSplitThreads / 32 + 1];
  const int64_t row = blockIdx.x / parts, begin = int64_t{blockIdx.x % parts} * kSplitChunk;
  float v[kSplitItems];
  load_part(static_cast<const In*>(p.in) + row * p.dim_size, p.dim_size, begin, v);
  pdl_wait();
  pdl_launch_dependents();
  // Each thread combines parts t, t + 256, ... in order, then the block.
  float m = -INFINITY;
  for (int b = threadIdx.x; b < parts; b += kSplitThreads) m = max_nan(m, partials[row * parts + b].x);
  m = block_all(m, MaxOp{}, red);
  float s = 0.f;
  for (int b = threadIdx.x; b < parts; b += kSplitThreads) {
    const float2 ms = partials[row * parts + b];
    s += ms.y * expf(ms.x - m);
  }
  s = block_all(s, SumOp{}, red);
  const float inv_sum = 1.f / s, log_sum = logf(s);
  auto store_part = [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    Out* out = static_cast<Out*>(p.out) + row * p.dim_size;
#pragma unroll
    for (int i = 0; i < kSplitItems; ++i) {
      const int64_t c = begin + threadIdx.x + i * kSplitThreads;
      if (c < p.dim_size) out[c] = from_compute<Out>(p.log ? (v[i] - m) - log_sum : expf(v[i] - m) * inv_sum);
    }
  };
  with_out_type(p.out_dtype, store_part);
}

// ---- strided (inner > 1): a thread per (outer, inner) column, neighbouring threads on
// neighbouring inner indices so each step over dim is a coalesced row.
template <typename In, typename A>
__global__ void __launch_bounds__(256) softmax_strided_kernel(const __grid_constant__ SoftmaxParams p) {
  const In* in = static_cast<const In*>(p.in);
  const int64_t columns = p.outer * p.inner, nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < columns; col += nthreads) {
    int64_t o, i;
    cuda_device::divmod(col, p.inner, o, i);
    const int64_t off = o * p.dim_size * p.inner + i;
    constexpr int B = 4;  // loads in flight per batch (clamped, as in the rows kernel)
    const int64_t last = p.dim_size - 1;
    MaxSum<A> acc{-INFINITY, A(0)};
    for (int64_t j0 = 0; j0 < p.dim_size; j0 += B) {
      In raw[B];
#pragma unroll
      for (int u = 0; u < B; ++u) raw[u] = in[off + std::min(j0 + u, last) * p.inner];
#pragma unroll
      for (int u = 0; u < B; ++u) {
        if (j0 + u <= last) acc = push(acc, static_cast<A>(to_compute(raw[u])));
      }
    }
    const A inv_sum = A(1) / acc.s, log_sum = log_a(acc.s);
    for (int64_t j0 = 0; j0 < p.dim_size; j0 += B) {
      In raw[B];
#pragma unroll
      for (int u = 0; u < B; ++u) raw[u] = in[off + std::min(j0 + u, last) * p.inner];
#pragma unroll
      for (int u = 0; u < B; ++u) {
        const int64_t j = j0 + u;
        if (j <= last)
          store_out(p.out, p.out_dtype, off + j * p.inner,
                    finish(static_cast<A>(to_compute(raw[u])), acc.m, inv_sum, log_sum, p.log));
      }
    }
  }
}

// ---- launch

int pow2_ceil(int64_t v) {
  int r = 1;
  while (r < v && r < (1 << 30)) r <<= 1;
  return r;
}

// Cluster size 16 is non-portable on sm_90: allowed where the device can co-schedule such a
// cluster of 1024-thread blocks, else 8. Asked once per kernel.
template <typename Kernel>
int max_cluster_for(Kernel kernel) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    cudaGetLastError();
    return kMaxCluster;
  }
  return max_clusters(kernel, 16, kMaxThreads, 0) > 0 ? 16 : kMaxCluster;
}

// Few long rows, float32 compute: the split kernels, a part per kSplitChunk columns (H200,
// [1, 151936] float32: 75 parts).
template <typename In>
void launch_split(const SoftmaxParams& p, const KernelLaunch& launch) {
  const int parts = static_cast<int>((p.dim_size + kSplitChunk - 1) / kSplitChunk);
  const int64_t blocks = p.outer * parts;
  allocator::Scratch partials(launch.device(), static_cast<size_t>(blocks) * sizeof(float2), launch.stream());
  auto* ms = static_cast<float2*>(partials.get());
  const char* name = p.log ? "[log_softmax]" : "[softmax]";
  launch_pdl(name, softmax_parts_kernel<In>, dim3(static_cast<unsigned>(blocks)), dim3(kSplitThreads), 0,
             launch.stream(), p, parts, ms);
  launch_pdl(name, softmax_finish_kernel<In>, dim3(static_cast<unsigned>(blocks)), dim3(kSplitThreads), 0,
             launch.stream(), p, parts, static_cast<const float2*>(ms));
}

template <typename In, typename A>
void launch_rows(const SoftmaxParams& p, const KernelLaunch& launch) {
  constexpr int K = kItems<A>;
  const int64_t dim = p.dim_size;
  if constexpr (std::is_same_v<A, float>) {
    // Split when the parts of all rows fit in one wave of blocks (<= 8 per SM). H200, graph
    // replay, [1, 151936] float32: 4.2 us against 10.4 on a 16-block cluster (below).
    if (dim > 4 * kSplitChunk && p.outer * ((dim + kSplitChunk - 1) / kSplitChunk) <= 8 * launch.sm_count()) {
      launch_split<In>(p, launch);
      return;
    }
  }
  if (dim <= 32 * K) {
    // Short rows: about 4 values per lane, several rows per 256-thread block.
    const int group = std::min(32, pow2_ceil((dim + 3) / 4));
    const int rows_per_block = 256 / group;
    const int64_t blocks = std::min<int64_t>((p.outer + rows_per_block - 1) / rows_per_block, 0x7FFFFFFF);
    auto go = [&](auto kernel) { kernel<<<static_cast<unsigned>(blocks), 256, 0, launch.stream()>>>(p, group, 1, dim); };
    if (dim <= 32 * 4) go(softmax_rows_kernel<In, A, true, 4>);
    else go(softmax_rows_kernel<In, A, true>);
    return;
  }
  static const int max_cluster =
      std::min(max_cluster_for(softmax_rows_kernel<In, A, true>), max_cluster_for(softmax_rows_kernel<In, A, false>));
  // Long rows: as many parts as the registers of 1024-thread blocks need and, while the rows
  // leave SMs idle, up to one SM per ~8K columns (decode logits: [1, 151936] on 16 SMs).
  const int64_t sms = launch.sm_count();
  int64_t parts = (dim + int64_t{kMaxThreads} * K - 1) / (int64_t{kMaxThreads} * K);
  parts = std::max(parts, std::min((dim + 8191) / 8192, sms / std::max<int64_t>(p.outer, 1)));
  const int cluster = static_cast<int>(std::clamp<int64_t>(parts, 1, max_cluster));
  const int64_t chunk = (dim + cluster - 1) / cluster;
  // ~8 values per thread for latency (few rows), ~16 for throughput (many rows), up to K.
  const int per_thread = p.outer < sms ? 8 : 16;
  const int threads = std::clamp(pow2_ceil((chunk + per_thread - 1) / per_thread), 64, kMaxThreads);
  const bool in_regs = chunk <= int64_t{threads} * K;
  const int64_t rows = std::min<int64_t>(p.outer, 0x7FFFFFFF / cluster);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows * cluster));
  cfg.blockDim = dim3(threads);
  cfg.stream = launch.stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 1 : 0;
  auto kernel = in_regs ? softmax_rows_kernel<In, A, true> : softmax_rows_kernel<In, A, false>;
  ANVIL_CUDA_CHECK("[softmax]", cudaLaunchKernelEx(&cfg, kernel, p, threads, cluster, chunk));
}

template <typename In, typename A>
void launch_softmax(const SoftmaxParams& p, const KernelLaunch& launch) {
  if (p.inner == 1) {
    launch_rows<In, A>(p, launch);
  } else {
    softmax_strided_kernel<In, A><<<launch.blocks(p.outer * p.inner), KernelLaunch::kThreads, 0, launch.stream()>>>(p);
  }
}

}  // namespace

void softmax(const SoftmaxParams& p) {
  if (p.outer == 0 || p.dim_size == 0 || p.inner == 0) return;
  const char* name = p.log ? "[log_softmax]" : "[softmax]";
  KernelLaunch launch(p.out);
  dispatch_float_types(p.out_dtype, name, [](auto) {});
  const bool wide = p.in_dtype == kFloat64 || p.out_dtype == kFloat64;
  dispatch_float_types(p.in_dtype, name, [&](auto tag) {
    using In = typename decltype(tag)::type;
    if (wide) launch_softmax<In, double>(p, launch);
    else if constexpr (!std::is_same_v<In, double>) launch_softmax<In, float>(p, launch);
  });
  launch.check(name);
}

}  // namespace anvil::cuda_backend
