#pragma once
// Block scales the fused CUDA experts kernels apply inside their dots (a 64-column chunk, a tile's
// rows and each 4 gate / up columns inside one block): e4m3 weights, block_n % 8 == 0, block_k =
// 64 x 2^i, inter % 4 == 0 (the Hub's 128 x 128). moe_experts runs other blocks on the layer's
// dequantised experts.
#include <cstdint>

#include "anvil/dtype.h"

namespace anvil {

constexpr bool moe_experts_block_ok(DType w, int64_t block_n, int64_t block_k, int64_t inter) {
  const int64_t chunks = block_k / 64;
  return w == kFloat8_e4m3fn && block_n % 8 == 0 && block_k % 64 == 0 && chunks > 0 && (chunks & (chunks - 1)) == 0 &&
         inter % 4 == 0;
}

}  // namespace anvil
