// Highway kernels for contiguous hot paths, compiled for every x86 target Highway knows and
// chosen at run time. Their results are bit-identical to element.h's scalar semantics.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd.cpp"
#include <hwy/foreach_target.h>  // NOLINT: must precede highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "anvil/version.h"
#include "core/dispatch.h"
#include "core/element.h"
#include "cpu/loop.h"
#include "cpu/simd.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// bfloat16 bits (in 32-bit lanes) of float32 bits: round to nearest even, NaN -> 0x7FC0.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundToBF16Bits(DU du, hn::Vec<DU> u) {
  const hn::RebindToFloat<DU> df;
  const auto is_nan = hn::RebindMask(du, hn::IsNaN(hn::BitCast(df, u)));  // one unordered compare
  const auto bias = hn::Add(hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)), hn::Set(du, 0x7FFFu));
  return hn::IfThenElse(is_nan, hn::Set(du, 0x7FC0u), hn::ShiftRight<16>(hn::Add(u, bias)));
}
// The kernels below that take X = float or uint16_t (bfloat16 bits) compute in float32 and
// store as X: Lanes(df) values of X at p as float32, and a float32 vector stored as X (bfloat16
// rounded to nearest even, NaN -> 0x7FC0); ToF32 / FromF32 are the same for one value.
template <typename X, class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const X* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<X, float>) {
    return hn::LoadU(df, p);
  } else {
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, decltype(du)> d16;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
}
template <typename X, class DF>
HWY_INLINE void StoreFromF32(DF df, hn::Vec<DF> v, X* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<X, float>) {
    hn::StoreU(v, df, p);
  } else {
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, decltype(du)> d16;
    hn::StoreU(hn::TruncateTo(d16, RoundToBF16Bits(du, hn::BitCast(du, v))), d16, p);  // the bits fit 16: truncate (one shuffle)
  }
}
template <typename X>
HWY_INLINE float ToF32(X v) {
  if constexpr (std::is_same_v<X, float>) return v;
  else return bf16_bits_to_f32(v);
}
template <typename X>
HWY_INLINE X FromF32(float v) {
  if constexpr (std::is_same_v<X, float>) return v;
  else return f32_to_bf16_bits(v);
}

// float32 -> bfloat16 bits: round to nearest even, NaN -> 0x7FC0.
void F32ToBF16(const float* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) StoreFromF32(df, hn::LoadU(df, in + i), out + i);
  for (; i < n; ++i) out[i] = f32_to_bf16_bits(in[i]);
}

// y[r ldy + j] = bf16(c[r ldc + j] + bias[j]) for r < rows, j < cols (no add without a bias),
// rounded as F32ToBF16.
void BiasRowsToBF16(const float* HWY_RESTRICT c, int64_t ldc, const float* HWY_RESTRICT bias, uint16_t* HWY_RESTRICT y,
                    int64_t ldy, int64_t rows, int64_t cols) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = c + r * ldc;
    uint16_t* out = y + r * ldy;
    int64_t j = 0;
    for (; j + N <= cols; j += N) {
      auto x = hn::LoadU(df, v + j);
      if (bias) x = hn::Add(x, hn::LoadU(df, bias + j));
      StoreFromF32(df, x, out + j);
    }
    for (; j < cols; ++j) out[j] = f32_to_bf16_bits(bias ? v[j] + bias[j] : v[j]);
  }
}

void BF16ToF32(const uint16_t* HWY_RESTRICT in, float* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadF32(df, in + i), df, out + i);
  for (; i < n; ++i) out[i] = bf16_bits_to_f32(in[i]);
}

// float32 -> float8, bit-identical to element.h: the integer rounding for normals, and for
// subnormals an FP add of a power of two whose ulp is the format's subnormal step (2^14 for
// e4m3fn's 2^-9, 2^7 for e5m2's 2^-16), which rounds to nearest even exactly like the scalar
// path. e4m3fn saturates (+-inf and |x| >= 480 -> +-448); e5m2 overflows to inf.
struct E4M3Consts {
  static constexpr int kShift = 20;
  static constexpr uint32_t kRebias = 0xC407FFFFu;    // ((7 - 127) << 23) + 0x7FFFF
  static constexpr float kMagic = 16384.0f;
  static constexpr uint32_t kMinNormal = 0x3C800000u;  // 2^-6
  static constexpr uint32_t kLastFinite = 0x43EFFFFFu; // below 480
  static constexpr uint32_t kOverflow = 0x7Eu;         // saturate to 448
  static constexpr uint32_t kMaxNormal = 0x7Eu;        // 0x7F would be NaN: clamp
};
struct E5M2Consts {
  static constexpr int kShift = 21;
  static constexpr uint32_t kRebias = 0xC80FFFFFu;    // ((15 - 127) << 23) + 0xFFFFF
  static constexpr float kMagic = 128.0f;
  static constexpr uint32_t kMinNormal = 0x38800000u;  // 2^-14
  static constexpr uint32_t kLastFinite = 0x477FFFFFu; // below 65536
  static constexpr uint32_t kOverflow = 0x7Cu;         // inf
  static constexpr uint32_t kMaxNormal = 0x7Cu;        // rounding up to inf is the format's rule
};

template <class C>
void F32ToF8(const float* HWY_RESTRICT in, uint8_t* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<uint8_t, decltype(du)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(du));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto u = hn::BitCast(du, hn::LoadU(df, in + i));
    auto a = hn::And(u, hn::Set(du, 0x7FFFFFFFu));
    auto sign = hn::And(hn::ShiftRight<24>(u), hn::Set(du, 0x80u));
    auto odd = hn::And(hn::ShiftRight<C::kShift>(a), hn::Set(du, 1u));
    auto normal = hn::ShiftRight<C::kShift>(hn::Add(hn::Add(a, hn::Set(du, C::kRebias)), odd));
    normal = hn::Min(normal, hn::Set(du, C::kMaxNormal));
    auto magic = hn::Set(df, C::kMagic);
    auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), magic)), hn::BitCast(du, magic));
    auto big = hn::IfThenElse(hn::Gt(a, hn::Set(du, 0x7F800000u)), hn::Set(du, 0x7Fu), hn::Set(du, C::kOverflow));
    auto r = hn::IfThenElse(hn::Lt(a, hn::Set(du, C::kMinNormal)), sub, normal);
    r = hn::IfThenElse(hn::Gt(a, hn::Set(du, C::kLastFinite)), big, r);
    r = hn::Or(r, sign);
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, r)), d8, out + i);
  }
  for (; i < n; ++i) out[i] = C::kShift == 20 ? f32_to_e4m3fn_bits(in[i]) : f32_to_e5m2_bits(in[i]);
}
void F32ToE4M3(const float* HWY_RESTRICT in, uint8_t* HWY_RESTRICT out, int64_t n) { F32ToF8<E4M3Consts>(in, out, n); }
void F32ToE5M2(const float* HWY_RESTRICT in, uint8_t* HWY_RESTRICT out, int64_t n) { F32ToF8<E5M2Consts>(in, out, n); }

// float32 -> float16 bits: F16C-class hardware rounding (nearest even, overflow to inf), with
// NaN lanes rewritten to sign|0x7E00 like the scalar rule.
void F32ToF16(const float* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::LoadU(df, in + i);
    auto h = hn::BitCast(d16, hn::DemoteTo(dh, v));  // NaN stays NaN with its sign
    auto is_nan = hn::Gt(hn::And(h, hn::Set(d16, uint16_t{0x7FFF})), hn::Set(d16, uint16_t{0x7C00}));
    auto nan16 = hn::Or(hn::And(h, hn::Set(d16, uint16_t{0x8000})), hn::Set(d16, uint16_t{0x7E00}));
    hn::StoreU(hn::IfThenElse(is_nan, nan16, h), d16, out + i);
  }
  for (; i < n; ++i) out[i] = f32_to_f16_bits(in[i]);
}

// float16 bits -> float32: hardware widening (exact), NaN lanes rebuilt like the scalar rule
// (quiet bit set, payload and sign kept).
void F16ToF32(const uint16_t* HWY_RESTRICT in, float* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto h16 = hn::LoadU(d16, in + i);
    auto f = hn::PromoteTo(df, hn::BitCast(dh, h16));
    auto h = hn::PromoteTo(du, h16);
    auto is_nan = hn::Gt(hn::And(h, hn::Set(du, 0x7FFFu)), hn::Set(du, 0x7C00u));
    auto nan = hn::Or(hn::Or(hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u))), hn::Set(du, 0x7FC00000u)),
                      hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x3FFu))));
    hn::StoreU(hn::BitCast(df, hn::IfThenElse(is_nan, nan, hn::BitCast(du, f))), df, out + i);
  }
  for (; i < n; ++i) out[i] = f16_bits_to_f32(in[i]);
}

// float8 bytes -> float32 through a 256-entry table built from the scalar decoder.
void F8ToF32(const uint8_t* HWY_RESTRICT in, float* HWY_RESTRICT out, int64_t n, const float* HWY_RESTRICT table) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto idx = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<decltype(df)>(), hn::LoadU(d8, in + i)));
    hn::StoreU(hn::GatherIndex(df, table, idx), df, out + i);
  }
  for (; i < n; ++i) out[i] = table[in[i]];
}

// out = a op b over n elements: a / b runs of n elements (kA / kB) or one element repeated.
template <typename T, bool kA, bool kB>
void BinaryF32(int op, T* HWY_RESTRICT out, const T* HWY_RESTRICT a, const T* HWY_RESTRICT b, float alpha, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto valpha = hn::Set(df, alpha);
  // The repeated values (read only for an operand that repeats one).
  const auto a0 = kA ? hn::Zero(df) : hn::Set(df, static_cast<float>(a[0]));
  const auto b0 = kB ? hn::Zero(df) : hn::Set(df, static_cast<float>(b[0]));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto x = kA ? LoadAsF32(df, a + i) : a0, y = kB ? LoadAsF32(df, b + i) : b0;
    hn::Vec<decltype(df)> r;
    if (op == 0) r = hn::Add(x, hn::Mul(valpha, y));
    else if (op == 1) r = hn::Sub(x, hn::Mul(valpha, y));
    else r = hn::Mul(x, y);
    if constexpr (std::is_same_v<T, float>) hn::StoreU(r, df, out + i);
    else StoreFromF32(df, r, reinterpret_cast<uint16_t*>(out + i));
  }
  for (; i < n; ++i) {
    float x = static_cast<float>(a[kA ? i : 0]), y = static_cast<float>(b[kB ? i : 0]);
    float r = op == 0 ? x + alpha * y : op == 1 ? x - alpha * y : x * y;
    out[i] = T(r);
  }
}
template <typename T>
void BinaryRow(int op, T* out, const T* a, bool a_run, const T* b, bool b_run, float alpha, int64_t n) {
  if (a_run && b_run) BinaryF32<T, true, true>(op, out, a, b, alpha, n);
  else if (a_run) BinaryF32<T, true, false>(op, out, a, b, alpha, n);
  else if (b_run) BinaryF32<T, false, true>(op, out, a, b, alpha, n);
  else BinaryF32<T, false, false>(op, out, a, b, alpha, n);
}
void BinaryF32Float(int op, float* out, const float* a, bool a_run, const float* b, bool b_run, float alpha, int64_t n) {
  BinaryRow(op, out, a, a_run, b, b_run, alpha, n);
}
void BinaryBF16(int op, BFloat16* out, const BFloat16* a, bool a_run, const BFloat16* b, bool b_run, float alpha, int64_t n) {
  BinaryRow(op, out, a, a_run, b, b_run, alpha, n);
}

// GEMM micro-kernel on a packed panel of B: c[i, 0:w] = sum_p a[i, p] * panel[p, 0:2N], four
// rows of A at a time, each row's two accumulator vectors fed by one broadcast of a[i, p].
int64_t PanelWidth() { return 2 * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

void GemmPanel(const float* HWY_RESTRICT a, int64_t m, int64_t k, const float* HWY_RESTRICT panel,
               float* HWY_RESTRICT c, int64_t ldc, int64_t w) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  alignas(64) float tmp[4 * 2 * (HWY_MAX_BYTES / sizeof(float))];
  for (int64_t i = 0; i < m; i += 4) {
    const int64_t rows = std::min<int64_t>(4, m - i);
    // Rows past m read row i again; their sums are discarded.
    const float* a0 = a + i * k;
    const float* a1 = rows > 1 ? a0 + k : a0;
    const float* a2 = rows > 2 ? a0 + 2 * k : a0;
    const float* a3 = rows > 3 ? a0 + 3 * k : a0;
    auto c00 = hn::Zero(df), c01 = hn::Zero(df), c10 = hn::Zero(df), c11 = hn::Zero(df);
    auto c20 = hn::Zero(df), c21 = hn::Zero(df), c30 = hn::Zero(df), c31 = hn::Zero(df);
    for (int64_t p = 0; p < k; ++p) {
      const auto b0 = hn::LoadU(df, panel + p * 2 * N), b1 = hn::LoadU(df, panel + p * 2 * N + N);
      auto v = hn::Set(df, a0[p]);
      c00 = hn::MulAdd(v, b0, c00);
      c01 = hn::MulAdd(v, b1, c01);
      v = hn::Set(df, a1[p]);
      c10 = hn::MulAdd(v, b0, c10);
      c11 = hn::MulAdd(v, b1, c11);
      v = hn::Set(df, a2[p]);
      c20 = hn::MulAdd(v, b0, c20);
      c21 = hn::MulAdd(v, b1, c21);
      v = hn::Set(df, a3[p]);
      c30 = hn::MulAdd(v, b0, c30);
      c31 = hn::MulAdd(v, b1, c31);
    }
    hn::Store(c00, df, tmp);
    hn::Store(c01, df, tmp + N);
    hn::Store(c10, df, tmp + 2 * N);
    hn::Store(c11, df, tmp + 3 * N);
    hn::Store(c20, df, tmp + 4 * N);
    hn::Store(c21, df, tmp + 5 * N);
    hn::Store(c30, df, tmp + 6 * N);
    hn::Store(c31, df, tmp + 7 * N);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(c + (i + r) * ldc, tmp + r * 2 * N, static_cast<size_t>(w) * sizeof(float));
  }
}

// Float32 lanes over blocks of 4096 elements (each lane adds at most 64 values), block totals
// in double: error near a pairwise sum's at the speed of a plain vector loop.
template <typename T>
double SumImpl(const T* HWY_RESTRICT in, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kBlock = 4096;
  auto load = [&](const T* p) { return LoadAsF32(df, p); };
  double total = 0;
  int64_t i = 0;
  while (i + 4 * N <= n) {
    auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
    const int64_t end = std::min(n, i + kBlock);
    for (; i + 4 * N <= end; i += 4 * N) {
      s0 = hn::Add(s0, load(in + i));
      s1 = hn::Add(s1, load(in + i + N));
      s2 = hn::Add(s2, load(in + i + 2 * N));
      s3 = hn::Add(s3, load(in + i + 3 * N));
    }
    total += static_cast<double>(hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)))));
  }
  for (; i < n; ++i) total += static_cast<double>(static_cast<float>(in[i]));
  return total;
}
double SumF32(const float* in, int64_t n) { return SumImpl(in, n); }
double SumBF16(const BFloat16* in, int64_t n) { return SumImpl(in, n); }

// Index of the largest of n > 0 floats: the first NaN if any, else the first element equal to
// the maximum (-0 and +0 equal). One pass for the maximum and a NaN flag, one for the index.
int64_t ArgmaxF32(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto m0 = hn::Set(df, -HUGE_VALF), m1 = m0;
  auto nan = hn::Eq(m0, hn::Set(df, 0.0f));  // all false
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto a = hn::LoadU(df, x + i), b = hn::LoadU(df, x + i + N);
    nan = hn::Or(nan, hn::Or(hn::IsNaN(a), hn::IsNaN(b)));
    m0 = hn::Max(m0, a);
    m1 = hn::Max(m1, b);
  }
  bool has_nan = !hn::AllFalse(df, nan);
  float m = hn::GetLane(hn::MaxOfLanes(df, hn::Max(m0, m1)));
  for (int64_t j = i; j < n; ++j) {
    has_nan |= std::isnan(x[j]);
    m = std::max(m, x[j]);
  }
  if (has_nan) {
    for (int64_t j = 0; j < n; ++j)
      if (std::isnan(x[j])) return j;
  }
  const auto vm = hn::Set(df, m);
  for (i = 0; i + N <= n; i += N) {
    const intptr_t hit = hn::FindFirstTrue(df, hn::Eq(hn::LoadU(df, x + i), vm));
    if (hit >= 0) return i + hit;
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

// ---- normalisation statistics (cpu/norm.cpp; simd.h says what they compute).
// The vector width only decides how many lanes one add covers: every x86 target gives the same
// bits. (Float64 for every term cost two conversions and twice the adds per 16 elements:
// group_norm bf16 [1, 128, 64, 64] 111 -> 72 us, 2 threads.)
// X: float, or uint16_t (bfloat16 bits) widened as loaded.
template <bool kSquares, typename X = float>
void LaneStats(const X* HWY_RESTRICT x, int64_t n, double mean, double* HWY_RESTRICT lanes) {
  const hn::ScalableTag<float> df;
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(df)), L = kStatLanes, K = L / N;
  static_assert(L % N == 0, "the lanes must split into whole vectors");
  const int64_t nf = n / L * L;
  const float mean_f = static_cast<float>(mean);
  const auto vm = hn::Set(df, mean_f);
  for (int64_t b0 = 0; b0 < nf; b0 += L * kStatBlock) {
    const int64_t b1 = std::min(nf, b0 + L * kStatBlock);
    decltype(hn::Zero(df)) acc[K];
#pragma GCC unroll 32
    for (int64_t k = 0; k < K; ++k) acc[k] = hn::Zero(df);
    for (int64_t i = b0; i < b1; i += L) {
#pragma GCC unroll 32
      for (int64_t k = 0; k < K; ++k) {
        const auto v = LoadF32(df, x + i + k * N);
        if constexpr (kSquares) {
          const auto d = hn::Sub(v, vm);
          acc[k] = hn::Add(acc[k], hn::Mul(d, d));
        } else {
          acc[k] = hn::Add(acc[k], v);
        }
      }
    }
    float block[L];
#pragma GCC unroll 32
    for (int64_t k = 0; k < K; ++k) hn::StoreU(acc[k], df, block + k * N);
    for (int64_t l = 0; l < L; ++l) lanes[l] += static_cast<double>(block[l]);
  }
  for (int64_t i = nf; i < n; ++i) {
    const float v = ToF32(x[i]);
    const float d = v - mean_f;
    lanes[i - nf] += static_cast<double>(kSquares ? d * d : v);
  }
}
void LaneSums(const float* x, int64_t n, double* lanes) { LaneStats<false>(x, n, 0.0, lanes); }
void LaneSumsBF16(const uint16_t* x, int64_t n, double* lanes) { LaneStats<false>(x, n, 0.0, lanes); }
void LaneSquaredDeviations(const float* x, int64_t n, double mean, double* lanes) { LaneStats<true>(x, n, mean, lanes); }

// Per column j < c of rows x [rows, c]: s[j] += x[r, j] (kSquares: (x[r, j] - float(mu[j]))^2),
// rows in order, in float32 within blocks of kStatBlock rows, each block's partial then added to
// s[j] in float64 (simd.h); up to 8 vectors of columns at a time, so that their add chains
// overlap. X: float, or uint16_t (bfloat16 bits) widened on the way, each value also stored to
// `widened` [rows, c] when that is not null (a block decoded and summed in one pass over it).
template <bool kSquares, typename X = float>
void ColumnStats(const X* HWY_RESTRICT x, int64_t rows, int64_t c, const double* HWY_RESTRICT mu,
                 double* HWY_RESTRICT s, float* HWY_RESTRICT widened = nullptr) {
  const hn::ScalableTag<float> df;
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(df)), G = 8;
  float muf[G * N], part[G * N];
  auto term = [&](int64_t at, const float* m) {
    const auto f = LoadF32(df, x + at);
    if (widened) hn::StoreU(f, df, widened + at);
    if constexpr (kSquares) {
      const auto d = hn::Sub(f, hn::LoadU(df, m));
      return hn::Mul(d, d);
    } else {
      return f;
    }
  };
  // Columns [j, j + width): block(r0, r1) leaves the float32 sums of rows [r0, r1) in part[0,
  // width), added here to s in float64, one block of kStatBlock rows at a time.
  auto columns = [&](int64_t j, int64_t width, auto&& block) {
    if constexpr (kSquares)
      for (int64_t l = 0; l < width; ++l) muf[l] = static_cast<float>(mu[j + l]);
    for (int64_t r0 = 0; r0 < rows; r0 += kStatBlock) {
      block(r0, std::min(rows, r0 + kStatBlock));
      for (int64_t l = 0; l < width; ++l) s[j + l] += static_cast<double>(part[l]);
    }
  };
  int64_t j = 0;
  for (; j + G * N <= c; j += G * N) {
    columns(j, G * N, [&](int64_t r0, int64_t r1) {
      decltype(hn::Zero(df)) acc[G];
#pragma GCC unroll 8
      for (int64_t g = 0; g < G; ++g) acc[g] = hn::Zero(df);
      for (int64_t r = r0; r < r1; ++r) {
#pragma GCC unroll 8
        for (int64_t g = 0; g < G; ++g) acc[g] = hn::Add(acc[g], term(r * c + j + g * N, muf + g * N));
      }
#pragma GCC unroll 8
      for (int64_t g = 0; g < G; ++g) hn::StoreU(acc[g], df, part + g * N);
    });
  }
  for (; j + N <= c; j += N) {
    columns(j, N, [&](int64_t r0, int64_t r1) {
      auto acc = hn::Zero(df);
      for (int64_t r = r0; r < r1; ++r) acc = hn::Add(acc, term(r * c + j, muf));
      hn::StoreU(acc, df, part);
    });
  }
  for (; j < c; ++j) {
    columns(j, 1, [&](int64_t r0, int64_t r1) {
      float acc = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        const float f = ToF32(x[r * c + j]);
        if (widened) widened[r * c + j] = f;
        if constexpr (kSquares) {
          const float d = f - muf[0];
          acc += d * d;
        } else {
          acc += f;
        }
      }
      part[0] = acc;
    });
  }
}
void ColumnSums(const float* x, int64_t rows, int64_t c, double* s) { ColumnStats<false>(x, rows, c, nullptr, s); }
void DecodeColumnSumsBF16(const uint16_t* x, int64_t rows, int64_t c, float* widened, double* s) {
  ColumnStats<false>(x, rows, c, nullptr, s, widened);
}
void ColumnSquaredDeviations(const float* x, int64_t rows, int64_t c, const double* mu, double* q) {
  ColumnStats<true>(x, rows, c, mu, q);
}

// y = ((x - mean) * invstd) * w + b, each step rounded; w / b null: that step skipped. Columns:
// per-column parameters over rows [rows, c]; Scalar: one set over n values. X / Out: float, or
// uint16_t for bfloat16 bits (widened as loaded, rounded as stored).
template <typename X, typename Out>
void NormaliseColumnsTo(const X* HWY_RESTRICT x, int64_t rows, int64_t c, const float* HWY_RESTRICT mean,
                        const float* HWY_RESTRICT invstd, const float* HWY_RESTRICT w, const float* HWY_RESTRICT b,
                        Out* HWY_RESTRICT y) {
  // Row by row (x streams from memory in order), the parameters reloaded from L1 per vector, or
  // held in registers when a row is 1-4 whole vectors (ResNet / VAE channel counts per vector
  // width). Reloading them cost 13 cycles per vector on Zen 5 (loads behind the stores to y).
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t cv = c / N * N;
  if (c == cv && c <= 4 * N) {
    using V = hn::Vec<decltype(df)>;
    V vm[4], vi[4], vw[4], vb[4];
    const int64_t k = c / N;
    for (int64_t q = 0; q < 4; ++q) {
      const int64_t j = q < k ? q * N : 0;
      vm[q] = hn::LoadU(df, mean + j);
      vi[q] = hn::LoadU(df, invstd + j);
      vw[q] = w ? hn::LoadU(df, w + j) : hn::Set(df, 1.0f);
      vb[q] = b ? hn::LoadU(df, b + j) : hn::Zero(df);
    }
    auto one = [&](const X* xr, Out* yr, int q) {
      auto v = hn::Mul(hn::Sub(LoadF32(df, xr + q * N), vm[q]), vi[q]);
      if (w) v = hn::Mul(v, vw[q]);
      if (b) v = hn::Add(v, vb[q]);
      StoreFromF32(df, v, yr + q * N);
    };
    for (int64_t r = 0; r < rows; ++r) {
      const X* xr = x + r * c;
      Out* yr = y + r * c;
      one(xr, yr, 0);
      if (k > 1) one(xr, yr, 1);
      if (k > 2) one(xr, yr, 2);
      if (k > 3) one(xr, yr, 3);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const X* xr = x + r * c;
    Out* yr = y + r * c;
    for (int64_t j = 0; j < cv; j += N) {
      auto v = hn::Mul(hn::Sub(LoadF32(df, xr + j), hn::LoadU(df, mean + j)), hn::LoadU(df, invstd + j));
      if (w) v = hn::Mul(v, hn::LoadU(df, w + j));
      if (b) v = hn::Add(v, hn::LoadU(df, b + j));
      StoreFromF32(df, v, yr + j);
    }
    for (int64_t j = cv; j < c; ++j) {
      float v = (ToF32(xr[j]) - mean[j]) * invstd[j];
      if (w) v = v * w[j];
      if (b) v = v + b[j];
      yr[j] = FromF32<Out>(v);
    }
  }
}
void NormaliseColumns(const float* x, int64_t rows, int64_t c, const float* mean, const float* invstd, const float* w,
                      const float* b, float* y) {
  NormaliseColumnsTo(x, rows, c, mean, invstd, w, b, y);
}
void NormaliseColumnsBF16(const uint16_t* x, int64_t rows, int64_t c, const float* mean, const float* invstd,
                          const float* w, const float* b, uint16_t* y) {
  NormaliseColumnsTo(x, rows, c, mean, invstd, w, b, y);
}
// y = ((x - mean) * invstd) * w + b over n values with one set of parameters; Out float, or
// uint16_t for bfloat16 bits rounded as they are stored (no float32 round trip through memory).
template <typename Out, typename X = float>
void NormaliseScalarTo(const X* HWY_RESTRICT x, int64_t n, float mean, float invstd, const float* w, const float* b,
                       Out* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto m = hn::Set(df, mean), is = hn::Set(df, invstd);
  const auto wv = hn::Set(df, w ? *w : 1.0f), bv = hn::Set(df, b ? *b : 0.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::Mul(hn::Sub(LoadF32(df, x + i), m), is);
    if (w) v = hn::Mul(v, wv);
    if (b) v = hn::Add(v, bv);
    StoreFromF32(df, v, y + i);
  }
  for (; i < n; ++i) {
    float v = (ToF32(x[i]) - mean) * invstd;
    if (w) v = v * *w;
    if (b) v = v + *b;
    y[i] = FromF32<Out>(v);
  }
}
void NormaliseScalar(const float* x, int64_t n, float mean, float invstd, const float* w, const float* b, float* y) {
  NormaliseScalarTo(x, n, mean, invstd, w, b, y);
}
void NormaliseScalarBF16(const float* x, int64_t n, float mean, float invstd, const float* w, const float* b,
                         uint16_t* y) {
  NormaliseScalarTo(x, n, mean, invstd, w, b, y);
}
void NormaliseScalarBF16ToBF16(const uint16_t* x, int64_t n, float mean, float invstd, const float* w, const float* b,
                               uint16_t* y) {
  NormaliseScalarTo(x, n, mean, invstd, w, b, y);
}
void LaneSquaredDeviationsBF16(const uint16_t* x, int64_t n, double mean, double* lanes) {
  LaneStats<true>(x, n, mean, lanes);
}

// y[i] += a * x[i], the product and the sum each rounded (no fused multiply-add).
void Axpy(float a, const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto av = hn::Set(df, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::Mul(av, hn::LoadU(df, x + i))), df, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

// out[m * stride + j] = x[R * j + m] for R * j + m < n: the R phases of a row, each a contiguous
// array (R = 1: a copy).
template <int R>
void SplitPhasesR(const float* HWY_RESTRICT x, int64_t n, float* HWY_RESTRICT out, int64_t stride) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; (j + N) * R <= n; j += N) {
    hn::Vec<decltype(df)> v[4];
    if constexpr (R == 1) v[0] = hn::LoadU(df, x + j);
    else if constexpr (R == 2) hn::LoadInterleaved2(df, x + R * j, v[0], v[1]);
    else if constexpr (R == 3) hn::LoadInterleaved3(df, x + R * j, v[0], v[1], v[2]);
    else hn::LoadInterleaved4(df, x + R * j, v[0], v[1], v[2], v[3]);
    for (int m = 0; m < R; ++m) hn::StoreU(v[m], df, out + m * stride + j);
  }
  for (; R * j < n; ++j)
    for (int m = 0; m < R && R * j + m < n; ++m) out[m * stride + j] = x[R * j + m];
}
void SplitPhases(const float* x, int64_t n, int64_t r, float* out, int64_t stride) {
  if (r == 1) SplitPhasesR<1>(x, n, out, stride);
  else if (r == 2) SplitPhasesR<2>(x, n, out, stride);
  else if (r == 3) SplitPhasesR<3>(x, n, out, stride);
  else SplitPhasesR<4>(x, n, out, stride);
}

// For each destination row j < nrows (its source rows x[row_begin[j] .. row_begin[j + 1]), each
// split into phases of `stride`) and i in [i0, i1): with w_b(i) = sum over t of c[t] * (phase
// ph[t] of row b)[i + q[t]] (t ascending from 0), y[j * ystride + i] = w_b(i) of its one row when
// unit, else the sum over its rows of wrow[b] * w_b(i) from 0; each product and sum rounded: one
// unaligned load per tap. A ragged end is one more vector ending at i1 (its overlap recomputed to
// the same values).
void BandedRows(const float* const* HWY_RESTRICT x, int64_t stride, const float* wrow, const int64_t* row_begin,
                int64_t nrows, bool unit, int64_t r, const int64_t* off, const float* c, int taps, float init,
                float* HWY_RESTRICT y, int64_t ystride, int64_t i0, int64_t i1) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kMaxTaps = 16;
  int64_t at[kMaxTaps];  // tap t of index i reads phase element at[t] + i
  for (int t = 0; t < taps; ++t) {
    const int64_t q = off[t] >= 0 ? off[t] / r : -((-off[t] + r - 1) / r);
    at[t] = (off[t] - q * r) * stride + q;
  }
  for (int64_t j = 0; j < nrows; ++j) {
    const int64_t b0 = row_begin[j], b1 = row_begin[j + 1];
    float* yj = y + j * ystride;
    auto w_at = [&](const float* xb, int64_t i) {
      V a = hn::Set(df, init);
      for (int t = 0; t < taps; ++t) a = hn::Add(a, hn::Mul(hn::Set(df, c[t]), hn::LoadU(df, xb + at[t] + i)));
      return a;
    };
    auto store_at = [&](int64_t i) {
      V a;
      if (unit) {
        a = w_at(x[b0], i);
      } else {
        a = hn::Zero(df);
        for (int64_t b = b0; b < b1; ++b) a = hn::Add(a, hn::Mul(hn::Set(df, wrow[b]), w_at(x[b], i)));
      }
      hn::StoreU(a, df, yj + i);
    };
    int64_t i = i0;
    for (; i + N <= i1; i += N) store_at(i);
    if (i < i1 && i1 - i0 >= N) {
      store_at(i1 - N);
      continue;
    }
    for (; i < i1; ++i) {
      float a = 0.0f;
      for (int64_t b = b0; b < b1; ++b) {
        float w = init;
        for (int t = 0; t < taps; ++t) w += c[t] * x[b][at[t] + i];
        if (unit) a = w;
        else a += wrow[b] * w;
      }
      yj[i] = a;
    }
  }
}

// y[h * n + i] = the sum over a < RH (from 0) of the sum over b < RW (from 0) of
// g[(RH * h + a) * g_row + RW * i + b], for h < rows, i < n, stored as X (float32, or bfloat16
// bits rounded as F32ToBF16): a nearest upsampling's backward at integer scales. bfloat16 rows
// are widened into a per-thread buffer first; a ragged end is one more vector ending at n.
template <typename X, int RH, int RW>
void BlockSumsTo(const X* HWY_RESTRICT g, int64_t g_row, X* HWY_RESTRICT y, int64_t rows, int64_t n) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), len = RW * n;
  thread_local std::vector<float> buf;
  if constexpr (!std::is_same_v<X, float>) buf.resize(static_cast<size_t>(RH * len));
  for (int64_t h = 0; h < rows; ++h) {
    const float* src[RH];
    for (int a = 0; a < RH; ++a) {
      const X* gr = g + (RH * h + a) * g_row;
      if constexpr (std::is_same_v<X, float>) {
        src[a] = gr;
      } else {
        float* b = buf.data() + a * len;
        BF16ToF32(gr, b, len);
        src[a] = b;
      }
    }
    X* yh = y + h * n;
    auto at = [&](int64_t i) {
      V acc = hn::Zero(df);
      for (int a = 0; a < RH; ++a) {
        V v[4];
        const float* p = src[a] + RW * i;
        if constexpr (RW == 1) v[0] = hn::LoadU(df, p);
        else if constexpr (RW == 2) hn::LoadInterleaved2(df, p, v[0], v[1]);
        else if constexpr (RW == 3) hn::LoadInterleaved3(df, p, v[0], v[1], v[2]);
        else hn::LoadInterleaved4(df, p, v[0], v[1], v[2], v[3]);
        V w = hn::Zero(df);
        for (int b = 0; b < RW; ++b) w = hn::Add(w, v[b]);
        acc = hn::Add(acc, w);
      }
      StoreFromF32(df, acc, yh + i);
    };
    int64_t i = 0;
    for (; i + N <= n; i += N) at(i);
    if (i < n && n >= N) {
      at(n - N);
      continue;
    }
    for (; i < n; ++i) {
      float acc = 0.0f;
      for (int a = 0; a < RH; ++a) {
        float w = 0.0f;
        for (int b = 0; b < RW; ++b) w += src[a][RW * i + b];
        acc += w;
      }
      yh[i] = FromF32<X>(acc);
    }
  }
}
template <typename X, int RH>
void BlockSumsRW(const X* g, int64_t g_row, int64_t rw, X* y, int64_t rows, int64_t n) {
  if (rw == 1) BlockSumsTo<X, RH, 1>(g, g_row, y, rows, n);
  else if (rw == 2) BlockSumsTo<X, RH, 2>(g, g_row, y, rows, n);
  else if (rw == 3) BlockSumsTo<X, RH, 3>(g, g_row, y, rows, n);
  else BlockSumsTo<X, RH, 4>(g, g_row, y, rows, n);
}
template <typename X>
void BlockSumsRH(const X* g, int64_t g_row, int64_t rh, int64_t rw, X* y, int64_t rows, int64_t n) {
  if (rh == 1) BlockSumsRW<X, 1>(g, g_row, rw, y, rows, n);
  else if (rh == 2) BlockSumsRW<X, 2>(g, g_row, rw, y, rows, n);
  else if (rh == 3) BlockSumsRW<X, 3>(g, g_row, rw, y, rows, n);
  else BlockSumsRW<X, 4>(g, g_row, rw, y, rows, n);
}
void BlockSumsF32(const float* g, int64_t g_row, int64_t rh, int64_t rw, float* y, int64_t rows, int64_t n) {
  BlockSumsRH(g, g_row, rh, rw, y, rows, n);
}
void BlockSumsBF16(const uint16_t* g, int64_t g_row, int64_t rh, int64_t rw, uint16_t* y, int64_t rows, int64_t n) {
  BlockSumsRH(g, g_row, rh, rw, y, rows, n);
}

// y[i] = ((0 + x[0][i]) + x[1][i]) + ... over count rows, in float32, stored as X (float32, or
// bfloat16 bits rounded as F32ToBF16): the accumulator of a vector stays in a register. A ragged
// end is one more vector ending at n (its overlap recomputed to the same values: y must not
// overlap x), so short rows pay no scalar conversions.
template <typename X>
void SumRowsTo(const X* const* HWY_RESTRICT x, int64_t count, X* HWY_RESTRICT y, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto at = [&](int64_t i) {
    auto a = hn::Zero(df);
    for (int64_t t = 0; t < count; ++t) a = hn::Add(a, LoadF32(df, x[t] + i));
    StoreFromF32(df, a, y + i);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) at(i);
  if (i < n && n >= N) {
    at(n - N);
    return;
  }
  for (; i < n; ++i) {
    float a = 0.0f;
    for (int64_t t = 0; t < count; ++t) a += ToF32(x[t][i]);
    y[i] = FromF32<X>(a);
  }
}
void SumRowsF32(const float* const* x, int64_t count, float* y, int64_t n) { SumRowsTo(x, count, y, n); }
void SumRowsBF16(const uint16_t* const* x, int64_t count, uint16_t* y, int64_t n) { SumRowsTo(x, count, y, n); }

// dst[r * i + m] = src[i] for m < r, i < n, as bits (lanes of U).
template <typename U>
void RepeatLanesU(const U* HWY_RESTRICT src, U* HWY_RESTRICT dst, int64_t n, int r) {
  const hn::ScalableTag<U> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, src + i);
    if (r == 2) hn::StoreInterleaved2(v, v, d, dst + 2 * i);
    else if (r == 3) hn::StoreInterleaved3(v, v, v, d, dst + 3 * i);
    else hn::StoreInterleaved4(v, v, v, v, d, dst + 4 * i);
  }
  for (; i < n; ++i)
    for (int m = 0; m < r; ++m) dst[r * i + m] = src[i];
}
void RepeatLanes(size_t elem, const void* src, void* dst, int64_t n, int r) {
  if (elem == 1) RepeatLanesU(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), n, r);
  else if (elem == 2) RepeatLanesU(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), n, r);
  else if (elem == 4) RepeatLanesU(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), n, r);
  else RepeatLanesU(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), n, r);
}

// y[p * n + i] = init[i] (0 without) + the sum over g < groups, t < KW (in that order) of
// w[g * KW + t][i] * x[g][(p + t) * x_step + i], each product and sum rounded, stored as X
// (float32 or bfloat16 bits, as x). KW = 1 is any list of taps, each position x_step further;
// KW > 1 is groups of consecutive taps one position apart (stride and dilation 1), so a run of
// positions loads (and widens) each input vector once for the KW taps that read it. The
// accumulators of up to kRun positions stay in registers across the taps and each weight vector
// is loaded once for them; a run sweeps all of n, so its rows and the weights stay in L1.
template <typename X, int KW>
void MulAddWindowTo(const float* const* HWY_RESTRICT w, const void* const* HWY_RESTRICT x, int64_t groups,
                    int64_t positions, int64_t x_step, const float* HWY_RESTRICT init, X* HWY_RESTRICT y, int64_t n) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto load_x = [&](int64_t g, int64_t off) { return LoadF32(df, static_cast<const X*>(x[g]) + off); };
  constexpr int64_t kRun = 10;
  auto run = [&](int64_t p, auto count) {
    constexpr int64_t K = decltype(count)::value;
    int64_t i = 0;
    for (; i + N <= n; i += N) {
      V a[K];
      const V start = init ? hn::LoadU(df, init + i) : hn::Zero(df);
      for (int64_t k = 0; k < K; ++k) a[k] = start;
      for (int64_t g = 0; g < groups; ++g) {
        V xv[K + KW - 1];
        for (int64_t j = 0; j < K + KW - 1; ++j) xv[j] = load_x(g, (p + j) * x_step + i);
        for (int64_t t = 0; t < KW; ++t) {
          const V wv = hn::LoadU(df, w[g * KW + t] + i);
          for (int64_t k = 0; k < K; ++k) a[k] = hn::Add(a[k], hn::Mul(wv, xv[k + t]));
        }
      }
      for (int64_t k = 0; k < K; ++k) StoreFromF32(df, a[k], y + (p + k) * n + i);
    }
    for (; i < n; ++i)
      for (int64_t k = 0; k < K; ++k) {
        float a = init ? init[i] : 0.0f;
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t t = 0; t < KW; ++t) {
            const X v = static_cast<const X*>(x[g])[(p + k + t) * x_step + i];
            a += w[g * KW + t][i] * ToF32(v);
          }
        y[(p + k) * n + i] = FromF32<X>(a);
      }
  };
  int64_t p = 0;
  for (; p + kRun <= positions; p += kRun) run(p, std::integral_constant<int64_t, kRun>{});
  // A ragged end as one more run ending at the last position (its overlap recomputed with the
  // same sums, so the same bits), not one position at a time.
  if (p < positions && positions >= kRun) run(positions - kRun, std::integral_constant<int64_t, kRun>{});
  else
    for (; p < positions; ++p) run(p, std::integral_constant<int64_t, 1>{});
}
template <typename X>
bool MulAddWindowKW(const float* const* w, const void* const* x, int64_t groups, int64_t kw, int64_t positions,
                    int64_t x_step, const float* init, void* y, int64_t n) {
  X* yt = static_cast<X*>(y);
  if (kw == 1) MulAddWindowTo<X, 1>(w, x, groups, positions, x_step, init, yt, n);
  else if (kw == 3) MulAddWindowTo<X, 3>(w, x, groups, positions, x_step, init, yt, n);
  else if (kw == 5) MulAddWindowTo<X, 5>(w, x, groups, positions, x_step, init, yt, n);
  else if (kw == 7) MulAddWindowTo<X, 7>(w, x, groups, positions, x_step, init, yt, n);
  else return false;
  return true;
}
// One output row of a conv with few output channels (CO <= 4): out[c][i] = bias[c] + sum over
// rows r (null: padding, skipped) and taps t of w[(c * nrows + r) * kw + t] * rows[r][i + t d],
// i < width rounded up to 4 vectors (the caller's rows hold that many + (kw - 1) d readable
// floats). The CO x 4 accumulators stay in registers across every row and tap; each input vector
// feeds CO fused multiply-adds.
template <int CO>
void ConvRowFewTo(const float* const* HWY_RESTRICT rows, int64_t nrows, const float* HWY_RESTRICT w, int64_t kw,
                  int64_t d, int64_t width, const float* HWY_RESTRICT bias, float* HWY_RESTRICT out, int64_t ldo) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i = 0; i < width; i += 4 * N) {
    V a[CO][4];
    for (int c = 0; c < CO; ++c)
      for (int v = 0; v < 4; ++v) a[c][v] = hn::Set(df, bias ? bias[c] : 0.0f);
    for (int64_t r = 0; r < nrows; ++r) {
      if (!rows[r]) continue;
      for (int64_t t = 0; t < kw; ++t) {
        const float* x = rows[r] + i + t * d;
        V x0 = hn::LoadU(df, x), x1 = hn::LoadU(df, x + N), x2 = hn::LoadU(df, x + 2 * N), x3 = hn::LoadU(df, x + 3 * N);
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
        // Kept in registers: GCC otherwise folds each load into every channel's multiply-add,
        // CO split loads instead of one (FLUX conv_out bf16 on the pair kernel: 3.5 -> 2.7 ms).
        asm("" : "+v"(x0.raw), "+v"(x1.raw), "+v"(x2.raw), "+v"(x3.raw));
#endif
        for (int c = 0; c < CO; ++c) {
          const V wv = hn::Set(df, w[(c * nrows + r) * kw + t]);
          a[c][0] = hn::MulAdd(wv, x0, a[c][0]);
          a[c][1] = hn::MulAdd(wv, x1, a[c][1]);
          a[c][2] = hn::MulAdd(wv, x2, a[c][2]);
          a[c][3] = hn::MulAdd(wv, x3, a[c][3]);
        }
      }
    }
    for (int c = 0; c < CO; ++c)
      for (int v = 0; v < 4; ++v) hn::StoreU(a[c][v], df, out + c * ldo + i + v * N);
  }
}
void ConvRowFew(const float* const* rows, int64_t nrows, const float* w, int64_t co, int64_t kw, int64_t d,
                int64_t width, const float* bias, float* out, int64_t ldo) {
  switch (co) {
    case 1: return ConvRowFewTo<1>(rows, nrows, w, kw, d, width, bias, out, ldo);
    case 2: return ConvRowFewTo<2>(rows, nrows, w, kw, d, width, bias, out, ldo);
    case 3: return ConvRowFewTo<3>(rows, nrows, w, kw, d, width, bias, out, ldo);
    default: return ConvRowFewTo<4>(rows, nrows, w, kw, d, width, bias, out, ldo);
  }
}
int64_t ConvRowFewBlock() { return 4 * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

bool MulAddWindowF32(const float* const* w, const void* const* x, int64_t groups, int64_t kw, int64_t positions,
                     int64_t x_step, const float* init, void* y, int64_t n) {
  return MulAddWindowKW<float>(w, x, groups, kw, positions, x_step, init, y, n);
}
bool MulAddWindowBF16(const float* const* w, const void* const* x, int64_t groups, int64_t kw, int64_t positions,
                      int64_t x_step, const float* init, void* y, int64_t n) {
  return MulAddWindowKW<uint16_t>(w, x, groups, kw, positions, x_step, init, y, n);
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace anvil::cpu::simd {

HWY_EXPORT(F32ToBF16);
HWY_EXPORT(BiasRowsToBF16);
HWY_EXPORT(BF16ToF32);
HWY_EXPORT(F32ToE4M3);
HWY_EXPORT(F32ToE5M2);
HWY_EXPORT(F32ToF16);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(F8ToF32);
HWY_EXPORT(BinaryF32Float);
HWY_EXPORT(BinaryBF16);
HWY_EXPORT(SumF32);
HWY_EXPORT(PanelWidth);
HWY_EXPORT(GemmPanel);
HWY_EXPORT(SumBF16);
HWY_EXPORT(ArgmaxF32);
HWY_EXPORT(LaneSums);
HWY_EXPORT(LaneSumsBF16);
HWY_EXPORT(LaneSquaredDeviations);
HWY_EXPORT(ColumnSums);
HWY_EXPORT(DecodeColumnSumsBF16);
HWY_EXPORT(ColumnSquaredDeviations);
HWY_EXPORT(NormaliseColumns);
HWY_EXPORT(NormaliseColumnsBF16);
HWY_EXPORT(NormaliseScalar);
HWY_EXPORT(Axpy);
HWY_EXPORT(BandedRows);
HWY_EXPORT(SplitPhases);
HWY_EXPORT(RepeatLanes);
HWY_EXPORT(SumRowsF32);
HWY_EXPORT(SumRowsBF16);
HWY_EXPORT(BlockSumsF32);
HWY_EXPORT(BlockSumsBF16);
HWY_EXPORT(MulAddWindowF32);
HWY_EXPORT(ConvRowFew);
HWY_EXPORT(ConvRowFewBlock);
HWY_EXPORT(MulAddWindowBF16);
HWY_EXPORT(NormaliseScalarBF16);
HWY_EXPORT(NormaliseScalarBF16ToBF16);
HWY_EXPORT(LaneSquaredDeviationsBF16);

namespace {
// Splits a contiguous range over the OpenMP team in cache-friendly chunks.
template <typename F>
void parallel_chunks(int64_t n, F&& f) {
  const int64_t chunk = 1 << 16;
  const int64_t nchunks = (n + chunk - 1) / chunk;
  parallel_for(nchunks, nchunks > 1, [&](int64_t c) { f(c * chunk, std::min(chunk, n - c * chunk)); });
}
}  // namespace

// The five float storage types convert through float32 (exact for every pair: c10 rounds
// into the narrow types from float32 too). One SIMD decoder and one encoder per type.
bool is_simd_float(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16 || t == DType::Float8_e4m3fn ||
         t == DType::Float8_e5m2;
}

const float* f8_table(DType t) {
  static const auto make = [](bool e4m3) {
    auto* table = new float[256];
    for (int b = 0; b < 256; ++b)
      table[b] = e4m3 ? e4m3fn_bits_to_f32(static_cast<uint8_t>(b)) : e5m2_bits_to_f32(static_cast<uint8_t>(b));
    return table;
  };
  static const float* e4m3 = make(true);
  static const float* e5m2 = make(false);
  return t == DType::Float8_e4m3fn ? e4m3 : e5m2;
}

void decode_f32(DType from, const void* src, float* out, int64_t n) {
  dispatch_all_types(from, "[decode_f32]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) std::memcpy(out, src, static_cast<size_t>(n) * 4);
    else if constexpr (std::is_same_v<T, BFloat16>) HWY_DYNAMIC_DISPATCH(BF16ToF32)(static_cast<const uint16_t*>(src), out, n);
    else if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(F16ToF32)(static_cast<const uint16_t*>(src), out, n);
    else if constexpr (std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>)
      HWY_DYNAMIC_DISPATCH(F8ToF32)(static_cast<const uint8_t*>(src), out, n, f8_table(from));
    else throw DTypeError(detail::cat_message("[decode_f32] no SIMD decoder for ", dtype_name(from)));
  });
}

void encode_f32(DType to, const float* in, void* dst, int64_t n) {
  dispatch_all_types(to, "[encode_f32]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) std::memcpy(dst, in, static_cast<size_t>(n) * 4);
    else if constexpr (std::is_same_v<T, BFloat16>) HWY_DYNAMIC_DISPATCH(F32ToBF16)(in, static_cast<uint16_t*>(dst), n);
    else if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(F32ToF16)(in, static_cast<uint16_t*>(dst), n);
    else if constexpr (std::is_same_v<T, Float8_e4m3fn>) HWY_DYNAMIC_DISPATCH(F32ToE4M3)(in, static_cast<uint8_t*>(dst), n);
    else if constexpr (std::is_same_v<T, Float8_e5m2>) HWY_DYNAMIC_DISPATCH(F32ToE5M2)(in, static_cast<uint8_t*>(dst), n);
    else throw DTypeError(detail::cat_message("[encode_f32] no SIMD encoder for ", dtype_name(to)));
  });
}

void bias_rows_to_bf16(const float* c, int64_t ldc, const float* bias, uint16_t* y, int64_t ldy, int64_t rows,
                       int64_t cols) {
  HWY_DYNAMIC_DISPATCH(BiasRowsToBF16)(c, ldc, bias, y, ldy, rows, cols);
}

bool convert(DType to, DType from, void* dst, const void* src, int64_t n) {
  if (!is_simd_float(to) || !is_simd_float(from) || to == from) return false;
  const size_t in_es = element_size(from), out_es = element_size(to);
  parallel_chunks(n, [&](int64_t b, int64_t len) {
    const char* in = static_cast<const char*>(src) + b * in_es;
    char* out = static_cast<char*>(dst) + b * out_es;
    if (from == DType::Float32) return encode_f32(to, reinterpret_cast<const float*>(in), out, len);
    if (to == DType::Float32) return decode_f32(from, in, reinterpret_cast<float*>(out), len);
    // Neither side is float32: through a float32 buffer that stays in L1.
    alignas(64) float buf[2048];
    for (int64_t k = 0; k < len; k += 2048) {
      int64_t m = std::min<int64_t>(2048, len - k);
      decode_f32(from, in + k * in_es, buf, m);
      encode_f32(to, buf, out + k * out_es, m);
    }
  });
  return true;
}

namespace {
int binary_code(BinaryOp op, DType t) {
  if (t != DType::Float32 && t != DType::BFloat16) return -1;
  return op == BinaryOp::Add ? 0 : op == BinaryOp::Sub ? 1 : op == BinaryOp::Mul ? 2 : -1;
}
void binary_run(int code, DType t, void* out, const void* a, bool a_run, const void* b, bool b_run, float alpha,
                int64_t n) {
  if (t == DType::Float32)
    HWY_DYNAMIC_DISPATCH(BinaryF32Float)(code, static_cast<float*>(out), static_cast<const float*>(a), a_run,
                                         static_cast<const float*>(b), b_run, alpha, n);
  else
    HWY_DYNAMIC_DISPATCH(BinaryBF16)(code, static_cast<BFloat16*>(out), static_cast<const BFloat16*>(a), a_run,
                                     static_cast<const BFloat16*>(b), b_run, alpha, n);
}
}  // namespace

bool binary(BinaryOp op, DType t, void* out, const void* a, const void* b, double alpha, int64_t n) {
  const int code = binary_code(op, t);
  if (code < 0) return false;
  const size_t es = element_size(t);
  parallel_chunks(n, [&](int64_t s, int64_t len) {
    const size_t at = static_cast<size_t>(s) * es;
    binary_run(code, t, static_cast<char*>(out) + at, static_cast<const char*>(a) + at, true,
               static_cast<const char*>(b) + at, true, static_cast<float>(alpha), len);
  });
  return true;
}

bool has_binary_row(BinaryOp op, DType t) { return binary_code(op, t) >= 0; }

void binary_row(BinaryOp op, DType t, void* out, const void* a, bool a_run, const void* b, bool b_run, double alpha,
                int64_t n) {
  binary_run(binary_code(op, t), t, out, a, a_run, b, b_run, static_cast<float>(alpha), n);
}

bool sum(DType t, const void* in, int64_t n, double* out) {
  if (t == DType::Float32) {
    *out = HWY_DYNAMIC_DISPATCH(SumF32)(static_cast<const float*>(in), n);
    return true;
  }
  if (t == DType::BFloat16) {
    *out = HWY_DYNAMIC_DISPATCH(SumBF16)(static_cast<const BFloat16*>(in), n);
    return true;
  }
  return false;
}

int64_t argmax_f32(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(ArgmaxF32)(x, n); }

void lane_sums(const float* x, int64_t n, double* lanes) { HWY_DYNAMIC_DISPATCH(LaneSums)(x, n, lanes); }
void lane_sums(const uint16_t* x, int64_t n, double* lanes) { HWY_DYNAMIC_DISPATCH(LaneSumsBF16)(x, n, lanes); }
void lane_squared_deviations(const float* x, int64_t n, double mean, double* lanes) {
  HWY_DYNAMIC_DISPATCH(LaneSquaredDeviations)(x, n, mean, lanes);
}
void column_sums(const float* x, int64_t rows, int64_t c, double* s) { HWY_DYNAMIC_DISPATCH(ColumnSums)(x, rows, c, s); }
void column_squared_deviations(const float* x, int64_t rows, int64_t c, const double* mu, double* q) {
  HWY_DYNAMIC_DISPATCH(ColumnSquaredDeviations)(x, rows, c, mu, q);
}
void normalise_columns(const float* x, int64_t rows, int64_t c, const float* mean, const float* invstd, const float* w,
                       const float* b, float* y) {
  HWY_DYNAMIC_DISPATCH(NormaliseColumns)(x, rows, c, mean, invstd, w, b, y);
}
void normalise_columns_bf16(const uint16_t* x, int64_t rows, int64_t c, const float* mean, const float* invstd,
                            const float* w, const float* b, uint16_t* y) {
  HWY_DYNAMIC_DISPATCH(NormaliseColumnsBF16)(x, rows, c, mean, invstd, w, b, y);
}
void decode_column_sums_bf16(const uint16_t* x, int64_t rows, int64_t c, float* widened, double* s) {
  HWY_DYNAMIC_DISPATCH(DecodeColumnSumsBF16)(x, rows, c, widened, s);
}
void normalise_scalar(const float* x, int64_t n, float mean, float invstd, const float* w, const float* b, float* y) {
  HWY_DYNAMIC_DISPATCH(NormaliseScalar)(x, n, mean, invstd, w, b, y);
}
void axpy(float a, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(Axpy)(a, x, y, n); }
void split_phases(const float* x, int64_t n, int64_t r, float* out, int64_t stride) {
  HWY_DYNAMIC_DISPATCH(SplitPhases)(x, n, std::clamp<int64_t>(r, 1, 4), out, stride);
}
bool banded_rows(const float* const* x, int64_t stride, const float* wrow, const int64_t* row_begin, int64_t nrows,
                 bool unit, int64_t r, const int64_t* off, const float* c, int taps, float init, float* y,
                 int64_t ystride, int64_t i0, int64_t i1) {
  if (r < 1 || r > 4 || taps < 1 || taps > 16) return false;
  HWY_DYNAMIC_DISPATCH(BandedRows)(x, stride, wrow, row_begin, nrows, unit, r, off, c, taps, init, y, ystride, i0, i1);
  return true;
}
bool block_sums(DType t, const void* g, int64_t g_row, int64_t rh, int64_t rw, void* y, int64_t rows, int64_t n) {
  if (rh < 1 || rh > 4 || rw < 1 || rw > 4) return false;
  if (t == DType::Float32)
    HWY_DYNAMIC_DISPATCH(BlockSumsF32)(static_cast<const float*>(g), g_row, rh, rw, static_cast<float*>(y), rows, n);
  else if (t == DType::BFloat16)
    HWY_DYNAMIC_DISPATCH(BlockSumsBF16)(static_cast<const uint16_t*>(g), g_row, rh, rw, static_cast<uint16_t*>(y), rows, n);
  else return false;
  return true;
}
bool sum_rows(DType t, const void* const* x, int64_t count, void* y, int64_t n) {
  if (t == DType::Float32)
    HWY_DYNAMIC_DISPATCH(SumRowsF32)(reinterpret_cast<const float* const*>(x), count, static_cast<float*>(y), n);
  else if (t == DType::BFloat16)
    HWY_DYNAMIC_DISPATCH(SumRowsBF16)(reinterpret_cast<const uint16_t* const*>(x), count, static_cast<uint16_t*>(y), n);
  else return false;
  return true;
}
bool repeat_lanes(size_t elem, const void* src, void* dst, int64_t n, int r) {
  if (r < 2 || r > 4 || (elem != 1 && elem != 2 && elem != 4 && elem != 8)) return false;
  HWY_DYNAMIC_DISPATCH(RepeatLanes)(elem, src, dst, n, r);
  return true;
}
void conv_row_few(const float* const* rows, int64_t nrows, const float* w, int64_t co, int64_t kw, int64_t d,
                  int64_t width, const float* bias, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(ConvRowFew)(rows, nrows, w, co, kw, d, width, bias, out, ldo);
}
int64_t conv_row_few_block() { return HWY_DYNAMIC_DISPATCH(ConvRowFewBlock)(); }

bool mul_add_window(DType dtype, const float* const* w, const void* const* x, int64_t groups, int64_t kw,
                    int64_t positions, const float* init, void* y, int64_t n) {
  if (kw == 1) return false;  // mul_add_taps' case
  if (dtype == DType::Float32) return HWY_DYNAMIC_DISPATCH(MulAddWindowF32)(w, x, groups, kw, positions, n, init, y, n);
  if (dtype == DType::BFloat16) return HWY_DYNAMIC_DISPATCH(MulAddWindowBF16)(w, x, groups, kw, positions, n, init, y, n);
  return false;
}
bool mul_add_taps(DType dtype, const float* const* w, const void* const* x, int64_t taps, int64_t positions,
                  int64_t x_step, const float* init, void* y, int64_t n) {
  if (dtype == DType::Float32) return HWY_DYNAMIC_DISPATCH(MulAddWindowF32)(w, x, taps, 1, positions, x_step, init, y, n);
  if (dtype == DType::BFloat16) return HWY_DYNAMIC_DISPATCH(MulAddWindowBF16)(w, x, taps, 1, positions, x_step, init, y, n);
  return false;
}
void normalise_scalar_bf16(const float* x, int64_t n, float mean, float invstd, const float* w, const float* b,
                           uint16_t* y) {
  HWY_DYNAMIC_DISPATCH(NormaliseScalarBF16)(x, n, mean, invstd, w, b, y);
}
void normalise_scalar_bf16(const uint16_t* x, int64_t n, float mean, float invstd, const float* w, const float* b,
                           uint16_t* y) {
  HWY_DYNAMIC_DISPATCH(NormaliseScalarBF16ToBF16)(x, n, mean, invstd, w, b, y);
}
void lane_squared_deviations(const uint16_t* x, int64_t n, double mean, double* lanes) {
  HWY_DYNAMIC_DISPATCH(LaneSquaredDeviationsBF16)(x, n, mean, lanes);
}

int64_t gemm_panel_width() { return HWY_DYNAMIC_DISPATCH(PanelWidth)(); }

void gemm_panel(const float* a, int64_t m, int64_t k, const float* panel, float* c, int64_t ldc, int64_t w) {
  HWY_DYNAMIC_DISPATCH(GemmPanel)(a, m, k, panel, c, ldc, w);
}

const char* target_name() {
  // The best target this CPU supports among those compiled in: what HWY_DYNAMIC_DISPATCH picks.
  int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(supported & -supported);
}

}  // namespace anvil::cpu::simd

namespace anvil {

// anvil/version.h's query, answered by the backend that knows (core includes no backend header).
std::string cpu_simd_target() { return cpu::simd::target_name(); }
bool cpu_has_bf16_dots() { return cpu::simd::bf16_dots_supported(); }
bool cpu_has_avx512() { return cpu::simd::f32_row_gemm_supported(); }

}  // namespace anvil
#endif  // HWY_ONCE
