// topk and token sampling on CUDA. Elements are ranked by an order key (uint32 for types up to
// 32 bits, uint64 for 64-bit ones; every NaN above +inf, -0 equal to +0; smallest takes the
// complement), ties by the lower index, exactly as the CPU backend.
// topk, a short decision list (topk_typed):
//   warp:   rows up to 512 long and k <= 32 (MoE routers: [tokens, 128], k = 8): a warp per row
//           holds the row in registers and takes k rounds of a warp-wide argmax;
//   select: k <= 1024: a block radix-selects the k-th key (8-bit digits from the top, stopping
//           once a digit's bucket is taken whole), gathers the k in index order and sorts them in
//           shared memory (bitonic; CUDA output is always sorted). Rows of >= 4 chunks go in two
//           stages: blocks keep the top k of each chunk (>= 16 k elements), then a block per row
//           selects from those candidates;
//   sort:   k > 1024: CUB's stable radix sort of (key, index) over whole rows, then the first k.
// sample, for top_k in [1, 1024] (greedy is top_k = 1), runs the select path, then one thread
// sums and picks with the CPU's arithmetic (core/sampling.h), so both backends
// draw the same token bit for bit. With top_k = 0 (or > 1024) a block per row sums and searches
// the row: sorted by CUB when top_p < 1 or top_k > 1024, in index order otherwise; its (double)
// sums run in another order than the CPU's, so a draw within rounding of a boundary may differ.
// Scratch memory comes from the caching allocator (capture safe); no host sync; the rng counter
// is advanced on the device.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <optional>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/topk.h"
#include "core/philox.h"
#include "core/sampling.h"
#include "cuda/allocator.h"
#include "cuda/device/map.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::global_thread;
using cuda_device::grid_threads;

constexpr int kSelectThreads = 512;
constexpr int kSelectWarps = kSelectThreads / 32;
constexpr int kScanThreads = 1024;
constexpr int kScanWarps = kScanThreads / 32;
constexpr int kWarpKernelThreads = 256;
constexpr int kUnroll = 4;      // loads in flight per thread in the select passes
constexpr int kScanUnroll = 8;  // and in the scan kernel's passes over a whole row
constexpr uint32_t kMaxSelectK = 1024;
constexpr int64_t kWarpMaxLen = 512, kWarpMaxK = 32;
constexpr uint32_t kPadIndex = 0xFFFFFFFFu;  // ranks after every real element of equal key
constexpr int64_t kMaxRowBlocks = 65535;
constexpr int64_t kSortBatchElements = int64_t{1} << 24;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Two-stage chunk: at least 16 k elements, so the candidates are at most 1/16 of the row, and at
// least one load round of a block (a first-stage block costs the same up to there).
uint32_t chunk_for(uint32_t k) {
  uint32_t c = kSelectThreads * kUnroll;
  while (c < 16 * k) c <<= 1;
  return c;
}

// ---- kernel choice (see the file comment)
bool use_warp_kernel(int64_t n, int64_t k) { return n <= kWarpMaxLen && k <= kWarpMaxK; }
bool use_select(int64_t k) { return k >= 1 && k <= kMaxSelectK; }
bool use_two_stages(int64_t n, uint32_t chunk) { return n >= 4 * static_cast<int64_t>(chunk); }

// ---- order keys (core/sampling.h, shared with the CPU)
using sampling::float_key;
using sampling::order_key;
using sampling::order_key_t;

// The float of a key (NaN for the NaN key).
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

template <typename K>
__device__ __forceinline__ bool ranks_before(K ka, uint32_t ja, K kb, uint32_t jb) {
  return ka > kb || (ka == kb && ja < jb);
}
// (bk, bj) becomes the better of itself and (k, j).
template <typename K>
__device__ __forceinline__ void keep_best(K& bk, uint32_t& bj, K k, uint32_t j) {
  if (ranks_before(k, j, bk, bj)) {
    bk = k;
    bj = j;
  }
}
// Every lane of the warp ends with the warp's best (key, index).
template <typename K>
__device__ __forceinline__ void warp_best(K& bk, uint32_t& bj) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const K ok = __shfl_xor_sync(0xFFFFFFFFu, bk, d);
    const uint32_t oj = __shfl_xor_sync(0xFFFFFFFFu, bj, d);
    keep_best(bk, bj, ok, oj);
  }
}

// Row r of a batch: topk's [outer, n, inner] (element stride inner) or sample's rows (inner 1,
// outer_stride = the row stride).
struct RowLayout {
  int64_t inner = 1, outer_stride = 0;
  __device__ int64_t base(int64_t r) const { return (r / inner) * outer_stride + r % inner; }
};

// Element j of a strided row from `first` on, as a key; index() is its position in the row.
template <typename T>
struct RowSource {
  using K = order_key_t<T>;
  const T* row;
  int64_t stride;
  uint32_t first;
  K flip;
  __device__ K key(uint32_t j) const { return order_key(row[static_cast<int64_t>(first + j) * stride]) ^ flip; }
  __device__ uint32_t index(uint32_t j) const { return first + j; }
};
// First-stage candidates of one row: keys and row indices, in chunk order.
template <typename K>
struct CandidateSource {
  const K* keys;
  const uint32_t* idx;
  __device__ K key(uint32_t j) const { return keys[j]; }
  __device__ uint32_t index(uint32_t j) const { return idx[j]; }
};

// ---- block selection (kSelectThreads threads)

template <typename K>
struct SelectShared {
  uint32_t hist[256];
  uint32_t warp_gt[kSelectWarps], warp_eq[kSelectWarps];
  K best_key[kSelectWarps];
  uint32_t best_j[kSelectWarps];
  uint32_t bin, above, count;
  K skey[kMaxSelectK];  // the selected items, then sorted
  uint32_t sidx[kMaxSelectK];
};

// Selected: (key & mask) > prefix, and the first `remaining` (in index order) with (key & mask) == prefix.
template <typename K>
struct Threshold {
  K prefix, mask;
  uint32_t remaining;
};

// The highest-ranked element (thread 0's key_out / j_out).
template <typename K, typename Src>
__device__ void block_best(const Src& src, uint32_t n, SelectShared<K>& sh, K& key_out, uint32_t& j_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  K bk = 0;
  uint32_t bj = kPadIndex;
  for (uint32_t base = 0; base < n; base += kSelectThreads * kUnroll) {
    K keys[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t j = base + u * kSelectThreads + threadIdx.x;
      keys[u] = j < n ? src.key(j) : K{0};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t j = base + u * kSelectThreads + threadIdx.x;
      if (j < n) keep_best(bk, bj, keys[u], j);
    }
  }
  warp_best(bk, bj);
  if (lane == 0) {
    sh.best_key[warp] = bk;
    sh.best_j[warp] = bj;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSelectWarps; ++w) keep_best(bk, bj, sh.best_key[w], sh.best_j[w]);
    key_out = bk;
    j_out = bj;
  }
}

// Radix select of the k-th highest key of n (1 <= k <= n), 8 bits at a time from the top. A
// warp's equal digits are counted with one shared-memory atomic (logits share their top bits).
template <typename K, typename Src>
__device__ Threshold<K> radix_select(const Src& src, uint32_t n, uint32_t k, SelectShared<K>& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  K prefix = 0, mask = 0;
  uint32_t remaining = k;
  for (int shift = static_cast<int>(sizeof(K)) * 8 - 8; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSelectThreads) sh.hist[b] = 0;
    __syncthreads();
    for (uint32_t base = 0; base < n; base += kSelectThreads * kUnroll) {
      K keys[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t j = base + u * kSelectThreads + threadIdx.x;
        keys[u] = j < n ? src.key(j) : K{0};
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t j = base + u * kSelectThreads + threadIdx.x;
        const int bin = j < n && (keys[u] & mask) == prefix ? static_cast<int>((keys[u] >> shift) & 0xFF) : -1;
        const unsigned peers = __match_any_sync(0xFFFFFFFFu, bin);
        if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[bin], static_cast<unsigned>(__popc(peers)));
      }
    }
    __syncthreads();
    if (warp == 0) {  // lane l owns bins 255 - 8 l down to 248 - 8 l; the k-th key's bin is in one lane
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        c[i] = sh.hist[255 - 8 * lane - i];
        sum += c[i];
      }
      uint32_t incl = sum;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
        if (lane >= d) incl += v;
      }
      uint32_t above = incl - sum;
      if (above < remaining && remaining <= incl) {
        for (int i = 0; i < 8; ++i) {
          if (above + c[i] >= remaining) {
            sh.bin = static_cast<uint32_t>(255 - 8 * lane - i);
            sh.above = above;
            sh.count = c[i];
            break;
          }
          above += c[i];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<K>(sh.bin) << shift;
    mask |= static_cast<K>(0xFF) << shift;
    remaining -= sh.above;
    if (sh.count == remaining) break;  // the whole bucket is selected: no tie left to break
  }
  return {prefix, mask, remaining};
}

// emit(slot, j, key) for the selected elements: slots [0, gt) for those above the threshold
// bucket, then the first `remaining` of the bucket; each group in index order. Tiles of a block,
// kUnroll tiles' keys loaded at once.
template <typename K, typename Src, typename Emit>
__device__ void gather_selected(const Src& src, uint32_t n, uint32_t k, const Threshold<K>& th, SelectShared<K>& sh,
                                Emit& emit) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t gt_total = k - th.remaining, lanes_below = (1u << lane) - 1u;
  uint32_t gt_run = 0, eq_run = 0;
  for (uint32_t base = 0; base < n; base += kSelectThreads * kUnroll) {
    K keys[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t j = base + u * kSelectThreads + threadIdx.x;
      keys[u] = j < n ? src.key(j) : K{0};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t j = base + u * kSelectThreads + threadIdx.x;
      const bool is_gt = j < n && (keys[u] & th.mask) > th.prefix;
      const bool is_eq = j < n && (keys[u] & th.mask) == th.prefix;
      const unsigned bg = __ballot_sync(0xFFFFFFFFu, is_gt), be = __ballot_sync(0xFFFFFFFFu, is_eq);
      if (lane == 0) {
        sh.warp_gt[warp] = static_cast<uint32_t>(__popc(bg));
        sh.warp_eq[warp] = static_cast<uint32_t>(__popc(be));
      }
      __syncthreads();
      uint32_t gt_before = 0, eq_before = 0, gt_tile = 0, eq_tile = 0;
      for (int w = 0; w < kSelectWarps; ++w) {
        const uint32_t g = sh.warp_gt[w], e = sh.warp_eq[w];
        if (w < warp) {
          gt_before += g;
          eq_before += e;
        }
        gt_tile += g;
        eq_tile += e;
      }
      if (is_gt) emit(gt_run + gt_before + static_cast<uint32_t>(__popc(bg & lanes_below)), j, keys[u]);
      if (is_eq) {
        const uint32_t rank = eq_run + eq_before + static_cast<uint32_t>(__popc(be & lanes_below));
        if (rank < th.remaining) emit(gt_total + rank, j, keys[u]);
      }
      gt_run += gt_tile;
      eq_run += eq_tile;
      __syncthreads();
    }
  }
}

// The k (1 <= k <= n) highest-ranked elements of src: emit(slot, j, key) once each, slots
// 0..k-1. Every thread of the block calls it; it ends with a barrier.
template <typename K, typename Src, typename Emit>
__device__ void select_top(const Src& src, uint32_t n, uint32_t k, SelectShared<K>& sh, Emit emit) {
  if (k == 1) {
    K key = 0;
    uint32_t j = 0;
    block_best(src, n, sh, key, j);
    if (threadIdx.x == 0) emit(0u, j, key);
  } else if (k == n) {
    for (uint32_t j = threadIdx.x; j < n; j += kSelectThreads) emit(j, j, src.key(j));
  } else {
    const Threshold<K> th = radix_select(src, n, k, sh);
    gather_selected(src, n, k, th, sh, emit);
  }
  __syncthreads();
}

// Sorts sh.skey / sh.sidx[0, k) into rank order: bitonic over the next power of two, the tail
// padded with items that rank last.
template <typename K>
__device__ void sort_selected(SelectShared<K>& sh, uint32_t k) {
  uint32_t count = 1;
  while (count < k) count <<= 1;
  for (uint32_t s = k + threadIdx.x; s < count; s += kSelectThreads) {
    sh.skey[s] = 0;
    sh.sidx[s] = kPadIndex;
  }
  __syncthreads();
  for (uint32_t size = 2; size <= count; size <<= 1) {
    for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (uint32_t t = threadIdx.x; t < count / 2; t += kSelectThreads) {
        const uint32_t lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
        const bool in_order = (lo & size) == 0;  // this run ends in rank order, its partner reversed
        if (ranks_before(sh.skey[hi], sh.sidx[hi], sh.skey[lo], sh.sidx[lo]) == in_order) {
          const K tk = sh.skey[lo];
          sh.skey[lo] = sh.skey[hi];
          sh.skey[hi] = tk;
          const uint32_t ti = sh.sidx[lo];
          sh.sidx[lo] = sh.sidx[hi];
          sh.sidx[hi] = ti;
        }
      }
      __syncthreads();
    }
  }
}

// ---- topk kernels

// First stage: block (c, y) keeps the top k of chunk c of rows y, y + gridDim.y, ... as
// candidates [rows, chunks, k]; a last chunk shorter than k is padded with items that rank last,
// so within a row equal keys stay in index order and pads come after every real candidate.
template <typename T>
__global__ void __launch_bounds__(kSelectThreads)
    select_chunks_kernel(const T* in, RowLayout lay, int64_t rows, uint32_t n, uint32_t chunk, uint32_t chunks,
                         uint32_t k, order_key_t<T> flip, order_key_t<T>* cand_keys, uint32_t* cand_idx) {
  using K = order_key_t<T>;
  __shared__ SelectShared<K> sh;
  const uint32_t c = blockIdx.x, first = c * chunk, len = min(n - first, chunk), kk = min(k, len);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const RowSource<T> src{in + lay.base(r), lay.inner, first, flip};
    K* ck = cand_keys + (r * chunks + c) * k;
    uint32_t* ci = cand_idx + (r * chunks + c) * k;
    select_top(src, len, kk, sh, [=](uint32_t slot, uint32_t j, K key) {
      ck[slot] = key;
      ci[slot] = first + j;
    });
    for (uint32_t s = kk + threadIdx.x; s < k; s += kSelectThreads) {
      ck[s] = 0;
      ci[s] = kPadIndex;
    }
  }
}

// A block per row: the top k of the row (or of its candidates), sorted, to values / indices.
template <typename T, bool kFromCandidates>
__global__ void __launch_bounds__(kSelectThreads)
    topk_select_kernel(const __grid_constant__ TopkParams p, RowLayout lay, const order_key_t<T>* cand_keys,
                       const uint32_t* cand_idx, uint32_t n_cand) {
  using K = order_key_t<T>;
  __shared__ SelectShared<K> sh;
  const T* in = static_cast<const T*>(p.in);
  T* values = static_cast<T*>(p.values);
  const uint32_t n = static_cast<uint32_t>(p.dim_size), k = static_cast<uint32_t>(p.k);
  const K flip = p.largest ? K{0} : ~K{0};
  K* skey = sh.skey;
  uint32_t* sidx = sh.sidx;
  const int64_t rows = p.outer * p.inner;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + lay.base(r);
    if constexpr (kFromCandidates) {
      const CandidateSource<K> src{cand_keys + r * n_cand, cand_idx + r * n_cand};
      select_top(src, n_cand, k, sh, [=](uint32_t slot, uint32_t j, K key) {
        skey[slot] = key;
        sidx[slot] = src.index(j);
      });
    } else {
      const RowSource<T> src{row, p.inner, 0, flip};
      select_top(src, n, k, sh, [=](uint32_t slot, uint32_t j, K key) {
        skey[slot] = key;
        sidx[slot] = j;
      });
    }
    sort_selected(sh, k);
    const int64_t o = r / p.inner, i = r % p.inner;
    for (uint32_t s = threadIdx.x; s < k; s += kSelectThreads) {
      const uint32_t j = sidx[s];
      const int64_t at = (o * p.k + s) * p.inner + i;
      values[at] = row[static_cast<int64_t>(j) * p.inner];
      p.indices[at] = j;
    }
    __syncthreads();
  }
}

// A warp per row of up to 32 * kItems elements, k <= 32 rounds of a warp-wide argmax.
template <typename T, int kItems>
__global__ void __launch_bounds__(kWarpKernelThreads) topk_warp_kernel(const __grid_constant__ TopkParams p) {
  using K = order_key_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kWarpKernelThreads / 32) + (threadIdx.x >> 5);
  if (r >= p.outer * p.inner) return;  // the whole warp
  const int64_t o = r / p.inner, i = r % p.inner;
  const T* row = static_cast<const T*>(p.in) + o * p.dim_size * p.inner + i;
  T* values = static_cast<T*>(p.values);
  const K flip = p.largest ? K{0} : ~K{0};
  K keys[kItems];
  uint32_t live = 0;
#pragma unroll
  for (int t = 0; t < kItems; ++t) {
    const int64_t j = lane + 32 * t;
    keys[t] = j < p.dim_size ? static_cast<K>(order_key(row[j * p.inner]) ^ flip) : K{0};
    if (j < p.dim_size) live |= 1u << t;
  }
  for (int64_t s = 0; s < p.k; ++s) {
    K bk = 0;
    uint32_t bj = kPadIndex;
#pragma unroll
    for (int t = 0; t < kItems; ++t) {
      const uint32_t j = static_cast<uint32_t>(lane + 32 * t);
      if ((live >> t) & 1u) keep_best(bk, bj, keys[t], j);
    }
    warp_best(bk, bj);
    if ((bj & 31u) == static_cast<uint32_t>(lane)) live &= ~(1u << (bj >> 5));
    if (lane == 0) {
      const int64_t at = (o * p.k + s) * p.inner + i;
      values[at] = row[static_cast<int64_t>(bj) * p.inner];
      p.indices[at] = bj;
    }
  }
}

// First-stage candidates [rows, chunks, k] in scratch memory, filled by select_chunks_kernel.
template <typename T>
class Candidates {
 public:
  using K = order_key_t<T>;
  Candidates(const char* op, const KernelLaunch& launch, const T* in, const RowLayout& lay, int64_t rows, int64_t n,
             uint32_t k, uint32_t chunk, K flip)
      : per_row_(ceil_div(n, chunk) * k),
        key_bytes_((sizeof(K) * rows * per_row_ + 255) / 256 * 256),
        scratch_(launch.device(), key_bytes_ + sizeof(uint32_t) * rows * per_row_, launch.stream()) {
    keys = static_cast<K*>(scratch_.get());
    idx = reinterpret_cast<uint32_t*>(static_cast<char*>(scratch_.get()) + key_bytes_);
    const dim3 grid(static_cast<unsigned>(ceil_div(n, chunk)), static_cast<unsigned>(std::min(rows, kMaxRowBlocks)));
    select_chunks_kernel<T><<<grid, kSelectThreads, 0, launch.stream()>>>(
        in, lay, rows, static_cast<uint32_t>(n), chunk, static_cast<uint32_t>(ceil_div(n, chunk)), k, flip, keys, idx);
    launch.check(op);
  }
  uint32_t per_row() const { return static_cast<uint32_t>(per_row_); }
  K* keys = nullptr;
  uint32_t* idx = nullptr;

 private:
  int64_t per_row_;
  size_t key_bytes_;
  allocator::Scratch scratch_;
};

// ---- whole-row sort (CUB)

template <typename T>
__global__ void sort_keys_kernel(const T* in, RowLayout lay, int64_t r0, int64_t nr, uint32_t n, order_key_t<T> flip,
                                 order_key_t<T>* keys, uint32_t* ids) {
  const int64_t total = nr * n;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t rr = idx / n, j = idx % n;
    keys[idx] = order_key(in[lay.base(r0 + rr) + j * lay.inner]) ^ flip;
    ids[idx] = static_cast<uint32_t>(j);
  }
}

__global__ void row_offsets_kernel(int* offsets, int nr, int n) {
  for (int64_t i = global_thread(); i <= nr; i += grid_threads()) offsets[i] = static_cast<int>(i) * n;
}

// Rows [r0, r0 + nr) of n keys with their indices, sorted descending by CUB's stable radix sort
// (equal keys keep index order), in batches of at most kSortBatchElements (one row at least).
template <typename K>
class RowSorter {
 public:
  RowSorter(const KernelLaunch& launch, int64_t rows, int64_t n)
      : launch_(launch), n_(n), batch_(std::clamp<int64_t>(kSortBatchElements / n, 1, rows)) {
    const int64_t items = batch_ * n;
    temp_bytes_ = std::max(query(1), query(batch_));
    const size_t key_bytes = align(sizeof(K) * items), id_bytes = align(sizeof(uint32_t) * items);
    const size_t offset_bytes = align(sizeof(int) * (batch_ + 1));
    scratch_.emplace(launch.device(), 2 * key_bytes + 2 * id_bytes + offset_bytes + temp_bytes_, launch.stream());
    char* at = static_cast<char*>(scratch_->get());
    keys_in = reinterpret_cast<K*>(at);
    keys_out = reinterpret_cast<K*>(at + key_bytes);
    ids_in = reinterpret_cast<uint32_t*>(at + 2 * key_bytes);
    ids_out = reinterpret_cast<uint32_t*>(at + 2 * key_bytes + id_bytes);
    offsets_ = reinterpret_cast<int*>(at + 2 * key_bytes + 2 * id_bytes);
    temp_ = at + 2 * key_bytes + 2 * id_bytes + offset_bytes;
  }
  int64_t batch() const { return batch_; }
  // keys_in / ids_in of nr rows -> keys_out / ids_out.
  void sort(int64_t nr, const char* op) {
    size_t bytes = temp_bytes_;
    const int n = static_cast<int>(n_);
    if (nr == 1) {
      ANVIL_CUDA_CHECK(op,
                       cub::DeviceRadixSort::SortPairsDescending(temp_, bytes, keys_in, keys_out, ids_in, ids_out, n, 0,
                                                                 static_cast<int>(sizeof(K) * 8), launch_.stream()));
      return;
    }
    row_offsets_kernel<<<launch_.blocks(nr + 1), KernelLaunch::kThreads, 0, launch_.stream()>>>(
        offsets_, static_cast<int>(nr), n);
    ANVIL_CUDA_CHECK(
        op, cub::DeviceSegmentedRadixSort::SortPairsDescending(
                temp_, bytes, keys_in, keys_out, ids_in, ids_out, static_cast<int>(nr * n_), static_cast<int>(nr),
                static_cast<const int*>(offsets_), static_cast<const int*>(offsets_ + 1), 0,
                static_cast<int>(sizeof(K) * 8), launch_.stream()));
  }
  K *keys_in = nullptr, *keys_out = nullptr;
  uint32_t *ids_in = nullptr, *ids_out = nullptr;

 private:
  static size_t align(size_t b) { return (b + 255) / 256 * 256; }
  size_t query(int64_t nr) const {
    size_t bytes = 0;
    const int n = static_cast<int>(n_);
    if (nr == 1) {
      ANVIL_CUDA_CHECK("[sort]", cub::DeviceRadixSort::SortPairsDescending(
                                     nullptr, bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
                                     static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n, 0,
                                     static_cast<int>(sizeof(K) * 8), launch_.stream()));
    } else {
      ANVIL_CUDA_CHECK("[sort]",
                       cub::DeviceSegmentedRadixSort::SortPairsDescending(
                           nullptr, bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
                           static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
                           static_cast<int>(nr * n_), static_cast<int>(nr), static_cast<const int*>(nullptr),
                           static_cast<const int*>(nullptr), 0, static_cast<int>(sizeof(K) * 8), launch_.stream()));
    }
    return bytes;
  }
  const KernelLaunch& launch_;
  int64_t n_, batch_;
  size_t temp_bytes_ = 0;
  std::optional<allocator::Scratch> scratch_;
  int* offsets_ = nullptr;
  void* temp_ = nullptr;
};

template <typename T>
__global__ void topk_write_sorted_kernel(const __grid_constant__ TopkParams p, RowLayout lay, const uint32_t* ids,
                                         int64_t r0, int64_t nr) {
  const T* in = static_cast<const T*>(p.in);
  T* values = static_cast<T*>(p.values);
  const int64_t total = nr * p.k;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t rr = idx / p.k, s = idx % p.k, r = r0 + rr;
    const uint32_t j = ids[rr * p.dim_size + s];
    const int64_t at = ((r / p.inner) * p.k + s) * p.inner + r % p.inner;
    values[at] = in[lay.base(r) + static_cast<int64_t>(j) * p.inner];
    p.indices[at] = j;
  }
}

template <typename T>
void topk_sorted(const TopkParams& p, const KernelLaunch& launch, const RowLayout& lay) {
  using K = order_key_t<T>;
  const int64_t rows = p.outer * p.inner, n = p.dim_size;
  const K flip = p.largest ? K{0} : ~K{0};
  RowSorter<K> sorter(launch, rows, n);
  const T* in = static_cast<const T*>(p.in);
  for (int64_t r0 = 0; r0 < rows; r0 += sorter.batch()) {
    const int64_t nr = std::min(sorter.batch(), rows - r0);
    sort_keys_kernel<T><<<launch.blocks(nr * n), KernelLaunch::kThreads, 0, launch.stream()>>>(
        in, lay, r0, nr, static_cast<uint32_t>(n), flip, sorter.keys_in, sorter.ids_in);
    sorter.sort(nr, "[topk]");
    topk_write_sorted_kernel<T>
        <<<launch.blocks(nr * p.k), KernelLaunch::kThreads, 0, launch.stream()>>>(p, lay, sorter.ids_out, r0, nr);
  }
}

template <typename T>
void topk_typed(const TopkParams& p, const KernelLaunch& launch) {
  using K = order_key_t<T>;
  const int64_t rows = p.outer * p.inner, n = p.dim_size, k = p.k;
  const RowLayout lay{p.inner, n * p.inner};
  cudaStream_t stream = launch.stream();
  if (use_warp_kernel(n, k)) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kWarpKernelThreads / 32));
    if (n <= 128)
      topk_warp_kernel<T, 4><<<blocks, kWarpKernelThreads, 0, stream>>>(p);
    else
      topk_warp_kernel<T, 16><<<blocks, kWarpKernelThreads, 0, stream>>>(p);
    return;
  }
  if (!use_select(k)) return topk_sorted<T>(p, launch, lay);
  const unsigned grid = static_cast<unsigned>(std::min(rows, kMaxRowBlocks));
  const uint32_t chunk = chunk_for(static_cast<uint32_t>(k));
  if (!use_two_stages(n, chunk)) {
    topk_select_kernel<T, false><<<grid, kSelectThreads, 0, stream>>>(p, lay, nullptr, nullptr, 0);
    return;
  }
  const Candidates<T> cand("[topk]", launch, static_cast<const T*>(p.in), lay, rows, n, static_cast<uint32_t>(k), chunk,
                           p.largest ? K{0} : ~K{0});
  topk_select_kernel<T, true><<<grid, kSelectThreads, 0, stream>>>(p, lay, cand.keys, cand.idx, cand.per_row());
}

// ---- sampling (weights and the pick from core/sampling.h, shared with the CPU)
using sampling::sample_exp;

__device__ uint32_t pick_position(const float* e, uint32_t c, float top_p, float u) {
  return sampling::pick_position<uint32_t>(e, c, top_p, u);
}

__device__ __forceinline__ float draw_uniform(const SampleParams& p, uint64_t seed, uint64_t counter, int64_t r) {
  return static_cast<float>(philox_uniform(seed, counter + static_cast<uint64_t>(r), 24));
}

// top_k in [1, 1024]: a block per row selects the top_k (from the row or its candidates) and
// sorts them; their weights are computed in parallel, summed and picked in thread 0. With one
// block (rows == 1) it advances the counter itself.
template <typename T, bool kFromCandidates>
__global__ void __launch_bounds__(kSelectThreads)
    sample_select_kernel(const __grid_constant__ SampleParams p, const uint32_t* cand_keys, const uint32_t* cand_idx,
                         uint32_t n_cand, bool advance) {
  __shared__ SelectShared<uint32_t> sh;
  __shared__ float weight[kMaxSelectK];
  const uint64_t seed = static_cast<uint64_t>(p.rng_state[0]), counter = static_cast<uint64_t>(p.rng_state[1]);
  const uint32_t n = static_cast<uint32_t>(p.vocab), k = static_cast<uint32_t>(p.top_k);
  uint32_t* skey = sh.skey;
  uint32_t* sidx = sh.sidx;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    if constexpr (kFromCandidates) {
      const CandidateSource<uint32_t> src{cand_keys + r * n_cand, cand_idx + r * n_cand};
      select_top(src, n_cand, k, sh, [=](uint32_t slot, uint32_t j, uint32_t key) {
        skey[slot] = key;
        sidx[slot] = src.index(j);
      });
    } else {
      const RowSource<T> src{static_cast<const T*>(p.logits) + r * p.stride_row, 1, 0, 0u};
      select_top(src, n, k, sh, [=](uint32_t slot, uint32_t j, uint32_t key) {
        skey[slot] = key;
        sidx[slot] = j;
      });
    }
    sort_selected(sh, k);
    const float m = key_float(skey[0]);
    for (uint32_t s = threadIdx.x; s < k; s += kSelectThreads)
      weight[s] = sample_exp((key_float(skey[s]) - m) / p.temperature);
    __syncthreads();
    if (threadIdx.x == 0) p.out[r] = sidx[pick_position(weight, k, p.top_p, draw_uniform(p, seed, counter, r))];
    __syncthreads();
  }
  if (advance && threadIdx.x == 0) p.rng_state[1] = static_cast<int64_t>(counter + static_cast<uint64_t>(p.rows));
}

struct ScanShared {
  double seg_sum[kScanWarps];
  uint32_t warp_key[kScanWarps];
  double total, before, incl;
  int seg;
  uint32_t pos;
  bool found;
};

// top_k = 0 or > 1024: a block per row over c candidates in a fixed order (kSorted: the row
// sorted by key, rank order; else the logits in index order). Warp w sums the weights of segment
// w; thread 0 finds the segment where the running mass crosses a threshold, and that warp walks
// it with warp scans. Rows [r0, r0 + nr); with one block (rows == 1) it advances the counter.
template <typename T, bool kSorted>
__global__ void __launch_bounds__(kScanThreads)
    sample_scan_kernel(const __grid_constant__ SampleParams p, const uint32_t* sorted_keys, const uint32_t* sorted_ids,
                       const uint32_t* chunk_max, uint32_t n_chunk_max, int64_t r0, int64_t nr, bool advance) {
  __shared__ ScanShared sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint64_t seed = static_cast<uint64_t>(p.rng_state[0]), counter = static_cast<uint64_t>(p.rng_state[1]);
  const uint32_t n = static_cast<uint32_t>(p.vocab);
  const uint32_t c = kSorted && p.top_k > 0 ? static_cast<uint32_t>(p.top_k) : n;
  const uint32_t seg = static_cast<uint32_t>(ceil_div(ceil_div(c, kScanWarps), 32) * 32);
  const uint32_t seg_begin = min(c, warp * seg), seg_end = min(c, seg_begin + seg);
  for (int64_t rr = blockIdx.x; rr < nr; rr += gridDim.x) {
    const int64_t r = r0 + rr;
    const T* row = static_cast<const T*>(p.logits) + r * p.stride_row;
    const uint32_t* keys = kSorted ? sorted_keys + rr * n : nullptr;
    auto logit = [&](uint32_t j) -> float {
      if constexpr (kSorted)
        return key_float(keys[j]);
      else
        return static_cast<float>(row[j]);
    };
    // m: the first sorted key, or the row's maximum key (from the chunk maxima when given)
    float m;
    if constexpr (kSorted) {
      m = key_float(keys[0]);
    } else {
      uint32_t best = 0;
      for (uint32_t j = threadIdx.x; chunk_max && j < n_chunk_max; j += kScanThreads)
        best = max(best, chunk_max[r * n_chunk_max + j]);
      for (uint32_t base = 0; !chunk_max && base < n; base += kScanThreads * kScanUnroll) {
        float x[kScanUnroll];
#pragma unroll
        for (int u = 0; u < kScanUnroll; ++u) {
          const uint32_t j = base + u * kScanThreads + threadIdx.x;
          x[u] = j < n ? static_cast<float>(row[j]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kScanUnroll; ++u)
          if (base + u * kScanThreads + threadIdx.x < n) best = max(best, float_key(x[u]));
      }
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) best = max(best, __shfl_xor_sync(0xFFFFFFFFu, best, d));
      if (lane == 0) sh.warp_key[warp] = best;
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < kScanWarps; ++w) best = max(best, sh.warp_key[w]);
        sh.warp_key[0] = best;
      }
      __syncthreads();
      m = key_float(sh.warp_key[0]);
    }
    const float t = p.temperature;
    auto weight = [&](uint32_t j) { return sample_exp((logit(j) - m) / t); };
    // per-warp segment sums, then the total in thread 0 (segments in order); sums in double
    double s = 0.0;
    for (uint32_t base = seg_begin; base < seg_end; base += 32 * kScanUnroll) {
      float x[kScanUnroll];
#pragma unroll
      for (int u = 0; u < kScanUnroll; ++u) {
        const uint32_t j = base + u * 32 + lane;
        x[u] = j < seg_end ? logit(j) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kScanUnroll; ++u)
        if (base + u * 32 + lane < seg_end) s += sample_exp((x[u] - m) / t);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, d);
    if (lane == 0) sh.seg_sum[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int w = 0; w < kScanWarps; ++w) total += sh.seg_sum[w];
      sh.total = total;
    }
    __syncthreads();
    // The first position whose running mass is >= thr (at_least) or > thr; found: sh.pos, sh.incl.
    auto crossing = [&](double thr, bool at_least) {
      if (threadIdx.x == 0) {
        double before = 0.0;
        int w = -1;
        for (int i = 0; i < kScanWarps; ++i) {
          const double after = before + sh.seg_sum[i];
          if (at_least ? after >= thr : after > thr) {
            w = i;
            break;
          }
          before = after;
        }
        sh.seg = w;
        sh.before = before;
        sh.found = w >= 0;
      }
      __syncthreads();
      if (warp == sh.seg) {
        double carry = sh.before;
        bool hit = false;
        for (uint32_t base = seg_begin; base < seg_end && !hit; base += 32 * kScanUnroll) {
          float x[kScanUnroll];
#pragma unroll
          for (int u = 0; u < kScanUnroll; ++u) {
            const uint32_t j = base + u * 32 + lane;
            x[u] = j < seg_end ? logit(j) : 0.0f;
          }
#pragma unroll
          for (int u = 0; u < kScanUnroll; ++u) {
            const uint32_t j = base + u * 32 + lane;
            double incl = j < seg_end ? sample_exp((x[u] - m) / t) : 0.0f;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
              const double v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
              if (lane >= d) incl += v;
            }
            const double run = carry + incl;
            const bool cross = j < seg_end && (at_least ? run >= thr : run > thr);
            const unsigned b = __ballot_sync(0xFFFFFFFFu, cross);
            if (b != 0) {
              if (lane == __ffs(b) - 1) {
                sh.pos = j;
                sh.incl = run;
              }
              hit = true;
              break;
            }
            carry += __shfl_sync(0xFFFFFFFFu, incl, 31);
          }
        }
        if (!hit && lane == 0) {  // rounding: the segment sum crossed, the walk did not
          sh.pos = max(seg_end, 1u) - 1;
          sh.incl = carry;
        }
      }
      __syncthreads();
    };
    uint32_t kept = c;
    double mass = sh.total;
    if (p.top_p < 1.0f) {
      crossing(static_cast<double>(p.top_p) * sh.total, true);
      if (sh.found) {
        kept = sh.pos + 1;
        mass = sh.incl;
      }
      __syncthreads();
    }
    crossing(static_cast<double>(draw_uniform(p, seed, counter, r)) * mass, false);
    if (threadIdx.x == 0) {
      uint32_t pos = sh.pos;
      if (!sh.found || pos >= kept) {  // rounding: the last kept position of positive weight
        pos = kept - 1;
        while (pos > 0 && !(weight(pos) > 0.0f)) --pos;
      }
      p.out[r] = kSorted ? sorted_ids[rr * n + pos] : pos;
    }
    __syncthreads();
  }
  if (advance && threadIdx.x == 0) p.rng_state[1] = static_cast<int64_t>(counter + static_cast<uint64_t>(p.rows));
}

__global__ void advance_counter_kernel(int64_t* rng_state, int64_t rows) {
  rng_state[1] = static_cast<int64_t>(static_cast<uint64_t>(rng_state[1]) + static_cast<uint64_t>(rows));
}

template <typename T>
void sample_typed(const SampleParams& p, const KernelLaunch& launch) {
  const int64_t rows = p.rows, n = p.vocab;
  const bool one_block = rows == 1;  // the finishing kernel then advances the counter itself
  const unsigned grid = static_cast<unsigned>(std::min(rows, kMaxRowBlocks));
  const RowLayout lay{1, p.stride_row};
  cudaStream_t stream = launch.stream();
  const T* logits = static_cast<const T*>(p.logits);
  if (use_select(p.top_k)) {
    const uint32_t k = static_cast<uint32_t>(p.top_k), chunk = chunk_for(k);
    if (!use_two_stages(n, chunk)) {
      sample_select_kernel<T, false><<<grid, kSelectThreads, 0, stream>>>(p, nullptr, nullptr, 0, one_block);
    } else {
      const Candidates<T> cand("[sample]", launch, logits, lay, rows, n, k, chunk, 0u);
      sample_select_kernel<T, true>
          <<<grid, kSelectThreads, 0, stream>>>(p, cand.keys, cand.idx, cand.per_row(), one_block);
    }
  } else if (p.top_k == 0 && p.top_p >= 1.0f) {
    // The row maxima first, by the multi-block first stage: a one-block pass over the row would
    // add its read latency (~10 us for 151936 float32 on one SM) to the decode step.
    const uint32_t chunk = chunk_for(1);
    if (use_two_stages(n, chunk)) {
      const Candidates<T> cand("[sample]", launch, logits, lay, rows, n, 1, chunk, 0u);
      sample_scan_kernel<T, false>
          <<<grid, kScanThreads, 0, stream>>>(p, nullptr, nullptr, cand.keys, cand.per_row(), 0, rows, one_block);
    } else {
      sample_scan_kernel<T, false>
          <<<grid, kScanThreads, 0, stream>>>(p, nullptr, nullptr, nullptr, 0, 0, rows, one_block);
    }
  } else {
    RowSorter<uint32_t> sorter(launch, rows, n);
    for (int64_t r0 = 0; r0 < rows; r0 += sorter.batch()) {
      const int64_t nr = std::min(sorter.batch(), rows - r0);
      sort_keys_kernel<T><<<launch.blocks(nr * n), KernelLaunch::kThreads, 0, stream>>>(
          logits, lay, r0, nr, static_cast<uint32_t>(n), 0u, sorter.keys_in, sorter.ids_in);
      sorter.sort(nr, "[sample]");
      sample_scan_kernel<T, true><<<static_cast<unsigned>(std::min(nr, kMaxRowBlocks)), kScanThreads, 0, stream>>>(
          p, sorter.keys_out, sorter.ids_out, nullptr, 0, r0, nr, one_block);
    }
  }
  if (!one_block) advance_counter_kernel<<<1, 1, 0, stream>>>(p.rng_state, rows);
}

}  // namespace

void topk(const TopkParams& p) {
  if (p.k == 0 || p.outer * p.inner == 0) return;
  ANVIL_CHECK(p.dim_size < INT32_MAX, ShapeError,
              "[topk] rows of 2^31 - 1 elements or more are not supported on CUDA, got ", p.dim_size);
  KernelLaunch launch(p.values);
  dispatch_real_types(p.dtype, "[topk]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_real_arith_v<T> && !std::is_same_v<T, bool>) topk_typed<T>(p, launch);
  });
  launch.check("[topk]");
}

void sample(const SampleParams& p) {
  if (p.rows == 0) return;
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[sample]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, double>) sample_typed<T>(p, launch);
  });
  launch.check("[sample]");
}

}  // namespace anvil::cuda_backend
