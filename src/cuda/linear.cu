// gemv on CUDA: y[i, j] = sum_q x[i, q] w[j, q] (+ bias[j]) for the decode case, m <= 8 rows of
// x against an [n, k] weight. The weight is streamed once for all m rows; the kernels differ in
// how they keep DRAM busy.
//  bfloat16 / float16 take mma.sync m16n8k16 (float32 accumulation) with 8 weight rows as B
//    (n = 8) and the m x rows as A (rows m..15 zero or duplicates whose results are dropped).
//    Each lane holds 8 consecutive k of one row per 32-column tile; the k order inside a tile is
//    permuted the same way for x and w, which a dot product does not notice.
//    - regs: a block per 8 (or 16) rows, warps split k, 8 16-byte loads in flight per lane;
//      warps per block and blocks per SM are chosen so the grid runs in as few waves as it can
//      without more than two load steps per warp (mid-size weights are wave-bound).
//    - bulk (huge n, see use_bulk): one persistent block per SM; a producer warp streams
//      8-row x 2048-column stages of the weight into shared memory with the bulk copy engine
//      (cp.async.bulk), 6 stages deep, so each SM keeps ~190 KB of reads in flight across row
//      tiles; 8 consumer warps split each stage's columns and add their partials per tile.
//  float32 / float64 (simt): a warp per weight row, lanes over k in 16-byte packs.
// All loads of a step are issued before the first use, from addresses clamped into the row
// rather than behind per-lane branches; mma.sync is warp-collective, so no lane may skip one.
#include <algorithm>
#include <type_traits>

#include "core/align.h"
#include "core/dispatch.h"
#include "core/kernels/linear.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/map.cuh"
#include "cuda/device/mbarrier.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/device/row_ops.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::compute_t;
using cuda_device::from_compute;
using cuda_device::load_cached16;
using cuda_device::load_stream16;
using cuda_device::bulk_copy_g2s;
using cuda_device::mbar_arrive;
using cuda_device::mbar_arrive_expect_tx;
using cuda_device::mbar_init;
using cuda_device::mbar_init_fence;
using cuda_device::mbar_wait;
using cuda_device::mma_tile32;
using cuda_device::Pack;
using cuda_device::smem_u32;
using cuda_device::to_compute;


// ---- loads

// Elements [k0, k0 + 8) of a 16-bit row, zero past k; element loads clamped to the row, so they
// never fault and carry no branch.
__device__ __forceinline__ uint4 load8_elements(const uint16_t* row, int64_t k0, int64_t k) {
  uint32_t e[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = __ldg(row + std::min(k0 + i, k - 1));
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = k0 + 2 * i < k ? e[2 * i] : 0u, hi = k0 + 2 * i + 1 < k ? e[2 * i + 1] : 0u;
    w[i] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// d[0], d[1] of lane (g, t) are y[g][row0 + 2t + {0, 1}]: sums `warps` partials [warp][lane][2]
// and stores. Called by threads 0..63 of the consumers.
template <typename T>
__device__ __forceinline__ void store_tile(const GemvParams& p, const float (*partial)[32][2], int warps, int64_t row0,
                                           int i) {
  const int l = i / 2, e = i % 2, gi = l / 4;
  const int64_t j = row0 + 2 * (l % 4) + e;
  if (gi >= p.m || j >= p.n) return;
  float s = 0.f;
  for (int w = 0; w < warps; ++w) s += partial[w][l][e];
  if (p.bias) s += to_compute(static_cast<const T*>(p.bias)[j]);
  static_cast<T*>(p.y)[gi * p.stride_y_row + j] = from_compute<T>(s);
}

// ---- bulk kernel: producer warp + kConsumers mma warps, one block per SM.

constexpr int kConsumers = 8;
constexpr int kBulkThreads = (kConsumers + 1) * 32;
constexpr int kStageCols = 2048;                // weight columns per stage and row
constexpr int kRowPitch = kStageCols * 2 + 64;  // bytes; 64 mod 128: the two rows a quarter warp reads use all 32 banks
constexpr int kStageBytes = 8 * kRowPitch;
constexpr int kStages = 6;
constexpr int kBulkSmem = kStages * kStageBytes;

// Work unit u = (row tile, column chunk) in order; it fills stage u % kStages for the
// (u / kStages)-th time.
template <typename T>
__global__ void __launch_bounds__(kBulkThreads, 1) gemv_bulk_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(128) unsigned char stages[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ float partial[2][kConsumers][32][2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles = (p.n + 7) / 8, chunks = (p.k + kStageCols - 1) / kStageCols;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_u32(&full[s]), 1);
      mbar_init(smem_u32(&empty[s]), kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == kConsumers) {  // producer
    if (lane != 0) return;
    const char* w = static_cast<const char*>(p.w);
    int64_t u = 0;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int rows = static_cast<int>(std::min<int64_t>(8, p.n - tile * 8));
      for (int64_t ch = 0; ch < chunks; ++ch, ++u) {
        const int s = static_cast<int>(u % kStages);
        if (u >= kStages) mbar_wait(smem_u32(&empty[s]), static_cast<uint32_t>((u / kStages - 1) & 1));
        const int64_t c0 = ch * kStageCols;
        const uint32_t bytes = static_cast<uint32_t>(std::min<int64_t>(kStageCols, p.k - c0) * sizeof(T));
        mbar_arrive_expect_tx(smem_u32(&full[s]), bytes * rows);
        for (int r = 0; r < rows; ++r)
          bulk_copy_g2s(smem_u32(stages + s * kStageBytes + r * kRowPitch),
                    w + ((tile * 8 + r) * p.stride_w_row + c0) * static_cast<int64_t>(sizeof(T)), bytes,
                    smem_u32(&full[s]));
      }
    }
    return;
  }

  // Consumers. Rows of x past m read row m - 1; weight rows past n are never copied (stale
  // shared memory): both only reach outputs that are dropped.
  const int g = lane / 4, t = lane % 4;
  const uint16_t* x = static_cast<const uint16_t*>(p.x) + std::min<int64_t>(g, p.m - 1) * p.stride_x_row;
  float acc[4] = {};
  int64_t u = 0;
  int par = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    for (int64_t ch = 0; ch < chunks; ++ch, ++u) {
      const int s = static_cast<int>(u % kStages);
      const int64_t c0 = ch * kStageCols;
      const int cols = static_cast<int>(std::min<int64_t>(kStageCols, p.k - c0));
      const unsigned char* row = stages + s * kStageBytes + g * kRowPitch;
      uint4 xv[kStageCols / 256], wv[kStageCols / 256];
#pragma unroll
      for (int i = 0; i < kStageCols / 256; ++i) {  // x first: it does not wait for the stage
        const int kk = std::min((warp + kConsumers * i) * 32 + t * 8, cols - 8);
        xv[i] = load_cached16(x + c0 + kk);
      }
      mbar_wait(smem_u32(&full[s]), static_cast<uint32_t>((u / kStages) & 1));
      __syncwarp();  // lanes leave the wait loop one by one; mma.sync needs the whole warp
#pragma unroll
      for (int i = 0; i < kStageCols / 256; ++i) {
        const int kk = std::min((warp + kConsumers * i) * 32 + t * 8, cols - 8);
        wv[i] = *reinterpret_cast<const uint4*>(row + kk * 2);
      }
#pragma unroll
      for (int i = 0; i < kStageCols / 256; ++i) {
        if ((warp + kConsumers * i) * 32 + t * 8 >= cols) xv[i] = wv[i] = make_uint4(0, 0, 0, 0);
        mma_tile32<T>(acc, xv[i], wv[i]);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_u32(&empty[s]));
    }
    partial[par][warp][lane][0] = acc[0];
    partial[par][warp][lane][1] = acc[1];
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers * 32) : "memory");  // consumers only
    if (threadIdx.x < 64) store_tile<T>(p, partial[par], kConsumers, tile * 8, threadIdx.x);
    acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    par ^= 1;  // the next tile writes the other half, so no second barrier is needed
  }
}

// ---- add_rms_norm_linear's prologue: the block's input row rms_norm(round(x + residual)) *
// norm_weight into shared memory `xs` (k % 8 == 0, 16-byte aligned rows, m = 1); block 0 also
// writes round(x + residual) to sum_out (cuda_device::add_rms_norm_row, as add_rms_norm's kernel).
template <typename T>
__device__ __forceinline__ void norm_prologue(const AddRmsNormLinearParams& f, uint16_t* xs) {
  __shared__ float red[32];
  const GemvParams& p = f.gemv;
  cuda_device::add_rms_norm_row<T>(static_cast<const T*>(p.x), static_cast<const T*>(f.residual),
                                   static_cast<const T*>(f.norm_weight),
                                   blockIdx.x == 0 ? static_cast<T*>(f.sum_out) : nullptr, reinterpret_cast<T*>(xs),
                                   p.k, static_cast<float>(f.eps), static_cast<int>(threadIdx.x),
                                   static_cast<int>(blockDim.x), red, [] { __syncthreads(); });
}

// ---- regs kernel (any layout): a block per 8 * R weight rows, blockDim.x / 32 warps over k.
// R = 2 shares each x load between two weight rows (x past L1 is re-read from L2 per block).
constexpr int kMaxWarps = 16;

// Launched with PDL: before pdl_wait it only asks L2 for its weight rows (`prefetch`, aligned
// rows), which hides the previous kernel's drain.
// kNorm (add_rms_norm_linear, kVec only): x is the normalised row in dynamic shared memory;
// otherwise f is a plain GEMV's params (f.gemv) and its prologue fields are unset.
template <typename T, int R, bool kVec, int kThreads, int kMinBlocks, bool kNorm = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemv_regs_kernel(const __grid_constant__ AddRmsNormLinearParams f, bool prefetch) {
  static_assert(!kNorm || kVec);
  const GemvParams& p = f.gemv;
  constexpr int U = kVec ? 8 / R : 2;  // 32-column tiles per lane per step
  __shared__ float partial[R][kThreads / 32][32][2];
  extern __shared__ uint4 norm_row[];  // kNorm: k 16-bit elements
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 8 * R;
  cuda_device::pdl_launch_dependents();
  if (prefetch) cuda_device::prefetch_rows_l2(p.w, p.stride_w_row * 2, row0, 8 * R, p.n, p.k * 2);
  cuda_device::pdl_wait();
  if constexpr (kNorm) norm_prologue<T>(f, reinterpret_cast<uint16_t*>(norm_row));
  const uint16_t* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    w[r] = static_cast<const uint16_t*>(p.w) + std::min(row0 + r * 8 + g, p.n - 1) * p.stride_w_row;
  const uint16_t* x = kNorm ? reinterpret_cast<const uint16_t*>(norm_row)
                            : static_cast<const uint16_t*>(p.x) + std::min<int64_t>(g, p.m - 1) * p.stride_x_row;
  // 16 bytes of x: from shared memory under kNorm (a generic load), else through the read-only path.
  auto load_x16 = [&](const uint16_t* at) {
    if constexpr (kNorm) return *reinterpret_cast<const uint4*>(at);
    else return load_cached16(at);
  };
  // kVec: 16-byte loads from a clamped column (k >= 8), fixed up below where past k.
  const int64_t k_last8 = (p.k / 8) * 8 - 8;
  float acc[R][4] = {};
  const int64_t tiles = (p.k + 31) / 32, step = static_cast<int64_t>(warps) * U;
  int64_t tile = warp;
  if constexpr (kVec) {
    // Steps whose tiles are all inside k: unconditional loads, all issued before the first mma.
    for (const int64_t full = p.k / 32; tile + (U - 1) * warps < full; tile += step) {
      uint4 wv[U][R], xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k0 = (tile + u * warps) * 32 + t * 8;
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = load_stream16(w[r] + k0);
        xv[u] = load_x16(x + k0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int r = 0; r < R; ++r) mma_tile32<T>(acc[r], xv[u], wv[u][r]);
      }
    }
  }
  // The last step (kVec) or all of them: loads clamped into the row, fixed up past k.
  for (; tile < tiles; tile += step) {
    uint4 wv[U][R], xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = (tile + u * warps) * 32 + t * 8;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if constexpr (kVec) wv[u][r] = load_stream16(w[r] + std::min(k0, k_last8));
        else wv[u][r] = load8_elements(w[r], k0, p.k);
      }
      if constexpr (kVec) xv[u] = load_x16(x + std::min(k0, k_last8));
      else xv[u] = load8_elements(x, k0, p.k);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = (tile + u * warps) * 32 + t * 8;
      // mma.sync is warp-collective: every lane runs every mma, with zeros past k (a lane that
      // skipped it would hang the warp).
      if (k0 >= p.k) {  // both zero: 0 * inf would be NaN
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = make_uint4(0, 0, 0, 0);
        xv[u] = make_uint4(0, 0, 0, 0);
      } else if (!kNorm && kVec && k0 + 8 > p.k) {  // the 8 columns across k (k % 8 != 0)
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = load8_elements(w[r], k0, p.k);
        xv[u] = load8_elements(x, k0, p.k);
      }
      __syncwarp();  // reconverge after the per-lane fix-ups
#pragma unroll
      for (int r = 0; r < R; ++r) mma_tile32<T>(acc[r], xv[u], wv[u][r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    partial[r][warp][lane][0] = acc[r][0];
    partial[r][warp][lane][1] = acc[r][1];
  }
  __syncthreads();
  if (threadIdx.x < 64 * R) {
    const int r = threadIdx.x / 64;
    store_tile<T>(p, partial[r], warps, row0 + r * 8, threadIdx.x % 64);
  }
}

// ---- simt kernel (float32 / float64): a warp per weight row, all m x rows at once.
template <typename T, bool kVec>
__global__ void __launch_bounds__(256) gemv_simt_kernel(const __grid_constant__ GemvParams p) {
  using A = compute_t<T>;
  constexpr int V = kVec ? 16 / static_cast<int>(sizeof(T)) : 1;
  constexpr int U = 8;  // packs in flight per lane
  using P = Pack<T, V>;
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const T* xs = static_cast<const T*>(p.x);
  const int64_t packs = p.k / V;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; j < p.n;
       j += static_cast<int64_t>(gridDim.x) * warps) {
    const P* wr = reinterpret_cast<const P*>(static_cast<const T*>(p.w) + j * p.stride_w_row);
    A acc[kGemvMaxRows] = {};
    for (int64_t q0 = lane; q0 < packs; q0 += 32 * U) {
      P wv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) wv[u] = wr[std::min(q0 + 32 * u, packs - 1)];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t q = q0 + 32 * u;
        if (q >= packs) break;
#pragma unroll
        for (int i = 0; i < kGemvMaxRows; ++i) {
          if (i >= p.m) break;
          const P xv = reinterpret_cast<const P*>(xs + i * p.stride_x_row)[q];
#pragma unroll
          for (int e = 0; e < V; ++e) acc[i] += to_compute(xv.v[e]) * to_compute(wv[u].v[e]);
        }
      }
    }
    const T* wt = reinterpret_cast<const T*>(wr);
    for (int64_t q = packs * V + lane; q < p.k; q += 32) {  // the k % V columns past the packs
      const A wq = to_compute(wt[q]);
#pragma unroll
      for (int i = 0; i < kGemvMaxRows; ++i) {
        if (i < p.m) acc[i] += to_compute(xs[i * p.stride_x_row + q]) * wq;
      }
    }
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) {
      if (i >= p.m) break;
      A s = acc[i];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == i) {
        if (p.bias) s += to_compute(static_cast<const T*>(p.bias)[j]);
        static_cast<T*>(p.y)[i * p.stride_y_row + j] = from_compute<T>(s);
      }
    }
  }
}

// ---- launch


// Kernel choice (H200, graph replay): the bulk kernel streams at ~3.8 TB/s once running but
// costs ~4 us more to start and drain than the regs kernel, so it takes only weights of many
// 8-row tiles per SM and few x rows (lm_head 2048 x 151936: 164 us against 174 us; 14336 ->
// 4096: 35 us against 32 us); with m > 2 its x loads, one per weight load, outgrow L1.
bool use_bulk(const GemvParams& p, bool aligned, int sm_count) {
  return aligned && p.k % 8 == 0 && p.m <= 2 && (p.n + 7) / 8 >= int64_t{32} * sm_count;
}

// The regs kernel's grid and block shape. 16 weight rows per block (wide) halve the re-reads of
// x from L2 once x no longer fits in L1. k <= 2048 (one load step of 8 warps): k / 256 warps,
// each with one full step, whatever the block count. Longer k: up to 16 warps split k while the
// blocks fit one per SM (or two waves when k needs more than two 8-warp steps), else 8 warps at 3
// per SM. 3-4 blocks per SM with one step of k run at 4 per SM. At least 2 warps: the tile store
// takes 64 threads. H200: decode-linear suite 0.479 of copy (the measurements behind each
// branch: docs/PERFORMANCE.md, "CUDA linear GEMV: block shape and register rules").
struct RegsShape {
  bool wide = false, four = false;
  int64_t blocks = 0;
  int warps = 0;
};

template <typename T>
RegsShape regs_shape(const GemvParams& p, int64_t sms) {
  RegsShape s;
  s.wide = p.m * p.k * static_cast<int64_t>(sizeof(T)) > (64 << 10);
  const int rows_per_block = s.wide ? 16 : 8;
  s.blocks = (p.n + rows_per_block - 1) / rows_per_block;
  const int full_step_warps = static_cast<int>(std::clamp<int64_t>(p.k / 256, 2, kMaxWarps));  // <= 8 at k <= 2048
  s.warps = p.k <= 8 * 256 || s.blocks <= sms || (s.blocks < 2 * sms && p.k > 2 * 8 * 256) ? full_step_warps : 8;
  s.four = !s.wide && p.k <= 8 * 256 && s.blocks > 3 * sms && s.blocks <= 4 * sms;
  return s;
}

// add_rms_norm_linear's kernel for a shape (m = 1, k <= 8192: never wide).
template <typename T>
auto norm_kernel(const RegsShape& s) {
  return s.warps > 8 ? gemv_regs_kernel<T, 1, true, kMaxWarps * 32, 1, true>
         : s.four    ? gemv_regs_kernel<T, 1, true, 256, 4, true>
                     : gemv_regs_kernel<T, 1, true, 256, 3, true>;
}

bool gemv_rows_aligned(const GemvParams& p, size_t elem) {
  return rows_aligned16(p.w, p.n, p.stride_w_row, elem) && rows_aligned16(p.x, p.m, p.stride_x_row, elem);
}

// The regs kernel (add_rms_norm_linear's when f.residual is set) or the bulk kernel.
template <typename T>
void launch_gemv_mma(const AddRmsNormLinearParams& f, const KernelLaunch& launch) {
  const GemvParams& p = f.gemv;
  const bool vec = gemv_rows_aligned(p, sizeof(T));
  const bool norm = f.residual != nullptr;  // its plan checked the shape, alignment and one wave
  if (!norm && use_bulk(p, vec, launch.sm_count())) {
    static const bool configured = [] {
      return cudaFuncSetAttribute(gemv_bulk_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkSmem) ==
             cudaSuccess;
    }();
    if (!configured) ANVIL_CUDA_CHECK("[linear]", cudaGetLastError());
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>((p.n + 7) / 8, launch.sm_count()));
    gemv_bulk_kernel<T><<<grid, kBulkThreads, kBulkSmem, launch.stream()>>>(p);
    return;
  }
  const RegsShape shape = regs_shape<T>(p, launch.sm_count());
  ANVIL_CHECK(shape.blocks <= 0x7FFFFFFF, ShapeError, "[linear] n = ", p.n, " is too large for the CUDA gemv");
  const int warps = shape.warps;
  const dim3 grid(static_cast<unsigned>(shape.blocks)), block(warps * 32);
  // The L2 prefetch pays on small weights; on large ones it competes with the previous kernel's
  // stream (scaled_mm's measurement: 3-6% slower past 32 MiB).
  const bool prefetch = vec && p.n * p.k * static_cast<int64_t>(sizeof(T)) <= (int64_t{32} << 20);
  const size_t smem = norm ? static_cast<size_t>(p.k) * sizeof(T) : 0;
  const char* op = norm ? "[add_rms_norm_linear]" : "[linear]";
  auto go = [&](auto kernel) { launch_pdl(op, kernel, grid, block, smem, launch.stream(), f, prefetch); };
  if (norm) return go(norm_kernel<T>(shape));
  const bool kvec = vec && p.k >= 8;
  // 8-warp blocks of one 8-row tile are held to 80 registers (3 blocks per SM, no spills); two
  // tiles (R = 2) spill at 80 and keep 128. H200: decode-linear suite 0.433 -> 0.445 of copy
  // against 128 for all (docs/PERFORMANCE.md, the same section).
  auto pick = [&](auto r_tag, auto vec_tag) {
    constexpr int R = decltype(r_tag)::value;
    constexpr bool V = decltype(vec_tag)::value;
    if (warps > 8) return go(gemv_regs_kernel<T, R, V, kMaxWarps * 32, 1>);
    if (R == 1 && shape.four) return go(gemv_regs_kernel<T, R, V, 256, 4>);
    return go(gemv_regs_kernel<T, R, V, 256, R == 1 ? 3 : 2>);
  };
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  if (shape.wide) kvec ? pick(Two{}, std::true_type{}) : pick(Two{}, std::false_type{});
  else kvec ? pick(One{}, std::true_type{}) : pick(One{}, std::false_type{});
}

template <typename T>
void launch_gemv_simt(const GemvParams& p, const KernelLaunch& launch) {
  const bool vec =
      rows_aligned16(p.w, p.n, p.stride_w_row, sizeof(T)) && rows_aligned16(p.x, p.m, p.stride_x_row, sizeof(T));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((p.n + 7) / 8, launch.max_blocks()));
  if (vec) gemv_simt_kernel<T, true><<<grid, 256, 0, launch.stream()>>>(p);
  else gemv_simt_kernel<T, false><<<grid, 256, 0, launch.stream()>>>(p);
}

}  // namespace

void gemv(const GemvParams& p) {
  if (p.m == 0 || p.n == 0) return;
  ANVIL_CHECK(p.m <= kGemvMaxRows, ShapeError, "[linear] the CUDA gemv takes at most ", kGemvMaxRows, " rows, got ", p.m);
  KernelLaunch launch(p.y);
  dispatch_float_types(p.dtype, "[linear]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      AddRmsNormLinearParams f;
      f.gemv = p;
      launch_gemv_mma<T>(f, launch);
    } else {
      launch_gemv_simt<T>(p, launch);
    }
  });
  launch.check("[linear]");
}

// Fused: one 16-bit row, k % 8 == 0 and k <= 8192 (the prologue's 16-byte packs and its row in
// shared memory), 16-byte aligned rows, and a grid of one wave. Every block pays the prologue (an
// L2 round trip and two barriers) on its wave's path: past one wave that costs more than the
// add_rms_norm kernel it saves (H200, Qwen3-30B-A3B q/k/v 2048 -> 5120 in 2 waves: tg128 319 ->
// 312 tok/s; Qwen3-0.6B's one-wave q/k/v and gate/up: 919 -> 966). Unset outputs (the plan
// query's) count as aligned: the op allocates them.
namespace {
// What the fused kernel can compute (the wave rule is the plan's choice on top).
bool fused_kernel_takes(const AddRmsNormLinearParams& f) {
  const GemvParams& p = f.gemv;
  auto null_or_aligned = [](const void* ptr) { return ptr == nullptr || aligned16(ptr); };
  return (p.dtype == kBFloat16 || p.dtype == kFloat16) && p.m == 1 && p.n > 0 && p.k >= 8 && p.k % 8 == 0 &&
         p.k <= 8192 && gemv_rows_aligned(p, 2) && null_or_aligned(f.residual) && null_or_aligned(f.norm_weight) &&
         null_or_aligned(f.sum_out);
}
}  // namespace

FusedPlan add_rms_norm_linear_plan(const AddRmsNormLinearParams& f) {
  if (!fused_kernel_takes(f)) return FusedPlan::Composed;
  const GemvParams& p = f.gemv;
  const KernelLaunch launch(p.x);
  const size_t smem = static_cast<size_t>(p.k) * 2;
  const bool one_wave = dispatch_half_types(p.dtype, "[add_rms_norm_linear]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RegsShape shape = regs_shape<T>(p, launch.sm_count());
    return shape.blocks <= int64_t{resident_blocks(norm_kernel<T>(shape), shape.warps * 32, smem)} * launch.sm_count();
  });
  return one_wave ? FusedPlan::Fused : FusedPlan::Composed;
}

void add_rms_norm_linear(const AddRmsNormLinearParams& f) {
  const char* op = "[add_rms_norm_linear]";
  ANVIL_CHECK(fused_kernel_takes(f), Error, op, " the params are outside the fused CUDA kernel's plan (the op composes them)");
  KernelLaunch launch(f.gemv.y);
  dispatch_half_types(f.gemv.dtype, op, [&](auto tag) { launch_gemv_mma<typename decltype(tag)::type>(f, launch); });
  launch.check(op);
}

}  // namespace anvil::cuda_backend
