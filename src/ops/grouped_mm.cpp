// grouped_mm / grouped_mm_out / scaled_grouped_mm: PyTorch's validation (GroupedMMUtils), the
// layout from the operands' ranks, the padded output, and one kernel call that reads offs on the
// device.
#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/dispatch.h"
#include "core/kernels/grouped_mm.h"
#include "core/util.h"

namespace anvil {
namespace {

bool is_mm_dtype(DType t) { return t == kFloat32 || t == kBFloat16 || t == kFloat16; }

// Layout and extents of a grouped product; out_shape is the logical output shape.
struct GroupedShape {
  GroupedLayout layout;
  int64_t groups, m, n, k;
  Shape out_shape;
};

GroupedShape grouped_shape(const char* op, const Tensor& a, const Tensor& b, const Tensor& offs) {
  ANVIL_CHECK(a.dim() == 2 || a.dim() == 3, ShapeError, op, " mat_a has to be 2 or 3d, got ", describe(a));
  ANVIL_CHECK(b.dim() == 2 || b.dim() == 3, ShapeError, op, " mat_b has to be 2 or 3d, got ", describe(b));
  const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
  ANVIL_CHECK(a.size(-1) == b.size(-2), ShapeError, op,
              " contraction dimension of mat_a and mat_b must match, got ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()));
  ANVIL_CHECK(offs.defined() == !(a3 && b3), Error, op,
              " Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d");
  if (offs.defined()) {
    check_same_device(op, a, offs);
    ANVIL_CHECK(offs.dim() == 1, ShapeError, op, " offs has to be 1D, got ", describe(offs));
    ANVIL_CHECK(offs.dtype() == kInt32, DTypeError, op, " Offsets have to be int32, got ", describe(offs));
  }
  GroupedShape s;
  s.k = a.size(-1);
  s.m = a.size(-2);
  s.n = b.size(-1);
  if (a3 && b3) {
    ANVIL_CHECK(a.size(0) == b.size(0), ShapeError, op, " batched dimension has to match, got ", shape_str(a.sizes()),
                " and ", shape_str(b.sizes()));
    s.layout = GroupedLayout::Batched;
    s.groups = a.size(0);
    s.out_shape = {s.groups, s.m, s.n};
  } else if (b3) {
    s.layout = GroupedLayout::RowsByGroup;
    s.groups = b.size(0);
    s.out_shape = {s.m, s.n};
  } else if (a3) {
    s.layout = GroupedLayout::ColsByGroup;
    s.groups = a.size(0);
    s.out_shape = {s.m, s.n};
  } else {
    s.layout = GroupedLayout::KByGroup;
    s.groups = offs.size(0);
    s.out_shape = {s.groups, s.m, s.n};
  }
  if (offs.defined())
    ANVIL_CHECK(offs.size(0) == s.groups, ShapeError, op, " matrix batch sizes have to match: offs has ",
                offs.size(0), " entries for ", s.groups, " groups");
  return s;
}

// PyTorch's grouped output: the row stride padded to a multiple of 16 bytes.
Tensor padded_output(const GroupedShape& s, DType dtype, Device device) {
  const int64_t align = 16 / static_cast<int64_t>(element_size(dtype));
  const int64_t n_pad = (s.n + align - 1) / align * align;
  Shape padded = s.out_shape;
  padded.back() = n_pad;
  Tensor out = empty(padded, TensorOptions(dtype).device(device));
  return n_pad == s.n ? out : out.narrow(-1, 0, s.n);
}

void run_grouped(const GroupedShape& s, Tensor& out, const Tensor& a, const Tensor& b, const Tensor& offs,
                 const Tensor& scale_a, const Tensor& scale_b) {
  if (out.numel() == 0) return;
  if (s.k == 0) {  // every product is empty: zeros (rows past the last group included)
    out.fill_(0);
    return;
  }
  GroupedMmParams p;
  p.a = a.raw_data_ptr();
  p.b = b.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.offs = offs.defined() ? static_cast<const int32_t*>(offs.raw_data_ptr()) : nullptr;
  p.scale_a = scale_a.defined() ? static_cast<const float*>(scale_a.raw_data_ptr()) : nullptr;
  p.scale_b = scale_b.defined() ? static_cast<const float*>(scale_b.raw_data_ptr()) : nullptr;
  p.a_dtype = a.dtype();
  p.b_dtype = b.dtype();
  p.out_dtype = out.dtype();
  p.layout = s.layout;
  p.groups = s.groups;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
  p.stride_a_batch = a3 ? a.stride(0) : 0;
  p.stride_a_row = a.stride(-2);
  p.stride_a_col = a.stride(-1);
  p.stride_b_batch = b3 ? b.stride(0) : 0;
  p.stride_b_row = b.stride(-2);
  p.stride_b_col = b.stride(-1);
  // A size-1 dim's stride is meaningless; give it the value the kernels' fast paths look for.
  if (s.k == 1) p.stride_a_col = p.stride_b_row = 1;
  if (s.n == 1) p.stride_b_col = s.k;
  p.stride_out_batch = out.dim() == 3 ? out.stride(0) : 0;
  p.stride_out_row = out.stride(-2);
  ANVIL_KERNEL(a.device(), grouped_mm, p);
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  ANVIL_CHECK(a.defined() && b.defined(), Error, op, " undefined tensor");
  check_same_device(op, a, b);
  ANVIL_CHECK(is_mm_dtype(a.dtype()), DTypeError, op, " Expected mat_a to be Float32, BFloat16 or Float16 matrix, got ",
              dtype_name(a.dtype()));
  ANVIL_CHECK(is_mm_dtype(b.dtype()), DTypeError, op, " Expected mat_b to be Float32, BFloat16 or Float16 matrix, got ",
              dtype_name(b.dtype()));
  ANVIL_CHECK(a.dtype() == b.dtype(), DTypeError, op, " Expected mat_a and mat_b to have the same dtype, got ",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

}  // namespace

Tensor grouped_mm(const Tensor& mat_a, const Tensor& mat_b, const Tensor& offs, std::optional<DType> out_dtype) {
  const char* op = "[grouped_mm]";
  check_operands(op, mat_a, mat_b);
  ANVIL_CHECK(!out_dtype || *out_dtype == mat_a.dtype(), DTypeError, op,
              " Grouped gemm output dtype must match `mat_a` dtype, got ", dtype_name(*out_dtype), " for ",
              dtype_name(mat_a.dtype()));
  const GroupedShape s = grouped_shape(op, mat_a, mat_b, offs);
  Tensor out = padded_output(s, mat_a.dtype(), mat_a.device());
  run_grouped(s, out, mat_a, mat_b, offs, {}, {});
  return out;
}

Tensor& grouped_mm_out(Tensor& out, const Tensor& mat_a, const Tensor& mat_b, const Tensor& offs) {
  const char* op = "[grouped_mm_out]";
  check_operands(op, mat_a, mat_b);
  const GroupedShape s = grouped_shape(op, mat_a, mat_b, offs);
  ANVIL_CHECK(out.defined(), Error, op, " undefined out");
  check_same_device(op, mat_a, out);
  ANVIL_CHECK(out.dtype() == mat_a.dtype(), DTypeError, op, " out dtype ", dtype_name(out.dtype()),
              " must match mat_a's ", dtype_name(mat_a.dtype()));
  ANVIL_CHECK(out.sizes() == s.out_shape, ShapeError, op, " out must have shape ", shape_str(s.out_shape), ", got ",
              describe(out));
  ANVIL_CHECK(out.stride(-1) == 1 || s.n <= 1, ShapeError, op, " out must have a unit column stride, got strides ",
              shape_str(out.strides()));
  run_grouped(s, out, mat_a, mat_b, offs, {}, {});
  return out;
}

Tensor scaled_grouped_mm(const Tensor& mat_a, const Tensor& mat_b, const Tensor& scale_a, const Tensor& scale_b,
                         const Tensor& offs, DType out_dtype) {
  const char* op = "[scaled_grouped_mm]";
  ANVIL_CHECK(mat_a.defined() && mat_b.defined() && scale_b.defined() && offs.defined(), Error, op,
              " undefined tensor (mat_a, mat_b, scale_b and offs are required)");
  check_same_device(op, mat_a, mat_b);
  ANVIL_CHECK(is_float8(mat_b.dtype()), DTypeError, op, " Expected mat_b to be a float8 tensor, got ",
              dtype_name(mat_b.dtype()));
  ANVIL_CHECK(is_float8(mat_a.dtype()) || is_mm_dtype(mat_a.dtype()), DTypeError, op,
              " Expected mat_a to be float8, or Float32 / BFloat16 / Float16 for weight-only FP8, got ",
              dtype_name(mat_a.dtype()));
  ANVIL_CHECK(mat_a.dim() == 2 && mat_b.dim() == 3, ShapeError, op,
              " only the 2d x 3d (rows by group) layout is supported, got mat_a ", describe(mat_a), " and mat_b ",
              describe(mat_b));
  ANVIL_CHECK(is_mm_dtype(out_dtype), DTypeError, op, " out_dtype must be Float32, BFloat16 or Float16, got ",
              dtype_name(out_dtype));
  const GroupedShape s = grouped_shape(op, mat_a, mat_b, offs);
  const bool fp8_a = is_float8(mat_a.dtype());
  ANVIL_CHECK(scale_a.defined() == fp8_a, Error, op,
              fp8_a ? " scale_a is required for a float8 mat_a" : " scale_a must be undefined for a non-float8 mat_a");
  Tensor sa, sb;
  if (fp8_a) {
    check_same_device(op, mat_a, scale_a);
    ANVIL_CHECK(scale_a.dtype() == kFloat32, DTypeError, op, " scale_a must be float32, got ", describe(scale_a));
    ANVIL_CHECK(scale_a.numel() == s.m && (scale_a.dim() == 1 || (scale_a.dim() == 2 && scale_a.size(1) == 1)),
                ShapeError, op, " scale_a must be [M] = [", s.m, "] (one per row), got ", describe(scale_a));
    sa = scale_a.reshape({s.m}).contiguous();
  }
  check_same_device(op, mat_a, scale_b);
  ANVIL_CHECK(scale_b.dtype() == kFloat32, DTypeError, op, " scale_b must be float32, got ", describe(scale_b));
  ANVIL_CHECK(scale_b.numel() == s.groups * s.n && scale_b.size(0) == s.groups &&
                  (scale_b.dim() == 2 || (scale_b.dim() == 3 && scale_b.size(1) == 1)),
              ShapeError, op, " scale_b must be [G, N] = [", s.groups, ", ", s.n, "], got ", describe(scale_b));
  sb = scale_b.reshape({s.groups, s.n}).contiguous();
  Tensor out = padded_output(s, out_dtype, mat_a.device());
  run_grouped(s, out, mat_a, mat_b, offs, sa, sb);
  return out;
}

}  // namespace anvil
