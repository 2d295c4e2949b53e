// Attention on CUDA: out = softmax(q k^T * scale + mask) v per (batch, query head), with float32
// scores, softmax and accumulation and one rounding at the store (AttentionParams, core/params.h).
//  decode (q_len <= 8, head_dim = v_head_dim in {64, 80, 96, 128, 256}, 16-byte K / V rows):
//    split-K over the keys (flash-decoding); a block serves the query heads of one kv head over
//    one key range, so K and V leave DRAM once. Splits write (max, sum, unnormalised output)
//    partials that a second kernel combines; it is launched as a programmatic dependent, so its
//    blocks wait resident instead of being launched after the first kernel drains.
//    bfloat16 / float16: tensor cores. The rows (heads x q_len <= 16) are one m16 tile; each of
//    4 warps streams its own 32-key (16 at head_dim >= 128) tiles through a cp.async double
//    buffer and runs q k^T and p v on mma.sync (p as hi + lo, as in the prefill).
//    float32: SIMT, 256 threads over 8 rows, key tiles shared by the block.
//  prefill (bfloat16 / float16, head_dim = v_head_dim <= 256, a multiple of 8, 16-byte rows):
//    compute capability 9.0 without attn_mask: wgmma + TMA (FlashAttention-3's structure): a
//    block per 128 query rows = two computing warpgroups and one loading warpgroup, p rounded
//    once to T for the p v product (see attention_prefill_wgmma_kernel).
//    Otherwise FlashAttention-2: a block per 128 query rows (64 above head_dim 128) of one head,
//    4 warps of 16-row m-tiles, mma.sync m16n8k16 for q k^T and p v with float32 accumulators,
//    online softmax in registers; K / V tiles double-buffered by cp.async; causal blocks stop at
//    their last visible key. p enters the p v product as two 16-bit terms (see kExactP).
//  simple (everything else: float32 / float64 beyond decode, odd head dims, unaligned rows,
//    head_dim > 256): 16 query rows per block, 32-key tiles converted into shared memory, a lane
//    per key for the scores and per output column for p v.
// Scores live in log2 units (x log2(e)) so that every exponential is one ex2.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <bit>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels.h"
#include "cuda/allocator.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/wgmma.cuh"
#include "cuda/device/wgmma_ops.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::cp_async16;
using cuda_device::cp_async_commit;
using cuda_device::cp_async_wait;
using cuda_device::ldmatrix_x4;
using cuda_device::ldmatrix_x4_trans;
using cuda_device::mma_m16n8k16;
using cuda_device::smem_u32;
using cuda_device::to_compute;

constexpr float kLog2e = 1.4426950408889634f;
// The prefill's p v product takes p as hi + lo in two 16-bit mma operands: rounding p once to
// bfloat16 (FlashAttention's choice) moves the output by up to 2^-9 of sum |p v|, more than
// float32 accumulation allows. 1.5x the mma work; false restores the single product.
constexpr bool kExactP = true;
constexpr int kMaxSmem = 227 * 1024;  // per block on sm_90

// ---- shared helpers

// Valid keys of batch b: kv_lens[b] clamped to [0, kv_len], or kv_len.
__device__ __forceinline__ int64_t valid_len(const AttentionParams& p, int64_t b) {
  if (!p.kv_lens) return p.kv_len;
  return std::min<int64_t>(std::max<int64_t>(p.kv_lens[b], 0), p.kv_len);
}

// Query row i attends keys j < key_end(i); shift = len - q_len for bottom-right causal.
__device__ __forceinline__ int64_t key_end(const AttentionParams& p, int64_t len, int64_t shift, int64_t i) {
  return p.causal ? std::max<int64_t>(0, std::min(len, i + shift + 1)) : len;
}

// Additive mask value at element offset `off`, natural-log units; bool false is -inf.
template <typename A>
__device__ __forceinline__ A mask_at(const AttentionParams& p, int64_t off) {
  switch (p.mask_dtype) {
    case DType::Bool: return static_cast<const bool*>(p.mask)[off] ? A(0) : A(-INFINITY);
    case DType::BFloat16: return to_compute(static_cast<const BFloat16*>(p.mask)[off]);
    case DType::Float16: return to_compute(static_cast<const Half*>(p.mask)[off]);
    case DType::Float64: return static_cast<A>(static_cast<const double*>(p.mask)[off]);
    default: return static_cast<const float*>(p.mask)[off];
  }
}

__device__ __forceinline__ int64_t mask_offset(const AttentionParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return b * p.stride_mask[0] + h * p.stride_mask[1] + i * p.stride_mask[2] + j * p.stride_mask[3];
}

// 2^x; ex2.approx flushes results below 2^-126 to zero, which no softmax weight notices.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 16 bytes of float32 (the SIMT decode kernel's K / V rows) -> 4 floats.
template <typename T>
__device__ __forceinline__ void unpack16(const void* src, float* f) {
  static_assert(std::is_same_v<T, float>, "16-bit types take the tensor-core decode kernel");
  const float4 v = *static_cast<const float4*>(src);
  f[0] = v.x;
  f[1] = v.y;
  f[2] = v.z;
  f[3] = v.w;
}

// Two floats -> one register of the mma operand type, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// p = hi + lo in the mma operand type: hi is p rounded, lo the rounding error rounded, so
// hi v + lo v carries p to about twice the type's precision (lo = 0 without kExactP).
template <typename T>
__device__ __forceinline__ void split2(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  hi = pack2<T>(p0, p1);
  if constexpr (kExactP) {
    float h[2];
    if constexpr (std::is_same_v<T, BFloat16>) {
      h[0] = __uint_as_float(hi << 16);
      h[1] = __uint_as_float(hi & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      h[0] = f.x;
      h[1] = f.y;
    }
    lo = pack2<T>(p0 - h[0], p1 - h[1]);  // exact differences
  } else {
    lo = 0;
  }
}

template <typename T, typename A>
__device__ __forceinline__ void store_out(const AttentionParams& p, int64_t off, A v) {
  static_cast<T*>(p.out)[off] = cuda_device::from_compute<T>(v);
}

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
  const int64_t hkv = id % p.heads_kv, b = id / p.heads_kv;
  const int64_t group = p.heads_q / p.heads_kv;
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
                  b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2], (b * p.heads_q + h) * p.q_len + i};
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
    const uint32_t heads = static_cast<uint32_t>(p.heads_q);
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
  const uint32_t heads_kv = static_cast<uint32_t>(p.heads_kv), q_len = static_cast<uint32_t>(p.q_len);
  const int64_t split = id % splits;
  id /= splits;
  const uint32_t chunk = id % chunks;
  id /= chunks;
  const int64_t hkv = id % heads_kv, b = id / heads_kv;
  const int group = static_cast<int>(p.heads_q / p.heads_kv), per_chunk = static_cast<int>(plan.heads_per_chunk);
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
             b * p.stride_out[0] + h * p.stride_out[1] + i * p.stride_out[2], (b * p.heads_q + h) * p.q_len + i};
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

// ---- prefill: FlashAttention-2 with mma.sync; one block per (batch, head, row block)

// The (batch, head, row block) a prefill block serves, its valid keys and key tiles; causal
// grids run the longest row blocks first.
struct PrefillBlock {
  int64_t b, h, hkv, len, shift, r0, kv_end, tiles;
};
__device__ __forceinline__ PrefillBlock prefill_block(const AttentionParams& p, int64_t row_blocks, int rows,
                                                      int keys) {
  PrefillBlock k{};
  int64_t id = blockIdx.x;
  int64_t rb = id % row_blocks;
  id /= row_blocks;
  if (p.causal) rb = row_blocks - 1 - rb;
  k.h = id % p.heads_q;
  k.b = id / p.heads_q;
  k.hkv = k.h * p.heads_kv / p.heads_q;
  k.len = valid_len(p, k.b);
  k.shift = p.causal_from_end ? k.len - p.q_len : 0;
  k.r0 = rb * rows;
  k.kv_end = key_end(p, k.len, k.shift, std::min<int64_t>(k.r0 + rows, p.q_len) - 1);
  k.tiles = (k.kv_end + keys - 1) / keys;
  return k;
}

constexpr int kPrefillWarps = 4;

template <int D>  // D: the head dim padded to a multiple of 16
struct PrefillShape {
  static constexpr int kMTiles = D <= 128 ? 2 : 1;         // 16-row m-tiles per warp
  static constexpr int kRows = kPrefillWarps * 16 * kMTiles;
  static constexpr int kKeys = D <= 64 ? 64 : 32;          // keys per tile
  static constexpr int kChunks = D / 8;                    // 16-byte chunks per row
  static constexpr int kPitch = D * 2 + 16;                // bytes: an odd number of 16-byte units
  static constexpr int kKSteps = D / 16;
  static constexpr int kNTiles = kKeys / 8;                // 8-key tiles of the scores
  static constexpr int kDTiles = D / 8;                    // 8-column tiles of the output
  static constexpr bool kQInRegs = kMTiles * kKSteps * 4 <= 32;
  static constexpr int kStageBytes = 2 * kKeys * kPitch;   // K then V
  static constexpr int kSmem = kRows * kPitch + 2 * kStageBytes;
  static_assert(D % 16 == 0 && (D / 8) % 2 == 0);
};

template <typename T, int D>
__global__ void __launch_bounds__(kPrefillWarps * 32)
    attention_prefill_kernel(const __grid_constant__ AttentionParams p, int64_t row_blocks) {
  using S = PrefillShape<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_s = smem_u32(smem), kv_s = q_s + S::kRows * S::kPitch;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t4 = lane % 4;

  const PrefillBlock blk = prefill_block(p, row_blocks, S::kRows, S::kKeys);
  const int64_t b = blk.b, h = blk.h, hkv = blk.hkv, len = blk.len, shift = blk.shift, r0 = blk.r0;
  const int64_t kv_end = blk.kv_end, tiles = blk.tiles;
  const int64_t rw0 = r0 + warp * 16 * S::kMTiles, rw1 = rw0 + 16 * S::kMTiles - 1;  // this warp's rows
  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;

  const T* qbase = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1];
  const T* kbase = static_cast<const T*>(p.k) + b * p.stride_k[0] + hkv * p.stride_k[1];
  const T* vbase = static_cast<const T*>(p.v) + b * p.stride_v[0] + hkv * p.stride_v[1];
  // Rows [row0, row0 + n) of one operand into shared memory; rows past `limit` and columns past
  // head_dim are zero-filled, so padded products add zeros and unread keys hold no NaN.
  auto load_rows = [&](uint32_t dst, const T* base, int64_t stride_row, int64_t row0, int n, int64_t limit) {
    for (int idx = tid; idx < n * S::kChunks; idx += kPrefillWarps * 32) {
      const int r = idx / S::kChunks, c = idx % S::kChunks;
      const bool ok = row0 + r < limit && c * 8 < p.head_dim;
      cp_async16(dst + r * S::kPitch + c * 16, ok ? base + (row0 + r) * stride_row + c * 8 : base, ok ? 16 : 0);
    }
  };
  auto load_kv = [&](int64_t t) {
    const uint32_t st = kv_s + (t % 2) * S::kStageBytes;
    load_rows(st, kbase, p.stride_k[2], t * S::kKeys, S::kKeys, kv_end);
    load_rows(st + S::kKeys * S::kPitch, vbase, p.stride_v[2], t * S::kKeys, S::kKeys, kv_end);
  };

  float o[S::kMTiles][S::kDTiles][4] = {};
  float m_r[S::kMTiles][2], l_r[S::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt) {
    m_r[mt][0] = m_r[mt][1] = -INFINITY;
    l_r[mt][0] = l_r[mt][1] = 0.f;
  }
  uint32_t qf[S::kQInRegs ? S::kMTiles : 1][S::kQInRegs ? S::kKSteps : 1][4];
  // A operand (16 rows x 16 columns of q) at this lane's ldmatrix row address.
  auto q_addr = [&](int mt, int ks) {
    return q_s + (warp * 16 * S::kMTiles + mt * 16 + lane % 8 + (lane / 8 % 2) * 8) * S::kPitch +
           (ks * 16 + (lane / 16) * 8) * 2;
  };

  if (tiles > 0) {
    load_rows(q_s, qbase, p.stride_q[2], r0, S::kRows, p.q_len);
    load_kv(0);
  }
  cp_async_commit();
  for (int64_t t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) load_kv(t + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (S::kQInRegs) {
      if (t == 0) {
#pragma unroll
        for (int mt = 0; mt < S::kMTiles; ++mt)
#pragma unroll
          for (int ks = 0; ks < S::kKSteps; ++ks) ldmatrix_x4(qf[mt][ks], q_addr(mt, ks));
      }
    }
    const int64_t kt = t * S::kKeys;
    // A warp whose rows all end before this tile (causal) has nothing to add.
    if (!(p.causal && kt > rw1 + shift)) {
      const uint32_t ks_s = kv_s + (t % 2) * S::kStageBytes, vs_s = ks_s + S::kKeys * S::kPitch;
      float s[S::kMTiles][S::kNTiles][4] = {};
#pragma unroll
      for (int ks = 0; ks < S::kKSteps; ++ks) {
        uint32_t a[S::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < S::kMTiles; ++mt) {
          if constexpr (S::kQInRegs) {
#pragma unroll
            for (int x = 0; x < 4; ++x) a[mt][x] = qf[mt][ks][x];
          } else {
            ldmatrix_x4(a[mt], q_addr(mt, ks));
          }
        }
#pragma unroll
        for (int np = 0; np < S::kNTiles / 2; ++np) {
          uint32_t bk[4];
          ldmatrix_x4(bk, ks_s + (np * 16 + lane % 8 + (lane / 16) * 8) * S::kPitch +
                              (ks * 16 + (lane / 8 % 2) * 8) * 2);
#pragma unroll
          for (int mt = 0; mt < S::kMTiles; ++mt) {
            mma_m16n8k16<T>(s[mt][2 * np], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bk[0], bk[1]);
            mma_m16n8k16<T>(s[mt][2 * np + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bk[2], bk[3]);
          }
        }
      }
      // Scale to log2 units; the tiles that cross a boundary (valid length, causal diagonal,
      // any mask) check each element.
#pragma unroll
      for (int mt = 0; mt < S::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < S::kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] *= scale_log2;
      if (kt + S::kKeys > len || (p.causal && kt + S::kKeys - 1 > rw0 + shift)) {
        // Row (mt, hf) keeps tile keys [0, lim): 32-bit compares, one limit per row.
#pragma unroll
        for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int64_t end = key_end(p, len, shift, rw0 + mt * 16 + g + 8 * hf) - kt;
            const int lim = static_cast<int>(std::clamp<int64_t>(end, 0, S::kKeys));
#pragma unroll
            for (int nt = 0; nt < S::kNTiles; ++nt) {
              if (nt * 8 + 2 * t4 >= lim) s[mt][nt][2 * hf] = -INFINITY;
              if (nt * 8 + 2 * t4 + 1 >= lim) s[mt][nt][2 * hf + 1] = -INFINITY;
            }
          }
        }
      }
      if (p.mask) {
#pragma unroll
        for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            // rows past q_len are never stored: they read the last row's mask
            const int64_t row = std::min<int64_t>(rw0 + mt * 16 + g + 8 * hf, p.q_len - 1);
            const int64_t off = mask_offset(p, b, h, row, kt + 2 * t4);
            const int64_t valid = len - kt - 2 * t4;  // keys past the valid length: already -inf, not read
#pragma unroll
            for (int nt = 0; nt < S::kNTiles; ++nt) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                if (nt * 8 + e < valid)
                  s[mt][nt][2 * hf + e] += mask_at<float>(p, off + (nt * 8 + e) * p.stride_mask[3]) * kLog2e;
              }
            }
          }
        }
      }
      // Online softmax per row (rows g and g + 8 of each m-tile; a row spans the 4 lanes of g).
#pragma unroll
      for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < S::kNTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_r[mt][hf], mx), m_use = m_new == -INFINITY ? 0.f : m_new;
          const float alpha = exp2_fast(m_r[mt][hf] - m_use);
          m_r[mt][hf] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < S::kNTiles; ++nt) {
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
              s[mt][nt][e] = exp2_fast(s[mt][nt][e] - m_use);
              sum += s[mt][nt][e];
            }
          }
          l_r[mt][hf] = l_r[mt][hf] * alpha + sum;  // this lane's share; the 4 lanes add at the end
#pragma unroll
          for (int dt = 0; dt < S::kDTiles; ++dt) {
            o[mt][dt][2 * hf] *= alpha;
            o[mt][dt][2 * hf + 1] *= alpha;
          }
        }
      }
      // o += p v: the score accumulators of two 8-key tiles are the A fragment of one k16 step.
#pragma unroll
      for (int kk = 0; kk < S::kKeys / 16; ++kk) {
        uint32_t a[S::kMTiles][4], a_lo[S::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int nt = 2 * kk + x / 2, e = (x % 2) * 2;
            split2<T>(s[mt][nt][e], s[mt][nt][e + 1], a[mt][x], a_lo[mt][x]);
          }
        }
#pragma unroll
        for (int dp = 0; dp < S::kDTiles / 2; ++dp) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, vs_s + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S::kPitch +
                                    (dp * 16 + (lane / 16) * 8) * 2);
#pragma unroll
          for (int mt = 0; mt < S::kMTiles; ++mt) {
            mma_m16n8k16<T>(o[mt][2 * dp], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bv[0], bv[1]);
            mma_m16n8k16<T>(o[mt][2 * dp + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bv[2], bv[3]);
            if constexpr (kExactP) {
              mma_m16n8k16<T>(o[mt][2 * dp], a_lo[mt][0], a_lo[mt][1], a_lo[mt][2], a_lo[mt][3], bv[0], bv[1]);
              mma_m16n8k16<T>(o[mt][2 * dp + 1], a_lo[mt][0], a_lo[mt][1], a_lo[mt][2], a_lo[mt][3], bv[2], bv[3]);
            }
          }
        }
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = l_r[mt][hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l == 0.f ? 0.f : 1.f / l;  // a row with no key gives zeros
      const int64_t row = rw0 + mt * 16 + g + 8 * hf;
      if (row >= p.q_len) continue;
      const int64_t base = b * p.stride_out[0] + h * p.stride_out[1] + row * p.stride_out[2];
#pragma unroll
      for (int dt = 0; dt < S::kDTiles; ++dt) {
        const int d = dt * 8 + 2 * t4;
        if (d < p.v_head_dim) store_out<T>(p, base + d, o[mt][dt][2 * hf] * inv);
        if (d + 1 < p.v_head_dim) store_out<T>(p, base + d + 1, o[mt][dt][2 * hf + 1] * inv);
      }
    }
  }
}

// ---- prefill on Hopper (sm_90a): FlashAttention-2's loop on wgmma; one block per (batch,
// head, row block) of two warpgroups, 64 query rows each. Per key tile: s = q k^T as one
// m64nK wgmma chain per warpgroup (q and k from swizzled shared memory), the online softmax on
// the accumulator fragment, then o += p v with p in registers (rounded once to T, as in
// FlashAttention: the output moves by at most u_T sum_j p_j |v_j| / l) and v read MN-major.
// K / V tiles are double-buffered by cp.async, one block barrier per tile.

template <int D>  // D: the head dim padded (16, 32, ..., 128 or 256)
struct WgPrefillShape {
  static constexpr int kGroups = 2;  // warpgroups
  static constexpr int kThreads = kGroups * 128;
  static constexpr int kRows = kGroups * 64;
  static constexpr int kKeys = D <= 128 ? 128 : 64;  // keys per tile: the q k^T product's N
  static constexpr int kSw = (2 * D) % 128 == 0 ? 128 : (2 * D) % 64 == 0 ? 64 : 32;  // swizzle bytes
  static constexpr int kChunks = D / 8;                // 16-byte chunks per row
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;     // one K or V tile
  // q, two stages of K and V, the TMA variant's 9 barriers; 1024: base alignment
  static constexpr int kSmem = kQBytes + 4 * kTileBytes + 128 + 1024;
  static_assert(D % 16 == 0 && kQBytes % 1024 == 0 && kTileBytes % 1024 == 0 && kSmem <= kMaxSmem);
};

// TMA maps of q, k, v ([B, H, rows, head_dim] as 4-D boxes of one swizzle atom x the tile rows).
struct PrefillMaps {
  CUtensorMap q, k, v;
};

// o (the m64nD fragment) += p (registers: the A operands of kKeys / 16 k16 steps) v (a swizzled
// kKeys x D tile, MN-major, descriptor of its first k16 step), issued and committed, not waited.
template <typename T, int D, int Keys, int Sw>
__device__ __forceinline__ void wgmma_pv(float (&o)[D / 2], const uint32_t (&pa)[Keys / 16][4], uint64_t v_desc) {
  cuda_device::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Keys / 16; ++kk)
    cuda_device::Wgmma<T, D>::rs_mn(o, pa[kk], v_desc + cuda_device::WgmmaTile<Sw>::mn_step(kk), 1);
  cuda_device::wgmma_commit();
}

// kTma: a third warpgroup (one thread of it) loads q, K and V by TMA into barrier-tracked stages
// (the consumers release a stage by arriving on its `empty` barrier; no block barrier in the
// loop) and gives most of its registers to the two computing warpgroups (setmaxnreg); else
// every thread loads its share by cp.async behind one block barrier per step.
constexpr int kLoadRegs = 40, kComputeRegs = 232;  // 128 x 40 + 256 x 232 <= 64K registers
template <typename T, int D, bool kTma>
__global__ void __launch_bounds__(WgPrefillShape<D>::kThreads + (kTma ? 128 : 0), 1)
    attention_prefill_wgmma_kernel(const __grid_constant__ AttentionParams p, int64_t row_blocks,
                                   const __grid_constant__ PrefillMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgPrefillShape<D>;
  using Tile = cuda_device::WgmmaTile<S::kSw>;
  using cuda_device::reg_fence;
  extern __shared__ unsigned char smem_wg[];
  const uint32_t q_s = (smem_u32(smem_wg) + 1023u) & ~1023u, kv_s = q_s + S::kQBytes;
  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;

  const PrefillBlock blk = prefill_block(p, row_blocks, S::kRows, S::kKeys);
  const int64_t b = blk.b, h = blk.h, hkv = blk.hkv, len = blk.len, shift = blk.shift, r0 = blk.r0;
  const int64_t kv_end = blk.kv_end, tiles = blk.tiles;
  const int64_t rg0 = r0 + wg * 64, rw0 = rg0 + warp * 16;  // first row of this warpgroup / warp
  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;

  const T* qbase = static_cast<const T*>(p.q) + b * p.stride_q[0] + h * p.stride_q[1];
  const T* kbase = static_cast<const T*>(p.k) + b * p.stride_k[0] + hkv * p.stride_k[1];
  const T* vbase = static_cast<const T*>(p.v) + b * p.stride_v[0] + hkv * p.stride_v[1];
  // This thread's share of a tile load: chunk c of rows r0 + i R (R = threads / chunks rounded
  // up to a power of two; threads past the chunk count idle), addresses stepped, not recomputed.
  // Rows past `limit` and columns past head_dim are zero-filled (padded products add zeros,
  // unread keys hold no NaN).
  constexpr int kChunkSlots = std::bit_ceil(static_cast<unsigned>(S::kChunks));
  constexpr int kStep = S::kThreads / kChunkSlots;  // rows per step, a multiple of 8: one swizzle phase
  static_assert(kStep % 8 == 0 && S::kKeys % kStep == 0 && S::kRows % kStep == 0);
  const int lc = tid % kChunkSlots, lr = tid / kChunkSlots;
  const bool col_ok = lc < S::kChunks && lc * 8 < p.head_dim;
  auto load_rows = [&](uint32_t dst, const T* src, int64_t stride_row, int n, int64_t rows_left) {
    if (lc >= S::kChunks) return;
    dst += Tile::offset(n, lr, lc * 16);
    src += lr * stride_row + lc * 8;
#pragma unroll 4
    for (int i = 0; i < n / kStep; ++i) {
      const bool ok = col_ok && lr + i * kStep < rows_left;
      cp_async16(dst + i * kStep * S::kSw, ok ? src : kbase, ok ? 16 : 0);
      src += kStep * stride_row;
    }
  };
  // Stage st of K at kv_s + 2 st kTileBytes, of V right after it; V runs one tile behind K.
  auto k_stage = [&](int64_t t) { return kv_s + static_cast<uint32_t>(t & 1) * 2 * S::kTileBytes; };
  auto v_stage = [&](int64_t t) { return k_stage(t) + S::kTileBytes; };
  auto load_tile = [&](uint32_t dst, const T* base, int64_t stride_row, int64_t t) {
    if (t < tiles) load_rows(dst, base + t * S::kKeys * stride_row, stride_row, S::kKeys, kv_end - t * S::kKeys);
  };
  // TMA barriers: full_q, full_k[2], full_v[2] (one arrival + the bytes), empty_k[2],
  // empty_v[2] (every consumer thread).
  const uint32_t bars = kv_s + 4 * S::kTileBytes;
  auto full_q = [&] { return bars; };
  auto full_k = [&](int64_t t) { return bars + 8 + 8 * static_cast<uint32_t>(t & 1); };
  auto full_v = [&](int64_t t) { return bars + 24 + 8 * static_cast<uint32_t>(t & 1); };
  auto empty_k = [&](int64_t t) { return bars + 40 + 8 * static_cast<uint32_t>(t & 1); };
  auto empty_v = [&](int64_t t) { return bars + 56 + 8 * static_cast<uint32_t>(t & 1); };
  // Step 0 adds p v of a tile "-1" (p = 0) to keep one pipeline shape: its V stage (stage 1)
  // must hold no NaN, so it starts zeroed.
  if (tid < S::kThreads && tiles > 0) {
    for (int i = tid; i < S::kTileBytes / 16; i += S::kThreads)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(v_stage(1) + i * 16), "r"(0) : "memory");
  }
  if constexpr (kTma) {
    if (tid == 0) {
      cuda_device::mbar_init(full_q(), 1);
      for (int st = 0; st < 2; ++st) {
        cuda_device::mbar_init(full_k(st), 1);
        cuda_device::mbar_init(full_v(st), 1);
        cuda_device::mbar_init(empty_k(st), S::kThreads);
        cuda_device::mbar_init(empty_v(st), S::kThreads);
      }
      cuda_device::mbar_init_fence();
    }
    cuda_device::fence_proxy_async_smem();
    __syncthreads();
    if (tid >= S::kThreads) {  // the load warpgroup: its first warp issues, the others leave
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kLoadRegs));
      if (tiles == 0 || tid >= S::kThreads + 32) return;
      constexpr int kAtoms = 2 * D / S::kSw, kAtomCols = S::kSw / 2;
      if (lane == 0) {
        cuda_device::mbar_arrive_expect_tx(full_q(), S::kQBytes);
        for (int a = 0; a < kAtoms; ++a)
          cuda_device::tma_load_4d(q_s + a * S::kRows * S::kSw, &maps.q, a * kAtomCols, static_cast<int>(r0),
                                   static_cast<int>(h), static_cast<int>(b), full_q());
      }
      for (int64_t t = 0; t < tiles; ++t) {
        const int row = static_cast<int>(t * S::kKeys);
        if (t >= 2) cuda_device::mbar_wait(empty_k(t), static_cast<uint32_t>((t >> 1) - 1) & 1);  // K(t - 2) released
        if (lane == 0) {
          cuda_device::mbar_arrive_expect_tx(full_k(t), S::kTileBytes);
          for (int a = 0; a < kAtoms; ++a)
            cuda_device::tma_load_4d(k_stage(t) + a * S::kKeys * S::kSw, &maps.k, a * kAtomCols, row,
                                     static_cast<int>(hkv), static_cast<int>(b), full_k(t));
        }
        // V(t - 2) released (stage 1 first holds the zero tile "-1", released at step 0)
        if (t >= 1) cuda_device::mbar_wait(empty_v(t), static_cast<uint32_t>((t - 2 + (t & 1)) >> 1) & 1);
        if (t == tiles - 1 && kv_end % S::kKeys != 0) {
          // The last V tile: rows past kv_end may hold NaN (a cache's unused slots) that p = 0
          // would not cancel, so they are zero-filled by cp.async instead.
          for (int idx = lane; idx < S::kKeys * S::kChunks; idx += 32) {
            const int r = idx / S::kChunks, c = idx % S::kChunks;
            const bool ok = row + r < kv_end && c * 8 < p.head_dim;
            cp_async16(v_stage(t) + Tile::offset(S::kKeys, r, c * 16), ok ? vbase + (row + r) * p.stride_v[2] + c * 8 : vbase,
                       ok ? 16 : 0);
          }
          cp_async_commit();
          cp_async_wait<0>();
          cuda_device::fence_proxy_async_smem();
          __syncwarp();
          if (lane == 0) cuda_device::mbar_arrive(full_v(t));
        } else if (lane == 0) {
          cuda_device::mbar_arrive_expect_tx(full_v(t), S::kTileBytes);
          for (int a = 0; a < kAtoms; ++a)
            cuda_device::tma_load_4d(v_stage(t) + a * S::kKeys * S::kSw, &maps.v, a * kAtomCols, row,
                                     static_cast<int>(hkv), static_cast<int>(b), full_v(t));
        }
      }
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kComputeRegs));
  }

  float o[D / 2] = {};  // the m64nD fragment: o[4 dt + 2 hf + e] = row g + 8 hf, column 8 dt + 2 t4 + e
  float s[S::kKeys / 2];  // the m64nK fragment: s[4 j + 2 hf + e] = row g + 8 hf, key 8 j + 2 t4 + e
  uint32_t pa[S::kKeys / 16][4] = {};  // p of the previous tile: the A operand of k16 step kk
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f}, alpha[2];
  // Tile t's scores -> weights (in s, float32) while the tensor cores add tile t - 1's p v; then
  // o is rescaled and p packed for the next step's p v.
  auto softmax = [&](int64_t t) {
    const int64_t kt = t * S::kKeys;
    // Scores enter the exponent as s f - m. Tiles that cross a boundary (valid length, causal
    // diagonal) or meet a negative scale are scaled first (f = 1) and checked per element; the
    // rest fold the scale into the exponent's multiply-add.
    float f = scale_log2;
    if (kt + S::kKeys > len || (p.causal && kt + S::kKeys - 1 > rw0 + shift) || scale_log2 < 0.f) {
#pragma unroll
      for (float& x : s) x *= scale_log2;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int lim = static_cast<int>(std::clamp<int64_t>(key_end(p, len, shift, rw0 + g + 8 * hf) - kt, 0, S::kKeys));
#pragma unroll
        for (int j = 0; j < S::kKeys / 8; ++j) {
          if (j * 8 + 2 * t4 >= lim) s[4 * j + 2 * hf] = -INFINITY;
          if (j * 8 + 2 * t4 + 1 >= lim) s[4 * j + 2 * hf + 1] = -INFINITY;
        }
      }
      f = 1.f;
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      // Four independent chains per reduction: the dependent latency, not the count, bounds it.
      float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < S::kKeys / 8; ++j) mx[j % 4] = fmaxf(mx[j % 4], fmaxf(s[4 * j + 2 * hf], s[4 * j + 2 * hf + 1]));
      float m = fmaxf(fmaxf(mx[0], mx[1]), fmaxf(mx[2], mx[3]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const float m_new = fmaxf(m_r[hf], m * f), m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[hf] = exp2_fast(m_r[hf] - m_use);
      m_r[hf] = m_new;
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < S::kKeys / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[4 * j + 2 * hf + e];
          x = exp2_fast(fmaf(x, f, -m_use));
          sum[j % 4] += x;
        }
      }
      // this lane's share; the 4 lanes of a row add at the end
      l_r[hf] = l_r[hf] * alpha[hf] + ((sum[0] + sum[1]) + (sum[2] + sum[3]));
    }
  };

  // Descriptors of this warpgroup's q rows and of stage 0's K and V tiles (k16 step 0).
  const uint64_t q_desc = Tile::k_major(q_s, S::kRows, wg * 64), k_desc = Tile::k_major(kv_s, S::kKeys, 0);
  const uint64_t v_desc = Tile::mn_major(kv_s + S::kTileBytes, S::kKeys);
  auto stage_shift = [&](int64_t t) { return Tile::shift(static_cast<uint32_t>(t & 1) * 2 * S::kTileBytes); };
  auto scores = [&](int64_t t) {  // s = q k^T of tile t, issued (not waited)
    cuda_device::wgmma_fence();
    const uint64_t kd = k_desc + stage_shift(t);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      cuda_device::Wgmma<T, S::kKeys>::ss(s, q_desc + Tile::k_step(S::kRows, ks), kd + Tile::k_step(S::kKeys, ks),
                                          ks > 0);
    cuda_device::wgmma_commit();
  };
  auto rescale_and_pack = [&] {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[4 * dt + 2 * hf] *= alpha[hf];
        o[4 * dt + 2 * hf + 1] *= alpha[hf];
      }
#pragma unroll
    for (int kk = 0; kk < S::kKeys / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) pa[kk][x] = pack2<T>(s[8 * kk + 2 * x], s[8 * kk + 2 * x + 1]);
  };
  // Step t loads K(t + 1) and V(t) behind one barrier; tiles whose keys a warpgroup's rows all
  // end before (causal) are computed and fully masked rather than branched around, so that the
  // wgmma pipeline has one shape.
  auto publish = [&] {  // K(t), V(t - 1) visible; every warpgroup is done with K(t - 1), V(t - 2)
    cp_async_wait<0>();
    cuda_device::fence_proxy_async_smem();
    __syncthreads();
  };
  auto next_loads = [&](int64_t t) {  // K(t + 1), V(t): issued after step t's products
    load_tile(k_stage(t + 1), kbase, p.stride_k[2], t + 1);
    load_tile(v_stage(t), vbase, p.stride_v[2], t);
    cp_async_commit();
  };

  if constexpr (kTma) {
    if (tiles > 0) cuda_device::mbar_wait(full_q(), 0);
  } else {
    if (tiles > 0) {
      load_rows(q_s, qbase + r0 * p.stride_q[2], p.stride_q[2], S::kRows, p.q_len - r0);
      load_tile(k_stage(0), kbase, p.stride_k[2], 0);
    }
    cp_async_commit();
  }
  // Step t: the scores of tile t while the tensor cores add p v of tile t - 1; both are issued
  // on every step (ptxas serialises wgmma chains whose issue depends on branches).
  for (int64_t t = 0; t < tiles; ++t) {
    if constexpr (kTma) {
      cuda_device::mbar_wait(full_k(t), static_cast<uint32_t>(t >> 1) & 1);
      if (t > 0) cuda_device::mbar_wait(full_v(t - 1), static_cast<uint32_t>((t - 1) >> 1) & 1);
    } else {
      publish();
    }
    scores(t);
    wgmma_pv<T, D, S::kKeys, S::kSw>(o, pa, v_desc + stage_shift(t - 1));
    if constexpr (!kTma) next_loads(t);
    cuda_device::wgmma_wait<1>();  // the scores; p v runs on under the softmax
    if constexpr (kTma) cuda_device::mbar_arrive(empty_k(t));
#pragma unroll
    for (float& x : s) reg_fence(x);
    softmax(t);
    cuda_device::wgmma_wait<0>();
    if constexpr (kTma) cuda_device::mbar_arrive(empty_v(t + 1));  // V(t - 1), same stage as t + 1
#pragma unroll
    for (float& x : o) reg_fence(x);
    rescale_and_pack();
  }
  if (tiles > 0) {
    if constexpr (kTma) cuda_device::mbar_wait(full_v(tiles - 1), static_cast<uint32_t>((tiles - 1) >> 1) & 1);
    else publish();  // V(tiles - 1) visible
    wgmma_pv<T, D, S::kKeys, S::kSw>(o, pa, v_desc + stage_shift(tiles - 1));
    cuda_device::wgmma_wait<0>();
#pragma unroll
    for (float& x : o) reg_fence(x);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = l_r[hf];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l == 0.f ? 0.f : 1.f / l;  // a row with no key gives zeros
    const int64_t row = rw0 + g + 8 * hf;
    if (row >= p.q_len) continue;
    const int64_t base = b * p.stride_out[0] + h * p.stride_out[1] + row * p.stride_out[2];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int d = dt * 8 + 2 * t4;
      if (d < p.v_head_dim) store_out<T>(p, base + d, o[4 * dt + 2 * hf] * inv);
      if (d + 1 < p.v_head_dim) store_out<T>(p, base + d + 1, o[4 * dt + 2 * hf + 1] * inv);
    }
  }
#else
  __trap();  // launched only on compute capability 9.0, whose code is the sm_90a build
#endif
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
  const int64_t h = id % p.heads_q, b = id / p.heads_q;
  const int64_t hkv = h * p.heads_kv / p.heads_q;
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

bool rows_aligned16(const void* ptr, const int64_t* stride, size_t elem) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if ((stride[d] * static_cast<int64_t>(elem)) % 16 != 0) return false;
  return true;
}

unsigned grid_of(int64_t blocks) {
  ANVIL_CHECK(blocks <= 0x7FFFFFFF, ShapeError, "[scaled_dot_product_attention] ", blocks,
              " blocks exceed the CUDA grid limit");
  return static_cast<unsigned>(blocks);
}

// Lets a kernel use more than 48 KiB of dynamic shared memory (once per kernel).
template <typename Kernel>
void allow_smem(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024)
    ANVIL_CUDA_CHECK("[scaled_dot_product_attention]",
                     cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

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

// Prefill instances, by head dim rounded up to the next of these.
template <typename F>
void dispatch_prefill_head_dim(int64_t d, F&& f) {
  if (d <= 32) f(std::integral_constant<int, 32>{});
  else if (d <= 48) f(std::integral_constant<int, 48>{});
  else if (d <= 64) f(std::integral_constant<int, 64>{});
  else if (d <= 80) f(std::integral_constant<int, 80>{});
  else if (d <= 96) f(std::integral_constant<int, 96>{});
  else if (d <= 128) f(std::integral_constant<int, 128>{});
  else f(std::integral_constant<int, 256>{});
}

// Decode: a handful of query rows per kv head, K / V rows 16-byte aligned for cp.async.
bool use_decode(const AttentionParams& p, size_t elem) {
  return p.q_len <= kDecodeMaxRows && p.heads_q % p.heads_kv == 0 && p.head_dim == p.v_head_dim &&
         (p.head_dim == 64 || p.head_dim == 80 || p.head_dim == 96 || p.head_dim == 128 || p.head_dim == 256) &&
         rows_aligned16(p.k, p.stride_k, elem) && rows_aligned16(p.v, p.stride_v, elem);
}

// Prefill: 16-bit types, equal q / v head dims up to 256 in whole 16-byte chunks.
bool use_prefill(const AttentionParams& p) {
  return (p.dtype == kBFloat16 || p.dtype == kFloat16) && p.head_dim == p.v_head_dim && p.head_dim > 0 &&
         p.head_dim <= 256 && p.head_dim % 8 == 0 && rows_aligned16(p.q, p.stride_q, 2) &&
         rows_aligned16(p.k, p.stride_k, 2) && rows_aligned16(p.v, p.stride_v, 2);
}

// The query heads of one kv head in chunks of at most max_rows rows (heads x q_len); returns
// the (batch, kv head, chunk) units.
int64_t chunk_heads(const AttentionParams& p, int64_t max_rows, DecodePlan& plan) {
  const int64_t group = p.heads_q / p.heads_kv;
  plan.heads_per_chunk = std::min<int64_t>(group, max_rows / p.q_len);
  plan.chunks = (group + plan.heads_per_chunk - 1) / plan.heads_per_chunk;
  return p.batch * p.heads_kv * plan.chunks;
}

// A split-K decode kernel over units x plan.splits blocks, then (more than one split) the
// combine of its (max, sum, output) partials, launched as a programmatic dependent.
template <typename T, typename Kernel>
void launch_split_decode(const AttentionParams& p, const KernelLaunch& launch, Kernel kernel, int64_t units,
                         int threads, int smem, const DecodePlan& plan, int64_t d) {
  const int64_t rows = p.batch * p.heads_q * p.q_len;
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

template <typename T, int D>
void launch_prefill(const AttentionParams& p, const KernelLaunch& launch) {
  using S = PrefillShape<D>;
  auto kernel = attention_prefill_kernel<T, D>;
  static const bool configured = (allow_smem(kernel, S::kSmem), true);
  (void)configured;
  const int64_t row_blocks = (p.q_len + S::kRows - 1) / S::kRows;
  kernel<<<grid_of(p.batch * p.heads_q * row_blocks), kPrefillWarps * 32, S::kSmem, launch.stream()>>>(p, row_blocks);
}

// A [batch, heads, rows, d] 16-bit operand (strides in elements, the last one 1) as a 4-D TMA
// map of box_rows x (sw / 2) boxes, swizzled sw bytes; false where TMA cannot describe it (a
// broadcast dimension, strides or base not 16-byte multiples, no driver entry point).
bool encode_map(CUtensorMap& map, DType dtype, const void* base, int64_t d, int64_t rows, int64_t heads,
                int64_t batch, const int64_t* stride, int box_rows, int sw) {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<Encode>(fn);
  }();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows <= 0) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const int64_t elem_strides[3] = {stride[2], stride[1], stride[0]};  // row, head, batch
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = elem_strides[i] * 2;
    if (dims[i + 1] == 1) {  // never stepped: any valid stride
      strides[i] = i == 0 ? static_cast<cuuint64_t>((d * 2 + 15) / 16 * 16) : strides[i - 1] * dims[i];
      continue;
    }
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t{1} << 40)) return false;
    strides[i] = static_cast<cuuint64_t>(bytes);
  }
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(sw / 2), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUtensorMapSwizzle swizzle =
      sw == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : sw == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
  return encode(&map, dtype == kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, int D>
void launch_prefill_wgmma(const AttentionParams& p, const KernelLaunch& launch) {
  using S = WgPrefillShape<D>;
  PrefillMaps maps{};
  const bool tma =
      encode_map(maps.q, p.dtype, p.q, p.head_dim, p.q_len, p.heads_q, p.batch, p.stride_q, S::kRows, S::kSw) &&
      encode_map(maps.k, p.dtype, p.k, p.head_dim, p.kv_len, p.heads_kv, p.batch, p.stride_k, S::kKeys, S::kSw) &&
      encode_map(maps.v, p.dtype, p.v, p.head_dim, p.kv_len, p.heads_kv, p.batch, p.stride_v, S::kKeys, S::kSw);
  const int64_t row_blocks = (p.q_len + S::kRows - 1) / S::kRows;
  const unsigned grid = grid_of(p.batch * p.heads_q * row_blocks);
  if (tma) {
    auto kernel = attention_prefill_wgmma_kernel<T, D, true>;
    static const bool configured = (allow_smem(kernel, S::kSmem), true);
    (void)configured;
    kernel<<<grid, S::kThreads + 128, S::kSmem, launch.stream()>>>(p, row_blocks, maps);
  } else {
    auto kernel = attention_prefill_wgmma_kernel<T, D, false>;
    static const bool configured = (allow_smem(kernel, S::kSmem), true);
    (void)configured;
    kernel<<<grid, S::kThreads, S::kSmem, launch.stream()>>>(p, row_blocks, maps);
  }
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
  kernel<<<grid_of(p.batch * p.heads_q * row_blocks * col_blocks), 128, static_cast<size_t>(smem), launch.stream()>>>(
      p, row_blocks, col_blocks);
}

}  // namespace

void attention(const AttentionParams& p) {
  if (p.batch == 0 || p.heads_q == 0 || p.q_len == 0 || p.v_head_dim == 0) return;
  ANVIL_CHECK(p.heads_kv > 0, ShapeError, "[scaled_dot_product_attention] heads_kv must be positive");
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
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      if (use_prefill(p)) {
        // sm_90a: the wgmma kernel (no attn_mask); otherwise the mma.sync one.
        const bool hopper = compute_capability(launch.device()) == 90 && !p.mask;
        dispatch_prefill_head_dim(p.head_dim, [&](auto d) {
          if (hopper) launch_prefill_wgmma<T, decltype(d)::value>(p, launch);
          else launch_prefill<T, decltype(d)::value>(p, launch);
        });
        return;
      }
    }
    launch_simple<T>(p, launch);
  });
  launch.check("[scaled_dot_product_attention]");
}

}  // namespace anvil::cuda_backend
