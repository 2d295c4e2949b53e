// MoE routing and combine on CUDA, never reading a value on the host.
// Routing: a warp per token computes the float32 softmax over the experts and picks the top_k by
// k rounds of a warp-wide best-of (probabilities recomputed from the logits each round, taken
// experts marked in a shared bitmask), then one block sorts the (token, slot) pairs by expert:
// per-warp histograms over contiguous segments of the pairs, an exclusive scan over warps and
// experts, and a walk of each segment in order whose in-warp ranks come from __match_any_sync,
// so the sort is stable (rows of one expert in token order) and needs no atomics in global
// memory. Up to 64 tokens (decode) everything is one block and one launch; more tokens route in a
// grid first; up to 32 (token, slot) pairs (a decode token's top 8, or four tokens') one warp
// does it all. Combine: one thread per V hidden elements of a token sums its top_k rows.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>

#include "core/dispatch.h"
#include "core/kernels.h"
#include "cuda/device/convert.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::from_compute;
using cuda_device::to_compute;

constexpr int kSortThreads = 1024;  // the sorting block: 32 warps
constexpr int kSortWarps = kSortThreads / 32;
constexpr int kMaxExperts = kSortThreads;  // one expert per thread in the scan
constexpr int64_t kFusedMaxTokens = 64;
constexpr int kRouteThreads = 256;

// The routing order: larger probability first, NaN above every number, ties by lower expert.
// e < 0 is "nothing yet".
__device__ __forceinline__ bool routes_before(float pa, int a, float pb, int b) {
  if (b < 0) return a >= 0;
  if (a < 0) return false;
  const bool na = isnan(pa), nb = isnan(pb);
  if (na != nb) return na;
  if (!na && pa != pb) return pa > pb;
  return a < b;
}

// Token t's top_k experts and weights; `taken` is this warp's bitmask of ceil(E / 32) words.
template <typename T>
__device__ void route_token(const MoeRouteParams& p, int64_t t, uint32_t* taken) {
  const int lane = threadIdx.x & 31, E = static_cast<int>(p.experts), K = static_cast<int>(p.top_k);
  const T* row = static_cast<const T*>(p.logits) + t * p.stride_row;
  float mx = -INFINITY;
  for (int e = lane; e < E; e += 32) mx = fmaxf(mx, to_compute(row[e]));
  for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  float sum = 0.f;
  for (int e = lane; e < E; e += 32) sum += expf(to_compute(row[e]) - mx);
  for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  const float inv = 1.f / sum;
  for (int w = lane; w < (E + 31) / 32; w += 32) taken[w] = 0;
  __syncwarp();
  float total = 0.f;
  for (int s = 0; s < K; ++s) {
    float best_p = 0.f;
    int best_e = -1;
    for (int e = lane; e < E; e += 32) {
      if (taken[e >> 5] & (1u << (e & 31))) continue;
      const float pe = expf(to_compute(row[e]) - mx) * inv;
      if (routes_before(pe, e, best_p, best_e)) best_p = pe, best_e = e;
    }
    for (int d = 16; d > 0; d >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, best_p, d);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, d);
      if (routes_before(op, oe, best_p, best_e)) best_p = op, best_e = oe;
    }
    total += best_p;
    if (lane == 0) {
      taken[best_e >> 5] |= 1u << (best_e & 31);
      p.weights[t * K + s] = best_p;
      p.ids[t * K + s] = best_e;
    }
    __syncwarp();
  }
  if (p.renormalize) {
    const float scale = 1.f / total;
    for (int s = lane; s < K; s += 32) p.weights[t * K + s] *= scale;
  }
}

// The stable counting sort of the tokens * top_k pairs by expert, by one block of kSortThreads.
// smem: hist [kSortWarps][E] then start [E].
__device__ void sort_pairs(const MoeRouteParams& p, int* smem) {
  using Scan = cub::BlockScan<int, kSortThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int E = static_cast<int>(p.experts), K = static_cast<int>(p.top_k);
  const int n = static_cast<int>(p.tokens * p.top_k);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int* hist = smem;
  int* start = smem + kSortWarps * E;
  for (int i = threadIdx.x; i < kSortWarps * E; i += kSortThreads) hist[i] = 0;
  __syncthreads();
  const int seg = (n + kSortWarps - 1) / kSortWarps;
  const int begin = min(n, warp * seg), end = min(n, begin + seg);
  for (int i = begin + lane; i < end; i += 32) atomicAdd(&hist[warp * E + static_cast<int>(p.ids[i])], 1);
  __syncthreads();
  // hist[w][e] becomes the number of expert-e pairs in the segments before w; count[e] the total.
  int count = 0;
  if (threadIdx.x < E) {
    for (int w = 0; w < kSortWarps; ++w) {
      const int c = hist[w * E + threadIdx.x];
      hist[w * E + threadIdx.x] = count;
      count += c;
    }
  }
  int first = 0;
  Scan(scan_storage).ExclusiveSum(count, first);
  if (threadIdx.x < E) {
    start[threadIdx.x] = first;
    p.offs[threadIdx.x] = first + count;
  }
  __syncthreads();
  // Each warp walks its segment in order; equal experts within 32 pairs rank by lane.
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    const int e = i < end ? static_cast<int>(p.ids[i]) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    int row = 0;
    if (e >= 0) row = start[e] + hist[warp * E + e] + __popc(peers & ((1u << lane) - 1));
    __syncwarp();
    if (e >= 0 && 31 - __clz(peers) == lane) hist[warp * E + e] += __popc(peers);
    __syncwarp();
    if (e >= 0) {
      p.sorted_pos[i] = row;
      p.token_index[row] = i / K;
    }
  }
}

size_t sort_smem_bytes(int64_t experts) { return sizeof(int) * static_cast<size_t>((kSortWarps + 1) * experts); }
size_t taken_words(int64_t experts) { return static_cast<size_t>((experts + 31) / 32); }

// Decode: one block routes every token (warps loop over them) and sorts.
template <typename T>
__global__ void __launch_bounds__(kSortThreads) route_fused_kernel(const __grid_constant__ MoeRouteParams p) {
  extern __shared__ int smem[];
  uint32_t* taken = reinterpret_cast<uint32_t*>(smem) + (threadIdx.x >> 5) * ((p.experts + 31) / 32);
  for (int64_t t = threadIdx.x >> 5; t < p.tokens; t += kSortWarps) route_token<T>(p, t, taken);
  __syncthreads();  // ids written by every warp are visible to the block
  sort_pairs(p, smem);
}

// Many tokens: a warp per token over the grid, then route_sort_kernel.
template <typename T>
__global__ void __launch_bounds__(kRouteThreads) route_tokens_kernel(const __grid_constant__ MoeRouteParams p) {
  extern __shared__ int smem[];
  uint32_t* taken = reinterpret_cast<uint32_t*>(smem) + (threadIdx.x >> 5) * ((p.experts + 31) / 32);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kRouteThreads / 32);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kRouteThreads / 32) + (threadIdx.x >> 5); t < p.tokens; t += warps)
    route_token<T>(p, t, taken);
}

__global__ void __launch_bounds__(kSortThreads) route_sort_kernel(const __grid_constant__ MoeRouteParams p) {
  extern __shared__ int smem[];
  sort_pairs(p, smem);
}

// Decode (tokens * top_k <= 32 pairs): one warp does everything in shared memory and registers.
// Per token the probabilities go to shared memory once; each of the top_k rounds is a lane-local
// best-of over its experts and a warp best-of, the winner's slot set to -inf; then lane i holds
// pair i's expert, its sorted row is the number of pairs before it in (expert, pair) order, and
// offs[e] counts the pairs with expert <= e.
constexpr int kWarpPairs = 32;
template <typename T>
__global__ void __launch_bounds__(32) route_warp_kernel(const __grid_constant__ MoeRouteParams p) {
  extern __shared__ float prob[];  // [experts], then counts [experts] as int
  int* counts = reinterpret_cast<int*>(prob + p.experts);
  __shared__ float sel_p[kWarpPairs];
  __shared__ int sel_e[kWarpPairs];
  const int lane = threadIdx.x, E = static_cast<int>(p.experts), K = static_cast<int>(p.top_k);
  const int n = static_cast<int>(p.tokens) * K;
  for (int t = 0; t < static_cast<int>(p.tokens); ++t) {
    const T* row = static_cast<const T*>(p.logits) + t * p.stride_row;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) {
      const float x = to_compute(row[e]);
      prob[e] = x;
      mx = fmaxf(mx, x);
    }
    for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
    float sum = 0.f;
    for (int e = lane; e < E; e += 32) sum += prob[e] = expf(prob[e] - mx);
    for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    const float inv = 1.f / sum;
    for (int e = lane; e < E; e += 32) prob[e] *= inv;
    __syncwarp();
    float total = 0.f;
    for (int s = 0; s < K; ++s) {
      float best_p = 0.f;
      int best_e = -1;
      for (int e = lane; e < E; e += 32)
        if (routes_before(prob[e], e, best_p, best_e)) best_p = prob[e], best_e = e;
      for (int d = 16; d > 0; d >>= 1) {
        const float op = __shfl_xor_sync(0xffffffffu, best_p, d);
        const int oe = __shfl_xor_sync(0xffffffffu, best_e, d);
        if (routes_before(op, oe, best_p, best_e)) best_p = op, best_e = oe;
      }
      total += best_p;
      if (lane == 0) {
        prob[best_e] = -INFINITY;  // taken: below every probability
        sel_p[t * K + s] = best_p;
        sel_e[t * K + s] = best_e;
      }
      __syncwarp();
    }
    if (lane < K) {
      const float w = sel_p[t * K + lane];
      p.weights[t * K + lane] = p.renormalize ? w * (1.f / total) : w;
      p.ids[t * K + lane] = sel_e[t * K + lane];
    }
    __syncwarp();
  }
  // Pair i (< n) on lane i; its row in (expert, pair) order.
  const int my_e = lane < n ? sel_e[lane] : INT_MAX;
  int rank = 0;
  for (int e = lane; e < E; e += 32) counts[e] = 0;
  __syncwarp();
  for (int j = 0; j < n; ++j) {
    const int ej = __shfl_sync(0xffffffffu, my_e, j);
    rank += ej < my_e || (ej == my_e && j < lane);
    for (int e = lane; e < E; e += 32) counts[e] += ej <= e;
  }
  if (lane < n) {
    p.sorted_pos[lane] = rank;
    p.token_index[rank] = lane / K;
  }
  for (int e = lane; e < E; e += 32) p.offs[e] = counts[e];
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    ANVIL_CUDA_CHECK("[moe_route]", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(bytes)));
}

template <typename T, int V>
__global__ void __launch_bounds__(256) combine_kernel(const __grid_constant__ MoeCombineParams p) {
  const int64_t t = blockIdx.x;
  const int64_t h = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * V;
  if (h >= p.hidden) return;
  const int64_t rows = p.tokens * p.top_k;
  float acc[V] = {};
  for (int64_t s = 0; s < p.top_k; ++s) {
    const float w = p.weights[t * p.top_k + s];
    const int64_t r = p.sorted_pos[t * p.top_k + s];
    const int64_t pos = r < 0 ? 0 : r >= rows ? rows - 1 : r;  // never read outside expert_out
    const T* in = static_cast<const T*>(p.in) + pos * p.stride_in_row + h;
    if constexpr (V == 1) {
      acc[0] += w * to_compute(in[0]);
    } else {
      struct alignas(16) Pack { T v[V]; };
      const Pack x = *reinterpret_cast<const Pack*>(in);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += w * to_compute(x.v[e]);
    }
  }
  T* out = static_cast<T*>(p.out) + t * p.stride_out_row + h;
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = from_compute<T>(acc[e]);
}

}  // namespace

void moe_route(const MoeRouteParams& p) {
  const char* name = "[moe_route]";
  ANVIL_CHECK(p.experts <= kMaxExperts, ShapeError, name, " the CUDA kernel routes over at most ", kMaxExperts,
              " experts, got ", p.experts);
  KernelLaunch launch(p.offs);
  dispatch_float_types(p.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      throw DTypeError("[moe_route] float64 logits are not supported on CUDA");
    } else {
      const size_t sort_bytes = sort_smem_bytes(p.experts);
      if (p.tokens * p.top_k <= kWarpPairs) {
        route_warp_kernel<T><<<1, 32, 2 * sizeof(float) * p.experts, launch.stream()>>>(p);
      } else if (p.tokens <= kFusedMaxTokens) {
        const size_t bytes = std::max(sort_bytes, sizeof(uint32_t) * kSortWarps * taken_words(p.experts));
        allow_smem(route_fused_kernel<T>, bytes);
        route_fused_kernel<T><<<1, kSortThreads, bytes, launch.stream()>>>(p);
      } else {
        const size_t taken = sizeof(uint32_t) * (kRouteThreads / 32) * taken_words(p.experts);
        const int64_t blocks = std::min<int64_t>((p.tokens + kRouteThreads / 32 - 1) / (kRouteThreads / 32),
                                                 launch.max_blocks());
        route_tokens_kernel<T><<<static_cast<unsigned>(blocks), kRouteThreads, taken, launch.stream()>>>(p);
        allow_smem(route_sort_kernel, sort_bytes);
        route_sort_kernel<<<1, kSortThreads, sort_bytes, launch.stream()>>>(p);
      }
    }
  });
  launch.check(name);
}

void moe_combine(const MoeCombineParams& p) {
  const char* name = "[moe_combine]";
  ANVIL_CHECK(p.tokens < (int64_t{1} << 31), ShapeError, name, " the CUDA kernel takes under 2^31 tokens, got ",
              p.tokens);
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const bool vec = p.hidden % V == 0 && p.stride_in_row % V == 0 && p.stride_out_row % V == 0 && aligned(p.in) &&
                     aligned(p.out);
    const int v = vec ? V : 1;
    const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.hidden + 256 * v - 1) / (256 * v)));
    if (vec) combine_kernel<T, V><<<grid, 256, 0, launch.stream()>>>(p);
    else combine_kernel<T, 1><<<grid, 256, 0, launch.stream()>>>(p);
  });
  launch.check(name);
}

}  // namespace anvil::cuda_backend
