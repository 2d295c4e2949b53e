#pragma once
// The CPU elementwise loop: OpenMP over rows of the (already coalesced) iteration space, a
// strided inner loop inside. f(o0, o1, o2, o3) gets each slot's element offset.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/kernels/elementwise.h"

namespace anvil::cpu {

// Below this many elements a launch stays on the calling thread: a team costs ~2-5 us.
inline constexpr int64_t kParallelGrain = 32768;

// f(i) for i in [0, n), over the team (static schedule) when `parallel`. Otherwise the loop runs
// here with no OpenMP construct at all: libgomp builds a team of one even for `if (false)` (a
// malloc, a free and a barrier: ~0.3 us, a third of a one-element add called from Python).
template <typename F>
inline void parallel_for(int64_t n, bool parallel, F&& f) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

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
    parallel_for(n, n >= kParallelGrain, [&](int64_t i) { f(i, i, i, i); });
    return;
  }
  const int nd = p.ndim;
  const int64_t inner = p.sizes[nd - 1];
  const int64_t outer = inner == 0 ? 0 : n / inner;
  const int64_t s0 = p.strides[0][nd - 1], s1 = p.strides[1][nd - 1], s2 = p.strides[2][nd - 1], s3 = p.strides[3][nd - 1];
  parallel_for(outer, n >= kParallelGrain, [&](int64_t o) {
    int64_t b[4];
    row_offsets(p, o, b);
    for (int64_t j = 0; j < inner; ++j) f(b[0] + j * s0, b[1] + j * s1, b[2] + j * s2, b[3] + j * s3);
  });
}

// f(c) for each chunk c of [0, chunks), over the team when `parallel`. Thread t takes the chunks
// of its own contiguous share first, in order: the same rows land on the same core every call, so
// data that fits a core's cache (a decode-sized weight read again and again) stays there. Then it
// takes the others' remaining chunks from their fronts, so a thread slowed by the machine (another
// process, a page fault) leaves its work to the rest instead of holding them at the end. Each
// share's next chunk is an atomic counter: every chunk runs exactly once.
template <typename F>
void for_each_chunk_affine(int64_t chunks, bool parallel, F&& f) {
  struct alignas(64) Share {
    std::atomic<int64_t> next;
    int64_t end;
  };
  if (!parallel) {
    for (int64_t c = 0; c < chunks; ++c) f(c);
    return;
  }
  // On the stack (a GEMV per projection per token must not allocate); past kMaxShares threads the
  // extra ones start on a share beside the others' (every chunk still runs exactly once).
  constexpr int kMaxShares = 256;
  Share share[kMaxShares];
  const int shares = std::min(omp_get_max_threads(), kMaxShares);
  for (int s = 0; s < shares; ++s) {
    share[s].next.store(chunks * s / shares, std::memory_order_relaxed);
    share[s].end = chunks * (s + 1) / shares;
  }
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    for (int i = 0; i < shares; ++i) {
      Share& sh = share[(t + i) % shares];
      for (int64_t c; (c = sh.next.fetch_add(1, std::memory_order_relaxed)) < sh.end;) f(c);
    }
  }
}

}  // namespace anvil::cpu
