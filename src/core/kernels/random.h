#pragma once
// Random fills from Philox.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

enum class RandomKind : int8_t { Uniform, Normal, Int };
// Contiguous output; element i draws from Philox(seed, counter = offset + i).
struct RandomParams {
  void* out = nullptr;
  DType dtype = kFloat32;
  int64_t numel = 0;
  uint64_t seed = 0, offset = 0;
  RandomKind kind = RandomKind::Uniform;
  int64_t low = 0, high = 1;  // Int: [low, high)
};

#define ANVIL_RANDOM_KERNELS(X)   \
  X(random, const RandomParams&)
ANVIL_DECLARE_KERNELS(ANVIL_RANDOM_KERNELS)

}  // namespace anvil
