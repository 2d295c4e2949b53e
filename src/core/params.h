#pragma once
// The small types more than one family's params use. Each family's params live with its kernel
// entry points in core/kernels/<family>.h; kernels never see a Tensor: they get pointers, element
// strides and those structs.
#include <cstdint>

#include "anvil/dtype.h"

namespace anvil {

inline constexpr int kMaxDims = 16;

// A host number handed to a kernel: `f` for floating dtypes, `i` (two's complement bits, so
// uint64 values above INT64_MAX survive) for integer and bool dtypes, `im` for complex.
struct ScalarArg {
  double f = 0;
  int64_t i = 0;
  double im = 0;
};

// Rows up to which linear / scaled_mm take the GEMV kernels: the weight streams once for all of
// them; past this the GEMM, which re-reads it per row tile, wins.
inline constexpr int64_t kGemvMaxRows = 8;

// Block scales of a float8 operand [n, k] (the Hub's FP8 checkpoints, scaled_linear's `block`,
// scaled_mm's block-wise recipes): element (j, q) decodes as x[j, q] * scale[(j / block_n) *
// stride_row + (q / block_k) * stride_col], experts' weights offset by stride_expert per expert.
// scale null: no block scales. Only scaled_mm passes stride_col != 1 (PyTorch's outer-dim-major
// scale layouts); the experts and scaled_linear grids are contiguous.
struct BlockScale {
  const float* scale = nullptr;
  int64_t block_n = 0, block_k = 0;
  int64_t stride_row = 0, stride_col = 1, stride_expert = 0;
};

}  // namespace anvil
