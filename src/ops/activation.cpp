// silu_mul (SwiGLU's gate): validation, operands as [rows, cols] views with unit-stride cols.
#include "anvil/nn.h"
#include "core/dispatch.h"
#include "core/kernels/activation.h"
#include "core/util.h"

namespace anvil {

Tensor silu_mul(const Tensor& gate, const Tensor& up) {
  ANVIL_CHECK(gate.defined() && up.defined(), Error, "[silu_mul] undefined tensor");
  check_same_device("[silu_mul]", gate, up);
  ANVIL_CHECK(gate.sizes() == up.sizes(), ShapeError, "[silu_mul] gate ", describe(gate), " and up ", describe(up),
              " must have the same shape");
  ANVIL_CHECK(gate.dtype() == up.dtype(), DTypeError, "[silu_mul] gate ", describe(gate), " and up ", describe(up),
              " must have the same dtype");
  dispatch_float_types(gate.dtype(), "[silu_mul]", [](auto) {});
  Tensor out = empty(gate.sizes(), TensorOptions(gate.dtype()).device(gate.device()));
  if (out.numel() == 0) return out;
  const int64_t cols = gate.dim() == 0 ? 1 : gate.size(-1), rows = gate.numel() / cols;
  Tensor g = as_rows(gate, rows, cols), u = as_rows(up, rows, cols);
  SiluMulParams p;
  p.gate = g.raw_data_ptr();
  p.up = u.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.dtype = gate.dtype();
  p.rows = rows;
  p.cols = cols;
  p.stride_gate_row = row_stride(g);
  p.stride_up_row = row_stride(u);
  p.stride_out_row = cols;
  ANVIL_KERNEL(gate.device(), silu_mul, p);
  return out;
}

}  // namespace anvil
