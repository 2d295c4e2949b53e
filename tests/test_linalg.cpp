// torch.linalg's LU family (lu_factor, lu, lu_unpack, lu_solve, solve, det, slogdet, inv) in
// float32, float64 and complex64 against the float64 textbook LU (tests/reference/ref_linalg):
// pivots equal, factors within a bound of n u |A|, and residuals (P L U - A, A X - B, A A^-1 -
// I) relative to the sizes involved, which do not depend on the pivot order.
#include <cmath>
#include <complex>
#include <limits>
#include <random>

#include "expect_throws.h"
#include "harness.h"
#include "linalg_util.h"

namespace {

using namespace anvil;
using namespace linalg_util;
using ref::CMatrix;
using ref::Cplx;

class Linalg : public th::DeviceTest {};

// The element of an operand of batch shape `own` that batch element e of the broadcast `batch`
// reads (own right-aligned, its size-1 dims repeated).
int64_t source_index(const Shape& batch, const Shape& own, int64_t e) {
  int64_t index = 0, stride = 1;
  for (size_t d = 0; d < own.size(); ++d) {
    const size_t bd = batch.size() - 1 - d, od = own.size() - 1 - d;
    int64_t rest = e;
    for (size_t q = batch.size() - 1; q > bd; --q) rest /= batch[q];
    const int64_t i = own[od] == 1 ? 0 : rest % batch[bd];
    index += i * stride;
    stride *= own[od];
  }
  return index;
}

struct LuCase {
  Shape batch;
  int64_t m, n;
};

// Tall, wide, 1x1, batches, the cuBLAS batched path (many square < 512), cuSOLVER's (one
// matrix, rectangular, >= 512) and the CPU's blocked LU (one matrix of order >= 256, square,
// tall and wide).
const std::vector<LuCase> kLuCases = {{{}, 1, 1},       {{}, 4, 4},     {{}, 16, 16},   {{}, 33, 33},  {{}, 7, 4},
                                      {{}, 4, 7},       {{3}, 4, 4},    {{2, 3}, 9, 9}, {{600}, 8, 8}, {{5}, 64, 64},
                                      {{2}, 6, 3},      {{}, 520, 520}, {{0}, 3, 3},    {{2}, 0, 0},   {{2}, 3, 0},
                                      {{}, 300, 400},   {{}, 400, 300}};

TEST_P(Linalg, LuFactorMatchesTextbookLu) {
  for (DType t : kLinalgDtypes)
    for (const LuCase& c : kLuCases)
      for (bool transposed : {false, true}) {
        SCOPED_TRACE(th::dtype_str(t) + " " + ref::shape_to_string(with(c.batch, {c.m, c.n})) +
                     (transposed ? " transposed" : ""));
        const int64_t count = numel_of(c.batch);
        const auto mats = rounded(random_mats(count, c.m, c.n, t, 7 + c.m * 31 + c.n), t);
        const Tensor A = to_tensor(mats, c.batch, c.m, c.n, t, dev(), transposed);
        auto [LU, pivots, info] = linalg::lu_factor_ex(A);
        const int64_t k = std::min(c.m, c.n);
        ASSERT_EQ(LU.sizes(), A.sizes());
        ASSERT_EQ(pivots.sizes(), with(c.batch, {k}));
        ASSERT_EQ(info.sizes(), c.batch);
        ASSERT_EQ(pivots.dtype(), kInt32);
        EXPECT_TRUE(LU.transpose(-2, -1).is_contiguous());  // column-major, as PyTorch's
        const auto lus = from_tensor(LU);
        const auto piv = ints_of(pivots), inf = ints_of(info);
        for (int64_t b = 0; b < count; ++b) {
          EXPECT_EQ(inf[b], 0);
          // Backward error: P L U = A to a few n u |A| (random matrices: the growth of U is small).
          ref::LuFactors got;
          got.lu = lus[b];
          got.pivots.assign(piv.begin() + b * k, piv.begin() + (b + 1) * k);
          for (int64_t i = 0; i < k; ++i) ASSERT_TRUE(got.pivots[i] >= i + 1 && got.pivots[i] <= c.m) << "step " << i;
          EXPECT_LE(ref::max_abs_diff(ref::lu_product(got), mats[b]), 4.0 * std::max<int64_t>(k, 1) * eps_of(t))
              << "batch " << b;
          // Values: the textbook LU's where its pivots are clear winners (near-ties may swap
          // under rounding at large n); the factors' forward error grows with the pivots' ratios.
          if (k > 64) continue;
          const ref::LuFactors want = ref::lu_factor(mats[b]);
          for (int64_t i = 0; i < k; ++i) ASSERT_EQ(got.pivots[i], want.pivots[i]) << "batch " << b << " step " << i;
          const double tol = 64.0 * std::max<int64_t>(k, 1) * eps_of(t) * std::max(1.0, ref::max_abs(want.lu));
          ASSERT_LE(ref::max_abs_diff(lus[b], want.lu), tol) << "batch " << b;
        }
      }
}

TEST_P(Linalg, LuUnpackRebuildsA) {
  for (DType t : kLinalgDtypes)
    for (const LuCase& c : kLuCases) {
      SCOPED_TRACE(th::dtype_str(t) + " " + ref::shape_to_string(with(c.batch, {c.m, c.n})));
      if (c.m > 100) continue;  // the triple products below
      const int64_t count = numel_of(c.batch), k = std::min(c.m, c.n);
      const auto mats = rounded(random_mats(count, c.m, c.n, t, 11 + c.m), t);
      auto [P, L, U] = linalg::lu(to_tensor(mats, c.batch, c.m, c.n, t, dev()));
      ASSERT_EQ(P.sizes(), with(c.batch, {c.m, c.m}));
      ASSERT_EQ(L.sizes(), with(c.batch, {c.m, k}));
      ASSERT_EQ(U.sizes(), with(c.batch, {k, c.n}));
      const auto ps = from_tensor(P), ls = from_tensor(L), us = from_tensor(U);
      for (int64_t b = 0; b < count; ++b) {
        for (int64_t i = 0; i < c.m; ++i) {  // a permutation matrix; L unit lower, U upper
          double row = 0;
          for (int64_t j = 0; j < c.m; ++j) row += std::abs(ps[b].at(i, j));
          ASSERT_EQ(row, 1.0);
          for (int64_t j = i; j < k; ++j) ASSERT_EQ(ls[b].at(i, j), Cplx(i == j ? 1.0 : 0.0));
        }
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < i; ++j) ASSERT_EQ(us[b].at(i, j), Cplx(0.0));
        const CMatrix plu = ref::matmul(ps[b], ref::matmul(ls[b], us[b]));
        EXPECT_LE(ref::max_abs_diff(plu, mats[b]), 8.0 * std::max<int64_t>(k, 1) * eps_of(t)) << "batch " << b;
      }
    }
  // unpack flags: empty outputs where not asked for.
  const Tensor A = to_tensor(random_mats(1, 3, 3, kFloat32, 1), {}, 3, 3, kFloat32, dev());
  auto [LU, piv] = linalg::lu_factor(A);
  auto [P, L, U] = linalg::lu_unpack(LU, piv, false, true);
  EXPECT_EQ(P.sizes(), (Shape{3, 3}));
  EXPECT_EQ(L.numel(), 0);
  EXPECT_EQ(U.numel(), 0);
}

TEST_P(Linalg, LuWithoutPivoting) {
  for (DType t : kLinalgDtypes)
    for (const LuCase& c : kLuCases) {
      SCOPED_TRACE(th::dtype_str(t) + " " + ref::shape_to_string(with(c.batch, {c.m, c.n})));
      const int64_t count = numel_of(c.batch), k = std::min(c.m, c.n);
      // Diagonally dominant: no pivoting needed for a stable LU.
      const auto mats = rounded(random_mats(count, c.m, c.n, t, 5 + c.n, 2.0 * std::max(c.m, c.n)), t);
      auto [LU, pivots, info] = linalg::lu_factor_ex(to_tensor(mats, c.batch, c.m, c.n, t, dev()), false);
      const auto lus = from_tensor(LU);
      const auto piv = ints_of(pivots), inf = ints_of(info);
      for (int64_t b = 0; b < count; ++b) {
        const ref::LuFactors want = ref::lu_factor(mats[b], false);
        EXPECT_EQ(inf[b], 0);
        for (int64_t i = 0; i < k; ++i) ASSERT_EQ(piv[b * k + i], i + 1);
        ASSERT_LE(ref::max_abs_diff(lus[b], want.lu), 8.0 * std::max<int64_t>(k, 1) * eps_of(t) * ref::max_abs(want.lu));
      }
    }
}

// max |op(A) X - B| / (n u |A| |X|): small for a backward-stable solve, whatever the pivots.
double solve_residual(const CMatrix& a, const CMatrix& x, const CMatrix& b, DType t) {
  const CMatrix r = ref::matmul(a, x);
  return ref::max_abs_diff(r, b) / (std::max<int64_t>(a.rows, 1) * eps_of(t) * std::max(1e-300, ref::max_abs(a) * ref::max_abs(x)));
}

TEST_P(Linalg, LuSolveEveryForm) {
  struct SolveCase {
    Shape a_batch, b_batch;
    int64_t n, k;
  };
  const std::vector<SolveCase> cases = {{{}, {}, 4, 1},      {{}, {}, 16, 5},     {{3}, {3}, 8, 2},   {{2, 1}, {3}, 5, 3},
                                        {{}, {4}, 6, 2},     {{40}, {40}, 8, 8},  {{}, {}, 520, 3},   {{2}, {2}, 0, 3},
                                        {{2}, {2}, 3, 0},    {{0}, {0}, 3, 2}};
  for (DType t : kLinalgDtypes)
    for (const SolveCase& c : cases)
      for (bool left : {true, false})
        for (bool adjoint : {false, true}) {
          SCOPED_TRACE(th::dtype_str(t) + " A " + ref::shape_to_string(with(c.a_batch, {c.n, c.n})) + " k " +
                       std::to_string(c.k) + (left ? " left" : " right") + (adjoint ? " adjoint" : ""));
          const auto as = rounded(random_mats(numel_of(c.a_batch), c.n, c.n, t, 3 + c.n, 2.0), t);
          const int64_t br = left ? c.n : c.k, bc = left ? c.k : c.n;
          const auto bs = rounded(random_mats(numel_of(c.b_batch), br, bc, t, 9 + c.k), t);
          const Tensor A = to_tensor(as, c.a_batch, c.n, c.n, t, dev());
          const Tensor B = to_tensor(bs, c.b_batch, br, bc, t, dev(), /*transposed=*/adjoint);
          auto [LU, pivots] = linalg::lu_factor(A);
          const Tensor X = linalg::lu_solve(LU, pivots, B, left, adjoint);
          const Shape batch = broadcast_shapes(c.a_batch, c.b_batch);
          ASSERT_EQ(X.sizes(), with(batch, {br, bc}));
          const auto xs = from_tensor(X);
          for (int64_t e = 0; e < numel_of(batch); ++e) {
            const CMatrix& a0 = as[static_cast<size_t>(source_index(batch, c.a_batch, e))];
            const CMatrix& b0 = bs[static_cast<size_t>(source_index(batch, c.b_batch, e))];
            const CMatrix a = adjoint ? ref::adjoint(a0) : a0;
            const double res = left ? solve_residual(a, xs[e], b0, t)
                                    : solve_residual(ref::transpose(a), ref::transpose(xs[e]), ref::transpose(b0), t);
            EXPECT_LE(res, 4.0) << "batch " << e;
          }
        }
}

TEST_P(Linalg, SolveVectorsAndBroadcast) {
  for (DType t : kLinalgDtypes) {
    SCOPED_TRACE(th::dtype_str(t));
    const auto as = rounded(random_mats(6, 5, 5, t, 21, 2.0), t);
    const Tensor A = to_tensor(as, {2, 3}, 5, 5, t, dev());
    // B (n): one vector for every matrix; B (2, 3, n): one per matrix; B (3, 5, 2): broadcast.
    const auto v = rounded(random_mats(1, 5, 1, t, 22), t);
    const Tensor x1 = linalg::solve(A, to_tensor(v, {}, 5, 1, t, dev()).squeeze(-1));
    ASSERT_EQ(x1.sizes(), (Shape{2, 3, 5}));
    const auto vs = rounded(random_mats(6, 5, 1, t, 23), t);
    const Tensor x2 = linalg::solve(A, to_tensor(vs, {2, 3}, 5, 1, t, dev()).squeeze(-1));
    ASSERT_EQ(x2.sizes(), (Shape{2, 3, 5}));
    const auto ms = rounded(random_mats(3, 5, 2, t, 24), t);
    const Tensor x3 = linalg::solve(A, to_tensor(ms, {3}, 5, 2, t, dev()));
    ASSERT_EQ(x3.sizes(), (Shape{2, 3, 5, 2}));
    const auto ms2 = rounded(random_mats(3, 2, 5, t, 25), t);
    const Tensor x4 = linalg::solve(A, to_tensor(ms2, {3}, 2, 5, t, dev(), true), false);
    ASSERT_EQ(x4.sizes(), (Shape{2, 3, 2, 5}));
    const auto r1 = from_tensor(x1.unsqueeze(-1)), r2 = from_tensor(x2.unsqueeze(-1)), r3 = from_tensor(x3),
               r4 = from_tensor(x4);
    for (int64_t e = 0; e < 6; ++e) {
      EXPECT_LE(solve_residual(as[e], r1[e], v[0], t), 4.0);
      EXPECT_LE(solve_residual(as[e], r2[e], vs[e], t), 4.0);
      EXPECT_LE(solve_residual(as[e], r3[e], ms[e % 3], t), 4.0);
      EXPECT_LE(solve_residual(ref::transpose(as[e]), ref::transpose(r4[e]), ref::transpose(ms2[e % 3]), t), 4.0);
    }
    auto [x5, info] = linalg::solve_ex(A, to_tensor(ms, {3}, 5, 2, t, dev()));
    EXPECT_EQ(ints_of(info), std::vector<int>(6, 0));
  }
}

TEST_P(Linalg, DetAndSlogdet) {
  for (DType t : kLinalgDtypes)
    for (int64_t n : {1, 2, 3, 8, 30, 64}) {
      SCOPED_TRACE(th::dtype_str(t) + " n " + std::to_string(n));
      auto mats = random_mats(5, n, n, t, 40 + n);
      for (CMatrix& a : mats)  // |det| of order 1e10 at n = 64 (unscaled complex ones pass float32's range)
        for (Cplx& x : a.v) x *= 0.25;
      mats = rounded(mats, t);
      const Tensor A = to_tensor(mats, {5}, n, n, t, dev(), n % 2 == 1);
      const auto d = from_tensor(linalg::det(A).view({5, 1, 1}));
      auto [sign, logabs] = linalg::slogdet(A);
      ASSERT_EQ(sign.dtype(), t);
      ASSERT_EQ(logabs.dtype(), t == kFloat64 ? kFloat64 : kFloat32);
      const auto s = from_tensor(sign.view({5, 1, 1})), la = from_tensor(logabs.view({5, 1, 1}));
      for (int64_t b = 0; b < 5; ++b) {
        const Cplx want = ref::det(ref::lu_factor(mats[b]));
        // det's relative error is the sum of U's diagonal's: a few n u for random matrices.
        const double tol = 64.0 * n * eps_of(t);
        EXPECT_LE(std::abs(d[b].at(0, 0) - want), tol * std::abs(want)) << "batch " << b << " det " << d[b].at(0, 0);
        EXPECT_NEAR(la[b].at(0, 0).real(), std::log(std::abs(want)), tol + 1e-6);
        EXPECT_LE(std::abs(s[b].at(0, 0) - want / std::abs(want)), tol + 4 * eps_of(t)) << "batch " << b;
      }
    }
  // Singular (a zero column): det exactly 0, sign 0, logabsdet -inf; 0x0: det 1; empty batch.
  for (DType t : kLinalgDtypes) {
    auto mats = random_mats(2, 4, 4, t, 3);
    for (int64_t i = 0; i < 4; ++i) mats[1].at(i, 2) = 0.0;
    const Tensor A = to_tensor(rounded(mats, t), {2}, 4, 4, t, dev());
    const auto d = from_tensor(linalg::det(A).view({2, 1, 1}));
    EXPECT_NE(d[0].at(0, 0), Cplx(0.0));
    EXPECT_EQ(d[1].at(0, 0), Cplx(0.0));
    auto [sign, logabs] = linalg::slogdet(A);
    EXPECT_EQ(from_tensor(sign.view({2, 1, 1}))[1].at(0, 0), Cplx(0.0));
    EXPECT_EQ(from_tensor(logabs.view({2, 1, 1}))[1].at(0, 0).real(), -std::numeric_limits<double>::infinity());
    const Tensor d0 = linalg::det(zeros({3, 0, 0}, TensorOptions(t).device(dev())));
    EXPECT_EQ(d0.sizes(), (Shape{3}));
    EXPECT_EQ(from_tensor(d0.view({3, 1, 1}))[2].at(0, 0), Cplx(1.0));
    EXPECT_EQ(linalg::det(zeros({0, 2, 2}, TensorOptions(t).device(dev()))).sizes(), (Shape{0}));
  }
}

TEST_P(Linalg, InverseAndItsErrors) {
  for (DType t : kLinalgDtypes)
    for (int64_t n : {1, 3, 4, 17, 100}) {
      SCOPED_TRACE(th::dtype_str(t) + " n " + std::to_string(n));
      const auto mats = rounded(random_mats(3, n, n, t, 60 + n, 1.5), t);
      const Tensor A = to_tensor(mats, {3}, n, n, t, dev());
      const auto inv = from_tensor(linalg::inv(A));
      for (int64_t b = 0; b < 3; ++b) EXPECT_LE(solve_residual(mats[b], inv[b], ref::identity(n), t), 4.0);
    }
  auto mats = random_mats(3, 4, 4, kFloat32, 8, 1.0);
  for (int64_t i = 0; i < 4; ++i) mats[1].at(i, 2) = 0.0;  // singular at U[3, 3]
  const Tensor A = to_tensor(mats, {3}, 4, 4, kFloat32, dev());
  EXPECT_THROWS_SAYING(LinAlgError, "linalg.inv", "(Batch element 1): The diagonal element 3 is zero", linalg::inv(A));
  EXPECT_THROWS_SAYING(LinAlgError, "linalg.inv", "linalg.inv]: The diagonal element 3 is zero", linalg::inv(A[1]));
  EXPECT_THROWS_SAYING(LinAlgError, "linalg.solve", "(Batch element 1): The solver failed because the input matrix is singular",
                       linalg::solve(A, ones({3, 4, 1}, TensorOptions(kFloat32).device(dev()))));
  EXPECT_THROWS_SAYING(LinAlgError, "linalg.lu_factor", "(Batch element 1): U[3,3] is zero", linalg::lu_factor(A));
  EXPECT_THROWS_SAYING(LinAlgError, "linalg.lu_factor_ex", "U[3,3] is zero", linalg::lu_factor_ex(A, true, true));
  // The _ex forms report it in info and do not raise.
  auto [inverse, info] = linalg::inv_ex(A);
  EXPECT_EQ(ints_of(info), (std::vector<int>{0, 3, 0}));
  auto [x, sinfo] = linalg::solve_ex(A, ones({3, 4, 1}, TensorOptions(kFloat32).device(dev())));
  EXPECT_EQ(ints_of(sinfo), (std::vector<int>{0, 3, 0}));
  auto [LU, pivots, finfo] = linalg::lu_factor_ex(A);
  EXPECT_EQ(ints_of(finfo), (std::vector<int>{0, 3, 0}));
  // A large singular matrix (the blocked paths): the zero pivot of its third panel.
  for (DType t : kLinalgDtypes) {
    auto big = random_mats(1, 300, 300, t, 9, 1.0);
    for (int64_t i = 0; i < 300; ++i) big[0].at(i, 150) = 0.0;
    auto [blu, bpiv, binfo] = linalg::lu_factor_ex(to_tensor(rounded(big, t), {}, 300, 300, t, dev()));
    EXPECT_EQ(ints_of(binfo), std::vector<int>{151}) << th::dtype_str(t);
  }
  // Not an error: ill-conditioned but not singular.
  CMatrix hilbert(8, 8);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 8; ++j) hilbert.at(i, j) = 1.0 / static_cast<double>(i + j + 1);
  EXPECT_NO_THROW(linalg::inv(to_tensor({hilbert}, {}, 8, 8, kFloat64, dev())));
}

TEST_P(Linalg, InputErrors) {
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev());
  const Tensor sq = ones({3, 3}, f32);
  EXPECT_THROWS_SAYING(ShapeError, "linalg.solve", "A must be batches of square matrices, but they are 3 by 4 matrices",
                       linalg::solve(ones({3, 4}, f32), sq));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.lu_factor", "must have at least 2 dimensions", linalg::lu_factor(ones({3}, f32)));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.inv", "not implemented for 'bfloat16'", linalg::inv(sq.to(kBFloat16)));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.det", "not implemented for 'int64'", linalg::det(sq.to(kInt64)));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.solve", "Expected A and B to have the same dtype", linalg::solve(sq, sq.to(kFloat64)));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.solve", "Incompatible shapes of A and B for the equation AX = B (3x3 and 4x2)",
                       linalg::solve(sq, ones({4, 2}, f32)));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.solve", "Vector broadcasting of the left hand side is not supported for left=False",
                       linalg::solve(sq, ones({3}, f32), false));
  auto [LU, pivots] = linalg::lu_factor(sq + eye(3, f32));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.lu_solve", "pivots should be a Tensor of scalar type int32",
                       linalg::lu_solve(LU, pivots.to(kInt64), sq));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.lu_solve", "Expected LU.shape[:-1] and pivots.shape to be the same",
                       linalg::lu_solve(LU, pivots.narrow(0, 0, 2), sq));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.lu_solve", "equation XA = B (3x3 and 3x2)",
                       linalg::lu_solve(LU, pivots, ones({3, 2}, f32), false));
  EXPECT_THROWS_SAYING(ShapeError, "linalg.lu_solve", "are not broadcastable",
                       linalg::lu_solve(LU.expand({2, 3, 3}), pivots.expand({2, 3}), ones({3, 3, 1}, f32)));
  EXPECT_THROWS_SAYING(ShapeError, "lu_unpack", "Expected LU_pivots of shape [3]", linalg::lu_unpack(LU, pivots.narrow(0, 0, 2)));
}

// Order <= 4: one kernel (LU in registers) for inv, solve, det and slogdet; it must give the
// composed path's results (lu_factor + lu_solve here) and the same info, for any layout.
TEST_P(Linalg, SmallMatricesInOneKernel) {
  for (int64_t n = 1; n <= 5; ++n)
    EXPECT_EQ(linalg::lu_plan(ones({2, n, n}, TensorOptions(kFloat32).device(dev()))),
              n <= 4 ? FusedPlan::Fused : FusedPlan::Composed);
  EXPECT_EQ(linalg::lu_plan(ones({2, 0, 0}, TensorOptions(kFloat32).device(dev()))), FusedPlan::Composed);
  for (DType t : kLinalgDtypes)
    for (int64_t n = 1; n <= 4; ++n)
      for (bool transposed : {false, true}) {
        SCOPED_TRACE(th::dtype_str(t) + " n " + std::to_string(n) + (transposed ? " transposed" : ""));
        const int64_t count = 5000;  // past the CPU's parallel grain
        auto mats = random_mats(count, n, n, t, 100 + n, 0.5);
        for (int64_t i = 0; i < n; ++i) mats[7].at(i, n - 1) = 0.0;  // singular: info n
        mats = rounded(mats, t);
        const Tensor A = to_tensor(mats, {count}, n, n, t, dev(), transposed);
        ASSERT_EQ(linalg::lu_plan(A), FusedPlan::Fused);
        auto [LU, pivots, info] = linalg::lu_factor_ex(A);
        const Tensor eye_b = eye(n, TensorOptions(t).device(dev())).expand({count, n, n});
        const auto want_inv = from_tensor(linalg::lu_solve(LU, pivots, eye_b));
        auto [inv, inv_info] = linalg::inv_ex(A);
        EXPECT_EQ(ints_of(inv_info), ints_of(info));
        EXPECT_EQ(ints_of(info)[7], n);
        const auto got_inv = from_tensor(inv);
        // A second right-hand side shared by every matrix (stride-0 batch), and X A = B.
        const auto rhs = rounded(random_mats(1, n, 3, t, 5), t);
        const Tensor B = to_tensor(rhs, {}, n, 3, t, dev());
        auto [x, x_info] = linalg::solve_ex(A, B.expand({count, n, 3}));
        EXPECT_EQ(ints_of(x_info), ints_of(info));
        const auto got_x = from_tensor(x);
        const Tensor xr = linalg::solve(A.narrow(0, 0, 7), B.transpose(-2, -1).expand({7, 3, n}), false);
        const auto got_xr = from_tensor(xr);
        const auto got_det = from_tensor(linalg::det(A).view({count, 1, 1}));
        auto [sign, logabs] = linalg::slogdet(A);
        const auto got_sign = from_tensor(sign.view({count, 1, 1})), got_la = from_tensor(logabs.view({count, 1, 1}));
        // Batch dims that do not merge (the small path then works on a copy): the same bits.
        const Tensor Ap = A.view({100, 50, n, n}).permute({1, 0, 2, 3});
        const Tensor Ac = Ap.contiguous();
        EXPECT_EQ(th::to_bits(std::get<0>(linalg::inv_ex(Ap))), th::to_bits(std::get<0>(linalg::inv_ex(Ac))));
        EXPECT_EQ(th::to_bits(linalg::det(Ap)), th::to_bits(linalg::det(Ac)));
        EXPECT_EQ(th::to_bits(std::get<1>(linalg::slogdet(Ap))), th::to_bits(std::get<1>(linalg::slogdet(Ac))));
        const auto lus = from_tensor(LU);
        const auto piv = ints_of(pivots);
        for (int64_t b = 0; b < count; ++b) {
          ref::LuFactors f;
          f.lu = lus[b];
          f.pivots.assign(piv.begin() + b * n, piv.begin() + (b + 1) * n);
          const Cplx d = ref::det(f);  // the composed path's det, from the library's own factors
          if (b == 7) {
            ASSERT_EQ(got_det[b].at(0, 0), Cplx(0.0));
            ASSERT_EQ(got_sign[b].at(0, 0), Cplx(0.0));
            ASSERT_EQ(got_la[b].at(0, 0).real(), -std::numeric_limits<double>::infinity());
            continue;
          }
          // Backward-stable results (residuals), and det within n u cond(A) of the composed one.
          ASSERT_LE(solve_residual(mats[b], got_inv[b], ref::identity(n), t), 4.0) << "batch " << b;
          ASSERT_LE(solve_residual(mats[b], got_x[b], rhs[0], t), 4.0) << "batch " << b;
          if (b < 7) {
            ASSERT_LE(solve_residual(ref::transpose(mats[b]), ref::transpose(got_xr[b]), rhs[0], t), 4.0);
          }
          const double cond = n * ref::max_abs(mats[b]) * ref::max_abs(want_inv[b]);
          const double tol = 16.0 * n * eps_of(t) * cond;
          ASSERT_LE(std::abs(got_det[b].at(0, 0) - d), tol * std::abs(d)) << "batch " << b;
          ASSERT_NEAR(got_la[b].at(0, 0).real(), std::log(std::abs(d)), tol);
          ASSERT_LE(std::abs(got_sign[b].at(0, 0) - d / std::abs(d)), tol);
        }
      }
}

// Only the named triangle of A is read (the other one holds garbage here), the diagonal too
// unless unitriangular; residuals of the effective triangular matrix T: T X = B or X T = B.
TEST_P(Linalg, SolveTriangularEveryForm) {
  struct TriCase {
    Shape a_batch, b_batch;
    int64_t n, k;
  };
  const std::vector<TriCase> cases = {{{}, {}, 1, 1}, {{}, {}, 5, 3}, {{3}, {3}, 33, 2}, {{2, 1}, {3}, 6, 4},
                                      {{}, {4}, 16, 8}, {{2}, {2}, 0, 3}, {{2}, {2}, 3, 0},
                                      // CUDA's one-kernel path (float32, order 16 / 32 / 64, >= 8
                                      // right-hand sides): two blocks of vectors, a broadcast A.
                                      {{1}, {3}, 32, 130}, {{2}, {2}, 64, 9},
                                      // Large orders; CUDA's blocked plan (float32, left, order >=
                                      // 256, >= 1024 right-hand sides): uneven splits down to
                                      // 128-order trsm blocks, gemm between them.
                                      {{}, {}, 601, 3}, {{2}, {2}, 520, 2}, {{}, {}, 260, 1024}};
  for (DType t : kLinalgDtypes)
    for (const TriCase& c : cases)
      for (bool upper : {false, true})
        for (bool left : {true, false})
          for (bool unit : {false, true}) {
            if (c.k >= 1024 && (t != kFloat32 || !left)) continue;  // the blocked plan's case only
            SCOPED_TRACE(th::dtype_str(t) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
                         (upper ? " upper" : " lower") + (left ? " left" : " right") + (unit ? " unit" : ""));
            const auto as = rounded(random_mats(numel_of(c.a_batch), c.n, c.n, t, 70 + c.n, 2.0 + c.n / 4.0), t);
            const int64_t br = left ? c.n : c.k, bc = left ? c.k : c.n;
            const auto bs = rounded(random_mats(numel_of(c.b_batch), br, bc, t, 71 + c.k), t);
            const Tensor X = linalg::solve_triangular(to_tensor(as, c.a_batch, c.n, c.n, t, dev(), upper),
                                                      to_tensor(bs, c.b_batch, br, bc, t, dev()), upper, left, unit);
            const Shape batch = broadcast_shapes(c.a_batch, c.b_batch);
            ASSERT_EQ(X.sizes(), with(batch, {br, bc}));
            const auto xs = from_tensor(X);
            for (int64_t e = 0; e < numel_of(batch); ++e) {
              CMatrix tri = as[static_cast<size_t>(source_index(batch, c.a_batch, e))];
              for (int64_t i = 0; i < c.n; ++i)
                for (int64_t j = 0; j < c.n; ++j) {
                  if (upper ? i > j : i < j) tri.at(i, j) = 0.0;
                  if (i == j && unit) tri.at(i, j) = 1.0;
                }
              const CMatrix& b0 = bs[static_cast<size_t>(source_index(batch, c.b_batch, e))];
              const double res = left ? solve_residual(tri, xs[e], b0, t)
                                      : solve_residual(ref::transpose(tri), ref::transpose(xs[e]), ref::transpose(b0), t);
              EXPECT_LE(res, 4.0) << "batch " << e;
            }
          }
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev());
  const FusedPlan fused = FusedPlan::Fused;
  // The one-kernel path reads B through its strides (transposed, broadcast, a batch that does
  // not merge): the bits of the solve of a contiguous copy.
  {
    const Tensor A = add(mul(randn({3, 32, 32}, f32), 0.1), mul(eye(32, f32), 4.0));
    const Tensor C = randn({3, 40, 32}, f32);  // C^T: (3, 32, 40) column-major
    const Tensor P = randn({40, 3, 32}, f32).permute({1, 2, 0});
    for (bool left : {true, false})
      for (bool upper : {false, true}) {
        SCOPED_TRACE(std::string(left ? "left" : "right") + (upper ? " upper" : " lower"));
        const std::vector<Tensor> bs = {left ? C.transpose(-2, -1) : C, left ? C.select(0, 1).transpose(0, 1).expand({3, 32, 40})
                                                                           : C.select(0, 1).expand({3, 40, 32}),
                                        left ? P : P.transpose(-2, -1)};
        for (const Tensor& B : bs) {
          ASSERT_EQ(linalg::solve_triangular_plan(A, B, left), fused);
          EXPECT_EQ(th::to_bits(linalg::solve_triangular(A, B, upper, left)),
                    th::to_bits(linalg::solve_triangular(A, B.contiguous(), upper, left)));
        }
      }
  }
  EXPECT_EQ(linalg::solve_triangular_plan(ones({5, 64, 64}, f32), ones({5, 64, 8}, f32)), fused);
  EXPECT_EQ(linalg::solve_triangular_plan(ones({5, 16, 16}, f32), ones({5, 8, 16}, f32), false), fused);
  EXPECT_EQ(linalg::solve_triangular_plan(ones({5, 64, 64}, f32), ones({5, 64, 7}, f32)), FusedPlan::Composed);
  EXPECT_EQ(linalg::solve_triangular_plan(ones({5, 48, 48}, f32), ones({5, 48, 8}, f32)), FusedPlan::Composed);
  EXPECT_EQ(linalg::solve_triangular_plan(ones({5, 64, 64}, f32).to(kFloat64), ones({5, 64, 8}, f32).to(kFloat64)),
            FusedPlan::Composed);
  EXPECT_THROWS_SAYING(ShapeError, "linalg.solve_triangular", "equation AX = B (3x3 and 4x2)",
                       linalg::solve_triangular(ones({3, 3}, f32), ones({4, 2}, f32), true));
  EXPECT_THROWS_SAYING(DTypeError, "linalg.solve_triangular", "same dtype",
                       linalg::solve_triangular(ones({3, 3}, f32), ones({3, 2}, f32).to(kFloat64), false));
}

// A = M M^H + n I: L L^H = A with L lower and a real positive diagonal (U^H U with U = L^H for
// upper); a matrix that is not positive-definite names its first failing minor.
TEST_P(Linalg, CholeskyRebuildsA) {
  for (DType t : kLinalgDtypes)
    for (int64_t n : {1, 4, 17, 64, 300})
      for (int64_t batch : {1, 3}) {
        SCOPED_TRACE(th::dtype_str(t) + " n " + std::to_string(n) + " batch " + std::to_string(batch));
        if (n == 300 && batch == 3) continue;
        std::vector<CMatrix> as;
        for (const CMatrix& m : random_mats(batch, n, n, t, 90 + n)) {
          CMatrix a = ref::matmul(m, ref::adjoint(m));
          for (int64_t i = 0; i < n; ++i) a.at(i, i) += static_cast<double>(n);
          as.push_back(a);
        }
        as = rounded(as, t);
        for (CMatrix& a : as)  // exactly Hermitian after rounding
          for (int64_t i = 0; i < n; ++i) {
            a.at(i, i) = a.at(i, i).real();
            for (int64_t j = 0; j < i; ++j) a.at(j, i) = std::conj(a.at(i, j));
          }
        const Tensor A = to_tensor(as, {batch}, n, n, t, dev());
        const auto ls = from_tensor(linalg::cholesky(A));
        const auto us = from_tensor(linalg::cholesky(A, true));
        auto [l2, info] = linalg::cholesky_ex(A);
        EXPECT_EQ(ints_of(info), std::vector<int>(static_cast<size_t>(batch), 0));
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_GT(ls[b].at(i, i).real(), 0.0);
            ASSERT_EQ(ls[b].at(i, i).imag(), 0.0);
            for (int64_t j = i + 1; j < n; ++j) {
              ASSERT_EQ(ls[b].at(i, j), Cplx(0.0));
              ASSERT_EQ(us[b].at(j, i), Cplx(0.0));
            }
          }
          const double tol = 4.0 * n * eps_of(t) * ref::max_abs(as[b]);
          EXPECT_LE(ref::max_abs_diff(ref::matmul(ls[b], ref::adjoint(ls[b])), as[b]), tol) << "batch " << b;
          EXPECT_LE(ref::max_abs_diff(ref::matmul(ref::adjoint(us[b]), us[b]), as[b]), tol) << "batch " << b;
        }
      }
  // upper reads A's upper triangle, lower its lower one (PyTorch's): the other one is garbage.
  {
    const Tensor up = anvil::tensor(std::vector<double>{4, 2, -7, 4}, Shape{2, 2}).to(dev());
    const Tensor lo = anvil::tensor(std::vector<double>{4, -7, 2, 4}, Shape{2, 2}).to(dev());
    const CMatrix u = from_tensor(linalg::cholesky(up, true))[0], l = from_tensor(linalg::cholesky(lo))[0];
    EXPECT_NEAR(u.at(0, 1).real(), 1.0, 1e-15);
    EXPECT_NEAR(u.at(1, 1).real(), std::sqrt(3.0), 1e-15);
    EXPECT_NEAR(l.at(1, 0).real(), 1.0, 1e-15);
    EXPECT_EQ(u.at(1, 0), Cplx(0.0));
  }
  auto mats = random_mats(3, 4, 4, kFloat64, 5);
  for (CMatrix& a : mats) {
    for (Cplx& x : a.v) x *= 0.01;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < i; ++j) a.at(j, i) = a.at(i, j);
    for (int64_t i = 0; i < 4; ++i) a.at(i, i) = 1.0;
  }
  mats[1].at(2, 2) = -1.0;  // the leading minor of order 3 is not positive-definite
  const Tensor A = to_tensor(mats, {3}, 4, 4, kFloat64, dev());
  EXPECT_THROWS_SAYING(LinAlgError, "linalg.cholesky",
                       "(Batch element 1): The factorization could not be completed because the input is not "
                       "positive-definite (the leading minor of order 3 is not positive-definite).",
                       linalg::cholesky(A));
  auto [L, info] = linalg::cholesky_ex(A);
  EXPECT_EQ(ints_of(info), (std::vector<int>{0, 3, 0}));
}

// The release's example: a complex64 8x8 system plus 8 I through lu_factor + lu_solve.
TEST_P(Linalg, SeedExampleComplexSystem) {
  const TensorOptions c64 = TensorOptions(kComplex64).device(dev());
  manual_seed(0);
  const Tensor A = randn({8, 8}, c64) + mul(eye(8, c64), 8);
  const Tensor b = randn({8, 1}, c64);
  auto [LU, pivots] = linalg::lu_factor(A);
  const Tensor x = linalg::lu_solve(LU, pivots, b);
  const CMatrix a = from_tensor(A)[0], xs = from_tensor(x)[0], bs = from_tensor(b)[0];
  EXPECT_LT(ref::max_abs_diff(ref::matmul(a, xs), bs), 1e-5);
  EXPECT_GT(ref::max_abs(xs), 0.01);
}

TEST_P(Linalg, ConjPhysical) {
  std::vector<std::complex<float>> v = {{1, 2}, {-3, 0.5f}, {0, -1}};
  const Tensor z = anvil::tensor(v).to(dev());
  const Tensor c = conj_physical(z.slice(0, 0, 3, 2));
  const ref::Array re = th::to_array(th::to_cpu(c)), im = th::to_array_imag(th::to_cpu(c));
  EXPECT_EQ(re.v, (std::vector<double>{1, 0}));
  EXPECT_EQ(im.v, (std::vector<double>{-2, 1}));
  const Tensor r = ones({2}, TensorOptions(kFloat32).device(dev()));
  const Tensor rc = conj_physical(r);
  EXPECT_NE(rc.raw_data_ptr(), r.raw_data_ptr());
  EXPECT_EQ(th::to_array(th::to_cpu(rc)).v, (std::vector<double>{1, 1}));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Linalg);

// The _ex forms and qr record into a CUDA graph (workspaces and pointer arrays from the capture's
// pool) and replay on new matrices bit for bit as eager calls; the checking forms read info back
// to the host, which capture refuses.
TEST(LinalgGraph, ExFormsReplayCheckingFormsRefuse) {
  ANVIL_REQUIRE_CUDA();
  const Device g(kCUDA, 0);
  Stream s = Stream::create(g);
  StreamGuard guard(s);
  struct GraphCase {
    int64_t batch, n;  // the small kernel, cuBLAS batched, cuSOLVER
  };
  for (GraphCase c : {GraphCase{64, 4}, GraphCase{16, 12}, GraphCase{1, 600}}) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " n " + std::to_string(c.n));
    Tensor A = to_tensor(random_mats(c.batch, c.n, c.n, kFloat32, 1, 2.0), {c.batch}, c.n, c.n, kFloat32, g);
    const Tensor B = to_tensor(random_mats(c.batch, c.n, 2, kFloat32, 2), {c.batch}, c.n, 2, kFloat32, g);
    (void)linalg::solve_ex(A, B);  // handles and workspaces made outside the capture
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    auto [x, info] = linalg::solve_ex(A, B);
    auto [inverse, inv_info] = linalg::inv_ex(A);
    const Tensor d = linalg::det(A);
    graph.capture_end();
    for (int round = 0; round < 2; ++round) {
      A.copy_(to_tensor(random_mats(c.batch, c.n, c.n, kFloat32, 10 + round, 2.0), {c.batch}, c.n, c.n, kFloat32, g));
      graph.replay();
      s.synchronize();
      auto [xe, ie] = linalg::solve_ex(A, B);
      auto [inve, iie] = linalg::inv_ex(A);
      EXPECT_EQ(th::to_bits(x), th::to_bits(xe)) << "round " << round;
      EXPECT_EQ(th::to_bits(inverse), th::to_bits(inve)) << "round " << round;
      EXPECT_EQ(th::to_bits(d), th::to_bits(linalg::det(A))) << "round " << round;
      EXPECT_EQ(ints_of(info), ints_of(ie));
    }
    graph.reset();
  }
  // QR (cuBLAS's batched geqrf, cuSOLVER's geqrf and orgqr) captures and replays too.
  for (GraphCase c : {GraphCase{16, 12}, GraphCase{1, 300}}) {
    SCOPED_TRACE("qr batch " + std::to_string(c.batch) + " n " + std::to_string(c.n));
    Tensor A = to_tensor(random_mats(c.batch, 40, c.n, kFloat32, 4), {c.batch}, 40, c.n, kFloat32, g);
    (void)linalg::qr(A);
    s.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    auto [Q, R] = linalg::qr(A);
    graph.capture_end();
    A.copy_(to_tensor(random_mats(c.batch, 40, c.n, kFloat32, 5), {c.batch}, 40, c.n, kFloat32, g));
    graph.replay();
    s.synchronize();
    auto [Qe, Re] = linalg::qr(A);
    EXPECT_EQ(th::to_bits(Q), th::to_bits(Qe));
    EXPECT_EQ(th::to_bits(R), th::to_bits(Re));
    graph.reset();
  }
  {
    // The first linear-algebra call on a stream makes its cuBLAS / cuSOLVER handles, also inside
    // a capture.
    Stream fresh = Stream::create(g);
    StreamGuard on_fresh(fresh);
    const Tensor A = to_tensor(random_mats(4, 40, 12, kFloat32, 6), {4}, 40, 12, kFloat32, g);
    fresh.synchronize();
    cuda::Graph graph;
    graph.capture_begin();
    auto [Q, R] = linalg::qr(A);
    graph.capture_end();
    graph.replay();
    fresh.synchronize();
    EXPECT_EQ(th::to_bits(R), th::to_bits(std::get<1>(linalg::qr(A))));
    graph.reset();
  }
  const Tensor A = to_tensor(random_mats(2, 4, 4, kFloat32, 3, 2.0), {2}, 4, 4, kFloat32, g);
  cuda::Graph graph;
  graph.capture_begin();
  EXPECT_THROW((void)linalg::inv(A), DeviceError);
  graph.reset();
}

}  // namespace
