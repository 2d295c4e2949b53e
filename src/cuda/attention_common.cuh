#pragma once
// What attention's CUDA kernels share (attention.cu: decode, the simple kernel and the dispatch;
// attention_prefill.cu: the prefill kernels): mask / causal / valid-length rules, exponentials in
// log2 units, 16-bit packing, the output store and the launch-size checks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/kernels/attention.h"
#include "cuda/device/convert.cuh"
#include "cuda/device/dispatch.cuh"
#include "cuda/device/mma.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend::attention_shared {

using cuda_device::cp_async16;
using cuda_device::cp_async_commit;
using cuda_device::cp_async_wait;
using cuda_device::ldmatrix_x4;
using cuda_device::ldmatrix_x4_trans;
using cuda_device::mma_m16n8k16;
using cuda_device::smem_u32;
using cuda_device::to_compute;

constexpr float kLog2e = 1.4426950408889634f;
// The mma.sync kernels' p v product (decode; prefill with a mask or off Hopper) takes p as hi + lo
// in two 16-bit mma operands: rounding p once to bfloat16 (FlashAttention's choice, and the wgmma
// prefill's) moves the output by up to 2^-9 of sum |p v|. 1.5x the mma work; false restores the
// single product.
constexpr bool kExactP = true;
constexpr int kMaxSmem = 227 * 1024;  // per block on sm_90

// ---- shared helpers

// Valid keys of batch b: kv_lens[b] clamped to [0, kv_len], or kv_len.
__device__ __forceinline__ int64_t valid_len(const AttentionParams& p, int64_t b) {
  if (!p.kv_lens) return p.kv_len;
  return std::min<int64_t>(std::max<int64_t>(p.kv_lens[b], 0), p.kv_len);
}

// Query row i attends keys j < key_end(i); shift = len - q_len for bottom-right causal.
__device__ __forceinline__ int64_t key_end(const AttentionParams& p, int64_t len, int64_t shift, int64_t i) {
  return p.causal ? std::max<int64_t>(0, std::min(len, i + shift + 1)) : len;
}

// Additive mask value at element offset `off`, natural-log units; bool false is -inf. A mask
// that is not bool is of a float dtype (checked on the host: check_mask_dtype).
template <typename A>
__device__ __forceinline__ A mask_at(const AttentionParams& p, int64_t off) {
  if (p.mask_dtype == DType::Bool) return static_cast<const bool*>(p.mask)[off] ? A(0) : A(-INFINITY);
  A r = A(0);
  cuda_device::dispatch_float_types_device(p.mask_dtype, [&](auto tag) {
    using M = typename decltype(tag)::type;
    r = static_cast<A>(to_compute(static_cast<const M*>(p.mask)[off]));
  });
  return r;
}

// Throws DTypeError unless the mask (if any) is bool or of a float dtype, as mask_at reads it.
inline void check_mask_dtype(const AttentionParams& p, const char* op) {
  if (p.mask != nullptr && p.mask_dtype != DType::Bool) dispatch_float_types(p.mask_dtype, op, [](auto) {});
}

__device__ __forceinline__ int64_t mask_offset(const AttentionParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return b * p.stride_mask[0] + h * p.stride_mask[1] + i * p.stride_mask[2] + j * p.stride_mask[3];
}

// 2^x; ex2.approx flushes results below 2^-126 to zero, which no softmax weight notices.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 16 bytes of float32 (the SIMT decode kernel's K / V rows) -> 4 floats.
template <typename T>
__device__ __forceinline__ void unpack16(const void* src, float* f) {
  static_assert(std::is_same_v<T, float>, "16-bit types take the tensor-core decode kernel");
  const float4 v = *static_cast<const float4*>(src);
  f[0] = v.x;
  f[1] = v.y;
  f[2] = v.z;
  f[3] = v.w;
}

// Two floats -> one register of the mma operand type, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// p = hi + lo in the mma operand type: hi is p rounded, lo the rounding error rounded, so
// hi v + lo v carries p to about twice the type's precision (lo = 0 without kExactP).
template <typename T>
__device__ __forceinline__ void split2(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  hi = pack2<T>(p0, p1);
  if constexpr (kExactP) {
    float h[2];
    if constexpr (std::is_same_v<T, BFloat16>) {
      h[0] = __uint_as_float(hi << 16);
      h[1] = __uint_as_float(hi & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      h[0] = f.x;
      h[1] = f.y;
    }
    lo = pack2<T>(p0 - h[0], p1 - h[1]);  // exact differences
  } else {
    lo = 0;
  }
}

template <typename T, typename A>
__device__ __forceinline__ void store_out(const AttentionParams& p, int64_t off, A v) {
  static_cast<T*>(p.out)[off] = cuda_device::from_compute<T>(v);
}

// ---- host

inline bool rows_aligned16(const void* ptr, const int64_t* stride, size_t elem) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if ((stride[d] * static_cast<int64_t>(elem)) % 16 != 0) return false;
  return true;
}

inline unsigned grid_of(int64_t blocks) {
  ANVIL_CHECK(blocks <= 0x7FFFFFFF, ShapeError, "[scaled_dot_product_attention] ", blocks,
              " blocks exceed the CUDA grid limit");
  return static_cast<unsigned>(blocks);
}

// Lets a kernel use more than 48 KiB of dynamic shared memory (once per kernel).
template <typename Kernel>
void allow_smem(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024)
    ANVIL_CUDA_CHECK("[scaled_dot_product_attention]",
                     cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// The prefill kernels (attention_prefill.cu): runs p and returns true when its shape takes one
// (bfloat16 / float16, equal head dims <= 256 in whole 16-byte chunks, 16-byte rows).
bool attention_prefill(const AttentionParams& p, const KernelLaunch& launch);

}  // namespace anvil::cuda_backend::attention_shared
