#include "anvil/dtype.h"

#include <array>

#include "anvil/error.h"
#include "anvil/scalar.h"

namespace anvil {
namespace {

struct DTypeInfo {
  const char* name;
  size_t size;
};
// Indexed by DType's value.
constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {"bool", 1}, {"uint8", 1}, {"int8", 1}, {"uint16", 2}, {"int16", 2}, {"uint32", 4},
    {"int32", 4}, {"uint64", 8}, {"int64", 8}, {"float16", 2}, {"bfloat16", 2},
    {"float32", 4}, {"float64", 8}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1}, {"complex64", 8},
}};

int idx(DType t) { return static_cast<int>(t); }

}  // namespace

size_t element_size(DType t) { return kInfo.at(idx(t)).size; }
const char* dtype_name(DType t) { return kInfo.at(idx(t)).name; }

DType dtype_from_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kInfo[i].name) return static_cast<DType>(i);
  if (name == "float" || name == "fp32") return kFloat32;
  if (name == "half" || name == "fp16") return kFloat16;
  if (name == "bf16") return kBFloat16;
  if (name == "double") return kFloat64;
  if (name == "fp8" || name == "float8") return kFloat8_e4m3fn;
  if (name == "long") return kInt64;
  if (name == "int") return kInt32;
  throw FormatError("[dtype] unknown dtype name '" + name + "'");
}

bool is_float8(DType t) { return t == kFloat8_e4m3fn || t == kFloat8_e5m2; }
bool is_floating_point(DType t) {
  return t == kFloat16 || t == kBFloat16 || t == kFloat32 || t == kFloat64 || is_float8(t);
}
bool is_complex(DType t) { return t == kComplex64; }
bool is_integral(DType t, bool include_bool) {
  if (t == kBool) return include_bool;
  return t == kUInt8 || t == kInt8 || t == kUInt16 || t == kInt16 || t == kUInt32 || t == kInt32 ||
         t == kUInt64 || t == kInt64;
}
bool is_unsigned(DType t) { return t == kBool || t == kUInt8 || t == kUInt16 || t == kUInt32 || t == kUInt64; }
bool is_reduced_float(DType t) { return t == kFloat16 || t == kBFloat16 || is_float8(t); }

namespace {
bool is_barebones_unsigned(DType t) { return t == kUInt16 || t == kUInt32 || t == kUInt64; }

// Promotion among bool, the classic integer types, float16/bf16/32/64 and complex64, ordered
// as PyTorch's table: b1 u1 i1 i2 i4 i8 f2 bf f4 f8 c4.
DType promote_classic(DType a, DType b) {
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::UInt8: return 1;
      case DType::Int8: return 2;
      case DType::Int16: return 3;
      case DType::Int32: return 4;
      case DType::Int64: return 5;
      default: return -1;
    }
  };
  if (a == kBool) return b;
  if (b == kBool) return a;
  int ra = rank(a), rb = rank(b);
  if (ra >= 0 && rb >= 0) {
    // uint8 with int8 gives int16; otherwise the wider type.
    if ((a == kUInt8 && b == kInt8) || (a == kInt8 && b == kUInt8)) return kInt16;
    return ra > rb ? a : b;
  }
  if (is_complex(a) || is_complex(b)) {
    DType other = is_complex(a) ? b : a;
    if (other == kFloat64)
      throw DTypeError("[promote_types] complex64 with float64 promotes to complex128, which anvil does not support");
    return kComplex64;
  }
  if (ra >= 0) return b;  // integer with floating
  if (rb >= 0) return a;
  // two distinct floating types
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  auto frank = [](DType t) { return t == kFloat64 ? 3 : t == kFloat32 ? 2 : 1; };
  return frank(a) >= frank(b) ? a : b;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_float8(a) || is_float8(b))
    throw DTypeError(detail::cat_message("[promote_types] Promotion for Float8 Types is not supported, attempted to promote ",
                                         dtype_name(a), " and ", dtype_name(b)));
  if (is_barebones_unsigned(a) || is_barebones_unsigned(b)) {
    if (is_floating_point(a)) return a;
    if (is_floating_point(b)) return b;
    throw DTypeError(detail::cat_message("[promote_types] Promotion for uint16, uint32, uint64 types is not supported, attempted to promote ",
                                         dtype_name(a), " and ", dtype_name(b)));
  }
  return promote_classic(a, b);
}

// ---- Scalar
double Scalar::to_double() const {
  switch (kind_) {
    case Kind::Bool: case Kind::Int: return static_cast<double>(i_);
    case Kind::UInt: return static_cast<double>(u_);
    default: return d_;
  }
}
int64_t Scalar::to_int64() const {
  switch (kind_) {
    case Kind::Bool: case Kind::Int: return i_;
    case Kind::UInt: return static_cast<int64_t>(u_);
    default: {
      double v = d_;
      if (v != v || v >= 9223372036854775808.0 || v < -9223372036854775808.0) return INT64_MIN;
      return static_cast<int64_t>(v);
    }
  }
}
uint64_t Scalar::to_uint64() const { return kind_ == Kind::UInt ? u_ : static_cast<uint64_t>(to_int64()); }
bool Scalar::to_bool() const {
  switch (kind_) {
    case Kind::Bool: case Kind::Int: return i_ != 0;
    case Kind::UInt: return u_ != 0;
    case Kind::Double: return d_ != 0;
    default: return d_ != 0 || im_ != 0;
  }
}
std::complex<double> Scalar::to_complex() const {
  if (kind_ == Kind::Complex) return {d_, im_};
  return {to_double(), 0.0};
}
DType Scalar::default_dtype() const {
  switch (kind_) {
    case Kind::Bool: return kBool;
    case Kind::Int: case Kind::UInt: return kInt64;
    case Kind::Double: return kFloat32;
    default: return kComplex64;
  }
}

}  // namespace anvil
