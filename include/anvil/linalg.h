#pragma once
// Linear algebra, as torch.linalg (names and argument order): LU factorisation and solves,
// determinants, inverses, triangular solves, Cholesky. Matrices are the last two dims of
// (*, m, n) tensors of float32, float64 or complex64, with any batch dims. Results that hold
// factors (LU) are batches of column-major matrices (LU.transpose(-2, -1) is contiguous), as
// PyTorch's; pivots and info are int32, pivots 1-based as LAPACK's getrf (row i was swapped
// with row pivots[i] - 1).
//
// The functions without `_ex` raise LinAlgError where PyTorch does, which reads `info` back to
// the host: one device-to-host copy and a wait for the stream (not allowed under CUDA graph
// capture). The `_ex` functions never wait: their info is a tensor on the input's device.
// Ill-conditioned input is not an error.
#include <tuple>

#include "anvil/plan.h"
#include "anvil/tensor.h"

namespace anvil::linalg {

// LU with partial pivoting of A (*, m, n): (LU (*, m, n), pivots (*, min(m, n))). A pivot is
// the row of largest |Re| + |Im| (LAPACK's rule, so complex pivots match PyTorch's CPU).
// pivot = false factors without row exchanges (pivots then 1, 2, ..., k). Raises LinAlgError
// naming the first zero U[i, i] when U is singular.
ANVIL_API std::tuple<Tensor, Tensor> lu_factor(const Tensor& A, bool pivot = true);
// (LU, pivots, info): info (*) is 0, or i > 0 when U[i - 1, i - 1] is exactly zero (the
// factorisation is still complete). check_errors raises as lu_factor does.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> lu_factor_ex(const Tensor& A, bool pivot = true, bool check_errors = false);
// A = P L U: (P (*, m, m), L (*, m, k), U (*, k, n)), k = min(m, n); P of A's dtype.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> lu(const Tensor& A, bool pivot = true);
// (P, L, U) from lu_factor's (LU, pivots); unpack_data / unpack_pivots = false give empty L, U /
// an empty P.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> lu_unpack(const Tensor& LU, const Tensor& pivots, bool unpack_data = true,
                                                       bool unpack_pivots = true);
// X with A X = B (left) or X A = B (left = false), A^H in place of A when adjoint, from A's
// lu_factor. LU (*, n, n), pivots (*, n), B (*, n, k) (left) or (*, k, n); batch dims broadcast.
ANVIL_API Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left = true, bool adjoint = false);
// X with A X = B (left) or X A = B. B may be a vector: (n) or (*, n) with A (*, n, n) (left
// only), as torch.linalg.solve. Raises LinAlgError when A is singular.
ANVIL_API Tensor solve(const Tensor& A, const Tensor& B, bool left = true);
// (X, info); info as lu_factor_ex's.
ANVIL_API std::tuple<Tensor, Tensor> solve_ex(const Tensor& A, const Tensor& B, bool left = true, bool check_errors = false);
// det(A) for A (*, n, n) (1 for n = 0); 0 for a singular A, no error.
ANVIL_API Tensor det(const Tensor& A);
// (sign, logabsdet): det = sign * exp(logabsdet); sign is of A's dtype (unit modulus for
// complex, 0 for a singular A with logabsdet = -inf), logabsdet real.
ANVIL_API std::tuple<Tensor, Tensor> slogdet(const Tensor& A);
// A^-1 for A (*, n, n); raises LinAlgError when A is singular.
ANVIL_API Tensor inv(const Tensor& A);
// (A^-1, info); info as lu_factor_ex's, the inverse then not finite.
ANVIL_API std::tuple<Tensor, Tensor> inv_ex(const Tensor& A, bool check_errors = false);

// X with A X = B (left) or X A = B for triangular A: only A's upper (upper) or lower triangle is
// read, its diagonal taken as ones when unitriangular. A (*, n, n), B (*, n, k) (left) or
// (*, k, n); batch dims broadcast. (PyTorch makes `upper` keyword-only.)
ANVIL_API Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left = true,
                                  bool unitriangular = false);
// The Cholesky factor of Hermitian positive-definite A (*, n, n): L lower with A = L L^H (only
// A's lower triangle is read), or U upper with A = U^H U (only its upper triangle is read), as
// PyTorch. Raises LinAlgError naming the first leading minor that is not positive-definite.
ANVIL_API Tensor cholesky(const Tensor& A, bool upper = false);
// (L, info): info (*) 0, or the order of that minor (the factor is then not complete).
ANVIL_API std::tuple<Tensor, Tensor> cholesky_ex(const Tensor& A, bool upper = false, bool check_errors = false);

// How inv, inv_ex, solve, solve_ex, det and slogdet run for A (anvil/plan.h): Fused, one kernel
// per batch (matrices of order 1 to 4: LU with partial pivoting in registers, one thread per
// matrix, then the inverse, solve or determinant); Composed, lu_factor then lu_solve (or the
// product of U's diagonal). Both give LAPACK's pivots and info.
ANVIL_API FusedPlan lu_plan(const Tensor& A);

}  // namespace anvil::linalg
