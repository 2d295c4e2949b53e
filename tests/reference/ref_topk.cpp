#include "reference/ref_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ref {

namespace {

// Positions 0..n-1 of `v` in rank order (stable, so equal values keep index order).
std::vector<int64_t> ranked(const std::vector<double>& v, bool largest) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double x = v[static_cast<size_t>(a)], y = v[static_cast<size_t>(b)];
    if (std::isnan(x) || std::isnan(y))
      return largest ? (std::isnan(x) && !std::isnan(y)) : (!std::isnan(x) && std::isnan(y));
    return largest ? x > y : x < y;
  });
  return order;
}

}  // namespace

TopkResult topk(const Array& x, int64_t k, int64_t dim, bool largest) {
  if (x.dim() == 0) return {x, Array({}, 0.0)};
  const int64_t d = wrap_dim(dim, x.dim());
  Shape out_sizes = x.sizes;
  out_sizes[static_cast<size_t>(d)] = k;
  TopkResult r{Array(out_sizes), Array(out_sizes)};
  Shape row_sizes = x.sizes;
  row_sizes[static_cast<size_t>(d)] = 1;
  const int64_t n = x.sizes[static_cast<size_t>(d)];
  for_each_index(row_sizes, [&](const Shape& idx) {
    Shape at = idx;
    std::vector<double> row(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      at[static_cast<size_t>(d)] = j;
      row[static_cast<size_t>(j)] = x.at(at);
    }
    const std::vector<int64_t> order = ranked(row, largest);
    for (int64_t s = 0; s < k; ++s) {
      at[static_cast<size_t>(d)] = s;
      r.values.at(at) = row[static_cast<size_t>(order[static_cast<size_t>(s)])];
      r.indices.at(at) = static_cast<double>(order[static_cast<size_t>(s)]);
    }
  });
  return r;
}

std::vector<double> sample_probs(const std::vector<double>& logits, double temperature, int64_t top_k, double top_p) {
  const size_t n = logits.size();
  std::vector<double> p(n, 0.0);
  const std::vector<int64_t> order = ranked(logits, true);
  if (temperature == 0) {
    p[static_cast<size_t>(order[0])] = 1.0;
    return p;
  }
  const size_t c = top_k > 0 && static_cast<size_t>(top_k) < n ? static_cast<size_t>(top_k) : n;
  const double m = logits[static_cast<size_t>(order[0])];
  std::vector<double> e(c);
  double total = 0;
  for (size_t j = 0; j < c; ++j) total += e[j] = std::exp((logits[static_cast<size_t>(order[j])] - m) / temperature);
  double before = 0, kept_mass = 0;
  for (size_t j = 0; j < c; ++j) {
    if (j > 0 && before / total >= top_p) break;
    before += e[j];
    kept_mass += e[j];
    p[static_cast<size_t>(order[j])] = e[j];
  }
  for (double& v : p) v /= kept_mass;
  return p;
}

double top_p_margin(const std::vector<double>& logits, double temperature, int64_t top_k, double top_p) {
  if (top_p >= 1 || temperature == 0) return std::numeric_limits<double>::infinity();
  const std::vector<int64_t> order = ranked(logits, true);
  const size_t n = logits.size(), c = top_k > 0 && static_cast<size_t>(top_k) < n ? static_cast<size_t>(top_k) : n;
  const double m = logits[static_cast<size_t>(order[0])];
  std::vector<double> e(c);
  double total = 0;
  for (size_t j = 0; j < c; ++j) total += e[j] = std::exp((logits[static_cast<size_t>(order[j])] - m) / temperature);
  double before = 0, margin = std::numeric_limits<double>::infinity();
  for (size_t j = 1; j < c; ++j) {
    before += e[j - 1];
    margin = std::min(margin, std::fabs(before / total - top_p));
  }
  return margin;
}

}  // namespace ref
