// Attention on CUDA: out = softmax(q k^T * scale + mask) v per (batch, query head), with float32
// scores, softmax and accumulation and one rounding at the store (AttentionParams, core/params.h).
//  decode (q_len <= 8, head_dim = v_head_dim in {64, 80, 96, 128, 256}, 16-byte K / V rows):
//    split-K over the keys (flash-decoding); a block serves the query heads of one kv head over
//    one key range, so K and V leave DRAM once. Splits write (max, sum, unnormalised output)
//    partials that a second kernel combines; it is launched as a programmatic dependent, so its
//    blocks wait resident instead of being launched after the first kernel drains.
//    bfloat16 / float16: tensor cores. The rows (heads x q_len <= 16) are one m16 tile; each of
//    4 warps streams its own 32-key (16 at head_dim >= 128) tiles through a cp.async double
//    buffer and runs q k^T and p v on mma.sync (p as hi + lo, as in the mma.sync prefill).
//    float32: SIMT, 256 threads over 8 rows, key tiles shared by the block.
//  prefill (bfloat16 / float16, head_dim = v_head_dim <= 256, a multiple of 8, 16-byte rows):
//    compute capability 9.0 without attn_mask: wgmma + TMA (FlashAttention-3's structure): a
//    block per 128 query rows = two computing warpgroups and one loading warpgroup, p rounded
//    once to T for the p v product (attention_prefill.cu: attention_prefill_wgmma_kernel).
//    Otherwise FlashAttention-2: a block per 128 query rows (64 above head_dim 128) of one head,
//    4 warps of 16-row m-tiles, mma.sync m16n8k16 for q k^T and p v with float32 accumulators,
//    online softmax in registers; K / V tiles double-buffered by cp.async; causal blocks stop at
//    their last visible key. p enters the p v product as two 16-bit terms (see kExactP).
//  simple (everything else: float32 / float64 beyond decode, odd head dims, unaligned rows,
//    head_dim > 256): 16 query rows per block, 32-key tiles converted into shared memory, a lane
//    per key for the scores and per output column for p v.
// Scores live in log2 units (x log2(e)) so that every exponential is one ex2.
#include <algorithm>
#include <array>
#include <type_traits>

#include "core/dispatch.h"
#include "cuda/allocator.h"
#include "cuda/attention_common.cuh"
#include "cuda/device/pdl.cuh"

namespace anvil::cuda_backend {
namespace {

using namespace attention_shared;

// ---- decode: split-K, one block per (batch, kv head, head chunk, split)

constexpr int kDecodeThreads = 256;
constexpr int kDecodeMaxRows = 8;
constexpr int kMaxSplits = 1024;  // the combine kernel's shared weights

template <typename T, int D, int R>  // R: rows held per block (4 or 8)
struct DecodeShape {
  static constexpr int kPack = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  static constexpr int kPacks = D / kPack;                          // loads per row
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(T));
  // An odd number of 16-byte units: the 8 rows a quarter warp reads hit distinct banks.
  static constexpr int kPitch = kRowBytes + ((kRowBytes / 16) % 2 == 0 ? 16 : 0);
  static constexpr int kTile = kRowBytes <= 128 ? 128 : kRowBytes <= 256 ? 64 : 32;  // keys
  static constexpr int kTpk = kDecodeThreads / kTile;      // threads per key for the scores
  static constexpr int kPacksPerThread = (kPacks + kTpk - 1) / kTpk;
  static constexpr int kGroups = kDecodeThreads / kPacks;  // key groups for p v
  static constexpr int kStageBytes = 2 * kTile * kPitch;   // K then V
  static constexpr int kRedBytes = kGroups * R * D * 4;
  static constexpr int kFloats = R * (D + kTile + 3);      // q, scores, m / l / alpha
  static_assert(kRowBytes % 16 == 0 && kGroups >= 1 && kTpk <= 32);
  static constexpr int region(int stages) {
    return stages * kStageBytes > kRedBytes ? stages * kStageBytes : kRedBytes;
  }
  static constexpr int smem(int stages) { return region(stages) + R * 32 + kFloats * 4; }
};

struct DecodePlan {
  int64_t chunks, heads_per_chunk, splits, tiles_per_split;
  int stages;
  bool q_vec;  // q rows 16-byte aligned (the tensor-core kernel loads them in 16-byte chunks)
};

// Per-row constants, computed once per block (64-bit divisions stay out of the key loops).
struct DecodeRow {
  int64_t key_end;   // keys [0, key_end) of this row (valid length and causal limit)
  int64_t mask_off;  // mask offset of key 0
  int64_t out_off;   // output offset of column 0
  int64_t part_row;  // (b, h, i) row index into the split partials
};

template <typename T, int D, int R>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(const __grid_constant__ AttentionParams p, const DecodePlan plan, float* part_ml,
                            float* part_acc) {
  using S = DecodeShape<T, D, R>;
  cuda_device::pdl_launch_dependents();  // let the combine kernel's blocks come in
  cuda_device::pdl_wait();
  extern __shared__ __align__(128) unsigned char smem[];
  DecodeRow* row_s = reinterpret_cast<DecodeRow*>(smem + S::region(plan.stages));
  float* q_s = reinterpret_cast<float*>(row_s + R);  // [R][D]
  float* s_s = q_s + R * D;                           // [R][kTile] scores, then weights
  float* m_s = s_s + R * S::kTile;
  float* l_s = m_s + R;
  float* alpha_s = l_s + R;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  int64_t id = blockIdx.x;
  const int64_t split = id % plan.splits;
  id /= plan.splits;
  const int64_t chunk = id % plan.chunks;
  id /= plan.chunks;
  const int64_t hkv = id % p.n_kv_heads, b = id / p.n_kv_heads;
  const int64_t group = p.n_heads / p.n_kv_heads;
  const int64_t h0 = hkv * group + chunk * plan.heads_per_chunk;
  const int rows = static_cast<int>(std::min(plan.heads_per_chunk, group - chunk * plan.heads_per_chunk) * p.q_len);
  const int64_t len = valid_len(p, b), shift = p.causal_from_end ? len - p.q_len : 0;
  const int64_t k0 = split * plan.tiles_per_split * S::kTile;
  const int64_t k1 = std::min(k0 + plan.tiles_per_split * S::kTile, key_end(p, len, shift, p.q_len - 1));
  const int64_t tiles = k1 > k0 ? (k1 - k0 + S::kTile - 1) / S::kTile : 0;
  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;

  if (tid < rows) {
    const int64_t h = h0 + tid / p.q_len, i = tid % p.q_len;
    row_s[tid] = {key_end(p, len, shift, i), p.mask ? mask_offset(p, b, h, i, 0) : 0,
                  b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2], (b * p.n_heads + h) * p.q_len + i};
  }
  if (tid < R) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  for (int r = warp; r < rows; r += kDecodeThreads / 32) {
    const int64_t h = h0 + r / p.q_len, i = r % p.q_len;
    const T* q = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1] + i * p.stride_q[2];
#pragma unroll
    for (int d = lane; d < D; d += 32) q_s[r * D + d] = to_compute(q[d]);
  }

  const T* kbase = static_cast<const T*>(p.k) + b * p.stride_k[0] + hkv * p.stride_k[1];
  const T* vbase = static_cast<const T*>(p.v) + b * p.stride_v[0] + hkv * p.stride_v[1];
  auto load_tile = [&](int64_t t) {
    const uint32_t dst = smem_u32(smem + (t % plan.stages) * S::kStageBytes);
    const int64_t kt = k0 + t * S::kTile;
    for (int idx = tid; idx < 2 * S::kTile * S::kPacks; idx += kDecodeThreads) {
      const int which = idx / (S::kTile * S::kPacks), rem = idx % (S::kTile * S::kPacks);
      const int j = rem / S::kPacks, c = rem % S::kPacks;
      const bool ok = kt + j < k1;  // keys past the valid length may hold anything: never read
      const T* src = which ? vbase + (ok ? (kt + j) * p.stride_v[2] : 0) : kbase + (ok ? (kt + j) * p.stride_k[2] : 0);
      cp_async16(dst + (which * S::kTile + j) * S::kPitch + c * 16, src + c * S::kPack, ok ? 16 : 0);
    }
    cp_async_commit();
  };

  float acc[R][S::kPack] = {};
  const int pc = tid % S::kPacks, kg = tid / S::kPacks;  // p v: 16-byte column, key group
  if (tiles > 0) load_tile(0);
  for (int64_t t = 0; t < tiles; ++t) {
    if (plan.stages > 1 && t + 1 < tiles) {
      load_tile(t + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const unsigned char* ks = smem + (t % plan.stages) * S::kStageBytes;
    const unsigned char* vs = ks + S::kTile * S::kPitch;
    const int64_t kt = k0 + t * S::kTile;

    {  // scores: kTpk neighbouring threads per key, each over a share of the 16-byte loads
      const int j = tid / S::kTpk, sub = tid % S::kTpk;
      float dot[R] = {};
#pragma unroll
      for (int cc = 0; cc < S::kPacksPerThread; ++cc) {
        const int c = cc * S::kTpk + sub;
        if (c < S::kPacks) {
          float kf[S::kPack];
          unpack16<T>(ks + j * S::kPitch + c * 16, kf);
#pragma unroll
          for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int e = 0; e < S::kPack; e += 4) {
              const float4 qv = *reinterpret_cast<const float4*>(q_s + r * D + c * S::kPack + e);
              dot[r] += qv.x * kf[e] + qv.y * kf[e + 1] + qv.z * kf[e + 2] + qv.w * kf[e + 3];
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int o = S::kTpk / 2; o > 0; o >>= 1) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
      }
      if (sub == 0) {
        const int64_t key = kt + j;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < rows) {
            float s = -INFINITY;
            if (key < row_s[r].key_end) {
              s = dot[r] * scale_log2;
              if (p.mask) s += mask_at<float>(p, row_s[r].mask_off + key * p.stride_mask[3]) * kLog2e;
            }
            s_s[r * S::kTile + j] = s;
          }
        }
      }
    }
    __syncthreads();
    // online softmax: warp w owns row w
    for (int r = warp; r < rows; r += kDecodeThreads / 32) {
      float* sr = s_s + r * S::kTile;
      float mx = -INFINITY;
#pragma unroll
      for (int j = lane; j < S::kTile; j += 32) mx = fmaxf(mx, sr[j]);
      mx = warp_max(mx);
      const float m_old = m_s[r], m_new = fmaxf(m_old, mx), m_use = m_new == -INFINITY ? 0.f : m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = lane; j < S::kTile; j += 32) {
        const float e = exp2f(sr[j] - m_use);
        sr[j] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_use);
        alpha_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    if (kg < S::kGroups) {  // p v: this thread's 16-byte column over keys kg, kg + kGroups, ...
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float a = r < rows ? alpha_s[r] : 1.f;
#pragma unroll
        for (int e = 0; e < S::kPack; ++e) acc[r][e] *= a;
      }
      for (int j = kg; j < S::kTile; j += S::kGroups) {
        float vf[S::kPack];
        unpack16<T>(vs + j * S::kPitch + pc * 16, vf);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < rows) {
            const float w = s_s[r * S::kTile + j];
#pragma unroll
            for (int e = 0; e < S::kPack; ++e) acc[r][e] += w * vf[e];
          }
        }
      }
    }
    __syncthreads();
  }

  // Sum the key groups' partial outputs through shared memory (the stages are free now).
  float* red = reinterpret_cast<float*>(smem);  // [kGroups][R][D]
  if (kg < S::kGroups) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < rows) {
#pragma unroll
        for (int e = 0; e < S::kPack; ++e) red[(kg * R + r) * D + pc * S::kPack + e] = acc[r][e];
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * D; idx += kDecodeThreads) {
    const int r = idx / D, d = idx % D;
    float o = 0.f;
    for (int g = 0; g < S::kGroups; ++g) o += red[(g * R + r) * D + d];
    if (plan.splits == 1) {
      const float l = l_s[r];
      store_out<T>(p, row_s[r].out_off + d, l == 0.f ? 0.f : o / l);
    } else {
      part_acc[(row_s[r].part_row * plan.splits + split) * D + d] = o;  // zeros for an empty split
    }
  }
  if (plan.splits > 1 && tid < rows) {
    const int64_t at = (row_s[tid].part_row * plan.splits + split) * 2;
    part_ml[at] = m_s[tid];
    part_ml[at + 1] = l_s[tid];
  }
}

// Max and sum over a block of kDecodeThreads; every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float block_all(float v, float* scratch) {
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kDecodeThreads / 32; ++w) v = kMax ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

// One block per (batch, head, row): weights 2^(m_s - max) of the splits, then each output
// column sums its splits' partials (threads split the splits too, so many loads are in flight).
template <typename T>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_combine_kernel(const __grid_constant__ AttentionParams p, int64_t splits, const float* part_ml,
                             const float* part_acc) {
  __shared__ float w_s[kMaxSplits];
  __shared__ float scratch[kDecodeThreads / 32];
  __shared__ float sums[kDecodeThreads];
  cuda_device::pdl_wait();  // the decode kernel has finished
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x, dv = p.v_head_dim;
  const float* ml = part_ml + row * splits * 2;
  // This thread's first kPrefetch partials load while the weights are reduced.
  constexpr int kPrefetch = 16;
  const int groups = static_cast<int>(kDecodeThreads / dv);
  const int d = static_cast<int>(tid % dv), g = static_cast<int>(tid / dv);
  const float* acc = part_acc + row * splits * dv + d;
  float pre[kPrefetch];
#pragma unroll
  for (int u = 0; u < kPrefetch; ++u) {
    const int64_t s = g + int64_t{u} * groups;
    pre[u] = g < groups && s < splits ? acc[s * dv] : 0.f;
  }
  float mx = -INFINITY;
  for (int64_t s = tid; s < splits; s += kDecodeThreads) mx = fmaxf(mx, ml[2 * s]);
  mx = block_all<true>(mx, scratch);
  float l = 0.f;
  for (int64_t s = tid; s < splits; s += kDecodeThreads) {
    const float m = ml[2 * s], w = m == -INFINITY ? 0.f : exp2f(m - mx);
    w_s[s] = w;
    l += w * ml[2 * s + 1];
  }
  l = block_all<false>(l, scratch);  // its barriers also publish w_s
  float o = 0.f;
  if (g < groups) {
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      const int64_t s = g + int64_t{u} * groups;
      if (s < splits) o += w_s[s] * pre[u];
    }
#pragma unroll 4
    for (int64_t s = g + int64_t{kPrefetch} * groups; s < splits; s += groups) o += w_s[s] * acc[s * dv];
  }
  sums[tid] = o;
  __syncthreads();
  if (g == 0) {
    for (int x = 1; x < groups; ++x) o += sums[x * dv + d];
    const uint32_t r = static_cast<uint32_t>(row), q_len = static_cast<uint32_t>(p.q_len);
    const uint32_t heads = static_cast<uint32_t>(p.n_heads);
    const int64_t i = r % q_len, h = (r / q_len) % heads, b = r / q_len / heads;
    store_out<T>(p, b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2] + d, l == 0.f ? 0.f : o / l);
  }
}

// ---- decode on tensor cores (bfloat16 / float16): split-K, one block per (batch, kv head, head
// chunk, split). The chunk's rows (heads x q_len <= 16) are one m16 tile: scores q k^T and p v
// run on mma.sync like the prefill. Each warp streams its own key tiles of the split (tiles
// w, w + kMmaWarps, ...) through its own cp.async double buffer, so the key loop has no block
// barrier; the warps' (max, sum, output) meet in shared memory once at the end.

constexpr int kMmaWarps = 4;
constexpr int kMmaRows = 16;

template <int D>
struct DecodeMmaShape {
  static constexpr int kKeys = D <= 96 ? 32 : 16;  // keys per warp tile
  static constexpr int kChunks = D / 8;            // 16-byte chunks per row
  static constexpr int kPitch = D * 2 + 16;        // bytes: an odd number of 16-byte units
  static constexpr int kKSteps = D / 16;
  static constexpr int kNTiles = kKeys / 8;
  static constexpr int kDTiles = D / 8;
  static constexpr bool kQInRegs = kKSteps * 4 <= 32;
  static constexpr int kLoads = 2 * kKeys * kChunks / 32;  // cp.async per lane per tile
  static constexpr int kStageBytes = 2 * kKeys * kPitch;   // K then V
  static constexpr int kHead = kMmaRows * kPitch + kMmaRows * static_cast<int>(sizeof(DecodeRow));
  // Two stages: more cost resident warps, and the key loop is bound by their instruction
  // latency more than by bytes in flight (measured: 4 x 16-key stages 11.4 / 34.1 us at hd80
  // 4K / 32K against 2 x 32-key stages 10.9 / 31.6).
  static constexpr int kMaxStages = 2;
  static constexpr int kRedBytes = kMmaWarps * kMmaRows * (D + 2) * 4;
  static constexpr int smem(int stages) {
    return kHead + (kMmaWarps * stages * kStageBytes > kRedBytes ? kMmaWarps * stages * kStageBytes : kRedBytes);
  }
  static_assert(D % 16 == 0 && kDTiles % 2 == 0 && (2 * kKeys * kChunks) % 32 == 0);
};

template <typename T, int D>
__global__ void __launch_bounds__(kMmaWarps * 32)
    attention_decode_mma_kernel(const __grid_constant__ AttentionParams p, const DecodePlan plan, float* part_ml,
                                float* part_acc) {
  using S = DecodeMmaShape<D>;
  cuda_device::pdl_launch_dependents();  // let the combine kernel's blocks come in
  cuda_device::pdl_wait();
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_s = smem_u32(smem);
  DecodeRow* row_s = reinterpret_cast<DecodeRow*>(smem + kMmaRows * S::kPitch);
  unsigned char* work = smem + S::kHead;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t4 = lane % 4;
  const int stages = plan.stages;
  const uint32_t stage_s = smem_u32(work) + warp * stages * S::kStageBytes;

  // 32-bit index math on the critical path (a 64-bit division is a ~200-cycle subroutine).
  uint32_t id = blockIdx.x;
  const uint32_t splits = static_cast<uint32_t>(plan.splits), chunks = static_cast<uint32_t>(plan.chunks);
  const uint32_t n_kv_heads = static_cast<uint32_t>(p.n_kv_heads), q_len = static_cast<uint32_t>(p.q_len);
  const int64_t split = id % splits;
  id /= splits;
  const uint32_t chunk = id % chunks;
  id /= chunks;
  const int64_t hkv = id % n_kv_heads, b = id / n_kv_heads;
  const int group = static_cast<int>(p.n_heads / p.n_kv_heads), per_chunk = static_cast<int>(plan.heads_per_chunk);
  const int64_t h0 = hkv * group + chunk * per_chunk;
  const int rows = std::min(per_chunk, group - static_cast<int>(chunk) * per_chunk) * static_cast<int>(q_len);
  const int64_t len = valid_len(p, b), shift = p.causal_from_end ? len - p.q_len : 0;
  const int64_t k0 = split * plan.tiles_per_split * S::kKeys;
  const int64_t k1 = std::min(k0 + plan.tiles_per_split * S::kKeys, key_end(p, len, shift, p.q_len - 1));
  const int64_t tiles = k1 > k0 ? (k1 - k0 + S::kKeys - 1) / S::kKeys : 0;
  const int64_t my_tiles = tiles > warp ? (tiles - warp + kMmaWarps - 1) / kMmaWarps : 0;
  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;

  const T* kbase = static_cast<const T*>(p.k) + b * p.stride_k[0] + hkv * p.stride_k[1];
  const T* vbase = static_cast<const T*>(p.v) + b * p.stride_v[0] + hkv * p.stride_v[1];
  // This warp's i-th tile (block tile warp + i * kMmaWarps) into stage i % 2; keys past k1
  // are zero-filled (the cache may hold anything there: never read).
  // Lane l copies 16-byte chunks l, l + 32, ... of the K and the V tile (keys x chunks): (key,
  // chunk) and the byte offsets move by constant steps, a few integer instructions per copy.
  const int64_t kstride = p.stride_k[2] * static_cast<int64_t>(sizeof(T));
  const int64_t vstride = p.stride_v[2] * static_cast<int64_t>(sizeof(T));
  constexpr int kStepKeys = 32 / S::kChunks, kStepChunks = 32 % S::kChunks;
  auto load_tile = [&](int64_t i) {
    const uint32_t dst = stage_s + static_cast<uint32_t>(i % stages) * S::kStageBytes;
    const int64_t kt = k0 + (warp + i * kMmaWarps) * S::kKeys;
    const int valid = static_cast<int>(std::min<int64_t>(k1 - kt, S::kKeys));
    const char* kp = reinterpret_cast<const char*>(kbase) + kt * kstride;
    const char* vp = reinterpret_cast<const char*>(vbase) + kt * vstride;
    int j = lane / S::kChunks, c = lane % S::kChunks;
    int64_t ko = j * kstride + c * 16, vo = j * vstride + c * 16;
#pragma unroll 1
    for (int x = 0; x < S::kLoads / 2; ++x) {
      const bool ok = j < valid;
      const uint32_t d = dst + j * S::kPitch + c * 16;
      cp_async16(d, ok ? kp + ko : kp, ok ? 16 : 0);
      cp_async16(d + S::kKeys * S::kPitch, ok ? vp + vo : vp, ok ? 16 : 0);
      j += kStepKeys;
      c += kStepChunks;
      ko += kStepKeys * kstride + kStepChunks * 16;
      vo += kStepKeys * vstride + kStepChunks * 16;
      if (c >= S::kChunks) {
        c -= S::kChunks;
        ++j;
        ko += kstride - S::kChunks * 16;
        vo += vstride - S::kChunks * 16;
      }
    }
    cp_async_commit();
  };
  // Prologue: the first stages - 1 tiles in flight; one commit group per tile (empty past the
  // last), so "tile i has landed" is always "at most stages - 1 groups pending".
  for (int s = 0; s < stages - 1; ++s) {
    if (s < my_tiles) load_tile(s);
    else cp_async_commit();
  }

  // q rows (zeros past `rows`) and the per-row constants, shared by the warps.
  // Every q load is issued before the first store (one memory latency, not one per element);
  // 16-byte loads when the rows allow.
  if (plan.q_vec) {
    constexpr int kQChunks = kMmaRows * S::kChunks, kPer = (kQChunks + kMmaWarps * 32 - 1) / (kMmaWarps * 32);
    uint4 qv[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int idx = u * kMmaWarps * 32 + tid, r = idx / S::kChunks, c = idx % S::kChunks;
      qv[u] = make_uint4(0, 0, 0, 0);
      if (idx < kQChunks && r < rows) {
        const int64_t h = h0 + r / q_len, i = r % q_len;
        qv[u] = cuda_device::load_cached16(static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1] +
                                           i * p.stride_q[2] + c * 8);
      }
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int idx = u * kMmaWarps * 32 + tid;
      if (idx < kQChunks) *reinterpret_cast<uint4*>(smem + idx / S::kChunks * S::kPitch + idx % S::kChunks * 16) = qv[u];
    }
  } else {
    constexpr int kPer = kMmaRows * D / (kMmaWarps * 32);
    T qv[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int idx = u * kMmaWarps * 32 + tid, r = idx / D, d = idx % D;
      qv[u] = T(0.f);
      if (r < rows) {
        const int64_t h = h0 + r / q_len, i = r % q_len;
        qv[u] = static_cast<const T*>(p.q)[b * p.stride_q[0] + h * p.stride_q[1] + i * p.stride_q[2] + d];
      }
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int idx = u * kMmaWarps * 32 + tid;
      reinterpret_cast<T*>(smem)[idx / D * (S::kPitch / 2) + idx % D] = qv[u];
    }
  }
  if (tid < kMmaRows) {
    DecodeRow row{0, 0, 0, 0};  // rows past `rows` see no key
    if (tid < rows) {
      const int64_t h = h0 + tid / q_len, i = tid % q_len;
      row = {key_end(p, len, shift, i), p.mask ? mask_offset(p, b, h, i, 0) : 0,
             b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2], (b * p.n_heads + h) * p.q_len + i};
    }
    row_s[tid] = row;
  }
  __syncthreads();
  const int64_t row_end[2] = {row_s[g].key_end, row_s[g + 8].key_end};
  const int64_t row_mask[2] = {row_s[g].mask_off, row_s[g + 8].mask_off};

  auto q_addr = [&](int ks) {
    return q_s + (lane % 8 + (lane / 8 % 2) * 8) * S::kPitch + (ks * 16 + (lane / 16) * 8) * 2;
  };
  uint32_t qf[S::kQInRegs ? S::kKSteps : 1][4];
  if constexpr (S::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < S::kKSteps; ++ks) ldmatrix_x4(qf[ks], q_addr(ks));
  }

  float o[S::kDTiles][4] = {};
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
  for (int64_t i = 0; i < my_tiles; ++i) {
    if (i + stages - 1 < my_tiles) load_tile(i + stages - 1);
    else cp_async_commit();
    if (stages == 1) cp_async_wait<0>();
    else cp_async_wait<1>();
    __syncwarp();
    const uint32_t ks_s = stage_s + static_cast<uint32_t>(i % stages) * S::kStageBytes, vs_s = ks_s + S::kKeys * S::kPitch;
    const int64_t kt = k0 + (warp + i * kMmaWarps) * S::kKeys;

    float s[S::kNTiles][4] = {};
#pragma unroll
    for (int ks = 0; ks < S::kKSteps; ++ks) {
      uint32_t a[4];
      if constexpr (S::kQInRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = qf[ks][x];
      } else {
        ldmatrix_x4(a, q_addr(ks));
      }
#pragma unroll
      for (int np = 0; np < S::kNTiles / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, ks_s + (np * 16 + lane % 8 + (lane / 16) * 8) * S::kPitch + (ks * 16 + (lane / 8 % 2) * 8) * 2);
        mma_m16n8k16<T>(s[2 * np], a[0], a[1], a[2], a[3], bk[0], bk[1]);
        mma_m16n8k16<T>(s[2 * np + 1], a[0], a[1], a[2], a[3], bk[2], bk[3]);
      }
    }
    // Log2 units; keys at or past a row's end are -inf, the mask adds to the rest.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int lim = static_cast<int>(std::clamp<int64_t>(row_end[hf] - kt, 0, S::kKeys));
#pragma unroll
      for (int nt = 0; nt < S::kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = nt * 8 + 2 * t4 + e;
          float v = j < lim ? s[nt][2 * hf + e] * scale_log2 : -INFINITY;
          if (p.mask && j < lim) v += mask_at<float>(p, row_mask[hf] + (kt + j) * p.stride_mask[3]) * kLog2e;
          s[nt][2 * hf + e] = v;
        }
      }
    }
    // Online softmax per row (rows g and g + 8; a row spans the 4 lanes of g).
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < S::kNTiles; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * hf], s[nt][2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_r[hf], mx), m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2_fast(m_r[hf] - m_use);
      m_r[hf] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < S::kNTiles; ++nt) {
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          s[nt][e] = exp2_fast(s[nt][e] - m_use);
          sum += s[nt][e];
        }
      }
      l_r[hf] = l_r[hf] * alpha + sum;  // this lane's share; the 4 lanes add at the end
#pragma unroll
      for (int dt = 0; dt < S::kDTiles; ++dt) {
        o[dt][2 * hf] *= alpha;
        o[dt][2 * hf + 1] *= alpha;
      }
    }
    // o += p v: two 8-key score tiles are the A fragment of one k16 step (p as hi + lo).
#pragma unroll
    for (int kk = 0; kk < S::kKeys / 16; ++kk) {
      uint32_t a[4], a_lo[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) split2<T>(s[2 * kk + x / 2][(x % 2) * 2], s[2 * kk + x / 2][(x % 2) * 2 + 1], a[x], a_lo[x]);
#pragma unroll
      for (int dp = 0; dp < S::kDTiles / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, vs_s + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S::kPitch + (dp * 16 + (lane / 16) * 8) * 2);
        mma_m16n8k16<T>(o[2 * dp], a[0], a[1], a[2], a[3], bv[0], bv[1]);
        mma_m16n8k16<T>(o[2 * dp + 1], a[0], a[1], a[2], a[3], bv[2], bv[3]);
        if constexpr (kExactP) {
          mma_m16n8k16<T>(o[2 * dp], a_lo[0], a_lo[1], a_lo[2], a_lo[3], bv[0], bv[1]);
          mma_m16n8k16<T>(o[2 * dp + 1], a_lo[0], a_lo[1], a_lo[2], a_lo[3], bv[2], bv[3]);
        }
      }
    }
    __syncwarp();  // the stage is refilled later
  }
  cp_async_wait<0>();  // no copy may land in the reduction buffers

  // The warps' partial results meet in shared memory (the stages are free once all are done).
  __syncthreads();
  float* red = reinterpret_cast<float*>(work);        // [warp][row][D]
  float* ml = red + kMmaWarps * kMmaRows * D;         // [warp][row][max, sum]
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = l_r[hf];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = warp * kMmaRows + g + 8 * hf;
    if (g + 8 * hf < rows) {
#pragma unroll
      for (int dt = 0; dt < S::kDTiles; ++dt)
        *reinterpret_cast<float2*>(red + r * D + dt * 8 + 2 * t4) = make_float2(o[dt][2 * hf], o[dt][2 * hf + 1]);
    }
    if (t4 == 0) {
      ml[2 * r] = m_r[hf];
      ml[2 * r + 1] = l;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * D; idx += kMmaWarps * 32) {
    const int r = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) mx = fmaxf(mx, ml[2 * (w * kMmaRows + r)]);
    const float m_use = mx == -INFINITY ? 0.f : mx;
    float out = 0.f, l = 0.f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const int wr = w * kMmaRows + r;
      const float wt = exp2f(ml[2 * wr] - m_use);  // 0 for a warp without keys
      out += wt * red[wr * D + d];
      l += wt * ml[2 * wr + 1];
    }
    if (plan.splits == 1) {
      store_out<T>(p, row_s[r].out_off + d, l == 0.f ? 0.f : out / l);
    } else {
      const int64_t at = row_s[r].part_row * plan.splits + split;
      part_acc[at * D + d] = out;  // zeros for an empty split
      if (d == 0) {
        part_ml[2 * at] = mx;
        part_ml[2 * at + 1] = l;
      }
    }
  }
}

// ---- simple: any shape, strides and float type; 4 warps x 4 query rows, 32-key tiles

constexpr int kSimpleRowsPerWarp = 4, kSimpleRows = 4 * kSimpleRowsPerWarp, kSimpleKeys = 32;
constexpr int kSimpleCols = 256;  // output columns per block (more: the grid repeats the scores)

template <typename A>
__device__ __forceinline__ A exp_a(A v) {
  if constexpr (std::is_same_v<A, float>) return expf(v);
  else return exp(v);
}

template <typename T, typename A>
__global__ void __launch_bounds__(128)
    attention_simple_kernel(const __grid_constant__ AttentionParams p, int64_t row_blocks, int64_t col_blocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* smem = reinterpret_cast<A*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t dk = p.head_dim;
  int64_t id = blockIdx.x;
  const int64_t cb = id % col_blocks;
  id /= col_blocks;
  const int64_t rb = id % row_blocks;
  id /= row_blocks;
  const int64_t h = id % p.n_heads, b = id / p.n_heads;
  const int64_t hkv = h * p.n_kv_heads / p.n_heads;
  const int64_t c0 = cb * kSimpleCols, cols = std::min<int64_t>(kSimpleCols, p.v_head_dim - c0);
  const int64_t len = valid_len(p, b), shift = p.causal_from_end ? len - p.q_len : 0;
  const int64_t r0 = rb * kSimpleRows;
  const int64_t kv_end = key_end(p, len, shift, std::min<int64_t>(r0 + kSimpleRows, p.q_len) - 1);
  A* q_s = smem;                                // [kSimpleRows][dk]
  A* k_s = q_s + kSimpleRows * dk;              // [kSimpleKeys][dk + 1]
  A* v_s = k_s + kSimpleKeys * (dk + 1);        // [kSimpleKeys][cols + 1]
  const T* q = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1];
  const T* k = static_cast<const T*>(p.k) + b * p.stride_k[0] + hkv * p.stride_k[1];
  const T* v = static_cast<const T*>(p.v) + b * p.stride_v[0] + hkv * p.stride_v[1] + c0;
  for (int64_t idx = threadIdx.x; idx < kSimpleRows * dk; idx += blockDim.x) {
    const int64_t r = idx / dk, d = idx % dk;
    q_s[idx] = r0 + r < p.q_len ? to_compute(q[(r0 + r) * p.stride_q[2] + d]) : A(0);
  }
  constexpr int kC = kSimpleCols / 32;
  A acc[kSimpleRowsPerWarp][kC] = {}, m[kSimpleRowsPerWarp], l[kSimpleRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kSimpleRowsPerWarp; ++rr) {
    m[rr] = A(-INFINITY);
    l[rr] = A(0);
  }
  const A scale = static_cast<A>(p.scale);
  for (int64_t kt = 0; kt < kv_end; kt += kSimpleKeys) {
    __syncthreads();  // the previous tile has been read
    for (int64_t idx = threadIdx.x; idx < kSimpleKeys * dk; idx += blockDim.x) {
      const int64_t j = idx / dk, d = idx % dk;
      k_s[j * (dk + 1) + d] = kt + j < kv_end ? to_compute(k[(kt + j) * p.stride_k[2] + d]) : A(0);
    }
    for (int64_t idx = threadIdx.x; idx < kSimpleKeys * cols; idx += blockDim.x) {
      const int64_t j = idx / cols, d = idx % cols;
      v_s[j * (cols + 1) + d] = kt + j < kv_end ? to_compute(v[(kt + j) * p.stride_v[2] + d]) : A(0);
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kSimpleRowsPerWarp; ++rr) {
      const int r = warp * kSimpleRowsPerWarp + rr;
      const int64_t row = r0 + r, key = kt + lane;
      if (row >= p.q_len) continue;  // warp-uniform
      A s = A(0);
      for (int64_t d = 0; d < dk; ++d) s += q_s[r * dk + d] * k_s[lane * (dk + 1) + d];
      s = key < key_end(p, len, shift, row) ? s * scale : A(-INFINITY);
      if (p.mask && s != A(-INFINITY)) s += mask_at<A>(p, mask_offset(p, b, h, row, key));
      A mx = s;
      for (int o = 16; o > 0; o >>= 1) mx = std::max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const A m_new = std::max(m[rr], mx), m_use = m_new == A(-INFINITY) ? A(0) : m_new;
      const A alpha = exp_a(m[rr] - m_use), e = exp_a(s - m_use);
      A sum = e;
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l[rr] = l[rr] * alpha + sum;
      m[rr] = m_new;
#pragma unroll
      for (int c = 0; c < kC; ++c) acc[rr][c] *= alpha;
      for (int jj = 0; jj < kSimpleKeys; ++jj) {
        const A pj = __shfl_sync(0xffffffffu, e, jj);
#pragma unroll
        for (int c = 0; c < kC; ++c)
          if (lane + 32 * c < cols) acc[rr][c] += pj * v_s[jj * (cols + 1) + lane + 32 * c];
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kSimpleRowsPerWarp; ++rr) {
    const int64_t row = r0 + warp * kSimpleRowsPerWarp + rr;
    if (row >= p.q_len) continue;
    const int64_t base = b * p.stride_out[0] + h * p.stride_out[1] + row * p.stride_out[2] + c0;
#pragma unroll
    for (int c = 0; c < kC; ++c)
      if (lane + 32 * c < cols) store_out<T>(p, base + lane + 32 * c, l[rr] == A(0) ? A(0) : acc[rr][c] / l[rr]);
  }
}

// ---- launch

// Head dims with a decode kernel instance.
template <typename F>
bool dispatch_decode_head_dim(int64_t d, F&& f) {
  switch (d) {
    case 64: f(std::integral_constant<int, 64>{}); return true;
    case 80: f(std::integral_constant<int, 80>{}); return true;
    case 96: f(std::integral_constant<int, 96>{}); return true;
    case 128: f(std::integral_constant<int, 128>{}); return true;
    case 256: f(std::integral_constant<int, 256>{}); return true;
    default: return false;
  }
}

// Decode: a handful of query rows per kv head, K / V rows 16-byte aligned for cp.async (and a
// head_dim dispatch_decode_head_dim has).
bool use_decode(const AttentionParams& p, size_t elem) {
  return p.q_len <= kDecodeMaxRows && p.n_heads % p.n_kv_heads == 0 && p.head_dim == p.v_head_dim &&
         rows_aligned16(p.k, p.stride_k, elem) && rows_aligned16(p.v, p.stride_v, elem);
}

// The query heads of one kv head in chunks of at most max_rows rows (heads x q_len); returns
// the (batch, kv head, chunk) units.
int64_t chunk_heads(const AttentionParams& p, int64_t max_rows, DecodePlan& plan) {
  const int64_t group = p.n_heads / p.n_kv_heads;
  plan.heads_per_chunk = std::min<int64_t>(group, max_rows / p.q_len);
  plan.chunks = (group + plan.heads_per_chunk - 1) / plan.heads_per_chunk;
  return p.batch * p.n_kv_heads * plan.chunks;
}

// A split-K decode kernel over units x plan.splits blocks, then (more than one split) the
// combine of its (max, sum, output) partials, launched as a programmatic dependent.
template <typename T, typename Kernel>
void launch_split_decode(const AttentionParams& p, const KernelLaunch& launch, Kernel kernel, int64_t units,
                         int threads, int smem, const DecodePlan& plan, int64_t d) {
  const int64_t rows = p.batch * p.n_heads * p.q_len;
  const size_t part = plan.splits > 1 ? static_cast<size_t>(rows * plan.splits) : 0;
  allocator::Scratch ml(launch.device(), part * 2 * sizeof(float), launch.stream());
  allocator::Scratch acc(launch.device(), part * static_cast<size_t>(d) * sizeof(float), launch.stream());
  launch_pdl("[scaled_dot_product_attention]", kernel, dim3(grid_of(units * plan.splits)), dim3(threads), smem,
             launch.stream(), p, plan, static_cast<float*>(ml.get()), static_cast<float*>(acc.get()));
  launch.check("[scaled_dot_product_attention]");
  if (plan.splits > 1)
    launch_pdl("[scaled_dot_product_attention]", attention_combine_kernel<T>, dim3(grid_of(rows)), dim3(kDecodeThreads),
               0, launch.stream(), p, plan.splits, static_cast<const float*>(ml.get()),
               static_cast<const float*>(acc.get()));
}

template <typename T, int D, int R>
void launch_decode(const AttentionParams& p, const DecodePlan& base, int64_t units, const KernelLaunch& launch) {
  using S = DecodeShape<T, D, R>;
  auto kernel = attention_decode_kernel<T, D, R>;
  // Blocks of two stages that fit on one SM (asked once per instance).
  static const int resident = (allow_smem(kernel, S::smem(2)), resident_blocks(kernel, kDecodeThreads, S::smem(2)));
  DecodePlan plan = base;
  const int64_t tiles = std::max<int64_t>(1, (p.kv_len + S::kTile - 1) / S::kTile);
  // Enough splits to fill every SM's resident blocks once, each a whole number of tiles and two
  // or more where the keys allow (the second tile's load overlaps the first one's math).
  const int64_t want = int64_t{resident} * launch.sm_count();
  plan.splits = std::clamp<int64_t>((want + units - 1) / units, 1, std::clamp<int64_t>(tiles / 2, 1, kMaxSplits));
  plan.tiles_per_split = (tiles + plan.splits - 1) / plan.splits;
  plan.splits = (tiles + plan.tiles_per_split - 1) / plan.tiles_per_split;
  plan.stages = plan.tiles_per_split > 1 ? 2 : 1;
  launch_split_decode<T>(p, launch, kernel, units, kDecodeThreads, S::smem(plan.stages), plan, D);
}

// float32 (SIMT): query heads of one kv head go to one block, at most 8 rows per block.
template <typename T, int D>
void launch_decode(const AttentionParams& p, const KernelLaunch& launch) {
  DecodePlan plan{};
  const int64_t units = chunk_heads(p, kDecodeMaxRows, plan);
  if (plan.heads_per_chunk * p.q_len <= 4) launch_decode<T, D, 4>(p, plan, units, launch);
  else launch_decode<T, D, kDecodeMaxRows>(p, plan, units, launch);
}

// Tensor-core decode: query heads of one kv head go to one block, at most 16 rows (heads x
// q_len); splits fill every SM's resident blocks once, each a whole number of tiles per warp.
template <typename T, int D>
void launch_decode_mma(const AttentionParams& p, const KernelLaunch& launch) {
  using S = DecodeMmaShape<D>;
  auto kernel = attention_decode_mma_kernel<T, D>;
  // Resident blocks per SM at 1..kMaxStages stages (asked once per instance).
  static const std::array<int, S::kMaxStages + 1> resident = [&] {
    allow_smem(kernel, S::smem(S::kMaxStages));
    std::array<int, S::kMaxStages + 1> r{};
    for (int s = 1; s <= S::kMaxStages; ++s) r[static_cast<size_t>(s)] = resident_blocks(kernel, kMmaWarps * 32, S::smem(s));
    return r;
  }();
  DecodePlan plan{};
  plan.q_vec = rows_aligned16(p.q, p.stride_q, sizeof(T));
  const int64_t units = chunk_heads(p, kMmaRows, plan);
  const int64_t tiles = std::max<int64_t>(1, (p.kv_len + S::kKeys - 1) / S::kKeys);
  // Splits fill every SM's resident blocks once, each a whole number of tiles per warp; a warp
  // with t tiles keeps min(t, kMaxStages) stages (t - 1 of them in flight while one computes).
  auto split = [&](int stages) {
    const int64_t want = int64_t{resident[static_cast<size_t>(stages)]} * launch.sm_count();
    plan.splits = std::clamp<int64_t>((want + units - 1) / units, 1, std::clamp<int64_t>(tiles / kMmaWarps, 1, kMaxSplits));
    plan.tiles_per_split = (tiles + plan.splits - 1) / plan.splits;
    plan.tiles_per_split = (plan.tiles_per_split + kMmaWarps - 1) / kMmaWarps * kMmaWarps;
    plan.splits = (tiles + plan.tiles_per_split - 1) / plan.tiles_per_split;
    return static_cast<int>(std::min<int64_t>(plan.tiles_per_split / kMmaWarps, S::kMaxStages));
  };
  plan.stages = split(S::kMaxStages);
  if (plan.stages < S::kMaxStages) plan.stages = split(plan.stages);
  launch_split_decode<T>(p, launch, kernel, units, kMmaWarps * 32, S::smem(plan.stages), plan, D);
}

template <typename T>
void launch_simple(const AttentionParams& p, const KernelLaunch& launch) {
  using A = cuda_device::compute_t<T>;
  auto kernel = attention_simple_kernel<T, A>;
  static const bool configured = (allow_smem(kernel, kMaxSmem), true);
  (void)configured;
  const int64_t cols = std::min<int64_t>(kSimpleCols, p.v_head_dim);
  const int64_t smem = (kSimpleRows * p.head_dim + kSimpleKeys * (p.head_dim + 1) + kSimpleKeys * (cols + 1)) *
                       static_cast<int64_t>(sizeof(A));
  ANVIL_CHECK(smem <= kMaxSmem, ShapeError, "[scaled_dot_product_attention] head_dim ", p.head_dim,
              " is too large for the CUDA kernel");
  const int64_t row_blocks = (p.q_len + kSimpleRows - 1) / kSimpleRows;
  const int64_t col_blocks = (p.v_head_dim + kSimpleCols - 1) / kSimpleCols;
  kernel<<<grid_of(p.batch * p.n_heads * row_blocks * col_blocks), 128, static_cast<size_t>(smem), launch.stream()>>>(
      p, row_blocks, col_blocks);
}

}  // namespace

void attention(const AttentionParams& p) {
  if (p.batch == 0 || p.n_heads == 0 || p.q_len == 0 || p.v_head_dim == 0) return;
  ANVIL_CHECK(p.n_kv_heads > 0, ShapeError, "[scaled_dot_product_attention] n_kv_heads must be positive");
  check_mask_dtype(p, "[scaled_dot_product_attention]");
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[scaled_dot_product_attention]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, double>) {
      if (use_decode(p, sizeof(T)) && dispatch_decode_head_dim(p.head_dim, [&](auto d) {
            if constexpr (std::is_same_v<T, float>) launch_decode<T, decltype(d)::value>(p, launch);
            else launch_decode_mma<T, decltype(d)::value>(p, launch);
          }))
        return;
    }
    if (attention_prefill(p, launch)) return;
    launch_simple<T>(p, launch);
  });
  launch.check("[scaled_dot_product_attention]");
}

}  // namespace anvil::cuda_backend
