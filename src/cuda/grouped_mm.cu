// grouped_mm on CUDA (MoE expert products). Group ends are read from offs on the device only:
// every kernel walks offs itself (scan_groups), so a call never syncs and replays in a graph
// with new offsets.
//  decode (RowsByGroup, m <= 16 rows, b[g] = W_g^T with unit stride along k, 16-bit or float8
//    weights, 16-bit or float8 activations): a GEMV over the experts the rows use. Each block
//    first lists the non-empty groups (slots); the work is 8-column tiles of every slot, cut
//    into k slices; persistent blocks take equal shares of it, each warp streams its share with
//    16-byte loads, the next step's weights in flight while mma.sync consumes the current one.
//    Rows of one group share every weight load (A rows of the m16n8k16 product). H200, one
//    token x top-8 of 128 experts, 2048->768 bf16 (25 MB): 14.1 us, 0.42 of copy bandwidth
//    (PyTorch 19.1 us); from the bf16 / fp8 and up / gate_up times, ~5 us is start and drain and
//    the weights stream at ~2.8 TB/s (bf16), ~1.7 TB/s (fp8).
//  tiled (everything else): BM x 128 output tiles with a 4-stage cp.async pipeline and
//    ldmatrix + mma.sync (bfloat16 / float16, float8 decoded on load); float32 on a 64 x 64
//    FMA tile (exact float32, no TF32). Jagged layouts launch a worst-case grid of
//    ceil(extent / tile) + G tiles along the jagged dimension; each finds its group and range
//    in offs, surplus tiles exit. Operands with any strides: rows unit-stride along k copy
//    16 bytes at a time, everything else goes element by element.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "core/align.h"
#include "core/dispatch.h"
#include "core/kernels/grouped_mm.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::cp_async16;
using cuda_device::cp_async_commit;
using cuda_device::cp_async_wait;
using cuda_device::fp8x4_to;
using cuda_device::is_fp8_v;
using cuda_device::mma_chunk;
using cuda_device::from_compute;
using cuda_device::ldmatrix_x4;
using cuda_device::load_cached16;
using cuda_device::load_stream16;
using cuda_device::mma_m16n8k16;
using cuda_device::smem_u32;

constexpr unsigned kFullMask = 0xffffffffu;


// ---- groups from offs

// Walks the groups 32 at a time (warp-collective). Group g covers [e_{g-1}, e_g) with
// e_g = clamp(offs[g], 0, extent); a non-empty group is cut into ceil(size / tile) tiles,
// numbered in group order. visit(g, begin, end, first, count) runs on every lane once per 32
// groups (count 0 for empty groups and lanes past the last) and returns true, warp-uniformly,
// to stop.
template <typename Visit>
__device__ void scan_groups(const int32_t* offs, int64_t groups, int64_t extent, int64_t tile, Visit&& visit) {
  const int lane = threadIdx.x % 32;
  int64_t tiles_before = 0, prev_end = 0;
  for (int64_t c0 = 0; c0 < groups; c0 += 128) {
    int32_t raw[4];  // four batches' loads in flight at once
#pragma unroll
    for (int u = 0; u < 4; ++u) raw[u] = c0 + 32 * u + lane < groups ? __ldg(offs + c0 + 32 * u + lane) : 0;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t g = c0 + 32 * u + lane;
      if (c0 + 32 * u >= groups) return;
      const int64_t end = std::min<int64_t>(std::max(raw[u], 0), extent);
      int64_t begin = __shfl_up_sync(kFullMask, end, 1);
      if (lane == 0) begin = prev_end;
      const int64_t count = g < groups && end > begin ? (end - begin + tile - 1) / tile : 0;
      int64_t incl = count;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int64_t v = __shfl_up_sync(kFullMask, incl, d);
        if (lane >= d) incl += v;
      }
      if (visit(g, begin, end, tiles_before + incl - count, count)) return;
      tiles_before += __shfl_sync(kFullMask, incl, 31);
      prev_end = __shfl_sync(kFullMask, end, 31);
    }
  }
}

struct GroupTile {
  int64_t group = -1, begin = 0, end = 0;  // group -1: past the last tile
};

// Tile t of the non-empty groups' tiles (warp-collective, the same answer on every lane).
__device__ GroupTile find_tile(const int32_t* offs, int64_t groups, int64_t extent, int64_t tile, int64_t t) {
  GroupTile r;
  scan_groups(offs, groups, extent, tile, [&](int64_t g, int64_t begin, int64_t end, int64_t first, int64_t count) {
    const unsigned hit = __ballot_sync(kFullMask, count > 0 && t >= first && t < first + count);
    if (!hit) return false;
    const int src = __ffs(hit) - 1;
    r.group = __shfl_sync(kFullMask, g, src);
    r.begin = __shfl_sync(kFullMask, begin + (t - first) * tile, src);
    r.end = std::min(__shfl_sync(kFullMask, end, src), r.begin + tile);
    return true;
  });
  return r;
}

// Bytes of an operand element: float32, 16-bit or float8 (device code has no element_size).
__host__ __device__ __forceinline__ int64_t operand_bytes(DType t) {
  return t == kFloat32 ? 4 : t == kBFloat16 || t == kFloat16 ? 2 : 1;
}

// out is bfloat16, float16 or float32 (the front end's choice).
__device__ __forceinline__ void store_out(void* out, DType t, int64_t i, float v) {
  if (t == kFloat32) static_cast<float*>(out)[i] = v;
  else if (t == kBFloat16) static_cast<BFloat16*>(out)[i] = from_compute<BFloat16>(v);
  else static_cast<Half*>(out)[i] = from_compute<Half>(v);
}

// ---- decode kernel

constexpr int kDecodeWarps = 8;
constexpr int kDecodeLoads = 4;     // 16-byte weight loads per lane per step
constexpr int kMaxDecodeRows = 16;  // the A rows of one m16n8k16 product
// k per step: 4 lanes x kDecodeLoads loads of 16 / sizeof(W) elements.
template <typename W>
inline constexpr int64_t kDecodeStepCols = kDecodeLoads * 64 / static_cast<int64_t>(sizeof(W));

// out[i, j] = sum_q a[i, q] b[g(i), q, j] for m <= 16 rows. `split` (P) warps share each
// 8-column tile's k range (their partials meet in shared memory); a block runs 8 / P tiles at
// once and takes an equal share of all (slot, tile) pairs.
template <typename A, typename W>
__global__ void __launch_bounds__(kDecodeWarps * 32, 2)
    grouped_gemv_kernel(const __grid_constant__ GroupedMmParams p, int split) {
  constexpr int V = 16 / sizeof(W);                 // k per weight load
  constexpr int XV = V * sizeof(A) / 16;            // 16-byte x loads per weight load
  constexpr int64_t kStepCols = kDecodeStepCols<W>;
  __shared__ int64_t slot_group[kMaxDecodeRows], slot_begin[kMaxDecodeRows];
  __shared__ int slot_rows[kMaxDecodeRows], n_slots;
  __shared__ float4 partial[2][kDecodeWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  cuda_device::pdl_launch_dependents();
  cuda_device::pdl_wait();

  if (warp == 0) {  // slot s = the s-th non-empty group (one tile of m rows each)
    int64_t total = 0;
    scan_groups(p.offs, p.groups, p.m, p.m, [&](int64_t grp, int64_t begin, int64_t end, int64_t first, int64_t count) {
      if (count > 0 && first < p.m) {
        slot_group[first] = grp;
        slot_begin[first] = begin;
        slot_rows[first] = static_cast<int>(end - begin);
      }
      total = __shfl_sync(kFullMask, first + count, 31);
      return total >= p.m;
    });
    if (lane == 0) n_slots = static_cast<int>(std::min<int64_t>(total, p.m));
  }
  __syncthreads();

  const int64_t col_tiles = (p.n + 7) / 8, tiles = n_slots * col_tiles;
  const int P = split, Q = kDecodeWarps / P, q = warp / P, sp = warp % P;
  const int64_t tile_groups = (tiles + Q - 1) / Q;
  const int64_t tg0 = blockIdx.x * tile_groups / gridDim.x, tg1 = (blockIdx.x + 1) * tile_groups / gridDim.x;
  // This warp's tiles are (tg0 + r) * Q + q for r < n_tiles; its steps of each tile [s0, s1).
  const int64_t n_tiles = std::max<int64_t>(0, std::min(tg1, (tiles - q + Q - 1) / Q) - tg0);
  const int64_t steps = (p.k + kStepCols - 1) / kStepCols;
  const int64_t s0 = sp * steps / P, s1 = (sp + 1) * steps / P, n_steps = s1 - s0;
  const int64_t items = n_tiles * n_steps;
  if (items == 0) return;  // the whole warp group agrees (n_steps >= 1 since P <= steps)

  const char* b = static_cast<const char*>(p.b);
  const char* a = static_cast<const char*>(p.a);
  struct Stage {
    uint4 w[kDecodeLoads];
    int slot, step;
    int64_t col0;  // first weight column (output column) of the tile
  };
  int64_t next_r = 0, next_step = s0;
  auto load = [&](Stage& st) {
    const int64_t tile = (tg0 + next_r) * Q + q, slot = tile / col_tiles;
    st.slot = static_cast<int>(slot);
    st.step = static_cast<int>(next_step - s0);
    st.col0 = (tile - slot * col_tiles) * 8;
    const int64_t j = std::min(st.col0 + g, p.n - 1);
    const char* row = b + (slot_group[slot] * p.stride_b_batch + j * p.stride_b_col) * int64_t{sizeof(W)};
#pragma unroll
    for (int u = 0; u < kDecodeLoads; ++u) {
      const int64_t q0 = next_step * kStepCols + (u * 4 + t) * V;
      st.w[u] = q0 < p.k ? load_stream16(row + q0 * int64_t{sizeof(W)}) : make_uint4(0, 0, 0, 0);
    }
    if (++next_step == s1) {
      next_step = s0;
      ++next_r;
    }
  };

  float acc[4] = {};
  int parity = 0;
  auto store_tile = [&](int slot, int64_t col0, const float (&d)[4]) {
    const int rows = slot_rows[slot];
    const int64_t row0 = slot_begin[slot], grp = slot_group[slot];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e / 2);
      const int64_t j = col0 + 2 * t + e % 2;
      if (r >= rows || j >= p.n) continue;
      float v = d[e];
      if (p.scale_a || p.scale_b) {
        const float s = (p.scale_a ? p.scale_a[row0 + r] : 1.f) * (p.scale_b ? p.scale_b[grp * p.n + j] : 1.f);
        v *= s;
      }
      store_out(p.out, p.out_dtype, (row0 + r) * p.stride_out_row + j, v);
    }
  };
  auto consume = [&](const Stage& st) {
    const int rows = slot_rows[st.slot];
    const int64_t row0 = slot_begin[st.slot], step = s0 + st.step;
    const char* x = a + (row0 + std::min(g, rows - 1)) * p.stride_a_row * int64_t{sizeof(A)};
    const char* xh = a + (row0 + std::min(g + 8, rows - 1)) * p.stride_a_row * int64_t{sizeof(A)};
    const bool high = rows > 8;
#pragma unroll
    for (int u = 0; u < kDecodeLoads; ++u) {  // x per load: L1 hits, few registers held
      const int64_t q0 = step * kStepCols + (u * 4 + t) * V;
      uint4 xv[XV], hv[XV];
#pragma unroll
      for (int v = 0; v < XV; ++v) {
        const int64_t off = q0 * int64_t{sizeof(A)} + 16 * v;
        xv[v] = q0 < p.k ? load_cached16(x + off) : make_uint4(0, 0, 0, 0);
        hv[v] = q0 < p.k && high ? load_cached16(xh + off) : make_uint4(0, 0, 0, 0);
      }
      __syncwarp();  // mma.sync needs the whole warp after the per-lane loads
      mma_chunk<A, W>(acc, st.w[u], xv, hv);
    }
    if (step + 1 < s1) return;
    // Last step of this warp's slice of the tile.
    if (P == 1) {
      store_tile(st.slot, st.col0, acc);
    } else {
      partial[parity][warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      asm volatile("bar.sync %0, %1;" ::"r"(1 + q), "r"(P * 32) : "memory");  // the tile's P warps
      if (sp == 0) {
        float d[4] = {};
        for (int w = 0; w < P; ++w) {
          const float4 v = partial[parity][q * P + w][lane];
          d[0] += v.x;
          d[1] += v.y;
          d[2] += v.z;
          d[3] += v.w;
        }
        store_tile(st.slot, st.col0, d);
      }
      parity ^= 1;  // the next tile writes the other half, so no second barrier is needed
    }
    acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
  };

  // Two stages in registers: the next step's loads are issued before the current one is used.
  Stage st0, st1;
  load(st0);
  for (int64_t i = 0;;) {
    if (i + 1 < items) load(st1);
    consume(st0);
    if (++i == items) break;
    if (i + 1 < items) load(st0);
    consume(st1);
    if (++i == items) break;
  }
}

// ---- tiled kernels: one (group, BM-row, BN-column) tile per block.

// Where one block's tile lies: operand bases of its group, the rows (of a and out) [m0, m1),
// columns (of b and out) [n0, n1), the k range, and the group's row of scale_b.
struct TileJob {
  const char* a;
  const char* b;
  char* out;
  const float* scale_b;
  int64_t m0, m1, n0, n1, k0, k1;
  bool valid;
};

// (tx, ty, tz) index the grid of launch_tiled; warp-collective.
__device__ TileJob tile_job(const GroupedMmParams& p, int bm, int bn, int64_t tx, int64_t ty, int64_t tz) {
  TileJob j{static_cast<const char*>(p.a), static_cast<const char*>(p.b), static_cast<char*>(p.out), nullptr,
            0, p.m, 0, p.n, 0, p.k, true};
  const int64_t as = operand_bytes(p.a_dtype), bs = operand_bytes(p.b_dtype), os = operand_bytes(p.out_dtype);
  int64_t grp = tz;
  if (p.layout == GroupedLayout::RowsByGroup || p.layout == GroupedLayout::ColsByGroup) {
    const bool rows = p.layout == GroupedLayout::RowsByGroup;
    const GroupTile gt = find_tile(p.offs, p.groups, rows ? p.m : p.n, rows ? bm : bn, tx);
    if (gt.group < 0) {
      j.valid = false;
      return j;
    }
    grp = gt.group;
    if (rows) {
      j.m0 = gt.begin, j.m1 = gt.end, j.n0 = ty * bn;
      j.b += grp * p.stride_b_batch * bs;
      if (p.scale_b) j.scale_b = p.scale_b + grp * p.n;
    } else {
      j.n0 = gt.begin, j.n1 = gt.end, j.m0 = ty * bm;
      j.a += grp * p.stride_a_batch * as;
    }
  } else {
    j.m0 = tx * bm, j.n0 = ty * bn;
    j.out += grp * p.stride_out_batch * os;
    if (p.layout == GroupedLayout::KByGroup) {
      const int64_t e = std::min<int64_t>(std::max(__ldg(p.offs + grp), 0), p.k);
      const int64_t s = grp > 0 ? std::min<int64_t>(std::max(__ldg(p.offs + grp - 1), 0), p.k) : 0;
      j.k0 = s, j.k1 = std::max(e, s);  // an empty group: no k, zeros written
    } else {
      j.a += grp * p.stride_a_batch * as;
      j.b += grp * p.stride_b_batch * bs;
    }
  }
  if (p.layout != GroupedLayout::ColsByGroup) j.n1 = std::min(j.n0 + bn, p.n);
  if (p.layout != GroupedLayout::RowsByGroup) j.m1 = std::min(j.m0 + bm, p.m);
  return j;
}

// Float8 storage of an operand feeding a wider compute type (runtime, block-uniform).
enum class Src : int { Same, E4M3, E5M2 };

Src src_of(DType storage, DType compute) {
  return storage == compute ? Src::Same : storage == kFloat8_e4m3fn ? Src::E4M3 : Src::E5M2;
}

template <typename M>
__device__ __forceinline__ float load_as_float(const char* ptr, Src src) {
  if (src == Src::E4M3) return e4m3fn_bits_to_f32(*reinterpret_cast<const uint8_t*>(ptr));
  if (src == Src::E5M2) return e5m2_bits_to_f32(*reinterpret_cast<const uint8_t*>(ptr));
  return cuda_device::to_compute(*reinterpret_cast<const M*>(ptr));
}

// One operand of the tiled product: element (r, q) at base + (r stride_r + q stride_k) * size.
struct Operand {
  const char* base;  // row 0 of the tile
  int64_t rows;      // valid rows of the tile
  int64_t stride_r, stride_k, size;
  Src src;
  bool mn_major;  // unit stride along the rows: threads walk rows first (coalesced)
};

constexpr int kTileN = 128, kTileK = 32, kPitch = kTileK + 8, kStages = 4;  // 80-byte rows: ldmatrix conflict-free

// Rows [0, ROWS) x k [kb, kb + 32) of `op` into smem [ROWS][kPitch] as M, zeros outside the
// valid rows and at k >= kend.
template <typename M, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(M* smem, const Operand& op, int64_t kb, int64_t kend) {
  for (int c = threadIdx.x; c < ROWS * 4; c += THREADS) {
    const int r = op.mn_major ? c % ROWS : c / 4, kc = op.mn_major ? c / ROWS : c % 4;
    const int64_t q0 = kb + kc * 8;
    M* dst = smem + r * kPitch + kc * 8;
    if (r >= op.rows || q0 >= kend) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const char* src = op.base + (r * op.stride_r + q0 * op.stride_k) * op.size;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(src);
    if (op.stride_k == 1 && op.src == Src::Same && addr % 16 == 0) {
      cp_async16(smem_u32(dst), src, static_cast<uint32_t>(std::min<int64_t>(8, kend - q0) * sizeof(M)));
      continue;
    }
    uint32_t pairs[4];
    if (op.stride_k == 1 && op.src != Src::Same && q0 + 8 <= kend && addr % 8 == 0) {
      const uint2 v = *reinterpret_cast<const uint2*>(src);
      if (op.src == Src::E4M3) {
        fp8x4_to<M, Float8_e4m3fn>(v.x, pairs[0], pairs[1]);
        fp8x4_to<M, Float8_e4m3fn>(v.y, pairs[2], pairs[3]);
      } else {
        fp8x4_to<M, Float8_e5m2>(v.x, pairs[0], pairs[1]);
        fp8x4_to<M, Float8_e5m2>(v.y, pairs[2], pairs[3]);
      }
    } else {
      uint32_t e[8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        e[i] = q0 + i < kend ? from_compute<M>(load_as_float<M>(src + i * op.stride_k * op.size, op.src)).x : 0u;
#pragma unroll
      for (int i = 0; i < 4; ++i) pairs[i] = e[2 * i] | (e[2 * i + 1] << 16);
    }
    *reinterpret_cast<uint4*>(dst) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  }
}

template <int BM>
struct MmaTile {
  static constexpr int kWarpsM = BM >= 128 ? 2 : 1;  // warps along rows; 4 along columns
  static constexpr int kThreads = 128 * kWarpsM;
  static constexpr int kWarpRows = BM / kWarpsM;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kSmem = kStages * (BM + kTileN) * kPitch * 2;
};

// bfloat16 / float16 products (float8 operands decoded to M on load).
template <typename M, int BM>
__global__ void __launch_bounds__(MmaTile<BM>::kThreads)
    grouped_mma_kernel(const __grid_constant__ GroupedMmParams p, Src a_src, Src b_src, int64_t tiles_y, int64_t tiles_z) {
  using T = MmaTile<BM>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  M* As = reinterpret_cast<M*>(smem_raw);
  M* Bs = As + kStages * BM * kPitch;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wm = warp / 4, wn = warp % 4;
  const int64_t as = operand_bytes(p.a_dtype), bs = operand_bytes(p.b_dtype);
  for (int64_t tz = blockIdx.z; tz < tiles_z; tz += gridDim.z) {
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
      const TileJob job = tile_job(p, BM, kTileN, blockIdx.x, ty, tz);
      if (!job.valid) continue;
      const Operand oa{job.a + job.m0 * p.stride_a_row * as, job.m1 - job.m0, p.stride_a_row, p.stride_a_col, as, a_src,
                       p.stride_a_col != 1 && p.stride_a_row == 1};
      const Operand ob{job.b + job.n0 * p.stride_b_col * bs, job.n1 - job.n0, p.stride_b_col, p.stride_b_row, bs, b_src,
                       p.stride_b_row != 1 && p.stride_b_col == 1};
      const int64_t k_tiles = (job.k1 - job.k0 + kTileK - 1) / kTileK;
      auto load_stage = [&](int64_t kt) {
        const int s = static_cast<int>(kt % kStages);
        load_tile<M, BM, T::kThreads>(As + s * BM * kPitch, oa, job.k0 + kt * kTileK, job.k1);
        load_tile<M, kTileN, T::kThreads>(Bs + s * kTileN * kPitch, ob, job.k0 + kt * kTileK, job.k1);
      };
      float acc[T::kMTiles][4][4] = {};
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < k_tiles) load_stage(s);
        cp_async_commit();
      }
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // stage kt landed; everyone is done with the stage loaded next
        if (kt + kStages - 1 < k_tiles) load_stage(kt + kStages - 1);
        cp_async_commit();
        __syncwarp();  // reconverge after the loader's per-chunk branches: ldmatrix / mma.sync are warp-wide
        const int s = static_cast<int>(kt % kStages);
        const M* at = As + (s * BM + wm * T::kWarpRows) * kPitch;
        const M* bt = Bs + (s * kTileN + wn * 32) * kPitch;
#pragma unroll
        for (int kk = 0; kk < kTileK; kk += 16) {
          uint32_t af[T::kMTiles][4], bf[2][4];
#pragma unroll
          for (int mt = 0; mt < T::kMTiles; ++mt)
            ldmatrix_x4(af[mt], smem_u32(at + (mt * 16 + lane % 16) * kPitch + kk + (lane / 16) * 8));
#pragma unroll
          for (int np = 0; np < 2; ++np)
            ldmatrix_x4(bf[np], smem_u32(bt + (np * 16 + lane % 8 + (lane / 16) * 8) * kPitch + kk + (lane / 8 % 2) * 8));
#pragma unroll
          for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
              mma_m16n8k16<M>(acc[mt][nt], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[nt / 2][nt % 2 * 2],
                              bf[nt / 2][nt % 2 * 2 + 1]);
        }
      }
      cp_async_wait<0>();
      __syncthreads();  // shared memory is free for the next tile
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t r = job.m0 + wm * T::kWarpRows + mt * 16 + g + 8 * (e / 2);
            const int64_t c = job.n0 + wn * 32 + nt * 8 + 2 * t + e % 2;
            if (r >= job.m1 || c >= job.n1) continue;
            float v = acc[mt][nt][e];
            if (p.scale_a || job.scale_b) v *= (p.scale_a ? p.scale_a[r] : 1.f) * (job.scale_b ? job.scale_b[c] : 1.f);
            store_out(job.out, p.out_dtype, r * p.stride_out_row + c, v);
          }
    }
  }
}

// float32 (a float32, b float32 or float8): 64 x 64 tiles, 4 x 4 outputs per thread, FMA in
// float32.
constexpr int kSimtTile = 64, kSimtK = 16;

template <int ROWS>
__device__ __forceinline__ void fetch_simt(float (&v)[ROWS * kSimtK / 256], const Operand& op, int64_t kb, int64_t kend) {
#pragma unroll
  for (int i = 0; i < ROWS * kSimtK / 256; ++i) {
    const int c = threadIdx.x + 256 * i;
    const int r = op.mn_major ? c % ROWS : c / kSimtK, q = op.mn_major ? c / ROWS : c % kSimtK;
    v[i] = r < op.rows && kb + q < kend
               ? load_as_float<float>(op.base + (r * op.stride_r + (kb + q) * op.stride_k) * op.size, op.src)
               : 0.f;
  }
}

template <int ROWS>
__device__ __forceinline__ void stash_simt(float (*smem)[ROWS + 4], const float (&v)[ROWS * kSimtK / 256], const Operand& op) {
#pragma unroll
  for (int i = 0; i < ROWS * kSimtK / 256; ++i) {
    const int c = threadIdx.x + 256 * i;
    const int r = op.mn_major ? c % ROWS : c / kSimtK, q = op.mn_major ? c / ROWS : c % kSimtK;
    smem[q][r] = v[i];
  }
}

__global__ void __launch_bounds__(256)
    grouped_simt_kernel(const __grid_constant__ GroupedMmParams p, Src b_src, int64_t tiles_y, int64_t tiles_z) {
  constexpr int R = kSimtTile;
  __shared__ float As[2][kSimtK][R + 4], Bs[2][kSimtK][R + 4];
  const int tx = threadIdx.x % 16, ty4 = threadIdx.x / 16;
  const int64_t bs = operand_bytes(p.b_dtype);
  for (int64_t tz = blockIdx.z; tz < tiles_z; tz += gridDim.z) {
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
      const TileJob job = tile_job(p, R, R, blockIdx.x, ty, tz);
      if (!job.valid) continue;
      const Operand oa{job.a + job.m0 * p.stride_a_row * 4, job.m1 - job.m0, p.stride_a_row, p.stride_a_col, 4, Src::Same,
                       p.stride_a_col != 1 && p.stride_a_row == 1};
      const Operand ob{job.b + job.n0 * p.stride_b_col * bs, job.n1 - job.n0, p.stride_b_col, p.stride_b_row, bs, b_src,
                       p.stride_b_row != 1 && p.stride_b_col == 1};
      const int64_t k_tiles = (job.k1 - job.k0 + kSimtK - 1) / kSimtK;
      float ra[R * kSimtK / 256], rb[R * kSimtK / 256], acc[4][4] = {};
      if (k_tiles > 0) {
        fetch_simt<R>(ra, oa, job.k0, job.k1);
        fetch_simt<R>(rb, ob, job.k0, job.k1);
        stash_simt<R>(As[0], ra, oa);
        stash_simt<R>(Bs[0], rb, ob);
      }
      __syncthreads();
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        const int s = static_cast<int>(kt % 2);
        if (kt + 1 < k_tiles) {  // the next tile's loads fly while this one is used
          fetch_simt<R>(ra, oa, job.k0 + (kt + 1) * kSimtK, job.k1);
          fetch_simt<R>(rb, ob, job.k0 + (kt + 1) * kSimtK, job.k1);
        }
#pragma unroll
        for (int q = 0; q < kSimtK; ++q) {
          float av[4], bv[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            av[i] = As[s][q][ty4 * 4 + i];
            bv[i] = Bs[s][q][tx * 4 + i];
          }
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(av[i], bv[jj], acc[i][jj]);
        }
        if (kt + 1 < k_tiles) {
          stash_simt<R>(As[1 - s], ra, oa);
          stash_simt<R>(Bs[1 - s], rb, ob);
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int64_t r = job.m0 + ty4 * 4 + i, c = job.n0 + tx * 4 + jj;
          if (r >= job.m1 || c >= job.n1) continue;
          float v = acc[i][jj];
          if (job.scale_b) v *= job.scale_b[c];
          store_out(job.out, p.out_dtype, r * p.stride_out_row + c, v);
        }
    }
  }
}

// ---- launch

// The decode kernel takes RowsByGroup with few rows whose weights are unit-stride along k and
// 16-byte aligned rows (W_g [n, k] row-major, as transformers passes b = W^T), k a multiple of
// one load, 16-bit or float8 activations with 16-byte aligned rows.
bool use_decode(const GroupedMmParams& p) {
  if (p.layout != GroupedLayout::RowsByGroup || p.m > kMaxDecodeRows || p.k == 0) return false;
  if (p.a_dtype == kFloat32 || p.stride_b_row != 1 || p.stride_a_col != 1) return false;
  const int64_t as = operand_bytes(p.a_dtype), bs = operand_bytes(p.b_dtype);
  const int64_t per_load = 16 / bs;
  auto aligned = [](const void* ptr, int64_t bytes) { return aligned16(ptr) && bytes % 16 == 0; };
  return p.k % per_load == 0 && aligned(p.b, p.stride_b_col * bs) && aligned(p.b, p.stride_b_batch * bs) &&
         aligned(p.a, p.m > 1 ? p.stride_a_row * as : 0);
}

template <typename A, typename W>
void launch_decode(const GroupedMmParams& p, const KernelLaunch& launch) {
  static const int per_sm = resident_blocks(grouped_gemv_kernel<A, W>, kDecodeWarps * 32, 0);
  const int64_t cap = int64_t{per_sm} * launch.sm_count();
  const int64_t steps = (p.k + kDecodeStepCols<W> - 1) / kDecodeStepCols<W>;
  const int64_t tiles = std::min(p.m, p.groups) * ((p.n + 7) / 8);
  // Warps per tile: the fewest steps on the busiest warp, counting whole shares per block; ties
  // go to fewer warps per tile (H200, 8 experts: gate_up 2048->1536 21.5 us at 4 against 23.0 at
  // 8, down 768->2048 12.8 us at 1 against 13.4 at 2). Persistent blocks beat one block per
  // share (2048->768: 14.1 us against 20.0) and one block per SM (19.2).
  int split = 1;
  int64_t best = LLONG_MAX, grid = 1;
  for (int P : {1, 2, 4, 8}) {
    if (P > steps) continue;
    const int64_t groups_of_tiles = (tiles + kDecodeWarps / P - 1) / (kDecodeWarps / P);
    const int64_t blocks = std::min(groups_of_tiles, cap);
    const int64_t cost = (groups_of_tiles + blocks - 1) / blocks * ((steps + P - 1) / P);
    if (cost < best) best = cost, split = P, grid = blocks;
  }
  launch_pdl("[grouped_mm]", grouped_gemv_kernel<A, W>, dim3(static_cast<unsigned>(grid)), dim3(kDecodeWarps * 32), 0,
             launch.stream(), p, split);
}

void dispatch_decode(const GroupedMmParams& p, const KernelLaunch& launch) {
  bool done = false;
  dispatch_all_types(p.a_dtype, "[grouped_mm]", [&](auto at) {
    using A = typename decltype(at)::type;
    if constexpr (std::is_same_v<A, BFloat16> || std::is_same_v<A, Half> || is_fp8_v<A>) {
      dispatch_all_types(p.b_dtype, "[grouped_mm]", [&](auto wt) {
        using W = typename decltype(wt)::type;
        if constexpr (is_fp8_v<W> || (std::is_same_v<W, A> && !is_fp8_v<A>)) {
          launch_decode<A, W>(p, launch);
          done = true;
        }
      });
    }
  });
  ANVIL_CHECK(done, DTypeError, "[grouped_mm] no CUDA kernel for mat_a ", dtype_name(p.a_dtype), " x mat_b ",
              dtype_name(p.b_dtype));
}

// Row tile from the rows per group (MPS's rule) in RowsByGroup, from m otherwise. H200, 4096
// rows over 128 groups (32 each), 2048->1536: BM 32 425 us, 64 446, 128 544, 16 567.
int tile_rows(const GroupedMmParams& p) {
  const int64_t rows = p.layout == GroupedLayout::RowsByGroup ? p.m / std::max<int64_t>(p.groups, 1) : p.m;
  return rows > 96 ? 128 : rows > 48 ? 64 : rows > 24 ? 32 : 16;
}

// Grid of the tiled kernels: x the jagged tiles (worst case) or row tiles, y column (or row)
// tiles, z the group of KByGroup / Batched; y and z loop inside the kernel past 65535.
struct TiledGrid {
  dim3 grid;
  int64_t tiles_y, tiles_z;
};

TiledGrid tiled_grid(const GroupedMmParams& p, int bm, int bn) {
  const int64_t mt = (p.m + bm - 1) / bm, nt = (p.n + bn - 1) / bn;
  int64_t x = mt, y = nt, z = 1;
  if (p.layout == GroupedLayout::RowsByGroup) x = mt + p.groups;
  else if (p.layout == GroupedLayout::ColsByGroup) x = nt + p.groups, y = mt;
  else z = p.groups;
  ANVIL_CHECK(x <= INT_MAX, ShapeError, "[grouped_mm] ", x, " tiles along one dimension are too many for the CUDA kernel");
  return {dim3(static_cast<unsigned>(x), static_cast<unsigned>(std::min<int64_t>(y, 65535)),
               static_cast<unsigned>(std::min<int64_t>(z, 65535))),
          y, z};
}

template <typename M, int BM>
void launch_mma(const GroupedMmParams& p, const KernelLaunch& launch) {
  using T = MmaTile<BM>;
  static const bool configured = [] {
    return cudaFuncSetAttribute(grouped_mma_kernel<M, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem) ==
           cudaSuccess;
  }();
  if (!configured) ANVIL_CUDA_CHECK("[grouped_mm]", cudaGetLastError());
  const DType m_dtype = std::is_same_v<M, BFloat16> ? kBFloat16 : kFloat16;
  const TiledGrid tg = tiled_grid(p, BM, kTileN);
  grouped_mma_kernel<M, BM><<<tg.grid, T::kThreads, T::kSmem, launch.stream()>>>(
      p, src_of(p.a_dtype, m_dtype), src_of(p.b_dtype, m_dtype), tg.tiles_y, tg.tiles_z);
}

template <typename M>
void dispatch_mma(const GroupedMmParams& p, const KernelLaunch& launch) {
  switch (tile_rows(p)) {
    case 16: return launch_mma<M, 16>(p, launch);
    case 32: return launch_mma<M, 32>(p, launch);
    case 64: return launch_mma<M, 64>(p, launch);
    default: return launch_mma<M, 128>(p, launch);
  }
}

void launch_tiled(const GroupedMmParams& p, const KernelLaunch& launch) {
  if (p.a_dtype == kFloat32) {
    const TiledGrid tg = tiled_grid(p, kSimtTile, kSimtTile);
    grouped_simt_kernel<<<tg.grid, 256, 0, launch.stream()>>>(p, src_of(p.b_dtype, kFloat32), tg.tiles_y, tg.tiles_z);
  } else if (p.a_dtype == kBFloat16) {
    dispatch_mma<BFloat16>(p, launch);
  } else {
    dispatch_mma<Half>(p, launch);  // float16, and float8 activations (exact in float16)
  }
}

}  // namespace

void grouped_mm(const GroupedMmParams& p) {
  if (p.m == 0 || p.n == 0 || p.groups == 0) return;
  KernelLaunch launch(p.out);
  if (use_decode(p)) dispatch_decode(p, launch);
  else launch_tiled(p, launch);
  launch.check("[grouped_mm]");
}

}  // namespace anvil::cuda_backend
