// torch.linalg's LU family: validation, batch broadcasting and the column-major work buffers the
// backends factor and solve in place (LAPACK's layout, which PyTorch's results also have).
#include "anvil/linalg.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/linalg.h"
#include "core/util.h"

namespace anvil::linalg {
namespace {

Shape batch_of(const Tensor& t, int64_t matrix_dims = 2) {
  return Shape(t.sizes().begin(), t.sizes().end() - matrix_dims);
}
Shape with(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail);
  return s;
}

void check_matrix(const char* name, const char* what, const Tensor& t, bool square) {
  ANVIL_CHECK(t.defined(), Error, name, " undefined tensor ", what);
  ANVIL_CHECK(t.dim() >= 2, ShapeError, name, " The input tensor ", what, " must have at least 2 dimensions, got ",
              describe(t));
  dispatch_linalg_types(t.dtype(), name, [](auto) {});
  ANVIL_CHECK(t.size(-1) <= INT32_MAX && t.size(-2) <= INT32_MAX, ShapeError, name, " ", what,
              ": LAPACK / cuSOLVER take 32-bit matrix sizes, got ", describe(t));
  if (square)
    ANVIL_CHECK(t.size(-1) == t.size(-2), ShapeError, name, " ", what, " must be batches of square matrices, but they are ",
                t.size(-2), " by ", t.size(-1), " matrices");
}

// The batch shape A's and B's batch dims broadcast to.
Shape broadcast_batch(const char* name, const char* a_name, const Tensor& a, const Tensor& b) {
  try {
    return broadcast_shapes(batch_of(a), batch_of(b));
  } catch (const ShapeError&) {
    throw ShapeError(detail::cat_message(name, " batch dims of ", a_name, " ", shape_str(a.sizes()), " and B ",
                                         shape_str(b.sizes()), " are not broadcastable"));
  }
}

void check_same_dtype(const char* name, const char* a_name, const Tensor& a, const Tensor& b) {
  ANVIL_CHECK(b.dtype() == a.dtype(), DTypeError, name, " Expected ", a_name, " and B to have the same dtype, but found ",
              a_name, " of type ", dtype_name(a.dtype()), " and B of type ", dtype_name(b.dtype()), " instead");
}

// B's rows (left: A X = B) or columns (X A = B) match A's order n.
void check_rhs(const char* name, int64_t n, const Tensor& b, bool left) {
  ANVIL_CHECK((left ? b.size(-2) : b.size(-1)) == n, ShapeError, name, " Incompatible shapes of A and B for the equation ",
              left ? "AX = B" : "XA = B", " (", n, "x", n, " and ", b.size(-2), "x", b.size(-1), ")");
}

// Strides of a batch of column-major matrices of `sizes` (matrices one after another).
Shape column_major_strides(const Shape& sizes) {
  const size_t nd = sizes.size();
  Shape strides(nd);
  const int64_t m = sizes[nd - 2], n = sizes[nd - 1];
  strides[nd - 2] = 1;
  strides[nd - 1] = std::max<int64_t>(m, 1);
  int64_t s = std::max<int64_t>(m * n, 1);
  for (size_t d = nd - 2; d-- > 0;) {
    strides[d] = s;
    s *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

bool is_column_major(const Tensor& t) {
  const Shape want = column_major_strides(t.sizes());
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != want[static_cast<size_t>(d)]) return false;
  return true;
}

// A new column-major batch holding t's values (t may be an expanded view).
Tensor column_major_copy(const Tensor& t) {
  Tensor out = empty_strided(t.sizes(), column_major_strides(t.sizes()), TensorOptions(t.dtype()).device(t.device()));
  if (out.numel() > 0) out.copy_(t);
  return out;
}
Tensor as_column_major(const Tensor& t) { return is_column_major(t) ? t : column_major_copy(t); }

// An int32 tensor's elements on any device (data_ptr<T>() is for CPU tensors).
int32_t* int_ptr(const Tensor& t) { return static_cast<int32_t*>(t.raw_data_ptr()); }

enum class ErrorKind { LuFactor, Solve, Inverse, Cholesky };

// Raises LinAlgError for the first batch element whose info is not 0. Reads info to the host:
// one device-to-host copy and a stream wait (the non-_ex functions only).
void check_info(const char* name, const Tensor& info, ErrorKind kind, bool is_matrix) {
  if (info.numel() == 0) return;
  const Tensor host = info.to(Device(kCPU)).contiguous();
  const int32_t* v = host.data_ptr<int32_t>();
  for (int64_t b = 0; b < host.numel(); ++b) {
    const int32_t i = v[b];
    if (i == 0) continue;
    const std::string where = is_matrix ? std::string() : detail::cat_message(" (Batch element ", b, ")");
    switch (kind) {
      case ErrorKind::LuFactor:
        throw LinAlgError(detail::cat_message(
            name, where, ": U[", i, ",", i,
            "] is zero and using it on lu_solve would result in a division by zero. If you still want to perform the "
            "factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"));
      case ErrorKind::Solve:
        throw LinAlgError(detail::cat_message(name, where,
                                              ": The solver failed because the input matrix is singular (U[", i, ",",
                                              i, "] is zero)."));
      case ErrorKind::Cholesky:
        throw LinAlgError(detail::cat_message(name, where,
                                              ": The factorization could not be completed because the input is not "
                                              "positive-definite (the leading minor of order ",
                                              i, " is not positive-definite)."));
      case ErrorKind::Inverse:
        throw LinAlgError(detail::cat_message(name, where, ": The diagonal element ", i,
                                              " is zero, the inversion could not be completed because the input "
                                              "matrix is singular."));
    }
  }
}

std::tuple<Tensor, Tensor, Tensor> lu_factor_core(const char* name, const Tensor& A, bool pivot) {
  check_matrix(name, "A", A, false);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A);
  const TensorOptions ints = TensorOptions(kInt32).device(A.device());
  Tensor lu = column_major_copy(A);
  Tensor pivots = empty(with(batch, {k}), ints);
  Tensor info = zeros(batch, ints);
  if (lu.numel() == 0) return {lu, pivots, info};
  LuFactorParams p;
  p.a = lu.raw_data_ptr();
  p.pivots = int_ptr(pivots);
  p.info = int_ptr(info);
  p.dtype = A.dtype();
  p.batch = shape_numel(batch);
  p.m = m;
  p.n = n;
  p.pivot = pivot;
  ANVIL_KERNEL(A.device(), lu_factor, p);
  return {lu, pivots, info};
}

// X for op(A) X = B with B (*, n, k) already broadcast to the factors' batch: a column-major
// copy of B solved in place.
Tensor lu_solve_left(const Tensor& lu, const Tensor& pivots, const Tensor& b, LinalgOp op) {
  Tensor x = column_major_copy(b);
  if (x.numel() == 0) return x;
  LuSolveParams p;
  p.lu = lu.raw_data_ptr();
  p.pivots = int_ptr(pivots);
  p.b = x.raw_data_ptr();
  p.dtype = lu.dtype();
  p.op = op;
  p.batch = shape_numel(batch_of(x));
  p.n = x.size(-2);
  p.nrhs = x.size(-1);
  ANVIL_KERNEL(lu.device(), lu_solve, p);
  return x;
}

Tensor adjoint_of(const Tensor& t) { return conj_physical(t.transpose(-2, -1)); }

// The small path's params for A (nb, n, n) (a view where the batch flattens, else a copy).
SmallLuParams small_params(const Tensor& a3, SmallLuResult result) {
  SmallLuParams p;
  p.a = a3.raw_data_ptr();
  p.dtype = a3.dtype();
  p.result = result;
  p.batch = a3.size(0);
  p.n = a3.size(1);
  p.stride_a_batch = a3.stride(0);
  p.stride_a_row = a3.stride(1);
  p.stride_a_col = a3.stride(2);
  return p;
}
Tensor flat_batch(const Tensor& t) { return t.reshape({-1, t.size(-2), t.size(-1)}); }
// Whether square A takes the one-kernel path (the plan depends on the order and dtype only).
bool small_path(const Tensor& A) {
  if (A.numel() == 0) return false;
  SmallLuParams p;
  p.dtype = A.dtype();
  p.n = A.size(-1);
  p.batch = A.numel() / (p.n * p.n);
  return ANVIL_PLAN(A.device(), small_lu, p) == FusedPlan::Fused;
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lu_factor_ex(const Tensor& A, bool pivot, bool check_errors) {
  auto [lu, pivots, info] = lu_factor_core("[linalg.lu_factor_ex]", A, pivot);
  if (check_errors) check_info("[linalg.lu_factor_ex]", info, ErrorKind::LuFactor, A.dim() == 2);
  return {lu, pivots, info};
}

std::tuple<Tensor, Tensor> lu_factor(const Tensor& A, bool pivot) {
  auto [lu, pivots, info] = lu_factor_core("[linalg.lu_factor]", A, pivot);
  check_info("[linalg.lu_factor]", info, ErrorKind::LuFactor, A.dim() == 2);
  return {lu, pivots};
}

std::tuple<Tensor, Tensor, Tensor> lu_unpack(const Tensor& LU, const Tensor& pivots, bool unpack_data,
                                             bool unpack_pivots) {
  const char* name = "[lu_unpack]";
  check_matrix(name, "LU", LU, false);
  const int64_t m = LU.size(-2), n = LU.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(LU);
  ANVIL_CHECK(pivots.defined() && pivots.dtype() == kInt32, DTypeError, name,
              " LU_pivots is expected to be a tensor of int32 dtype, got ",
              pivots.defined() ? dtype_name(pivots.dtype()) : "an undefined tensor");
  ANVIL_CHECK(pivots.sizes() == with(batch, {k}), ShapeError, name, " Expected LU_pivots of shape ",
              shape_str(with(batch, {k})), " for LU of shape ", shape_str(LU.sizes()), ", got ",
              shape_str(pivots.sizes()));
  check_same_device(name, LU, pivots);
  const TensorOptions opts = TensorOptions(LU.dtype()).device(LU.device());
  Tensor P = unpack_pivots ? empty(with(batch, {m, m}), opts) : empty({0}, opts);
  Tensor L = unpack_data ? empty(with(batch, {m, k}), opts) : empty({0}, opts);
  Tensor U = unpack_data ? empty(with(batch, {k, n}), opts) : empty({0}, opts);
  const int64_t nb = shape_numel(batch);
  if (nb == 0 || m == 0 || (!unpack_data && !unpack_pivots)) return {P, L, U};
  const Tensor lu = as_column_major(LU);
  const Tensor piv = pivots.contiguous();
  Tensor scratch = empty({nb, m}, TensorOptions(kInt32).device(LU.device()));
  LuUnpackParams p;
  p.lu = lu.raw_data_ptr();
  p.pivots = int_ptr(piv);
  p.p = unpack_pivots ? P.raw_data_ptr() : nullptr;
  p.l = unpack_data && L.numel() > 0 ? L.raw_data_ptr() : nullptr;
  p.u = unpack_data && U.numel() > 0 ? U.raw_data_ptr() : nullptr;
  p.scratch = int_ptr(scratch);
  p.dtype = LU.dtype();
  p.batch = nb;
  p.m = m;
  p.n = n;
  ANVIL_KERNEL(LU.device(), lu_unpack, p);
  return {P, L, U};
}

std::tuple<Tensor, Tensor, Tensor> lu(const Tensor& A, bool pivot) {
  auto [factors, pivots, info] = lu_factor_core("[linalg.lu]", A, pivot);
  return lu_unpack(factors, pivots, true, true);
}

Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left, bool adjoint) {
  const char* name = "[linalg.lu_solve]";
  check_matrix(name, "LU", LU, true);
  check_matrix(name, "B", B, false);
  check_same_dtype(name, "LU", LU, B);
  ANVIL_CHECK(pivots.defined() && pivots.dtype() == kInt32, DTypeError, name,
              " pivots should be a Tensor of scalar type int32, got ",
              pivots.defined() ? dtype_name(pivots.dtype()) : "an undefined tensor");
  const int64_t n = LU.size(-1);
  ANVIL_CHECK(pivots.sizes() == batch_of(LU, 1), ShapeError, name,
              " Expected LU.shape[:-1] and pivots.shape to be the same, but got pivots with shape ",
              shape_str(pivots.sizes()), " instead of ", shape_str(batch_of(LU, 1)));
  check_same_device(name, LU, B);
  check_same_device(name, LU, pivots);
  check_rhs(name, n, B, left);
  const Shape batch = broadcast_batch(name, "LU", LU, B);
  const Tensor lu = as_column_major(LU.expand(with(batch, {n, n})));
  const Tensor piv = pivots.expand(with(batch, {n})).contiguous();
  if (left) {
    const Tensor b = B.expand(with(batch, {n, B.size(-1)}));
    return lu_solve_left(lu, piv, b, adjoint ? LinalgOp::Adjoint : LinalgOp::None);
  }
  // X A = B  <=>  A^T X^T = B^T;  X A^H = B  <=>  A X^H = B^H.
  const Tensor b = B.expand(with(batch, {B.size(-2), n}));
  if (!adjoint) return lu_solve_left(lu, piv, b.transpose(-2, -1), LinalgOp::Transpose).transpose(-2, -1);
  return adjoint_of(lu_solve_left(lu, piv, adjoint_of(b), LinalgOp::None));
}

std::tuple<Tensor, Tensor> solve_ex(const Tensor& A, const Tensor& B, bool left, bool check_errors) {
  const char* name = "[linalg.solve]";
  check_matrix(name, "A", A, true);
  ANVIL_CHECK(B.defined(), Error, name, " undefined tensor B");
  check_same_dtype(name, "A", A, B);
  const int64_t n = A.size(-1);
  // torch.linalg.solve's vector case: B (n) or B of A's shape without its last dim.
  const bool vector = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == batch_of(A, 1));
  ANVIL_CHECK(!(vector && !left), ShapeError, name,
              " Vector broadcasting of the left hand side is not supported for left=False. In this case linalg.solve "
              "is equivalent to B / A.squeeze(-1)");
  const Tensor b = vector ? B.unsqueeze(-1) : B;
  ANVIL_CHECK(b.dim() >= 2, ShapeError, name, " The input tensor B must have at least 1 dimension");
  check_rhs(name, n, b, left);
  check_same_device(name, A, b);
  const Shape batch = broadcast_batch(name, "A", A, b);
  // The small path where info has A's batch shape, as PyTorch's (B not broadcasting A).
  if (small_path(A) && b.numel() > 0 && batch == batch_of(A)) {
    // X A = B  <=>  A^T X^T = B^T: transposed views, no copies.
    const Tensor a = left ? A : A.transpose(-2, -1), rhs = left ? b : b.transpose(-2, -1);
    const int64_t k = rhs.size(-1);
    const Tensor a3 = flat_batch(a.expand(with(batch, {n, n}))), b3 = flat_batch(rhs.expand(with(batch, {n, k})));
    Tensor x = empty(with(batch, {n, k}), TensorOptions(A.dtype()).device(A.device()));
    Tensor info = empty(batch, TensorOptions(kInt32).device(A.device()));
    SmallLuParams p = small_params(a3, SmallLuResult::Solve);
    p.b = b3.raw_data_ptr();
    p.out = x.raw_data_ptr();
    p.info = int_ptr(info);
    p.nrhs = k;
    p.stride_b_batch = b3.stride(0);
    p.stride_b_row = b3.stride(1);
    p.stride_b_col = b3.stride(2);
    ANVIL_KERNEL(A.device(), small_lu, p);
    if (check_errors) check_info(name, info, ErrorKind::Solve, A.dim() == 2);
    if (!left) x = x.transpose(-2, -1);
    return {vector ? x.squeeze(-1) : x, info};
  }
  auto [lu, pivots, info] = lu_factor_core(name, A, true);
  if (check_errors) check_info(name, info, ErrorKind::Solve, A.dim() == 2);
  Tensor x = lu_solve(lu, pivots, b, left, false);
  return {vector ? x.squeeze(-1) : x, info};
}

Tensor solve(const Tensor& A, const Tensor& B, bool left) { return std::get<0>(solve_ex(A, B, left, true)); }

namespace {
// (det or sign, logabsdet) of square A from its LU factors.
std::tuple<Tensor, Tensor> det_core(const char* name, const Tensor& A, bool log_abs) {
  check_matrix(name, "A", A, true);
  const Shape batch = batch_of(A);
  const TensorOptions opts = TensorOptions(A.dtype()).device(A.device());
  const DType real = A.dtype() == kComplex64 ? kFloat32 : A.dtype();
  if (A.size(-1) == 0 || shape_numel(batch) == 0)
    return {ones(batch, opts), zeros(batch, TensorOptions(real).device(A.device()))};
  Tensor d = empty(batch, opts);
  Tensor la = log_abs ? empty(batch, TensorOptions(real).device(A.device())) : Tensor();
  if (small_path(A)) {
    const Tensor a3 = flat_batch(A);  // named: a copy when the batch dims do not merge
    SmallLuParams p = small_params(a3, log_abs ? SmallLuResult::SignLogAbsDet : SmallLuResult::Det);
    p.out = d.raw_data_ptr();
    p.log_abs_det = log_abs ? la.raw_data_ptr() : nullptr;
    ANVIL_KERNEL(A.device(), small_lu, p);
    return {d, la};
  }
  auto [lu, pivots, info] = lu_factor_core(name, A, true);
  LuDetParams p;
  p.lu = lu.raw_data_ptr();
  p.pivots = int_ptr(pivots);
  p.det = d.raw_data_ptr();
  p.log_abs_det = log_abs ? la.raw_data_ptr() : nullptr;
  p.dtype = A.dtype();
  p.log_abs = log_abs;
  p.batch = shape_numel(batch);
  p.n = A.size(-1);
  ANVIL_KERNEL(A.device(), lu_det, p);
  return {d, la};
}
}  // namespace

Tensor det(const Tensor& A) { return std::get<0>(det_core("[linalg.det]", A, false)); }

std::tuple<Tensor, Tensor> slogdet(const Tensor& A) { return det_core("[linalg.slogdet]", A, true); }

std::tuple<Tensor, Tensor> inv_ex(const Tensor& A, bool check_errors) {
  const char* name = "[linalg.inv]";
  check_matrix(name, "A", A, true);
  const int64_t n = A.size(-1);
  if (small_path(A)) {
    Tensor out = empty(A.sizes(), TensorOptions(A.dtype()).device(A.device()));
    Tensor info = empty(batch_of(A), TensorOptions(kInt32).device(A.device()));
    const Tensor a3 = flat_batch(A);  // named: a copy when the batch dims do not merge
    SmallLuParams p = small_params(a3, SmallLuResult::Inverse);
    p.out = out.raw_data_ptr();
    p.info = int_ptr(info);
    ANVIL_KERNEL(A.device(), small_lu, p);
    if (check_errors) check_info(name, info, ErrorKind::Inverse, A.dim() == 2);
    return {out, info};
  }
  auto [lu, pivots, info] = lu_factor_core(name, A, true);
  if (check_errors) check_info(name, info, ErrorKind::Inverse, A.dim() == 2);
  const Tensor identity = eye(n, TensorOptions(A.dtype()).device(A.device())).expand(A.sizes());
  return {lu_solve_left(lu, pivots, identity, LinalgOp::None), info};
}

Tensor inv(const Tensor& A) { return std::get<0>(inv_ex(A, true)); }

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left, bool unitriangular) {
  const char* name = "[linalg.solve_triangular]";
  check_matrix(name, "A", A, true);
  check_matrix(name, "B", B, false);
  check_same_dtype(name, "A", A, B);
  check_same_device(name, A, B);
  const int64_t n = A.size(-1);
  check_rhs(name, n, B, left);
  const Shape batch = broadcast_batch(name, "A", A, B);
  const Tensor a = as_column_major(A.expand(with(batch, {n, n})));
  Tensor x = column_major_copy(B.expand(with(batch, {B.size(-2), B.size(-1)})));
  if (x.numel() == 0) return x;
  TriangularSolveParams p;
  p.a = a.raw_data_ptr();
  p.b = x.raw_data_ptr();
  p.dtype = A.dtype();
  p.batch = shape_numel(batch);
  p.n = n;
  p.rows = x.size(-2);
  p.cols = x.size(-1);
  p.left = left;
  p.upper = upper;
  p.unit = unitriangular;
  ANVIL_KERNEL(A.device(), triangular_solve, p);
  return x;
}

std::tuple<Tensor, Tensor> cholesky_ex(const Tensor& A, bool upper, bool check_errors) {
  const char* name = "[linalg.cholesky]";
  check_matrix(name, "A", A, true);
  // upper: PyTorch reads A's upper triangle; U = L^H where L L^H = A^H (whose lower triangle
  // is that upper one).
  Tensor l = column_major_copy(upper ? adjoint_of(A) : A);
  Tensor info = zeros(batch_of(A), TensorOptions(kInt32).device(A.device()));
  if (l.numel() > 0) {
    CholeskyParams p;
    p.a = l.raw_data_ptr();
    p.info = int_ptr(info);
    p.dtype = A.dtype();
    p.batch = shape_numel(batch_of(A));
    p.n = A.size(-1);
    ANVIL_KERNEL(A.device(), cholesky, p);
  }
  if (check_errors) check_info(name, info, ErrorKind::Cholesky, A.dim() == 2);
  return {upper ? adjoint_of(l) : l, info};
}

Tensor cholesky(const Tensor& A, bool upper) { return std::get<0>(cholesky_ex(A, upper, true)); }

FusedPlan lu_plan(const Tensor& A) {
  check_matrix("[linalg.lu_plan]", "A", A, true);
  return small_path(A) ? FusedPlan::Fused : FusedPlan::Composed;
}

}  // namespace anvil::linalg
