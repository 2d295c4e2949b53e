// MoE routing and combine on CUDA, never reading a value on the host.
// Routing: a warp per token computes the float32 softmax over the experts and picks the top_k by
// k rounds of a warp-wide best-of (probabilities recomputed from the logits each round, taken
// experts marked in a shared bitmask), then one block sorts the (token, slot) pairs by expert:
// per-warp histograms over contiguous segments of the pairs, an exclusive scan over warps and
// experts, and a walk of each segment in order whose in-warp ranks come from __match_any_sync,
// so the sort is stable (rows of one expert in token order) and needs no atomics in global
// memory. Up to 64 tokens (decode) everything is one block and one launch; more tokens route in a
// grid first; up to 32 (token, slot) pairs (four tokens' top 8) one warp does it all, and one
// token's routing is one warp holding the probabilities in registers (keys for redux max / min).
// Combine: one thread per V hidden elements of a token sums its top_k rows.
// Fused experts (decode, few (token, slot) pairs; see MoeExpertsParams): two GEMV kernels over
// the pairs' own expert rows, no gather or sort. gate_up: a block per (pair, 4R intermediate
// columns) = R tiles of 8 weight rows (4 gate, 4 up) as the n = 8 side of mma.sync m16n8k16,
// warps split k, every load of a warp issued before the first mma; the epilogue rounds g and u
// and writes silu(g) * u. down: a block per (token, 8 hidden rows), P warps per slot stream that
// slot's expert rows over inter; each slot's product is summed and rounded, then the slots are
// summed in order (the combine). Both are launched with programmatic dependent launch; so is
// routing.
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>

#include "core/align.h"
#include "core/dispatch.h"
#include "core/kernels/moe.h"
#include "core/fp8_blocks.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/device/moe_route.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

namespace cg = cooperative_groups;

using cuda_device::from_compute;
using cuda_device::load_cached16;
using cuda_device::load_stream16;
using cuda_device::mma_chunk;
using cuda_device::pdl_launch_dependents;
using cuda_device::pdl_wait;
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

// The warp's best (probability, expert) in routing order; every lane ends with it.
__device__ __forceinline__ void warp_best(float& best_p, int& best_e) {
  for (int d = 16; d > 0; d >>= 1) {
    const float op = __shfl_xor_sync(0xffffffffu, best_p, d);
    const int oe = __shfl_xor_sync(0xffffffffu, best_e, d);
    if (routes_before(op, oe, best_p, best_e)) best_p = op, best_e = oe;
  }
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
    warp_best(best_p, best_e);
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

// One decode token (experts <= 32 P): a single warp (warp_top_k, cuda/device/moe_route.cuh). A
// chosen expert's sorted row is the number of chosen experts below it: a prefix over the lanes of
// their chosen counts, which also gives offs.
// One warp routes the token whose logits are `logits` (global or shared memory).
template <typename T, int P>
__device__ __forceinline__ void route_token(const MoeRouteParams& p, const T* logits) {
  const int lane = threadIdx.x % 32, E = static_cast<int>(p.experts), K = static_cast<int>(p.top_k);
  float prob[P];
  int slot[P];
  const float scale = cuda_device::warp_top_k<P>(E, K, [&](int e) { return to_compute(logits[e]); }, prob, slot);
  int chosen = 0;
#pragma unroll
  for (int j = 0; j < P; ++j) chosen += slot[j] >= 0;
  int below = chosen;  // inclusive prefix over lanes, then exclusive
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, below, d);
    if (lane >= d) below += o;
  }
  below -= chosen;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int e = lane * P + j;
    if (e >= E) break;
    if (slot[j] >= 0) {
      const int s = slot[j];
      p.weights[s] = p.renormalize ? prob[j] * scale : prob[j];
      p.ids[s] = e;
      p.sorted_pos[s] = below;
      p.token_index[below] = 0;
      ++below;
    }
    p.offs[e] = below;
  }
}

template <typename T, int P>
__global__ void __launch_bounds__(32) route_single_kernel(const __grid_constant__ MoeRouteParams p) {
  pdl_launch_dependents();
  pdl_wait();
  route_token<T, P>(p, static_cast<const T*>(p.logits));
}

// moe_router, one token: a cluster of kRouterBlocks blocks, a warp per expert row (rows
// rank * kRouterWarps + warp + k * kRouterBlocks * kRouterWarps). A lane streams 16-byte packs of
// its row; the first kRouterPre of its first row are loaded before pdl_wait (the router weight is
// a constant, not an earlier kernel's output), so the weight fetch overlaps the previous kernel.
// Each logit is rounded to T, stored, and written into block 0's shared memory (distributed
// shared memory, once the cluster's blocks have all started); after the cluster barrier block 0's
// first warp routes them.
constexpr int kRouterBlocks = 8, kRouterWarps = 16, kRouterPre = 8;

template <typename T>
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const T* x = reinterpret_cast<const T*>(&a);
  const T* y = reinterpret_cast<const T*>(&b);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) s = fmaf(to_compute(x[e]), to_compute(y[e]), s);
  return s;
}

template <typename T, int P>
__global__ void __cluster_dims__(kRouterBlocks, 1, 1) __launch_bounds__(kRouterWarps * 32)
    router_kernel(const __grid_constant__ MoeRouterParams p) {
  __shared__ T logits_sh[32 * P];
  pdl_launch_dependents();
  cg::cluster_group cl = cg::this_cluster();
  // Block 0's shared memory may be written only once block 0 runs: every block arrives now and
  // waits just before its first write, so the weight prefetch is not held up.
  cg::cluster_group::arrival_token started = cl.barrier_arrive();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t E = p.route.experts, packs = p.hidden_size / 8;
  const int64_t first = static_cast<int64_t>(cl.block_rank()) * kRouterWarps + warp,
                step = int64_t{kRouterBlocks} * kRouterWarps;
  const uint4* w_first = static_cast<const uint4*>(p.weight) + std::min(first, E - 1) * (p.stride_w_row / 8);
  uint4 pre[kRouterPre];
#pragma unroll
  for (int i = 0; i < kRouterPre; ++i) {
    const int64_t q = lane + 32 * i;
    pre[i] = q < packs ? load_stream16(w_first + q) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();
  const uint4* x = static_cast<const uint4*>(p.hidden);
  T* shared0 = cl.map_shared_rank(logits_sh, 0);
  cl.barrier_wait(std::move(started));
  for (int64_t row = first; row < E; row += step) {
    const uint4* w = static_cast<const uint4*>(p.weight) + row * (p.stride_w_row / 8);
    float acc = 0.f;
    for (int64_t q0 = 0; q0 < packs; q0 += 32 * kRouterPre) {
      uint4 wv[kRouterPre], xv[kRouterPre];
#pragma unroll
      for (int i = 0; i < kRouterPre; ++i) {
        const int64_t q = q0 + lane + 32 * i;
        wv[i] = row == first && q0 == 0 ? pre[i] : q < packs ? load_stream16(w + q) : make_uint4(0, 0, 0, 0);
        xv[i] = q < packs ? load_cached16(x + q) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kRouterPre; ++i) acc += dot8<T>(wv[i], xv[i]);
    }
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) {
      const T v = from_compute<T>(acc);
      static_cast<T*>(p.logits)[row] = v;
      shared0[row] = v;
    }
  }
  cl.sync();  // every logit is in block 0's shared memory
  if (cl.block_rank() == 0 && warp == 0) route_token<T, P>(p.route, logits_sh);
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
  pdl_launch_dependents();
  pdl_wait();
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
      warp_best(best_p, best_e);
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
  pdl_launch_dependents();
  pdl_wait();
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

// ---- fused experts

constexpr int kExpertWarps = 8;

// acc[r] (lane (g, t): d[0], d[1] = dot of x with rows 2t, 2t + 1 of weight tile r) += the dot
// of x[0, k) with row g of tile r (w[r]) over the 4V-column chunks of the groups of U chunks c0,
// c0 + stride, ... (a warp's U loads of a step read U x 64 contiguous bytes of a row); lane t
// holds columns [4V c + V t, + V) with V = 16 / sizeof(W); U chunks x R rows of loads per lane in
// flight, all issued before the first mma. k % V == 0, so a lane's columns are all inside k or
// all past it (zeros).
// Blocked: each chunk's products are summed apart and added times the block scale of the lane's
// weight rows 2t, 2t + 1 (one block: srow[r] is their row of the scale grid; a 4V-column chunk
// lies inside one block of 2^shift chunks; `shared`: every tile's rows in the same block).
template <typename A, typename W, int R, int U, bool Blocked = false>
__device__ __forceinline__ void stream_dot(float (&acc)[R][4], const char* const (&w)[R], const char* x, int64_t k,
                                           int c0, int stride, const float* const (&srow)[R], int shift = 0,
                                           int64_t last_block = 0, bool shared = false) {
  constexpr int V = 16 / sizeof(W), XV = V * sizeof(A) / 16;
  const int t = threadIdx.x % 4;
  const int64_t chunks = (k + 4 * V - 1) / (4 * V);
  for (int64_t c = int64_t{c0} * U; c < chunks; c += int64_t{stride} * U) {
    // Chunks c .. c + U - 1 are 64 contiguous bytes of the row apart: one base, immediate offsets.
    const int64_t q0 = c * 4 * V + t * V;
    uint4 wv[U][R], xv[U][XV];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r)
        wv[u][r] = q0 + u * 4 * V < k ? load_stream16(w[r] + q0 * int64_t{sizeof(W)} + 64 * u) : make_uint4(0, 0, 0, 0);
    }
    const char* xq = x + q0 * int64_t{sizeof(A)};
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int v = 0; v < XV; ++v)
        xv[u][v] = q0 + u * 4 * V < k ? load_cached16(xq + (4 * V * sizeof(A)) * u + 16 * v) : make_uint4(0, 0, 0, 0);
    }
    // Block scales: one per block of this step's chunks, loaded for (and added at) the block's
    // last chunk here (ends[u]), so a block's chunks share one load and one FMA pair.
    float sc[Blocked ? U : 1][R];
    bool ends[Blocked ? U : 1];
    if constexpr (Blocked) {
      int64_t kb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) kb[u] = std::min((c + u) >> shift, last_block);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        ends[u] = u == U - 1 || kb[u + (u < U - 1 ? 1 : 0)] != kb[u];
        if (ends[u]) {
          sc[u][0] = __ldg(srow[0] + kb[u]);
#pragma unroll
          for (int r = 1; r < R; ++r) sc[u][r] = shared ? sc[u][0] : __ldg(srow[r] + kb[u]);
        }
      }
    }
    __syncwarp();  // mma.sync is warp-collective: reconverge after the per-lane loads
    float part[Blocked ? R : 1][4] = {};
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) mma_chunk<A, W>(Blocked ? part[Blocked ? r : 0] : acc[r], wv[u][r], xv[u], xv[u]);
      if constexpr (Blocked) {
        if (ends[u]) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            acc[r][0] = fmaf(part[r][0], sc[u][r], acc[r][0]);
            acc[r][1] = fmaf(part[r][1], sc[u][r], acc[r][1]);
            part[r][0] = part[r][1] = part[r][2] = part[r][3] = 0.f;
          }
        }
      }
    }
  }
}

__device__ __forceinline__ int64_t expert_of(const MoeExpertsParams& p, int64_t pair) {
  const int64_t e = p.ids[pair];
  return e < 0 ? 0 : e >= p.experts ? p.experts - 1 : e;
}

// A block per (pair, 4R intermediate columns): R tiles of 8 weight rows (4 gate rows, then the 4
// up rows of the same columns), warps splitting k.
template <typename A, typename W, int R, int U, bool Blocked>
__global__ void __launch_bounds__(kExpertWarps * 32) experts_gate_up_kernel(const __grid_constant__ MoeExpertsParams p) {
  __shared__ float partial[kExpertWarps][R][8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t tiles = (p.inter + 4 * R - 1) / (4 * R), pair = blockIdx.x / tiles, c0 = (blockIdx.x % tiles) * 4 * R;
  pdl_launch_dependents();
  pdl_wait();
  const int64_t e = expert_of(p, pair);
  // The epilogue's float8 scales, loaded now so their latency hides behind the weight stream.
  const int64_t i = c0 + threadIdx.x;
  float gs = 1.f, us = 1.f;
  if (p.gate_up_scale && threadIdx.x < 4 * R && i < p.inter) {
    gs = p.gate_up_scale[e * 2 * p.inter + i];
    us = p.gate_up_scale[e * 2 * p.inter + p.inter + i];
  }
  const char* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t col = std::min(c0 + 4 * r + (g & 3), p.inter - 1), row = g < 4 ? col : p.inter + col;
    w[r] = static_cast<const char*>(p.gate_up) + (e * p.stride_gu_expert + row * p.stride_gu_row) * int64_t{sizeof(W)};
  }
  const char* x = static_cast<const char*>(p.hidden) + pair / p.top_k * p.stride_hidden_row * int64_t{sizeof(A)};
  // Block scales: lane (g, t) sums weight rows 2t, 2t + 1 of each tile, gate rows for t < 2 and
  // up rows after (4 columns of one block: block_n % 8 == 0, inter % 4 == 0).
  const float* srow[R] = {};
  int shift = 0;
  int64_t last_block = 0;
  if constexpr (Blocked) {
    const BlockScale& b = p.gate_up_block;
    shift = fp8_block_shift(b.block_k);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t col = std::min(c0 + 4 * r, p.inter - 1), row = t < 2 ? col : p.inter + col;
      srow[r] = b.scale + e * b.stride_expert + row / b.block_n * b.stride_row;
    }
    last_block = (p.hidden_size - 1) / b.block_k;
  }
  float acc[R][4] = {};
  // The R tiles' 4R columns (c0 % 8 == 0) share a block when inter % 8 == 0 too: one load.
  stream_dot<A, W, R, U, Blocked>(acc, w, x, p.hidden_size, warp, kExpertWarps, srow, shift, last_block,
                                  p.inter % 8 == 0);
  if (g == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      partial[warp][r][2 * t] = acc[r][0];
      partial[warp][r][2 * t + 1] = acc[r][1];
    }
  }
  __syncthreads();
  if (threadIdx.x >= 4 * R || i >= p.inter) return;
  const int r = threadIdx.x / 4, j = threadIdx.x % 4;
  float gv = 0.f, uv = 0.f;
#pragma unroll
  for (int wi = 0; wi < kExpertWarps; ++wi) {
    gv += partial[wi][r][j];
    uv += partial[wi][r][4 + j];
  }
  gv = to_compute(from_compute<A>(gv * gs));  // the composition's gate_up output, then silu_mul's
  uv = to_compute(from_compute<A>(uv * us));
  static_cast<A*>(p.act)[pair * p.inter + i] = from_compute<A>(gv / (1.f + expf(-gv)) * uv);
}

// A block per (token, 8 hidden rows): warp w streams slot w / P's expert rows over the groups of
// U (<= kDownLoads) k-chunks w % P, w % P + P, ... (P warps per slot, blockDim = 32 top_k P); each
// slot's product is summed over its P warps in order and rounded, then the slots are combined in
// order. The first warp of a slot copies the slot's routing weight and float8 scales into shared
// memory (cp.async) before its weight stream, so the epilogue reads only shared memory. Two
// blocks per SM of up to kDownThreads threads at 64 registers, each lane with up to kDownLoads
// loads in flight per step (H200, Qwen3-30B-A3B's 8 experts 768 -> 2048, bf16 25 MB: 12.5 us);
// one block of 1024 threads (one warp per slot) past it. (The measurements: docs/PERFORMANCE.md,
// "CUDA scaled_mm GEMV and fused experts: launcher rules".)
constexpr int kDownThreads = 512;
constexpr int kDownLoads = 4;
template <typename A, typename W, int kMaxThreads, int U, bool Blocked>
__global__ void __launch_bounds__(kMaxThreads, kMaxThreads <= kDownThreads ? 2 : 1)
    experts_down_kernel(const __grid_constant__ MoeExpertsParams p, int P) {
  __shared__ float partial[32][8], slot_weight[kMoeExpertsMaxTopK], slot_scale[kMoeExpertsMaxTopK][8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t tiles = (p.hidden_size + 7) / 8, tok = blockIdx.x / tiles, j0 = (blockIdx.x % tiles) * 8;
  pdl_launch_dependents();
  pdl_wait();
  const int s = warp / P;
  const int64_t pair = tok * p.top_k + s, e = expert_of(p, pair);
  const int64_t j = std::min(j0 + g, p.hidden_size - 1);
  if (warp % P == 0 && lane < 8) {  // straight into shared memory: no registers held over the stream
    if (p.down_scale)
      cuda_device::cp_async4(cuda_device::smem_u32(&slot_scale[s][lane]),
                             p.down_scale + e * p.hidden_size + std::min(j0 + lane, p.hidden_size - 1));
    else
      slot_scale[s][lane] = 1.f;
    if (lane == 0) cuda_device::cp_async4(cuda_device::smem_u32(&slot_weight[s]), p.weights + pair);
  }
  cuda_device::cp_async_commit();
  const char* const w[1] = {static_cast<const char*>(p.down) + (e * p.stride_down_expert + j * p.stride_down_row) * int64_t{sizeof(W)}};
  const char* x = static_cast<const char*>(p.act) + pair * p.inter * int64_t{sizeof(A)};
  const float* srow[1] = {};
  int shift = 0;
  int64_t last_block = 0;
  if constexpr (Blocked) {  // the tile's 8 rows in one block (block_n % 8 == 0)
    const BlockScale& b = p.down_block;
    shift = fp8_block_shift(b.block_k);
    srow[0] = b.scale + e * b.stride_expert + j0 / b.block_n * b.stride_row;
    last_block = (p.inter - 1) / b.block_k;
  }
  float acc[1][4] = {};
  stream_dot<A, W, 1, U, Blocked>(acc, w, x, p.inter, warp % P, P, srow, shift, last_block);
  if (g == 0) {
    partial[warp][2 * t] = acc[0][0];
    partial[warp][2 * t + 1] = acc[0][1];
  }
  cuda_device::cp_async_wait<0>();
  __syncthreads();
  if (threadIdx.x >= 8 || j0 + threadIdx.x >= p.hidden_size) return;
  const int64_t jj = j0 + threadIdx.x;
  float out = 0.f;  // moe_combine's sum: float32, slots in order
  for (int si = 0; si < p.top_k; ++si) {
    float y = 0.f;
    for (int sp = 0; sp < P; ++sp) y += partial[si * P + sp][threadIdx.x];
    y *= slot_scale[si][threadIdx.x];
    out += slot_weight[si] * to_compute(from_compute<A>(y));  // the composition's down output
  }
  static_cast<A*>(p.out)[tok * p.stride_out_row + jj] = from_compute<A>(out);
}

template <typename A, typename W, bool Blocked>
void launch_experts(const MoeExpertsParams& p, const KernelLaunch& launch) {
  const char* op = "[moe_experts]";
  // gate_up tiles and loads per lane per step, H200, Qwen3-30B-A3B's experts (H 2048, graph replay
  // of the whole block, us for R tiles x U loads): bf16 weights 1 x 2 30.9, 1 x 4 31.0, 2 x 4
  // 33.0, 1 x 8 35.2 (fewer loads in flight per lane, more resident blocks); float8 2 x 4 23.7,
  // 1 x 2 24.5, 1 x 4 25.5, 1 x 8 31.9.
  constexpr int R = sizeof(W) == 1 ? 2 : 1, U = sizeof(W) == 1 ? 4 : 2;
  constexpr int64_t kChunkCols = 64 / sizeof(W);
  const int64_t up_blocks = p.tokens * p.top_k * ((p.inter + 4 * R - 1) / (4 * R));
  const int64_t down_blocks = p.tokens * ((p.hidden_size + 7) / 8);
  ANVIL_CHECK(up_blocks <= INT_MAX && down_blocks <= INT_MAX, ShapeError, op, " ", p.tokens, " tokens x ",
              p.hidden_size, " x ", p.inter, " are too large for the fused CUDA kernels");
  launch_pdl(op, experts_gate_up_kernel<A, W, R, U, Blocked>, dim3(static_cast<unsigned>(up_blocks)), dim3(kExpertWarps * 32), 0,
             launch.stream(), p);
  // Warps per slot: enough that each warp's share of inter is two steps of loads, within
  // kDownThreads (one warp per slot past it).
  const int64_t chunks = (p.inter + kChunkCols - 1) / kChunkCols;
  const int64_t most = std::max<int64_t>(1, kDownThreads / 32 / p.top_k);
  const int P = static_cast<int>(std::clamp<int64_t>((chunks + kDownLoads - 1) / kDownLoads, 1, most));
  // Loads per step balanced over a warp's steps (fp8 768 -> 2048: 12 chunks, 2 warps per slot
  // take 2 steps of 3 rather than 4 + 4 and 4 + 0). H200, Qwen3-30B-A3B fp8: experts block 23.9
  // -> 23.5-23.9 us, tg128 369-370 -> 372-374 tok/s; 6 or 12 loads in one step: 23.6 / 24.9 us.
  const int64_t steps = (chunks + int64_t{P} * kDownLoads - 1) / (int64_t{P} * kDownLoads);
  const int64_t down_u = std::clamp<int64_t>((chunks + P * steps - 1) / (P * steps), 2, kDownLoads);
  const dim3 down_grid(static_cast<unsigned>(down_blocks)), block(static_cast<unsigned>(32 * p.top_k * P));
  if (block.x <= kDownThreads && down_u == 2)
    launch_pdl(op, experts_down_kernel<A, W, kDownThreads, 2, Blocked>, down_grid, block, 0, launch.stream(), p, P);
  else if (block.x <= kDownThreads && down_u == 3)
    launch_pdl(op, experts_down_kernel<A, W, kDownThreads, 3, Blocked>, down_grid, block, 0, launch.stream(), p, P);
  else if (block.x <= kDownThreads)
    launch_pdl(op, experts_down_kernel<A, W, kDownThreads, kDownLoads, Blocked>, down_grid, block, 0, launch.stream(), p, P);
  else
    launch_pdl(op, experts_down_kernel<A, W, 1024, kDownLoads, Blocked>, down_grid, block, 0, launch.stream(), p, P);
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
      if (p.tokens == 1) {
        auto kernel = p.experts <= 32 * 4    ? route_single_kernel<T, 4>
                      : p.experts <= 32 * 8  ? route_single_kernel<T, 8>
                      : p.experts <= 32 * 16 ? route_single_kernel<T, 16>
                                             : route_single_kernel<T, 32>;
        launch_pdl(name, kernel, dim3(1), dim3(32), 0, launch.stream(), p);
      } else if (p.tokens * p.top_k <= kWarpPairs) {
        launch_pdl(name, route_warp_kernel<T>, dim3(1), dim3(32), 2 * sizeof(float) * p.experts, launch.stream(), p);
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

// Fused: bfloat16 / float16 rows of 16-byte packs, 16-byte aligned, and at most 1024 experts (the
// routing warp's registers).
FusedPlan moe_router_plan(const MoeRouterParams& p) {
  const DType t = p.route.dtype;
  const bool takes = (t == kBFloat16 || t == kFloat16) && p.route.experts <= 32 * 32 && p.hidden_size % 8 == 0 &&
                     p.stride_w_row % 8 == 0 && aligned16(p.hidden) && aligned16(p.weight);
  return takes ? FusedPlan::Fused : FusedPlan::Composed;
}

void moe_router(const MoeRouterParams& p) {
  const char* name = "[moe_router]";
  ANVIL_CHECK(moe_router_plan(p) == FusedPlan::Fused, Error, name,
              " the params are outside the fused CUDA kernel's plan (the op composes them)");
  KernelLaunch launch(p.logits);
  dispatch_half_types(p.route.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t E = p.route.experts;
    auto kernel = E <= 32 * 4 ? router_kernel<T, 4> : E <= 32 * 8 ? router_kernel<T, 8>
                                                : E <= 32 * 16 ? router_kernel<T, 16> : router_kernel<T, 32>;
    launch_pdl(name, kernel, dim3(kRouterBlocks), dim3(kRouterWarps * 32), 0, launch.stream(), p);
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
    const bool vec = p.hidden % V == 0 && p.stride_in_row % V == 0 && p.stride_out_row % V == 0 && aligned16(p.in) &&
                     aligned16(p.out);
    const int v = vec ? V : 1;
    const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.hidden + 256 * v - 1) / (256 * v)));
    if (vec) launch_pdl(name, combine_kernel<T, V>, grid, dim3(256), 0, launch.stream(), p);
    else launch_pdl(name, combine_kernel<T, 1>, grid, dim3(256), 0, launch.stream(), p);
  });
  launch.check(name);
}

// Fused: decode's few pairs (kMoeExpertsMaxPairs, kMoeExpertsMaxTopK: the down kernel's per-slot
// partials), bfloat16 / float16 activations with weights of their dtype or float8 (block scales
// as moe_experts_block_ok takes), and rows of whole 16-byte loads, 16-byte aligned.
FusedPlan moe_experts_plan(const MoeExpertsParams& p) {
  const bool a16 = p.dtype == kBFloat16 || p.dtype == kFloat16;
  const bool weights = p.w_dtype == p.dtype || p.w_dtype == kFloat8_e4m3fn || p.w_dtype == kFloat8_e5m2;
  const BlockScale& b = p.gate_up_block;
  const bool blocks = b.scale == nullptr || moe_experts_block_ok(p.w_dtype, b.block_n, b.block_k, p.inter);
  const int64_t w = static_cast<int64_t>(element_size(p.w_dtype)), a = static_cast<int64_t>(element_size(p.dtype));
  const int64_t per_load = 16 / w;
  const bool rows16 = p.hidden_size % per_load == 0 && p.inter % per_load == 0 && aligned16(p.hidden) &&
                      aligned16(p.gate_up) && aligned16(p.down) && (p.stride_hidden_row * a) % 16 == 0 &&
                      (p.stride_gu_expert * w) % 16 == 0 && (p.stride_gu_row * w) % 16 == 0 &&
                      (p.stride_down_expert * w) % 16 == 0 && (p.stride_down_row * w) % 16 == 0;
  const bool few = p.tokens * p.top_k <= kMoeExpertsMaxPairs && p.top_k <= kMoeExpertsMaxTopK;
  return a16 && weights && blocks && rows16 && few ? FusedPlan::Fused : FusedPlan::Composed;
}

void moe_experts(const MoeExpertsParams& p) {
  const char* name = "[moe_experts]";
  ANVIL_CHECK(moe_experts_plan(p) == FusedPlan::Fused, Error, name,
              " the params are outside the fused CUDA kernels' plan (the op composes them)");
  KernelLaunch launch(p.out);
  dispatch_half_types(p.dtype, name, [&](auto a_tag) {
    using A = typename decltype(a_tag)::type;
    const bool blocked = p.gate_up_block.scale != nullptr;
    dispatch_all_types(p.w_dtype, name, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      if constexpr (std::is_same_v<W, Float8_e4m3fn>) {
        if (blocked) launch_experts<A, W, true>(p, launch);
        else launch_experts<A, W, false>(p, launch);
      } else if constexpr (std::is_same_v<W, Float8_e5m2> || std::is_same_v<W, A>) {
        launch_experts<A, W, false>(p, launch);
      } else {
        throw DTypeError(detail::cat_message(name, " no fused CUDA kernel for ", dtype_name(p.dtype),
                                             " activations with ", dtype_name(p.w_dtype), " weights"));
      }
    });
  });
  launch.check(name);
}

}  // namespace anvil::cuda_backend
