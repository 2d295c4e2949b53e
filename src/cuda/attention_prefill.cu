// Attention prefill on CUDA (bfloat16 / float16, q_len > 8 or no decode instance, head_dim =
// v_head_dim <= 256 in whole 16-byte chunks, 16-byte rows); the overview of every attention
// kernel is at the top of attention.cu.
//  compute capability 9.0 without attn_mask: wgmma + TMA (attention_prefill_wgmma_kernel).
//  otherwise: FlashAttention-2 on mma.sync (attention_prefill_kernel).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <bit>

#include "core/dispatch.h"
#include "cuda/attention_common.cuh"
#include "cuda/device/wgmma.cuh"
#include "cuda/device/wgmma_ops.cuh"

namespace anvil::cuda_backend {
namespace {

using namespace attention_shared;

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
  k.h = id % p.n_heads;
  k.b = id / p.n_heads;
  k.hkv = k.h * p.n_kv_heads / p.n_heads;
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

// ---- launch

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

// Prefill: 16-bit types, equal q / v head dims up to 256 in whole 16-byte chunks.
bool use_prefill(const AttentionParams& p) {
  return (p.dtype == kBFloat16 || p.dtype == kFloat16) && p.head_dim == p.v_head_dim && p.head_dim > 0 &&
         p.head_dim <= 256 && p.head_dim % 8 == 0 && rows_aligned16(p.q, p.stride_q, 2) &&
         rows_aligned16(p.k, p.stride_k, 2) && rows_aligned16(p.v, p.stride_v, 2);
}

template <typename T, int D>
void launch_prefill(const AttentionParams& p, const KernelLaunch& launch) {
  using S = PrefillShape<D>;
  auto kernel = attention_prefill_kernel<T, D>;
  static const bool configured = (allow_smem(kernel, S::kSmem), true);
  (void)configured;
  const int64_t row_blocks = (p.q_len + S::kRows - 1) / S::kRows;
  kernel<<<grid_of(p.batch * p.n_heads * row_blocks), kPrefillWarps * 32, S::kSmem, launch.stream()>>>(p, row_blocks);
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
      encode_map(maps.q, p.dtype, p.q, p.head_dim, p.q_len, p.n_heads, p.batch, p.stride_q, S::kRows, S::kSw) &&
      encode_map(maps.k, p.dtype, p.k, p.head_dim, p.kv_len, p.n_kv_heads, p.batch, p.stride_k, S::kKeys, S::kSw) &&
      encode_map(maps.v, p.dtype, p.v, p.head_dim, p.kv_len, p.n_kv_heads, p.batch, p.stride_v, S::kKeys, S::kSw);
  const int64_t row_blocks = (p.q_len + S::kRows - 1) / S::kRows;
  const unsigned grid = grid_of(p.batch * p.n_heads * row_blocks);
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

}  // namespace

namespace attention_shared {

bool attention_prefill(const AttentionParams& p, const KernelLaunch& launch) {
  if (!use_prefill(p)) return false;
  // sm_90a: the wgmma kernel (no attn_mask); otherwise the mma.sync one.
  const bool hopper = compute_capability(launch.device()) == 90 && !p.mask;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_prefill_head_dim(p.head_dim, [&](auto d) {
      if (hopper) launch_prefill_wgmma<T, decltype(d)::value>(p, launch);
      else launch_prefill<T, decltype(d)::value>(p, launch);
    });
  };
  if (p.dtype == kBFloat16) run(TypeTag<BFloat16>{});
  else run(TypeTag<Half>{});
  return true;
}

}  // namespace attention_shared
}  // namespace anvil::cuda_backend
