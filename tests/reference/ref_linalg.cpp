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

QrFactors householder_qr(const CMatrix& a) {
  const int64_t m = a.rows, n = a.cols;
  QrFactors f{identity(m), a};
  for (int64_t j = 0; j < std::min(m - 1, n); ++j) {
    double norm2 = 0;
    for (int64_t i = j; i < m; ++i) norm2 += std::norm(f.r.at(i, j));
    const double norm = std::sqrt(norm2);
    if (norm == 0) continue;
    const Cplx x0 = f.r.at(j, j);
    const Cplx phase = std::abs(x0) == 0 ? Cplx(1.0) : x0 / std::abs(x0);
    std::vector<Cplx> v(static_cast<size_t>(m - j));
    for (int64_t i = j; i < m; ++i) v[static_cast<size_t>(i - j)] = f.r.at(i, j);
    v[0] += phase * norm;  // x - alpha e_1 with alpha = -phase |x|
    double vnorm2 = 0;
    for (const Cplx& e : v) vnorm2 += std::norm(e);
    const double vnorm = std::sqrt(vnorm2);
    for (Cplx& e : v) e /= vnorm;
    // R = H R on rows j.., Q = Q H on columns j...
    for (int64_t c = 0; c < n; ++c) {
      Cplx dot = 0.0;
      for (int64_t i = j; i < m; ++i) dot += std::conj(v[static_cast<size_t>(i - j)]) * f.r.at(i, c);
      for (int64_t i = j; i < m; ++i) f.r.at(i, c) -= 2.0 * v[static_cast<size_t>(i - j)] * dot;
    }
    for (int64_t r = 0; r < m; ++r) {
      Cplx dot = 0.0;
      for (int64_t i = j; i < m; ++i) dot += f.q.at(r, i) * v[static_cast<size_t>(i - j)];
      for (int64_t i = j; i < m; ++i) f.q.at(r, i) -= 2.0 * dot * std::conj(v[static_cast<size_t>(i - j)]);
    }
    for (int64_t i = j + 1; i < m; ++i) f.r.at(i, j) = 0.0;
  }
  return f;
}

SvdFactors jacobi_svd(const CMatrix& a_in) {
  const bool wide = a_in.rows < a_in.cols;
  const CMatrix a = wide ? adjoint(a_in) : a_in;  // tall: rows >= cols
  const int64_t m = a.rows, n = a.cols;
  CMatrix w = a, v = identity(n);
  const double tol = 1e-15;
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double alpha = 0, beta = 0;
        Cplx gamma = 0.0;
        for (int64_t i = 0; i < m; ++i) {
          alpha += std::norm(w.at(i, p));
          beta += std::norm(w.at(i, q));
          gamma += std::conj(w.at(i, p)) * w.at(i, q);
        }
        const double g = std::abs(gamma);
        if (g == 0 || g <= tol * std::sqrt(alpha * beta)) continue;
        rotated = true;
        // Column q times e^(-i phi) makes the inner product real (|gamma|).
        const Cplx unphase = std::conj(gamma) / g;
        for (int64_t i = 0; i < m; ++i) w.at(i, q) *= unphase;
        for (int64_t i = 0; i < n; ++i) v.at(i, q) *= unphase;
        const double zeta = (beta - alpha) / (2 * g);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (int64_t i = 0; i < m; ++i) {
          const Cplx wp = w.at(i, p), wq = w.at(i, q);
          w.at(i, p) = c * wp - s * wq;
          w.at(i, q) = s * wp + c * wq;
        }
        for (int64_t i = 0; i < n; ++i) {
          const Cplx vp = v.at(i, p), vq = v.at(i, q);
          v.at(i, p) = c * vp - s * vq;
          v.at(i, q) = s * vp + c * vq;
        }
      }
    if (!rotated) break;
  }
  std::vector<double> norms(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    double s2 = 0;
    for (int64_t i = 0; i < m; ++i) s2 += std::norm(w.at(i, j));
    norms[static_cast<size_t>(j)] = std::sqrt(s2);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) order[static_cast<size_t>(j)] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return norms[static_cast<size_t>(x)] > norms[static_cast<size_t>(y)]; });
  SvdFactors f{CMatrix(m, n), CMatrix(n, n), {}};
  for (int64_t c = 0; c < n; ++c) {
    const int64_t j = order[static_cast<size_t>(c)];
    const double s = norms[static_cast<size_t>(j)];
    f.s.push_back(s);
    for (int64_t i = 0; i < m; ++i) f.u.at(i, c) = s > 0 ? w.at(i, j) / s : Cplx(0.0);
    for (int64_t i = 0; i < n; ++i) f.v.at(i, c) = v.at(i, j);
  }
  if (wide) std::swap(f.u, f.v);  // A^H = W S V^H  =>  A = V S W^H
  return f;
}

}  // namespace ref
