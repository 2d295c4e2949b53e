#pragma once
// The fused SwiGLU activation.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

// out[r, c] = silu(gate[r, c]) * up[r, c] computed in float32, one rounding.
struct SiluMulParams {
  const void* gate = nullptr;
  const void* up = nullptr;
  void* out = nullptr;
  DType dtype = kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t stride_gate_row = 0, stride_up_row = 0, stride_out_row = 0;
};

#define ANVIL_ACTIVATION_KERNELS(X)  \
  X(silu_mul, const SiluMulParams&)
ANVIL_DECLARE_KERNELS(ANVIL_ACTIVATION_KERNELS)

}  // namespace anvil
