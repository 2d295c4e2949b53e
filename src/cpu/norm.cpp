// CPU rms_norm (and the fused residual add) over rows x cols: one row per task, float32
// accumulation (float64 for float64), x * rsqrt(mean(x^2) + eps) * weight rounded once.
#include <cmath>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels.h"
#include "cpu/loop.h"

namespace anvil::cpu {
namespace {

template <typename T, typename W>
void rms_norm_rows(const RmsNormParams& p) {
  using A = opmath_t<T>;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  const W* w = static_cast<const W*>(p.weight);
  T* out = static_cast<T*>(p.out);
  T* h_out = static_cast<T*>(p.residual_out);
  const int64_t cols = p.cols;
#pragma omp parallel for schedule(static) if (p.rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* xr = x + r * p.stride_x_row;
    T* yr = out + r * p.stride_out_row;
    if (res) {  // h = round(x + residual) replaces x
      const T* rr = res + r * p.stride_residual_row;
      T* hr = h_out + r * p.stride_residual_out_row;
      for (int64_t c = 0; c < cols; ++c) hr[c] = convert<T>(static_cast<A>(xr[c]) + static_cast<A>(rr[c]));
      xr = hr;
    }
    A ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) {
      const A v = static_cast<A>(xr[c]);
      ss += v * v;
    }
    const A inv = A(1) / std::sqrt(ss / static_cast<A>(cols) + static_cast<A>(p.eps));
    if (w) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = convert<T>(static_cast<A>(xr[c]) * inv * static_cast<A>(w[c]));
    } else {
      for (int64_t c = 0; c < cols; ++c) yr[c] = convert<T>(static_cast<A>(xr[c]) * inv);
    }
  }
}

}  // namespace

void rms_norm(const RmsNormParams& p) {
  dispatch_float_types(p.dtype, "[rms_norm]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.weight_dtype == p.dtype) rms_norm_rows<T, T>(p);
    else rms_norm_rows<T, float>(p);
  });
}

}  // namespace anvil::cpu
