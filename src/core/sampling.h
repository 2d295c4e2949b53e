#pragma once
// Order keys and sampling arithmetic shared by the CPU and CUDA topk / sample kernels, so both
// backends rank and draw bit-identically.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "anvil/numeric.h"
#include "core/element.h"

namespace anvil::sampling {

// Unsigned keys that order like the values, for `largest`: NaN above everything, -0 with +0.
template <typename T>
using order_key_t = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

ANVIL_HD uint32_t float_key(float f) {
  if (f != f) return 0xFFFFFFFFu;
  const uint32_t b = f == 0.0f ? 0u : bits::from_f32(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
ANVIL_HD uint64_t double_key(double d) {
  if (d != d) return ~uint64_t{0};
  uint64_t b = 0;
  if (d != 0.0) memcpy(&b, &d, sizeof(b));
  return (b >> 63) ? ~b : (b | (uint64_t{1} << 63));
}
template <typename T>
ANVIL_HD order_key_t<T> order_key(T v) {
  using K = order_key_t<T>;
  if constexpr (std::is_same_v<T, double>)
    return double_key(v);
  else if constexpr (is_float_v<T>)
    return float_key(static_cast<float>(v));
  else if constexpr (std::is_signed_v<T>)
    return static_cast<K>(static_cast<std::make_signed_t<K>>(v)) ^ (K{1} << (sizeof(K) * 8 - 1));
  else
    return static_cast<K>(v);
}

// exp(x) for x <= 0 (NaN stays NaN) in fma steps only, so host and device round alike: Cody-Waite
// reduction by ln 2, Cephes' degree-6 polynomial (~1 ulp), exact scaling by 2^n. Below -86 it
// returns 0: such a token is 2^-124 times less likely than the best one.
ANVIL_HD float sample_exp(float x) {
  if (!(x > -86.0f)) return x != x ? x : 0.0f;
  const float n = rintf(x * 1.44269504088896341f);
  float r = fmaf(n, -0.693359375f, x);
  r = fmaf(n, 2.12194440e-4f, r);
  float q = 1.9875691500e-4f;
  q = fmaf(q, r, 1.3981999507e-3f);
  q = fmaf(q, r, 8.3334519073e-3f);
  q = fmaf(q, r, 4.1665795894e-2f);
  q = fmaf(q, r, 1.6666665459e-1f);
  q = fmaf(q, r, 5.0000001201e-1f);
  const float y = fmaf(q, r * r, r) + 1.0f;
  return y * bits::to_f32(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
}

// The position drawn among c >= 1 candidates of weights e in rank order: the top-p prefix (mass
// before each token < top_p * sum; top_p 1: all), then the first running sum above u * (kept
// mass); failing that (rounding, NaN), the last kept position of positive weight (else 0). Sums
// in double, in order.
template <typename I>
ANVIL_HD I pick_position(const float* e, I c, float top_p, float u) {
  double total = 0.0;
  for (I j = 0; j < c; ++j) total += e[j];
  I kept = c;
  double mass = total;
  if (top_p < 1.0f) {
    const double limit = static_cast<double>(top_p) * total;
    mass = 0.0;
    kept = 0;
    while (kept < c && (kept == 0 || mass < limit)) mass += e[kept++];
  }
  const double target = static_cast<double>(u) * mass;
  double run = 0.0;
  I last = 0;
  for (I j = 0; j < kept; ++j) {
    run += e[j];
    if (run > target) return j;
    if (e[j] > 0.0f) last = j;
  }
  return last;
}

}  // namespace anvil::sampling
