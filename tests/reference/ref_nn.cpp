#include "reference/ref_nn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/ref_float.h"

namespace ref {

double round_to(Prec p, double v) {
  switch (p) {
    case Prec::F64: return v;
    case Prec::F32: return static_cast<float>(v);
    case Prec::BF16: return decode(Fmt::BF16, encode(Fmt::BF16, v));
    case Prec::F16: return decode(Fmt::F16, encode(Fmt::F16, v));
  }
  return v;
}

Array linear(const Array& x, const Array& w, const Array* bias) {
  if (x.dim() < 1 || w.dim() < 1 || w.dim() > 2) throw std::invalid_argument("ref::linear: ranks");
  const bool w_vec = w.dim() == 1;
  const int64_t k = x.sizes.back(), n = w_vec ? 1 : w.sizes[0];
  if (w.sizes.back() != k) throw std::invalid_argument("ref::linear: k");
  Shape out_sizes(x.sizes.begin(), x.sizes.end() - 1);
  const int64_t m = numel_of(out_sizes);
  if (!w_vec) out_sizes.push_back(n);
  Array y(out_sizes);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t q = 0; q < k; ++q) s += x.v[static_cast<size_t>(i * k + q)] * w.v[static_cast<size_t>(j * k + q)];
      y.v[static_cast<size_t>(i * n + j)] = s;
    }
  if (bias) {
    if (broadcast_shapes(bias->sizes, out_sizes) != out_sizes) throw std::invalid_argument("ref::linear: bias shape");
    int64_t p = 0;
    for_each_index(out_sizes, [&](const Shape& idx) { y.v[static_cast<size_t>(p++)] += at_broadcast(*bias, idx); });
  }
  return y;
}

namespace {

// x as [outer, len, inner] around `dim`.
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
};
Rows rows_of(const Array& x, int64_t dim) {
  Rows r;
  if (x.dim() == 0) {
    wrap_dim(dim, 0);
    return r;
  }
  const int64_t d = wrap_dim(dim, x.dim());
  for (int64_t i = 0; i < d; ++i) r.outer *= x.sizes[static_cast<size_t>(i)];
  r.len = x.sizes[static_cast<size_t>(d)];
  for (int64_t i = d + 1; i < x.dim(); ++i) r.inner *= x.sizes[static_cast<size_t>(i)];
  return r;
}

// For each row along `dim`: m = max of its non-NaN entries (-inf if none), s = sum exp(x - m)
// (NaN if the row holds a NaN); then f(position, m, s) for each of its elements.
template <typename F>
void softmax_rows(const Array& x, int64_t dim, F&& f) {
  const Rows r = rows_of(x, dim);
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t i = 0; i < r.inner; ++i) {
      const int64_t first = o * r.len * r.inner + i;
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t j = 0; j < r.len; ++j) {
        double v = x.v[static_cast<size_t>(first + j * r.inner)];
        if (std::isnan(v)) nan = true;
        else if (v > m) m = v;
      }
      double s = 0.0;
      for (int64_t j = 0; j < r.len; ++j) s += std::exp(x.v[static_cast<size_t>(first + j * r.inner)] - m);
      if (nan) s = std::numeric_limits<double>::quiet_NaN();
      // An all -inf row: x - m = -inf - -inf = NaN, so s is NaN and so is every output.
      for (int64_t j = 0; j < r.len; ++j) f(static_cast<size_t>(first + j * r.inner), m, s);
    }
}

}  // namespace

Array softmax(const Array& x, int64_t dim) {
  Array out(x.sizes);
  softmax_rows(x, dim, [&](size_t p, double m, double s) { out.v[p] = std::exp(x.v[p] - m) / s; });
  return out;
}

Array log_softmax(const Array& x, int64_t dim) {
  Array out(x.sizes);
  softmax_rows(x, dim, [&](size_t p, double m, double s) { out.v[p] = (x.v[p] - m) - std::log(s); });
  return out;
}

SoftmaxScale softmax_scale(const Array& x, int64_t dim) {
  SoftmaxScale r{Array(x.sizes), Array(x.sizes)};
  softmax_rows(x, dim, [&](size_t p, double m, double s) {
    r.spread.v[p] = std::fabs(x.v[p] - m);
    r.log_sum.v[p] = std::log(s);
  });
  return r;
}

Array rms_norm(const Array& x, int64_t norm_dims, const Array* weight, double eps) {
  if (norm_dims > x.dim()) throw std::invalid_argument("ref::rms_norm: norm_dims");
  const Shape norm(x.sizes.end() - norm_dims, x.sizes.end());
  if (weight && weight->sizes != norm) throw std::invalid_argument("ref::rms_norm: weight shape");
  const int64_t cols = numel_of(norm);
  Array out(x.sizes);
  if (cols == 0) return out;
  const int64_t rows = x.numel() / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.v.data() + r * cols;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      out.v[static_cast<size_t>(r * cols + c)] = xr[c] * inv * (weight ? weight->v[static_cast<size_t>(c)] : 1.0);
  }
  return out;
}

Array normalize(const Array& x, double p, int64_t dim, double eps) {
  const int64_t nd = x.dim();
  if (nd > 0 && (dim < 0 || dim >= nd)) throw std::invalid_argument("ref::normalize: dim");
  int64_t outer = 1, c = 1, inner = 1;
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t s = x.sizes[static_cast<size_t>(i)];
    if (i < dim) outer *= s;
    else if (i == dim) c = s;
    else inner *= s;
  }
  Array out(x.sizes);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t ch) { return static_cast<size_t>((o * c + ch) * inner + i); };
      double n = p == -INFINITY ? INFINITY : 0.0;
      for (int64_t ch = 0; ch < c; ++ch) {
        const double a = std::abs(x.v[at(ch)]);
        if (p == INFINITY) n = std::max(n, a);
        else if (p == -INFINITY) n = std::min(n, a);
        else if (p == 0.0) n += a != 0.0 ? 1.0 : 0.0;
        else n += std::pow(a, p);
      }
      if (std::isfinite(p) && p != 0.0) n = std::pow(n, 1.0 / p);
      const double d = std::max(n, eps);
      for (int64_t ch = 0; ch < c; ++ch) out.v[at(ch)] = x.v[at(ch)] / d;
    }
  return out;
}

AddRmsNorm add_rms_norm(const Array& x, const Array& residual, int64_t norm_dims, const Array* weight, double eps, Prec p) {
  if (x.sizes != residual.sizes) throw std::invalid_argument("ref::add_rms_norm: shapes");
  AddRmsNorm r;
  r.h = Array(x.sizes);
  for (size_t i = 0; i < x.v.size(); ++i) r.h.v[i] = round_to(p, x.v[i] + residual.v[i]);
  r.out = rms_norm(r.h, norm_dims, weight, eps);
  return r;
}

Array silu_mul(const Array& gate, const Array& up) {
  if (gate.sizes != up.sizes) throw std::invalid_argument("ref::silu_mul: shapes");
  Array out(gate.sizes);
  for (size_t i = 0; i < gate.v.size(); ++i) out.v[i] = gate.v[i] / (1.0 + std::exp(-gate.v[i])) * up.v[i];
  return out;
}

Array rope(const Array& x, const Array& positions, const std::vector<float>& inv_freq) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  Array out = x;  // columns >= rotary_dim pass through
  if (x.dim() < 1) throw std::invalid_argument("ref::rope: x needs a head_dim");
  const int64_t head_dim = x.sizes.back();
  if (2 * half > head_dim) throw std::invalid_argument("ref::rope: rotary_dim > head_dim");
  const Shape lead(x.sizes.begin(), x.sizes.end() - 1);
  if (positions.dim() > static_cast<int64_t>(lead.size()) || broadcast_shapes(positions.sizes, lead) != lead)
    throw std::invalid_argument("ref::rope: positions do not broadcast");
  if (head_dim == 0) return out;
  int64_t r = 0;
  for_each_index(lead, [&](const Shape& idx) {
    const float pos = static_cast<float>(at_broadcast(positions, idx));
    const size_t base = static_cast<size_t>(r++ * head_dim);
    for (int64_t c = 0; c < half; ++c) {
      // float32 product, correctly rounded: the double product of two floats is exact.
      const float angle = static_cast<float>(static_cast<double>(pos) * static_cast<double>(inv_freq[static_cast<size_t>(c)]));
      const double cs = std::cos(static_cast<double>(angle)), sn = std::sin(static_cast<double>(angle));
      const double a = x.v[base + static_cast<size_t>(c)], b = x.v[base + static_cast<size_t>(c + half)];
      out.v[base + static_cast<size_t>(c)] = a * cs - b * sn;
      out.v[base + static_cast<size_t>(c + half)] = b * cs + a * sn;
    }
  });
  return out;
}

Array rope_scale(const Array& x, int64_t rotary_dim) {
  const int64_t head_dim = x.sizes.back(), half = rotary_dim / 2;
  Array s(x.sizes);
  for (int64_t base = 0; base < x.numel(); base += head_dim)
    for (int64_t c = 0; c < half; ++c) {
      const double v = std::fabs(x.v[static_cast<size_t>(base + c)]) + std::fabs(x.v[static_cast<size_t>(base + c + half)]);
      s.v[static_cast<size_t>(base + c)] = s.v[static_cast<size_t>(base + c + half)] = v;
    }
  return s;
}

}  // namespace ref
