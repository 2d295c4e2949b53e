#pragma once
// Warp and block combination of reduction accumulators of any trivially copyable type
// (sums, (value, index) pairs, Welford states), moved through shuffles 32 bits at a time.
#include <cstdint>
#include <cstring>

namespace anvil::cuda_device {

template <typename T>
__device__ __forceinline__ T shfl_down(const T& v, int delta) {
  constexpr int kWords = (sizeof(T) + 3) / 4;
  uint32_t w[kWords] = {};
  memcpy(w, &v, sizeof(T));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_down_sync(0xffffffffu, w[k], delta);
  T r;
  memcpy(&r, w, sizeof(T));
  return r;
}

// All 32 lanes must take part; lane 0 returns the combination of the warp.
template <typename T, typename R>
__device__ __forceinline__ T warp_reduce(T v, const R& r) {
#pragma unroll
  for (int delta = 16; delta > 0; delta >>= 1) v = r.combine(v, shfl_down(v, delta));
  return v;
}

// Every thread of a 1-D block must call it; thread 0 returns the combination of the block.
// `smem` holds at least blockDim.x / 32 values.
template <typename T, typename R>
__device__ __forceinline__ T block_reduce(T v, const R& r, T* smem) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_reduce(v, r);
  __syncthreads();  // smem may still be read from the previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? smem[lane] : r.init();
    v = warp_reduce(v, r);
  }
  return v;
}

}  // namespace anvil::cuda_device
