// rms_norm, the fused residual add + rms_norm, and that followed by a projection (add_rms_norm_linear):
// validation, x as [rows, cols] with unit-stride cols. Layer and group norm with their backward
// (anvil/norm.h): compositions of the reduction and elementwise kernels in the compute dtype.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <utility>

#include "anvil/nn.h"
#include "anvil/norm.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/linear.h"
#include "core/kernels/norm.h"
#include "core/util.h"

namespace anvil {
namespace {

// torch.finfo(dtype).eps, rms_norm's default eps.
double default_eps(DType t) {
  return dispatch_float_types(t, "[rms_norm]", [](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half>) return 0x1p-10;
    else if constexpr (std::is_same_v<T, BFloat16>) return 0x1p-7;
    else return static_cast<double>(std::numeric_limits<T>::epsilon());
  });
}

// Checks x against normalized_shape and weight; returns cols = prod(normalized_shape).
int64_t check_rms_norm(const char* name, const Tensor& x, const Shape& normalized_shape, const Tensor& weight) {
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  dispatch_float_types(x.dtype(), name, [](auto) {});
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  bool ok = nd <= x.dim();
  for (int64_t i = 0; ok && i < nd; ++i) ok = x.size(x.dim() - nd + i) == normalized_shape[i];
  ANVIL_CHECK(ok, ShapeError, name, " Given normalized_shape=", shape_str(normalized_shape),
              ", expected input with shape [*, ", shape_str(normalized_shape).substr(1), ", but got input of size",
              shape_str(x.sizes()));
  if (weight.defined()) {
    check_same_device(name, x, weight);
    ANVIL_CHECK(weight.sizes() == normalized_shape, ShapeError, name,
                " Expected weight to be of same shape as normalized_shape, but got weight of shape ",
                shape_str(weight.sizes()), " and normalized_shape = ", shape_str(normalized_shape));
    ANVIL_CHECK(weight.dtype() == x.dtype() || weight.dtype() == kFloat32, DTypeError, name, " weight dtype ",
                dtype_name(weight.dtype()), " must be the input's (", dtype_name(x.dtype()), ") or float32");
  }
  return shape_numel(normalized_shape);
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const int64_t cols = check_rms_norm("[rms_norm]", x, normalized_shape, weight);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  const int64_t rows = x.numel() / cols;
  Tensor xr = as_rows(x, rows, cols);
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  RmsNormParams p;
  p.x = xr.raw_data_ptr();
  p.weight = w.defined() ? w.raw_data_ptr() : nullptr;
  p.out = out.raw_data_ptr();
  p.dtype = x.dtype();
  p.weight_dtype = w.defined() ? w.dtype() : x.dtype();
  p.rows = rows;
  p.cols = cols;
  p.stride_x_row = row_stride(xr);
  p.stride_out_row = cols;
  p.eps = eps.value_or(default_eps(x.dtype()));
  ANVIL_KERNEL(x.device(), rms_norm, p);
  return out;
}

std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                        const Tensor& weight, std::optional<double> eps) {
  const int64_t cols = check_rms_norm("[add_rms_norm]", x, normalized_shape, weight);
  ANVIL_CHECK(residual.defined(), Error, "[add_rms_norm] undefined tensor");
  check_same_device("[add_rms_norm]", x, residual);
  ANVIL_CHECK(residual.sizes() == x.sizes(), ShapeError, "[add_rms_norm] residual ", describe(residual),
              " must have the shape of x ", describe(x));
  ANVIL_CHECK(residual.dtype() == x.dtype(), DTypeError, "[add_rms_norm] residual ", describe(residual),
              " must have the dtype of x ", describe(x));
  const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
  Tensor out = empty(x.sizes(), opts), h = empty(x.sizes(), opts);
  if (out.numel() == 0) return {out, h};
  const int64_t rows = x.numel() / cols;
  Tensor xr = as_rows(x, rows, cols), rr = as_rows(residual, rows, cols);
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  RmsNormParams p;
  p.x = xr.raw_data_ptr();
  p.residual = rr.raw_data_ptr();
  p.weight = w.defined() ? w.raw_data_ptr() : nullptr;
  p.out = out.raw_data_ptr();
  p.residual_out = h.raw_data_ptr();
  p.dtype = x.dtype();
  p.weight_dtype = w.defined() ? w.dtype() : x.dtype();
  p.rows = rows;
  p.cols = cols;
  p.stride_x_row = row_stride(xr);
  p.stride_residual_row = row_stride(rr);
  p.stride_out_row = cols;
  p.stride_residual_out_row = cols;
  p.eps = eps.value_or(default_eps(x.dtype()));
  ANVIL_KERNEL(x.device(), rms_norm, p);
  return {out, h};
}

namespace {

// add_rms_norm_linear's fused-kernel params for arguments those params can hold (one row, no
// weight scales, residual and weights of x's dtype and device, unit column strides; the rows
// copied to unit stride), else none and the op composes. y and sum_out stay unset until the op
// allocates them.
struct FusedCall {
  AddRmsNormLinearParams p;
  Tensor x, residual, norm_weight;  // what p points into
};

std::optional<FusedCall> fused_call(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                                    std::optional<double> eps, const Tensor& weight, const Tensor& weight_scale) {
  const int64_t k = x.size(-1);
  const DType t = x.dtype();
  const bool holds = !weight_scale.defined() && is_floating_point(t) && !is_float8(t) && k > 0 && x.numel() == k &&
                     residual.sizes() == x.sizes() && residual.dtype() == t && residual.device() == x.device() &&
                     weight.dim() == 2 && weight.size(1) == k && weight.size(0) > 0 && weight.dtype() == t &&
                     weight.device() == x.device() && (k == 1 || weight.stride(1) == 1) &&
                     (!norm_weight.defined() || (norm_weight.dtype() == t && norm_weight.dim() == 1 &&
                                                 norm_weight.size(0) == k && norm_weight.device() == x.device()));
  if (!holds) return std::nullopt;
  FusedCall c;
  c.x = x.contiguous();
  c.residual = residual.contiguous();
  if (norm_weight.defined()) c.norm_weight = norm_weight.contiguous();
  GemvParams& g = c.p.gemv;
  g.x = c.x.raw_data_ptr();
  g.w = weight.raw_data_ptr();
  g.dtype = t;
  g.m = 1;
  g.n = weight.size(0);
  g.k = k;
  g.stride_x_row = k;
  g.stride_w_row = weight.size(0) == 1 ? k : weight.stride(0);
  g.stride_y_row = g.n;
  c.p.residual = c.residual.raw_data_ptr();
  c.p.norm_weight = c.norm_weight.defined() ? c.norm_weight.raw_data_ptr() : nullptr;
  c.p.eps = eps.value_or(default_eps(t));
  return c;
}

void check_add_rms_norm_linear(const char* op, const Tensor& x, const Tensor& residual, const Tensor& weight,
                               const Tensor& weight_scale, const Shape& block) {
  ANVIL_CHECK(x.defined() && residual.defined() && weight.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(block.empty() || weight_scale.defined(), Error, op, " block ", shape_str(block),
              " needs its weight_scale");
  ANVIL_CHECK(x.dim() >= 1, ShapeError, op, " x must have at least one dim, got ", describe(x));
}

}  // namespace

FusedPlan add_rms_norm_linear_plan(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                                   std::optional<double> eps, const Tensor& weight, const Tensor& weight_scale,
                                   const Shape& block) {
  check_add_rms_norm_linear("[add_rms_norm_linear_plan]", x, residual, weight, weight_scale, block);
  const std::optional<FusedCall> c = fused_call(x, residual, norm_weight, eps, weight, weight_scale);
  return c ? ANVIL_PLAN(x.device(), add_rms_norm_linear, c->p) : FusedPlan::Composed;
}

std::tuple<Tensor, Tensor> add_rms_norm_linear(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                                               std::optional<double> eps, const Tensor& weight, const Tensor& weight_scale,
                                               const Shape& block) {
  const char* op = "[add_rms_norm_linear]";
  check_add_rms_norm_linear(op, x, residual, weight, weight_scale, block);
  // The plan is asked with the outputs unset (they are allocated here, aligned), as the query does.
  std::optional<FusedCall> c = fused_call(x, residual, norm_weight, eps, weight, weight_scale);
  if (c && ANVIL_PLAN(x.device(), add_rms_norm_linear, c->p) == FusedPlan::Fused) {
    const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
    Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
    out_shape.push_back(weight.size(0));
    Tensor y = empty(out_shape, opts), sum = empty(x.sizes(), opts);
    c->p.gemv.y = y.raw_data_ptr();
    c->p.sum_out = sum.raw_data_ptr();
    ANVIL_KERNEL(x.device(), add_rms_norm_linear, c->p);
    return {y, sum};
  }
  // The composition.
  return as_op(op, [&]() -> std::tuple<Tensor, Tensor> {
    auto [h, sum] = add_rms_norm(x, residual, {x.size(-1)}, norm_weight, eps);
    Tensor y = weight_scale.defined() ? scaled_linear(h, weight, weight_scale, {}, block) : linear(h, weight);
    return {y, sum};
  });
}

// ---- layer / group norm

namespace {

// float32 for the half types, else the dtype (float32 / float64); other dtypes refused.
DType norm_compute_dtype(const char* name, const Tensor& x) {
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(is_floating_point(x.dtype()) && !is_float8(x.dtype()), DTypeError, name, " expected a floating input, got ",
              describe(x));
  return x.dtype() == kFloat64 ? kFloat64 : kFloat32;
}

// x as [rows, n] statistics over dim 1: (xhat, mean [rows, 1], rstd [rows, 1]) in the compute dtype.
struct Normalized {
  Tensor xhat, mean, rstd;
};
Normalized normalize_rows(const Tensor& x2, double eps) {
  auto [var, mean] = var_mean(x2, {1}, 0, true);
  const Tensor rstd = rsqrt(add(var, eps));
  return {mul(sub(x2, mean), rstd), mean, rstd};
}

// d/dx of xhat rows given dxhat: rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
Tensor normalize_rows_backward(const Tensor& dxhat, const Tensor& xhat, const Tensor& rstd) {
  const Tensor m1 = mean(dxhat, {1}, true), m2 = mean(mul(dxhat, xhat), {1}, true);
  return mul(rstd, sub(sub(dxhat, m1), mul(xhat, m2)));
}

void check_affine(const char* name, const Tensor& t, const Shape& want, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  check_same_device(name, x, t);
  ANVIL_CHECK(t.sizes() == want, ShapeError, name, " Expected ", what, " to be of same shape as normalized_shape, but got ",
              what, " of shape ", shape_str(t.sizes()), " and normalized_shape = ", shape_str(want));
}

int64_t layer_norm_axis(const char* name, const Tensor& x, const Shape& normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size()), axis = x.dim() - k;
  ANVIL_CHECK(k >= 1, ShapeError, name, " Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = ",
              shape_str(normalized_shape));
  bool ok = axis >= 0;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(axis + i) == normalized_shape[static_cast<size_t>(i)];
  ANVIL_CHECK(ok, ShapeError, name, " Given normalized_shape=", shape_str(normalized_shape),
              ", expected input with shape [*", k > 0 ? ", " : "", shape_str(normalized_shape).substr(1),
              ", but got input of size", shape_str(x.sizes()));
  return axis;
}

Shape stats_shape(const Tensor& x, int64_t axis) {
  Shape s(x.sizes().begin(), x.sizes().begin() + axis);
  s.resize(static_cast<size_t>(x.dim()), 1);
  return s;
}

}  // namespace

std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                             const Tensor& weight, std::optional<double> eps, std::array<bool, 2> output_mask) {
  const char* name = "[rms_norm_backward]";
  const DType ct = norm_compute_dtype(name, x);
  layer_norm_axis(name, x, normalized_shape);
  check_affine(name, weight, normalized_shape, "weight", x);
  ANVIL_CHECK(grad_out.defined() && grad_out.sizes() == x.sizes(), ShapeError, name, " grad_out ", describe(grad_out),
              " does not match input ", describe(x));
  check_same_device(name, x, grad_out);
  const double e = eps ? *eps : default_eps(x.dtype());
  return as_op(name, [&] {
    const int64_t n = shape_numel(normalized_shape), rows = n == 0 ? 0 : x.numel() / n;
    const Tensor x2 = x.to(ct).reshape({rows, n}), g2 = grad_out.to(ct).reshape({rows, n});
    const Tensor r = rsqrt(add(mean(mul(x2, x2), {1}, true), e));
    std::tuple<Tensor, Tensor> out;
    if (output_mask[0]) {
      const Tensor dy = weight.defined() ? mul(g2, weight.to(ct).reshape({1, n})) : g2;
      const Tensor m = mean(mul(dy, x2), {1}, true);
      std::get<0>(out) = mul(r, sub(dy, mul(mul(x2, mul(r, r)), m))).reshape(x.sizes()).to(x.dtype());
    }
    if (output_mask[1] && weight.defined())
      std::get<1>(out) = sum(mul(mul(g2, x2), r), {0}).reshape(normalized_shape).to(weight.dtype());
    return out;
  });
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input, const Shape& normalized_shape,
                                                     const Tensor& weight, const Tensor& bias, double eps) {
  const char* name = "[native_layer_norm]";
  const DType ct = norm_compute_dtype(name, input);
  const int64_t axis = layer_norm_axis(name, input, normalized_shape);
  check_affine(name, weight, normalized_shape, "weight", input);
  check_affine(name, bias, normalized_shape, "bias", input);
  return as_op(name, [&] {
    const int64_t n = shape_numel(normalized_shape), rows = n == 0 ? 0 : input.numel() / n;
    const Normalized z = normalize_rows(input.to(ct).reshape({rows, n}), eps);
    Tensor y = z.xhat.reshape(input.sizes());
    if (weight.defined()) y = mul(y, weight.to(ct));
    if (bias.defined()) y = add(y, bias.to(ct));
    const Shape ss = stats_shape(input, axis);
    return std::tuple<Tensor, Tensor, Tensor>{y.to(input.dtype()), z.mean.reshape(ss).to(input.dtype()),
                                              z.rstd.reshape(ss).to(input.dtype())};
  });
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  return as_op("[layer_norm]", [&] { return std::get<0>(native_layer_norm(input, normalized_shape, weight, bias, eps)); });
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                              const Shape& normalized_shape, const Tensor& mean_in,
                                                              const Tensor& rstd_in, const Tensor& weight,
                                                              const Tensor& bias, std::array<bool, 3> output_mask) {
  const char* name = "[native_layer_norm_backward]";
  const DType ct = norm_compute_dtype(name, input);
  layer_norm_axis(name, input, normalized_shape);
  check_affine(name, weight, normalized_shape, "weight", input);
  check_affine(name, bias, normalized_shape, "bias", input);
  ANVIL_CHECK(grad_out.defined() && mean_in.defined() && rstd_in.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(grad_out.sizes() == input.sizes(), ShapeError, name, " grad_out ", describe(grad_out),
              " does not match input ", describe(input));
  return as_op(name, [&] {
    const int64_t n = shape_numel(normalized_shape), rows = n == 0 ? 0 : input.numel() / n;
    const Tensor x2 = input.to(ct).reshape({rows, n}), g2 = grad_out.to(ct).reshape({rows, n});
    const Tensor mean = mean_in.to(ct).reshape({rows, 1}), rstd = rstd_in.to(ct).reshape({rows, 1});
    const Tensor xhat = mul(sub(x2, mean), rstd);
    std::tuple<Tensor, Tensor, Tensor> r;
    if (output_mask[0]) {
      const Tensor dxhat = weight.defined() ? mul(g2, weight.to(ct).reshape({1, n})) : g2;
      std::get<0>(r) = normalize_rows_backward(dxhat, xhat, rstd).reshape(input.sizes()).to(input.dtype());
    }
    if (output_mask[1] && weight.defined())
      std::get<1>(r) = sum(mul(g2, xhat), {0}).reshape(normalized_shape).to(weight.dtype());
    if (output_mask[2] && bias.defined()) std::get<2>(r) = sum(g2, {0}).reshape(normalized_shape).to(bias.dtype());
    return r;
  });
}

namespace {

void check_group_norm(const char* name, const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t n, int64_t c,
                      int64_t hxw, int64_t group) {
  ANVIL_CHECK(x.dim() >= 2, ShapeError, name, " Expected at least 2 dimensions for input tensor but received ", x.dim());
  ANVIL_CHECK(group > 0 && c % group == 0, ShapeError, name, " Expected number of channels in input to be divisible by ",
              "num_groups, but got input of shape ", shape_str(x.sizes()), " and num_groups=", group);
  ANVIL_CHECK(x.size(0) == n && x.size(1) == c && x.numel() == n * c * hxw, ShapeError, name, " input ", describe(x),
              " does not match N=", n, ", C=", c, ", HxW=", hxw);
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    check_same_device(name, x, *t);
    ANVIL_CHECK(t->dim() == 1 && t->numel() == c, ShapeError, name, " Expected ", t == &weight ? "weight" : "bias",
                " to be a vector of size equal to the number of channels in input, but got ",
                t == &weight ? "weight" : "bias", " of shape ", shape_str(t->sizes()), " and input of shape ",
                shape_str(x.sizes()));
  }
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> native_group_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                                     int64_t n, int64_t c, int64_t hxw, int64_t group, double eps) {
  const char* name = "[native_group_norm]";
  const DType ct = norm_compute_dtype(name, input);
  check_group_norm(name, input, weight, bias, n, c, hxw, group);
  return as_op(name, [&] {
    GroupNormParams gp;  // the plan reads only the sizes and dtype
    gp.dtype = input.dtype();
    gp.n = n;
    gp.c = c;
    gp.hxw = hxw;
    gp.group = group;
    gp.eps = eps;
    if (input.numel() > 0 && ANVIL_PLAN(input.device(), group_norm, gp) == FusedPlan::Fused) {
      const Tensor x = input.contiguous();
      const Tensor w = weight.defined() ? weight.to(ct).contiguous() : Tensor();
      const Tensor b = bias.defined() ? bias.to(ct).contiguous() : Tensor();
      gp.x = x.raw_data_ptr();
      gp.weight = w.defined() ? w.raw_data_ptr() : nullptr;
      gp.bias = b.defined() ? b.raw_data_ptr() : nullptr;
      const TensorOptions o = TensorOptions(input.dtype()).device(input.device());
      Tensor y = empty(input.sizes(), o), mean = empty({n, group}, o), rstd = empty({n, group}, o);
      gp.y = y.raw_data_ptr();
      gp.mean = mean.raw_data_ptr();
      gp.rstd = rstd.raw_data_ptr();
      ANVIL_KERNEL(input.device(), group_norm, gp);
      return std::tuple<Tensor, Tensor, Tensor>{y, mean, rstd};
    }
    // The composition (the reference the fused kernels follow; no backend plans it today).
    const Normalized z = normalize_rows(input.to(ct).reshape({n * group, (c / group) * hxw}), eps);
    Tensor y = z.xhat.reshape({n, c, hxw});
    if (weight.defined()) y = mul(y, weight.to(ct).reshape({1, c, 1}));
    if (bias.defined()) y = add(y, bias.to(ct).reshape({1, c, 1}));
    return std::tuple<Tensor, Tensor, Tensor>{y.reshape(input.sizes()).to(input.dtype()),
                                              z.mean.reshape({n, group}).to(input.dtype()),
                                              z.rstd.reshape({n, group}).to(input.dtype())};
  });
}

FusedPlan group_norm_plan(const Tensor& input, int64_t num_groups) {
  ANVIL_CHECK(input.defined() && input.dim() >= 2, ShapeError, "[group_norm_plan] expected an [N, C, *] input, got ",
              describe(input));
  GroupNormParams gp;
  gp.dtype = input.dtype();
  gp.n = input.size(0);
  gp.c = input.size(1);
  gp.hxw = gp.n * gp.c == 0 ? 0 : input.numel() / (gp.n * gp.c);
  gp.group = num_groups;
  return ANVIL_PLAN(input.device(), group_norm, gp);
}

namespace {

// input as [outer, c, inner] around dim, validated.
L2NormalizeParams normalize_params(const char* name, const Tensor& input, int64_t dim, double eps) {
  ANVIL_CHECK(input.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64 || input.dtype() == kBFloat16 ||
                  input.dtype() == kFloat16,
              DTypeError, name, " expected a float16, bfloat16, float32 or float64 input, got ", describe(input));
  const int64_t d = wrap_dim(dim, input.dim(), name);
  L2NormalizeParams p;
  p.dtype = input.dtype();
  p.outer = 1;
  p.inner = 1;
  for (int64_t i = 0; i < input.dim(); ++i) {
    if (i < d) p.outer *= input.size(i);
    if (i > d) p.inner *= input.size(i);
  }
  p.c = input.dim() == 0 ? 1 : input.size(d);
  p.eps = eps;
  return p;
}

}  // namespace

FusedPlan normalize_plan(const Tensor& input, double p, int64_t dim) {
  const L2NormalizeParams lp = normalize_params("[normalize_plan]", input, dim, 0);
  return p == 2.0 ? ANVIL_PLAN(input.device(), l2_normalize, lp) : FusedPlan::Composed;
}

Tensor normalize(const Tensor& input, double p, int64_t dim, double eps) {
  const char* name = "[normalize]";
  L2NormalizeParams lp = normalize_params(name, input, dim, eps);
  if (p == 2.0 && input.numel() > 0 && ANVIL_PLAN(input.device(), l2_normalize, lp) == FusedPlan::Fused) {
    const Tensor x = input.contiguous();
    Tensor y = empty(input.sizes(), TensorOptions(input.dtype()).device(input.device()));
    lp.x = x.raw_data_ptr();
    lp.y = y.raw_data_ptr();
    ANVIL_KERNEL(input.device(), l2_normalize, lp);
    return y;
  }
  return as_op(name, [&] {  // the composition, in the accumulation dtype
    const Tensor x = input.to(input.dtype() == kFloat64 ? kFloat64 : kFloat32);
    const int64_t d = input.dim() == 0 ? 0 : wrap_dim(dim, input.dim(), name);
    const Shape dims = input.dim() == 0 ? Shape{} : Shape{d};
    Tensor n;
    if (p == 2.0) n = sqrt(sum(mul(x, x), dims, true));
    else if (p == 1.0) n = sum(abs(x), dims, true);
    else if (std::isinf(p)) n = p > 0 ? amax(abs(x), dims, true) : amin(abs(x), dims, true);
    else if (p == 0.0) n = sum(ne(x, Scalar(0)).to(x.dtype()), dims, true);
    else n = pow(sum(pow(abs(x), Scalar(p)), dims, true), Scalar(1.0 / p));
    return div(x, clamp(n, Scalar(eps))).to(input.dtype());
  });
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const char* name = "[group_norm]";
  ANVIL_CHECK(input.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(input.dim() >= 2, ShapeError, name, " Expected at least 2 dimensions for input tensor but received ",
              input.dim());
  const int64_t n = input.size(0), c = input.size(1), hxw = c * n == 0 ? 0 : input.numel() / (n * c);
  return as_op(name, [&] { return std::get<0>(native_group_norm(input, weight, bias, n, c, hxw, num_groups, eps)); });
}

std::tuple<Tensor, Tensor, Tensor> native_group_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                              const Tensor& mean_in, const Tensor& rstd_in,
                                                              const Tensor& weight, int64_t n, int64_t c, int64_t hxw,
                                                              int64_t group, std::array<bool, 3> output_mask) {
  const char* name = "[native_group_norm_backward]";
  const DType ct = norm_compute_dtype(name, input);
  check_group_norm(name, input, weight, Tensor(), n, c, hxw, group);
  ANVIL_CHECK(grad_out.defined() && mean_in.defined() && rstd_in.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(grad_out.sizes() == input.sizes(), ShapeError, name, " grad_out ", describe(grad_out),
              " does not match input ", describe(input));
  return as_op(name, [&] {
    const int64_t rows = n * group, m = (c / group) * hxw;
    const Tensor x3 = input.to(ct).reshape({n, c, hxw}), g3 = grad_out.to(ct).reshape({n, c, hxw});
    const Tensor mean = mean_in.to(ct).reshape({rows, 1}), rstd = rstd_in.to(ct).reshape({rows, 1});
    const Tensor xhat = mul(sub(x3.reshape({rows, m}), mean), rstd);
    std::tuple<Tensor, Tensor, Tensor> r;
    if (output_mask[0]) {
      const Tensor dy = weight.defined() ? mul(g3, weight.to(ct).reshape({1, c, 1})) : g3;
      std::get<0>(r) = normalize_rows_backward(dy.reshape({rows, m}), xhat, rstd).reshape(input.sizes()).to(input.dtype());
    }
    if (output_mask[1])
      std::get<1>(r) = sum(mul(g3, xhat.reshape({n, c, hxw})), {0, 2}).to(weight.defined() ? weight.dtype() : input.dtype());
    if (output_mask[2]) std::get<2>(r) = sum(g3, {0, 2}).to(weight.defined() ? weight.dtype() : input.dtype());
    return r;
  });
}

// ---- batch norm

namespace {

bool channels_last_input(const Tensor& x) { return x.suggest_memory_format() != MemoryFormat::Contiguous; }

// input [N, C, *] as [A, C, B]: [N, C, prod(*)] for a contiguous layout, [N * prod(*), C, 1] for
// channels-last (a view of its memory), so an elementwise result in [A, C, B] order is already
// in the input's layout (from_channel_rows gives it the input's shape back).
Tensor channel_rows(const Tensor& x, bool cl) {
  const int64_t n = x.size(0), c = x.size(1);
  if (!cl) return x.reshape({n, c, n * c == 0 ? 0 : x.numel() / (n * c)});
  Shape perm{0};
  for (int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return x.permute(perm).reshape({c == 0 ? 0 : x.numel() / c, c, 1});
}

Tensor from_channel_rows(const Tensor& y3, const Tensor& x, bool cl) {
  if (!cl) return y3.reshape(x.sizes());
  Shape s{x.size(0)}, perm{0, x.dim() - 1};
  for (int64_t d = 2; d < x.dim(); ++d) s.push_back(x.size(d));
  s.push_back(x.size(1));
  for (int64_t d = 1; d < x.dim() - 1; ++d) perm.push_back(d);
  return y3.reshape(s).permute(perm);
}

// Shapes, devices and dtypes of batch norm's per-channel tensors; returns the dtype of
// save_mean / save_invstd (float32 when a float32 parameter meets a half input, as PyTorch's CPU).
DType check_batch_norm(const char* name, const Tensor& x, std::initializer_list<std::pair<const Tensor*, const char*>> params) {
  ANVIL_CHECK(x.dim() >= 2, ShapeError, name, " Expected at least 2 dimensions for input (N, C, *), but got input of size ",
              shape_str(x.sizes()));
  const bool half = x.dtype() == kFloat16 || x.dtype() == kBFloat16;
  bool mixed = false;
  for (const auto& [t, what] : params) {
    if (!t->defined()) continue;
    check_same_device(name, x, *t);
    ANVIL_CHECK(t->numel() == x.size(1), ShapeError, name, " ", what, " should contain ", x.size(1), " elements not ",
                t->numel());
    ANVIL_CHECK(t->dtype() == x.dtype() || (half && t->dtype() == kFloat32), DTypeError, name, " Expected ", what,
                " to have the input's dtype (", dtype_name(x.dtype()), ") or float32 for a float16 / bfloat16 input, got ",
                dtype_name(t->dtype()));
    mixed |= t->dtype() != x.dtype();
  }
  return mixed ? kFloat32 : x.dtype();
}

// running <- (1 - m) * running + m * batch in float64, m the momentum or, when `factor` is
// defined (a float64 scalar tensor), its value; rounded once to running's dtype.
void update_running(const Tensor& running, const Tensor& batch, double momentum, const Tensor& factor) {
  if (!running.defined()) return;
  const Tensor b = batch.reshape({running.numel()}).to(kFloat64), r = running.reshape({running.numel()}).to(kFloat64);
  const Tensor upd = factor.defined() ? add(mul(b, factor), mul(r, add(neg(factor), 1.0)))
                                      : add(mul(b, momentum), mul(r, 1.0 - momentum));
  Tensor(running).copy_(upd.reshape(running.sizes()));  // a handle on the same storage
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_impl(const char* name, const Tensor& input, const Tensor& weight,
                                                   const Tensor& bias, const Tensor& running_mean,
                                                   const Tensor& running_var, bool training, double momentum,
                                                   const Tensor& factor, double eps) {
  const DType ct = norm_compute_dtype(name, input);
  const DType st = check_batch_norm(name, input, {{&weight, "weight"}, {&bias, "bias"}, {&running_mean, "running_mean"},
                                                  {&running_var, "running_var"}});
  ANVIL_CHECK(training || (running_mean.defined() && running_var.defined()), Error, name,
              " running_mean and running_var must be defined in evaluation mode");
  return as_op(name, [&] {
    const int64_t c = input.size(1), per_channel = c == 0 ? 0 : input.numel() / c;
    const TensorOptions so = TensorOptions(st).device(input.device());
    const bool cl = channels_last_input(input);
    if (input.numel() == 0)  // as PyTorch: running statistics untouched
      return std::tuple<Tensor, Tensor, Tensor>{input.clone(), zeros({training ? c : 0}, so), zeros({training ? c : 0}, so)};
    BatchNormParams bp;  // the plan reads only the sizes and dtype
    bp.dtype = input.dtype();
    bp.c = c;
    bp.a = cl ? per_channel : input.size(0);
    bp.b = cl ? 1 : per_channel / std::max<int64_t>(1, input.size(0));
    bp.eps = eps;
    if (training && ANVIL_PLAN(input.device(), batch_norm_train, bp) == FusedPlan::Fused) {
      const MemoryFormat fmt = cl ? input.suggest_memory_format() : MemoryFormat::Contiguous;
      const Tensor x = input.contiguous(fmt);
      const Tensor w = weight.defined() ? weight.to(ct).contiguous() : Tensor();
      const Tensor b = bias.defined() ? bias.to(ct).contiguous() : Tensor();
      const TensorOptions co = TensorOptions(ct).device(input.device());
      Tensor y = empty(input.sizes(), TensorOptions(input.dtype()).device(input.device()), fmt);
      Tensor mean = empty({c}, co), var = empty({c}, co), save_mean = empty({c}, so), save_invstd = empty({c}, so);
      bp.x = x.raw_data_ptr();
      bp.weight = w.defined() ? w.raw_data_ptr() : nullptr;
      bp.bias = b.defined() ? b.raw_data_ptr() : nullptr;
      bp.y = y.raw_data_ptr();
      bp.mean = mean.raw_data_ptr();
      bp.var = var.raw_data_ptr();
      bp.save_mean = save_mean.raw_data_ptr();
      bp.save_invstd = save_invstd.raw_data_ptr();
      bp.save_dtype = st;
      // The kernel updates contiguous running statistics itself; others after it, as the composition does.
      const bool mean_in_kernel = running_mean.defined() && running_mean.is_contiguous();
      const bool var_in_kernel = running_var.defined() && running_var.is_contiguous();
      const Tensor f = factor.defined() ? factor.to(kFloat64).contiguous() : Tensor();
      bp.running_mean = mean_in_kernel ? running_mean.raw_data_ptr() : nullptr;
      bp.running_var = var_in_kernel ? running_var.raw_data_ptr() : nullptr;
      bp.running_mean_dtype = mean_in_kernel ? running_mean.dtype() : kFloat32;
      bp.running_var_dtype = var_in_kernel ? running_var.dtype() : kFloat32;
      bp.factor = f.defined() ? static_cast<const double*>(f.raw_data_ptr()) : nullptr;
      bp.momentum = momentum;
      bp.unbiased = static_cast<double>(per_channel) / static_cast<double>(per_channel - 1);
      ANVIL_KERNEL(input.device(), batch_norm_train, bp);
      if (!mean_in_kernel) update_running(running_mean, mean, momentum, factor);
      if (!var_in_kernel) update_running(running_var, mul(var.to(kFloat64), bp.unbiased), momentum, factor);
      return std::tuple<Tensor, Tensor, Tensor>{y, save_mean, save_invstd};
    }
    // The composition (evaluation mode, and the reference of the fused training forward).
    const Tensor x3 = channel_rows(input, cl).to(ct);
    Tensor mean, invstd, save_mean, save_invstd;
    if (training) {
      const auto [var, m] = var_mean(x3, {0, 2}, 0, true);
      mean = m;
      invstd = rsqrt(add(var, eps));
      save_mean = mean.reshape({c}).to(st);
      save_invstd = invstd.reshape({c}).to(st);
      update_running(running_mean, mean, momentum, factor);
      update_running(running_var, mul(var.to(kFloat64), static_cast<double>(per_channel) / static_cast<double>(per_channel - 1)),
                     momentum, factor);
    } else {
      mean = running_mean.to(ct).reshape({1, c, 1});
      invstd = rsqrt(add(running_var.to(ct).reshape({1, c, 1}), eps));
      save_mean = empty({0}, so);
      save_invstd = empty({0}, so);
    }
    Tensor y = mul(sub(x3, mean), invstd);
    if (weight.defined()) y = mul(y, weight.to(ct).reshape({1, c, 1}));
    if (bias.defined()) y = add(y, bias.to(ct).reshape({1, c, 1}));
    return std::tuple<Tensor, Tensor, Tensor>{from_channel_rows(y.to(input.dtype()), input, cl), save_mean, save_invstd};
  });
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> native_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                                     const Tensor& running_mean, const Tensor& running_var, bool training,
                                                     double momentum, double eps) {
  return batch_norm_impl("[native_batch_norm]", input, weight, bias, running_mean, running_var, training, momentum,
                         Tensor(), eps);
}

Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, std::optional<double> momentum, double eps,
                  const Tensor& num_batches_tracked) {
  const char* name = "[batch_norm]";
  ANVIL_CHECK(input.defined(), Error, name, " undefined tensor");
  if (training) {
    int64_t per_channel = 1;
    for (int64_t d = 0; d < input.dim(); ++d)
      if (d != 1) per_channel *= input.size(d);
    ANVIL_CHECK(input.dim() < 2 || per_channel != 1, ShapeError, name,
                " Expected more than 1 value per channel when training, got input size ", shape_str(input.sizes()));
  }
  ANVIL_CHECK(momentum || num_batches_tracked.defined() || !training, Error, name,
              " momentum = None (the cumulative average) needs num_batches_tracked");
  Tensor factor;
  if (num_batches_tracked.defined() && training) {
    check_same_device(name, input, num_batches_tracked);
    ANVIL_CHECK(num_batches_tracked.numel() == 1 && is_integral(num_batches_tracked.dtype()), ShapeError, name,
                " num_batches_tracked must be one integer, got ", describe(num_batches_tracked));
    Tensor(num_batches_tracked).copy_(add(num_batches_tracked, 1));
    if (!momentum) factor = div(ones({}, TensorOptions(kFloat64).device(input.device())),
                                num_batches_tracked.reshape({}).to(kFloat64));
  }
  return std::get<0>(batch_norm_impl(name, input, weight, bias, running_mean, running_var, training,
                                     momentum.value_or(0.0), factor, eps));
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                              const Tensor& weight, const Tensor& running_mean,
                                                              const Tensor& running_var, const Tensor& save_mean,
                                                              const Tensor& save_invstd, bool train, double eps,
                                                              std::array<bool, 3> output_mask) {
  const char* name = "[native_batch_norm_backward]";
  const DType ct = norm_compute_dtype(name, input);
  check_batch_norm(name, input, {{&weight, "weight"}, {&running_mean, "running_mean"}, {&running_var, "running_var"}});
  ANVIL_CHECK(grad_out.defined() && grad_out.sizes() == input.sizes(), ShapeError, name, " grad_out ", describe(grad_out),
              " does not match input ", describe(input));
  check_same_device(name, input, grad_out);
  const Tensor& m_in = train ? save_mean : running_mean;
  const Tensor& v_in = train ? save_invstd : running_var;
  ANVIL_CHECK(m_in.defined() && v_in.defined(), Error, name,
              train ? " training needs save_mean and save_invstd" : " eval needs running_mean and running_var");
  ANVIL_CHECK(m_in.numel() == input.size(1) && v_in.numel() == input.size(1), ShapeError, name, " statistics ",
              describe(m_in), " and ", describe(v_in), " should contain ", input.size(1), " elements");
  return as_op(name, [&] {
    const int64_t c = input.size(1);
    const DType wt = weight.defined() ? weight.dtype() : input.dtype();
    const TensorOptions wo = TensorOptions(wt).device(input.device());
    std::tuple<Tensor, Tensor, Tensor> r;
    if (input.numel() == 0) {
      if (output_mask[0]) std::get<0>(r) = input.clone();
      if (output_mask[1]) std::get<1>(r) = zeros({c}, wo);
      if (output_mask[2]) std::get<2>(r) = zeros({c}, wo);
      return r;
    }
    const bool cl = channels_last_input(input);
    const Tensor x3 = channel_rows(input, cl).to(ct), g3 = channel_rows(grad_out, cl).to(ct);
    const Tensor mu = m_in.to(ct).reshape({1, c, 1});
    const Tensor invstd = train ? save_invstd.to(ct).reshape({1, c, 1}) : rsqrt(add(running_var.to(ct).reshape({1, c, 1}), eps));
    const Tensor xhat = mul(sub(x3, mu), invstd);
    if (output_mask[0]) {
      const Tensor w = weight.defined() ? weight.to(ct).reshape({1, c, 1}) : Tensor();
      Tensor gi;
      if (train) {
        const Tensor dxhat = w.defined() ? mul(g3, w) : g3;
        const Tensor m1 = mean(dxhat, {0, 2}, true), m2 = mean(mul(dxhat, xhat), {0, 2}, true);
        gi = mul(invstd, sub(sub(dxhat, m1), mul(xhat, m2)));
      } else {
        gi = mul(g3, w.defined() ? mul(invstd, w) : invstd);
      }
      std::get<0>(r) = from_channel_rows(gi.to(input.dtype()), input, cl);
    }
    if (output_mask[1]) std::get<1>(r) = sum(mul(g3, xhat), {0, 2}).to(wt);
    if (output_mask[2]) std::get<2>(r) = sum(g3, {0, 2}).to(wt);
    return r;
  });
}

}  // namespace anvil
