#pragma once
// FP8 products with scales (scaled_mm, scaled_linear, weight-only FP8).
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// acc(i, j) = sum_q a[i, q] * w[j, q] in float32 over a [m, k] and w [n, k] (w[j, q] is
// mat_b[q, j]: the weight rows of a linear layer); out[i, j] = round(acc * (sa(i) * sw(j)) +
// bias[j]) with the scale product and the bias in float32. sa(i) = scale_a[per_row ? i : 0],
// 1 when scale_a is null (likewise sw). Operands: float8 (e4m3fn / e5m2) or float32 / bfloat16
// / float16 (weight-only FP8: a in a float dtype, w float8). Arbitrary strides on a and w; out
// has unit column stride. bias (bias_dtype) is [n] contiguous or null.
struct ScaledMmParams {
  const void* a = nullptr;
  const void* w = nullptr;
  const float* scale_a = nullptr;
  const float* scale_w = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  DType a_dtype = kFloat8_e4m3fn, w_dtype = kFloat8_e4m3fn, bias_dtype = kBFloat16, out_dtype = kBFloat16;
  int64_t m = 0, n = 0, k = 0;
  int64_t stride_a_row = 0, stride_a_col = 1, stride_w_row = 0, stride_w_col = 1, stride_out_row = 0;
  bool scale_a_per_row = false, scale_w_per_row = false;
  BlockScale w_block;  // with it, scale_w is null: the block scales act inside the dot
  BlockScale a_block;  // a's block scales (block_n counts a's rows); with it, scale_a is null.
                       // With both, block_k is the same and w_block's stride_col may differ from 1.
};

#define ANVIL_SCALED_MM_KERNELS(X)     \
  X(scaled_mm, const ScaledMmParams&)
ANVIL_DECLARE_KERNELS(ANVIL_SCALED_MM_KERNELS)

}  // namespace anvil
