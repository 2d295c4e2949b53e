#pragma once
// Batched matrix products (the GEMM).
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// C[b] = A[b] @ B[b] (or C[b] += A[b] @ B[b] with accumulate); A is [m, k], B is [k, n], C is
// [m, n] row-major with row stride stride_c_row >= n. A and B have one unit stride each (row- or
// column-major), batch strides may be 0 (broadcast). C is of the operands' dtype, or float32 for
// float16 / bfloat16 operands; the sum (with C's old value when accumulating) is formed in the
// accumulation type and rounded once.
struct BmmParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  DType dtype = kFloat32;
  DType c_dtype = kFloat32;
  bool accumulate = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 0;
  int64_t stride_b_batch = 0, stride_b_row = 0, stride_b_col = 0;
  int64_t stride_c_batch = 0, stride_c_row = 0;
};

#define ANVIL_MATMUL_KERNELS(X)  \
  X(bmm, const BmmParams&)
ANVIL_DECLARE_KERNELS(ANVIL_MATMUL_KERNELS)

}  // namespace anvil
