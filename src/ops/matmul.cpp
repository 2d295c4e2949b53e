// mm / bmm / matmul: validation, batch broadcasting, layout for the backend GEMM.
#include "anvil/ops.h"
#include "core/kernels/matmul.h"
#include "core/util.h"

namespace anvil {
namespace {

bool is_gemm_dtype(DType t) {
  return t == kFloat32 || t == kFloat64 || t == kBFloat16 || t == kFloat16 || t == kComplex64;
}

// A [batch, rows, cols] operand with one unit stride among (rows, cols); copies otherwise.
// A dim of size > 1 with stride 0 (an expanded operand) has no valid BLAS leading dimension.
Tensor gemm_operand(const Tensor& t) {
  int64_t rs = t.stride(1), cs = t.stride(2);
  bool row_major = cs == 1 || t.size(2) == 1;
  bool col_major = rs == 1 || t.size(1) == 1;
  bool expanded = (t.size(1) > 1 && rs == 0) || (t.size(2) > 1 && cs == 0);
  if ((row_major || col_major) && !expanded) return t;
  return t.contiguous();
}

void fill_strides(const Tensor& t, int64_t& batch, int64_t& row, int64_t& col) {
  batch = t.size(0) == 1 ? 0 : t.stride(0);
  row = t.size(1) == 1 ? (t.size(2) == 1 ? 1 : t.stride(1)) : t.stride(1);
  col = t.size(2) == 1 ? 1 : t.stride(2);
  // A dim of size 1 gets the stride that makes the operand look dense in the other layout.
  if (t.size(1) == 1 && col == 1) row = t.size(2);
  if (t.size(2) == 1 && row == 1) col = t.size(1);
}

// C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]; batch of A or B may be 1 (broadcast).
Tensor bmm_core(const char* name, const Tensor& a_in, const Tensor& b_in, int64_t batch,
                std::optional<DType> out_dtype = std::nullopt) {
  ANVIL_CHECK(a_in.dtype() == b_in.dtype(), DTypeError, name, " expected m1 and m2 to have the same dtype, but got: ",
              dtype_name(a_in.dtype()), " != ", dtype_name(b_in.dtype()));
  ANVIL_CHECK(is_gemm_dtype(a_in.dtype()), DTypeError, name, " not implemented for '", dtype_name(a_in.dtype()),
              "' (float32, float64, bfloat16, float16 and complex64 are supported)");
  check_same_device(name, a_in, b_in);
  const DType c_dtype = out_dtype.value_or(a_in.dtype());
  ANVIL_CHECK(c_dtype == a_in.dtype() || (c_dtype == kFloat32 && (a_in.dtype() == kBFloat16 || a_in.dtype() == kFloat16)),
              DTypeError, name, " out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs, got ",
              dtype_name(c_dtype), " for ", dtype_name(a_in.dtype()), " inputs");
  Tensor a = gemm_operand(a_in), b = gemm_operand(b_in);
  int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  Tensor c = empty({batch, m, n}, TensorOptions(c_dtype).device(a.device()));
  if (c.numel() == 0) return c;
  if (k == 0) return c.zero_();
  BmmParams p;
  p.a = a.raw_data_ptr();
  p.b = b.raw_data_ptr();
  p.c = c.raw_data_ptr();
  p.dtype = a.dtype();
  p.c_dtype = c_dtype;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  fill_strides(a, p.stride_a_batch, p.stride_a_row, p.stride_a_col);
  fill_strides(b, p.stride_b_batch, p.stride_b_row, p.stride_b_col);
  p.stride_c_batch = m * n;
  p.stride_c_row = n;
  ANVIL_KERNEL(a.device(), bmm, p);
  return c;
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  ANVIL_CHECK(a.defined() && b.defined(), Error, "[mm] undefined tensor");
  ANVIL_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "[mm] expected 2-D tensors, got ", describe(a), " and ", describe(b));
  ANVIL_CHECK(a.size(1) == b.size(0), ShapeError, "[mm] mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x",
              a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  return bmm_core("[mm]", a.unsqueeze(0), b.unsqueeze(0), 1).squeeze(0);
}

Tensor bmm(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype) {
  ANVIL_CHECK(a.defined() && b.defined(), Error, "[bmm] undefined tensor");
  ANVIL_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "[bmm] batch1 must be a 3D tensor and batch2 a 3D tensor, got ",
              describe(a), " and ", describe(b));
  ANVIL_CHECK(a.size(0) == b.size(0), ShapeError, "[bmm] batch1 and batch2 must have same number of batches, got ",
              a.size(0), " and ", b.size(0));
  ANVIL_CHECK(a.size(2) == b.size(1), ShapeError, "[bmm] Expected size for first two dimensions of batch2 tensor to be: [",
              a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "]");
  return bmm_core("[bmm]", a, b, a.size(0), out_dtype);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  ANVIL_CHECK(a.defined() && b.defined(), Error, "[matmul] undefined tensor");
  ANVIL_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "[matmul] both arguments to matmul need to be at least 1D, but they are ",
              a.dim(), "D and ", b.dim(), "D");
  int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  ANVIL_CHECK(ka == kb, ShapeError, "[matmul] shapes cannot be multiplied: ", shape_str(a.sizes()), " @ ", shape_str(b.sizes()),
              " (", ka, " != ", kb, ")");
  // Promote 1-D operands to matrices, remember which dims to drop from the result.
  Tensor am = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor bm = b.dim() == 1 ? b.unsqueeze(1) : b;
  Shape batch_a(am.sizes().begin(), am.sizes().end() - 2), batch_b(bm.sizes().begin(), bm.sizes().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(batch_a, batch_b);
  } catch (const ShapeError&) {
    throw ShapeError(detail::cat_message("[matmul] batch dims of ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
                                         " are not broadcastable"));
  }
  int64_t nb = shape_numel(batch);
  int64_t m = am.size(-2), k = am.size(-1), n = bm.size(-1);
  auto flatten_batch = [&](const Tensor& t, const Shape& own, int64_t rows, int64_t cols) {
    if (shape_numel(own) == 1 && nb > 1) return t.reshape({1, rows, cols});  // broadcast via batch stride 0
    Shape full = batch;
    full.push_back(rows);
    full.push_back(cols);
    return t.expand(full).reshape({nb, rows, cols});
  };
  Tensor a3 = flatten_batch(am, batch_a, m, k);
  Tensor b3 = flatten_batch(bm, batch_b, k, n);
  Tensor c = bmm_core("[matmul]", a3, b3, nb);
  Shape out = batch;
  if (a.dim() > 1) out.push_back(m);
  if (b.dim() > 1) out.push_back(n);
  return c.view(out);
}

}  // namespace anvil
