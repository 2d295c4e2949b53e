#pragma once
// Storage types of the low-precision dtypes and their conversions to and from float32.
// Shared by host and device code; bit-exact to PyTorch 2.15's CPU conversions
// (c10 BFloat16 / Half / Float8_e4m3fn (saturating) / Float8_e5m2).
#include <complex>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ANVIL_HD __host__ __device__ __forceinline__
#else
#define ANVIL_HD inline
#endif

namespace anvil {

namespace bits {
ANVIL_HD uint32_t from_f32(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
ANVIL_HD float to_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace bits

// m >> shift rounded to nearest even (shift in 1..31): the subnormal rounding of every encoder.
ANVIL_HD uint32_t shift_right_rne(uint32_t m, uint32_t shift) {
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return q;
}

// ---- bfloat16: round to nearest even; NaN -> 0x7FC0 (c10's CPU rule, also used on CUDA).
ANVIL_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = bits::from_f32(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16);
}
ANVIL_HD float bf16_bits_to_f32(uint16_t h) { return bits::to_f32(static_cast<uint32_t>(h) << 16); }

// ---- float16 (IEEE binary16): round to nearest even; NaN -> sign | 0x7E00 (c10's scalar rule).
ANVIL_HD uint16_t f32_to_f16_bits(float f) {
  uint32_t u = bits::from_f32(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to infinity
  if (a < 0x38800000u) {                         // below 2^-14: subnormal or zero
    if (a < 0x33000000u) return sign;            // <= 2^-25 rounds to zero (2^-25 ties to even 0)
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    // value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e)
    return sign | static_cast<uint16_t>(shift_right_rne(m, 126u - e));
  }
  uint32_t r = a + 0xC8000000u;  // rebias exponent: -112 << 23
  r += 0xFFFu + ((r >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}
ANVIL_HD float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  // NaN comes out quiet with its payload, as c10's conversion (an FP multiply) leaves it.
  if (e == 0x1F) return bits::to_f32(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) {
    if (m == 0) return bits::to_f32(sign);
    // subnormal: m * 2^-24, exact in float32
    float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits::to_f32(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- float8_e4m3fn: saturating (|x| >= 480 and +-inf -> +-448), NaN -> 0x7F | sign.
ANVIL_HD uint8_t f32_to_e4m3fn_bits(float f) {
  uint32_t u = bits::from_f32(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7FFFFFFFu;
  uint8_t r;
  if (a >= 0x43F00000u) {  // 480, inf, NaN
    r = a > 0x7F800000u ? 0x7F : 0x7E;
  } else if (a < 0x3C800000u) {  // below 2^-6: round onto multiples of 2^-9
    uint32_t e = a >> 23;
    if (e < 0x75u) {  // < 2^-10 (e=117): always rounds to zero
      r = 0;
    } else {
      uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
      r = static_cast<uint8_t>(shift_right_rne(m, 141u - e));  // m * 2^(e-150) / 2^-9
    }
  } else {
    uint32_t odd = (a >> 20) & 1u;
    a += 0xC407FFFFu + odd;  // ((7 - 127) << 23) + 0x7FFFF
    r = static_cast<uint8_t>(a >> 20);
    if (r == 0x7F) r = 0x7E;
  }
  return r | sign;
}
ANVIL_HD float e4m3fn_bits_to_f32(uint8_t b) {
  uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  uint32_t e = (b >> 3) & 0xFu;
  uint32_t m = b & 0x7u;
  if ((b & 0x7Fu) == 0x7Fu) return bits::to_f32(sign | 0x7FF00000u);  // c10's NaN bit pattern
  if (e == 0) {
    float v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
    return sign ? -v : v;
  }
  return bits::to_f32(sign | ((e + 120u) << 23) | (m << 20));
}

// ---- float8_e5m2: round to nearest even, overflow -> inf (non-saturating, as PyTorch), NaN kept.
ANVIL_HD uint8_t f32_to_e5m2_bits(float f) {
  uint32_t u = bits::from_f32(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7FFFFFFFu;
  uint8_t r;
  if (a >= 0x47800000u) {  // 65536, inf, NaN
    r = a > 0x7F800000u ? 0x7F : 0x7C;
  } else if (a < 0x38800000u) {  // below 2^-14: multiples of 2^-16
    uint32_t e = a >> 23;
    if (e < 0x6Eu) {  // < 2^-17
      r = 0;
    } else {
      uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
      r = static_cast<uint8_t>(shift_right_rne(m, 134u - e));  // m * 2^(e-150) / 2^-16
    }
  } else {
    uint32_t odd = (a >> 21) & 1u;
    a += 0xC80FFFFFu + odd;  // ((15 - 127) << 23) + 0xFFFFF
    r = static_cast<uint8_t>(a >> 21);
  }
  return r | sign;
}
ANVIL_HD float e5m2_bits_to_f32(uint8_t b) { return f16_bits_to_f32(static_cast<uint16_t>(b) << 8); }

struct alignas(2) Half {
  uint16_t x;
  Half() = default;
  ANVIL_HD Half(float f) : x(f32_to_f16_bits(f)) {}
  ANVIL_HD operator float() const { return f16_bits_to_f32(x); }
  static ANVIL_HD Half from_bits(uint16_t b) { Half h; h.x = b; return h; }
};
struct alignas(2) BFloat16 {
  uint16_t x;
  BFloat16() = default;
  ANVIL_HD BFloat16(float f) : x(f32_to_bf16_bits(f)) {}
  ANVIL_HD operator float() const { return bf16_bits_to_f32(x); }
  static ANVIL_HD BFloat16 from_bits(uint16_t b) { BFloat16 h; h.x = b; return h; }
};
struct Float8_e4m3fn {
  uint8_t x;
  Float8_e4m3fn() = default;
  ANVIL_HD Float8_e4m3fn(float f) : x(f32_to_e4m3fn_bits(f)) {}
  ANVIL_HD operator float() const { return e4m3fn_bits_to_f32(x); }
  static ANVIL_HD Float8_e4m3fn from_bits(uint8_t b) { Float8_e4m3fn h; h.x = b; return h; }
};
struct Float8_e5m2 {
  uint8_t x;
  Float8_e5m2() = default;
  ANVIL_HD Float8_e5m2(float f) : x(f32_to_e5m2_bits(f)) {}
  ANVIL_HD operator float() const { return e5m2_bits_to_f32(x); }
  static ANVIL_HD Float8_e5m2 from_bits(uint8_t b) { Float8_e5m2 h; h.x = b; return h; }
};

// complex64 storage: two floats, same layout as std::complex<float> and cuFloatComplex.
struct alignas(8) Complex64 {
  float re, im;
  Complex64() = default;
  ANVIL_HD constexpr Complex64(float r, float i = 0.f) : re(r), im(i) {}
};

}  // namespace anvil
