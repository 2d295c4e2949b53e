// The linear-algebra backward functions (det, inv, solve, lu_solve, solve_triangular, cholesky,
// qr, svd) against central finite differences of float64 references (tests/reference/ref_linalg)
// of a real loss L = Re sum(conj(W) * f(inputs)): float64 gradients to 1e-6, complex64 ones (in
// PyTorch's convention, dL/dRe + i dL/dIm) to 2e-3 of the largest entry. QR and the SVD are
// checked through losses that do not depend on their sign / phase choices (Q M R with M real
// diagonal, |R|^2, U D Vh, S), so any valid factorisation gives the same finite differences.
#include <cmath>
#include <complex>
#include <functional>
#include <string>

#include "anvil/linalg.h"
#include "expect_throws.h"
#include "harness.h"
#include "linalg_util.h"

namespace {

using namespace anvil;
using namespace linalg_util;
using ref::CMatrix;
using ref::Cplx;

class LinalgBackward : public th::DeviceTest {};

const std::vector<DType> kGradDtypes = {kFloat64, kComplex64};

double re_dot(const CMatrix& w, const CMatrix& y) {
  double s = 0;
  for (size_t i = 0; i < w.v.size(); ++i) s += (std::conj(w.v[i]) * y.v[i]).real();
  return s;
}

// dL/dRe(x_e) + i dL/dIm(x_e) by central differences (imaginary directions for complex only).
CMatrix fd_gradient(const std::function<double(const CMatrix&)>& loss, const CMatrix& x, bool complex) {
  const double h = 1e-6;
  CMatrix g(x.rows, x.cols);
  for (size_t e = 0; e < x.v.size(); ++e) {
    CMatrix p = x, m = x;
    p.v[e] += h;
    m.v[e] -= h;
    double im = 0;
    const double re = (loss(p) - loss(m)) / (2 * h);
    if (complex) {
      p = x;
      m = x;
      p.v[e] += Cplx(0, h);
      m.v[e] -= Cplx(0, h);
      im = (loss(p) - loss(m)) / (2 * h);
    }
    g.v[e] = Cplx(re, im);
  }
  return g;
}

void expect_gradient(const Tensor& got, const CMatrix& want, DType t, const std::string& what, int64_t batch = 0) {
  const CMatrix g = from_tensor(got)[static_cast<size_t>(batch)];
  const double tol = (t == kFloat64 ? 1e-6 : 2e-3) * std::max(1.0, ref::max_abs(want));
  EXPECT_LT(ref::max_abs_diff(g, want), tol) << what;
}

CMatrix inverse(const CMatrix& a) { return ref::lu_solve(ref::lu_factor(a), ref::identity(a.rows)); }
CMatrix solve(const CMatrix& a, const CMatrix& b) { return ref::lu_solve(ref::lu_factor(a), b); }

// Tensor of one matrix (no batch dims) and the mats' double values as the dtype rounds them.
struct Input {
  CMatrix m;
  Tensor t;
};
Input input(int64_t rows, int64_t cols, DType t, uint64_t seed, Device dev, double shift = 0) {
  const CMatrix m = rounded(random_mats(1, rows, cols, t, seed, shift), t)[0];
  return {m, to_tensor({m}, {}, rows, cols, t, dev)};
}

TEST_P(LinalgBackward, Det) {
  for (DType t : kGradDtypes) {
    SCOPED_TRACE(th::dtype_str(t));
    const bool cx = t == kComplex64;
    // An invertible 4x4, a singular one (rank 3: its last row the sum of the others), and 1x1.
    CMatrix sing = rounded(random_mats(1, 4, 4, t, 2), t)[0];
    for (int64_t j = 0; j < 4; ++j) sing.at(3, j) = sing.at(0, j) + sing.at(1, j) + sing.at(2, j);
    for (const CMatrix& a : {rounded(random_mats(1, 4, 4, t, 1, 1.0), t)[0], sing, rounded(random_mats(1, 1, 1, t, 3), t)[0]}) {
      const Tensor A = to_tensor({a}, {}, a.rows, a.cols, t, dev());
      const CMatrix w = rounded(random_mats(1, 1, 1, t, 4), t)[0];
      const Tensor W = to_tensor({w}, {}, 1, 1, t, dev()).reshape({});
      const Tensor g = linalg::det_backward(W, A, linalg::det(A));
      auto loss = [&](const CMatrix& x) {
        CMatrix d(1, 1);
        d.at(0, 0) = ref::det(ref::lu_factor(x));
        return re_dot(w, d);
      };
      expect_gradient(g.reshape({a.rows, a.cols}), fd_gradient(loss, a, cx), t, "det " + std::to_string(a.rows));
    }
  }
}

TEST_P(LinalgBackward, Inv) {
  for (DType t : kGradDtypes) {
    SCOPED_TRACE(th::dtype_str(t));
    const Input a = input(4, 4, t, 5, dev(), 1.0), w = input(4, 4, t, 6, dev());
    const Tensor g = linalg::inv_backward(w.t, linalg::inv(a.t));
    expect_gradient(g, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, inverse(x)); }, a.m, t == kComplex64), t,
                    "inv");
  }
}

TEST_P(LinalgBackward, SolveEveryForm) {
  for (DType t : kGradDtypes)
    for (bool left : {true, false}) {
      SCOPED_TRACE(th::dtype_str(t) + (left ? " left" : " right"));
      const bool cx = t == kComplex64;
      const Input a = input(4, 4, t, 7, dev(), 1.0);
      const Input b = left ? input(4, 2, t, 8, dev()) : input(2, 4, t, 8, dev());
      const Input w = left ? input(4, 2, t, 9, dev()) : input(2, 4, t, 9, dev());
      const Tensor X = linalg::solve(a.t, b.t, left);
      auto [ga, gb] = linalg::solve_backward(w.t, a.t, b.t, X, left);
      auto f = [&](const CMatrix& am, const CMatrix& bm) {
        return left ? solve(am, bm) : ref::adjoint(solve(ref::adjoint(am), ref::adjoint(bm)));
      };
      expect_gradient(ga, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, f(x, b.m)); }, a.m, cx), t, "gA");
      expect_gradient(gb, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, f(a.m, x)); }, b.m, cx), t, "gB");
    }
  // A broadcast over B's batch (gA summed over it), and a vector B.
  const Input a = input(3, 3, kFloat64, 10, dev(), 1.0);
  const auto bs = random_mats(2, 3, 1, kFloat64, 11), ws = random_mats(2, 3, 1, kFloat64, 12);
  const Tensor B = to_tensor(bs, {2}, 3, 1, kFloat64, dev()), W = to_tensor(ws, {2}, 3, 1, kFloat64, dev());
  const Tensor A1 = a.t.unsqueeze(0);
  auto [ga, gb] = linalg::solve_backward(W, A1, B, linalg::solve(A1, B));
  EXPECT_EQ(ga.sizes(), (Shape{1, 3, 3}));
  EXPECT_EQ(gb.sizes(), (Shape{2, 3, 1}));
  auto loss = [&](const CMatrix& x) { return re_dot(ws[0], solve(x, bs[0])) + re_dot(ws[1], solve(x, bs[1])); };
  expect_gradient(ga.squeeze(0), fd_gradient(loss, a.m, false), kFloat64, "broadcast gA");
  const Tensor b1 = B.select(0, 0).squeeze(-1), w1 = W.select(0, 0).squeeze(-1);
  auto [gav, gbv] = linalg::solve_backward(w1, a.t, b1, linalg::solve(a.t, b1));
  EXPECT_EQ(gbv.sizes(), (Shape{3}));
  auto loss1 = [&](const CMatrix& x) { return re_dot(ws[0], solve(x, bs[0])); };
  expect_gradient(gav, fd_gradient(loss1, a.m, false), kFloat64, "vector gA");
  expect_gradient(gbv.unsqueeze(-1), fd_gradient([&](const CMatrix& x) { return re_dot(ws[0], solve(a.m, x)); }, bs[0], false),
                  kFloat64, "vector gB");
}

TEST_P(LinalgBackward, LuSolveEveryForm) {
  for (DType t : kGradDtypes)
    for (bool left : {true, false})
      for (bool adjoint : {false, true}) {
        SCOPED_TRACE(th::dtype_str(t) + (left ? " left" : " right") + (adjoint ? " adjoint" : ""));
        const bool cx = t == kComplex64;
        const Input a = input(4, 4, t, 13, dev(), 1.0);
        auto [LU, pivots] = linalg::lu_factor(a.t);
        const CMatrix lu = from_tensor(LU)[0];
        ref::LuFactors f;
        f.lu = lu;
        f.pivots = ints_of(pivots);
        const Input b = left ? input(4, 3, t, 14, dev()) : input(3, 4, t, 14, dev());
        const Input w = left ? input(4, 3, t, 15, dev()) : input(3, 4, t, 15, dev());
        const Tensor X = linalg::lu_solve(LU, pivots, b.t, left, adjoint);
        auto [glu, gb] = linalg::lu_solve_backward(w.t, LU, pivots, b.t, X, left, adjoint);
        // X from factors (P L U = A): op(A) X = B or X op(A) = B, op = adjoint or identity.
        auto f_of = [&](const CMatrix& factors, const CMatrix& bm) {
          ref::LuFactors g = f;
          g.lu = factors;
          const CMatrix A = ref::lu_product(g);
          const CMatrix opA = adjoint ? ref::adjoint(A) : A;
          return left ? solve(opA, bm) : ref::adjoint(solve(ref::adjoint(opA), ref::adjoint(bm)));
        };
        expect_gradient(glu, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, f_of(x, b.m)); }, lu, cx), t, "gLU");
        expect_gradient(gb, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, f_of(lu, x)); }, b.m, cx), t, "gB");
      }
}

TEST_P(LinalgBackward, SolveTriangularEveryForm) {
  for (DType t : kGradDtypes)
    for (bool upper : {false, true})
      for (bool left : {true, false})
        for (bool unit : {false, true}) {
          SCOPED_TRACE(th::dtype_str(t) + (upper ? " upper" : " lower") + (left ? " left" : " right") +
                       (unit ? " unit" : ""));
          const bool cx = t == kComplex64;
          const Input a = input(4, 4, t, 16, dev(), 2.0);
          const Input b = left ? input(4, 2, t, 17, dev()) : input(2, 4, t, 17, dev());
          const Input w = left ? input(4, 2, t, 18, dev()) : input(2, 4, t, 18, dev());
          const Tensor X = linalg::solve_triangular(a.t, b.t, upper, left, unit);
          auto [ga, gb] = linalg::solve_triangular_backward(w.t, a.t, b.t, X, upper, left, unit);
          auto f = [&](const CMatrix& am, const CMatrix& bm) {
            CMatrix tri(4, 4);
            for (int64_t i = 0; i < 4; ++i)
              for (int64_t j = 0; j < 4; ++j)
                if (i == j) tri.at(i, j) = unit ? Cplx(1.0) : am.at(i, j);
                else if (upper ? j > i : j < i) tri.at(i, j) = am.at(i, j);
            return left ? solve(tri, bm) : ref::adjoint(solve(ref::adjoint(tri), ref::adjoint(bm)));
          };
          expect_gradient(ga, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, f(x, b.m)); }, a.m, cx), t, "gA");
          expect_gradient(gb, fd_gradient([&](const CMatrix& x) { return re_dot(w.m, f(a.m, x)); }, b.m, cx), t, "gB");
        }
}

// Cholesky's gradient is the symmetrised one (A Hermitian): checked through A = X X^H + 4 I,
// whose gradient in X is (gA + gA^H) X.
CMatrix ref_cholesky(const CMatrix& a) {
  const int64_t n = a.rows;
  CMatrix l(n, n);
  for (int64_t j = 0; j < n; ++j) {
    double d = a.at(j, j).real();
    for (int64_t k = 0; k < j; ++k) d -= std::norm(l.at(j, k));
    l.at(j, j) = std::sqrt(d);
    for (int64_t i = j + 1; i < n; ++i) {
      Cplx s = a.at(i, j);
      for (int64_t k = 0; k < j; ++k) s -= l.at(i, k) * std::conj(l.at(j, k));
      l.at(i, j) = s / l.at(j, j);
    }
  }
  return l;
}

TEST_P(LinalgBackward, Cholesky) {
  for (DType t : kGradDtypes)
    for (bool upper : {false, true}) {
      SCOPED_TRACE(th::dtype_str(t) + (upper ? " upper" : " lower"));
      const bool cx = t == kComplex64;
      const Input x = input(4, 4, t, 19, dev());
      auto spd = [](const CMatrix& xm) {
        CMatrix a = ref::matmul(xm, ref::adjoint(xm));
        for (int64_t i = 0; i < a.rows; ++i) a.at(i, i) += 4.0;
        return a;
      };
      const CMatrix a = spd(x.m);
      const Tensor A = to_tensor({a}, {}, 4, 4, t, dev());
      const Input w = input(4, 4, t, 20, dev());
      const Tensor L = linalg::cholesky(A, upper);
      const CMatrix ga = from_tensor(linalg::cholesky_backward(w.t, L, upper))[0];
      CMatrix sym = ga;
      const CMatrix gah = ref::adjoint(ga);
      for (size_t e = 0; e < sym.v.size(); ++e) sym.v[e] += gah.v[e];
      const CMatrix gx = ref::matmul(sym, x.m);
      auto loss = [&](const CMatrix& xm) {
        const CMatrix l = ref_cholesky(spd(xm));
        return re_dot(w.m, upper ? ref::adjoint(l) : l);
      };
      const CMatrix want = fd_gradient(loss, x.m, cx);
      EXPECT_LT(ref::max_abs_diff(gx, want), (t == kFloat64 ? 1e-6 : 2e-3) * std::max(1.0, ref::max_abs(want)));
    }
}

CMatrix diag(const std::vector<double>& d) {
  CMatrix out(static_cast<int64_t>(d.size()), static_cast<int64_t>(d.size()));
  for (size_t i = 0; i < d.size(); ++i) out.at(static_cast<int64_t>(i), static_cast<int64_t>(i)) = d[i];
  return out;
}
CMatrix first_rows(const CMatrix& a, int64_t count) {
  CMatrix out(count, a.cols);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < a.cols; ++j) out.at(i, j) = a.at(i, j);
  return out;
}
CMatrix first_cols(const CMatrix& a, int64_t count) { return ref::adjoint(first_rows(ref::adjoint(a), count)); }
CMatrix entrywise(const CMatrix& a, const CMatrix& b) {
  CMatrix out = a;
  for (size_t e = 0; e < a.v.size(); ++e) out.v[e] *= b.v[e];
  return out;
}
CMatrix plus(CMatrix a, const CMatrix& b) {
  for (size_t e = 0; e < a.v.size(); ++e) a.v[e] += b.v[e];
  return a;
}

// L = Re sum(conj(W) (Q M R)) + sum(V |R|^2) (M, V real): gQ = W R^H M, gR = M Q^H W + 2 V R.
TEST_P(LinalgBackward, QrReducedTallWideSquare) {
  for (DType t : kGradDtypes)
    for (auto [m, n] : {std::pair<int64_t, int64_t>{5, 3}, {3, 5}, {4, 4}}) {
      SCOPED_TRACE(th::dtype_str(t) + " " + std::to_string(m) + "x" + std::to_string(n));
      const bool cx = t == kComplex64;
      const int64_t k = std::min(m, n);
      const Input a = input(m, n, t, 21 + m, dev(), 1.0);
      const Input w = input(m, n, t, 22, dev());
      CMatrix v = random_mats(1, k, n, kFloat64, 23)[0];
      const std::vector<double> mvals = {0.7, -1.3, 0.4, 1.1};
      const CMatrix M = diag(std::vector<double>(mvals.begin(), mvals.begin() + k));
      auto [Q, R] = linalg::qr(a.t);
      const CMatrix q = from_tensor(Q)[0], r = from_tensor(R)[0];
      const CMatrix gq = ref::matmul(ref::matmul(w.m, ref::adjoint(r)), M);
      CMatrix two_v = v;
      for (Cplx& e : two_v.v) e *= 2.0;
      const CMatrix gr = plus(ref::matmul(ref::matmul(M, ref::adjoint(q)), w.m), entrywise(two_v, r));
      const Tensor g = linalg::qr_backward(to_tensor({gq}, {}, m, k, t, dev()), to_tensor({gr}, {}, k, n, t, dev()), Q, R);
      auto loss = [&](const CMatrix& x) {
        const ref::QrFactors f = ref::householder_qr(x);
        const CMatrix qk = first_cols(f.q, k), rk = first_rows(f.r, k);
        double l = re_dot(w.m, ref::matmul(ref::matmul(qk, M), rk));
        for (size_t e = 0; e < rk.v.size(); ++e) l += v.v[e].real() * std::norm(rk.v[e]);
        return l;
      };
      expect_gradient(g, fd_gradient(loss, a.m, cx), t, "qr");
    }
  const Tensor A = ones({4, 2}, TensorOptions(kFloat64).device(dev()));
  auto [Q, R] = linalg::qr(A, "complete");
  EXPECT_THROWS_SAYING(ValueError, "linalg.qr_backward",
                       "The QR decomposition is not differentiable when mode='complete' and nrows > ncols.",
                       linalg::qr_backward(Q, R, Q, R, "complete"));
  EXPECT_THROWS_SAYING(ValueError, "linalg.qr_backward", "which is not computed when mode='r'",
                       linalg::qr_backward(Tensor(), R, Q, R, "r"));
}

// L = Re sum(conj(W) (U_k D Vh_k)) + sum(w_s S) (D real diagonal): gU = W Vh^H D, gVh = D U^H W,
// gS = w_s; also S alone, and full U / Vh (their extra columns / rows carry no gradient).
TEST_P(LinalgBackward, SvdTallWideSquareAndPhase) {
  for (DType t : kGradDtypes)
    for (auto [m, n] : {std::pair<int64_t, int64_t>{5, 3}, {3, 5}, {4, 4}})
      for (bool full : {false, true}) {
        SCOPED_TRACE(th::dtype_str(t) + " " + std::to_string(m) + "x" + std::to_string(n) + (full ? " full" : ""));
        const bool cx = t == kComplex64;
        const int64_t k = std::min(m, n);
        const Input a = input(m, n, t, 31 + m, dev());
        const Input w = input(m, n, t, 32, dev());
        const std::vector<double> dvals = {0.8, -1.1, 0.5, 1.3};
        const CMatrix D = diag(std::vector<double>(dvals.begin(), dvals.begin() + k));
        const std::vector<double> ws = {0.3, -0.9, 1.7, 0.2};
        auto [U, S, Vh] = linalg::svd(a.t, full);
        const CMatrix u = first_cols(from_tensor(U)[0], k), vh = first_rows(from_tensor(Vh)[0], k);
        CMatrix gu = ref::matmul(ref::matmul(w.m, ref::adjoint(vh)), D), gvh = ref::matmul(ref::matmul(D, ref::adjoint(u)), w.m);
        // Full matrices: gradients on the extra columns / rows are ignored; fill them with noise.
        CMatrix gu_full = random_mats(1, m, full ? m : k, kFloat64, 33)[0], gvh_full = random_mats(1, full ? n : k, n, kFloat64, 34)[0];
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k; ++j) gu_full.at(i, j) = gu.at(i, j);
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < n; ++j) gvh_full.at(i, j) = gvh.at(i, j);
        const Tensor gS = anvil::tensor(std::vector<double>(ws.begin(), ws.begin() + k)).to(S.dtype()).to(dev());
        const Tensor g = linalg::svd_backward(to_tensor({gu_full}, {}, m, gu_full.cols, t, dev()), gS,
                                              to_tensor({gvh_full}, {}, gvh_full.rows, n, t, dev()), U, S, Vh);
        auto loss = [&](const CMatrix& x) {
          const ref::SvdFactors f = ref::jacobi_svd(x);
          double l = re_dot(w.m, ref::matmul(ref::matmul(f.u, D), ref::adjoint(f.v)));
          for (int64_t i = 0; i < k; ++i) l += ws[i] * f.s[i];
          return l;
        };
        expect_gradient(g, fd_gradient(loss, a.m, cx), t, "svd");
        // S alone (svdvals' gradient).
        const Tensor gs_only = linalg::svd_backward(Tensor(), gS, Tensor(), U, S, Vh);
        auto loss_s = [&](const CMatrix& x) {
          const ref::SvdFactors f = ref::jacobi_svd(x);
          double l = 0;
          for (int64_t i = 0; i < k; ++i) l += ws[i] * f.s[i];
          return l;
        };
        expect_gradient(gs_only, fd_gradient(loss_s, a.m, cx), t, "svdvals");
        if (cx && !full) {
          // A loss on U's phase: gU = i U.
          const Tensor phase = mul(U, anvil::tensor(std::vector<std::complex<float>>{{0, 1}}).to(dev()).reshape({}));
          EXPECT_THROWS_SAYING(LinAlgError, "linalg.svd_backward", "depends on this phase term, making it ill-defined.",
                               linalg::svd_backward(phase, Tensor(), Tensor(), U, S, Vh));
        }
      }
}

ANVIL_INSTANTIATE_DEVICE_TESTS(LinalgBackward);

}  // namespace
