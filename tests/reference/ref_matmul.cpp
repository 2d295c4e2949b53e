#include "reference/ref_matmul.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "reference/ref_elementwise.h"

namespace ref {

Array mm(const Array& a, const Array& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.sizes[1] != b.sizes[0]) throw std::invalid_argument("ref::mm");
  int64_t m = a.sizes[0], k = a.sizes[1], n = b.sizes[1];
  Array c({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += a.v[static_cast<size_t>(i * k + p)] * b.v[static_cast<size_t>(p * n + j)];
      c.v[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}

Array bmm(const Array& a, const Array& b) {
  if (a.dim() != 3 || b.dim() != 3 || a.sizes[0] != b.sizes[0] || a.sizes[2] != b.sizes[1]) throw std::invalid_argument("ref::bmm");
  int64_t B = a.sizes[0], m = a.sizes[1], k = a.sizes[2], n = b.sizes[2];
  Array c({B, m, n});
  for (int64_t q = 0; q < B; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t p = 0; p < k; ++p)
          s += a.v[static_cast<size_t>((q * m + i) * k + p)] * b.v[static_cast<size_t>((q * k + p) * n + j)];
        c.v[static_cast<size_t>((q * m + i) * n + j)] = s;
      }
  return c;
}

Array matmul(const Array& a0, const Array& b0) {
  if (a0.dim() == 0 || b0.dim() == 0) throw std::invalid_argument("ref::matmul: 0-dim");
  Shape as = a0.sizes, bs = b0.sizes;
  bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back();
  int64_t k2 = bs[bs.size() - 2], n = bs.back();
  if (k != k2) throw std::invalid_argument("ref::matmul: inner dims");
  Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  Shape batch = broadcast_shapes(a_batch, b_batch);
  Shape out_sizes = batch;
  out_sizes.push_back(m);
  out_sizes.push_back(n);
  Array c(out_sizes);
  // Offsets of each broadcast batch matrix in a and b (row-major, size-1 dims broadcast).
  auto batch_offset = [&](const Shape& own, const Shape& idx) {
    size_t lead = idx.size() - own.size();
    int64_t off = 0;
    for (size_t d = 0; d < own.size(); ++d) off = off * own[d] + (own[d] == 1 ? 0 : idx[lead + d]);
    return off;
  };
  int64_t q = 0;
  auto one = [&](const Shape& bi) {
    const double* pa = a0.v.data() + batch_offset(a_batch, bi) * m * k;
    const double* pb = b0.v.data() + batch_offset(b_batch, bi) * k * n;
    double* pc = c.v.data() + q * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t p = 0; p < k; ++p) s += pa[i * k + p] * pb[p * n + j];
        pc[i * n + j] = s;
      }
    ++q;
  };
  if (batch.empty()) one(Shape{});
  else for_each_index(batch, one);
  // Drop the dims that were added for 1-D operands.
  Shape final_sizes = batch;
  if (!a_vec) final_sizes.push_back(m);
  if (!b_vec) final_sizes.push_back(n);
  c.sizes = final_sizes;
  return c;
}

Array matmul_abs(const Array& a, const Array& b) {
  auto absf = [](double x) { return std::fabs(x); };
  return matmul(map(a, absf), map(b, absf));
}

Array scaled_mm(const Array& a, const Array& b, const std::vector<double>& sa, const std::vector<double>& sb,
                const Array* bias) {
  Array c = mm(a, b);
  const int64_t m = c.sizes[0], n = c.sizes[1];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double& v = c.v[static_cast<size_t>(i * n + j)];
      v *= sa[sa.size() == 1 ? 0 : static_cast<size_t>(i)] * sb[sb.size() == 1 ? 0 : static_cast<size_t>(j)];
      if (bias) v += bias->v[static_cast<size_t>(j)];
    }
  return c;
}

Array scaled_mm_blocks(const Array& a, const Array& b, const Array& sa, int64_t a_rows, const Array& sb,
                       int64_t b_cols, const Array* bias) {
  const int64_t m = a.sizes[0], k = a.sizes[1], n = b.sizes[1], l = (k + 127) / 128;
  const int64_t sa_cols = sa.sizes[1], sb_cols = sb.sizes[1];
  Array c({m, n});
  std::vector<double> bt(static_cast<size_t>(n * k));  // b^T: unit stride along q
  for (int64_t q = 0; q < k; ++q)
    for (int64_t j = 0; j < n; ++j) bt[static_cast<size_t>(j * k + q)] = b.v[static_cast<size_t>(q * n + j)];
  for (int64_t i = 0; i < m; ++i) {
    const double* ar = a.v.data() + i * k;
    for (int64_t j = 0; j < n; ++j) {
      const double* br = bt.data() + j * k;
      double v = 0;
      for (int64_t blk = 0; blk < l; ++blk) {
        double dot = 0;
        for (int64_t q = blk * 128; q < std::min(k, (blk + 1) * 128); ++q) dot += ar[q] * br[q];
        v += dot * sa.v[static_cast<size_t>(i / a_rows * sa_cols + blk)] *
             sb.v[static_cast<size_t>(blk * sb_cols + j / b_cols)];
      }
      if (bias) v += bias->v[static_cast<size_t>(j)];
      c.v[static_cast<size_t>(i * n + j)] = v;
    }
  }
  return c;
}

Array grouped_mm(const Array& a, const Array& b, const std::vector<int64_t>& offs, const std::vector<double>* sa,
                 const Array* sb) {
  const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
  const int64_t k = a.sizes.back(), m = a.sizes[a3 ? 1 : 0], n = b.sizes.back();
  const int64_t groups = a3 ? a.sizes[0] : b3 ? b.sizes[0] : static_cast<int64_t>(offs.size());
  const bool batched_out = a3 == b3;
  Array c(batched_out ? Shape{groups, m, n} : Shape{m, n}, std::nan(""));
  const int64_t extent = a3 && b3 ? 0 : b3 ? m : a3 ? n : k;
  int64_t begin = 0;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t end = extent;
    if (!offs.empty()) {
      end = std::max(begin, std::min(std::max<int64_t>(offs[static_cast<size_t>(g)], 0), extent));
    }
    // Rows [i0, i1), columns [j0, j1), K range [q0, q1) of group g, operand batch indices.
    int64_t i0 = 0, i1 = m, j0 = 0, j1 = n, q0 = 0, q1 = k;
    if (b3 && !a3) { i0 = begin; i1 = end; }
    else if (a3 && !b3) { j0 = begin; j1 = end; }
    else if (!a3 && !b3) { q0 = begin; q1 = end; }
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        double s = 0.0;
        for (int64_t q = q0; q < q1; ++q) {
          const double av = a3 ? a.at({g, i, q}) : a.at({i, q});
          const double bv = b3 ? b.at({g, q, j}) : b.at({q, j});
          s += av * bv;
        }
        if (sa) s *= (*sa)[static_cast<size_t>(i)];
        if (sb) s *= sb->at({g, j});
        if (batched_out) c.at({g, i, j}) = s;
        else c.at({i, j}) = s;
      }
    if (!offs.empty()) begin = end;
  }
  return c;
}

}  // namespace ref
