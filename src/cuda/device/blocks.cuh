#pragma once
// Index arithmetic of the float8 block scales the CUDA GEMV applies inside its dots
// (core/fp8_blocks.h: block_k = 64 x 2^shift) without 64-bit divisions. H200, bench-ops graph
// us, 128 x 128 blocks: lm_head 99.6 -> 96.0, o_proj 5.20 -> 5.07 (q_proj, qkv unchanged). The
// same in the fused experts kernels measured slower (26.8 -> 34.1 us) and is not used there.
#include <cstdint>

namespace anvil::cuda_device {

// row / block_n, in 32 bits where both fit (always, for real weights).
__device__ __forceinline__ int64_t block_of_row(int64_t row, int64_t block_n) {
  if ((row | block_n) >> 32 == 0) return static_cast<uint32_t>(row) / static_cast<uint32_t>(block_n);
  return row / block_n;
}

// The block of the last 64-column chunk of k: (k - 1) / block_k for block_k = 64 x 2^shift.
__device__ __forceinline__ int64_t last_chunk_block(int64_t k, int shift) { return ((k - 1) >> 6) >> shift; }

}  // namespace anvil::cuda_device
