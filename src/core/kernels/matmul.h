#pragma once
// Batched matrix products (the GEMM).
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// C[b] = A[b] @ B[b]; A is [m, k], B is [k, n], C is [m, n] contiguous. A and B have one unit
// stride each (row- or column-major), batch strides may be 0 (broadcast).
struct BmmParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 0;
  int64_t stride_b_batch = 0, stride_b_row = 0, stride_b_col = 0;
};

#define ANVIL_MATMUL_KERNELS(X)  \
  X(bmm, const BmmParams&)
ANVIL_DECLARE_KERNELS(ANVIL_MATMUL_KERNELS)

}  // namespace anvil
