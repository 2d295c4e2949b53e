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

// Loads Lanes(df) float32 values from float32, bfloat16, float16, float8_e4m3fn or float8_e5m2
// storage (exact widening).
template <typename T, class DF>
HWY_INLINE hn::Vec<DF> LoadAsF32(DF df, const T* HWY_RESTRICT p) {
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
    return hn::Mul(hn::PromoteTo(df, hn::BitCast(d16, h)), hn::Set(df, 256.0f));
  } else {
    static_assert(std::is_same_v<T, BFloat16>);
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, decltype(du)> d16;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)))));
  }
}

}  // namespace anvil::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ANVIL_CPU_SIMD_INL_H_
