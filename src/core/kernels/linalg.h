#pragma once
// Linear algebra: LU factorisation, solves from it, determinants and the unpacking of P, L, U.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).
// Matrices are batches of column-major matrices (LAPACK's layout, leading dimension = rows)
// stored one after another; dtypes float32, float64, complex64.

#include "core/kernels.h"

namespace anvil {

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

// X with A X = B (left) or X A = B for triangular A: its upper or lower triangle is read, the
// diagonal taken as ones when unit. a (batch, n, n); b (batch, rows, cols) holds B and is
// overwritten with X (rows = n when left, cols = n otherwise). Both column-major.
struct TriangularSolveParams {
  const void* a = nullptr;
  void* b = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 0, n = 0, rows = 0, cols = 0;
  bool left = true, upper = false, unit = false;
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
  X(cholesky, const CholeskyParams&)
ANVIL_DECLARE_KERNELS(ANVIL_LINALG_KERNELS)
#define ANVIL_LINALG_FUSED(X) X(small_lu, const SmallLuParams&)
ANVIL_DECLARE_FUSED(ANVIL_LINALG_FUSED)

}  // namespace anvil
