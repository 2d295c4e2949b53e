#include "reference/ref_upsample.h"

#include <cmath>

namespace ref {
namespace {

struct Taps {
  std::vector<int64_t> idx;
  std::vector<double> w;
};

// PyTorch's scale for one axis, in T.
template <typename T>
T scale_of(UpKind kind, bool align, int64_t in, int64_t out, std::optional<double> s) {
  if (kind != UpKind::Nearest && kind != UpKind::NearestExact && align)
    return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (s && *s > 0) return static_cast<T>(1.0 / *s);
  return static_cast<T>(in) / static_cast<T>(out);
}

double cubic_near(double x) { return ((-0.75 + 2) * x - (-0.75 + 3)) * x * x + 1; }
double cubic_far(double x) { return ((-0.75 * x - 5 * -0.75) * x + 8 * -0.75) * x - 4 * -0.75; }

template <typename T>
Taps taps_t(UpKind kind, bool align, int64_t in, int64_t out, std::optional<double> s, int64_t o) {
  Taps t;
  const T sc = scale_of<T>(kind, align, in, out, s);
  if (kind == UpKind::Nearest || kind == UpKind::NearestExact) {
    const float sf = scale_of<float>(kind, align, in, out, s);
    const float pos = kind == UpKind::Nearest ? static_cast<float>(o) * sf : (static_cast<float>(o) + 0.5f) * sf;
    t.idx = {std::min<int64_t>(static_cast<int64_t>(std::floor(pos)), in - 1)};
    t.w = {1.0};
    return t;
  }
  if (kind == UpKind::Linear && in == out) {  // PyTorch's CPU: an axis of equal extents copies
    t.idx = {o};
    t.w = {1.0};
    return t;
  }
  T src = align ? sc * static_cast<T>(o) : sc * (static_cast<T>(o) + T(0.5)) - T(0.5);
  if (kind == UpKind::Linear && !align && src < 0) src = 0;
  const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
  const double l = std::min(std::max(static_cast<double>(src - static_cast<T>(i0)), 0.0), 1.0);
  auto clamp = [&](int64_t k) { return std::max<int64_t>(0, std::min<int64_t>(k, in - 1)); };
  if (kind == UpKind::Linear) {
    t.idx = {i0, clamp(i0 + 1)};
    t.w = {1 - l, l};
  } else {
    t.idx = {clamp(i0 - 1), clamp(i0), clamp(i0 + 1), clamp(i0 + 2)};
    t.w = {cubic_far(l + 1), cubic_near(l), cubic_near(1 - l), cubic_far(2 - l)};
  }
  return t;
}

Taps taps(UpKind kind, bool align, int64_t in, int64_t out, std::optional<double> s, int64_t o, bool f64) {
  return f64 ? taps_t<double>(kind, align, in, out, s, o) : taps_t<float>(kind, align, in, out, s, o);
}

// Calls f(out_flat, in_flat, weight) for every (output, input) pair the forward multiplies.
template <typename F>
void each_product(const Shape& in, const Shape& out, UpKind kind, bool align,
                  const std::vector<std::optional<double>>& scales, bool f64, F&& f) {
  const size_t k = in.size() - 2;
  const int64_t nc = in[0] * in[1];
  const Array shape_out(out), shape_in(in);
  const int64_t per_out = numel_of(out) / std::max<int64_t>(nc, 1), per_in = numel_of(in) / std::max<int64_t>(nc, 1);
  for (int64_t plane = 0; plane < nc; ++plane)
    for (int64_t e = 0; e < per_out; ++e) {
      // Spatial multi-index of e, its taps per axis, and their product over every combination.
      std::vector<int64_t> o(k);
      int64_t rem = e;
      for (size_t d = k; d-- > 0;) {
        o[d] = rem % out[d + 2];
        rem /= out[d + 2];
      }
      std::vector<Taps> t(k);
      for (size_t d = 0; d < k; ++d)
        t[d] = taps(kind, align, in[d + 2], out[d + 2], scales.empty() ? std::nullopt : scales[d], o[d], f64);
      std::vector<size_t> j(k, 0);
      while (true) {
        int64_t src = 0;
        double w = 1;
        for (size_t d = 0; d < k; ++d) {
          src = src * in[d + 2] + t[d].idx[j[d]];
          w *= t[d].w[j[d]];
        }
        f(plane * per_out + e, plane * per_in + src, w);
        size_t d = k;
        while (d > 0 && ++j[d - 1] == t[d - 1].idx.size()) j[--d] = 0;
        if (d == 0) break;
      }
    }
}

}  // namespace

Array upsample(const Array& x, const Shape& out, UpKind kind, bool align_corners,
               const std::vector<std::optional<double>>& scales, bool index_f64) {
  Shape os{x.sizes[0], x.sizes[1]};
  os.insert(os.end(), out.begin(), out.end());
  Array y(os);
  each_product(x.sizes, os, kind, align_corners, scales, index_f64,
               [&](int64_t o, int64_t i, double w) { y.v[static_cast<size_t>(o)] += w * x.v[static_cast<size_t>(i)]; });
  return y;
}

Array upsample_backward(const Array& g, const Shape& in_sizes, UpKind kind, bool align_corners,
                        const std::vector<std::optional<double>>& scales, bool index_f64) {
  Array gi(in_sizes);
  each_product(in_sizes, g.sizes, kind, align_corners, scales, index_f64,
               [&](int64_t o, int64_t i, double w) { gi.v[static_cast<size_t>(i)] += w * g.v[static_cast<size_t>(o)]; });
  return gi;
}

}  // namespace ref
