#pragma once
// softmax and log_softmax.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// Softmax over the middle dim of a contiguous [outer, dim_size, inner] input; out has the same
// layout. Loads convert in_dtype -> float32 (float64 for float64), stores round to out_dtype.
struct SoftmaxParams {
  const void* in = nullptr;
  void* out = nullptr;
  DType in_dtype = kFloat32, out_dtype = kFloat32;
  int64_t outer = 0, dim_size = 0, inner = 0;
  bool log = false;  // log_softmax
};

#define ANVIL_SOFTMAX_KERNELS(X)    \
  X(softmax, const SoftmaxParams&)
ANVIL_DECLARE_KERNELS(ANVIL_SOFTMAX_KERNELS)

}  // namespace anvil
