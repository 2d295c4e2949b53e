#pragma once
// Which float8 block scales the CUDA decode kernels apply inside their dots (the GEMV of
// scaled_linear, the fused experts): e4m3 weights, block_n % 8 == 0 (an 8-row tile in one block)
// and block_k = 64 x 2^i (a 64-column chunk in one block, its block found by a shift); the Hub's
// 128 x 128 qualifies. Other blocks take the tiled kernel (scaled_linear) or dequantised experts
// (moe_experts).
#include <cstdint>

#include "anvil/dtype.h"

namespace anvil {

constexpr bool fp8_blocks_in_dot(DType w, int64_t block_n, int64_t block_k) {
  const int64_t chunks = block_k / 64;
  return w == kFloat8_e4m3fn && block_n % 8 == 0 && block_k % 64 == 0 && chunks > 0 && (chunks & (chunks - 1)) == 0;
}

// log2(block_k / 64) for a block_k fp8_blocks_in_dot takes.
constexpr int fp8_block_shift(int64_t block_k) {
  int shift = 0;
  while ((int64_t{64} << shift) < block_k) ++shift;
  return shift;
}

// The fused experts also need each 4 gate / up columns in one block: inter % 4 == 0.
constexpr bool moe_experts_block_ok(DType w, int64_t block_n, int64_t block_k, int64_t inter) {
  return fp8_blocks_in_dot(w, block_n, block_k) && inter % 4 == 0;
}

}  // namespace anvil
