#pragma once
// Per-element semantics shared by the CPU and CUDA kernels: conversion between any pair of
// dtypes (as PyTorch 2.15 on x86 CPU), the compute type of each storage type, and the unary /
// binary / comparison ops. Kernels loop; this file decides what one element becomes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "anvil/numeric.h"
#include "core/kernels/elementwise.h"

namespace anvil {

// ---- compute ("opmath") and accumulation types
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
template <> struct OpMath<Float8_e4m3fn> { using type = float; };
template <> struct OpMath<Float8_e5m2> { using type = float; };
template <typename T> using opmath_t = typename OpMath<T>::type;

template <typename T> inline constexpr bool is_complex_v = std::is_same_v<T, Complex64>;
template <typename T> inline constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
    std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;
template <typename T> inline constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// ---- complex64 arithmetic
ANVIL_HD Complex64 operator+(Complex64 a, Complex64 b) { return {a.re + b.re, a.im + b.im}; }
ANVIL_HD Complex64 operator-(Complex64 a, Complex64 b) { return {a.re - b.re, a.im - b.im}; }
ANVIL_HD Complex64 operator*(Complex64 a, Complex64 b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
ANVIL_HD Complex64 operator/(Complex64 a, Complex64 b) {
  // Smith's algorithm: avoids overflow of |b|^2 for large b.
  if (std::fabs(b.re) >= std::fabs(b.im)) {
    float r = b.im / b.re, d = b.re + r * b.im;
    return {(a.re + a.im * r) / d, (a.im - a.re * r) / d};
  }
  float r = b.re / b.im, d = b.im + r * b.re;
  return {(a.re * r + a.im) / d, (a.im * r - a.re) / d};
}
ANVIL_HD bool operator==(Complex64 a, Complex64 b) { return a.re == b.re && a.im == b.im; }

// ---- float -> integer, defined for every input as x86 PyTorch CPU produces it (C++ leaves
// out-of-range casts undefined; cvttss2si returns the "integer indefinite" 0x80..0).
ANVIL_HD int64_t trunc_to_i64(double v) {
  if (v >= -9223372036854775808.0 && v < 9223372036854775808.0) return static_cast<int64_t>(v);
  return std::numeric_limits<int64_t>::min();
}
ANVIL_HD int32_t trunc_to_i32(double v) {
  if (v > -2147483649.0 && v < 2147483648.0) return static_cast<int32_t>(v);
  return std::numeric_limits<int32_t>::min();
}
template <typename To>
ANVIL_HD To float_to_int(double v) {
  if constexpr (std::is_same_v<To, int64_t>) {
    return trunc_to_i64(v);
  } else if constexpr (std::is_same_v<To, uint64_t>) {
    if (v >= 9223372036854775808.0) return static_cast<uint64_t>(trunc_to_i64(v - 9223372036854775808.0)) ^ (uint64_t{1} << 63);
    return static_cast<uint64_t>(trunc_to_i64(v));
  } else if constexpr (std::is_same_v<To, uint32_t>) {
    return static_cast<uint32_t>(trunc_to_i64(v));  // 64-bit truncation, low 32 bits (torch's scalar path)
  } else {
    return static_cast<To>(trunc_to_i32(v));  // int32 and narrower: 32-bit truncation, wrapped
  }
}

// ---- conversion between any two storage types
template <typename To, typename From>
ANVIL_HD To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_complex_v<From>) {
    if constexpr (std::is_same_v<To, bool>) return v.re != 0.f || v.im != 0.f;
    else return convert<To>(v.re);  // the imaginary part is discarded, as PyTorch does
  } else if constexpr (is_complex_v<To>) {
    return Complex64(static_cast<float>(convert<double>(v)), 0.f);
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (is_float_v<From>) return static_cast<opmath_t<From>>(v) != 0;
    else return v != 0;
  } else if constexpr (std::is_same_v<From, bool>) {
    if constexpr (is_float_v<To> && !std::is_floating_point_v<To>) return To(v ? 1.f : 0.f);
    else return static_cast<To>(v ? 1 : 0);
  } else if constexpr (is_float_v<From> && is_int_v<To>) {
    return float_to_int<To>(static_cast<double>(static_cast<opmath_t<From>>(v)));
  } else if constexpr (std::is_same_v<To, double>) {
    if constexpr (is_float_v<From>) return static_cast<double>(static_cast<opmath_t<From>>(v));
    else return static_cast<double>(v);
  } else if constexpr (std::is_same_v<To, float>) {
    if constexpr (is_float_v<From>) return static_cast<float>(static_cast<opmath_t<From>>(v));
    else return static_cast<float>(v);
  } else if constexpr (is_float_v<To>) {
    // float16 / bfloat16 / float8: through float32 (c10's constructors take a float)
    return To(convert<float>(v));
  } else {
    return static_cast<To>(v);  // integer -> integer: two's complement wrap
  }
}

template <typename T> ANVIL_HD T scalar_as(const ScalarArg& s) {
  if constexpr (is_complex_v<T>) return Complex64(static_cast<float>(s.f), static_cast<float>(s.im));
  else if constexpr (std::is_same_v<T, bool>) return s.i != 0;
  else if constexpr (is_int_v<T>) return static_cast<T>(static_cast<uint64_t>(s.i));
  else if constexpr (std::is_same_v<T, double>) return s.f;
  else return T(static_cast<float>(s.f));
}
// Scalar in the compute type of T.
template <typename T> ANVIL_HD opmath_t<T> scalar_op(const ScalarArg& s) {
  if constexpr (std::is_same_v<opmath_t<T>, float> && !std::is_same_v<T, float>) return static_cast<float>(s.f);
  else return scalar_as<T>(s);
}

template <typename T> ANVIL_HD bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// Integer arithmetic wraps (two's complement) instead of overflowing.
template <typename T> ANVIL_HD T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T> ANVIL_HD T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T> ANVIL_HD T wrap_mul(T a, T b) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// ---- unary ops on the compute type M (float for reduced floats)
template <typename M>
ANVIL_HD M apply_unary(UnaryOp op, M x) {
  if constexpr (is_complex_v<M>) {
    if (op == UnaryOp::Neg) return Complex64(-x.re, -x.im);
    return op == UnaryOp::Conj ? Complex64(x.re, -x.im) : x;  // front end admits only Neg and Conj
  } else if constexpr (std::is_same_v<M, bool>) {
    return op == UnaryOp::LogicalNot ? !x : x;
  } else if constexpr (is_int_v<M>) {
    switch (op) {
      case UnaryOp::Neg: return wrap_sub(M(0), x);
      case UnaryOp::Abs:
        if constexpr (std::is_signed_v<M>) return x < 0 ? wrap_sub(M(0), x) : x;
        else return x;
      default: return x;  // transcendental ops promote integers to float32 in the front end
    }
  } else {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Abs: return std::fabs(x);
      case UnaryOp::Exp: return std::exp(x);
      case UnaryOp::Log: return std::log(x);
      case UnaryOp::Sqrt: return std::sqrt(x);
      case UnaryOp::Rsqrt: return M(1) / std::sqrt(x);
      case UnaryOp::Sigmoid: return M(1) / (M(1) + std::exp(-x));
      case UnaryOp::Silu: return x / (M(1) + std::exp(-x));
      case UnaryOp::Gelu: return M(0.5) * x * (M(1) + std::erf(x * M(0.70710678118654752440)));
      case UnaryOp::GeluTanh: {
        const M kBeta = M(0.79788456080286535588);  // sqrt(2 / pi)
        return M(0.5) * x * (M(1) + std::tanh(kBeta * (x + M(0.044715) * x * x * x)));
      }
      case UnaryOp::Tanh: return std::tanh(x);
      default: return x;
    }
  }
}

template <typename M> ANVIL_HD M int_pow(M base, M exp) {
  if constexpr (std::is_signed_v<M>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? M(-1) : M(1);
      return 0;
    }
  }
  M result = 1;
  while (exp) {
    if (exp & 1) result = wrap_mul(result, base);
    exp = static_cast<M>(exp >> 1);
    base = wrap_mul(base, base);
  }
  return result;
}

// Laguerre polynomial L_n(x) by PyTorch's recurrence, operation for operation (its
// laguerre_polynomial_l_forward): L_{k+1} = ((2k + (1 - x)) L_k - k L_{k-1}) / (k + 1). n is
// truncated to int64 by the caller (a NaN n is undefined there; here it gives whatever the
// conversion gives).
template <typename M> ANVIL_HD M laguerre_l(M x, int64_t n) {
  if (n < 0) return M(0);
  if (x == M(0)) return M(1);
  if (n == 0) return M(1);
  if (n == 1) return M(1) - x;
  M p = M(1), q = M(1) - x, r = q;
  for (int64_t k = 1; k < n && q == q; ++k) {
    r = (static_cast<M>(k + k) + (M(1) - x)) * q - static_cast<M>(k) * p;
    r = r / static_cast<M>(k + 1);
    p = q;
    q = r;
  }
  return r;
}

// x = mantissa * 2^exponent with |mantissa| in [0.5, 1), from the bits (subnormals scaled up
// first); 0, inf and NaN give themselves and exponent 0 (glibc's frexp). float and double.
template <typename M> ANVIL_HD M frexp_of(M x, int32_t* exponent) {
  using Bits = std::conditional_t<sizeof(M) == 8, uint64_t, uint32_t>;
  constexpr int kMant = sizeof(M) == 8 ? 52 : 23, kBias = sizeof(M) == 8 ? 1022 : 126;
  constexpr Bits kExpMask = sizeof(M) == 8 ? Bits{0x7ff} : Bits{0xff};
  *exponent = 0;
  Bits u;
  memcpy(&u, &x, sizeof(M));
  int e = static_cast<int>((u >> kMant) & kExpMask);
  if (e == static_cast<int>(kExpMask) || (u << 1) == 0) return x;  // inf, NaN, +-0
  int shift = 0;
  if (e == 0) {  // subnormal: scale by 2^(kMant + 2), exactly
    const M scale = sizeof(M) == 8 ? M(18014398509481984.0) : M(33554432.0f);
    const M y = x * scale;
    memcpy(&u, &y, sizeof(M));
    e = static_cast<int>((u >> kMant) & kExpMask);
    shift = kMant + 2;
  }
  *exponent = e - kBias - shift;
  u = (u & ~(kExpMask << kMant)) | (static_cast<Bits>(kBias) << kMant);
  M m;
  memcpy(&m, &u, sizeof(M));
  return m;
}

// ---- binary ops on the compute type M. `div_by_zero` is set by integer division by zero.
template <typename M>
ANVIL_HD M apply_binary(BinaryOp op, M a, M b, M alpha, bool* div_by_zero) {
  if constexpr (is_complex_v<M>) {
    switch (op) {
      case BinaryOp::Add: return a + alpha * b;
      case BinaryOp::Sub: return a - alpha * b;
      case BinaryOp::Mul: return a * b;
      default: return a / b;
    }
  } else if constexpr (std::is_same_v<M, bool>) {
    switch (op) {
      case BinaryOp::Add: case BinaryOp::Maximum: case BinaryOp::Heaviside: return a || b;
      default: return a && b;  // Mul, Minimum
    }
  } else if constexpr (is_int_v<M>) {
    switch (op) {
      case BinaryOp::Add: return wrap_add(a, wrap_mul(alpha, b));
      case BinaryOp::Sub: return wrap_sub(a, wrap_mul(alpha, b));
      case BinaryOp::Mul: return wrap_mul(a, b);
      case BinaryOp::DivTrunc:
      case BinaryOp::DivFloor: {
        if (b == 0) { *div_by_zero = true; return 0; }
        if constexpr (std::is_signed_v<M>) {
          if (b == M(-1)) return wrap_sub(M(0), a);  // INT_MIN / -1 wraps
          M q = a / b;
          if (op == BinaryOp::DivFloor && (a % b != 0) && ((a < 0) != (b < 0))) --q;
          return q;
        } else {
          return a / b;
        }
      }
      case BinaryOp::Pow: return int_pow(a, b);
      case BinaryOp::Maximum: return a > b ? a : b;
      case BinaryOp::Minimum: return a < b ? a : b;
      case BinaryOp::Heaviside: return a == 0 ? b : M(a > 0);
      default: return a;
    }
  } else {
    switch (op) {
      case BinaryOp::Add: return a + alpha * b;
      case BinaryOp::Sub: return a - alpha * b;
      case BinaryOp::Mul: return a * b;
      case BinaryOp::Div: return a / b;
      case BinaryOp::DivTrunc: return std::trunc(a / b);
      case BinaryOp::DivFloor: {
        // PyTorch's div_floor_floating: exact for representable quotients.
        if (b == 0) return a / b;
        M mod = std::fmod(a, b);
        M div = (a - mod) / b;
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= M(1);
        if (div != 0) {
          M fl = std::floor(div);
          if (div - fl > M(0.5)) fl += M(1);
          return fl;
        }
        return std::copysign(M(0), a / b);
      }
      case BinaryOp::Pow: return std::pow(a, b);
      case BinaryOp::Maximum: return (a != a) ? a : (b != b) ? b : (a > b ? a : b);
      case BinaryOp::Minimum: return (a != a) ? a : (b != b) ? b : (a < b ? a : b);
      case BinaryOp::Heaviside: return a == 0 ? b : M(a > 0);  // NaN: 0, as PyTorch
      case BinaryOp::Laguerre: return laguerre_l(a, static_cast<int64_t>(b));
      default: return a;
    }
  }
}

template <typename M>
ANVIL_HD bool apply_compare(BinaryOp op, M a, M b) {
  if constexpr (is_complex_v<M>) {
    bool e = a == b;
    switch (op) {
      case BinaryOp::Eq: return e;
      case BinaryOp::Ne: return !e;
      case BinaryOp::LogicalAnd: return (a.re != 0.f || a.im != 0.f) && (b.re != 0.f || b.im != 0.f);
      case BinaryOp::LogicalOr: return (a.re != 0.f || a.im != 0.f) || (b.re != 0.f || b.im != 0.f);
      default: return false;  // the front end admits only Eq / Ne / logical ops for complex
    }
  } else {
    switch (op) {
      case BinaryOp::Eq: return a == b;
      case BinaryOp::Ne: return a != b;
      case BinaryOp::Lt: return a < b;
      case BinaryOp::Le: return a <= b;
      case BinaryOp::Gt: return a > b;
      case BinaryOp::Ge: return a >= b;
      case BinaryOp::LogicalAnd: return (a != M(0)) && (b != M(0));
      case BinaryOp::LogicalOr: return (a != M(0)) || (b != M(0));
      default: return false;
    }
  }
}

// clamp with NaN propagation from x and from either bound (torch.clamp).
template <typename M>
ANVIL_HD M apply_clamp(M x, bool has_lo, M lo, bool has_hi, M hi) {
  if constexpr (is_complex_v<M>) {
    return x;  // the front end rejects complex clamp
  } else if constexpr (std::is_floating_point_v<M>) {
    if (x != x) return x;
    if (has_lo) x = (lo != lo) ? lo : (x < lo ? lo : x);
    if (has_hi) x = (hi != hi) ? hi : (x > hi ? hi : x);
    return x;
  } else {
    if (has_lo && x < lo) x = lo;
    if (has_hi && x > hi) x = hi;
    return x;
  }
}

}  // namespace anvil
