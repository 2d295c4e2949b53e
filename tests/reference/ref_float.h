#pragma once
// An independent oracle for the small float formats, written from the format definitions
// (pytorch-semantics.md 1.1-1.3, IEEE 754 binary16, bfloat16) rather than from src/:
// decode builds the value from sign / exponent / mantissa with ldexp; encode enumerates every
// finite value of the format, picks the nearest one in exact double arithmetic with ties to the
// even code, then applies the format's overflow rule (e4m3fn saturates, the others go to inf)
// and its NaN rule.
#include <cstdint>

namespace ref {

enum class Fmt { E4M3FN, E5M2, F16, BF16 };

struct FmtInfo {
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_specials;  // all-ones exponent = inf / NaN (false for e4m3fn: only S.1111.111 is NaN)
  int total_bits;
};
FmtInfo fmt_info(Fmt f);
const char* fmt_name(Fmt f);

// Exact value of a bit pattern (NaN for NaN patterns, +-inf for IEEE infinities).
double decode(Fmt f, uint32_t bits);
bool is_nan_bits(Fmt f, uint32_t bits);

// Bits of the format nearest to x (an exactly given double), ties to even, then:
//   NaN -> e4m3fn 0x7F|sign, e5m2 0x7F|sign, fp16 0x7E00|sign, bf16 0x7FC0 (PyTorch's choices);
//   overflow and +-inf -> e4m3fn +-448 (saturating), the others +-inf.
uint32_t encode(Fmt f, double x);

// float32 -> bits, computed as encode(f, (double)x): exact, since every float is a double.
uint32_t encode_f32(Fmt f, float x);

// float -> integer conversions as x86-64 PyTorch 2.15 CPU produces them (probed on torch
// 2.15.0; C++ leaves out-of-range casts undefined, the hardware truncating converts give the
// "integer indefinite" value 0x80..0):
//  int64: truncate if in [-2^63, 2^63), else INT64_MIN (NaN too).
//  int32, int16, int8, uint16, uint8: truncate to int32 (out of range / NaN -> INT32_MIN), keep
//    the low bits (300.5 -> int8 44, -1.5 -> uint8 255, 1e10 -> 0).
//  uint32: below 2^31 as int32 (negatives wrap, NaN -> 2^31); at or above 2^31 subtract 2^31,
//    truncate to int32 and flip the top bit (3e9 -> 3e9, 1e10 -> 0, inf -> 0).
//  uint64: the same at 64 bits (1e20 -> 0, -1e10 -> 2^64 - 1e10).
//  bool: v != 0 (NaN -> true).
int64_t x86_trunc_i64(double v);
int32_t x86_trunc_i32(double v);
// `bits` in {8, 16, 32, 64}; the result's low `bits` bits are the integer's two's complement.
int64_t x86_float_to_signed(double v, int bits);
uint64_t x86_float_to_unsigned(double v, int bits);

}  // namespace ref
