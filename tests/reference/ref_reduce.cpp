#include "reference/ref_reduce.h"

#include <cmath>
#include <limits>

namespace ref {

namespace {

std::vector<bool> reduced_mask(int64_t ndim, const Shape& dims) {
  std::vector<bool> red(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(wrap_dim(d, ndim))] = true;
  return red;
}

Shape out_shape(const Shape& sizes, const std::vector<bool>& red, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!red[d]) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Position of an input multi-index in the (keepdim) output: reduced coordinates become 0.
int64_t out_offset(const Shape& idx, const Shape& sizes, const std::vector<bool>& red) {
  int64_t off = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t s = red[d] ? 1 : sizes[d];
    off = off * s + (red[d] ? 0 : idx[d]);
  }
  return off;
}

}  // namespace

int64_t reduction_length(const Shape& sizes, const Shape& dims) {
  auto red = reduced_mask(static_cast<int64_t>(sizes.size()), dims);
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (red[d]) n *= sizes[d];
  return n;
}

Array reduce(const Array& x, const Shape& dims, bool keepdim, Red op, double correction) {
  const int64_t ndim = x.dim();
  auto red = reduced_mask(ndim, dims);
  Shape keep = out_shape(x.sizes, red, true);
  int64_t n_out = numel_of(keep);
  int64_t n = reduction_length(x.sizes, dims);

  double init = 0.0;
  if (op == Red::Prod) init = 1.0;
  if (op == Red::Amax) init = -std::numeric_limits<double>::infinity();
  if (op == Red::Amin) init = std::numeric_limits<double>::infinity();
  std::vector<double> acc(static_cast<size_t>(n_out), init);
  std::vector<bool> has_nan(static_cast<size_t>(n_out), false);

  // First pass: sums (or products / extremes).
  int64_t k = 0;
  for_each_index(x.sizes, [&](const Shape& idx) {
    double v = x.v[static_cast<size_t>(k++)];
    size_t o = static_cast<size_t>(out_offset(idx, x.sizes, red));
    switch (op) {
      case Red::Prod: acc[o] *= v; break;
      case Red::Amax:
        if (std::isnan(v)) has_nan[o] = true;
        else if (v > acc[o]) acc[o] = v;
        break;
      case Red::Amin:
        if (std::isnan(v)) has_nan[o] = true;
        else if (v < acc[o]) acc[o] = v;
        break;
      case Red::AbsSum: acc[o] += std::fabs(v); break;
      case Red::SumSq: acc[o] += v * v; break;
      default: acc[o] += v; break;  // Sum, Mean, Var, Std
    }
  });

  if (op == Red::Var || op == Red::Std) {
    // Second pass around the mean (two-pass variance in double).
    std::vector<double> mean(acc.size());
    for (size_t o = 0; o < acc.size(); ++o) mean[o] = acc[o] / static_cast<double>(n);
    std::vector<double> ss(acc.size(), 0.0);
    k = 0;
    for_each_index(x.sizes, [&](const Shape& idx) {
      double v = x.v[static_cast<size_t>(k++)];
      size_t o = static_cast<size_t>(out_offset(idx, x.sizes, red));
      ss[o] += (v - mean[o]) * (v - mean[o]);
    });
    double denom = std::max(0.0, static_cast<double>(n) - correction);
    for (size_t o = 0; o < acc.size(); ++o) {
      acc[o] = ss[o] / denom;
      if (op == Red::Std) acc[o] = std::sqrt(acc[o]);
    }
  } else if (op == Red::Mean) {
    for (double& a : acc) a /= static_cast<double>(n);
  } else if (op == Red::Amax || op == Red::Amin) {
    for (size_t o = 0; o < acc.size(); ++o)
      if (has_nan[o]) acc[o] = std::numeric_limits<double>::quiet_NaN();
  }

  Array out(keepdim ? keep : out_shape(x.sizes, red, false));
  out.v = std::move(acc);
  return out;
}

ValuesIndices max_min_dim(const Array& x, int64_t dim, bool keepdim, bool is_max) {
  const int64_t ndim = x.dim();
  int64_t d = wrap_dim(dim, ndim);
  Shape dims = ndim == 0 ? Shape{} : Shape{d};
  auto red = reduced_mask(ndim, dims);
  Shape keep = out_shape(x.sizes, red, true);
  int64_t n_out = numel_of(keep);
  std::vector<double> val(static_cast<size_t>(n_out), 0.0), ind(static_cast<size_t>(n_out), -1.0);
  int64_t k = 0;
  for_each_index(x.sizes, [&](const Shape& idx) {
    double v = x.v[static_cast<size_t>(k++)];
    size_t o = static_cast<size_t>(out_offset(idx, x.sizes, red));
    int64_t pos = ndim == 0 ? 0 : idx[static_cast<size_t>(d)];
    if (ind[o] < 0) {
      val[o] = v;
      ind[o] = static_cast<double>(pos);
      return;
    }
    if (std::isnan(val[o])) return;  // the first NaN wins
    bool better = std::isnan(v) || (is_max ? v > val[o] : v < val[o]);
    if (better) {
      val[o] = v;
      ind[o] = static_cast<double>(pos);
    }
  });
  ValuesIndices r;
  r.values = Array(keepdim ? keep : out_shape(x.sizes, red, false));
  r.indices = Array(r.values.sizes);
  r.values.v = std::move(val);
  r.indices.v = std::move(ind);
  return r;
}

int64_t arg_extreme_flat(const Array& x, bool is_max) {
  int64_t best = 0;
  for (int64_t i = 1; i < x.numel(); ++i) {
    double b = x.v[static_cast<size_t>(best)], v = x.v[static_cast<size_t>(i)];
    if (std::isnan(b)) break;
    if (std::isnan(v) || (is_max ? v > b : v < b)) best = i;
  }
  return best;
}

}  // namespace ref
