#pragma once
// dtypes with libtorch's C++ names, element sizes, names and PyTorch's type promotion.
#include <cstddef>
#include <cstdint>
#include <string>

#include "anvil/export.h"
#include "anvil/numeric.h"

namespace anvil {

enum class DType : int8_t {
  Bool,
  UInt8,
  Int8,
  UInt16,
  Int16,
  UInt32,
  Int32,
  UInt64,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Float8_e4m3fn,
  Float8_e5m2,
  Complex64,
};
inline constexpr int kNumDTypes = 16;
using ScalarType = DType;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kUInt16 = DType::UInt16;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kUInt32 = DType::UInt32;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kUInt64 = DType::UInt64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kFloat8_e4m3fn = DType::Float8_e4m3fn;
inline constexpr DType kFloat8_e5m2 = DType::Float8_e5m2;
inline constexpr DType kComplex64 = DType::Complex64;
inline constexpr DType kComplexFloat = DType::Complex64;

ANVIL_API size_t element_size(DType t);
// PyTorch's names: "float32", "bfloat16", "float8_e4m3fn", "uint16", "complex64", ...
ANVIL_API const char* dtype_name(DType t);
ANVIL_API DType dtype_from_name(const std::string& name);  // accepts the names above; FormatError
ANVIL_API bool is_floating_point(DType t);                 // float16/bf16/32/64 and both float8
ANVIL_API bool is_complex(DType t);
ANVIL_API bool is_integral(DType t, bool include_bool = false);
ANVIL_API bool is_unsigned(DType t);  // bool and uint8..uint64
ANVIL_API bool is_float8(DType t);
ANVIL_API bool is_reduced_float(DType t);  // float16, bfloat16, float8: computed in float32

// torch.promote_types: DTypeError for float8 mixes and uint16/32/64 with signed or bool types.
ANVIL_API DType promote_types(DType a, DType b);

// Maps a C++ storage type to its DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = kBool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = kUInt8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = kInt8; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = kUInt16; };
template <> struct dtype_of<int16_t> { static constexpr DType value = kInt16; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = kUInt32; };
template <> struct dtype_of<int32_t> { static constexpr DType value = kInt32; };
template <> struct dtype_of<uint64_t> { static constexpr DType value = kUInt64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = kInt64; };
template <> struct dtype_of<Half> { static constexpr DType value = kFloat16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = kBFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = kFloat64; };
template <> struct dtype_of<Float8_e4m3fn> { static constexpr DType value = kFloat8_e4m3fn; };
template <> struct dtype_of<Float8_e5m2> { static constexpr DType value = kFloat8_e5m2; };
template <> struct dtype_of<Complex64> { static constexpr DType value = kComplex64; };
template <> struct dtype_of<std::complex<float>> { static constexpr DType value = kComplex64; };
template <typename T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace anvil
