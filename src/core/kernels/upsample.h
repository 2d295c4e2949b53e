#pragma once
// Upsampling (nearest, nearest-exact, linear / bilinear / trilinear, bicubic), forward and
// backward: params, the kernel entry points of both backends (the backend boundary:
// core/kernels.h) and the per-axis taps both backends compute with, so CPU and CUDA read and sum
// the same elements with the same weights.
#include <cmath>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels.h"

namespace anvil {

enum class UpsampleMode : int8_t { Nearest, NearestExact, Linear, Cubic };

// One spatial axis: input extent `in`, output extent `out` and the ratio the source index uses,
// in float (scale_f) and double (scale_d): as PyTorch's area_pixel_compute_scale, 1 / scale_factor
// when one is given (and > 0), else in / out; align_corners (linear / cubic): (in - 1) / (out - 1),
// 0 for out = 1. Nearest modes always use scale_f. `copy`: a linear axis with out == in reads
// its own index (PyTorch's CPU shortcut, whatever the scale). `single`: an axis the op does not
// have (the leading ones of a 1-d / 2-d upsampling), one tap of weight 1 in every mode: a
// linear / cubic tap list there would add 0 * x, which turns an infinite x into NaN where
// PyTorch keeps it.
struct UpsampleAxis {
  int64_t in = 1, out = 1;
  float scale_f = 1.0f;
  double scale_d = 1.0;
  bool copy = false;
  bool single = false;
};

// a * b rounded on its own: CUDA would otherwise contract it with the next add into one fma, and
// the index would then differ from the CPU's where the product rounds across an integer.
template <typename T>
ANVIL_HD T mul_rounded(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == sizeof(double)) return __dmul_rn(a, b);
  else return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

template <typename Acc>
ANVIL_HD Acc axis_scale(const UpsampleAxis& a) {
  if constexpr (sizeof(Acc) == sizeof(double)) return a.scale_d;
  else return a.scale_f;
}

// Output index o of axis a reads input indices idx[0..n) (ascending) with weights w[0..n), n the
// mode's tap count (1 on a `single` axis). Acc: float, or double for float64 data (nearest modes compute in float).
//   nearest        min(floor(o * s), in - 1)
//   nearest-exact  min(floor((o + 0.5) * s), in - 1)
//   linear         src = s * o (align_corners) or max(s * (o + 0.5) - 0.5, 0); i0 = min(floor(src),
//                  in - 1), i1 = min(i0 + 1, in - 1), weights 1 - l, l with l = clamp(src - i0, 0, 1)
//   cubic          src as linear without the clamp at 0; taps clamp(i0 - 1 + j, 0, in - 1) with
//                  Keys' coefficients (A = -0.75) of t = clamp(src - i0, 0, 1)
template <typename Acc>
ANVIL_HD int upsample_taps(UpsampleMode mode, bool align_corners, const UpsampleAxis& a, int64_t o, int64_t* idx,
                           Acc* w) {
  const int64_t last = a.in - 1;
  if (a.single) {
    idx[0] = o;
    w[0] = Acc(1);
    return 1;
  }
  if (mode == UpsampleMode::Nearest || mode == UpsampleMode::NearestExact) {
    const float v = mul_rounded(mode == UpsampleMode::Nearest ? static_cast<float>(o) : static_cast<float>(o) + 0.5f,
                                a.scale_f);
    const int64_t k = static_cast<int64_t>(floorf(v));
    idx[0] = k < last ? k : last;
    w[0] = Acc(1);
    return 1;
  }
  const Acc s = axis_scale<Acc>(a);
  if (mode == UpsampleMode::Linear && a.copy) {
    idx[0] = idx[1] = o;
    w[0] = Acc(1);
    w[1] = Acc(0);
    return 2;
  }
  Acc src = align_corners ? s * static_cast<Acc>(o) : mul_rounded(s, static_cast<Acc>(o) + Acc(0.5)) - Acc(0.5);
  if (mode == UpsampleMode::Linear && !align_corners && src < Acc(0)) src = Acc(0);
  int64_t i0 = static_cast<int64_t>(floor(src));
  i0 = i0 < last ? i0 : last;
  Acc t = src - static_cast<Acc>(i0);
  t = t < Acc(0) ? Acc(0) : t > Acc(1) ? Acc(1) : t;
  if (mode == UpsampleMode::Linear) {
    idx[0] = i0;
    idx[1] = i0 < last ? i0 + 1 : i0;
    w[0] = Acc(1) - t;
    w[1] = t;
    return 2;
  }
  const Acc A = Acc(-0.75);
  auto near = [A](Acc x) { return ((A + Acc(2)) * x - (A + Acc(3))) * x * x + Acc(1); };       // |x| <= 1
  auto far = [A](Acc x) { return ((A * x - Acc(5) * A) * x + Acc(8) * A) * x - Acc(4) * A; };  // 1 < |x| < 2
  w[0] = far(t + Acc(1));
  w[1] = near(t);
  w[2] = near(Acc(1) - t);
  w[3] = far(Acc(2) - t);
  for (int j = 0; j < 4; ++j) {
    const int64_t k = i0 - 1 + j;
    idx[j] = k < 0 ? 0 : k > last ? last : k;
  }
  return 4;
}

// The output indices [lo, hi) of axis a whose taps include input index i: the taps' bounds are
// non-decreasing in o, so they form one range, found by bisection.
struct UpsampleRange {
  int64_t lo, hi;
};
template <typename Acc>
ANVIL_HD UpsampleRange upsample_output_range(UpsampleMode mode, bool align_corners, const UpsampleAxis& a, int64_t i) {
  int64_t idx[4];
  Acc w[4];
  auto first = [&](bool use_high) {  // first o whose highest (lowest) tap is >= i (> i)
    int64_t lo = 0, hi = a.out;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      const int n = upsample_taps<Acc>(mode, align_corners, a, mid, idx, w);
      const bool past = use_high ? idx[n - 1] >= i : idx[0] > i;
      if (past) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  return {first(true), first(false)};
}

// src [n, c, D, H, W] -> dst over the three axes (leading axes of 1-d / 2-d upsampling have
// in = out = 1), dense: NC(D)HW contiguous, or channels-last (C innermost) for both. Forward:
// src is the input (axis.in extents), dst the output (axis.out). Backward: src is grad_output
// (axis.out), dst grad_input (axis.in), each element the sum over the outputs that read it of
// the product of their axis weights (a gather: no atomics, the same bits every run); the
// backends build their per-axis tables themselves (upsample_output_range per input index, the
// taps per output index). Values accumulate in float (double for float64) and round once.
struct UpsampleParams {
  const void* src = nullptr;
  void* dst = nullptr;
  DType dtype = kFloat32;
  UpsampleMode mode = UpsampleMode::Nearest;
  bool align_corners = false;
  bool channels_last = false;
  int64_t n = 1, c = 1;
  UpsampleAxis axis[3];
};

// f(T{}, Acc{}) for the params' storage type T and its accumulation type (double for float64,
// else float); other dtypes throw naming `op`.
template <typename F>
void dispatch_upsample(const UpsampleParams& p, const char* op, F&& f) {
  dispatch_float_types(p.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    f(T{}, Acc{});
  });
}

#define ANVIL_UPSAMPLE_KERNELS(X)   \
  X(upsample, const UpsampleParams&) \
  X(upsample_backward, const UpsampleParams&)
ANVIL_DECLARE_KERNELS(ANVIL_UPSAMPLE_KERNELS)

}  // namespace anvil
