#pragma once
// Linear index -> element offsets for strided iteration. Index i runs row-major over `sizes`
// (last dim fastest), so neighbouring threads touch neighbouring elements of the innermost dim.
// All arithmetic is int64: tensors above 2^31 elements are ordinary.
#include <cstdint>

namespace anvil::cuda_device {

// q = a / b, r = a % b for a >= 0, b > 0. 64-bit division is a ~70-instruction software routine;
// the 32-bit hardware path covers almost every call.
__device__ __forceinline__ void divmod(int64_t a, int64_t b, int64_t& q, int64_t& r) {
  if (((static_cast<uint64_t>(a) | static_cast<uint64_t>(b)) >> 32) == 0) {
    uint32_t q32 = static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
    q = q32;
    r = static_cast<uint32_t>(a) - q32 * static_cast<uint32_t>(b);
  } else {
    q = a / b;
    r = a - q * b;
  }
}

// Offset of element i in one operand.
__device__ __forceinline__ int64_t strided_offset(int64_t i, int ndim, const int64_t* sizes, const int64_t* strides) {
  int64_t off = 0;
  for (int d = ndim - 1; d > 0; --d) {
    int64_t q, r;
    divmod(i, sizes[d], q, r);
    off += r * strides[d];
    i = q;
  }
  return ndim > 0 ? off + i * strides[0] : 0;
}

// Offsets of element i in the first N operands of an elementwise params struct (ndim, sizes,
// strides[slot][dim]).
template <int N, typename P>
__device__ __forceinline__ void strided_offsets(const P& p, int64_t i, int64_t* off) {
#pragma unroll
  for (int s = 0; s < N; ++s) off[s] = 0;
  for (int d = p.ndim - 1; d > 0; --d) {
    int64_t q, r;
    divmod(i, p.sizes[d], q, r);
#pragma unroll
    for (int s = 0; s < N; ++s) off[s] += r * p.strides[s][d];
    i = q;
  }
  if (p.ndim > 0) {
#pragma unroll
    for (int s = 0; s < N; ++s) off[s] += i * p.strides[s][0];
  }
}

}  // namespace anvil::cuda_device
