// CPU softmax / log_softmax over the middle dim of [outer, dim, inner].
// Contiguous rows (inner == 1) run three Highway passes in float32 (max, sum of exp, scale);
// a single long row (the decode logits, [1, 151936]) is split across the threads with a
// barrier between passes. Strided dims (inner > 1) and float64 take scalar loops.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/softmax.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/softmax.h"
#include "cpu/simd.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float RowMax(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto m0 = hn::Set(df, -std::numeric_limits<float>::infinity()), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    m0 = hn::Max(m0, hn::LoadU(df, x + i));
    m1 = hn::Max(m1, hn::LoadU(df, x + i + N));
  }
  float m = hn::GetLane(hn::MaxOfLanes(df, hn::Max(m0, m1)));
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// exp(v) for v <= 0 (softmax's x - max) or NaN (kept): v = n ln2 + r by Cody-Waite (ln 2 in
// two parts, n * hi exact), e^r on |r| <= ln2 / 2 by its degree-7 Taylor polynomial (truncation
// < 0.1 ulp), 2^n placed in the exponent bits; below -87.34 (results under the smallest normal
// float, -inf included) 0. About 1 ulp, 17 vector operations against Highway Exp's 25 and its
// NaN select (the exp pass is the CPU softmax's compute-bound part).
template <class D, class V>
HWY_INLINE V ExpNonPositive(D df, V v) {
  const hn::RebindToSigned<D> di;
  const V n = hn::Round(hn::Mul(v, hn::Set(df, 1.44269504088896341f)));
  V r = hn::MulAdd(n, hn::Set(df, -0.693145751953125f), v);
  r = hn::MulAdd(n, hn::Set(df, -1.42860676533018704e-06f), r);
  V p = hn::Set(df, 1.0f / 5040);
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 720));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(df, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  const V two_n = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenZeroElse(hn::Lt(v, hn::Set(df, -87.3365f)), hn::Mul(p, two_n));
}

// Sum of exp(x - m); stores the terms to e when e is not null.
float RowExpSum(const float* HWY_RESTRICT x, float* HWY_RESTRICT e, int64_t n, float m) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vm = hn::Set(df, m);
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  int64_t i = 0;
  // Four independent exp chains per step (each is ~20 dependent operations).
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto a = ExpNonPositive(df, hn::Sub(hn::LoadU(df, x + i), vm));
    const auto b = ExpNonPositive(df, hn::Sub(hn::LoadU(df, x + i + N), vm));
    const auto c = ExpNonPositive(df, hn::Sub(hn::LoadU(df, x + i + 2 * N), vm));
    const auto d = ExpNonPositive(df, hn::Sub(hn::LoadU(df, x + i + 3 * N), vm));
    s0 = hn::Add(s0, a);
    s1 = hn::Add(s1, b);
    s2 = hn::Add(s2, c);
    s3 = hn::Add(s3, d);
    if (e) {
      hn::StoreU(a, df, e + i);
      hn::StoreU(b, df, e + i + N);
      hn::StoreU(c, df, e + i + 2 * N);
      hn::StoreU(d, df, e + i + 3 * N);
    }
  }
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) {
    const float t = std::exp(x[i] - m);
    s += t;
    if (e) e[i] = t;
  }
  return s;
}

// y = y * scale (softmax) or y = (x - max) - log_sum (log_softmax: subtracting max first keeps
// the result exact to float32 for large |x|, as PyTorch does).
void RowFinish(const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n, float scale, float max, float log_sum,
               bool log) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if (log) {
    const auto vm = hn::Set(df, max), vl = hn::Set(df, log_sum);
    for (; i + N <= n; i += N) hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(df, x + i), vm), vl), df, y + i);
    for (; i < n; ++i) y[i] = (x[i] - max) - log_sum;
  } else {
    const auto vs = hn::Set(df, scale);
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, y + i), vs), df, y + i);
    for (; i < n; ++i) y[i] *= scale;
  }
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu {
namespace simd {
HWY_EXPORT(RowMax);
HWY_EXPORT(RowExpSum);
HWY_EXPORT(RowFinish);

float row_max(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
float exp_sum(const float* x, float* e, int64_t n, float m) { return HWY_DYNAMIC_DISPATCH(RowExpSum)(x, e, n, m); }
}  // namespace simd

namespace {

// Below this many elements per row, rows are not split across threads.
constexpr int64_t kSplitRowElements = 16384;

void row_finish(const float* x, float* y, int64_t n, float scale, float max, float log_sum, bool log) {
  HWY_DYNAMIC_DISPATCH(simd::RowFinish)(x, y, n, scale, max, log_sum, log);
}

// One float32 row; x and y may alias (the low-precision path converts into y first).
void softmax_row(const float* x, float* y, int64_t n, bool log) {
  const float m = simd::row_max(x, n);
  const float s = simd::exp_sum(x, log ? nullptr : y, n, m);
  row_finish(x, y, n, 1.0f / s, m, std::log(s), log);
}

// Converts `n` values between float dtypes through float32 scratch when needed.
void to_f32(DType t, const void* src, float* dst, int64_t n) {
  if (t == DType::Float32) std::copy_n(static_cast<const float*>(src), n, dst);
  else simd::convert(DType::Float32, t, dst, src, n);
}
void from_f32(DType t, const float* src, void* dst, int64_t n) {
  if (t == DType::Float32) std::copy_n(src, n, static_cast<float*>(dst));
  else simd::convert(t, DType::Float32, dst, src, n);
}

// Contiguous rows (inner == 1), float32 compute.
void softmax_rows(const SoftmaxParams& p) {
  const int64_t n = p.dim_size;
  const bool direct = p.in_dtype == DType::Float32 && p.out_dtype == DType::Float32;
  const char* in = static_cast<const char*>(p.in);
  char* out = static_cast<char*>(p.out);
  const size_t is = element_size(p.in_dtype), os = element_size(p.out_dtype);
  const int nthreads = omp_get_max_threads();
  if (p.outer < nthreads && n >= kSplitRowElements) {
    // Few long rows: every thread takes a slice of each row; passes meet at barriers.
    std::vector<float> part_max(static_cast<size_t>(nthreads)), part_sum(static_cast<size_t>(nthreads));
    std::vector<float> scratch(direct ? 0 : static_cast<size_t>(n));
    for (int64_t r = 0; r < p.outer; ++r) {
      const float* x = direct ? reinterpret_cast<const float*>(in) + r * n : scratch.data();
      float* y = direct ? reinterpret_cast<float*>(out) + r * n : scratch.data();
#pragma omp parallel num_threads(nthreads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
        if (!direct) to_f32(p.in_dtype, in + (r * n + i0) * is, scratch.data() + i0, i1 - i0);
        part_max[t] = simd::row_max(x + i0, i1 - i0);
#pragma omp barrier
        float m = part_max[0];
        for (int u = 1; u < nt; ++u) m = std::max(m, part_max[u]);
        for (int u = 0; u < nt; ++u) m = std::isnan(part_max[u]) ? part_max[u] : m;
        part_sum[t] = simd::exp_sum(x + i0, p.log ? nullptr : y + i0, i1 - i0, m);
#pragma omp barrier
        float s = 0;
        for (int u = 0; u < nt; ++u) s += part_sum[u];
        row_finish(x + i0, y + i0, i1 - i0, 1.0f / s, m, std::log(s), p.log);
        if (!direct) from_f32(p.out_dtype, y + i0, out + (r * n + i0) * os, i1 - i0);
#pragma omp barrier
      }
    }
    return;
  }
#pragma omp parallel if (p.outer * n >= kSplitRowElements)
  {
    std::vector<float> scratch(direct ? 0 : static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.outer; ++r) {
      if (direct) {
        softmax_row(reinterpret_cast<const float*>(in) + r * n, reinterpret_cast<float*>(out) + r * n, n, p.log);
      } else {
        to_f32(p.in_dtype, in + r * n * is, scratch.data(), n);
        softmax_row(scratch.data(), scratch.data(), n, p.log);
        from_f32(p.out_dtype, scratch.data(), out + r * n * os, n);
      }
    }
  }
}

// Any layout in the accumulation type A (float for low precision and float32, double for
// float64): per outer slice, running max / sum vectors over the inner columns.
template <typename A>
void softmax_strided(const SoftmaxParams& p) {
  dispatch_float_types(p.in_dtype, "[softmax]", [&](auto in_tag) {
    dispatch_float_types(p.out_dtype, "[softmax]", [&](auto out_tag) {
      using TI = typename decltype(in_tag)::type;
      using TO = typename decltype(out_tag)::type;
      const TI* in = static_cast<const TI*>(p.in);
      TO* out = static_cast<TO*>(p.out);
      const int64_t d = p.dim_size, inner = p.inner;
#pragma omp parallel if (p.outer * d * inner >= kSplitRowElements)
      {
        std::vector<A> m(static_cast<size_t>(inner)), s(static_cast<size_t>(inner));
#pragma omp for schedule(static)
        for (int64_t o = 0; o < p.outer; ++o) {
          const TI* x = in + o * d * inner;
          TO* y = out + o * d * inner;
          std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
          std::fill(s.begin(), s.end(), A(0));
          for (int64_t j = 0; j < d; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              const A v = static_cast<A>(x[j * inner + i]);
              m[i] = std::isnan(v) || v > m[i] ? v : m[i];
            }
          for (int64_t j = 0; j < d; ++j)
            for (int64_t i = 0; i < inner; ++i) s[i] += std::exp(static_cast<A>(x[j * inner + i]) - m[i]);
          for (int64_t j = 0; j < d; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              const A v = static_cast<A>(x[j * inner + i]);
              y[j * inner + i] = convert<TO>(p.log ? (v - m[i]) - std::log(s[i]) : std::exp(v - m[i]) / s[i]);
            }
        }
      }
    });
  });
}

}  // namespace

void softmax(const SoftmaxParams& p) {
  if (p.in_dtype == DType::Float64 || p.out_dtype == DType::Float64) return softmax_strided<double>(p);
  if (p.inner == 1) return softmax_rows(p);
  softmax_strided<float>(p);
}

namespace simd {
void softmax_row(const float* x, float* y, int64_t n) { cpu::softmax_row(x, y, n, false); }
}  // namespace simd

}  // namespace anvil::cpu
#endif  // HWY_ONCE
