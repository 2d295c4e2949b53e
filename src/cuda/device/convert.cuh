#pragma once
// Storage <-> compute conversions for the bandwidth-bound kernels (gemv, softmax, norms, RoPE,
// SwiGLU): one cvt instruction each way where numeric.h's portable encoders take ~15 integer
// instructions per float16 element, with NaN fixed up so stores stay bit-equal to numeric.h
// (bfloat16 NaN -> 0x7FC0, float16 NaN -> sign | 0x7E00); non-NaN values round to nearest even
// in both. Compute is float32 for the 16-bit types and float32, float64 for float64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "anvil/numeric.h"

namespace anvil::cuda_device {

template <typename T>
struct ComputeOf {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;

// a * b + c rounded once, never contracted differently by the compiler (float32 or float64).
template <typename A>
__device__ __forceinline__ A fma_rn(A a, A b, A c) {
  if constexpr (std::is_same_v<A, float>) return __fmaf_rn(a, b, c);
  else return __fma_rn(a, b, c);
}

__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }
__device__ __forceinline__ float to_compute(BFloat16 v) { return __uint_as_float(static_cast<uint32_t>(v.x) << 16); }
__device__ __forceinline__ float to_compute(Half v) { return __half2float(__ushort_as_half(v.x)); }

__device__ __forceinline__ uint16_t bf16_bits(float f) {
  return f != f ? uint16_t{0x7FC0} : __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
__device__ __forceinline__ uint16_t f16_bits(float f) {
  if (f != f) return static_cast<uint16_t>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7E00u);
  return __half_as_ushort(__float2half_rn(f));
}

// One rounding from the compute type A to storage T; double -> 16-bit goes through float, as
// element.h's convert does.
template <typename T, typename A>
__device__ __forceinline__ T from_compute(A v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return static_cast<T>(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16::from_bits(bf16_bits(static_cast<float>(v)));
  else return Half::from_bits(f16_bits(static_cast<float>(v)));
}

}  // namespace anvil::cuda_device
