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

// The dtype lists, shared with the device-side twins (cuda/device/dispatch.cuh).
#define ANVIL_HALF_DTYPES(X)          \
  X(DType::Float16, Half)             \
  X(DType::BFloat16, BFloat16)
#define ANVIL_FLOAT_DTYPES(X)         \
  ANVIL_HALF_DTYPES(X)                \
  X(DType::Float32, float)            \
  X(DType::Float64, double)
#define ANVIL_ALL_DTYPES(X)           \
  X(DType::Bool, bool)                \
  X(DType::UInt8, uint8_t)            \
  X(DType::Int8, int8_t)              \
  X(DType::UInt16, uint16_t)          \
  X(DType::Int16, int16_t)            \
  X(DType::UInt32, uint32_t)          \
  X(DType::Int32, int32_t)            \
  X(DType::UInt64, uint64_t)          \
  X(DType::Int64, int64_t)            \
  ANVIL_FLOAT_DTYPES(X)               \
  X(DType::Float8_e4m3fn, Float8_e4m3fn) \
  X(DType::Float8_e5m2, Float8_e5m2)  \
  X(DType::Complex64, Complex64)

template <typename F>
decltype(auto) dispatch_all_types(DType t, const char* op, F&& f) {
  switch (t) {
    ANVIL_ALL_DTYPES(ANVIL_DISPATCH_CASE)  // no default: -Wswitch names a dtype missing here
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
    ANVIL_FLOAT_DTYPES(ANVIL_DISPATCH_CASE)
    default:
      break;
  }
  throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t), "'"));
}

// float16, bfloat16: the 16-bit float kernels (mma.sync operands, packed 16-byte rows).
template <typename F>
decltype(auto) dispatch_half_types(DType t, const char* op, F&& f) {
  switch (t) {
    ANVIL_HALF_DTYPES(ANVIL_DISPATCH_CASE)
    default:
      break;
  }
  throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t), "' (float16 / bfloat16 only)"));
}

// float16, bfloat16, float32, float64, complex64: gradients of data-movement ops (pads).
template <typename F>
decltype(auto) dispatch_float_complex_types(DType t, const char* op, F&& f) {
  switch (t) {
    ANVIL_FLOAT_DTYPES(ANVIL_DISPATCH_CASE)
    ANVIL_DISPATCH_CASE(DType::Complex64, Complex64)
    default:
      break;
  }
  throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t), "'"));
}

// float32, float64, complex64: linear algebra (LAPACK's s / d / c and cuSOLVER's).
template <typename F>
decltype(auto) dispatch_linalg_types(DType t, const char* op, F&& f) {
  switch (t) {
    ANVIL_DISPATCH_CASE(DType::Float32, float)
    ANVIL_DISPATCH_CASE(DType::Float64, double)
    ANVIL_DISPATCH_CASE(DType::Complex64, Complex64)
    default:
      break;
  }
  throw DTypeError(detail::cat_message(op, " not implemented for '", dtype_name(t),
                                       "' (float32, float64 and complex64 are supported)"));
}

// Ops that only move elements (same-dtype copy, fill, where, index_select, gather, scatter
// without accumulation, pads) are instantiated per element size, not per dtype.
template <typename F>
decltype(auto) dispatch_element_size(size_t bytes, const char* op, F&& f) {
  if (bytes == 1) return f(TypeTag<uint8_t>{});
  if (bytes == 2) return f(TypeTag<uint16_t>{});
  if (bytes == 4) return f(TypeTag<uint32_t>{});
  if (bytes == 8) return f(TypeTag<uint64_t>{});
  throw DTypeError(detail::cat_message(op, " unsupported element size ", bytes));
}

#undef ANVIL_DISPATCH_CASE

}  // namespace anvil
