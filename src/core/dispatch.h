#pragma once
// The one place where a runtime DType becomes a C++ type. Op and kernel files never switch on
// DType themselves: they call one of these with a generic lambda taking a type tag.
//   dispatch_all_types(t, "[add]", [&](auto tag) { using T = typename decltype(tag)::type; ... });
#include <type_traits>

#include "anvil/dtype.h"
#include "anvil/error.h"

namespace anvil {

template <typename T> struct TypeTag { using type = T; };

#define ANVIL_DISPATCH_CASE(enum_value, cpp_type) \
  case enum_value:                                \
    return f(TypeTag<cpp_type>{});

template <typename F>
decltype(auto) dispatch_all_types(DType t, const char* op, F&& f) {
  switch (t) {
    ANVIL_DISPATCH_CASE(DType::Bool, bool)
    ANVIL_DISPATCH_CASE(DType::UInt8, uint8_t)
    ANVIL_DISPATCH_CASE(DType::Int8, int8_t)
    ANVIL_DISPATCH_CASE(DType::UInt16, uint16_t)
    ANVIL_DISPATCH_CASE(DType::Int16, int16_t)
    ANVIL_DISPATCH_CASE(DType::UInt32, uint32_t)
    ANVIL_DISPATCH_CASE(DType::Int32, int32_t)
    ANVIL_DISPATCH_CASE(DType::UInt64, uint64_t)
    ANVIL_DISPATCH_CASE(DType::Int64, int64_t)
    ANVIL_DISPATCH_CASE(DType::Float16, Half)
    ANVIL_DISPATCH_CASE(DType::BFloat16, BFloat16)
    ANVIL_DISPATCH_CASE(DType::Float32, float)
    ANVIL_DISPATCH_CASE(DType::Float64, double)
    ANVIL_DISPATCH_CASE(DType::Float8_e4m3fn, Float8_e4m3fn)
    ANVIL_DISPATCH_CASE(DType::Float8_e5m2, Float8_e5m2)
    ANVIL_DISPATCH_CASE(DType::Complex64, Complex64)
  }
  throw DTypeError(detail::cat_message(op, " unknown dtype ", static_cast<int>(t)));
}

// Types that take arithmetic: everything but the float8 storage types.
template <typename F>
decltype(auto) dispatch_arith_types(DType t, const char* op, F&& f) {
  if (is_float8(t)) throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t), "'"));
  return dispatch_all_types(t, op, std::forward<F>(f));
}

// Real (non-complex) arithmetic types: ordering, max/min, pow, clamp.
template <typename F>
decltype(auto) dispatch_real_types(DType t, const char* op, F&& f) {
  if (is_float8(t) || is_complex(t)) throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t), "'"));
  return dispatch_all_types(t, op, std::forward<F>(f));
}

// float16, bfloat16, float32, float64: transcendental functions.
template <typename F>
decltype(auto) dispatch_float_types(DType t, const char* op, F&& f) {
  switch (t) {
    ANVIL_DISPATCH_CASE(DType::Float16, Half)
    ANVIL_DISPATCH_CASE(DType::BFloat16, BFloat16)
    ANVIL_DISPATCH_CASE(DType::Float32, float)
    ANVIL_DISPATCH_CASE(DType::Float64, double)
    default:
      break;
  }
  throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t), "'"));
}

#undef ANVIL_DISPATCH_CASE

}  // namespace anvil
