// The CPU GEMV core shared by linear, scaled_mm and grouped_mm: dot products of M activation
// rows (float32, [M, k] contiguous) with weight rows streamed once. Per-target Highway code:
// include after <hwy/highway.h> and cpu/simd-inl.h in a file compiled through
// hwy/foreach_target.h; the guard toggles once per target pass.
#if defined(ANVIL_CPU_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ANVIL_CPU_GEMV_INL_H_
#undef ANVIL_CPU_GEMV_INL_H_
#else
#define ANVIL_CPU_GEMV_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>

#include "cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The weight kGemvPrefetchBytes ahead along the row, into L2 (prefetcht1). Rows are usually
// contiguous, so near a row's end it reaches into the next row. Measured on 2 Zen 5 threads
// (median of 12 interleaved runs, bf16, m = 1, as a fraction of the read ceiling): the whole
// next row into L1 (the previous scheme) 0.76-0.81 at every shape; no software prefetch
// 1.06-1.17 for k <= 4096 but 0.79-0.85 for k >= 8192 (x no longer fits L1 next to the
// stream); 4 KiB ahead into L2 1.08-1.10 and 0.95-0.99.
template <typename T>
HWY_INLINE void PrefetchL2(const T* p) {
  __builtin_prefetch(reinterpret_cast<const char*>(p) + kGemvPrefetchBytes, 0, 2);
}

// Weight rows [j, j + R) against the M rows of x: R x M float32 accumulators in registers, the
// weight widened in registers (LoadScaledF32; the dot times kWidenScale). store(i, j, dot) receives each float32 dot product.
// With few accumulators (R * M <= 8) each gets a second one for the odd vectors of a step, so
// the FMA chains are two deep per step instead of one chain of two (4-cycle FMA latency, one
// row at m = 1, bounded the stream at ~64 bytes per 8 cycles per core).
template <typename T, int M, int R, bool Blocked = false, class Store>
HWY_INLINE void GemvRows(const T* HWY_RESTRICT w, int64_t stride_w, const float* HWY_RESTRICT x, int64_t k, int64_t j,
                         const Store& store, const BlockScale* block = nullptr) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  constexpr int S = R * M <= 8 ? 2 : 1;  // accumulator sets
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  V acc[S][R][M], total[Blocked ? R : 1][Blocked ? M : 1];
  auto zero = [&] {
#pragma GCC unroll 8
    for (int a = 0; a < S; ++a)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) acc[a][r][i] = hn::Zero(df);
  };
  zero();
  const T* wr[R];
  const float* srow[R] = {};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    wr[r] = w + (j + r) * stride_w;
    if constexpr (Blocked) {
      srow[r] = block->scale + (j + r) / block->block_n * block->stride_row;
      for (int i = 0; i < M; ++i) total[r][i] = hn::Zero(df);
    }
  }
  // Blocked: the products of each block_k columns (a multiple of 2N) summed apart, then added
  // times the row's block scale.
  const int64_t span = Blocked ? block->block_k : k, last_block = Blocked ? (k - 1) / span : 0;
  int64_t q = 0;
  for (int64_t q0 = 0; q0 < k; q0 += span) {
    const int64_t q1 = std::min(k, q0 + span);
    for (q = q0; q + 2 * N <= q1; q += 2 * N) {
      V xa[M], xb[M];
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        xa[i] = hn::LoadU(df, x + i * k + q);
        xb[i] = hn::LoadU(df, x + i * k + q + N);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        PrefetchL2(wr[r] + q);
        V wa, wb;
        LoadScaledF32x2(df, wr[r] + q, wa, wb);
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) {
          if constexpr (S == 2) {
            acc[0][r][i] = hn::MulAdd(wa, xa[i], acc[0][r][i]);
            acc[S - 1][r][i] = hn::MulAdd(wb, xb[i], acc[S - 1][r][i]);
          } else {
            acc[0][r][i] = hn::MulAdd(wb, xb[i], hn::MulAdd(wa, xa[i], acc[0][r][i]));
          }
        }
      }
    }
    for (; q + N <= q1; q += N) {
      V xv[M];
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) xv[i] = hn::LoadU(df, x + i * k + q);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        PrefetchL2(wr[r] + q);
        const auto wv = LoadScaledF32(df, wr[r] + q);
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) acc[0][r][i] = hn::MulAdd(wv, xv[i], acc[0][r][i]);
      }
    }
    if constexpr (Blocked) {
      if (q < q1) break;  // a tail shorter than N: scalar, below
      for (int r = 0; r < R; ++r) {
        const V sv = hn::Set(df, srow[r][q0 / span]);
        for (int i = 0; i < M; ++i)
          total[r][i] = hn::MulAdd(S == 2 ? hn::Add(acc[0][r][i], acc[S - 1][r][i]) : acc[0][r][i], sv, total[r][i]);
      }
      zero();
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) {
      V a = S == 2 ? hn::Add(acc[0][r][i], acc[S - 1][r][i]) : acc[0][r][i];
      if constexpr (Blocked) a = hn::MulAdd(a, hn::Set(df, srow[r][std::min(q / span, last_block)]), total[r][i]);
      float s = hn::GetLane(hn::SumOfLanes(df, a)) * kWidenScale<T>;
      for (int64_t t = q; t < k; ++t)
        s += static_cast<float>(wr[r][t]) * x[i * k + t] * (Blocked ? srow[r][t / span] : 1.f);
      store(i, j + r, s);
    }
  }
}

// Weight rows [j0, j1) for M rows of x: R rows at a time, then single rows.
template <typename T, int M, bool Blocked = false, class Store>
void GemvRange(const T* w, int64_t stride_w, const float* x, int64_t k, int64_t j0, int64_t j1, const Store& store,
               const BlockScale* block = nullptr) {
  // Accumulators R * M plus M activation vectors stay within the 32 vector registers of AVX-512.
  // One row (a single weight stream per thread) measured faster than four interleaved rows at
  // m = 1 (best-of-4 geomean over five shapes: 34-38 vs 28-30 GB/s on 2 Zen 5 threads).
  constexpr int R = M == 1 ? 1 : M <= 2 ? 4 : M <= 4 ? 2 : 1;
  int64_t j = j0;
  for (; j + R <= j1; j += R) GemvRows<T, M, R, Blocked>(w, stride_w, x, k, j, store, block);
  for (; j < j1; ++j) GemvRows<T, M, 1, Blocked>(w, stride_w, x, k, j, store, block);
}

// m in [1, 8] rows of x.
template <typename T, bool Blocked = false, class Store>
void Gemv(const T* w, int64_t stride_w, const float* x, int64_t m, int64_t k, int64_t j0, int64_t j1,
          const Store& store, const BlockScale* block = nullptr) {
  switch (m) {
    case 1: return GemvRange<T, 1, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    case 2: return GemvRange<T, 2, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    case 3: return GemvRange<T, 3, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    case 4: return GemvRange<T, 4, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    case 5: return GemvRange<T, 5, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    case 6: return GemvRange<T, 6, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    case 7: return GemvRange<T, 7, Blocked>(w, stride_w, x, k, j0, j1, store, block);
    default: return GemvRange<T, 8, Blocked>(w, stride_w, x, k, j0, j1, store, block);
  }
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ANVIL_CPU_GEMV_INL_H_
