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

// native_group_norm's forward as one kernel: x [n, c, hxw] contiguous; per (n, group) row of
// (c / group) * hxw elements mean and rstd = 1 / sqrt(var + eps) (biased var), written as `dtype`
// [n, group]; y = (x - mean) * rstd * weight[c] + bias[c] in float32 (float64 for float64 data;
// each step rounded as the composition's ops round it), rounded once to `dtype`. weight / bias:
// [c] in that accumulation dtype, or null.
struct GroupNormParams {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
  DType dtype = kFloat32;
  int64_t n = 0, c = 0, hxw = 0, group = 1;
  double eps = 1e-5;
};

// native_batch_norm's training forward as one kernel: x [a, c, b] dense (channels-first: a = N,
// b = spatial; channels-last: a = N * spatial, b = 1); per channel the mean and biased variance
// over its a * b elements (sums in float64), written to mean / var ([c], accumulation dtype:
// float32, float64 for float64 data), and y = (x - mean) * invstd * weight + bias with invstd =
// 1 / sqrt(var + eps), in that dtype, rounded once to `dtype`. weight / bias: [c] in the
// accumulation dtype, or null.
struct BatchNormParams {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;
  void* var = nullptr;
  DType dtype = kFloat32;
  int64_t a = 0, c = 0, b = 0;
  double eps = 1e-5;
};

#define ANVIL_NORM_FUSED(X) \
  X(group_norm, const GroupNormParams&) \
  X(batch_norm_train, const BatchNormParams&)
ANVIL_DECLARE_FUSED(ANVIL_NORM_FUSED)

}  // namespace anvil
