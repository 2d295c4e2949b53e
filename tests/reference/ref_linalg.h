#pragma once
// Linear algebra references in complex float64 (real inputs have zero imaginary parts), loops
// only: textbook LU with partial pivoting and the solves, products and determinants built on it;
// Householder QR; the one-sided Jacobi SVD.
#include <complex>
#include <cstdint>
#include <vector>

namespace ref {

using Cplx = std::complex<double>;

// A dense row-major matrix.
struct CMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<Cplx> v;

  CMatrix() = default;
  CMatrix(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c)) {}
  Cplx& at(int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; }
  const Cplx& at(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * cols + j)]; }
};

CMatrix identity(int64_t n);
CMatrix matmul(const CMatrix& a, const CMatrix& b);
CMatrix adjoint(const CMatrix& a);    // conjugate transpose
CMatrix transpose(const CMatrix& a);
double max_abs(const CMatrix& a);
double max_abs_diff(const CMatrix& a, const CMatrix& b);

// LAPACK getf2's algorithm: column by column, the pivot is the first row of largest
// |Re| + |Im| in the column (LAPACK's i?amax), rows exchanged, the column below divided by the
// pivot, then the trailing matrix updated. A zero pivot sets info (1-based, the first) and
// leaves its column unscaled. pivot = false: no exchanges. lu holds L below the diagonal (unit
// diagonal implied) and U on and above it.
struct LuFactors {
  CMatrix lu;
  std::vector<int> pivots;  // 1-based, min(rows, cols) of them
  int info = 0;
};
LuFactors lu_factor(const CMatrix& a, bool pivot = true);

// P L U rebuilt from the factors (rows x cols): the row exchanges undone on L U.
CMatrix lu_product(const LuFactors& f);
// X with A X = B from A's factors (square A): the row exchanges, then forward and back
// substitution.
CMatrix lu_solve(const LuFactors& f, const CMatrix& b);
// det(A) as (-1)^swaps times the product of U's diagonal.
Cplx det(const LuFactors& f);

// Householder QR: R = H_k ... H_1 A with H_j = I - 2 v v^H zeroing column j below the diagonal
// (v from x - alpha e_1, alpha = -e^(i arg x_0) |x|), Q = H_1 ... H_k accumulated (rows x rows).
// R (rows x cols) is upper triangular, Q unitary, Q R = A. |R[i, j]| is unique for A of full
// column rank (another QR differs by a unit-modulus factor per row of R).
struct QrFactors {
  CMatrix q, r;
};
QrFactors householder_qr(const CMatrix& a);

// The one-sided Jacobi (Hestenes) SVD: column pairs of W = A V (A^H for wide A) rotated until
// orthogonal to float64 precision (each complex pair first brought to a real inner product by a
// phase on column q of W and V); the singular values are the final column norms, descending.
// u (rows x k) = the normalized columns (zero columns for zero singular values), v (cols x k),
// A = u diag(s) v^H.
struct SvdFactors {
  CMatrix u, v;
  std::vector<double> s;
};
SvdFactors jacobi_svd(const CMatrix& a);

}  // namespace ref
