#pragma once
// Philox-4x32-10 counter-based RNG (Salmon et al., SC'11). Element i of a draw is a pure
// function of (seed, counter), so CPU and CUDA produce identical tensors.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "anvil/numeric.h"
#include "core/dispatch.h"
#include "core/params.h"

namespace anvil {

struct Philox4 {
  uint32_t v[4];
};

// The global generator (manual_seed): its seed and the first of `counters` counters it hands
// to one call, which advance the offset past them (src/ops/factory.cpp).
struct PhiloxSlot {
  uint64_t seed, offset;
};
PhiloxSlot philox_reserve(uint64_t counters);

ANVIL_HD Philox4 philox4x32(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with `mant_bits` random bits, so rounding to the dtype never reaches 1.
ANVIL_HD double philox_uniform(uint64_t seed, uint64_t counter, int mant_bits) {
  Philox4 r = philox4x32(seed, counter);
  if (mant_bits > 32) {
    uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32 | r.v[1]) >> (64 - mant_bits);
    return static_cast<double>(x) * std::ldexp(1.0, -mant_bits);
  }
  return static_cast<double>(r.v[0] >> (32 - mant_bits)) * std::ldexp(1.0, -mant_bits);
}

// Standard normal by Box-Muller on two 32-bit draws of the same counter, computed in double.
ANVIL_HD double philox_normal(uint64_t seed, uint64_t counter) {
  Philox4 r = philox4x32(seed, counter);
  double u1 = (static_cast<double>(r.v[0]) + 1.0) * 2.3283064365386963e-10;  // (0, 1]
  double u2 = static_cast<double>(r.v[1]) * 2.3283064365386963e-10;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

// Integer in [low, high): 64 random bits modulo the range (bias < 2^-32 for ranges < 2^32).
ANVIL_HD int64_t philox_int(uint64_t seed, uint64_t counter, int64_t low, int64_t high) {
  Philox4 r = philox4x32(seed, counter);
  uint64_t x = static_cast<uint64_t>(r.v[2]) << 32 | r.v[3];
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + x % range);
}

// Random bits for a floating storage type: the mantissa width plus one, so rounding never gives
// 1.0 (complex64: its float32 parts). Host side; the kernels get the number.
inline int random_bits_for(DType t) {
  return dispatch_all_types(t, "[random]", [](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) return 53;
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Complex64>) return 24;
    else if constexpr (std::is_same_v<T, Half>) return 11;
    else if constexpr (std::is_same_v<T, BFloat16>) return 8;
    else if constexpr (std::is_same_v<T, Float8_e4m3fn>) return 4;
    else if constexpr (std::is_same_v<T, Float8_e5m2>) return 3;
    else return 24;  // integer and bool draws take [low, high) and never use it
  });
}

}  // namespace anvil
