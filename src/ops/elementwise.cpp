// Elementwise ops: promotion, broadcasting and validation; the backends do the loops.
#include <cmath>

#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/util.h"
#include "ops/iter.h"

namespace anvil {

// ---- promotion (torch.result_type): dimensioned tensors > zero-dim tensors > wrapped numbers
namespace {
struct PromotionState {
  std::optional<DType> dim_result, zero_result, wrapped_result;
};
void update(std::optional<DType>& slot, DType t) { slot = slot ? promote_types(*slot, t) : t; }

int category(DType t) { return t == kBool ? 0 : is_integral(t) ? 1 : is_complex(t) ? 3 : 2; }

std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (category(*lower) > category(*higher)) {
    if (is_complex(*lower) && *higher == kFloat64)
      throw DTypeError("[result_type] complex with float64 promotes to complex128, which anvil does not support");
    if (is_complex(*lower)) return kComplex64;
    return *higher == kBool ? *lower : promote_types(*higher, *lower);
  }
  return higher;
}
DType finish(const PromotionState& s) {
  return combine(s.dim_result, combine(s.zero_result, s.wrapped_result)).value_or(kFloat32);
}
void add_tensor(PromotionState& s, const Tensor& t) { update(t.dim() > 0 ? s.dim_result : s.zero_result, t.dtype()); }
void add_scalar(PromotionState& s, const Scalar& v) { update(s.wrapped_result, v.default_dtype()); }
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  PromotionState s;
  add_tensor(s, a);
  add_tensor(s, b);
  return finish(s);
}

DType result_type(const Tensor& a, const Scalar& b) {
  PromotionState s;
  add_tensor(s, a);
  add_scalar(s, b);
  return finish(s);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ANVIL_CHECK(da == db || da == 1 || db == 1, ShapeError, "[broadcast] The size of tensor a (", da,
                ") must match the size of tensor b (", db, ") at non-singleton dimension ", i, ": shapes ", shape_str(a),
                " and ", shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

Shape broadcast_for(const char* op, const Shape& a, const Shape& b) {
  return as_op(op, [&] { return broadcast_shapes(a, b); });
}

const char* op_name(BinaryOp op) {
  static const char* kNames[] = {"[add]", "[sub]", "[mul]", "[div]", "[div]", "[div]", "[pow]", "[maximum]",
                                 "[minimum]", "[heaviside]", "[special_laguerre_polynomial_l]", "[eq]", "[ne]", "[lt]", "[le]", "[gt]", "[ge]", "[logical_and]",
                                 "[logical_or]"};
  return kNames[static_cast<int>(op)];
}

// A Scalar operand becomes a 0-dim tensor of the op's compute dtype on the tensor's device.
Tensor wrap(const Scalar& s, DType t, Device d) { return full({}, s, TensorOptions(t).device(d)); }

// b_scalar: on CUDA, b is this number passed to the kernel in the params (slot 2 absent, nargs 2)
// instead of a 0-d device tensor, whose fill would be a second launch (PyTorch passes a CPU
// scalar as a kernel argument too); `b` is then its 0-d CPU wrap, for the checks and shapes.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, DType common, const Scalar& alpha,
              const Scalar* b_scalar = nullptr) {
  const char* name = op_name(op);
  ANVIL_CHECK(a.defined() && b.defined(), Error, name, " undefined tensor");
  if (!b_scalar) check_same_device(name, a, b);
  DType compute = common;
  bool compare = is_compare(op);
  if (op == BinaryOp::Div && (is_integral(compute, true))) compute = kFloat32;
  ANVIL_CHECK(!(op == BinaryOp::Sub && compute == kBool), DTypeError, name,
              " Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
              "operator instead.");
  if (is_complex(compute)) {
    bool ok = op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Div ||
              op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
    ANVIL_CHECK(ok, DTypeError, name, " not implemented for 'complex64'");
  }
  if (!compare && !is_complex(compute) && op != BinaryOp::Add && op != BinaryOp::Mul && op != BinaryOp::Sub &&
      op != BinaryOp::Div)
    dispatch_real_types(compute, name, [](auto) {});
  else
    dispatch_arith_types(compute, name, [](auto) {});
  ANVIL_CHECK(!(op == BinaryOp::Pow && compute == kBool), DTypeError, name, " not implemented for 'bool'");
  Shape shape = broadcast_for(name, a.sizes(), b.sizes());
  Tensor ac = a.to(compute), bc = b.to(compute);
  const TensorOptions out_options = TensorOptions(compare ? kBool : compute).device(a.device());
  Tensor out = b_scalar ? empty_elementwise(shape, out_options, {&a}) : empty_elementwise(shape, out_options, {&a, &b});
  if (out.numel() == 0) return out;
  ElementwiseParams p = b_scalar ? make_elementwise(name, out, {&ac}) : make_elementwise(name, out, {&ac, &bc});
  if (b_scalar) p.scalar0 = to_scalar_arg(bc.item());  // the number in the compute dtype, as the wrap holds it
  p.dtype = compute;
  p.op = static_cast<int8_t>(op);
  p.alpha = to_scalar_arg(alpha);
  ANVIL_KERNEL(out.device(), binary, p);
  return out;
}

Tensor binary_tt(BinaryOp op, const Tensor& a, const Tensor& b, const Scalar& alpha = 1) {
  ANVIL_CHECK(a.defined() && b.defined(), Error, op_name(op), " undefined tensor");
  DType common = as_op(op_name(op), [&] { return result_type(a, b); });
  return binary(op, a, b, common, alpha);
}
Tensor binary_ts(BinaryOp op, const Tensor& a, const Scalar& b, const Scalar& alpha = 1) {
  ANVIL_CHECK(a.defined(), Error, op_name(op), " undefined tensor");
  DType common = as_op(op_name(op), [&] { return result_type(a, b); });
  if (a.device().is_cuda()) return binary(op, a, wrap(b, common, Device(kCPU)), common, alpha, &b);
  return binary(op, a, wrap(b, common, a.device()), common, alpha);
}

BinaryOp div_op(const char* name, const std::string& mode) {
  if (mode.empty()) return BinaryOp::Div;
  if (mode == "trunc") return BinaryOp::DivTrunc;
  if (mode == "floor") return BinaryOp::DivFloor;
  throw Error(detail::cat_message(name, " div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
                                  mode, "'"));
}

Tensor unary(const char* name, UnaryOp op, const Tensor& x) {
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  DType t = x.dtype();
  bool transcendental = op != UnaryOp::Neg && op != UnaryOp::Abs && op != UnaryOp::LogicalNot;
  if (transcendental && is_integral(t, true)) t = kFloat32;  // integers promote to the default float dtype
  if (op == UnaryOp::LogicalNot) {
    dispatch_arith_types(t, name, [](auto) {});
    Tensor out = empty_elementwise(x.sizes(), TensorOptions(kBool).device(x.device()), {&x});
    if (out.numel() == 0) return out;
    // logical_not(x) == (x == 0)
    Tensor zero = wrap(0, t, x.device());
    ElementwiseParams p = make_elementwise(name, out, {&x, &zero});
    p.dtype = t;
    p.op = static_cast<int8_t>(BinaryOp::Eq);
    ANVIL_KERNEL(out.device(), binary, p);
    return out;
  }
  ANVIL_CHECK(!(op == UnaryOp::Neg && t == kBool), DTypeError, name,
              " Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use "
              "the `~` or `logical_not()` operator instead.");
  if (is_complex(t)) {
    ANVIL_CHECK(op == UnaryOp::Neg || op == UnaryOp::Conj, DTypeError, name, " not implemented for 'complex64'");
  } else if (transcendental) {
    dispatch_float_types(t, name, [](auto) {});
  } else {
    dispatch_arith_types(t, name, [](auto) {});
  }
  Tensor xc = x.to(t);
  Tensor out = empty_elementwise(x.sizes(), TensorOptions(t).device(x.device()), {&x});
  if (out.numel() == 0) return out;
  ElementwiseParams p = make_elementwise(name, out, {&xc});
  p.dtype = t;
  p.op = static_cast<int8_t>(op);
  ANVIL_KERNEL(out.device(), unary, p);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) { return binary_tt(BinaryOp::Add, a, b, alpha); }
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) { return binary_ts(BinaryOp::Add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) { return binary_tt(BinaryOp::Sub, a, b, alpha); }
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) { return binary_ts(BinaryOp::Sub, a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Mul, a, b); }
Tensor mul(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b, const std::string& mode) { return binary_tt(div_op("[div]", mode), a, b); }
Tensor div(const Tensor& a, const Scalar& b, const std::string& mode) { return binary_ts(div_op("[div]", mode), a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Pow, a, b); }
Tensor pow(const Tensor& a, const Scalar& b) {
  ANVIL_CHECK(!(a.defined() && is_integral(a.dtype(), true) && b.is_integral() && b.to_int64() < 0), Error,
              "[pow] Integers to negative integer powers are not allowed.");
  return binary_ts(BinaryOp::Pow, a, b);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::Ge, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return binary_ts(BinaryOp::Ge, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::LogicalAnd, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary_tt(BinaryOp::LogicalOr, a, b); }
Tensor logical_not(const Tensor& x) { return unary("[logical_not]", UnaryOp::LogicalNot, x); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }

Tensor neg(const Tensor& x) { return unary("[neg]", UnaryOp::Neg, x); }

Tensor view_as_real(const Tensor& x) {
  ANVIL_CHECK(x.defined(), Error, "[view_as_real] undefined tensor");
  ANVIL_CHECK(is_complex(x.dtype()), DTypeError, "[view_as_real] view_as_real is only supported for complex tensors, got ",
              dtype_name(x.dtype()));
  Shape sizes = x.sizes(), strides = x.strides();
  for (int64_t& st : strides) st *= 2;
  sizes.push_back(2);
  strides.push_back(1);
  return Tensor(x.storage(), sizes, strides, x.storage_offset() * 2, kFloat32);
}
Tensor real(const Tensor& x) {
  ANVIL_CHECK(x.defined(), Error, "[real] undefined tensor");
  return is_complex(x.dtype()) ? view_as_real(x).select(-1, 0) : x;
}
Tensor imag(const Tensor& x) {
  ANVIL_CHECK(x.defined(), Error, "[imag] undefined tensor");
  ANVIL_CHECK(is_complex(x.dtype()), DTypeError, "[imag] imag is not implemented for tensors with non-complex dtypes.");
  return view_as_real(x).select(-1, 1);
}
Tensor conj_physical(const Tensor& x) {
  ANVIL_CHECK(x.defined(), Error, "[conj_physical] undefined tensor");
  return is_complex(x.dtype()) ? unary("[conj_physical]", UnaryOp::Conj, x) : x.clone();
}
Tensor abs(const Tensor& x) {
  ANVIL_CHECK(!(x.defined() && is_complex(x.dtype())), DTypeError, "[abs] not implemented for 'complex64'");
  return unary("[abs]", UnaryOp::Abs, x);
}
Tensor exp(const Tensor& x) { return unary("[exp]", UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return unary("[log]", UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return unary("[sqrt]", UnaryOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary("[rsqrt]", UnaryOp::Rsqrt, x); }
Tensor sigmoid(const Tensor& x) { return unary("[sigmoid]", UnaryOp::Sigmoid, x); }
Tensor silu(const Tensor& x) { return unary("[silu]", UnaryOp::Silu, x); }
Tensor tanh(const Tensor& x) { return unary("[tanh]", UnaryOp::Tanh, x); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  ANVIL_CHECK(approximate == "none" || approximate == "tanh", Error,
              "[gelu] approximate argument must be either none or tanh, got '", approximate, "'");
  return unary("[gelu]", approximate == "tanh" ? UnaryOp::GeluTanh : UnaryOp::Gelu, x);
}

// ---- where / clamp
namespace {
Tensor where_impl(const Tensor& cond, const Tensor& a, const Tensor* b, const Scalar* bs) {
  ANVIL_CHECK(cond.defined() && a.defined(), Error, "[where] undefined tensor");
  ANVIL_CHECK(cond.dtype() == kBool, DTypeError, "[where] where expected condition to be a boolean tensor, but got a tensor with dtype ",
              dtype_name(cond.dtype()));
  check_same_device("[where]", cond, a);
  DType t = as_op("[where]", [&] { return b ? result_type(a, *b) : result_type(a, *bs); });
  Shape shape = broadcast_for("[where]", cond.sizes(), a.sizes());
  if (b) {
    check_same_device("[where]", cond, *b);
    shape = broadcast_for("[where]", shape, b->sizes());
  }
  Tensor ac = a.to(t);
  Tensor out = empty_elementwise(shape, TensorOptions(t).device(a.device()), {&cond, &a});
  if (out.numel() == 0) return out;
  ElementwiseParams p;
  if (b) {
    Tensor bc = b->to(t);
    p = make_elementwise("[where]", out, {&cond, &ac, &bc});
    p.has_b = true;
  } else {
    p = make_elementwise("[where]", out, {&cond, &ac});
    p.scalar0 = to_scalar_arg(*bs);
  }
  p.dtype = t;
  ANVIL_KERNEL(out.device(), where, p);
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return where_impl(cond, a, &b, nullptr); }
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) { return where_impl(cond, a, nullptr, &b); }


Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  ANVIL_CHECK(x.defined(), Error, "[clamp] undefined tensor");
  ANVIL_CHECK(lo || hi, Error, "[clamp] At least one of 'min' or 'max' must not be None");
  PromotionState s;
  add_tensor(s, x);
  if (lo) add_scalar(s, *lo);
  if (hi) add_scalar(s, *hi);
  DType t = finish(s);
  dispatch_real_types(t, "[clamp]", [](auto) {});
  Tensor xc = x.to(t);
  Tensor out = empty_elementwise(x.sizes(), TensorOptions(t).device(x.device()), {&x});
  if (out.numel() == 0) return out;
  ElementwiseParams p = make_elementwise("[clamp]", out, {&xc});
  p.dtype = t;
  p.has_a = lo.has_value();
  p.has_b = hi.has_value();
  if (lo) p.scalar0 = to_scalar_arg(*lo);
  if (hi) p.scalar1 = to_scalar_arg(*hi);
  ANVIL_KERNEL(out.device(), clamp, p);
  return out;
}

Tensor heaviside(const Tensor& x, const Tensor& values) {
  const char* name = "[heaviside]";
  ANVIL_CHECK(x.defined() && values.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(!is_complex(x.dtype()) && !is_complex(values.dtype()), DTypeError, name,
              " heaviside is not yet implemented for complex tensors.");
  ANVIL_CHECK(x.dtype() == values.dtype(), DTypeError, name,
              " heaviside is not yet implemented for tensors with different dtypes.");
  return binary(BinaryOp::Heaviside, x, values, x.dtype(), 1);
}

// PyTorch's binary_float_op: the promoted dtype, integers to float32; its CPU and CUDA kernels
// dispatch float32 and float64 only.
Tensor special_laguerre_polynomial_l(const Tensor& x, const Tensor& n) {
  const char* name = "[special_laguerre_polynomial_l]";
  ANVIL_CHECK(x.defined() && n.defined(), Error, name, " undefined tensor");
  DType t = as_op(name, [&] { return result_type(x, n); });
  if (is_integral(t, true)) t = kFloat32;
  ANVIL_CHECK(t == kFloat32 || t == kFloat64, DTypeError, name, " not implemented for '", dtype_name(t), "'");
  return binary(BinaryOp::Laguerre, x, n, t, 1);
}
Tensor special_laguerre_polynomial_l(const Tensor& x, const Scalar& n) {
  ANVIL_CHECK(x.defined(), Error, "[special_laguerre_polynomial_l] undefined tensor");
  const DType t = as_op("[special_laguerre_polynomial_l]", [&] { return result_type(x, n); });
  return special_laguerre_polynomial_l(x, wrap(n, t, x.device()));
}
Tensor special_laguerre_polynomial_l(const Scalar& x, const Tensor& n) {
  ANVIL_CHECK(n.defined(), Error, "[special_laguerre_polynomial_l] undefined tensor");
  const DType t = as_op("[special_laguerre_polynomial_l]", [&] { return result_type(n, x); });
  return special_laguerre_polynomial_l(wrap(x, t, n.device()), n);
}

std::tuple<Tensor, Tensor> frexp(const Tensor& x) {
  const char* name = "[frexp]";
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(is_floating_point(x.dtype()), DTypeError, name,
              " torch.frexp() only supports floating-point dtypes, got ", dtype_name(x.dtype()));
  dispatch_float_types(x.dtype(), name, [](auto) {});
  Tensor mantissa = empty_elementwise(x.sizes(), TensorOptions(x.dtype()).device(x.device()), {&x});
  Tensor exponent = empty_elementwise(x.sizes(), TensorOptions(kInt32).device(x.device()), {&x});
  if (x.numel() == 0) return {mantissa, exponent};
  ElementwiseParams p = make_elementwise(name, mantissa, {&exponent, &x});
  p.dtype = x.dtype();
  p.out_dtype = x.dtype();
  ANVIL_KERNEL(x.device(), frexp, p);
  return {mantissa, exponent};
}

Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  // Tensor bounds: exactly torch's minimum(maximum(x, min), max), NaN-propagating.
  return as_op("[clamp]", [&] { return minimum(maximum(x, lo), hi); });
}

}  // namespace anvil
