#pragma once
// Block scales of float8 weights in the op front ends (scaled_linear, dequantize_fp8,
// moe_experts): validation and the kernels' BlockScale view of a contiguous scale grid.
#include "anvil/tensor.h"
#include "core/params.h"
#include "core/util.h"

namespace anvil {

// block = {block_n, block_k} and scale float32 [..., ceil(n / bn), ceil(k / bk)] for a float8
// weight [..., n, k]; typed errors naming `op` and `name` otherwise.
inline void check_block_scale(const char* op, const Tensor& scale, const char* name, const Tensor& weight,
                              const Shape& block) {
  ANVIL_CHECK(block.size() == 2 && block[0] >= 1 && block[1] >= 1, ShapeError, op,
              " block must be {block_n, block_k} with both >= 1, got ", shape_str(block));
  ANVIL_CHECK(scale.dtype() == kFloat32, DTypeError, op, " ", name, " must be float32, got ", describe(scale));
  Shape want(weight.sizes().begin(), weight.sizes().end() - 2);
  want.push_back((weight.size(-2) + block[0] - 1) / block[0]);
  want.push_back((weight.size(-1) + block[1] - 1) / block[1]);
  ANVIL_CHECK(scale.sizes() == want, ShapeError, op, " ", name, " must be ", shape_str(want), " (one scale per ",
              block[0], " x ", block[1], " block of weight ", shape_str(weight.sizes()), "), got ", describe(scale));
}

// The BlockScale of a contiguous scale grid [..., nb, kb] (experts: [E, nb, kb]).
inline BlockScale block_scale_of(const Tensor& scale, const Shape& block) {
  BlockScale b;
  b.scale = static_cast<const float*>(scale.raw_data_ptr());
  b.block_n = block[0];
  b.block_k = block[1];
  b.stride_row = scale.size(-1);
  b.stride_expert = scale.dim() >= 3 ? scale.size(-1) * scale.size(-2) : 0;
  return b;
}

}  // namespace anvil
