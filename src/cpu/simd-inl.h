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

// Loads Lanes(df) float32 values from float32, bfloat16 or float16 storage (exact widening).
template <typename T, class DF>
HWY_INLINE hn::Vec<DF> LoadAsF32(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, Half>) {
    const hn::Rebind<hwy::float16_t, DF> d16;
    return hn::PromoteTo(df, hn::LoadU(d16, reinterpret_cast<const hwy::float16_t*>(p)));
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
