#pragma once
// rms_norm and the fused residual add + rms_norm.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/element.h"
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
// accumulation dtype, or null. From the same statistics, per channel (batch_norm_channel_tail):
// save_mean / save_invstd ([c], save_dtype) and, when given, running_mean / running_var ([c]
// contiguous, their own dtypes) updated in place.
struct BatchNormParams {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;
  void* var = nullptr;
  void* save_mean = nullptr;
  void* save_invstd = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  const double* factor = nullptr;  // the cumulative average's weight (a float64 scalar on the device), or null
  DType dtype = kFloat32, save_dtype = kFloat32, running_mean_dtype = kFloat32, running_var_dtype = kFloat32;
  int64_t a = 0, c = 0, b = 0;
  double eps = 1e-5;
  double momentum = 0.1;
  double unbiased = 1;  // a * b / (a * b - 1): the running variance is the unbiased one
};

// v as element i of a float tensor of dtype t: float16 / bfloat16 / float32 / float64, the only
// dtypes the op passes (check_batch_norm), so the last case is float16.
ANVIL_HD void store_float(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case kFloat64: static_cast<double*>(p)[i] = v; break;
    case kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case kBFloat16: static_cast<BFloat16*>(p)[i] = convert<BFloat16>(v); break;
    default: static_cast<Half*>(p)[i] = convert<Half>(v); break;
  }
}
ANVIL_HD double load_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case kFloat64: return static_cast<const double*>(p)[i];
    case kFloat32: return static_cast<const float*>(p)[i];
    case kBFloat16: return convert<double>(static_cast<const BFloat16*>(p)[i]);
    default: return convert<double>(static_cast<const Half*>(p)[i]);
  }
}

// One channel's statistics out of batch norm's training forward: mean and biased var (and the
// invstd the normalisation used) in the accumulation type -> save_mean, save_invstd, and the
// running statistics as the composition updates them: r <- b * m + r * (1 - m) in float64, each
// product and the sum rounded on its own (no fused multiply-add), m the momentum or *factor, b
// the mean or var * unbiased; rounded once to the running tensor's dtype.
template <typename A>
ANVIL_HD void batch_norm_channel_tail(const BatchNormParams& p, int64_t ch, A mean, A var, A invstd) {
#ifdef __CUDA_ARCH__
  auto mul = [](double x, double y) { return __dmul_rn(x, y); };
  auto add = [](double x, double y) { return __dadd_rn(x, y); };
#else
  auto mul = [](double x, double y) { return x * y; };
  auto add = [](double x, double y) { return x + y; };
#endif
  store_float(p.save_mean, p.save_dtype, ch, static_cast<double>(mean));
  store_float(p.save_invstd, p.save_dtype, ch, static_cast<double>(invstd));
  const double m = p.factor ? *p.factor : p.momentum, keep = p.factor ? 1.0 - *p.factor : 1.0 - p.momentum;
  if (p.running_mean) {
    const double r = load_float(p.running_mean, p.running_mean_dtype, ch);
    store_float(p.running_mean, p.running_mean_dtype, ch, add(mul(static_cast<double>(mean), m), mul(r, keep)));
  }
  if (p.running_var) {
    const double r = load_float(p.running_var, p.running_var_dtype, ch);
    const double b = mul(static_cast<double>(var), p.unbiased);
    store_float(p.running_var, p.running_var_dtype, ch, add(mul(b, m), mul(r, keep)));
  }
}

// normalize(x, p = 2, dim) as one kernel: x [outer, c, inner] contiguous (dim as the middle),
// y = x / max(sqrt(sum over c of x^2), eps), the sum and the quotient in float32 (float64 for
// float64 data), rounded once.
struct L2NormalizeParams {
  const void* x = nullptr;
  void* y = nullptr;
  DType dtype = kFloat32;
  int64_t outer = 0, c = 0, inner = 0;
  double eps = 1e-12;
};
#define ANVIL_NORM_FUSED(X) \
  X(group_norm, const GroupNormParams&) \
  X(batch_norm_train, const BatchNormParams&) \
  X(l2_normalize, const L2NormalizeParams&)
ANVIL_DECLARE_FUSED(ANVIL_NORM_FUSED)

}  // namespace anvil
