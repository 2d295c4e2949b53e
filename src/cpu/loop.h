#pragma once
// The CPU elementwise loop: OpenMP over rows of the (already coalesced) iteration space, a
// strided inner loop inside. f(o0, o1, o2, o3) gets each slot's element offset.
#include <cstdint>

#include "core/kernels/elementwise.h"

namespace anvil::cpu {

// Below this many elements a launch stays on the calling thread: a team costs ~2-5 us.
inline constexpr int64_t kParallelGrain = 32768;

template <typename F>
void for_each_element(const ElementwiseParams& p, F&& f) {
  const int64_t n = p.numel;
  if (p.contiguous || p.ndim == 0) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) f(i, i, i, i);
    return;
  }
  const int nd = p.ndim;
  const int64_t inner = p.sizes[nd - 1];
  const int64_t outer = inner == 0 ? 0 : n / inner;
  const int64_t s0 = p.strides[0][nd - 1], s1 = p.strides[1][nd - 1], s2 = p.strides[2][nd - 1], s3 = p.strides[3][nd - 1];
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t b0 = 0, b1 = 0, b2 = 0, b3 = 0, rem = o;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % p.sizes[d];
      rem /= p.sizes[d];
      b0 += idx * p.strides[0][d];
      b1 += idx * p.strides[1][d];
      b2 += idx * p.strides[2][d];
      b3 += idx * p.strides[3][d];
    }
    for (int64_t j = 0; j < inner; ++j) f(b0 + j * s0, b1 + j * s1, b2 + j * s2, b3 + j * s3);
  }
}

}  // namespace anvil::cpu
