// torch.linalg: validation, batch broadcasting and the column-major work buffers the backends
// factor and solve in place (LAPACK's layout, which PyTorch's results also have); pinv and
// CUDA's least squares composed from QR / the SVD and matmuls.
#include "anvil/linalg.h"

#include <algorithm>
#include <cctype>
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

DType real_of(DType t) { return t == kComplex64 ? kFloat32 : t; }

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

// A new column-major batch of `sizes` whose storage runs 64 bytes past the last element: every
// buffer LAPACK reads or writes comes from here, as OpenBLAS's AVX-512 kernels may read one
// vector past a matrix's end (cgemv_n inside cgesdd read 8 bytes past its input under ASan).
Tensor padded_empty(const Shape& sizes, const Shape& strides, const TensorOptions& opts) {
  const int64_t pad = 64 / static_cast<int64_t>(element_size(opts.dtype_)) + 1;
  Tensor storage = empty({shape_numel(sizes) + pad}, opts);
  return storage.as_strided(sizes, strides, 0);
}
Tensor column_major_empty(const Shape& sizes, const TensorOptions& opts) {
  return padded_empty(sizes, column_major_strides(sizes), opts);
}
// The same, row-major (contiguous).
Tensor row_major_copy(const Tensor& t) {
  Tensor out = padded_empty(t.sizes(), contiguous_strides(t.sizes()), TensorOptions(t.dtype()).device(t.device()));
  if (out.numel() > 0) out.copy_(t);
  return out;
}

// A new column-major batch holding t's values (t may be an expanded view).
Tensor column_major_copy(const Tensor& t) {
  Tensor out = column_major_empty(t.sizes(), TensorOptions(t.dtype()).device(t.device()));
  if (out.numel() > 0) out.copy_(t);
  return out;
}
Tensor as_column_major(const Tensor& t) { return is_column_major(t) ? t : column_major_copy(t); }

// Whether any element of a bool tensor is true (one read back to the host).
bool any_true(const Tensor& mask) {
  return mask.numel() > 0 && sum(mask.to(kInt32)).to(Device(kCPU)).item<int32_t>() > 0;
}

// An int32 tensor's elements on any device (data_ptr<T>() is for CPU tensors).
int32_t* int_ptr(const Tensor& t) { return static_cast<int32_t*>(t.raw_data_ptr()); }

enum class ErrorKind { LuFactor, Solve, Inverse, Cholesky, LeastSquares, Svd };

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
      case ErrorKind::LeastSquares:
        throw LinAlgError(detail::cat_message(name, where,
                                              ": The least squares solution could not be computed because the input "
                                              "matrix does not have full rank (error code: ",
                                              i, ")."));
      case ErrorKind::Svd:
        // LAPACK's gesdd reports a NaN entry as argument 4; any other negative info is an
        // argument anvil passed wrongly.
        if (i == -4)
          throw LinAlgError(detail::cat_message(
              name, where, ": The algorithm failed to converge because the input matrix contained non-finite values."));
        ANVIL_CHECK(i > 0, DeviceError, name, where, " the SVD rejected argument ", -i);
        throw LinAlgError(detail::cat_message(name, where,
                                              ": The algorithm failed to converge because the input matrix is "
                                              "ill-conditioned or has too many repeated singular values (error code: ",
                                              i, ")."));
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

// X = T^-1 X (left) or X T^-1 in place for the upper or lower triangle of T (unit diagonal
// when unit), both column-major batches of the same batch size.
void triangular_inplace(const Tensor& t, Tensor& x, bool upper, bool left = true, bool unit = false,
                        bool transpose = false) {
  if (x.numel() == 0) return;
  TriangularSolveParams p;
  p.a = t.raw_data_ptr();
  p.b = x.raw_data_ptr();
  p.dtype = t.dtype();
  p.batch = shape_numel(batch_of(x));
  p.n = t.size(-1);
  p.rows = x.size(-2);
  p.cols = x.size(-1);
  p.left = left;
  p.upper = upper;
  p.unit = unit;
  p.transpose = transpose;
  ANVIL_KERNEL(t.device(), triangular_solve, p);
}

// The fused triangular solve's params that decide its plan (dtype, order, right-hand sides).
SmallTriangularParams small_triangular_params(const Tensor& A, const Tensor& B, bool left) {
  SmallTriangularParams p;
  p.dtype = A.dtype();
  p.n = A.size(-1);
  p.nrhs = left ? B.size(-1) : B.size(-2);
  p.left = left;
  return p;
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
  const DType real = real_of(A.dtype());
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
  const Tensor b = B.expand(with(batch, {B.size(-2), B.size(-1)}));
  SmallTriangularParams sp = small_triangular_params(A, B, left);
  if (b.numel() > 0 && ANVIL_PLAN(A.device(), small_triangular, sp) == FusedPlan::Fused) {
    // One kernel: B read through its strides, X written with its vectors along the fastest dim
    // (left: row-major; right: column-major).
    const Tensor a3 = flat_batch(A.expand(with(batch, {n, n})));  // views where the batch merges
    const Tensor b3 = flat_batch(b);
    const TensorOptions opts = TensorOptions(B.dtype()).device(B.device());
    Tensor x = left ? empty(b.sizes(), opts) : column_major_empty(b.sizes(), opts);
    sp.a = a3.raw_data_ptr();
    sp.b = b3.raw_data_ptr();
    sp.x = x.raw_data_ptr();
    sp.batch = a3.size(0);
    sp.stride_a_batch = a3.stride(0);
    sp.stride_a_row = a3.stride(1);
    sp.stride_a_col = a3.stride(2);
    sp.stride_b_batch = b3.stride(0);
    sp.stride_b_elem = b3.stride(left ? 1 : 2);
    sp.stride_b_vec = b3.stride(left ? 2 : 1);
    sp.upper = upper;
    sp.unit = unitriangular;
    ANVIL_KERNEL(A.device(), small_triangular, sp);
    return x;
  }
  // A is not copied when it is column-major or row-major (then it is A^T column-major, its other
  // triangle, read through trsm's transpose). CPU: X is written row-major over a copy of B, that is
  // X^T column-major, solved as X^T A^T = B^T (left) or A^T X^T = B^T (right): no transposing
  // copy of B, OpenBLAS's right-side trsm as fast as its left one. CUDA: X column-major, the side
  // kept (cuBLAS's right-side trsm measured slower on an H100: 1024^2 x 1024 float32 217 vs 145 us).
  const Tensor a_full = A.expand(with(batch, {n, n}));
  const bool a_column_major = is_column_major(a_full);
  const Tensor a = a_column_major || a_full.is_contiguous() ? a_full : row_major_copy(a_full);
  const bool stored_upper = a_column_major ? upper : !upper;
  if (A.device().is_cpu()) {
    Tensor x = row_major_copy(b);
    Tensor xt = x.transpose(-2, -1);
    triangular_inplace(a, xt, stored_upper, !left, unitriangular, a_column_major);
    return x;
  }
  Tensor x = column_major_copy(b);
  triangular_inplace(a, x, stored_upper, left, unitriangular, !a_column_major);
  return x;
}

FusedPlan solve_triangular_plan(const Tensor& A, const Tensor& B, bool left) {
  const char* name = "[linalg.solve_triangular_plan]";
  check_matrix(name, "A", A, true);
  check_matrix(name, "B", B, false);
  return ANVIL_PLAN(A.device(), small_triangular, small_triangular_params(A, B, left));
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

namespace {

double epsilon_of(DType t) { return real_of(t) == kFloat64 ? 2.220446049250313e-16 : 1.1920928955078125e-07; }

// geqrf of a column-major (batch, m, n) buffer in place; tau (batch, min(m, n)).
Tensor geqrf_inplace(Tensor& a) {
  const Shape batch = batch_of(a);
  const int64_t m = a.size(-2), n = a.size(-1);
  Tensor tau = column_major_empty(with(batch, {1, std::min(m, n)}), TensorOptions(a.dtype()).device(a.device()))
                   .squeeze(-2);
  if (a.numel() == 0) return tau;
  GeqrfParams p;
  p.a = a.raw_data_ptr();
  p.tau = tau.raw_data_ptr();
  p.dtype = a.dtype();
  p.batch = shape_numel(batch);
  p.m = m;
  p.n = n;
  ANVIL_KERNEL(a.device(), geqrf, p);
  return tau;
}

// C = Q C or Q^H C in place, Q from the k reflectors in a column-major (batch, m, *) buffer.
void ormqr_inplace(const Tensor& a, const Tensor& tau, Tensor& c, int64_t k, LinalgOp op) {
  if (c.numel() == 0 || k == 0) return;
  OrmqrParams p;
  p.a = a.raw_data_ptr();
  p.tau = tau.raw_data_ptr();
  p.c = c.raw_data_ptr();
  p.dtype = a.dtype();
  p.op = op;
  p.batch = shape_numel(batch_of(c));
  p.m = c.size(-2);
  p.a_cols = a.size(-1);
  p.k = k;
  p.nrhs = c.size(-1);
  ANVIL_KERNEL(a.device(), ormqr, p);
}

Tensor column_major_zeros(const Shape& sizes, const TensorOptions& opts) {
  Tensor t = column_major_empty(sizes, opts);
  if (t.numel() > 0) t.zero_();
  return t;
}

// Identity matrices (*, n, n) as a column-major batch.
Tensor eye_batch(const Shape& batch, int64_t n, const TensorOptions& opts) {
  return column_major_copy(eye(n, opts).expand(with(batch, {n, n})));
}

// sum |t|^2 over the rows of t (*, rows, k): (*, k), real.
Tensor squared_norms(const Tensor& t) {
  if (!is_complex(t.dtype())) return sum(mul(t, t), {-2});
  const Tensor v = view_as_real(t);
  return sum(mul(v, v), {-3, -1});
}

SvdDriver svd_driver(const char* name, const Tensor& A, std::optional<std::string_view> driver) {
  if (!driver) return SvdDriver::Default;
  ANVIL_CHECK(A.device().type == kCUDA, ValueError, name,
              " keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend.");
  if (*driver == "gesvdj") return SvdDriver::Gesvdj;
  if (*driver == "gesvd") return SvdDriver::Gesvd;
  ANVIL_CHECK(*driver != "gesvda", ValueError, name,
              " driver 'gesvda' (cuSOLVER's approximate SVD) is not supported by anvil; use 'gesvdj' or 'gesvd'");
  throw ValueError(detail::cat_message(name, " unknown svd driver ", *driver,
                                  " (expected one of 'gesvdj', 'gesvd'; see torch.linalg.svd's documentation)"));
}

// V diag(s+) from the SVD's Vh and S (*, k): s+ = 1 / s where s > cutoff (*, 1), else 0 (so tiny
// singular values are dropped, never inverted); pinv's and CUDA's gelsd / gelss's core.
Tensor v_times_inverse_above(const Tensor& Vh, const Tensor& S, const Tensor& cutoff) {
  const Tensor keep = gt(S, cutoff);
  const Tensor s_pinv = where(keep, pow(where(keep, S, Scalar(1)), Scalar(-1)), Scalar(0));
  return mul(adjoint_of(Vh), s_pinv.to(Vh.dtype()).unsqueeze(-2));
}

// (U, S, Vh) of A; U and Vh empty (0) without compute_uv.
std::tuple<Tensor, Tensor, Tensor> svd_core(const char* name, const Tensor& A, bool full_matrices, bool compute_uv,
                                            SvdDriver driver) {
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A);
  const TensorOptions opts = TensorOptions(A.dtype()).device(A.device());
  const int64_t u_cols = full_matrices ? m : k, vh_rows = full_matrices ? n : k;
  Tensor S = empty(with(batch, {k}), TensorOptions(real_of(A.dtype())).device(A.device()));
  Tensor U = compute_uv ? column_major_empty(with(batch, {m, u_cols}), opts) : empty({0}, opts);
  Tensor Vh = compute_uv ? column_major_empty(with(batch, {vh_rows, n}), opts) : empty({0}, opts);
  if (A.numel() == 0) {
    // No values; full U / Vh are the identity (PyTorch's).
    if (compute_uv && full_matrices && shape_numel(batch) > 0) {
      if (m > 0) U = eye_batch(batch, m, opts);
      if (n > 0) Vh = eye_batch(batch, n, opts);
    }
    return {U, S, Vh};
  }
  auto run = [&](SvdDriver d) {
    Tensor a = column_major_copy(A);
    Tensor info = zeros(batch, TensorOptions(kInt32).device(A.device()));
    SvdParams p;
    p.a = a.raw_data_ptr();
    p.s = S.raw_data_ptr();
    p.u = compute_uv ? U.raw_data_ptr() : nullptr;
    p.vh = compute_uv ? Vh.raw_data_ptr() : nullptr;
    p.info = int_ptr(info);
    p.dtype = A.dtype();
    p.driver = d;
    p.batch = shape_numel(batch);
    p.m = m;
    p.n = n;
    p.compute_uv = compute_uv;
    p.full_matrices = full_matrices;
    ANVIL_KERNEL(A.device(), svd, p);
    return info;
  };
  // info read back once per run; PyTorch's fallback: a default Jacobi run that did not converge
  // is redone with gesvd.
  Tensor info = run(driver).to(Device(kCPU));
  if (A.device().type == kCUDA && driver == SvdDriver::Default && any_true(ne(info, Scalar(0))))
    info = run(SvdDriver::Gesvd).to(Device(kCPU));
  check_info(name, info, ErrorKind::Svd, A.dim() == 2);
  return {U, S, Vh};
}

}  // namespace

std::tuple<Tensor, Tensor> qr(const Tensor& A, std::string_view mode) {
  const char* name = "[linalg.qr]";
  check_matrix(name, "A", A, false);
  const bool complete = mode == "complete", r_only = mode == "r";
  ANVIL_CHECK(complete || r_only || mode == "reduced", ValueError, name, " qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A);
  const TensorOptions opts = TensorOptions(A.dtype()).device(A.device());
  Tensor a = column_major_copy(A);
  const Tensor tau = geqrf_inplace(a);
  const int64_t r_rows = complete ? m : k;
  // triu(X) = tril(X^T)^T: on a's transpose the triangle kernel writes R column-major directly.
  Tensor R = tril(a.narrow(-2, 0, r_rows).transpose(-2, -1)).transpose(-2, -1);
  if (r_only) return {empty({0}, opts), R};
  const int64_t q_cols = complete ? m : k;
  if (shape_numel(batch) == 0 || m == 0) return {empty(with(batch, {m, q_cols}), opts), R};
  if (k == 0) return {eye_batch(batch, m, opts).narrow(-1, 0, q_cols), R};
  // The reflectors in Q's first k columns, then orgqr forms Q from them in place.
  Tensor Q;
  if (q_cols == n) {
    Q = a;
  } else if (q_cols < n) {
    Q = column_major_copy(a.narrow(-1, 0, q_cols));
  } else {
    Q = column_major_zeros(with(batch, {m, q_cols}), opts);
    Q.narrow(-1, 0, n).copy_(a);
  }
  OrgqrParams p;
  p.a = Q.raw_data_ptr();
  p.tau = tau.raw_data_ptr();
  p.dtype = A.dtype();
  p.batch = shape_numel(batch);
  p.m = m;
  p.n = q_cols;
  p.k = k;
  ANVIL_KERNEL(A.device(), orgqr, p);
  return {Q, R};
}

std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& A, bool full_matrices, std::optional<std::string_view> driver) {
  const char* name = "[linalg.svd]";
  check_matrix(name, "A", A, false);
  // PyTorch returns empty inputs before it looks at the driver.
  if (A.numel() == 0) return svd_core(name, A, full_matrices, true, SvdDriver::Default);
  return svd_core(name, A, full_matrices, true, svd_driver(name, A, driver));
}

Tensor svdvals(const Tensor& A, std::optional<std::string_view> driver) {
  const char* name = "[linalg.svdvals]";
  check_matrix(name, "A", A, false);
  const SvdDriver d = A.numel() == 0 ? SvdDriver::Default : svd_driver(name, A, driver);  // as svd
  return std::get<1>(svd_core(name, A, false, false, d));
}

Tensor pinv(const Tensor& A, std::optional<double> atol, std::optional<double> rtol, bool hermitian) {
  const char* name = "[linalg.pinv]";
  check_matrix(name, "A", A, hermitian);
  const int64_t m = A.size(-2), n = A.size(-1);
  const TensorOptions opts = TensorOptions(A.dtype()).device(A.device());
  if (A.numel() == 0) return zeros(with(batch_of(A), {n, m}), opts);
  Tensor a = A;
  if (hermitian) {
    // The Hermitian matrix A's lower triangle defines (its diagonal's imaginary parts dropped,
    // as LAPACK's heevd does).
    const Tensor h = add(tril(A), adjoint_of(tril(A, -1)));
    a = mul(add(h, adjoint_of(h)), Scalar(0.5));
  }
  auto [U, S, Vh] = svd_core(name, a, false, true, SvdDriver::Default);
  const double rt = rtol ? *rtol : (atol && *atol > 0 ? 0.0 : epsilon_of(A.dtype()) * static_cast<double>(std::max(m, n)));
  const Tensor tol = clamp(mul(S.narrow(-1, 0, 1), Scalar(rt)), Scalar(atol.value_or(0.0)));
  return matmul(v_times_inverse_above(Vh, S, tol), adjoint_of(U));
}

std::tuple<Tensor, Tensor, Tensor, Tensor> lstsq(const Tensor& A, const Tensor& B, std::optional<double> rcond,
                                                 std::optional<std::string_view> driver_name) {
  const char* name = "[linalg.lstsq]";
  check_matrix(name, "A", A, false);
  ANVIL_CHECK(B.defined(), Error, name, " undefined tensor B");
  ANVIL_CHECK(B.dim() >= 1, ShapeError, name, " other must have at least 1 dimension.");
  check_same_dtype(name, "A", A, B);
  check_same_device(name, A, B);
  ANVIL_CHECK(A.dim() >= B.dim() && A.dim() - B.dim() <= 1, ShapeError, name,
              " input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) <= 1 (A ",
              shape_str(A.sizes()), ", B ", shape_str(B.sizes()), ")");
  const bool vector = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == batch_of(A, 1));
  const Tensor b = vector ? B.unsqueeze(-1) : B;
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), nrhs = b.size(-1);
  ANVIL_CHECK(b.size(-2) == m, ShapeError, name, " input.size(-2) should match other.size(", vector ? -1 : -2, ") (A ",
              shape_str(A.sizes()), ", B ", shape_str(B.sizes()), ")");
  const bool cuda = A.device().type == kCUDA;
  std::string d = driver_name ? std::string(*driver_name) : std::string(cuda ? "gels" : "gelsy");
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  LstsqDriver driver;
  if (d == "gels") driver = LstsqDriver::Gels;
  else if (d == "gelsy") driver = LstsqDriver::Gelsy;
  else if (d == "gelsd") driver = LstsqDriver::Gelsd;
  else if (d == "gelss") driver = LstsqDriver::Gelss;
  else throw ValueError(detail::cat_message(name, " parameter `driver` should be one of (gels, gelsy, gelsd, gelss), got '", d, "'"));
  ANVIL_CHECK(!(cuda && driver == LstsqDriver::Gelsy), ValueError, name,
              " driver 'gelsy' is not supported on CUDA (gels, gelsd and gelss are)");
  const double rc = rcond.value_or(epsilon_of(A.dtype()) * static_cast<double>(std::max(m, n)));
  const Shape batch = broadcast_batch(name, "A", A, b);
  const int64_t nb = shape_numel(batch);
  const TensorOptions opts = TensorOptions(A.dtype()).device(A.device());
  const TensorOptions real_opts = TensorOptions(real_of(A.dtype())).device(A.device());
  const bool has_rank = driver != LstsqDriver::Gels, has_s = driver == LstsqDriver::Gelsd || driver == LstsqDriver::Gelss;
  const Tensor a_b = A.expand(with(batch, {m, n})), b_b = b.expand(with(batch, {m, nrhs}));
  Tensor x;          // the solution (*, n, nrhs)
  Tensor residuals;  // (*, nrhs) or empty
  Tensor rank = has_rank ? zeros(batch, TensorOptions(kInt64).device(A.device())) : empty({0}, TensorOptions(kInt64).device(A.device()));
  Tensor svals = has_s ? zeros(with(batch, {k}), real_opts) : empty({0}, real_opts);
  auto finish = [&]() {
    if (!residuals.defined()) residuals = empty({0}, real_opts);
    return std::tuple<Tensor, Tensor, Tensor, Tensor>{vector ? x.squeeze(-1) : x, residuals, rank, svals};
  };
  if (nb == 0 || m == 0 || n == 0) {
    x = zeros(with(batch, {n, nrhs}), opts);
    if (m > n && driver == LstsqDriver::Gels) residuals = squared_norms(b_b);
    return finish();
  }
  if (!cuda) {
    Tensor a = column_major_copy(a_b);
    const int64_t ldb = std::max(m, n);
    Tensor xb = column_major_zeros(with(batch, {ldb, nrhs}), opts);
    xb.narrow(-2, 0, m).copy_(b_b);
    Tensor rank32 = zeros(batch, TensorOptions(kInt32).device(A.device()));
    Tensor info = zeros(batch, TensorOptions(kInt32).device(A.device()));
    LstsqParams p;
    p.a = a.raw_data_ptr();
    p.b = xb.raw_data_ptr();
    p.rank = has_rank ? int_ptr(rank32) : nullptr;
    p.s = has_s ? svals.raw_data_ptr() : nullptr;
    p.info = int_ptr(info);
    p.dtype = A.dtype();
    p.driver = driver;
    p.rcond = rc;
    p.batch = nb;
    p.m = m;
    p.n = n;
    p.nrhs = nrhs;
    ANVIL_KERNEL(A.device(), lstsq, p);
    check_info(name, info, ErrorKind::LeastSquares, A.dim() == 2 && b.dim() == 2);
    if (has_rank) rank = rank32.to(kInt64);
    x = xb.narrow(-2, 0, n);
    // LAPACK leaves the residual's components in rows n..m (gelsd / gelss at full rank only).
    const bool residual_rows = m > n && (driver == LstsqDriver::Gels || (has_s && !any_true(ne(rank32, Scalar(n)))));
    if (residual_rows) residuals = squared_norms(xb.narrow(-2, n, m - n));
    return finish();
  }
  if (driver == LstsqDriver::Gels) {
    if (m >= n) {
      // A = QR; X = R^-1 (Q^H B)[:n]; the residual's components are (Q^H B)[n:].
      Tensor a = column_major_copy(a_b);
      const Tensor tau = geqrf_inplace(a);
      Tensor c = column_major_copy(b_b);
      ormqr_inplace(a, tau, c, n, LinalgOp::Adjoint);
      const Tensor r = column_major_copy(a.narrow(-2, 0, n));
      x = column_major_copy(c.narrow(-2, 0, n));
      triangular_inplace(r, x, true);
      if (m > n) residuals = squared_norms(c.narrow(-2, n, m - n));
    } else {
      // A^H = QR; X = Q [R^-H B; 0]: the minimum-norm solution.
      Tensor ah = column_major_copy(adjoint_of(a_b));
      const Tensor tau = geqrf_inplace(ah);
      const Tensor rh = column_major_copy(adjoint_of(ah.narrow(-2, 0, m)));
      Tensor z = column_major_copy(b_b);
      triangular_inplace(rh, z, false);
      x = column_major_zeros(with(batch, {n, nrhs}), opts);
      x.narrow(-2, 0, m).copy_(z);
      ormqr_inplace(ah, tau, x, m, LinalgOp::None);
    }
    return finish();
  }
  // gelsd / gelss on CUDA: X = V diag(s+) U^H B, s+ the inverses of s > rcond * s_max.
  auto [U, S, Vh] = svd_core(name, a_b, false, true, SvdDriver::Default);
  const Tensor cutoff = mul(S.narrow(-1, 0, 1), Scalar(rc));
  x = matmul(v_times_inverse_above(Vh, S, cutoff), matmul(adjoint_of(U), b_b));
  rank = sum(gt(S, cutoff), {-1}, false, kInt64);
  svals = S;
  if (m > n && !any_true(ne(rank, Scalar(n)))) residuals = squared_norms(sub(matmul(a_b, x), b_b));
  return finish();
}

// ---- Backward (PyTorch's formulas, composed from the ops above).
namespace {

// t summed over its leading dims and over the dims `shape` has as 1: the gradient of an input
// that was broadcast to t's shape.
Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const int64_t lead = t.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == 1 && t.size(lead + static_cast<int64_t>(d)) != 1) dims.push_back(lead + static_cast<int64_t>(d));
  return (dims.empty() ? t : sum(t, dims, true)).reshape(shape);
}

// The main diagonal of the last two dims, a view (*, min(m, n)).
Tensor diagonal_of(const Tensor& t) {
  Shape sizes = batch_of(t), strides(t.strides().begin(), t.strides().end() - 2);
  sizes.push_back(std::min(t.size(-2), t.size(-1)));
  strides.push_back(t.stride(-2) + t.stride(-1));
  return t.as_strided(sizes, strides, t.storage_offset());
}
// Matrices (*, k, k) with v (*, k) on the diagonal.
Tensor diag_embed_of(const Tensor& v) {
  const int64_t k = v.size(-1);
  Tensor out = zeros(with(batch_of(v, 1), {k, k}), TensorOptions(v.dtype()).device(v.device()));
  diagonal_of(out).copy_(v);
  return out;
}
// k x k booleans, true off the diagonal.
Tensor off_diagonal(int64_t k, Device dev) {
  const TensorOptions ints = TensorOptions(kInt64).device(dev);
  return ne(arange(k, ints).unsqueeze(1), arange(k, ints).unsqueeze(0));
}
// |t| elementwise, real (complex: the modulus).
Tensor modulus(const Tensor& t) {
  if (!is_complex(t.dtype())) return abs(t);
  const Tensor v = view_as_real(t);
  return sqrt(sum(mul(v, v), {-1}));
}
Tensor zeros_as(const Shape& shape, const Tensor& like) {
  return zeros(shape, TensorOptions(like.dtype()).device(like.device()));
}

}  // namespace

Tensor det_backward(const Tensor& grad, const Tensor& A, const Tensor& det_A) {
  const char* name = "[linalg.det_backward]";
  check_matrix(name, "A", A, true);
  ANVIL_CHECK(grad.defined() && det_A.defined() && grad.sizes() == batch_of(A) && det_A.sizes() == batch_of(A),
              ShapeError, name, " expected grad and det of shape ", shape_str(batch_of(A)), " for A of shape ",
              shape_str(A.sizes()));
  if (A.numel() == 0) return zeros_as(A.sizes(), A);
  const int64_t n = A.size(-1);
  const Tensor d = mul(conj_physical(det_A), grad.to(A.dtype()));
  // Invertible: conj(det) grad A^-H, as lu_solve of the scaled identity with the adjoint.
  auto [lu, pivots, info] = lu_factor_core(name, A, true);
  const Tensor scaled_eye = mul(eye(n, TensorOptions(A.dtype()).device(A.device())), d.unsqueeze(-1).unsqueeze(-1));
  Tensor g = lu_solve(lu, pivots, scaled_eye, true, true);
  // |det| < 100 eps: the cofactors from the SVD, U diag(alpha prod_{j != i} s_j) Vh.
  const Tensor singular = lt(modulus(det_A), Scalar(100 * epsilon_of(A.dtype())));
  if (!any_true(singular)) return g;
  auto [U, S, Vh] = svd_core(name, A, false, true, SvdDriver::Default);
  const Tensor alpha = mul(conj_physical(mul(det(U), det(Vh))), grad.to(A.dtype()));
  const Tensor others =
      prod(where(off_diagonal(n, A.device()), S.unsqueeze(-2).expand(with(batch_of(A), {n, n})), Scalar(1)), {-1});
  const Tensor D = mul(alpha.unsqueeze(-1), others.to(A.dtype()));
  const Tensor gs = matmul(mul(U, D.unsqueeze(-2)), Vh);
  return where(singular.unsqueeze(-1).unsqueeze(-1), gs, g);
}

Tensor inv_backward(const Tensor& grad, const Tensor& inverse) {
  check_matrix("[linalg.inv_backward]", "inverse", inverse, true);
  const Tensor ih = adjoint_of(inverse);
  return neg(matmul(ih, matmul(grad, ih)));
}

std::tuple<Tensor, Tensor> solve_backward(const Tensor& grad, const Tensor& A, const Tensor& B, const Tensor& X,
                                          bool left) {
  const char* name = "[linalg.solve_backward]";
  check_matrix(name, "A", A, true);
  const bool vector = X.dim() == 1 || (X.dim() == A.dim() - 1 && X.sizes() == batch_of(A, 1));
  const Tensor gx = vector ? grad.unsqueeze(-1) : grad, x = vector ? X.unsqueeze(-1) : X;
  auto [lu, pivots, info] = lu_factor_core(name, A, true);
  const Tensor gb = lu_solve(lu, pivots, gx, left, true);
  const Tensor ga = neg(left ? matmul(gb, adjoint_of(x)) : matmul(adjoint_of(x), gb));
  return {sum_to(ga, A.sizes()), sum_to(vector ? gb.squeeze(-1) : gb, B.sizes())};
}

std::tuple<Tensor, Tensor> lu_solve_backward(const Tensor& grad, const Tensor& LU, const Tensor& pivots,
                                             const Tensor& B, const Tensor& X, bool left, bool adjoint) {
  const Tensor gb = lu_solve(LU, pivots, grad, left, !adjoint);
  auto [P, L, U] = lu_unpack(LU, pivots, true, left == adjoint);
  Tensor glu;
  if (left != adjoint) {
    // A X = B (left) or A^H X^H = B^H: gR = U^-H (-op(gX) op(X)^H), gL = L^-H gR U^H (strict lower).
    const Tensor rhs = neg(left ? matmul(grad, adjoint_of(X)) : matmul(adjoint_of(grad), X));
    const Tensor gr = solve_triangular(adjoint_of(U), rhs, false);
    const Tensor gl = tril(solve_triangular(adjoint_of(L), matmul(gr, adjoint_of(U)), true, true, true), -1);
    glu = add(gl, triu(gr));
  } else {
    const Tensor pt = P.transpose(-2, -1);
    Tensor gr = neg(matmul(matmul(matmul(pt, left ? X : adjoint_of(X)), left ? adjoint_of(grad) : grad), P));
    gr = solve_triangular(adjoint_of(L), gr, true, false, true);
    const Tensor gu = triu(solve_triangular(adjoint_of(U), matmul(adjoint_of(L), gr), false, false));
    glu = add(tril(gr, -1), gu);
  }
  return {sum_to(glu, LU.sizes()), sum_to(gb, B.sizes())};
}

std::tuple<Tensor, Tensor> solve_triangular_backward(const Tensor& grad, const Tensor& A, const Tensor& B,
                                                     const Tensor& X, bool upper, bool left, bool unitriangular) {
  const Tensor gb = solve_triangular(adjoint_of(A), grad, !upper, left, unitriangular);
  Tensor ga = neg(left ? matmul(gb, adjoint_of(X)) : matmul(adjoint_of(X), gb));
  ga = upper ? triu(ga, unitriangular ? 1 : 0) : tril(ga, unitriangular ? -1 : 0);
  return {sum_to(ga, A.sizes()), sum_to(gb, B.sizes())};
}

Tensor cholesky_backward(const Tensor& grad, const Tensor& L, bool upper) {
  check_matrix("[linalg.cholesky_backward]", "L", L, true);
  const Tensor l = upper ? adjoint_of(L) : L, gl = upper ? adjoint_of(grad) : grad;
  Tensor ga = tril(matmul(adjoint_of(l), gl));
  ga = mul(add(ga, adjoint_of(tril(ga, -1))), Scalar(0.5));
  ga = solve_triangular(adjoint_of(l), ga, true, true);
  return solve_triangular(l, ga, false, false);
}

Tensor qr_backward(const Tensor& grad_Q, const Tensor& grad_R, const Tensor& Q, const Tensor& R, std::string_view mode) {
  const char* name = "[linalg.qr_backward]";
  ANVIL_CHECK(mode != "r", ValueError, name,
              " The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
              "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.");
  ANVIL_CHECK(mode == "reduced" || mode == "complete", ValueError, name, " qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  check_matrix(name, "Q", Q, false);
  check_matrix(name, "R", R, false);
  const int64_t m = Q.size(-2), n = R.size(-1);
  ANVIL_CHECK(mode == "reduced" || m <= n, ValueError, name,
              " The QR decomposition is not differentiable when mode='complete' and nrows > ncols.");
  if (!grad_Q.defined() && !grad_R.defined()) return zeros_as(with(batch_of(Q), {m, n}), Q);
  // M = gR R^H - Q^H gQ.
  Tensor M;
  if (grad_R.defined()) M = matmul(grad_R, adjoint_of(R));
  if (grad_Q.defined()) {
    const Tensor qg = matmul(adjoint_of(Q), grad_Q);
    M = M.defined() ? sub(M, qg) : neg(qg);
  }
  Tensor ga;
  if (m >= n) {
    // Q syminvadj(triu(M)) (+ gQ), times R^-H from the right.
    const Tensor x = triu(M);
    Tensor sym = add(x, adjoint_of(x));
    sym = sub(sym, mul(diag_embed_of(diagonal_of(sym)), Scalar(0.5)));
    ga = matmul(Q, sym);
    if (grad_Q.defined()) ga = add(ga, grad_Q);
    return solve_triangular(adjoint_of(R), ga, false, false);
  }
  // m < n: Q trilImInvAdjSkew(-M) R[:, :m]^-H, padded with zero columns, + Q gR.
  const Tensor x = neg(M);
  Tensor skew = tril(sub(x, adjoint_of(x)));
  if (is_complex(Q.dtype())) skew = sub(skew, mul(diag_embed_of(diagonal_of(skew)), Scalar(0.5)));
  const Tensor left_part = solve_triangular(adjoint_of(R.narrow(-1, 0, m)), matmul(Q, skew), false, false);
  ga = zeros_as(with(broadcast_batch(name, "Q", Q, left_part), {m, n}), Q);
  ga.narrow(-1, 0, m).copy_(left_part);
  if (grad_R.defined()) ga = add(ga, matmul(Q, grad_R));
  return ga;
}

Tensor svd_backward(const Tensor& grad_U, const Tensor& grad_S, const Tensor& grad_Vh, const Tensor& U_in,
                    const Tensor& S, const Tensor& Vh_in) {
  const char* name = "[linalg.svd_backward]";
  check_matrix(name, "U", U_in, false);
  check_matrix(name, "Vh", Vh_in, false);
  const int64_t k = S.size(-1);
  // Full U / Vh: their first k columns / rows (the rest do not enter A).
  const bool wide_u = U_in.size(-1) > k, tall_vh = Vh_in.size(-2) > k;
  const Tensor U = wide_u ? U_in.narrow(-1, 0, k) : U_in, Vh = tall_vh ? Vh_in.narrow(-2, 0, k) : Vh_in;
  const Tensor gU = grad_U.defined() && wide_u ? grad_U.narrow(-1, 0, k) : grad_U;
  const Tensor gVh = grad_Vh.defined() && tall_vh ? grad_Vh.narrow(-2, 0, k) : grad_Vh;
  const int64_t m = U.size(-2), n = Vh.size(-1);
  const DType t = U.dtype();
  if (!gU.defined() && !grad_S.defined() && !gVh.defined()) return zeros_as(with(batch_of(U), {m, n}), U);
  const Tensor s = S.to(t);
  if (!gU.defined() && !gVh.defined()) {
    const Tensor gs = grad_S.to(t);
    return m >= n ? matmul(U, mul(gs.unsqueeze(-1), Vh)) : matmul(mul(U, gs.unsqueeze(-2)), Vh);
  }
  auto skew = [](const Tensor& x) { return sub(x, adjoint_of(x)); };
  const Tensor UhgU = gU.defined() ? skew(matmul(adjoint_of(U), gU)) : Tensor();
  const Tensor VhgV = gVh.defined() ? skew(matmul(Vh, adjoint_of(gVh))) : Tensor();
  if (is_complex(t)) {
    // The loss may not depend on the phases of the singular vectors: Im diag(U^H gU) = -Im
    // diag(V^H gV) (PyTorch's allclose, rtol = atol = 1e-2).
    const Tensor zero = zeros_like(S);
    const Tensor a = UhgU.defined() ? imag(diagonal_of(UhgU)) : zero;
    const Tensor b = VhgV.defined() ? neg(imag(diagonal_of(VhgV))) : zero;
    const Tensor bad = gt(abs(sub(a, b)), add(mul(abs(b), Scalar(1e-2)), Scalar(1e-2)));
    ANVIL_CHECK(!any_true(bad), LinAlgError, name,
                " svd_backward: The singular vectors in the complex case are specified up to multiplication by "
                "e^{i phi}. The specified loss function depends on this phase term, making it ill-defined.");
  }
  const Tensor s2 = mul(S, S);
  const Tensor E = where(off_diagonal(k, S.device()), sub(s2.unsqueeze(-2), s2.unsqueeze(-1)), Scalar(1));
  Tensor inner;
  if (gU.defined() && gVh.defined())
    inner = div(add(mul(UhgU, s.unsqueeze(-2)), mul(s.unsqueeze(-1), VhgV)), E);
  else if (gU.defined())
    inner = mul(div(UhgU, E), s.unsqueeze(-2));
  else
    inner = mul(s.unsqueeze(-1), div(VhgV, E));
  if (grad_S.defined()) inner = add(inner, diag_embed_of(grad_S.to(t)));
  if (is_complex(t) && gU.defined() && gVh.defined())
    inner = add(inner, diag_embed_of(div(diagonal_of(UhgU), mul(s, Scalar(2)))));
  if (m > n && gU.defined()) {
    // + (I - U U^H) gU S^-1.
    const Tensor gus = div(gU, s.unsqueeze(-2));
    Tensor ga = add(matmul(U, inner), sub(gus, matmul(U, matmul(adjoint_of(U), gus))));
    return matmul(ga, Vh);
  }
  if (m < n && gVh.defined()) {
    // + S^-1 gVh (I - V V^H).
    const Tensor sgv = div(gVh, s.unsqueeze(-1));
    Tensor ga = add(matmul(inner, Vh), sub(sgv, matmul(matmul(sgv, adjoint_of(Vh)), Vh)));
    return matmul(U, ga);
  }
  return m >= n ? matmul(U, matmul(inner, Vh)) : matmul(matmul(U, inner), Vh);
}

namespace {
Tensor triangle(const char* name, const Tensor& x, int64_t diagonal, bool upper) {
  ANVIL_CHECK(x.defined(), Error, name, " undefined tensor");
  ANVIL_CHECK(x.dim() >= 2, ShapeError, name, " input tensor must have at least 2 dimensions, got ", describe(x));
  const Tensor in = x.contiguous();
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  TriangleParams p;
  p.x = in.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.dtype = x.dtype();
  p.batch = shape_numel(batch_of(x));
  p.rows = x.size(-2);
  p.cols = x.size(-1);
  p.diagonal = diagonal;
  p.upper = upper;
  ANVIL_KERNEL(x.device(), triangle, p);
  return out;
}
}  // namespace

}  // namespace anvil::linalg

namespace anvil {
Tensor triu(const Tensor& x, int64_t diagonal) { return linalg::triangle("[triu]", x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return linalg::triangle("[tril]", x, diagonal, false); }
}  // namespace anvil

namespace anvil::linalg {

FusedPlan lu_plan(const Tensor& A) {
  check_matrix("[linalg.lu_plan]", "A", A, true);
  return small_path(A) ? FusedPlan::Fused : FusedPlan::Composed;
}

}  // namespace anvil::linalg
