#pragma once
// rms_norm and the fused residual add + rms_norm.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight[:] over rows x cols.
// With `residual`: h = round(x + residual) is written to residual_out and normalised instead.
struct RmsNormParams {
  const void* x = nullptr;
  const void* residual = nullptr;  // null: plain rms_norm
  const void* weight = nullptr;    // [cols] contiguous or null
  void* out = nullptr;
  void* residual_out = nullptr;
  DType dtype = kFloat32, weight_dtype = kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t stride_x_row = 0, stride_residual_row = 0, stride_out_row = 0, stride_residual_out_row = 0;
  double eps = 0;
};

#define ANVIL_NORM_KERNELS(X)        \
  X(rms_norm, const RmsNormParams&)
ANVIL_DECLARE_KERNELS(ANVIL_NORM_KERNELS)

}  // namespace anvil
