#include "reference/ref_float.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ref {

FmtInfo fmt_info(Fmt f) {
  switch (f) {
    case Fmt::E4M3FN: return {4, 3, 7, false, 8};
    case Fmt::E5M2: return {5, 2, 15, true, 8};
    case Fmt::F16: return {5, 10, 15, true, 16};
    case Fmt::BF16: return {8, 7, 127, true, 16};
  }
  return {};
}

const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::E4M3FN: return "float8_e4m3fn";
    case Fmt::E5M2: return "float8_e5m2";
    case Fmt::F16: return "float16";
    case Fmt::BF16: return "bfloat16";
  }
  return "?";
}

bool is_nan_bits(Fmt f, uint32_t bits) {
  FmtInfo fi = fmt_info(f);
  uint32_t mag = bits & ((1u << (fi.total_bits - 1)) - 1u);
  uint32_t e = mag >> fi.man_bits;
  uint32_t m = mag & ((1u << fi.man_bits) - 1u);
  uint32_t e_all = (1u << fi.exp_bits) - 1u;
  if (fi.ieee_specials) return e == e_all && m != 0;
  return e == e_all && m == (1u << fi.man_bits) - 1u;
}

double decode(Fmt f, uint32_t bits) {
  FmtInfo fi = fmt_info(f);
  bool neg = (bits >> (fi.total_bits - 1)) & 1u;
  uint32_t mag = bits & ((1u << (fi.total_bits - 1)) - 1u);
  int e = static_cast<int>(mag >> fi.man_bits);
  int m = static_cast<int>(mag & ((1u << fi.man_bits) - 1u));
  int e_all = (1 << fi.exp_bits) - 1;
  double v;
  if (is_nan_bits(f, bits)) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (fi.ieee_specials && e == e_all) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - fi.bias - fi.man_bits);  // subnormal: 0.m * 2^(1-bias)
  } else {
    v = std::ldexp(static_cast<double>((1 << fi.man_bits) + m), e - fi.bias - fi.man_bits);
  }
  return neg ? -v : v;
}

namespace {

// Non-negative finite values of a format, indexed by their (positive) code: codes are ordered
// like their magnitudes. The entry one past the largest finite code is the value that code would
// have with an unbounded exponent (2^(emax+1) for IEEE formats, 480 for e4m3fn): the IEEE rule
// "round as if the exponent range were unbounded, then overflow".
struct Table {
  std::vector<double> value;  // value[code]
  uint32_t max_finite = 0;
};

Table build_table(Fmt f) {
  FmtInfo fi = fmt_info(f);
  Table t;
  uint32_t n_pos = 1u << (fi.total_bits - 1);
  for (uint32_t c = 0; c < n_pos; ++c) {
    double v = decode(f, c);
    if (std::isnan(v) || std::isinf(v)) break;
    t.value.push_back(v);
    t.max_finite = c;
  }
  // The next code as if it were finite: mantissa 0 of the next binade (IEEE) or the all-ones
  // mantissa of the top binade (e4m3fn's NaN slot 0x7F = 1.875 * 2^8 = 480).
  uint32_t next = t.max_finite + 1;
  int e = static_cast<int>(next >> fi.man_bits);
  int m = static_cast<int>(next & ((1u << fi.man_bits) - 1u));
  t.value.push_back(std::ldexp(static_cast<double>((1 << fi.man_bits) + m), e - fi.bias - fi.man_bits));
  return t;
}

const Table& table_for(Fmt f) {
  static const Table tables[4] = {build_table(Fmt::E4M3FN), build_table(Fmt::E5M2), build_table(Fmt::F16),
                                  build_table(Fmt::BF16)};
  return tables[static_cast<int>(f)];
}

}  // namespace

uint32_t encode(Fmt f, double x) {
  FmtInfo fi = fmt_info(f);
  const uint32_t sign = std::signbit(x) ? (1u << (fi.total_bits - 1)) : 0u;
  if (std::isnan(x)) {
    switch (f) {
      case Fmt::E4M3FN: return sign | 0x7Fu;
      case Fmt::E5M2: return sign | 0x7Fu;
      case Fmt::F16: return sign | 0x7E00u;
      case Fmt::BF16: return 0x7FC0u;
    }
  }
  const Table& t = table_for(f);
  const uint32_t overflow_code = t.max_finite + 1;  // inf for IEEE formats
  double a = std::fabs(x);
  uint32_t code;
  if (std::isinf(a)) {
    code = overflow_code;
  } else {
    // Largest code whose value is <= a.
    auto it = std::upper_bound(t.value.begin(), t.value.end(), a);
    if (it == t.value.end()) {
      code = overflow_code;  // at or beyond the virtual next value
    } else {
      uint32_t lo = static_cast<uint32_t>(it - t.value.begin()) - 1u;
      uint32_t hi = lo + 1;
      double dlo = a - t.value[lo], dhi = t.value[hi] - a;  // exact: neighbours differ by < 2^53 ulps
      if (dlo < dhi) code = lo;
      else if (dhi < dlo) code = hi;
      else code = (lo % 2 == 0) ? lo : hi;
    }
  }
  if (code == overflow_code && !fi.ieee_specials) code = t.max_finite;  // e4m3fn saturates
  return sign | code;
}

uint32_t encode_f32(Fmt f, float x) { return encode(f, static_cast<double>(x)); }

int64_t x86_trunc_i64(double v) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(std::trunc(v));
}

int32_t x86_trunc_i32(double v) {
  double t = std::trunc(v);
  if (!(t >= -2147483648.0 && t <= 2147483647.0)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(t);
}

int64_t x86_float_to_signed(double v, int bits) {
  if (bits == 64) return x86_trunc_i64(v);
  int32_t t = x86_trunc_i32(v);
  if (bits == 32) return t;
  if (bits == 16) return static_cast<int16_t>(static_cast<uint16_t>(static_cast<uint32_t>(t)));
  return static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint32_t>(t)));
}

uint64_t x86_float_to_unsigned(double v, int bits) {
  if (bits == 64) {
    if (v >= 9223372036854775808.0) return static_cast<uint64_t>(x86_trunc_i64(v - 9223372036854775808.0)) ^ (1ull << 63);
    return static_cast<uint64_t>(x86_trunc_i64(v));
  }
  if (bits == 32) return static_cast<uint32_t>(static_cast<uint64_t>(x86_trunc_i64(v)));  // cvttsd2si r64, low half
  uint32_t t = static_cast<uint32_t>(x86_trunc_i32(v));
  return bits == 16 ? (t & 0xFFFFu) : (t & 0xFFu);
}

}  // namespace ref
