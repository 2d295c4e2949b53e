#include "reference/ref_linalg.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace ref {

CMatrix identity(int64_t n) {
  CMatrix out(n, n);
  for (int64_t i = 0; i < n; ++i) out.at(i, i) = 1.0;
  return out;
}

CMatrix matmul(const CMatrix& a, const CMatrix& b) {
  CMatrix out(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.cols; ++j) {
      Cplx s = 0.0;
      for (int64_t l = 0; l < a.cols; ++l) s += a.at(i, l) * b.at(l, j);
      out.at(i, j) = s;
    }
  return out;
}

CMatrix adjoint(const CMatrix& a) {
  CMatrix out(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) out.at(j, i) = std::conj(a.at(i, j));
  return out;
}

CMatrix transpose(const CMatrix& a) {
  CMatrix out(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) out.at(j, i) = a.at(i, j);
  return out;
}

double max_abs(const CMatrix& a) {
  double m = 0;
  for (const Cplx& x : a.v) m = std::max(m, std::abs(x));
  return m;
}

double max_abs_diff(const CMatrix& a, const CMatrix& b) {
  double m = 0;
  for (size_t i = 0; i < a.v.size(); ++i) m = std::max(m, std::abs(a.v[i] - b.v[i]));
  return m;
}

LuFactors lu_factor(const CMatrix& a, bool pivot) {
  LuFactors f;
  f.lu = a;
  CMatrix& m = f.lu;
  const int64_t k = std::min(a.rows, a.cols);
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;
    if (pivot) {
      double best = -1;
      for (int64_t i = j; i < a.rows; ++i) {
        const double mag = std::abs(m.at(i, j).real()) + std::abs(m.at(i, j).imag());
        if (mag > best) {
          best = mag;
          p = i;
        }
      }
      if (p != j)
        for (int64_t c = 0; c < a.cols; ++c) std::swap(m.at(j, c), m.at(p, c));
    }
    f.pivots.push_back(static_cast<int>(p + 1));
    const Cplx d = m.at(j, j);
    if (d == 0.0) {
      if (f.info == 0) f.info = static_cast<int>(j + 1);
      continue;
    }
    for (int64_t i = j + 1; i < a.rows; ++i) m.at(i, j) /= d;
    for (int64_t i = j + 1; i < a.rows; ++i)
      for (int64_t c = j + 1; c < a.cols; ++c) m.at(i, c) -= m.at(i, j) * m.at(j, c);
  }
  return f;
}

CMatrix lu_product(const LuFactors& f) {
  const int64_t m = f.lu.rows, n = f.lu.cols, k = std::min(m, n);
  CMatrix out(m, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Cplx s = 0.0;
      for (int64_t l = 0; l <= std::min({i, j, k - 1}); ++l) s += (l == i ? Cplx(1.0) : f.lu.at(i, l)) * f.lu.at(l, j);
      out.at(i, j) = s;
    }
  for (int64_t i = k - 1; i >= 0; --i) {  // P^T A = L U: undo the exchanges last to first
    const int64_t p = f.pivots[static_cast<size_t>(i)] - 1;
    if (p != i)
      for (int64_t c = 0; c < n; ++c) std::swap(out.at(i, c), out.at(p, c));
  }
  return out;
}

CMatrix lu_solve(const LuFactors& f, const CMatrix& b) {
  const int64_t n = f.lu.rows;
  CMatrix x = b;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = f.pivots[static_cast<size_t>(i)] - 1;
    if (p != i)
      for (int64_t c = 0; c < x.cols; ++c) std::swap(x.at(i, c), x.at(p, c));
  }
  for (int64_t c = 0; c < x.cols; ++c) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t l = 0; l < i; ++l) x.at(i, c) -= f.lu.at(i, l) * x.at(l, c);
    for (int64_t i = n - 1; i >= 0; --i) {
      for (int64_t l = i + 1; l < n; ++l) x.at(i, c) -= f.lu.at(i, l) * x.at(l, c);
      x.at(i, c) /= f.lu.at(i, i);
    }
  }
  return x;
}

Cplx det(const LuFactors& f) {
  Cplx d = 1.0;
  for (int64_t i = 0; i < f.lu.rows; ++i) {
    d *= f.lu.at(i, i);
    if (f.pivots[static_cast<size_t>(i)] != i + 1) d = -d;
  }
  return d;
}

}  // namespace ref
