// CPU GEMV for linear's few-row (decode) case: y[m, n] = x[m, k] @ w[n, k]^T (+ bias).
// The weight streams from memory once: each thread owns a contiguous range of weight rows and
// keeps R rows x M activation rows of float32 accumulators in registers; x is widened to
// float32 once. float32 weights, bfloat16 and float16 widened in registers (exact), one
// rounding per output; bfloat16 x bfloat16 through bf16 pair products where the CPU has them
// (cpu/bf16_dots_x86.cpp). float64 takes a scalar path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/linear.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "core/kernels/linear.h"
#include "cpu/simd-inl.h"
#include "cpu/simd.h"
#include "cpu/gemv-inl.h"
#include "cpu/loop.h"

#ifndef ANVIL_CPU_LINEAR_STORE_
#define ANVIL_CPU_LINEAR_STORE_
namespace anvil::cpu {
// y[i, j] = round(dot + bias[j]): linear's one rounding (both GEMV paths).
template <typename T>
inline void store_dot(const T* bias, T* y, int64_t stride_y, int64_t i, int64_t j, float s) {
  if (bias) s += static_cast<float>(bias[j]);
  y[i * stride_y + j] = T(s);
}
}  // namespace anvil::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <typename T>
void GemvT(const void* w, int64_t stride_w, const float* x, int64_t m, int64_t k, const void* bias, void* y,
           int64_t stride_y, int64_t j0, int64_t j1) {
  const T* B = static_cast<const T*>(bias);
  T* Y = static_cast<T*>(y);
  Gemv(static_cast<const T*>(w), stride_w, x, m, k, j0, j1,
       [&](int64_t i, int64_t j, float s) { store_dot(B, Y, stride_y, i, j, s); });
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

// bfloat16 weights and activations through simd::bf16_dots where the CPU has it (x at half the
// bytes stays in L1 next to the weight stream at long k; each weight load serves every x row,
// each x load several weight rows). 2 Zen 5 threads, interleaved runs, fraction of a sum
// measured alongside: m = 1, k 8192-14336: 0.76-0.94 -> 0.88-1.04 (k <= 4096 equal); m = 8,
// 2048 -> 4096: 1755-1871 -> 919-1144 us. The dots of rows [j0, j1), then bias and one rounding
// as GemvT does.
bool gemv_bf16_dots(const GemvParams& p, const float* x32, int64_t j0, int64_t j1) {
  thread_local std::vector<float> dots;
  dots.resize(static_cast<size_t>(p.m * (j1 - j0)));
  if (!simd::bf16_dots(DType::BFloat16, static_cast<const BFloat16*>(p.w) + j0 * p.stride_w_row, p.stride_w_row, x32,
                       p.m, p.k, dots.data(), j1 - j0, 0, j1 - j0))
    return false;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = j0; j < j1; ++j)
      store_dot(static_cast<const BFloat16*>(p.bias), static_cast<BFloat16*>(p.y), p.stride_y_row, i, j,
                dots[static_cast<size_t>(i * (j1 - j0) + j - j0)]);
  return true;
}

}  // namespace

// The CPU has no fused add_rms_norm_linear: the op composes add_rms_norm's and the GEMV's kernels.
FusedPlan add_rms_norm_linear_plan(const AddRmsNormLinearParams&) { return FusedPlan::Composed; }

void add_rms_norm_linear(const AddRmsNormLinearParams&) {
  throw Error("[add_rms_norm_linear] the CPU backend has no fused kernel (its plan is composed)");
}

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
    dispatch_float_types(p.dtype, "[linear]", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float>) {
        HWY_DYNAMIC_DISPATCH(simd::GemvF32)(p.w, p.stride_w_row, x32.data(), p.m, p.k, p.bias, p.y, p.stride_y_row, j0, j1);
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        if (!gemv_bf16_dots(p, x32.data(), j0, j1))
          HWY_DYNAMIC_DISPATCH(simd::GemvBF16)(p.w, p.stride_w_row, x32.data(), p.m, p.k, p.bias, p.y, p.stride_y_row, j0,
                                               j1);
      } else if constexpr (std::is_same_v<T, Half>) {
        HWY_DYNAMIC_DISPATCH(simd::GemvF16)(p.w, p.stride_w_row, x32.data(), p.m, p.k, p.bias, p.y, p.stride_y_row, j0, j1);
      } else {
        gemv_f64(p, j0, j1);  // double (dispatch_float_types throws on every other dtype)
      }
    });
  };
  // Row ranges of multiples of 4 rows, ~16 per thread, each thread's own share first (its rows
  // stay in its cache across calls), the others' after (for_each_chunk_affine).
  const bool parallel = p.n * p.k >= kGemvParallelElements;
  const int64_t nt = parallel ? omp_get_max_threads() : 1;
  const int64_t rows = std::max<int64_t>(16, (p.n / (16 * nt) + 3) / 4 * 4);
  for_each_chunk_affine((p.n + rows - 1) / rows, parallel,
                        [&](int64_t c) { run(c * rows, std::min(p.n, (c + 1) * rows)); });
}

}  // namespace anvil::cpu
#endif  // HWY_ONCE
