// Per-target Highway helpers shared by the CPU kernel files. Include after <hwy/highway.h> in a
// file compiled through hwy/foreach_target.h; the guard toggles once per target pass.
#if defined(ANVIL_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ANVIL_CPU_SIMD_INL_H_
#undef ANVIL_CPU_SIMD_INL_H_
#else
#define ANVIL_CPU_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <type_traits>

#include "anvil/numeric.h"

HWY_BEFORE_NAMESPACE();
namespace anvil::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The power of two that LoadScaledF32 / LoadScaledF32x2 leave out: float8_e4m3fn decodes to its
// value times 2^-8 (exact), everything else to its value. A dot product of such values times
// this is bit-equal to the dot of the exact values (binary scaling commutes with rounding) while
// float32 stays clear of underflow, and the decode loop saves a multiply per vector.
template <typename T>
constexpr float kWidenScale = std::is_same_v<T, Float8_e4m3fn> ? 256.0f : 1.0f;

// Loads Lanes(df) float32 values from float32, bfloat16, float16, float8_e4m3fn or float8_e5m2
// storage (exact widening) divided by kWidenScale<T>.
template <typename T, class DF>
HWY_INLINE hn::Vec<DF> LoadScaledF32(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, Half>) {
    const hn::Rebind<hwy::float16_t, DF> d16;
    return hn::PromoteTo(df, hn::LoadU(d16, reinterpret_cast<const hwy::float16_t*>(p)));
  } else if constexpr (std::is_same_v<T, Float8_e5m2>) {
    // e5m2 is the high byte of a float16 (inf and NaN included).
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<hwy::float16_t, DF> d16;
    const auto h = hn::ShiftLeft<8>(hn::PromoteTo(du16, hn::LoadU(d8, reinterpret_cast<const uint8_t*>(p))));
    return hn::PromoteTo(df, hn::BitCast(d16, h));
  } else if constexpr (std::is_same_v<T, Float8_e4m3fn>) {
    // e4m3fn bits placed in a float16 (exponent and mantissa at bit 7, sign at bit 15) are the
    // value times 2^-8, subnormals included; the exponent-bias difference is put back by one
    // exact multiply. 0x7F / 0xFF (NaN) get float16's all-ones exponent.
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<hwy::float16_t, DF> d16;
    const auto b = hn::PromoteTo(du16, hn::LoadU(d8, reinterpret_cast<const uint8_t*>(p)));
    const auto mag = hn::And(b, hn::Set(du16, 0x7F));
    auto h = hn::Or(hn::ShiftLeft<8>(hn::And(b, hn::Set(du16, 0x80))), hn::ShiftLeft<7>(mag));
    h = hn::IfThenElse(hn::Eq(mag, hn::Set(du16, 0x7F)), hn::Or(h, hn::Set(du16, 0x7E00)), h);
    return hn::PromoteTo(df, hn::BitCast(d16, h));
  } else {
    static_assert(std::is_same_v<T, BFloat16>);
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, decltype(du)> d16;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)))));
  }
}

// Exact widening: LoadScaledF32 times kWidenScale<T>.
template <typename T, class DF>
HWY_INLINE hn::Vec<DF> LoadAsF32(DF df, const T* HWY_RESTRICT p) {
  const auto v = LoadScaledF32(df, p);
  if constexpr (kWidenScale<T> != 1.0f) return hn::Mul(v, hn::Set(df, kWidenScale<T>));
  else return v;
}

// 2 * Lanes(df) values from p as two float32 vectors (lo: the first Lanes(df)), divided by
// kWidenScale<T> like LoadScaledF32. float8_e4m3fn
// decodes 2 * Lanes(df) bytes at once: each byte sign-extended to int16 and shifted left by 7
// gives the value times 2^-8 as float16 bits once bit 14 is cleared (sign at 15, exponent and
// mantissa at 13..7); NaN bytes get float16's all-ones exponent; one float16 -> float32
// conversion per half.
template <typename T, class DF>
HWY_INLINE void LoadScaledF32x2(DF df, const T* HWY_RESTRICT p, hn::Vec<DF>& lo, hn::Vec<DF>& hi) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (std::is_same_v<T, Float8_e4m3fn>) {
    const hn::Repartition<int16_t, DF> di16;       // 2 * Lanes(df) lanes
    const hn::Rebind<int8_t, decltype(di16)> di8;
    const hn::Half<decltype(di16)> dh16;
    const hn::Rebind<hwy::float16_t, decltype(dh16)> df16;
    auto h = hn::ShiftLeft<7>(hn::PromoteTo(di16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p))));
    h = hn::And(h, hn::Set(di16, static_cast<int16_t>(0xBF80)));
    const auto mag = hn::And(h, hn::Set(di16, static_cast<int16_t>(0x3F80)));
    h = hn::IfThenElse(hn::Eq(mag, hn::Set(di16, static_cast<int16_t>(0x3F80))),
                       hn::Or(h, hn::Set(di16, static_cast<int16_t>(0x7E00))), h);
    lo = hn::PromoteTo(df, hn::BitCast(df16, hn::LowerHalf(dh16, h)));
    hi = hn::PromoteTo(df, hn::BitCast(df16, hn::UpperHalf(dh16, h)));
    return;
  }
#endif
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  lo = LoadScaledF32(df, p);
  hi = LoadScaledF32(df, p + n);
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ANVIL_CPU_SIMD_INL_H_
