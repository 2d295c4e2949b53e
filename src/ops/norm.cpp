// rms_norm, the fused residual add + rms_norm, and that followed by a projection (add_rms_norm_linear):
// validation, x as [rows, cols] with unit-stride cols.
#include <limits>
#include <optional>

#include "anvil/nn.h"
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

}  // namespace anvil
