#pragma once
// Linear algebra, as torch.linalg (names and argument order): LU factorisation and solves,
// determinants, inverses, triangular solves, Cholesky, QR, the SVD, pseudo-inverses, least
// squares. Matrices are the last two dims of (*, m, n) tensors of float32, float64 or complex64,
// with any batch dims. Results that hold factors (LU, QR's Q and R, the SVD's U and Vh) are
// batches of column-major matrices (LU.transpose(-2, -1) is contiguous), as PyTorch's; pivots
// and info are int32, pivots 1-based as LAPACK's getrf (row i was swapped with row pivots[i] - 1).
//
// The functions without `_ex` raise LinAlgError where PyTorch does, which reads `info` back to
// the host: one device-to-host copy and a wait for the stream (not allowed under CUDA graph
// capture). The `_ex` functions never wait: their info is a tensor on the input's device.
// Ill-conditioned input is not an error.
#include <optional>
#include <string_view>
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
// How solve_triangular runs (anvil/plan.h): Fused for float32 systems of order 16, 32 or 64 with
// at least 8 right-hand sides (one kernel: on CUDA a thread per right-hand-side vector with the
// matrix in shared memory, on the CPU substitution by rows of X over all vectors at once),
// Composed otherwise (LAPACK / cuBLAS trsm, trsmBatched).
ANVIL_API FusedPlan solve_triangular_plan(const Tensor& A, const Tensor& B, bool left = true);

// The Cholesky factor of Hermitian positive-definite A (*, n, n): L lower with A = L L^H (only
// A's lower triangle is read), or U upper with A = U^H U (only its upper triangle is read), as
// PyTorch. Raises LinAlgError naming the first leading minor that is not positive-definite.
ANVIL_API Tensor cholesky(const Tensor& A, bool upper = false);
// (L, info): info (*) 0, or the order of that minor (the factor is then not complete).
ANVIL_API std::tuple<Tensor, Tensor> cholesky_ex(const Tensor& A, bool upper = false, bool check_errors = false);

// QR by Householder reflections (LAPACK's geqrf / orgqr, cuSOLVER's; R's diagonal may be
// negative, as PyTorch's). A (*, m, n), k = min(m, n); mode "reduced": (Q (*, m, k), R (*, k,
// n)); "complete": (Q (*, m, m), R (*, m, n)); "r": (Q empty of shape (0), R (*, k, n)). Q has
// orthonormal columns, R is upper triangular; both column-major batches.
ANVIL_API std::tuple<Tensor, Tensor> qr(const Tensor& A, std::string_view mode = "reduced");

// A = U diag(S) Vh: (U (*, m, m), S (*, k), Vh (*, n, n)) with full_matrices, (U (*, m, k), S,
// Vh (*, k, n)) without (k = min(m, n)); S real, non-negative and descending; U and Vh column-
// major. Entries of extreme magnitude (1e-30 .. 1e30) are scaled by a power of two first, and
// full_matrices completes U and Vh to unitary matrices also where A is rank-deficient.
// driver (CUDA only, as PyTorch): "gesvdj" (the default: cuSOLVER's gesvdjBatched up to 32x32,
// gesvdj above) or "gesvd"; "gesvda" is not supported. Without a driver, matrices the Jacobi
// method did not converge on are redone with gesvd. Reads the convergence info back to the host
// (a stream wait; not under CUDA graph capture) and raises LinAlgError as PyTorch does.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& A, bool full_matrices = true,
                                                 std::optional<std::string_view> driver = std::nullopt);
// S alone (no U, Vh computed).
ANVIL_API Tensor svdvals(const Tensor& A, std::optional<std::string_view> driver = std::nullopt);

// The pseudo-inverse (*, n, m) of A (*, m, n) from its SVD: singular values s > max(atol, rtol *
// s_max) are inverted, the rest dropped (so tiny ones give no NaN). rtol defaults to eps * max(m,
// n), or to 0 when atol > 0 is given; atol to 0. hermitian: A is taken as Hermitian from its
// lower triangle (as PyTorch's eigh path reads it) and its pseudo-inverse is formed from that.
ANVIL_API Tensor pinv(const Tensor& A, std::optional<double> atol = std::nullopt,
                      std::optional<double> rtol = std::nullopt, bool hermitian = false);

// Least squares min ||A X - B|| for A (*, m, n), B (*, m, k) (or a vector (m) / (*, m), as solve),
// batch dims broadcast: (solution (*, n, k), residuals, rank, singular_values) as
// torch.linalg.lstsq. driver: "gelsy" (CPU default), "gels" (CUDA default; A of full rank),
// "gelsd", "gelss" (SVD-based: minimum-norm solutions for rank-deficient A). CPU runs LAPACK's;
// CUDA composes gels from geqrf / ormqr / a triangular solve and gelsd / gelss from the SVD
// (PyTorch's CUDA has gels only); gelsy is CPU-only. rcond (default eps * max(m, n)): singular
// values at or below rcond * s_max count as zero. residuals (*, k), real: ||A X - B||^2 per
// column, when m > n and the driver is gels, or gelsd / gelss with every A of full rank;
// otherwise empty (0). rank (*) int64 (not for gels), singular_values (*, min(m, n)) real
// (gelsd / gelss only); empty (0) where not computed. CPU gels raises LinAlgError for an A that
// is not of full rank; gelsd / gelss read their ranks back to decide on the residuals (a wait).
ANVIL_API std::tuple<Tensor, Tensor, Tensor, Tensor> lstsq(const Tensor& A, const Tensor& B,
                                                           std::optional<double> rcond = std::nullopt,
                                                           std::optional<std::string_view> driver = std::nullopt);

// ---- Backward: vector-Jacobian products with PyTorch's autograd formulas (FunctionsManual.cpp),
// explicit until an autograd issue wires them. `grad` is the gradient of a real loss with
// respect to the op's output; complex tensors follow PyTorch's convention (the conjugate
// Wirtinger derivative, the values torch's .grad holds). Gradients of inputs that were broadcast
// are summed back to the input's shape.

// Of det(A) (det as returned by det): conj(det) grad A^-H, and for |det| < 100 eps (singular
// or nearly so) PyTorch's cofactor formula from the SVD, U diag(conj(det U det Vh) grad prod_{j !=
// i} s_j) Vh. Reads one flag back (whether any matrix takes the SVD formula).
ANVIL_API Tensor det_backward(const Tensor& grad, const Tensor& A, const Tensor& det);
// Of inv(A) = inverse: -A^-H grad A^-H.
ANVIL_API Tensor inv_backward(const Tensor& grad, const Tensor& inverse);
// Of X = solve(A, B, left): (gA, gB); B and X may be vectors as in solve.
ANVIL_API std::tuple<Tensor, Tensor> solve_backward(const Tensor& grad, const Tensor& A, const Tensor& B, const Tensor& X,
                                                    bool left = true);
// Of X = lu_solve(LU, pivots, B, left, adjoint): (gLU (L's strict lower part and U's upper part
// in one matrix, as LU), gB).
ANVIL_API std::tuple<Tensor, Tensor> lu_solve_backward(const Tensor& grad, const Tensor& LU, const Tensor& pivots,
                                                       const Tensor& B, const Tensor& X, bool left = true,
                                                       bool adjoint = false);
// Of X = solve_triangular(A, B, upper, left, unitriangular): (gA, gB), gA on the triangle A
// uses (without the diagonal when unitriangular).
ANVIL_API std::tuple<Tensor, Tensor> solve_triangular_backward(const Tensor& grad, const Tensor& A, const Tensor& B,
                                                               const Tensor& X, bool upper, bool left = true,
                                                               bool unitriangular = false);
// Of L = cholesky(A, upper): gA = L^-H Phi(tril(L^H gL)) L^-1, Phi(X) = (X + X^H - diag X) / 2
// (Hermitian).
ANVIL_API Tensor cholesky_backward(const Tensor& grad, const Tensor& L, bool upper = false);
// Of (Q, R) = qr(A, mode); grad_Q or grad_R may be undefined. mode "r" and "complete" with m >
// n raise PyTorch's errors (the gradient is not defined there).
ANVIL_API Tensor qr_backward(const Tensor& grad_Q, const Tensor& grad_R, const Tensor& Q, const Tensor& R,
                             std::string_view mode = "reduced");
// Of (U, S, Vh) = svd(A, full_matrices); any gradient may be undefined (S's alone: svdvals').
// Full U / Vh contribute their first k columns / rows, as PyTorch. Assumes distinct non-zero
// singular values (repeated ones give inf / NaN, as PyTorch). Complex A: raises PyTorch's error
// when the loss depends on the singular vectors' phases (reads that check back to the host).
ANVIL_API Tensor svd_backward(const Tensor& grad_U, const Tensor& grad_S, const Tensor& grad_Vh, const Tensor& U,
                              const Tensor& S, const Tensor& Vh);

// How inv, inv_ex, solve, solve_ex, det and slogdet run for A (anvil/plan.h): Fused, one kernel
// per batch (matrices of order 1 to 4: LU with partial pivoting in registers, one thread per
// matrix, then the inverse, solve or determinant); Composed, lu_factor then lu_solve (or the
// product of U's diagonal). Both give LAPACK's pivots and info.
ANVIL_API FusedPlan lu_plan(const Tensor& A);

}  // namespace anvil::linalg
