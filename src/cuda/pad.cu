// CUDA padding, forward and backward, over the index maps of core/kernels/pad.h (the CPU uses
// the same ones, so both read and sum exactly the same elements in the same order).
#include <cstring>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/pad.h"
#include "cuda/device/map.cuh"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::divmod;
using cuda_device::global_thread;
using cuda_device::grid_threads;
constexpr int kThreads = KernelLaunch::kThreads;

// Input offset of output row `row` (the dims before the last, row-major), or -1 when a constant
// pad's fill covers the whole row.
__device__ __forceinline__ int64_t pad_row_source(const PadParams& p, int64_t row) {
  int64_t off = 0;
  bool inside = true;
  for (int d = p.ndim - 2; d >= 0; --d) {
    int64_t q = 0, j = row;
    if (d > 0) divmod(row, p.dims[d].out, q, j);
    const int64_t k = pad_source(p.mode, p.dims[d], j);
    inside = inside && k >= 0;
    off += k * p.in_strides[d];
    row = q;
  }
  return inside ? off : -1;
}

// Forward: one thread per 16 aligned bytes of the output, which is dense in the dims' order
// (the front end allocates it so), so every store is one 16-byte vector; the loads follow the
// index maps element by element (neighbouring threads read neighbouring input elements).
template <typename U>
__global__ void __launch_bounds__(kThreads) pad_kernel(const __grid_constant__ PadParams p) {
  constexpr int V = 16 / sizeof(U);
  const U* in = static_cast<const U*>(p.src);
  U* out = static_cast<U*>(p.dst);
  const U fill = static_cast<U>(p.fill_bits);
  const PadDim last = p.dims[p.ndim - 1];
  const int64_t n = last.out, s_in = p.in_strides[p.ndim - 1];
  const int64_t units = (p.out_numel + V - 1) / V, stride = grid_threads();
  for (int64_t u = global_thread(); u < units; u += stride) {
    const int64_t e0 = u * V;
    int64_t row, j;
    divmod(e0, n, row, j);
    int64_t base = pad_row_source(p, row);
    union {
      uint4 v;
      U e[V];
    } vals;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (e0 + v >= p.out_numel) break;
      if (j == n) {  // the unit runs into the next row
        j = 0;
        base = pad_row_source(p, ++row);
      }
      const int64_t k = base < 0 ? -1 : pad_source(p.mode, last, j);
      vals.e[v] = k < 0 ? fill : in[base + k * s_in];
      ++j;
    }
    if (e0 + V <= p.out_numel) {
      *reinterpret_cast<uint4*>(out + e0) = vals.v;
    } else {
      for (int v = 0; e0 + v < p.out_numel; ++v) out[e0 + v] = vals.e[v];
    }
  }
}

// Backward: one thread per V elements of a grad_input row. It sums, in the output's order, the
// grad_output elements of every combination of the outer dims' sources, then the last dim's.
// MaxD bounds ndim so that the per-dim arrays, indexed in unrolled loops, stay in registers
// (dims past the padded ones are merged by the front end: 5 cover every reflect / replicate).
template <typename T, int V, int MaxD>
__global__ void __launch_bounds__(kThreads) pad_backward_kernel(const __grid_constant__ PadParams p,
                                                                int64_t chunks_per_row) {
  using Acc = opmath_t<T>;
  const T* grad_out = static_cast<const T*>(p.src);
  T* grad_in = static_cast<T*>(p.dst);
  const int nd = p.ndim;
  const PadDim last = p.dims[nd - 1];
  const int64_t n = last.in, s_in = p.in_strides[nd - 1], s_out = p.out_strides[nd - 1];
  const int64_t units = p.in_numel / n * chunks_per_row, stride = grid_threads();
  for (int64_t u = global_thread(); u < units; u += stride) {
    int64_t row, chunk;
    divmod(u, chunks_per_row, row, chunk);
    PadSources outer[MaxD];
    int64_t count[MaxD], combos = 1, in_off = 0;
#pragma unroll
    for (int d = MaxD - 2; d >= 0; --d) {
      if (d > nd - 2) continue;
      int64_t q = 0, k = row;
      if (d > 0) divmod(row, p.dims[d].in, q, k);
      row = q;
      in_off += k * p.in_strides[d];
      outer[d] = pad_sources(p.mode, p.dims[d], k);
      count[d] = 0;
#pragma unroll
      for (int r = 0; r < 3; ++r)
        if (r < outer[d].n) count[d] += outer[d].hi[r] - outer[d].lo[r];
      combos *= count[d];
    }
    const int64_t k0 = chunk * V;
    Acc acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = Acc{};
    for (int64_t c = 0; c < combos; ++c) {  // outer combinations, the innermost outer dim fastest
      int64_t off = 0, rest = c;
#pragma unroll
      for (int d = MaxD - 2; d >= 0; --d) {
        if (d > nd - 2) continue;
        int64_t q = rest, i = 0;
        if (count[d] > 1) {
          if (d > 0) divmod(rest, count[d], q, i);
          else i = rest, q = 0;
        }
        rest = q;
        int64_t j = outer[d].lo[0] + i;  // the i-th source, walking the ranges in order
        if (outer[d].n > 1 && i >= outer[d].hi[0] - outer[d].lo[0]) {
          i -= outer[d].hi[0] - outer[d].lo[0];
          j = outer[d].lo[1] + i;
          if (outer[d].n > 2 && i >= outer[d].hi[1] - outer[d].lo[1]) j = outer[d].lo[2] + i - (outer[d].hi[1] - outer[d].lo[1]);
        }
        off += j * p.out_strides[d];
      }
#pragma unroll
      for (int v = 0; v < V; ++v) {
        if (k0 + v >= n) break;
        const PadSources s = pad_sources(p.mode, last, k0 + v);
#pragma unroll
        for (int r = 0; r < 3; ++r) {
          if (r >= s.n) break;
          for (int64_t j = s.lo[r]; j < s.hi[r]; ++j) acc[v] = acc[v] + static_cast<Acc>(grad_out[off + j * s_out]);
        }
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (k0 + v < n) grad_in[in_off + (k0 + v) * s_in] = static_cast<T>(acc[v]);
  }
}

}  // namespace

void pad(const PadParams& p) {
  if (p.out_numel == 0) return;
  // The kernel writes the output as flat memory: it must be dense in the dims' order.
  int64_t dense = 1;
  for (int d = p.ndim - 1; d >= 0; --d) {
    ANVIL_CHECK(p.out_strides[d] == dense || p.dims[d].out == 1, Error, "[pad] internal: output not dense in dim ", d);
    dense *= p.dims[d].out;
  }
  ANVIL_CHECK(reinterpret_cast<uintptr_t>(p.dst) % 16 == 0, Error, "[pad] internal: output not 16-byte aligned");
  KernelLaunch launch(p.dst);
  dispatch_element_size(element_size(p.dtype), "[pad]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const int64_t units = (p.out_numel * static_cast<int64_t>(sizeof(U)) + 15) / 16;
    pad_kernel<U><<<launch.blocks(units), kThreads, 0, launch.stream()>>>(p);
  });
  launch.check("[pad]");
}

void pad_backward(const PadParams& p) {
  if (p.in_numel == 0) return;
  KernelLaunch launch(p.dst);
  dispatch_float_complex_types(p.dtype, "[pad_backward]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = sizeof(T) >= 8 ? 2 : sizeof(T) == 4 ? 4 : 8;
    const int64_t n = p.dims[p.ndim - 1].in, chunks = (n + V - 1) / V;
    const unsigned blocks = launch.blocks(p.in_numel / n * chunks);
    if (p.ndim <= 5) pad_backward_kernel<T, V, 5><<<blocks, kThreads, 0, launch.stream()>>>(p, chunks);
    else pad_backward_kernel<T, V, kMaxDims><<<blocks, kThreads, 0, launch.stream()>>>(p, chunks);
  });
  launch.check("[pad_backward]");
}

}  // namespace anvil::cuda_backend
