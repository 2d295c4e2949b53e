#pragma once
// The few-row product (GEMV) and the fused add_rms_norm_linear.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// y[i, j] = sum_q x[i, q] * w[j, q] (+ bias[j]) for i < m, j < n: x [m, k], w [n, k], y [m, n].
// float32 accumulation (float64 for float64), bias added before the one rounding to `dtype`.
// Used for the few-row (decode) case; many rows go to the GEMM.
struct GemvParams {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // [n] contiguous or null
  void* y = nullptr;
  DType dtype = kFloat32;  // x, w, bias and y
  int64_t m = 0, n = 0, k = 0;
  int64_t stride_x_row = 0, stride_w_row = 0, stride_y_row = 0;
};

// add_rms_norm_linear for one row: h = round(x + residual) is written to sum_out, then
// y = rms_norm(h) * norm_weight (null: unweighted) @ w^T, the normalised row rounded to the dtype
// before the product. `gemv` is the product part (m = 1, x the input row, no bias); residual,
// norm_weight and sum_out are [k] contiguous like x. The composition (the op's): add_rms_norm, then
// linear.
struct AddRmsNormLinearParams {
  GemvParams gemv;
  const void* residual = nullptr;
  const void* norm_weight = nullptr;  // [k] in gemv.dtype, or null
  void* sum_out = nullptr;
  double eps = 0;
};

#define ANVIL_LINEAR_KERNELS(X)  \
  X(gemv, const GemvParams&)
ANVIL_DECLARE_KERNELS(ANVIL_LINEAR_KERNELS)

#define ANVIL_LINEAR_FUSED(X)                            \
  X(add_rms_norm_linear, const AddRmsNormLinearParams&)
ANVIL_DECLARE_FUSED(ANVIL_LINEAR_FUSED)

}  // namespace anvil
