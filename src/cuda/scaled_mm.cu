// scaled_mm on CUDA: out[i, j] = round(acc(i, j) * (sa(i) * sw(j)) + bias[j]) with
// acc(i, j) = sum_q a[i, q] w[j, q] in float32, w float8 [n, k] (ScaledMmParams). Three paths,
// chosen by the predicates next to their launchers (scaled_mm at the bottom):
//  gemv      m <= 8 with w rows unit-stride along k (decode): the weight is streamed once and
//            decoded in registers to float16 (bfloat16 against bfloat16 / float32 activations;
//            both exact for float8 values), then mma.sync m16n8k16 with 8 weight rows as B, as
//            linear.cu's bf16 GEMV; float32 activations are split into three bfloat16 terms
//            (exact). Launched as a programmatic dependent: a weight of up to 32 MiB is
//            prefetched into L2 while the previous kernel drains; everything else waits for it.
//  cublaslt  m > 8, float8 x float8 (not e5m2 x e5m2), both unit-stride along k, k and n
//            multiples of 16, 16-byte alignment: cuBLASLt FP8 (TN) with the scales as device
//            pointers (scalars, or row-wise outer vectors) and the bias epilogue; what it refuses
//            runs as a float32 product and a fused scale + bias epilogue kernel. Its FP8 tensor
//            cores add in fewer bits than float32 (H200: errors up to 2^-13.7 of sum |a b| at
//            k = 256), as PyTorch's CUDA scaled_mm does.
//  tiled     everything else: 64 x 64 output tiles, operands decoded into shared memory as
//            float32, FMA.
// Block scales of the weight (w_block, scaled_linear): the gemv applies each block's scale to the
// chunk sums of that block (the blocks fp8_blocks_in_dot takes, core/fp8_blocks.h); the tiled
// kernel to each weight element. scaled_mm's block-wise recipes (a_block and w_block): the gemv
// multiplies each lane's chunk sums by the product of their two scales (e4m3 x e4m3); cuBLASLt's
// VEC128 / BLK128x128 scale modes for more rows (sm_90); the tiled kernel otherwise.
#include <algorithm>
#include <array>
#include <optional>
#include <type_traits>

#include "core/align.h"
#include "core/dispatch.h"
#include "core/fp8_blocks.h"
#include "core/kernels/scaled_mm.h"
#include "cuda/allocator.h"
#include "cuda/cublaslt.h"
#include "cuda/device/blocks.cuh"
#include "cuda/device/convert.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/device/pdl.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::from_compute;
using cuda_device::load_cached16;
using cuda_device::load_stream16;
using cuda_device::mma_16816;
using cuda_device::pdl_launch_dependents;
using cuda_device::pdl_wait;
using cuda_device::to_compute;

constexpr const char* kOp = "[scaled_mm]";

template <typename T>
inline constexpr bool is_act_v = is_float8_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half> ||
                                 std::is_same_v<T, float>;
template <typename T>
inline constexpr bool is_out_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half> || std::is_same_v<T, float>;

// (A, W, Out) from the params: a float8 / bfloat16 / float16 / float32, w float8, out (and
// bias) bfloat16 / float16 / float32.
template <typename F>
void dispatch_scaled_mm_types(const ScaledMmParams& p, F&& f) {
  dispatch_all_types(p.a_dtype, kOp, [&](auto a) {
    using A = typename decltype(a)::type;
    if constexpr (is_act_v<A>) {
      dispatch_all_types(p.w_dtype, kOp, [&](auto w) {
        using W = typename decltype(w)::type;
        if constexpr (is_float8_v<W>) {
          dispatch_float_types(p.out_dtype, kOp, [&](auto o) {
            using Out = typename decltype(o)::type;
            if constexpr (is_out_v<Out>) f(a, w, o);
            else throw DTypeError(detail::cat_message(kOp, " output dtype ", dtype_name(p.out_dtype)));
          });
        } else {
          throw DTypeError(detail::cat_message(kOp, " w must be float8, got ", dtype_name(p.w_dtype)));
        }
      });
    } else {
      throw DTypeError(detail::cat_message(kOp, " a must be float8 or float32 / bfloat16 / float16, got ",
                                           dtype_name(p.a_dtype)));
    }
  });
}

// ---- shared epilogue: out[i, j] = round(acc * (sa(i) * sw(j)) + bias[j]); bias has Out's dtype.
// The epilogue's terms of out[i, j], loaded apart from the store so that the GEMV can load them
// early (right after pdl_wait) and hide their latency under the weight stream.
struct Epilogue {
  float scale = 1.f, bias = 0.f;
};
template <typename Out>
__device__ __forceinline__ Epilogue epilogue_of(const ScaledMmParams& p, int64_t i, int64_t j) {
  Epilogue e;
  const float sa = p.scale_a ? p.scale_a[p.scale_a_per_row ? i : 0] : 1.f;
  const float sw = p.scale_w ? p.scale_w[p.scale_w_per_row ? j : 0] : 1.f;
  e.scale = sa * sw;
  if (p.bias) e.bias = to_compute(static_cast<const Out*>(p.bias)[j]);
  return e;
}
template <typename Out>
__device__ __forceinline__ void store_epilogue(const ScaledMmParams& p, int64_t i, int64_t j, float acc, const Epilogue& e) {
  float v = acc * e.scale;
  if (p.bias) v += e.bias;
  static_cast<Out*>(p.out)[i * p.stride_out_row + j] = from_compute<Out>(v);
}
template <typename Out>
__device__ __forceinline__ void store_scaled(const ScaledMmParams& p, int64_t i, int64_t j, float acc) {
  store_epilogue<Out>(p, i, j, acc, epilogue_of<Out>(p, i, j));
}

// ---- gemv


// Sixteen float8 -> eight pairs of the mma type M (element order kept, exact).
template <typename F8, typename M>
__device__ __forceinline__ void decode16(const uint4& v, uint32_t (&h)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) cuda_device::fp8x4_to<M, F8>(words[i], h[2 * i], h[2 * i + 1]);
}

// How activations of type A meet the tensor cores: the mma operand type, the number of terms
// an element is split into (float32: three bfloat16 that sum to it exactly), the chunk loads.
template <typename A>
struct GemvAct {
  using Mma = std::conditional_t<std::is_same_v<A, BFloat16> || std::is_same_v<A, float>, BFloat16, Half>;
  static constexpr int kTerms = std::is_same_v<A, float> ? 3 : 1;
  static constexpr int kUnroll = std::is_same_v<A, float> ? 2 : 4;  // 64-column chunks per lane per step
};

template <typename T>
using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>>;

// Elements [k0, k0 + 16) of a row with element stride `stride`, zero past k: the path for
// misaligned or strided rows and for the chunk that crosses k.
template <typename T>
__device__ __forceinline__ void gather16(const T* row, int64_t k0, int64_t k, int64_t stride,
                                         uint4 (&raw)[sizeof(T)]) {
  Bits<T> e[16];
  const Bits<T>* r = reinterpret_cast<const Bits<T>*>(row);
#pragma unroll
  for (int i = 0; i < 16; ++i) e[i] = k0 + i < k ? r[(k0 + i) * stride] : Bits<T>(0);
  uint32_t* words = reinterpret_cast<uint32_t*>(raw);
#pragma unroll
  for (int wi = 0; wi < 4 * static_cast<int>(sizeof(T)); ++wi) {
    if constexpr (sizeof(T) == 1)
      words[wi] = e[4 * wi] | (e[4 * wi + 1] << 8) | (e[4 * wi + 2] << 16) | (uint32_t(e[4 * wi + 3]) << 24);
    else if constexpr (sizeof(T) == 2)
      words[wi] = e[2 * wi] | (uint32_t(e[2 * wi + 1]) << 16);
    else
      words[wi] = e[wi];
  }
}

// Raw activation chunk -> kTerms x 8 pairs of the mma type, same element order as the weight.
template <typename A>
__device__ __forceinline__ void act_pairs(const uint4 (&raw)[sizeof(A)],
                                          uint32_t (&x)[GemvAct<A>::kTerms][8]) {
  using M = typename GemvAct<A>::Mma;
  if constexpr (is_float8_v<A>) {
    decode16<A, M>(raw[0], x[0]);
  } else if constexpr (sizeof(A) == 2) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[0][i] = w[i];
  } else {
    // x = hi + mid + lo, each bfloat16: each residual is exact in float32 and the last has at
    // most 8 significant bits left. An infinite term leaves zero residuals (inf * w stays inf).
    const float* f = reinterpret_cast<const float*>(raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float r0 = f[2 * i], r1 = f[2 * i + 1];
#pragma unroll
      for (int term = 0; term < 3; ++term) {
        uint32_t b;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(b) : "f"(r1), "f"(r0));
        x[term][i] = b;
        const float h0 = __uint_as_float(b << 16), h1 = __uint_as_float(b & 0xFFFF0000u);
        r0 = isinf(h0) ? 0.f : r0 - h0;
        r1 = isinf(h1) ? 0.f : r1 - h1;
      }
    }
  }
}

// Where the GEMV applies block scales: nowhere (none, or scales in the epilogue); Uniform, the
// weight's blocks with one scale per chunk and 8-row tile, the same for the whole warp
// (fp8_blocks_in_dot, unit stride along k's blocks: scaled_linear); PerLane, a's and / or w's
// blocks of any rows and strides, each lane's two outputs with their own product of scales
// (scaled_mm's block-wise recipes).
enum class GemvScales { None, Uniform, PerLane };

// acc += one step of U 64-column chunks of R 8-row tiles: the lane's 16 columns of each chunk,
// decoded and fed to 4 mma.sync per tile and activation term. With block scales each chunk's
// products are summed apart and added times sc[u][r][e], the scale of chunk u for the lane's
// output e of tile r (Uniform: sc[u][r][0] for both; a chunk lies inside one block of k:
// block_k % 64 == 0).
template <typename A, typename W, int U, int R, GemvScales S = GemvScales::None>
__device__ __forceinline__ void gemv_step(float (&acc)[R][4], const uint4 (&wv)[U][R],
                                          const uint4 (&xv)[U][sizeof(A)], const float (*sc)[R][2] = nullptr) {
  constexpr bool Blocked = S != GemvScales::None;
  using M = typename GemvAct<A>::Mma;
  constexpr int T = GemvAct<A>::kTerms;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    uint32_t xh[T][8];
    act_pairs<A>(xv[u], xh);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t wh[8];
      decode16<W, M>(wv[u][r], wh);
      float part[4] = {};
      float (&d)[4] = Blocked ? part : acc[r];
#pragma unroll
      for (int term = 0; term < T; ++term) {
#pragma unroll
        for (int s = 0; s < 4; ++s) mma_16816<M>(d, xh[term][2 * s], xh[term][2 * s + 1], wh[2 * s], wh[2 * s + 1]);
      }
      if constexpr (Blocked) {
        acc[r][0] = fmaf(part[0], sc[u][r][0], acc[r][0]);
        acc[r][1] = fmaf(part[1], sc[u][r][S == GemvScales::PerLane ? 1 : 0], acc[r][1]);
      }
    }
  }
}

// The block scales of a step's chunks c + u * warps for tile r (srow[r]: the tile's row of the
// scale grid; block_k / 64 = 2^shift chunks per block, blocks past the grid's last one clamped:
// their chunks lie past k and load zeros).
template <int U, int R>
__device__ __forceinline__ void load_block_scales(const float* const (&srow)[R], int64_t c, int warps, int shift,
                                                  int64_t last, bool shared, float (&sc)[U][R][2]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t kb = std::min((c + u * warps) >> shift, last);
    sc[u][0][0] = __ldg(srow[0] + kb);
#pragma unroll
    for (int r = 1; r < R; ++r) sc[u][r][0] = shared ? sc[u][0][0] : __ldg(srow[r] + kb);
  }
}

// PerLane (both a_block and w_block): the lane's scale rows, found once. a_row: a's grid row of
// the lane's activation row; w_row[r][e]: w's grid row of its output e in tile r; w_tile: an
// 8-row tile lies in one block of w's rows (block_n % 8 == 0), so e = 0 serves both outputs.
template <int R>
struct LaneScales {
  const float* a_row = nullptr;
  const float* w_row[R][2] = {};
  bool w_tile = false;
};
template <int R>
__device__ __forceinline__ LaneScales<R> lane_scales(const ScaledMmParams& p, int64_t row0, int g, int t) {
  LaneScales<R> ls;
  ls.a_row = p.a_block.scale + cuda_device::block_of_row(std::min<int64_t>(g, p.m - 1), p.a_block.block_n) *
                                  p.a_block.stride_row;
  ls.w_tile = p.w_block.block_n % 8 == 0;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      ls.w_row[r][e] = p.w_block.scale +
                       cuda_device::block_of_row(std::min(row0 + 8 * r + 2 * t + e, p.n - 1), p.w_block.block_n) *
                           p.w_block.stride_row;
  return ls;
}
template <int U, int R>
__device__ __forceinline__ void load_lane_scales(const ScaledMmParams& p, const LaneScales<R>& ls, int64_t c,
                                                 int warps, int shift, int64_t last, float (&sc)[U][R][2]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t kb = std::min((c + u * warps) >> shift, last);
    const float sa = __ldg(ls.a_row + kb * p.a_block.stride_col);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float w0 = __ldg(ls.w_row[r][0] + kb * p.w_block.stride_col);
      const float w1 = ls.w_tile ? w0 : __ldg(ls.w_row[r][1] + kb * p.w_block.stride_col);
      sc[u][r][0] = sa * w0;
      sc[u][r][1] = sa * w1;
    }
  }
}

struct GemvConfig {
  int rows_per_block;  // 8 or 16 weight rows (R = 1 or 2 mma tiles)
  int warps;           // warps splitting k
  bool prefetch;       // bulk L2 prefetch of the block's weight rows before the wait
};

struct GemvArgs {
  bool w_vec, x_vec;  // 16-byte loads allowed on w rows / on a rows
  bool prefetch;
  int block_shift = 0;         // block scales: block_k / 64 = 2^block_shift chunks per block
  bool block_shared = false;   // and a block's rows span both tiles of 16 rows (one load)
};

constexpr int kGemvMaxWarps = 16;

// Sums the warps' partials of an 8-row tile and stores it: d[0], d[1] of lane (g, t) are
// acc(g, row0 + 2t + {0, 1}); thread i < 64 takes lane i / 2, element i % 2.
// The output element (row, j) thread i < 64 of an 8-row tile at row0 stores, with its epilogue
// terms (loaded by the kernel right after pdl_wait).
struct TileOut {
  int64_t row, j;
  Epilogue e;
};
template <typename Out>
__device__ __forceinline__ TileOut tile_out(const ScaledMmParams& p, int64_t row0, int i) {
  const int l = i / 2, el = i % 2;
  TileOut o{l / 4, row0 + 2 * (l % 4) + el, {}};
  if (o.row < p.m && o.j < p.n) o.e = epilogue_of<Out>(p, o.row, o.j);
  return o;
}

// Sums the warps' partials of thread i's element and stores it as store_scaled does.
template <typename Out>
__device__ __forceinline__ void store_tile(const ScaledMmParams& p, const float (*partial)[32][2], int warps, int i,
                                           const TileOut& o) {
  if (o.row >= p.m || o.j >= p.n) return;
  const int l = i / 2, el = i % 2;
  float s = 0.f;
  for (int wi = 0; wi < warps; ++wi) s += partial[wi][l][el];
  store_epilogue<Out>(p, o.row, o.j, s, o.e);
}

// A block per 8 * R weight rows; warps split k in 64-column chunks (4 lanes x 16 columns); lane
// (g, t) holds columns [16t, 16t + 16) of weight row g and of x row g (rows past m read row
// m - 1, rows past n read row n - 1; both only reach dropped outputs).
template <typename A, typename W, typename Out, int R, GemvScales S>
__global__ void __launch_bounds__(kGemvMaxWarps * 32) scaled_gemv_kernel(const __grid_constant__ ScaledMmParams p,
                                                                         const GemvArgs args) {
  constexpr int U = GemvAct<A>::kUnroll;
  constexpr bool Blocked = S != GemvScales::None;
  __shared__ float partial[R][kGemvMaxWarps][32][2];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 8 * R;

  pdl_launch_dependents();
  // Only the weight and its scales are touched before pdl_wait (never written by the previous
  // kernel), the weight only through L2.
  if (args.prefetch) cuda_device::prefetch_rows_l2(p.w, p.stride_w_row, row0, 8 * R, p.n, p.k);
  const float* srow[R] = {};
  int64_t last_block = 0;
  if constexpr (Blocked) last_block = cuda_device::last_chunk_block(p.k, args.block_shift);
  float sc[Blocked ? GemvAct<A>::kUnroll : 1][R][2];
  auto load_scales = [&](int64_t c0) {
    if constexpr (S == GemvScales::Uniform)
      load_block_scales<U, R>(srow, c0, warps, args.block_shift, last_block, args.block_shared, sc);
  };
  if constexpr (S == GemvScales::Uniform) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      srow[r] = p.w_block.scale +
                cuda_device::block_of_row(std::min(row0 + r * 8, p.n - 1), p.w_block.block_n) * p.w_block.stride_row;
    load_scales(warp);  // the first step's, their latency under the previous kernel's drain
  }
  pdl_wait();
  const TileOut out = threadIdx.x < 64 * R ? tile_out<Out>(p, row0 + 8 * (threadIdx.x / 64), threadIdx.x % 64) : TileOut{};

  const uint8_t* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(p.w) + std::min(row0 + r * 8 + g, p.n - 1) * p.stride_w_row;
  const A* x = static_cast<const A*>(p.a) + std::min<int64_t>(g, p.m - 1) * p.stride_a_row;
  // PerLane scales include a's (the previous kernel's output): after pdl_wait.
  LaneScales<S == GemvScales::PerLane ? R : 1> lanes;
  if constexpr (S == GemvScales::PerLane) lanes = lane_scales<R>(p, row0, g, t);
  auto step_scales = [&](int64_t c0) {
    if constexpr (S == GemvScales::Uniform) {
      if (c0 != warp) load_scales(c0);
    } else if constexpr (S == GemvScales::PerLane) {
      load_lane_scales<U, R>(p, lanes, c0, warps, args.block_shift, last_block, sc);
    }
  };
  float acc[R][4] = {};
  const int64_t chunks = (p.k + 63) / 64, step = static_cast<int64_t>(warps) * U;

  int64_t c = warp;
  if (args.w_vec) {
    // Steps whose chunks all lie inside k: every load issued before the first use.
    for (const int64_t full = p.k / 64; c + (U - 1) * warps < full; c += step) {
      uint4 wv[U][R], xv[U][sizeof(A)];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k0 = (c + u * warps) * 64 + t * 16;
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = load_stream16(w[r] + k0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k0 = (c + u * warps) * 64 + t * 16;
        if (args.x_vec) {
#pragma unroll
          for (int v = 0; v < static_cast<int>(sizeof(A)); ++v) xv[u][v] = load_cached16(x + k0 + v * 16 / sizeof(A));
        } else {
          gather16(x, k0, p.k, p.stride_a_col, xv[u]);
        }
      }
      step_scales(c);
      gemv_step<A, W, U, R, S>(acc, wv, xv, sc);
    }
  }
  // The last step, or every step of a misaligned weight: chunks past k load zeros.
  for (; c < chunks; c += step) {
    uint4 wv[U][R], xv[U][sizeof(A)];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = (c + u * warps) * 64 + t * 16;
      const bool inside = k0 + 16 <= p.k;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (inside && args.w_vec) wv[u][r] = load_stream16(w[r] + k0);
        else gather16(w[r], k0, p.k, 1, *reinterpret_cast<uint4(*)[1]>(&wv[u][r]));
      }
      if (inside && args.x_vec) {
#pragma unroll
        for (int v = 0; v < static_cast<int>(sizeof(A)); ++v) xv[u][v] = load_cached16(x + k0 + v * 16 / sizeof(A));
      } else {
        gather16(x, k0, p.k, p.stride_a_col, xv[u]);
      }
    }
    step_scales(c);
    __syncwarp();  // mma.sync is warp-collective: reconverge after the per-lane loads
    gemv_step<A, W, U, R, S>(acc, wv, xv, sc);
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    partial[r][warp][lane][0] = acc[r][0];
    partial[r][warp][lane][1] = acc[r][1];
  }
  __syncthreads();
  if (threadIdx.x < 64 * R) store_tile<Out>(p, partial[threadIdx.x / 64], warps, threadIdx.x % 64, out);
}



bool use_gemv(const ScaledMmParams& p) { return p.m <= kGemvMaxRows && p.stride_w_col == 1; }

// Which block scales the GEMV applies in its dots; false when it has no instance for them.
// Uniform (fp8_blocks_in_dot, unit stride along k's blocks): instances for e4m3 weights against
// 16-bit, float32 or e4m3 activations. PerLane (scaled_mm's block-wise recipes, both operands
// block-scaled): e4m3 x e4m3 with block_k = 64 x 2^i, the same for both.
template <typename A, typename W>
inline constexpr bool kHasBlockedGemv = std::is_same_v<W, Float8_e4m3fn> && !std::is_same_v<A, Float8_e5m2>;
template <typename A, typename W>
inline constexpr bool kHasPerLaneGemv = std::is_same_v<W, Float8_e4m3fn> && std::is_same_v<A, Float8_e4m3fn>;
bool gemv_scales(const ScaledMmParams& p, GemvScales& s) {
  if (!p.w_block.scale && !p.a_block.scale) {
    s = GemvScales::None;
    return true;
  }
  if (!p.a_block.scale && p.w_block.stride_col == 1 &&
      fp8_blocks_in_dot(p.w_dtype, p.w_block.block_n, p.w_block.block_k) && p.a_dtype != kFloat8_e5m2) {
    s = GemvScales::Uniform;
    return true;
  }
  s = GemvScales::PerLane;
  return p.a_block.scale && p.w_block.scale && p.a_dtype == kFloat8_e4m3fn && p.w_dtype == kFloat8_e4m3fn &&
         fp8_blocks_in_dot(p.w_dtype, 8, p.w_block.block_k) && p.a_block.block_k == p.w_block.block_k;
}

// Block shape by waves. A warp step covers `unroll` 64-column chunks, so `full` warps cover k in
// one step. The first shape that runs the grid in one wave (resident blocks from the occupancy
// API) wins: 8 rows x full warps (the most warps at work), then 16 rows x full warps (x loaded
// and decoded once for two tiles), else 16 rows x 4 warps of several steps each (the most
// resident blocks). A 16-row tile needs 4 warps for its epilogue's 64 threads. H200, graph
// replay: Qwen3-30B-A3B lm_head 2048 -> 151936 bf16 x e4m3 102.1 -> 87.6 us against a fixed 16
// rows x 8 warps. The L2 prefetch under PDL stops at 32 MiB, where it starts to cost 3-6 %. (The
// measurements: docs/PERFORMANCE.md, "CUDA scaled_mm GEMV and fused experts: launcher rules".)
template <typename Resident>
GemvConfig gemv_config(const ScaledMmParams& p, int unroll, int64_t sm_count, Resident&& resident) {
  const bool prefetch = p.n * p.k <= (int64_t{32} << 20);
  const int64_t chunks = (p.k + 63) / 64;
  const int full = static_cast<int>(std::clamp<int64_t>((chunks + unroll - 1) / unroll, 1, kGemvMaxWarps));
  for (const int rows : {8, 16}) {
    const int warps = std::max(full, rows / 4);
    const int64_t tiles = (p.n + rows - 1) / rows;
    if (tiles <= sm_count * resident(rows, warps)) return {rows, warps, prefetch};
  }
  return {16, 4, prefetch};
}

template <typename A, typename W, typename Out, GemvScales S>
void launch_gemv(const ScaledMmParams& p, const KernelLaunch& launch) {
  auto kernel_of = [](int rows) {
    return rows == 16 ? scaled_gemv_kernel<A, W, Out, 2, S> : scaled_gemv_kernel<A, W, Out, 1, S>;
  };
  auto resident = [&](int rows, int warps) { return resident_blocks(kernel_of(rows), warps * 32, 0); };
  const GemvConfig c = gemv_config(p, GemvAct<A>::kUnroll, launch.sm_count(), resident);
  const bool w_vec = rows_aligned16(p.w, p.n, p.stride_w_row, 1);
  GemvArgs args{w_vec, p.stride_a_col == 1 && rows_aligned16(p.a, p.m, p.stride_a_row, sizeof(A)), c.prefetch && w_vec};
  if (S != GemvScales::None) args.block_shift = fp8_block_shift(p.w_block.scale ? p.w_block.block_k : p.a_block.block_k);
  if (S == GemvScales::Uniform) args.block_shared = p.w_block.block_n % 16 == 0;
  const int64_t tiles = (p.n + c.rows_per_block - 1) / c.rows_per_block;
  ANVIL_CHECK(tiles <= 0x7FFFFFFF, ShapeError, kOp, " n = ", p.n, " is too large for the CUDA gemv");
  launch_pdl(kOp, kernel_of(c.rows_per_block), dim3(static_cast<unsigned>(tiles)), dim3(c.warps * 32), 0,
             launch.stream(), p, args);
}

// ---- tiled: any strides, any dtypes; a 64 x 64 tile of out per block, 4 x 4 per thread.
constexpr int kTile = 64, kTileK = 16, kTiledThreads = 256;

template <typename A, typename W, typename Out>
__global__ void __launch_bounds__(kTiledThreads) scaled_mm_tiled_kernel(const __grid_constant__ ScaledMmParams p) {
  __shared__ float as[kTileK][kTile + 4], ws[kTileK][kTile + 4];  // [q][i], [q][j]
  const int64_t tiles_n = (p.n + kTile - 1) / kTile;
  const int64_t i0 = blockIdx.x / tiles_n * kTile, j0 = blockIdx.x % tiles_n * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const A* a = static_cast<const A*>(p.a);
  const W* w = static_cast<const W*>(p.w);
  // Consecutive threads walk the operand's unit-stride dim when it has one (coalesced loads).
  const bool a_q_fast = p.stride_a_col == 1, w_q_fast = p.stride_w_col == 1;
  float acc[4][4] = {};
  for (int64_t q0 = 0; q0 < p.k; q0 += kTileK) {
    for (int e = threadIdx.x; e < kTile * kTileK; e += kTiledThreads) {
      int r = a_q_fast ? e / kTileK : e % kTile, c = a_q_fast ? e % kTileK : e / kTile;
      int64_t i = i0 + r, q = q0 + c;
      as[c][r] = i < p.m && q < p.k ? static_cast<float>(a[i * p.stride_a_row + q * p.stride_a_col]) : 0.f;
      if (p.a_block.scale && i < p.m && q < p.k)
        as[c][r] *= p.a_block.scale[i / p.a_block.block_n * p.a_block.stride_row +
                                    q / p.a_block.block_k * p.a_block.stride_col];
      r = w_q_fast ? e / kTileK : e % kTile;
      c = w_q_fast ? e % kTileK : e / kTile;
      const int64_t j = j0 + r;
      q = q0 + c;
      ws[c][r] = j < p.n && q < p.k ? static_cast<float>(w[j * p.stride_w_row + q * p.stride_w_col]) : 0.f;
      if (p.w_block.scale && j < p.n && q < p.k)
        ws[c][r] *= p.w_block.scale[j / p.w_block.block_n * p.w_block.stride_row +
                                    q / p.w_block.block_k * p.w_block.stride_col];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTileK; ++q) {
      float av[4], wv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        av[u] = as[q][ty + 16 * u];
        wv[u] = ws[q][tx + 16 * u];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(av[u], wv[v], acc[u][v]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int64_t i = i0 + ty + 16 * u, j = j0 + tx + 16 * v;
      if (i < p.m && j < p.n) store_scaled<Out>(p, i, j, acc[u][v]);
    }
  }
}

template <typename A, typename W, typename Out>
void launch_tiled(const ScaledMmParams& p, cudaStream_t stream) {
  const int64_t blocks = ((p.m + kTile - 1) / kTile) * ((p.n + kTile - 1) / kTile);
  ANVIL_CHECK(blocks <= 0x7FFFFFFF, ShapeError, kOp, " [", p.m, ", ", p.n, "] output is too large");
  scaled_mm_tiled_kernel<A, W, Out><<<static_cast<unsigned>(blocks), kTiledThreads, 0, stream>>>(p);
}

// ---- cuBLASLt FP8. out^T [n, m] (column-major) = w [n, k] . a^T: cuBLASLt's A is w read
// transposed (k x n, ld stride_w_row), its B is a (k x m, ld stride_a_row): the TN layout FP8
// needs. So cuBLASLt's A scale is scale_w (an outer vector over n) and its B scale scale_a.

// Row-wise scales and the bias in the epilogue of a float32 product [m, n].
template <typename Out>
__global__ void __launch_bounds__(256) scale_bias_kernel(const __grid_constant__ ScaledMmParams p, const float* prod) {
  const int64_t total = p.m * p.n;
  for (int64_t e = blockIdx.x * int64_t{256} + threadIdx.x; e < total; e += int64_t{gridDim.x} * 256)
    store_scaled<Out>(p, e / p.n, e % p.n, prod[e]);
}

// Block-wise recipes (scaled_mm's 1x128 / 128x128 scales of both operands) map onto cuBLASLt's
// VEC128_32F (one scale per 128 k of a row: the grid [rows, L] with the row index at unit stride,
// as the front end checks) and BLK128x128_32F (the grid [ceil(rows / 128), L] with L at unit
// stride and the row-block stride rounded up to 4 floats: a grid with another stride is copied
// into that layout). cuBLASLt's A is w, its B is a (see make_fp8_plan). e4m3 x e4m3 only.
enum class LtBlocks { None, Vec128, Blk128 };
LtBlocks lt_blocks(const BlockScale& b, int64_t rows, int64_t k) {
  if (!b.scale || b.block_k != 128 || (b.block_n != 1 && b.block_n != 128) || !aligned16(b.scale))
    return LtBlocks::None;
  const int64_t l = (k + 127) / 128;
  if (b.block_n == 1)
    return (rows == 1 || b.stride_row == 1) && (l == 1 || b.stride_col == rows) ? LtBlocks::Vec128 : LtBlocks::None;
  return l == 1 || b.stride_col == 1 ? LtBlocks::Blk128 : LtBlocks::None;
}
bool lt_block_pair(const ScaledMmParams& p) {
  const LtBlocks a = lt_blocks(p.a_block, p.m, p.k), w = lt_blocks(p.w_block, p.n, p.k);
  return p.a_dtype == kFloat8_e4m3fn && p.w_dtype == kFloat8_e4m3fn && a != LtBlocks::None && w != LtBlocks::None &&
         !(a == LtBlocks::Blk128 && w == LtBlocks::Blk128);
}
// The row-block stride cuBLASLt's BLK128x128 grids need.
int64_t blk_stride(int64_t k) { return ((k + 127) / 128 + 3) / 4 * 4; }

bool use_cublaslt(const ScaledMmParams& p) {
  const int64_t out_bytes = static_cast<int64_t>(element_size(p.out_dtype));
  const bool blocks = p.w_block.scale || p.a_block.scale;
  return p.m > kGemvMaxRows && (!blocks || lt_block_pair(p)) && is_float8(p.a_dtype) && is_float8(p.w_dtype) &&
         !(p.a_dtype == kFloat8_e5m2 && p.w_dtype == kFloat8_e5m2) && p.stride_a_col == 1 && p.stride_w_col == 1 &&
         p.k % 16 == 0 && p.n % 16 == 0 && aligned16(p.a) && aligned16(p.w) && aligned16(p.out) &&
         p.stride_a_row % 16 == 0 && p.stride_a_row >= p.k && p.stride_w_row % 16 == 0 && p.stride_w_row >= p.k &&
         (p.stride_out_row * out_bytes) % 16 == 0 && p.stride_out_row >= p.n &&
         (!p.bias || (aligned16(p.bias) && p.bias_dtype == p.out_dtype));
}

// cuBLASLt's name of a dtype this path uses.
cudaDataType_t cuda_type(DType t) {
  return dispatch_all_types(t, kOp, [](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Float8_e4m3fn>) return CUDA_R_8F_E4M3;
    else if constexpr (std::is_same_v<T, Float8_e5m2>) return CUDA_R_8F_E5M2;
    else if constexpr (std::is_same_v<T, BFloat16>) return CUDA_R_16BF;
    else if constexpr (std::is_same_v<T, Half>) return CUDA_R_16F;
    else return CUDA_R_32F;  // float32 (other dtypes never reach cuBLASLt here)
  });
}

// fused: scales and bias inside cuBLASLt, out written directly; otherwise a float32 product.
// a_scale / w_scale: the block grids as cuBLASLt reads them when they were copied into its
// layout (null: the params' own).
cublasLtMatmulDesc_t make_fp8_desc(const ScaledMmParams& p, bool fused, const float* a_scale = nullptr,
                                   const float* w_scale = nullptr) {
  cublasLtMatmulDesc_t d = nullptr;
  lt::check(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), kOp);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& v) {
    lt::check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), kOp);
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{0});  // torch._scaled_mm's default
  if (p.w_block.scale) {
    // Block scales act inside the K reduction, so both forms carry them; `fused` adds the bias.
    auto mode = [&](const BlockScale& b, int64_t rows) {
      return static_cast<int32_t>(lt_blocks(b, rows, p.k) == LtBlocks::Vec128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                                                : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
    };
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale ? w_scale : p.w_block.scale));
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode(p.w_block, p.n));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a_scale ? a_scale : p.a_block.scale));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode(p.a_block, p.m));
  }
  if (!fused) return d;
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (p.scale_w && !p.w_block.scale) {
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.scale_w));
    if (p.scale_w_per_row) set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer);
  }
  if (p.scale_a && !p.a_block.scale) {
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.scale_a));
    if (p.scale_a_per_row) set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer);
  }
  if (p.bias) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cuda_type(p.bias_dtype)));
  }
  return d;
}

// The plan for one configuration; `found` false when cuBLASLt has no algorithm for it.
lt::Plan make_fp8_plan(cublasLtHandle_t handle, const ScaledMmParams& p, bool fused,
                       const std::array<uint32_t, 3>& align) {
  lt::Plan plan;
  plan.desc = make_fp8_desc(p, fused);
  const auto n = static_cast<uint64_t>(p.n), m = static_cast<uint64_t>(p.m), k = static_cast<uint64_t>(p.k);
  plan.first = lt::make_layout(cuda_type(p.w_dtype), k, n, p.stride_w_row);
  plan.second = lt::make_layout(cuda_type(p.a_dtype), k, m, p.stride_a_row);
  plan.out = fused ? lt::make_layout(cuda_type(p.out_dtype), n, m, p.stride_out_row)
                   : lt::make_layout(CUDA_R_32F, n, m, p.n);
  lt::choose_algo(handle, plan, align);
  return plan;
}

// Returns false (nothing launched) when cuBLASLt takes neither form.
bool run_cublaslt(const ScaledMmParams& p, int device, cudaStream_t stream) {
  const std::array<uint32_t, 3> align = {lt::alignment_of(p.w), lt::alignment_of(p.a), lt::alignment_of(p.out)};
  auto scale_mode = [&](const float* s, bool per_row, const BlockScale& b, int64_t rows) {
    if (b.scale) return lt_blocks(b, rows, p.k) == LtBlocks::Vec128 ? 3 : 4;
    return s == nullptr ? 0 : per_row ? 2 : 1;
  };
  lt::PlanKey key = {lt::kKeyScaledMm, device, static_cast<int64_t>(p.a_dtype), static_cast<int64_t>(p.w_dtype),
                     static_cast<int64_t>(p.out_dtype), p.bias ? 1 : 0, p.m, p.n, p.k, p.stride_a_row,
                     p.stride_w_row, p.stride_out_row, scale_mode(p.scale_a, p.scale_a_per_row, p.a_block, p.m),
                     scale_mode(p.scale_w, p.scale_w_per_row, p.w_block, p.n), align[0], align[1], align[2],
                     /*fused=*/1};
  const lt::Plan* plan =
      &lt::plan(device, key, [&](cublasLtHandle_t h) { return make_fp8_plan(h, p, true, align); });
  const bool fused = plan->found;
  if (!fused) {
    key.back() = 0;
    plan = &lt::plan(device, key, [&](cublasLtHandle_t h) { return make_fp8_plan(h, p, false, align); });
    if (!plan->found) return false;
  }
  const lt::Context ctx = lt::context(device, stream);
  // BLK128x128 grids whose row-block stride is not cuBLASLt's: copied into its layout.
  auto relaid = [&](const BlockScale& b, int64_t rows, std::optional<allocator::Scratch>& store) -> const float* {
    const int64_t row_blocks = (rows + 127) / 128, l = (p.k + 127) / 128, want = blk_stride(p.k);
    if (!b.scale || b.block_n != 128 || row_blocks == 1 || b.stride_row == want) return nullptr;
    store.emplace(device, static_cast<size_t>(row_blocks * want) * sizeof(float), stream);
    ANVIL_CUDA_CHECK(kOp, cudaMemcpy2DAsync(store->get(), static_cast<size_t>(want) * sizeof(float), b.scale,
                                            static_cast<size_t>(b.stride_row) * sizeof(float),
                                            static_cast<size_t>(l) * sizeof(float), static_cast<size_t>(row_blocks),
                                            cudaMemcpyDeviceToDevice, stream));
    return static_cast<const float*>(store->get());
  };
  std::optional<allocator::Scratch> a_grid, w_grid;
  const float* a_scale = relaid(p.a_block, p.m, a_grid);
  const float* w_scale = relaid(p.w_block, p.n, w_grid);
  // The descriptor carries this call's scale and bias pointers, so it is made per call.
  cublasLtMatmulDesc_t desc = make_fp8_desc(p, fused, a_scale, w_scale);
  allocator::Scratch prod(device, fused ? 0 : static_cast<size_t>(p.m * p.n) * sizeof(float), stream);
  void* d = fused ? p.out : prod.get();
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t st = cublasLtMatmul(ctx.handle, desc, &alpha, p.w, plan->first, p.a, plan->second, &beta, d,
                                           plan->out, d, plan->out, &plan->algo, ctx.workspace, lt::kWorkspaceBytes,
                                           stream);
  cublasLtMatmulDescDestroy(desc);
  lt::check(st, kOp);
  if (!fused) {
    dispatch_float_types(p.out_dtype, kOp, [&](auto o) {
      using Out = typename decltype(o)::type;
      if constexpr (is_out_v<Out>) {
        const int64_t blocks = std::min<int64_t>((p.m * p.n + 255) / 256, int64_t{1} << 16);
        scale_bias_kernel<Out><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p, static_cast<const float*>(d));
      }
    });
  }
  return true;
}

}  // namespace

void scaled_mm(const ScaledMmParams& p) {
  if (p.m == 0 || p.n == 0) return;
  ANVIL_CHECK(!p.bias || p.bias_dtype == p.out_dtype, DTypeError, kOp, " bias dtype ", dtype_name(p.bias_dtype),
              " must be the output's (", dtype_name(p.out_dtype), ")");
  KernelLaunch launch(p.out);
  if (p.k == 0 || !use_cublaslt(p) || !run_cublaslt(p, launch.device(), launch.stream())) {
    dispatch_scaled_mm_types(p, [&](auto a, auto w, auto o) {
      using A = typename decltype(a)::type;
      using W = typename decltype(w)::type;
      using Out = typename decltype(o)::type;
      GemvScales scales = GemvScales::None;
      const bool gemv = p.k > 0 && use_gemv(p) && gemv_scales(p, scales);
      if (gemv && scales == GemvScales::None) {
        launch_gemv<A, W, Out, GemvScales::None>(p, launch);
      } else if (gemv && scales == GemvScales::Uniform) {
        if constexpr (kHasBlockedGemv<A, W>) launch_gemv<A, W, Out, GemvScales::Uniform>(p, launch);
        else throw DTypeError(detail::cat_message(kOp, " no block-scaled GEMV for ", dtype_name(p.w_dtype)));
      } else if (gemv) {
        if constexpr (kHasPerLaneGemv<A, W>) launch_gemv<A, W, Out, GemvScales::PerLane>(p, launch);
        else throw DTypeError(detail::cat_message(kOp, " no block-scaled GEMV for ", dtype_name(p.a_dtype)));
      } else {
        launch_tiled<A, W, Out>(p, launch.stream());
      }
    });
  }
  launch.check(kOp);
}

}  // namespace anvil::cuda_backend
