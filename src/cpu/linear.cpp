// CPU GEMV for linear's few-row (decode) case: y[m, n] = x[m, k] @ w[n, k]^T (+ bias).
// The weight streams from memory once: each thread owns a contiguous range of weight rows and
// keeps R rows x M activation rows of float32 accumulators in registers; x is widened to
// float32 once. float32 weights, bfloat16 and float16 widened in registers (exact), one
// rounding per output. float64 takes a scalar path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/linear.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>
#include <hwy/cache_control.h>

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "core/kernels.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows [j, j + R) of y for all M rows of x. x is float32 [M, k] contiguous.
template <typename T, int M, int R>
HWY_INLINE void GemvRows(const T* HWY_RESTRICT w, int64_t stride_w, const float* HWY_RESTRICT x, int64_t k,
                         const T* HWY_RESTRICT bias, T* HWY_RESTRICT y, int64_t stride_y, int64_t j) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<decltype(df)> acc[R][M];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[r][i] = hn::Zero(df);
  const T* wr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) wr[r] = w + (j + r) * stride_w;
  int64_t q = 0;
  for (; q + N <= k; q += N) {
    hn::Vec<decltype(df)> xv[M];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) xv[i] = hn::LoadU(df, x + i * k + q);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // The next R rows, one block ahead: rows are short streams (4 KiB at k = 2048) that the
      // hardware prefetcher alone ramps up on too late.
      hwy::Prefetch(wr[r] + R * stride_w + q);
      const auto wv = LoadAsF32(df, wr[r] + q);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) acc[r][i] = hn::MulAdd(wv, xv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r][i]));
      for (int64_t t = q; t < k; ++t) s += static_cast<float>(wr[r][t]) * x[i * k + t];
      if (bias) s += static_cast<float>(bias[j + r]);
      y[i * stride_y + j + r] = T(s);
    }
  }
}

// Weight rows [j0, j1) for M = m rows of x: R rows at a time, then single rows.
template <typename T, int M>
void GemvRange(const T* w, int64_t stride_w, const float* x, int64_t k, const T* bias, T* y, int64_t stride_y,
               int64_t j0, int64_t j1) {
  // Accumulators R * M plus M activation vectors stay within the 32 vector registers of AVX-512.
  constexpr int R = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  int64_t j = j0;
  for (; j + R <= j1; j += R) GemvRows<T, M, R>(w, stride_w, x, k, bias, y, stride_y, j);
  for (; j < j1; ++j) GemvRows<T, M, 1>(w, stride_w, x, k, bias, y, stride_y, j);
}

template <typename T>
void GemvT(const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, const void* bias, void* y,
           int64_t stride_y, int64_t j0, int64_t j1) {
  const T* W = static_cast<const T*>(w);
  const T* B = static_cast<const T*>(bias);
  T* Y = static_cast<T*>(y);
  switch (m) {
    case 1: return GemvRange<T, 1>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    case 2: return GemvRange<T, 2>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    case 3: return GemvRange<T, 3>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    case 4: return GemvRange<T, 4>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    case 5: return GemvRange<T, 5>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    case 6: return GemvRange<T, 6>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    case 7: return GemvRange<T, 7>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
    default: return GemvRange<T, 8>(W, stride_w, x, k, B, Y, stride_y, j0, j1);
  }
}
void GemvF32(const void* w, int64_t sw, const float* x, int64_t m, int64_t k, const void* b, void* y, int64_t sy,
             int64_t j0, int64_t j1) {
  GemvT<float>(w, sw, x, m, k, b, y, sy, j0, j1);
}
void GemvBF16(const void* w, int64_t sw, const float* x, int64_t m, int64_t k, const void* b, void* y, int64_t sy,
              int64_t j0, int64_t j1) {
  GemvT<BFloat16>(w, sw, x, m, k, b, y, sy, j0, j1);
}
void GemvF16(const void* w, int64_t sw, const float* x, int64_t m, int64_t k, const void* b, void* y, int64_t sy,
             int64_t j0, int64_t j1) {
  GemvT<Half>(w, sw, x, m, k, b, y, sy, j0, j1);
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu {
namespace simd {
HWY_EXPORT(GemvF32);
HWY_EXPORT(GemvBF16);
HWY_EXPORT(GemvF16);
}  // namespace simd

namespace {

// Below this many weight elements one thread reads the weight faster than a team wakes up.
constexpr int64_t kGemvParallelElements = 1 << 16;

void gemv_f64(const GemvParams& p, int64_t j0, int64_t j1) {
  const double* x = static_cast<const double*>(p.x);
  const double* w = static_cast<const double*>(p.w);
  const double* b = static_cast<const double*>(p.bias);
  double* y = static_cast<double*>(p.y);
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double s = 0;
      for (int64_t q = 0; q < p.k; ++q) s += x[i * p.stride_x_row + q] * w[j * p.stride_w_row + q];
      y[i * p.stride_y_row + j] = b ? s + b[j] : s;
    }
}

}  // namespace

void gemv(const GemvParams& p) {
  // x widened to float32 once ([m, k] contiguous); it stays in L1/L2 while the weight streams.
  std::vector<float> x32;
  if (p.dtype != DType::Float64) {
    x32.resize(static_cast<size_t>(p.m * p.k));
    dispatch_float_types(p.dtype, "[linear]", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = static_cast<const T*>(p.x);
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t q = 0; q < p.k; ++q) x32[i * p.k + q] = static_cast<float>(x[i * p.stride_x_row + q]);
    });
  }
  auto run = [&](int64_t j0, int64_t j1) {
    if (j0 >= j1) return;
    switch (p.dtype) {
      case DType::Float32:
        HWY_DYNAMIC_DISPATCH(simd::GemvF32)(p.w, p.stride_w_row, x32.data(), p.m, p.k, p.bias, p.y, p.stride_y_row, j0, j1);
        break;
      case DType::BFloat16:
        HWY_DYNAMIC_DISPATCH(simd::GemvBF16)(p.w, p.stride_w_row, x32.data(), p.m, p.k, p.bias, p.y, p.stride_y_row, j0, j1);
        break;
      case DType::Float16:
        HWY_DYNAMIC_DISPATCH(simd::GemvF16)(p.w, p.stride_w_row, x32.data(), p.m, p.k, p.bias, p.y, p.stride_y_row, j0, j1);
        break;
      default:
        gemv_f64(p, j0, j1);
        break;
    }
  };
  // Contiguous row ranges, multiples of 4 rows, one per thread.
#pragma omp parallel if (p.n * p.k >= kGemvParallelElements)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t blocks = (p.n + 3) / 4;
    const int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
    run(std::min(p.n, b0 * 4), std::min(p.n, b1 * 4));
  }
}

}  // namespace anvil::cpu
#endif  // HWY_ONCE
