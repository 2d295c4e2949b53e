#pragma once
// Reductions over any set of dims.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

enum class ReduceOp : int8_t { Sum, Prod, Mean, Amax, Amin, Max, Min, Argmax, Argmin, Var, Std };

// Reduces `in` over the `red` dims for each point of the kept `out` dims. `out` (and
// `out_index` for Max/Min/Argmax/Argmin) are contiguous with n_out elements in kept-dim order.
struct ReduceParams {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t* out_index = nullptr;
  void* out_mean = nullptr;  // Var / Std (var_mean, std_mean): the mean as well, in out_dtype like `out`
  DType in_dtype = kFloat32;
  DType out_dtype = kFloat32;  // accumulation type follows out_dtype (float32 for low precision)
  ReduceOp op = ReduceOp::Sum;
  int64_t n_out = 1, n_red = 1;
  int out_ndim = 0, red_ndim = 0;
  int64_t out_sizes[kMaxDims] = {}, out_strides[kMaxDims] = {};  // input strides of kept dims
  int64_t red_sizes[kMaxDims] = {}, red_strides[kMaxDims] = {};  // input strides of reduced dims
  double correction = 1;  // Var / Std
};

#define ANVIL_REDUCE_KERNELS(X)   \
  X(reduce, const ReduceParams&)
ANVIL_DECLARE_KERNELS(ANVIL_REDUCE_KERNELS)

}  // namespace anvil
