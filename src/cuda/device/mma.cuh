#pragma once
// Tensor-core building blocks of the GEMV-shaped and tiled product kernels (linear, grouped_mm):
// 16-byte loads, mma.sync m16n8k16 with float32 accumulation, ldmatrix and cp.async for
// shared-memory tiles, and float8 pairs decoded into the 16-bit mma operand types.
// Fragment layout of m16n8k16 (g = lane / 4, t = lane % 4): a0 / a2 hold A[g][2t..2t+1] /
// A[g][2t+8..2t+9], a1 / a3 the same of row g + 8; b0 / b1 hold B[2t..2t+1][g] /
// B[2t+8..2t+9][g]; d0, d1 = D[g][2t..2t+1], d2, d3 = D[g+8][2t..2t+1].
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "anvil/numeric.h"

namespace anvil::cuda_device {

// ---- global loads

// Read once per call (weights): keep them out of L1 so reused operands stay there.
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load_cached16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
// bytes (a multiple of 16) at p (16-byte aligned) asked of L2 by the bulk copy engine; nothing
// waits for them.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
// Thread i < rows asks L2 for weight row row0 + i (rows past n skipped): its first row_bytes
// (at most 1 MiB, in 16-byte multiples; rows 16-byte aligned). Used before pdl_wait: L2 serves
// it coherently with the previous kernel's writes.
__device__ __forceinline__ void prefetch_rows_l2(const void* w, int64_t stride_bytes, int64_t row0, int rows,
                                                 int64_t n, int64_t row_bytes) {
  const int64_t j = row0 + threadIdx.x;
  const uint32_t bytes = static_cast<uint32_t>(std::min<int64_t>(row_bytes, int64_t{1} << 20) & ~int64_t{15});
  if (static_cast<int>(threadIdx.x) >= rows || j >= n || bytes == 0) return;
  prefetch_l2(static_cast<const char*>(w) + j * stride_bytes, bytes);
}

// ---- mma.sync m16n8k16, float32 accumulation; T is BFloat16 or Half.

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>);
  if constexpr (std::is_same_v<T, BFloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// A rows 8..15 zero (at most 8 rows of x): only d[0], d[1] carry results.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  mma_m16n8k16<T>(d, a0, 0u, a2, 0u, b0, b1);
}

// One 32-column tile of the GEMVs (x as A, 8 weight rows as B): a lane's 8 elements of each are
// two k16 steps (elements 0-3, then 4-7); the k order inside a tile is the same permutation for
// x and w, which a dot product does not notice.
template <typename T>
__device__ __forceinline__ void mma_tile32(float (&d)[4], const uint4& x, const uint4& w) {
  mma_16816<T>(d, x.x, x.y, w.x, w.y);
  mma_16816<T>(d, x.z, x.w, w.z, w.w);
}

// ---- shared-memory tiles

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Four 8x8 16-bit matrices; lane l gives the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The same, transposed: lane (g, t) receives elements [2t][g] and [2t + 1][g] of each matrix
// (a row-major [k][n] tile in shared memory as the B operand of mma.sync, e.g. attention's v).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared, the last 16 - src_bytes zero-filled (src_bytes 0: all zeros).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 4 bytes global -> shared (cached in L1).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- float8 pairs -> 16-bit mma operands (exact: every e4m3fn / e5m2 value is a float16 and a
// bfloat16 value). Byte 0 of `v` becomes the low half.

template <typename F8>
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint16_t v) {
  uint32_t r;
  if constexpr (std::is_same_v<F8, Float8_e4m3fn>) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(v));
  return r;
}

__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t v) {
  float lo, hi;
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(static_cast<uint16_t>(v & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(static_cast<uint16_t>(v >> 16)));
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four float8 values (one 32-bit word) -> two 16-bit pairs of type T.
template <typename T, typename F8>
__device__ __forceinline__ void fp8x4_to(uint32_t w, uint32_t& p0, uint32_t& p1) {
  p0 = fp8x2_to_f16x2<F8>(static_cast<uint16_t>(w & 0xFFFFu));
  p1 = fp8x2_to_f16x2<F8>(static_cast<uint16_t>(w >> 16));
  if constexpr (std::is_same_v<T, BFloat16>) {
    p0 = f16x2_to_bf16x2(p0);
    p1 = f16x2_to_bf16x2(p1);
  }
}

// Eight e4m3fn values (8 bytes, byte 0 first) -> eight T (bfloat16 / float16) as mma operand
// words, exact. float16: the conversion instruction. bfloat16: each byte's sign and its 7 magnitude
// bits move into a bfloat16 (exponent field = e4m3's, mantissa m << 4: the value times 2^-120, a
// subnormal when e = 0), then one multiply by 2^120 in bfloat16 (exact; subnormals are kept): no
// float32 round trip (f16x2_to_bf16x2 costs three conversions per pair). The NaN codes 0x7F / 0xFF
// come out as +-480 on the bfloat16 path (a NaN on the float16 one).
template <typename T>
__device__ __forceinline__ uint4 e4m3x8_to(uint2 w) {
  uint32_t r[4];
  const uint32_t in[2] = {w.x, w.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (std::is_same_v<T, BFloat16>) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a = __byte_perm(in[i], 0u, h == 0 ? 0x1404u : 0x3424u);  // bytes 2h, 2h + 1 at bits 8.., 24..
        const uint32_t b = (a & 0x80008000u) | ((a & 0x7F007F00u) >> 4);
        asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r[2 * i + h]) : "r"(b), "r"(0x7B807B80u));  // 2^120 twice
      }
    } else {
      r[2 * i] = fp8x2_to_f16x2<Float8_e4m3fn>(static_cast<uint16_t>(in[i] & 0xFFFFu));
      r[2 * i + 1] = fp8x2_to_f16x2<Float8_e4m3fn>(static_cast<uint16_t>(in[i] >> 16));
    }
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

template <typename T>
inline constexpr bool is_fp8_v = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;

// The mma operand type: bfloat16 activations keep bfloat16, the rest (float16, float8) are
// exact in float16.
template <typename A>
using MmaOf = std::conditional_t<std::is_same_v<A, BFloat16>, BFloat16, Half>;

// One 16-byte weight load of lane (g, t): V = 16 / sizeof(W) consecutive k of weight row g,
// with the lane's x values at the same k from A rows g (x) and g + 8 (xh); V / 4 mma steps.
template <typename A, typename W>
__device__ __forceinline__ void mma_chunk(float (&acc)[4], const uint4& w, const uint4* x, const uint4* xh) {
  using M = MmaOf<A>;
  constexpr int V = 16 / sizeof(W);
  uint32_t wp[V / 2], xp[V / 2], hp[V / 2];
  const uint32_t* wr = reinterpret_cast<const uint32_t*>(&w);
  if constexpr (is_fp8_v<W>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) fp8x4_to<M, W>(wr[i], wp[2 * i], wp[2 * i + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) wp[i] = wr[i];
  }
  if constexpr (is_fp8_v<A>) {
    const uint32_t* xr = reinterpret_cast<const uint32_t*>(x);
    const uint32_t* hr = reinterpret_cast<const uint32_t*>(xh);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      fp8x4_to<M, A>(xr[i], xp[2 * i], xp[2 * i + 1]);
      fp8x4_to<M, A>(hr[i], hp[2 * i], hp[2 * i + 1]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      xp[i] = reinterpret_cast<const uint32_t*>(x)[i];
      hp[i] = reinterpret_cast<const uint32_t*>(xh)[i];
    }
  }
#pragma unroll
  for (int i = 0; i < V / 4; ++i) mma_m16n8k16<M>(acc, xp[2 * i], hp[2 * i], xp[2 * i + 1], hp[2 * i + 1], wp[2 * i], wp[2 * i + 1]);
}

}  // namespace anvil::cuda_device
