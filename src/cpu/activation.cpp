// CPU silu_mul: out = silu(gate) * up = gate / (1 + exp(-gate)) * up in float32 (float64 for
// float64), one rounding. Float rows go in 4096-element chunks: both operands widened to float32,
// a Highway pass (Highway's Exp, within 1 ulp), the result rounded back in one encode.
// The same for the contiguous float32 / bfloat16 / float16 unary silu, sigmoid and exp
// (simd::unary; element.h's scalar formulas otherwise): the FLUX VAE's SiLUs spent 10 % of its
// CPU decode in the scalar loop and libm's expf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/activation.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/activation.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(a) by Highway's Exp, which covers the finite range only: past ln(FLT_MAX) the result is
// inf; NaN stays NaN.
template <class D, class V>
V GuardedExp(D df, V a) {
  const auto e = hn::IfThenElse(hn::Gt(a, hn::Set(df, 88.75f)), hn::Set(df, HUGE_VALF), hn::Exp(df, a));
  return hn::IfThenElse(hn::IsNaN(a), a, e);
}

void SiluMulF32(const float* HWY_RESTRICT g, const float* HWY_RESTRICT u, float* HWY_RESTRICT y, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, g + i);
    const auto silu = hn::Div(v, hn::Add(one, GuardedExp(df, hn::Neg(v))));
    hn::StoreU(hn::Mul(silu, hn::LoadU(df, u + i)), df, y + i);
  }
  if (i < n) {  // the tail through the same vector code (an element's bits do not depend on its position)
    alignas(64) float tg[HWY_MAX_BYTES / sizeof(float)] = {}, tu[HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy(g + i, g + n, tg);
    std::copy(u + i, u + n, tu);
    const auto v = hn::Load(df, tg);
    const auto silu = hn::Div(v, hn::Add(one, GuardedExp(df, hn::Neg(v))));
    hn::Store(hn::Mul(silu, hn::Load(df, tu)), df, tg);
    std::copy(tg, tg + (n - i), y + i);
  }
}

// op 0: silu x / (1 + exp(-x)); 1: sigmoid 1 / (1 + exp(-x)); 2: exp(x). In place allowed.
void ExpFamilyF32(int op, const float* HWY_RESTRICT x, float* y, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  auto apply = [&](hn::Vec<decltype(df)> v) {
    const auto e = GuardedExp(df, op == 2 ? v : hn::Neg(v));
    return op == 2 ? e : hn::Div(op == 0 ? v : one, hn::Add(one, e));
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(apply(hn::LoadU(df, x + i)), df, y + i);
  if (i < n) {  // the tail through the same vector code (an element's bits do not depend on its position)
    alignas(64) float t[HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy(x + i, x + n, t);
    hn::Store(apply(hn::Load(df, t)), df, t);
    std::copy(t, t + (n - i), y + i);
  }
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu {
namespace {
constexpr int64_t kChunk = 4096;  // elements widened to float32 at a time
}  // namespace

namespace simd {
HWY_EXPORT(SiluMulF32);
HWY_EXPORT(ExpFamilyF32);

bool unary(UnaryOp op, DType t, void* out, const void* in, int64_t n) {
  const int code = op == UnaryOp::Silu ? 0 : op == UnaryOp::Sigmoid ? 1 : op == UnaryOp::Exp ? 2 : -1;
  if (code < 0 || !(t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16)) return false;
  const size_t es = element_size(t);
  const int64_t blocks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t s = b * kChunk, len = std::min(kChunk, n - s);
    const void* src = static_cast<const char*>(in) + s * static_cast<int64_t>(es);
    void* dst = static_cast<char*>(out) + s * static_cast<int64_t>(es);
    if (t == DType::Float32) {
      HWY_DYNAMIC_DISPATCH(ExpFamilyF32)(code, static_cast<const float*>(src), static_cast<float*>(dst), len);
      continue;
    }
    alignas(64) float buf[kChunk];
    decode_f32(t, src, buf, len);
    HWY_DYNAMIC_DISPATCH(ExpFamilyF32)(code, buf, buf, len);
    encode_f32(t, buf, dst, len);
  }
  return true;
}
}  // namespace simd

void silu_mul(const SiluMulParams& p) {
  if (p.dtype == DType::Float64) {
    const double* gate = static_cast<const double*>(p.gate);
    const double* up = static_cast<const double*>(p.up);
    double* out = static_cast<double*>(p.out);
#pragma omp parallel for schedule(static) if (p.rows * p.cols >= kParallelGrain)
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t c = 0; c < p.cols; ++c) {
        const double v = gate[r * p.stride_gate_row + c];
        out[r * p.stride_out_row + c] = v / (1.0 + std::exp(-v)) * up[r * p.stride_up_row + c];
      }
    return;
  }
  dispatch_float_types(p.dtype, "[silu_mul]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gate = static_cast<const T*>(p.gate);
    const T* up = static_cast<const T*>(p.up);
    T* out = static_cast<T*>(p.out);
    const int64_t chunks_per_row = (p.cols + kChunk - 1) / kChunk;
#pragma omp parallel if (p.rows * p.cols >= kParallelGrain)
    {
      std::vector<float> g(kChunk), u(kChunk);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < p.rows * chunks_per_row; ++t) {
        const int64_t r = t / chunks_per_row, c0 = t % chunks_per_row * kChunk, n = std::min(kChunk, p.cols - c0);
        simd::decode_f32(p.dtype, gate + r * p.stride_gate_row + c0, g.data(), n);
        simd::decode_f32(p.dtype, up + r * p.stride_up_row + c0, u.data(), n);
        HWY_DYNAMIC_DISPATCH(simd::SiluMulF32)(g.data(), u.data(), g.data(), n);
        simd::encode_f32(p.dtype, g.data(), out + r * p.stride_out_row + c0, n);
      }
    }
  });
}

}  // namespace anvil::cpu
#endif  // HWY_ONCE
