#pragma once
// Dropout, forward and backward: params, the kernel entry points of both backends (the backend
// boundary: core/kernels.h) and the keep rule both backends draw with, so a seed gives the same
// mask on CPU and CUDA.
#include "core/kernels.h"
#include "core/philox.h"

namespace anvil {

// Element i of a call keeps (mask 1) when the top 24 bits of word i % 4 of
// Philox(seed, offset + i / 4) are below `threshold` = ceil((1 - p) * 2^24): a uniform
// u = bits * 2^-24 in [0, 1) kept when u < 1 - p. A call takes ceil(numel / 4) counters.
ANVIL_HD uint32_t dropout_threshold(double keep) {
  const double t = keep * 16777216.0;  // exact: a power-of-two scale
  const uint32_t f = static_cast<uint32_t>(t);
  return static_cast<double>(f) < t ? f + 1 : f;
}
ANVIL_HD bool dropout_keeps(uint32_t word, uint32_t threshold) { return (word >> 8) < threshold; }

// Contiguous x, out and mask (bool) of numel elements: out = x * mask * scale in float32 (float64
// for float64), rounded once; a dropped NaN or inf gives NaN, as x * 0 does.
struct DropoutParams {
  const void* x = nullptr;
  void* out = nullptr;
  bool* mask = nullptr;
  DType dtype = kFloat32;
  int64_t numel = 0;
  uint64_t seed = 0, offset = 0;
  uint32_t threshold = 0;
  double scale = 1.0;
};

// Contiguous grad, mask and out: out = grad * mask * scale, computed and rounded as the forward.
struct DropoutBackwardParams {
  const void* grad = nullptr;
  const bool* mask = nullptr;
  void* out = nullptr;
  DType dtype = kFloat32;
  int64_t numel = 0;
  double scale = 1.0;
};

#define ANVIL_DROPOUT_KERNELS(X)  \
  X(dropout, const DropoutParams&) \
  X(dropout_backward, const DropoutBackwardParams&)
ANVIL_DECLARE_KERNELS(ANVIL_DROPOUT_KERNELS)

}  // namespace anvil
