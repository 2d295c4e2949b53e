#pragma once
// index_select, gather and scatter.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// out[o, j, i] = in[o, index[j], i] over contiguous [outer, in_dim, inner] input and
// [outer, n_index, inner] output; `index` is contiguous int64.
struct IndexSelectParams {
  const void* in = nullptr;
  void* out = nullptr;
  const int64_t* index = nullptr;
  DType dtype = kFloat32;
  int64_t outer = 0, in_dim = 0, inner = 0, n_index = 0;
};

// gather:  out[p] = self[p with p[dim] = index[p]]              (p over index's shape)
// scatter: self[p with p[dim] = index[p]] = src[p] (or scalar0), accumulate adds
struct GatherParams {
  void* self = nullptr;
  void* out_or_src = nullptr;  // gather: out; scatter: src (null when the scalar is used)
  const int64_t* index = nullptr;
  DType dtype = kFloat32;
  int ndim = 0;
  int dim = 0;
  int64_t numel = 0;  // index elements
  int64_t sizes[kMaxDims] = {};  // index's sizes
  int64_t self_strides[kMaxDims] = {}, index_strides[kMaxDims] = {}, other_strides[kMaxDims] = {};
  int64_t self_dim_size = 0;
  bool accumulate = false;
  bool flat = false;  // take / put_: a negative index counts from the end (+ self_dim_size)
  ScalarArg scalar0;
};

// bincount: out[x[i]] += weights ? weights[i] : 1 over n contiguous values, skipping values
// outside [0, bins). x is int32 or int64; out (zeroed by the front end) is int64 without
// weights, else of the weights' dtype, float32 or float64. `range` (int64[2], zeroed by the
// front end), when set: range[0] becomes non-zero if some value is negative and range[1] is
// max(0, max(x)), from the same pass, so one pass both sizes and fills the common output.
struct BincountParams {
  const void* x = nullptr;
  const void* weights = nullptr;
  void* out = nullptr;
  int64_t* range = nullptr;
  DType x_dtype = kInt64, out_dtype = kInt64;
  int64_t n = 0, bins = 0;
};

// nonzero over a contiguous bool mask of n elements (shape sizes[0..ndim)), in chunks of `chunk`
// elements: nonzero_count writes each chunk's count of true elements into counts[c], then turns
// counts into exclusive offsets with the total at counts[chunks]; nonzero_fill writes the
// coordinates of the true elements, in row-major order, as int64 rows [total, ndim] of out.
struct NonzeroParams {
  const uint8_t* mask = nullptr;
  int64_t* counts = nullptr;  // [chunks + 1]
  int64_t* out = nullptr;
  int64_t n = 0, chunk = 0, chunks = 0;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
};

#define ANVIL_INDEX_KERNELS(X)               \
  X(index_select, const IndexSelectParams&)  \
  X(gather, const GatherParams&)             \
  X(scatter, const GatherParams&)            \
  X(bincount, const BincountParams&)         \
  X(nonzero_count, const NonzeroParams&)     \
  X(nonzero_fill, const NonzeroParams&)
ANVIL_DECLARE_KERNELS(ANVIL_INDEX_KERNELS)

}  // namespace anvil
