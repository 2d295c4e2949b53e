// torch.linalg's orthogonal factorisations and what they make reliable (qr, svd, svdvals, pinv,
// lstsq) in float32, float64 and complex64 against the float64 references of
// tests/reference/ref_linalg (Householder QR, one-sided Jacobi SVD): the values that are unique
// (|R|, singular values, pseudo-inverses, minimum-norm solutions) against the reference, the rest
// by properties that do not depend on sign or phase choices (Q R = A with Q unitary, U S Vh = A
// with U, V unitary). Tolerances are multiples of the dtype's unit roundoff times the sizes.
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>

#include "anvil/linalg.h"
#include "expect_throws.h"
#include "harness.h"
#include "linalg_util.h"

namespace {

using namespace anvil;
using namespace linalg_util;
using ref::CMatrix;
using ref::Cplx;

class LinalgFactor : public th::DeviceTest {};

struct Case {
  Shape batch;
  int64_t m, n;
};

// 1x1, small, tall, wide, odd sizes, batches (cuBLAS's batched QR and cuSOLVER's batched Jacobi
// SVD on CUDA: many matrices up to 32x32), one matrix past 32 (gesvdj), a tall one past 256
// (cuSOLVER's geqrf) and an empty batch.
const std::vector<Case> kCases = {{{}, 1, 1},  {{}, 4, 4},   {{}, 7, 4},    {{}, 4, 7},  {{3}, 5, 3},
                                  {{2, 2}, 3, 5}, {{40}, 16, 16}, {{}, 64, 64}, {{}, 300, 20}, {{0}, 3, 3}};

double orthonormal_error(const CMatrix& q) {  // ||Q^H Q - I||_max
  return ref::max_abs_diff(ref::matmul(ref::adjoint(q), q), ref::identity(q.cols));
}

CMatrix columns(const CMatrix& a, int64_t count) {
  CMatrix out(a.rows, count);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < count; ++j) out.at(i, j) = a.at(i, j);
  return out;
}

CMatrix scaled_columns(const CMatrix& a, const std::vector<double>& s) {
  CMatrix out = a;
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) out.at(i, j) *= s[static_cast<size_t>(j)];
  return out;
}

std::vector<double> values_of(const Tensor& t) { return th::to_array(th::to_cpu(t)).v; }
TensorOptions opts_of(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }

// QR adds the CPU's blocked forms (one matrix with >= 256 reflectors, tall and wide).
std::vector<Case> qr_cases() {
  std::vector<Case> cases = kCases;
  cases.push_back({{}, 300, 260});
  cases.push_back({{}, 258, 300});
  return cases;
}

TEST_P(LinalgFactor, QrEveryMode) {
  for (DType t : kLinalgDtypes)
    for (const Case& c : qr_cases())
      for (bool transposed : {false, true}) {
        SCOPED_TRACE(th::dtype_str(t) + " batch " + shape_str(c.batch) + " " + std::to_string(c.m) + "x" +
                     std::to_string(c.n) + (transposed ? " column-major input" : ""));
        const int64_t count = numel_of(c.batch), k = std::min(c.m, c.n);
        const auto mats = rounded(random_mats(count, c.m, c.n, t, 7 + c.m * 31 + c.n), t);
        const Tensor A = to_tensor(mats, c.batch, c.m, c.n, t, dev(), transposed);
        auto [Q, R] = linalg::qr(A);
        auto [Qc, Rc] = linalg::qr(A, "complete");
        auto [Qr, Rr] = linalg::qr(A, "r");
        EXPECT_EQ(Q.sizes(), with(c.batch, {c.m, k}));
        EXPECT_EQ(R.sizes(), with(c.batch, {k, c.n}));
        EXPECT_EQ(Qc.sizes(), with(c.batch, {c.m, c.m}));
        EXPECT_EQ(Rc.sizes(), with(c.batch, {c.m, c.n}));
        EXPECT_EQ(Qr.sizes(), Shape{0});
        EXPECT_EQ(th::to_bits(Rr), th::to_bits(R));
        const double u = eps_of(t);
        const auto qs = from_tensor(Q), rs = from_tensor(R), qcs = from_tensor(Qc), rcs = from_tensor(Rc);
        for (int64_t b = 0; b < count; ++b) {
          const CMatrix& a = mats[static_cast<size_t>(b)];
          const double scale = std::max(ref::max_abs(a), 1e-300);
          const double tol = 30 * std::max(c.m, c.n) * u;
          EXPECT_LT(orthonormal_error(qs[b]), tol) << "batch " << b;
          EXPECT_LT(orthonormal_error(qcs[b]), tol) << "batch " << b;
          EXPECT_LT(ref::max_abs_diff(ref::matmul(qs[b], rs[b]), a) / scale, tol) << "batch " << b;
          EXPECT_LT(ref::max_abs_diff(ref::matmul(qcs[b], rcs[b]), a) / scale, tol) << "batch " << b;
          // R is upper triangular (exact zeros below), |R| as the reference's.
          const ref::QrFactors f = ref::householder_qr(a);
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = 0; j < c.n; ++j) {
              if (i > j) {
                EXPECT_EQ(rcs[b].at(i, j), Cplx(0.0)) << i << "," << j;
              } else {
                EXPECT_NEAR(std::abs(rcs[b].at(i, j)), std::abs(f.r.at(i, j)), 10 * tol * scale) << i << "," << j;
              }
            }
        }
      }
}

TEST_P(LinalgFactor, QrErrors) {
  const Tensor A = ones({3, 3}, TensorOptions(kFloat32).device(dev()));
  EXPECT_THROWS_SAYING(ValueError, "linalg.qr",
                       "qr received unrecognized mode 'full' but expected one of 'reduced' (default), 'r', or 'complete'",
                       linalg::qr(A, "full"));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.qr", "int32", linalg::qr(ones({3, 3}, TensorOptions(kInt32).device(dev()))));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.qr", "must have at least 2 dimensions", linalg::qr(ones({3}, opts_of(A))));
  // Empty matrices: R zeros of the right shape, complete Q the identity.
  auto [Q, R] = linalg::qr(ones({4, 0}, opts_of(A)), "complete");
  EXPECT_EQ(Q.sizes(), (Shape{4, 4}));
  EXPECT_EQ(R.sizes(), (Shape{4, 0}));
  EXPECT_EQ(values_of(Q), values_of(eye(4, opts_of(A))));
}

// U S Vh = A with U, V unitary; S as the Jacobi reference's, descending and non-negative.
void check_svd(const Tensor& A, const std::vector<CMatrix>& mats, bool full, const Tensor& U, const Tensor& S,
               const Tensor& Vh, double tol) {
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch(A.sizes().begin(), A.sizes().end() - 2);
  ASSERT_EQ(U.sizes(), with(batch, {m, full ? m : k}));
  ASSERT_EQ(S.sizes(), with(batch, {k}));
  ASSERT_EQ(Vh.sizes(), with(batch, {full ? n : k, n}));
  EXPECT_EQ(S.dtype(), A.dtype() == kComplex64 ? kFloat32 : A.dtype());
  const auto us = from_tensor(U), vhs = from_tensor(Vh);
  const std::vector<double> s = values_of(S);
  for (size_t b = 0; b < mats.size(); ++b) {
    const ref::SvdFactors f = ref::jacobi_svd(mats[b]);
    const double smax = std::max(f.s.empty() ? 0.0 : f.s[0], 1e-300);
    std::vector<double> sb(s.begin() + static_cast<int64_t>(b) * k, s.begin() + static_cast<int64_t>(b + 1) * k);
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_GE(sb[i], 0) << "batch " << b << " s" << i;
      if (i > 0) {
        EXPECT_LE(sb[i], sb[i - 1]) << "batch " << b << " s" << i;
      }
      EXPECT_NEAR(sb[i], f.s[i], tol * smax) << "batch " << b << " s" << i;
    }
    EXPECT_LT(orthonormal_error(us[b]), tol) << "batch " << b;
    EXPECT_LT(orthonormal_error(ref::adjoint(vhs[b])), tol) << "batch " << b;
    const CMatrix usv = ref::matmul(scaled_columns(columns(us[b], k), sb), ref::adjoint(columns(ref::adjoint(vhs[b]), k)));
    EXPECT_LT(ref::max_abs_diff(usv, mats[b]) / smax, tol) << "batch " << b;
  }
}

TEST_P(LinalgFactor, SvdMatchesJacobi) {
  for (DType t : kLinalgDtypes)
    for (const Case& c : kCases)
      for (bool full : {false, true}) {
        SCOPED_TRACE(th::dtype_str(t) + " batch " + shape_str(c.batch) + " " + std::to_string(c.m) + "x" +
                     std::to_string(c.n) + (full ? " full" : " reduced"));
        const auto mats = rounded(random_mats(numel_of(c.batch), c.m, c.n, t, 11 + c.m * 7 + c.n), t);
        const Tensor A = to_tensor(mats, c.batch, c.m, c.n, t, dev(), c.m % 2 == 1);
        auto [U, S, Vh] = linalg::svd(A, full);
        check_svd(A, mats, full, U, S, Vh, 40 * std::max(c.m, c.n) * eps_of(t));
        const Tensor s2 = linalg::svdvals(A);
        EXPECT_EQ(s2.sizes(), S.sizes());
        const std::vector<double> a = values_of(S), b = values_of(s2);
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 40 * std::max(c.m, c.n) * eps_of(t) * a[0]);
      }
}

// Rank-deficient matrices (full U, V still unitary: an orthonormal completion), the zero matrix,
// near-singular and Hilbert matrices, entries of magnitude 1e-30 and 1e30.
TEST_P(LinalgFactor, SvdRankDeficientTinyAndExtreme) {
  for (DType t : kLinalgDtypes) {
    SCOPED_TRACE(th::dtype_str(t));
    const double tol = 400 * eps_of(t);
    // rank 2 of 6x4 and 4x6 (X Y^H), and zero matrices.
    for (auto [m, n] : {std::pair<int64_t, int64_t>{6, 4}, {4, 6}, {40, 40}}) {
      const auto x = random_mats(1, m, 2, t, 3), y = random_mats(1, n, 2, t, 4);
      std::vector<CMatrix> mats = rounded({ref::matmul(x[0], ref::adjoint(y[0])), CMatrix(m, n)}, t);
      const Tensor A = to_tensor(mats, {2}, m, n, t, dev());
      auto [U, S, Vh] = linalg::svd(A, true);
      check_svd(A, mats, true, U, S, Vh, tol);
    }
    // Hilbert 8x8 (condition ~1e10): singular values relative to the largest.
    CMatrix h(8, 8);
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 8; ++j) h.at(i, j) = 1.0 / static_cast<double>(i + j + 1);
    const auto hm = rounded({h}, t);
    auto [U, S, Vh] = linalg::svd(to_tensor(hm, {}, 8, 8, t, dev()), false);
    check_svd(to_tensor(hm, {}, 8, 8, t, dev()), hm, false, U, S, Vh, tol);
    // 1e-30 and 1e30 times a matrix: the same singular vectors' products, S scaled exactly.
    for (double scale : {1e-30, 1e30}) {
      SCOPED_TRACE("scale " + std::to_string(scale));
      const auto base = rounded(random_mats(3, 5, 4, t, 9), t);
      std::vector<CMatrix> mats = base;
      for (CMatrix& a : mats)
        for (Cplx& e : a.v) e *= scale;
      mats = rounded(mats, t);
      const Tensor A = to_tensor(mats, {3}, 5, 4, t, dev());
      auto [Ue, Se, Vhe] = linalg::svd(A, true);
      check_svd(A, mats, true, Ue, Se, Vhe, tol);
      const Tensor s = linalg::svdvals(A);
      for (double v : values_of(s)) EXPECT_TRUE(std::isfinite(v) && v > 0) << v;
    }
  }
}

TEST_P(LinalgFactor, SvdDriversAndErrors) {
  const auto mats = random_mats(2, 40, 24, kFloat32, 5);
  const Tensor A = to_tensor(mats, {2}, 40, 24, kFloat32, dev());
  const Tensor W = A.transpose(-2, -1);
  if (dev().type == kCPU) {
    EXPECT_THROWS_SAYING(ValueError, "linalg.svd",
                         "keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend.",
                         linalg::svd(A, true, "gesvd"));
  } else {
    for (const char* d : {"gesvd", "gesvdj"})
      for (bool full : {false, true}) {
        SCOPED_TRACE(std::string(d) + (full ? " full" : " reduced"));
        auto [U, S, Vh] = linalg::svd(A, full, d);
        check_svd(A, mats, full, U, S, Vh, 2000 * eps_of(kFloat32));
        auto [Uw, Sw, Vhw] = linalg::svd(W, full, d);  // gesvd on A^H
        check_svd(W, {ref::adjoint(mats[0]), ref::adjoint(mats[1])}, full, Uw, Sw, Vhw, 2000 * eps_of(kFloat32));
        const auto small = random_mats(5, 6, 3, kFloat32, 8);  // gesvdjBatched under the default
        const Tensor As = to_tensor(small, {5}, 6, 3, kFloat32, dev());
        auto [Us, Ss, Vhs] = linalg::svd(As, full, d);
        check_svd(As, small, full, Us, Ss, Vhs, 2000 * eps_of(kFloat32));
      }
    EXPECT_THROWS_SAYING(ValueError, "linalg.svd", "'gesvda'", linalg::svd(A, true, "gesvda"));
    EXPECT_THROWS_SAYING(ValueError, "linalg.svd", "unknown svd driver qr", linalg::svd(A, true, "qr"));
  }
  EXPECT_THROWS_SAYING(DTypeError, "linalg.svd", "float16", linalg::svd(A.to(kFloat16)));
  // Empty inputs: S empty, full U / Vh the identity.
  auto [U, S, Vh] = linalg::svd(zeros({3, 0}, opts_of(A)), true);
  EXPECT_EQ(U.sizes(), (Shape{3, 3}));
  EXPECT_EQ(S.sizes(), (Shape{0}));
  EXPECT_EQ(Vh.sizes(), (Shape{0, 0}));
  EXPECT_EQ(values_of(U), values_of(eye(3, opts_of(A))));
}

// The reference pseudo-inverse: V diag(1 / s) U^H over s > cutoff.
CMatrix ref_pinv(const CMatrix& a, double cutoff) {
  const ref::SvdFactors f = ref::jacobi_svd(a);
  std::vector<double> inv(f.s.size());
  for (size_t i = 0; i < f.s.size(); ++i) inv[i] = f.s[i] > cutoff ? 1 / f.s[i] : 0.0;
  return ref::matmul(scaled_columns(f.v, inv), ref::adjoint(f.u));
}

TEST_P(LinalgFactor, PinvDropsTinySingularValues) {
  for (DType t : kLinalgDtypes) {
    SCOPED_TRACE(th::dtype_str(t));
    const double u = eps_of(t);
    // Full-rank tall / wide, and a rank-2 6x5 (X Y^H) whose other singular values are rounding.
    for (auto [m, n] : {std::pair<int64_t, int64_t>{7, 4}, {4, 7}, {33, 33}}) {
      const auto mats = rounded(random_mats(2, m, n, t, 21 + m), t);
      const Tensor X = linalg::pinv(to_tensor(mats, {2}, m, n, t, dev()));
      EXPECT_EQ(X.sizes(), (Shape{2, n, m}));
      const auto xs = from_tensor(X);
      for (size_t b = 0; b < 2; ++b) {
        const CMatrix want = ref_pinv(mats[b], 0);
        EXPECT_LT(ref::max_abs_diff(xs[b], want) / ref::max_abs(want), 2000 * std::max(m, n) * u) << "batch " << b;
      }
    }
    const auto x = random_mats(1, 6, 2, t, 3), y = random_mats(1, 5, 2, t, 4);
    const auto low = rounded({ref::matmul(x[0], ref::adjoint(y[0]))}, t);
    const Tensor L = to_tensor(low, {}, 6, 5, t, dev());
    const CMatrix xl = from_tensor(linalg::pinv(L, std::nullopt, 1e-4))[0];
    for (const Cplx& e : xl.v) EXPECT_TRUE(std::isfinite(e.real()) && std::isfinite(e.imag()));
    const double smax = ref::jacobi_svd(low[0]).s[0];
    const CMatrix want = ref_pinv(low[0], 1e-4 * smax);
    EXPECT_LT(ref::max_abs_diff(xl, want) / ref::max_abs(want), 1e4 * u);
    // Moore-Penrose: A X A = A.
    EXPECT_LT(ref::max_abs_diff(ref::matmul(ref::matmul(low[0], xl), low[0]), low[0]) / ref::max_abs(low[0]), 1e4 * u);
    // atol / rtol: s = (4, 1e-2, 1e-5) with rtol 1e-4 keeps two, atol 0.1 keeps one, the
    // default (eps * 3) all three.
    CMatrix d(3, 3);
    d.at(0, 0) = 4;
    d.at(1, 1) = 1e-2;
    d.at(2, 2) = 1e-5;
    const Tensor D = to_tensor({d}, {}, 3, 3, t, dev());
    const CMatrix r1 = from_tensor(linalg::pinv(D, std::nullopt, 1e-4))[0];
    EXPECT_NEAR(r1.at(1, 1).real(), 100, 100 * 10 * u);
    EXPECT_EQ(r1.at(2, 2), Cplx(0.0));
    const CMatrix r2 = from_tensor(linalg::pinv(D, 0.1))[0];
    EXPECT_NEAR(r2.at(0, 0).real(), 0.25, 10 * u);
    EXPECT_EQ(r2.at(1, 1), Cplx(0.0));
    const CMatrix r3 = from_tensor(linalg::pinv(D))[0];
    EXPECT_NEAR(r3.at(2, 2).real(), 1e5, 1e5 * 100 * u);
    // hermitian: only the lower triangle is read.
    auto h = rounded(random_mats(1, 5, 5, t, 30), t)[0];
    for (int64_t i = 0; i < 5; ++i) {
      h.at(i, i) = Cplx(h.at(i, i).real() + 3, 0);
      for (int64_t j = 0; j < i; ++j) h.at(j, i) = std::conj(h.at(i, j));
    }
    CMatrix garbage = h;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = i + 1; j < 5; ++j) garbage.at(i, j) = 7.0;
    const CMatrix xh = from_tensor(linalg::pinv(to_tensor({garbage}, {}, 5, 5, t, dev()), std::nullopt, std::nullopt, true))[0];
    const CMatrix wanth = ref_pinv(h, 0);
    EXPECT_LT(ref::max_abs_diff(xh, wanth) / ref::max_abs(wanth), 2000 * u);
  }
  const Tensor E = linalg::pinv(zeros({2, 0, 3}, TensorOptions(kFloat32).device(dev())));
  EXPECT_EQ(E.sizes(), (Shape{2, 3, 0}));
}

std::vector<const char*> drivers_of(Device d) {
  if (d.type == kCPU) return {"gels", "gelsy", "gelsd", "gelss"};
  return {"gels", "gelsd", "gelss"};
}

TEST_P(LinalgFactor, LstsqEveryDriver) {
  for (DType t : kLinalgDtypes)
    for (const char* driver : drivers_of(dev()))
      for (auto [m, n] : {std::pair<int64_t, int64_t>{9, 4}, {4, 9}, {6, 6}}) {
        SCOPED_TRACE(th::dtype_str(t) + " " + driver + " " + std::to_string(m) + "x" + std::to_string(n));
        const double u = eps_of(t);
        const auto as = rounded(random_mats(2, m, n, t, 40 + m), t);
        const auto bs = rounded(random_mats(2, m, 3, t, 50 + m), t);
        const Tensor A = to_tensor(as, {2}, m, n, t, dev(), true);
        const Tensor B = to_tensor(bs, {2}, m, 3, t, dev());
        auto [X, res, rank, sv] = linalg::lstsq(A, B, std::nullopt, driver);
        ASSERT_EQ(X.sizes(), (Shape{2, n, 3}));
        const std::string d = driver;
        const auto xs = from_tensor(X);
        std::vector<double> want_res;
        for (size_t b = 0; b < 2; ++b) {
          // The minimum-norm least-squares solution A^+ B.
          const CMatrix want = ref::matmul(ref_pinv(as[b], 0), bs[b]);
          EXPECT_LT(ref::max_abs_diff(xs[b], want) / ref::max_abs(want), 3000 * std::max(m, n) * u) << "batch " << b;
          const CMatrix r = ref::matmul(as[b], want);
          for (int64_t j = 0; j < 3; ++j) {
            double s = 0;
            for (int64_t i = 0; i < m; ++i) s += std::norm(r.at(i, j) - bs[b].at(i, j));
            want_res.push_back(s);
          }
        }
        if (m > n && d != "gelsy") {
          ASSERT_EQ(res.sizes(), (Shape{2, 3}));
          const std::vector<double> got = values_of(res);
          for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want_res[i], 1e4 * u * (1 + want_res[i])) << i;
        } else {
          EXPECT_EQ(res.sizes(), Shape{0});
        }
        if (d == "gels") {
          EXPECT_EQ(rank.sizes(), Shape{0});
        } else {
          EXPECT_EQ(rank.dtype(), kInt64);
          EXPECT_EQ(values_of(rank), (std::vector<double>{double(std::min(m, n)), double(std::min(m, n))}));
        }
        if (d == "gelsd" || d == "gelss") {
          ASSERT_EQ(sv.sizes(), (Shape{2, std::min(m, n)}));
          const std::vector<double> got = values_of(sv);
          for (int64_t b = 0; b < 2; ++b) {
            const ref::SvdFactors f = ref::jacobi_svd(as[static_cast<size_t>(b)]);
            for (int64_t i = 0; i < std::min(m, n); ++i)
              EXPECT_NEAR(got[b * std::min(m, n) + i], f.s[i], 500 * u * f.s[0]);
          }
        } else {
          EXPECT_EQ(sv.sizes(), Shape{0});
        }
      }
}

// Rank-deficient A: the rank-revealing drivers give rank 2 and the minimum-norm solution; vector
// right-hand sides and broadcast batches take PyTorch's shapes.
TEST_P(LinalgFactor, LstsqRankDeficientVectorsBroadcastErrors) {
  const DType t = kFloat64;
  const auto x = random_mats(1, 8, 2, t, 3), y = random_mats(1, 5, 2, t, 4);
  const CMatrix a = ref::matmul(x[0], ref::adjoint(y[0]));
  const auto b = random_mats(1, 8, 2, t, 5);
  const Tensor A = to_tensor({a}, {}, 8, 5, t, dev()), B = to_tensor(b, {}, 8, 2, t, dev());
  for (const char* driver : drivers_of(dev())) {
    if (std::string(driver) == "gels") continue;
    SCOPED_TRACE(driver);
    auto [X, res, rank, sv] = linalg::lstsq(A, B, 1e-10, driver);
    EXPECT_EQ(values_of(rank), (std::vector<double>{2}));
    const CMatrix want = ref::matmul(ref_pinv(a, 1e-10 * ref::jacobi_svd(a).s[0]), b[0]);
    EXPECT_LT(ref::max_abs_diff(from_tensor(X)[0], want) / ref::max_abs(want), 1e-9);
    EXPECT_EQ(res.sizes(), Shape{0});  // not of full rank: no residuals
  }
  if (dev().type == kCPU) {
    // gels on an A whose column 2 is zero: R[2, 2] is exactly zero.
    CMatrix z = random_mats(1, 8, 5, t, 9)[0];
    for (int64_t i = 0; i < 8; ++i) z.at(i, 2) = 0.0;
    EXPECT_THROWS_SAYING(LinAlgError, "linalg.lstsq",
                         "The least squares solution could not be computed because the input matrix does not have "
                         "full rank (error code: 3).",
                         linalg::lstsq(to_tensor({z}, {}, 8, 5, t, dev()), B, std::nullopt, "gels"));
  } else {
    EXPECT_THROWS_SAYING(ValueError, "linalg.lstsq", "driver 'gelsy' is not supported on CUDA",
                         linalg::lstsq(A, B, std::nullopt, "gelsy"));
  }
  // A vector B: solution (n), residuals (1).
  const Tensor full = to_tensor(random_mats(1, 8, 5, t, 6), {}, 8, 5, t, dev());
  const Tensor v = B.select(-1, 0);
  auto [xv, rv, kv, sv] = linalg::lstsq(full, v, std::nullopt, "gelsd");
  EXPECT_EQ(xv.sizes(), (Shape{5}));
  EXPECT_EQ(rv.sizes(), (Shape{1}));
  const std::vector<double> x2 = values_of(std::get<0>(linalg::lstsq(full, v.unsqueeze(-1), std::nullopt, "gelsd")));
  const std::vector<double> x1 = values_of(xv);
  for (size_t i = 0; i < x1.size(); ++i) EXPECT_NEAR(x1[i], x2[i], 1e-12);
  // A (2, 1, 8, 5) with B (3, 8, 2): solution (2, 3, 5, 2).
  const Tensor Ab = to_tensor(random_mats(2, 8, 5, t, 7), {2, 1}, 8, 5, t, dev());
  const Tensor Bb = to_tensor(random_mats(3, 8, 2, t, 8), {3}, 8, 2, t, dev());
  EXPECT_EQ(std::get<0>(linalg::lstsq(Ab, Bb)).sizes(), (Shape{2, 3, 5, 2}));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.lstsq", "input.size(-2) should match other.size(-2)",
                       linalg::lstsq(full, zeros({7, 2}, opts_of(full))));
  EXPECT_THROWS_SAYING(ValueError, "linalg.lstsq", "parameter `driver` should be one of (gels, gelsy, gelsd, gelss)",
                       linalg::lstsq(full, B, std::nullopt, "svd"));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.lstsq", "same dtype", linalg::lstsq(full, B.to(kFloat32)));
}

// The ops pinv and lstsq compose from: complex matmul, view_as_real / real / imag, triu / tril.
TEST_P(LinalgFactor, ComplexMatmulTrianglesRealViews) {
  const auto a = rounded(random_mats(2, 3, 4, kComplex64, 1), kComplex64);
  const auto b = rounded(random_mats(2, 4, 2, kComplex64, 2), kComplex64);
  const Tensor A = to_tensor(a, {2}, 3, 4, kComplex64, dev()), B = to_tensor(b, {2}, 4, 2, kComplex64, dev(), true);
  const auto c = from_tensor(matmul(A, B));
  for (size_t i = 0; i < 2; ++i) EXPECT_LT(ref::max_abs_diff(c[i], ref::matmul(a[i], b[i])), 1e-5);
  const Tensor re = real(A), im = imag(A);
  EXPECT_EQ(re.sizes(), A.sizes());
  EXPECT_EQ(re.dtype(), kFloat32);
  const std::vector<double> rv = values_of(re), iv = values_of(im);
  EXPECT_EQ(rv[5], a[0].at(1, 1).real());
  EXPECT_EQ(iv[13], a[1].at(0, 1).imag());
  EXPECT_EQ(view_as_real(A).sizes(), (Shape{2, 3, 4, 2}));
  EXPECT_THROWS_SAYING(DTypeError, "view_as_real", "only supported for complex tensors", view_as_real(re));
  const Tensor F = arange(1, 13, 1, TensorOptions(kFloat32).device(dev())).reshape({3, 4});
  EXPECT_EQ(values_of(triu(F)), (std::vector<double>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}));
  EXPECT_EQ(values_of(triu(F, 1)), (std::vector<double>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}));
  EXPECT_EQ(values_of(tril(F)), (std::vector<double>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}));
  EXPECT_EQ(values_of(tril(F, -1)), (std::vector<double>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}));
  EXPECT_THROWS_SAYING(ShapeError, "triu", "at least 2 dimensions", triu(F.reshape({12})));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(LinalgFactor);

}  // namespace
