#pragma once
// Linear algebra: LU factorisation, solves from it, determinants and the unpacking of P, L, U.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).
// Matrices are batches of column-major matrices (LAPACK's layout, leading dimension = rows)
// stored one after another; dtypes float32, float64, complex64.

#include <type_traits>

#include "core/kernels.h"

namespace anvil {

// The real type of a linear-algebra element type (complex64's is float): singular values,
// logabsdet, LAPACK's rwork and rcond.
template <typename T> using linalg_real_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// a is (batch, m, n) column-major, factored in place into L (unit diagonal, below) and U;
// pivots (batch, min(m, n)) 1-based, info (batch): 0, or i when U[i-1, i-1] == 0.
// pivot = false: no row exchanges, pivots 1..k.
struct LuFactorParams {
  void* a = nullptr;
  int32_t* pivots = nullptr;
  int32_t* info = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, m = 0, n = 0;
  bool pivot = true;
};

// op(A) X = B for A = P L U given as (lu, pivots); b (batch, n, nrhs) column-major holds B and
// is overwritten with X. op: A, A^T or A^H (LAPACK's trans 'N', 'T', 'C').
enum class LinalgOp : int8_t { None, Transpose, Adjoint };
struct LuSolveParams {
  const void* lu = nullptr;
  const int32_t* pivots = nullptr;
  void* b = nullptr;
  DType dtype = kFloat32;
  LinalgOp op = LinalgOp::None;
  int64_t batch = 0, n = 0, nrhs = 0;
};

// From the (batch, n, n) factors: det, or (sign, logabsdet) with log_abs set. det / sign are of
// dtype, logabsdet of its real dtype; sign of a singular matrix 0 with logabsdet -inf.
struct LuDetParams {
  const void* lu = nullptr;
  const int32_t* pivots = nullptr;
  void* det = nullptr;          // det, or sign with log_abs
  void* log_abs_det = nullptr;  // with log_abs only
  DType dtype = kFloat32;
  bool log_abs = false;
  int64_t batch = 0, n = 0;
};

// (P, L, U) from the (batch, m, n) factors, k = min(m, n); each output row-major contiguous,
// null when not wanted: p (batch, m, m) with P[r[j], j] = 1 where r is the row order the pivots
// make; l (batch, m, k) unit lower; u (batch, k, n) upper. scratch: batch * m int32 (for r).
struct LuUnpackParams {
  const void* lu = nullptr;
  const int32_t* pivots = nullptr;
  void* p = nullptr;
  void* l = nullptr;
  void* u = nullptr;
  int32_t* scratch = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, m = 0, n = 0;
};

// X with op(A) X = B (left) or X op(A) = B for triangular A, op(A) = A or (transpose) A^T: A's
// upper or lower triangle is read, the diagonal taken as ones when unit. a (batch, n, n); b
// (batch, rows, cols) holds B and is overwritten with X (rows = n when left, cols = n otherwise).
// Both column-major; upper names the triangle of a's stored matrices.
struct TriangularSolveParams {
  const void* a = nullptr;
  void* b = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, n = 0, rows = 0, cols = 0;
  bool left = true, upper = false, unit = false, transpose = false;
};

// Cholesky A = L L^H of Hermitian positive-definite (batch, n, n) column-major matrices, in
// place: L's lower triangle from A's, the strict upper triangle zeroed. info (batch): 0, or the
// order of the first leading minor that is not positive-definite.
struct CholeskyParams {
  void* a = nullptr;
  int32_t* info = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, n = 0;
};

// Householder QR as LAPACK's geqrf: a (batch, m, n) column-major is overwritten with R on and
// above the diagonal and the reflectors' vectors v (v[i] = 1 implied) below it; tau (batch,
// min(m, n)) their scalars, H_i = I - tau_i v_i v_i^H and Q = H_1 H_2 ... H_k.
struct GeqrfParams {
  void* a = nullptr;
  void* tau = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, m = 0, n = 0;
};

// The first n columns of Q = H_1 ... H_k (LAPACK's orgqr, torch.linalg.householder_product):
// a (batch, m, n) column-major holds the k <= n <= m reflectors in its first k columns (as
// geqrf leaves them) and is overwritten with Q's columns; tau (batch, k).
struct OrgqrParams {
  void* a = nullptr;
  const void* tau = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, m = 0, n = 0, k = 0;
};

// C = Q C or Q^H C (op None / Adjoint) for Q = H_1 ... H_k from geqrf (LAPACK's ormqr / unmqr,
// left side): a (batch, m, a_cols) column-major holds the reflectors in its first k columns, tau
// (batch, k); c (batch, m, nrhs) column-major is overwritten.
struct OrmqrParams {
  const void* a = nullptr;
  const void* tau = nullptr;
  void* c = nullptr;
  DType dtype = kFloat32;
  LinalgOp op = LinalgOp::None;
  int64_t batch = 0, m = 0, a_cols = 0, k = 0, nrhs = 0;
};

// A = U diag(S) V^H for a (batch, m, n) column-major (destroyed), k = min(m, n): s (batch, k) of
// the real dtype, non-negative and descending; with compute_uv, u (batch, m, full ? m : k) and
// vh (batch, full ? n : k, n), both column-major. info (batch): 0, or > 0 where the method did
// not converge. driver: the CUDA method (SvdDriver::Default lets the backend choose; the CPU
// has one, LAPACK's gesdd). Inputs of extreme magnitude are scaled by a power of two first.
enum class SvdDriver : int8_t { Default, Gesvd, Gesvdj };
struct SvdParams {
  void* a = nullptr;
  void* s = nullptr;
  void* u = nullptr;
  void* vh = nullptr;
  int32_t* info = nullptr;
  DType dtype = kFloat32;
  SvdDriver driver = SvdDriver::Default;
  int64_t batch = 0, m = 0, n = 0;
  bool compute_uv = true, full_matrices = false;
};

// Least squares by LAPACK's drivers (the CPU's; CUDA composes gels from geqrf / ormqr and
// gelsd / gelss from svd in the op): a (batch, m, n) column-major (destroyed); b (batch, max(m,
// n), nrhs) column-major holds B in its first m rows and is overwritten with X in its first n
// (and, for m > n, the residual components in rows n..m for gels, and for gelsd / gelss at full
// rank); rank (batch) int32 (gelsy / gelsd / gelss); s (batch, min(m, n)) real, the singular
// values (gelsd / gelss, else null); info (batch): gels' i > 0 when R[i - 1, i - 1] is zero
// (A is not of full rank), gelsd / gelss' i > 0 when their SVD did not converge.
enum class LstsqDriver : int8_t { Gels, Gelsy, Gelsd, Gelss };
struct LstsqParams {
  void* a = nullptr;
  void* b = nullptr;
  int32_t* rank = nullptr;
  void* s = nullptr;
  int32_t* info = nullptr;
  DType dtype = kFloat32;
  LstsqDriver driver = LstsqDriver::Gelsy;
  double rcond = 0;  // singular values below rcond * the largest count as zero (rank)
  int64_t batch = 0, m = 0, n = 0, nrhs = 0;
};

// torch.triu / tril: out (batch, rows, cols) contiguous = x (contiguous, the same shape) with the
// elements outside the kept triangle zeroed; (i, j) is kept when j - i >= diagonal (upper) or
// j - i <= diagonal (lower). Any dtype.
struct TriangleParams {
  const void* x = nullptr;
  void* out = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, rows = 0, cols = 0, diagonal = 0;
  bool upper = true;
};

// Square matrices of order n <= 4 (core/small_lu.h), one per thread: LU with partial pivoting
// in registers and, from it, the inverse, the solve of B, det or (sign, logabsdet). A and B may
// have any strides (batch stride 0: broadcast). Inverse (batch, n, n) and Solve (batch, n,
// nrhs) write `out` row-major and info (batch) as lu_factor's; Det / SignLogAbsDet write det /
// sign to `out` and, for the latter, logabsdet (real dtype) to log_abs_det.
enum class SmallLuResult : int8_t { Inverse, Solve, Det, SignLogAbsDet };
struct SmallLuParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  void* log_abs_det = nullptr;
  int32_t* info = nullptr;
  DType dtype = kFloat32;
  SmallLuResult result = SmallLuResult::Inverse;
  int64_t batch = 0, n = 0, nrhs = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 0;
  int64_t stride_b_batch = 0, stride_b_row = 0, stride_b_col = 0;
};

#define ANVIL_LINALG_KERNELS(X)            \
  X(lu_factor, const LuFactorParams&)      \
  X(lu_solve, const LuSolveParams&)        \
  X(lu_det, const LuDetParams&)            \
  X(lu_unpack, const LuUnpackParams&)      \
  X(triangular_solve, const TriangularSolveParams&) \
  X(cholesky, const CholeskyParams&)      \
  X(geqrf, const GeqrfParams&)            \
  X(orgqr, const OrgqrParams&)            \
  X(ormqr, const OrmqrParams&)            \
  X(svd, const SvdParams&)                \
  X(lstsq, const LstsqParams&)            \
  X(triangle, const TriangleParams&)
ANVIL_DECLARE_KERNELS(ANVIL_LINALG_KERNELS)
// Triangular solves of many small float32 systems in one kernel (order 16, 32 or 64, at least 8
// right-hand sides; the Gated DeltaNet chunk solves): a thread per right-hand-side vector, the
// matrix in shared memory, the vector in registers. a (batch, n, n) with any strides (batch stride
// 0: broadcast), its upper or lower triangle read (not the diagonal when unit). b: B with any
// strides, element i of right-hand-side vector v of matrix m at b[m * stride_b_batch + i *
// stride_b_elem + v * stride_b_vec] (left: B's columns are the vectors, right: its rows). x: X
// written dense, element i of vector v at x[m * n * nrhs + i * nrhs + v] (left: X (batch, n,
// nrhs) row-major, right: X (batch, nrhs, n) column-major), consecutive vectors side by side.
struct SmallTriangularParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* x = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, n = 0, nrhs = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 0;
  int64_t stride_b_batch = 0, stride_b_elem = 0, stride_b_vec = 0;
  bool left = true, upper = false, unit = false;
};

// The fused triangular solve's plan on both backends: float32 systems of order 16, 32 or 64
// with at least 8 right-hand sides.
inline FusedPlan small_triangular_rule(const SmallTriangularParams& p) {
  const bool order = p.n == 16 || p.n == 32 || p.n == 64;
  return p.dtype == kFloat32 && order && p.nrhs >= 8 ? FusedPlan::Fused : FusedPlan::Composed;
}

#define ANVIL_LINALG_FUSED(X) \
  X(small_lu, const SmallLuParams&) \
  X(small_triangular, const SmallTriangularParams&)
ANVIL_DECLARE_FUSED(ANVIL_LINALG_FUSED)

}  // namespace anvil
