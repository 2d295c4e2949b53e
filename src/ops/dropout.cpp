// dropout, native_dropout, native_dropout_backward (anvil/dropout.h): validation, the layout
// (the input's suggested memory format, dense), the generator's counters and the kernel call.
#include "anvil/dropout.h"
#include "anvil/ops.h"
#include "core/kernels/dropout.h"
#include "core/util.h"

namespace anvil {
namespace {

void check_dropout(const char* op, const Tensor& x, double p) {
  ANVIL_CHECK(x.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(is_floating_point(x.dtype()) && !is_float8(x.dtype()), DTypeError, op,
              " expected a floating input (float16, bfloat16, float32, float64), got ", describe(x));
  ANVIL_CHECK(p >= 0 && p <= 1, ShapeError, op, " dropout probability has to be between 0 and 1, but got ", p);
}

// The fused kernel over x in its suggested layout: (out, mask) with x's strides in that layout.
std::tuple<Tensor, Tensor> run_dropout(const Tensor& x, double p) {
  const MemoryFormat fmt = x.suggest_memory_format();
  const Tensor xc = x.contiguous(fmt);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()), fmt);
  Tensor mask = empty(x.sizes(), TensorOptions(kBool).device(x.device()), fmt);
  const double keep = 1.0 - p;
  DropoutParams d;
  d.x = xc.raw_data_ptr();
  d.out = out.raw_data_ptr();
  d.mask = static_cast<bool*>(mask.raw_data_ptr());
  d.dtype = x.dtype();
  d.numel = x.numel();
  d.threshold = dropout_threshold(keep);
  d.scale = keep == 0 ? 0.0 : 1.0 / keep;
  const PhiloxSlot slot = philox_reserve(static_cast<uint64_t>((d.numel + 3) / 4));
  d.seed = slot.seed;
  d.offset = slot.offset;
  ANVIL_KERNEL(x.device(), dropout, d);
  return {out, mask};
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool train) {
  const char* op = "[dropout]";
  check_dropout(op, input, p);
  if (p == 0 || !train || input.numel() == 0) return input;
  return as_op(op, [&] { return std::get<0>(run_dropout(input, p)); });
}

std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, std::optional<bool> train) {
  const char* op = "[native_dropout]";
  check_dropout(op, input, p);
  const TensorOptions bool_opts = TensorOptions(kBool).device(input.device());
  if (input.numel() == 0) return {input, empty(input.sizes(), bool_opts)};
  if (train.has_value() && !*train) {
    const MemoryFormat fmt = input.suggest_memory_format();
    Tensor out = empty(input.sizes(), TensorOptions(input.dtype()).device(input.device()), fmt);
    Tensor mask = empty(input.sizes(), bool_opts, fmt);
    out.copy_(input);
    mask.fill_(true);
    return {out, mask};
  }
  return as_op(op, [&] { return run_dropout(input, p); });
}

Tensor native_dropout_backward(const Tensor& grad_output, const Tensor& mask, double scale) {
  const char* op = "[native_dropout_backward]";
  ANVIL_CHECK(grad_output.defined() && mask.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(is_floating_point(grad_output.dtype()) && !is_float8(grad_output.dtype()), DTypeError, op,
              " expected a floating grad_output, got ", describe(grad_output));
  ANVIL_CHECK(mask.dtype() == kBool, DTypeError, op, " Mask should be Bool Scalar Type ", dtype_name(mask.dtype()));
  check_same_device(op, grad_output, mask);
  ANVIL_CHECK(mask.sizes() == grad_output.sizes(), ShapeError, op, " mask ", describe(mask),
              " must have the shape of grad_output ", describe(grad_output));
  const MemoryFormat fmt = grad_output.suggest_memory_format();
  const Tensor g = grad_output.contiguous(fmt), m = mask.contiguous(fmt);
  Tensor out = empty(g.sizes(), TensorOptions(g.dtype()).device(g.device()), fmt);
  DropoutBackwardParams d;
  d.grad = g.raw_data_ptr();
  d.mask = static_cast<const bool*>(m.raw_data_ptr());
  d.out = out.raw_data_ptr();
  d.dtype = g.dtype();
  d.numel = g.numel();
  d.scale = scale;
  if (d.numel > 0) ANVIL_KERNEL(g.device(), dropout_backward, d);
  return out;
}

}  // namespace anvil
