#pragma once
// Elementwise kernels: copy (dtype conversion), fill, unary, binary, where, clamp.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// Conj: complex64 only (the front end copies real tensors).
enum class UnaryOp : int8_t { Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sigmoid, Silu, Gelu, GeluTanh, Tanh, LogicalNot, Conj };
enum class BinaryOp : int8_t {
  Add,       // a + alpha * b
  Sub,       // a - alpha * b
  Mul,
  Div,       // true division (floating / complex dtypes only)
  DivTrunc,
  DivFloor,
  Pow,
  Maximum,
  Minimum,
  Heaviside,  // a == 0 ? b : a > 0
  Laguerre,   // L_n(a) with n = trunc(b) (floating dtypes)
  Eq, Ne, Lt, Le, Gt, Ge,  // out dtype bool
  LogicalAnd, LogicalOr,   // out dtype bool
};
inline constexpr bool is_compare(BinaryOp op) { return op >= BinaryOp::Eq; }

// One elementwise launch over an iteration space of `ndim` dims (already broadcast and with
// contiguous neighbouring dims merged). Slot 0 is the output, slots 1.. the inputs.
//  copy:   out[dst_dtype] = in[src_dtype] converted
//  fill:   out = scalar
//  unary:  out = op(in1)                       (in and out dtype equal, or bool for LogicalNot)
//  binary: out = op(in1, in2 [, alpha])        (inputs share `dtype`; out dtype or bool)
//  where:  out = in1(bool) ? in2 : (has_b ? in3 : scalar0)
//  clamp:  out = min(max(in1, lo), hi): lo/hi from in2/in3 tensors or scalar0/scalar1 when
//          the matching has_* flag says so
//  frexp:  slot 0 = mantissa (dtype), slot 1 = exponent (int32) of slot 2 (dtype, floating)
struct ElementwiseParams {
  int ndim = 0;
  int nargs = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  void* ptr[4] = {};
  int64_t strides[4][kMaxDims] = {};
  DType dtype = kFloat32;      // inputs
  DType out_dtype = kFloat32;  // slot 0
  int8_t op = 0;               // UnaryOp / BinaryOp value
  bool contiguous = false;     // every slot dense with the same layout: index == offset
  bool has_a = false, has_b = false;  // where / clamp operand flags (see above)
  ScalarArg alpha, scalar0, scalar1;
};

#define ANVIL_ELEMENTWISE_KERNELS(X)   \
  X(copy, const ElementwiseParams&)    \
  X(fill, const ElementwiseParams&)    \
  X(unary, const ElementwiseParams&)   \
  X(binary, const ElementwiseParams&)  \
  X(where, const ElementwiseParams&)   \
  X(clamp, const ElementwiseParams&)   \
  X(frexp, const ElementwiseParams&)
ANVIL_DECLARE_KERNELS(ANVIL_ELEMENTWISE_KERNELS)

}  // namespace anvil
