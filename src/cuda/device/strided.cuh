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

// n / d and n % d for 0 <= n < 2^31 by a multiply-high and a shift (Granlund-Montgomery), the
// magic numbers made once on the host: a few instructions instead of a division routine.
struct FastDivmod {
  uint32_t d = 1, mul = 0, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(uint32_t divisor) : d(divisor) {
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ void operator()(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = (__umulhi(n, mul) + n) >> shift;
    r = n - q * d;
  }
};

// n / d and n % d in a kernel's index type I: by FastDivmod's multiply-high for uint32_t or
// int32_t indices (below 2^31), by the division routine for int64_t. Built on the host.
template <typename I>
struct IndexDiv {
  static_assert(sizeof(I) == 4 || sizeof(I) == 8, "32- or 64-bit indices");
  FastDivmod f;
  int64_t d = 1;
  IndexDiv() = default;
  explicit IndexDiv(int64_t divisor) : d(divisor) {
    if constexpr (sizeof(I) == 4) f = FastDivmod(static_cast<uint32_t>(divisor));
  }
  __device__ __forceinline__ void operator()(I n, I& q, I& r) const {
    if constexpr (sizeof(I) == 4) {
      uint32_t q32, r32;
      f(static_cast<uint32_t>(n), q32, r32);
      q = static_cast<I>(q32);
      r = static_cast<I>(r32);
    } else {
      int64_t q64, r64;
      divmod(n, d, q64, r64);
      q = q64;
      r = r64;
    }
  }
};

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
