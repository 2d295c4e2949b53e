#pragma once
// The CPU elementwise loop: OpenMP over rows of the (already coalesced) iteration space, a
// strided inner loop inside. f(o0, o1, o2, o3) gets each slot's element offset.
#include <cstdint>

#include "core/kernels/elementwise.h"

namespace anvil::cpu {

// Below this many elements a launch stays on the calling thread: a team costs ~2-5 us.
inline constexpr int64_t kParallelGrain = 32768;

// Each slot's offset of the first element of row `row` (the dims before the last, row-major).
inline void row_offsets(const ElementwiseParams& p, int64_t row, int64_t (&off)[4]) {
  off[0] = off[1] = off[2] = off[3] = 0;
  for (int d = p.ndim - 2; d >= 0; --d) {
    const int64_t idx = row % p.sizes[d];
    row /= p.sizes[d];
    for (int s = 0; s < 4; ++s) off[s] += idx * p.strides[s][d];
  }
}

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
    int64_t b[4];
    row_offsets(p, o, b);
    for (int64_t j = 0; j < inner; ++j) f(b[0] + j * s0, b[1] + j * s1, b[2] + j * s2, b[3] + j * s3);
  }
}

}  // namespace anvil::cpu
