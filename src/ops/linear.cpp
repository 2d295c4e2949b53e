// linear: validation, leading dims flattened to rows, GEMV (few rows, bias fused) or GEMM.
#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/linear.h"
#include "core/util.h"

namespace anvil {
namespace {


bool can_use_gemv(int64_t m, const Tensor& weight) { return m <= kGemvMaxRows && (weight.size(1) <= 1 || weight.stride(1) == 1); }

bool can_fuse_bias(const Tensor& bias, int64_t n) { return bias.defined() && bias.dim() == 1 && bias.size(0) == n; }

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight_in, const Tensor& bias) {
  ANVIL_CHECK(input.defined() && weight_in.defined(), Error, "[linear] undefined tensor");
  ANVIL_CHECK(input.dim() >= 1, ShapeError, "[linear] input must have at least one dim, got ", describe(input));
  ANVIL_CHECK(weight_in.dim() == 1 || weight_in.dim() == 2, ShapeError, "[linear] weight must be 1-D or 2-D, got ",
              describe(weight_in));
  check_same_device("[linear]", input, weight_in);
  ANVIL_CHECK(input.dtype() == weight_in.dtype(), DTypeError,
              "[linear] expected input and weight to have the same dtype, but got: ", dtype_name(input.dtype()), " != ",
              dtype_name(weight_in.dtype()));
  dispatch_float_types(input.dtype(), "[linear]", [](auto) {});
  if (bias.defined()) {
    check_same_device("[linear]", input, bias);
    ANVIL_CHECK(bias.dtype() == input.dtype(), DTypeError, "[linear] expected bias to have dtype ",
                dtype_name(input.dtype()), ", but got ", dtype_name(bias.dtype()));
  }
  if (weight_in.dim() == 1) {  // torch: the last output dim is dropped
    Tensor y = linear(input, weight_in.unsqueeze(0), {}).squeeze(-1);
    return bias.defined() ? as_op("[linear]", [&] { return add(y, bias); }) : y;
  }
  const Tensor& weight = weight_in;
  const int64_t k = input.size(-1), n = weight.size(0);
  const int64_t m = k == 0 ? shape_numel(Shape(input.sizes().begin(), input.sizes().end() - 1)) : input.numel() / k;
  ANVIL_CHECK(weight.size(1) == k, ShapeError, "[linear] input and weight.T shapes cannot be multiplied (", m, "x", k,
              " and ", weight.size(1), "x", n, ")");
  Shape out_shape(input.sizes().begin(), input.sizes().end() - 1);
  out_shape.push_back(n);
  if (bias.defined()) {
    as_op("[linear]", [&] { return broadcast_shapes(bias.sizes(), out_shape); });
    ANVIL_CHECK(broadcast_shapes(bias.sizes(), out_shape) == out_shape, ShapeError, "[linear] bias of shape ",
                shape_str(bias.sizes()), " does not broadcast to the output shape ", shape_str(out_shape));
  }

  const TensorOptions opts = TensorOptions(input.dtype()).device(input.device());
  if (m == 0 || n == 0) return empty(out_shape, opts);
  if (k == 0) {
    Tensor y = zeros(out_shape, opts);
    return bias.defined() ? add(y, bias) : y;
  }
  Tensor x = as_rows(input, m, k);
  if (can_use_gemv(m, weight)) {
    Tensor y = empty({m, n}, opts);
    const bool fused = can_fuse_bias(bias, n);
    Tensor b = fused ? bias.contiguous() : Tensor();
    GemvParams p;
    p.x = x.raw_data_ptr();
    p.w = weight.raw_data_ptr();
    p.bias = fused ? b.raw_data_ptr() : nullptr;
    p.y = y.raw_data_ptr();
    p.dtype = input.dtype();
    p.m = m;
    p.n = n;
    p.k = k;
    p.stride_x_row = row_stride(x);
    p.stride_w_row = n == 1 ? k : weight.stride(0);
    p.stride_y_row = n;
    ANVIL_KERNEL(input.device(), gemv, p);
    y = y.view(out_shape);
    return bias.defined() && !fused ? add(y, bias) : y;
  }
  Tensor y = mm(x, weight.t()).view(out_shape);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace anvil
