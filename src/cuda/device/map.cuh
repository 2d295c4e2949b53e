#pragma once
// Elementwise map kernels over an ElementwiseParams-like struct (slot 0 out, slots 1.. inputs):
//  map1 / map2: out = f(a) / f(a, b) with value functors; three paths chosen at launch:
//    contiguous and aligned -> packed vector loads (16 B per thread and operand where the
//    dtypes allow), contiguous misaligned -> 4 independent loads per thread, strided.
//  map_slots: f(p, offsets) for ops with optional operands (where, clamp, fill).
// Grid-stride loops of 256 threads over one wave of resident blocks (launchers: cuda/map_launch.cuh);
// a launch needs p.numel > 0.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/strided.cuh"

namespace anvil::cuda_device {

inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 4;

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements per packed access: 16 bytes of the wider operand, at least 4.
template <typename A, typename B>
constexpr int pack_width() {
  constexpr int w = 16 / static_cast<int>(sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B));
  return w < 4 ? 4 : w;
}

__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename Out, typename In, typename F, typename P>
__global__ void __launch_bounds__(kThreads) map1_kernel(const __grid_constant__ P p, F f, bool packed) {
  Out* out = static_cast<Out*>(p.ptr[0]);
  const In* a = static_cast<const In*>(p.ptr[1]);
  const int64_t n = p.numel, tid = global_thread(), nthreads = grid_threads();
  if (!p.contiguous) {
    for (int64_t i = tid; i < n; i += nthreads) {
      int64_t off[2];
      strided_offsets<2>(p, i, off);
      out[off[0]] = f(a[off[1]]);
    }
    return;
  }
  int64_t start = 0;
  if (packed) {
    constexpr int V = pack_width<In, Out>();
    const int64_t npack = n / V;
    const Pack<In, V>* in_packs = reinterpret_cast<const Pack<In, V>*>(a);
    Pack<Out, V>* out_packs = reinterpret_cast<Pack<Out, V>*>(out);
    // Two packs in flight per thread (H200, 2 GiB float32 copy: 3.73 TB/s with one pack per
    // iteration, 3.96 TB/s with two and a one-wave grid).
    for (int64_t j = tid; j < npack; j += 2 * nthreads) {
      const bool second = j + nthreads < npack;
      Pack<In, V> x0 = in_packs[j], x1;
      if (second) x1 = in_packs[j + nthreads];
      Pack<Out, V> y;
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = f(x0.v[k]);
      out_packs[j] = y;
      if (second) {
#pragma unroll
        for (int k = 0; k < V; ++k) y.v[k] = f(x1.v[k]);
        out_packs[j + nthreads] = y;
      }
    }
    start = npack * V;
  }
  for (int64_t base = start + blockIdx.x * static_cast<int64_t>(blockDim.x) * kUnroll; base < n;
       base += nthreads * kUnroll) {
    In x[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      int64_t i = base + threadIdx.x + k * blockDim.x;
      if (i < n) x[k] = a[i];
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      int64_t i = base + threadIdx.x + k * blockDim.x;
      if (i < n) out[i] = f(x[k]);
    }
  }
}

template <typename Out, typename In, typename F, typename P>
__global__ void __launch_bounds__(kThreads) map2_kernel(const __grid_constant__ P p, F f, bool packed) {
  Out* out = static_cast<Out*>(p.ptr[0]);
  const In* a = static_cast<const In*>(p.ptr[1]);
  const In* b = static_cast<const In*>(p.ptr[2]);
  const int64_t n = p.numel, tid = global_thread(), nthreads = grid_threads();
  if (!p.contiguous) {
    for (int64_t i = tid; i < n; i += nthreads) {
      int64_t off[3];
      strided_offsets<3>(p, i, off);
      out[off[0]] = f(a[off[1]], b[off[2]]);
    }
    return;
  }
  int64_t start = 0;
  if (packed) {
    constexpr int V = pack_width<In, Out>();
    const int64_t npack = n / V;
    for (int64_t j = tid; j < npack; j += nthreads) {
      Pack<In, V> x = reinterpret_cast<const Pack<In, V>*>(a)[j];
      Pack<In, V> y = reinterpret_cast<const Pack<In, V>*>(b)[j];
      Pack<Out, V> z;
#pragma unroll
      for (int k = 0; k < V; ++k) z.v[k] = f(x.v[k], y.v[k]);
      reinterpret_cast<Pack<Out, V>*>(out)[j] = z;
    }
    start = npack * V;
  }
  for (int64_t base = start + blockIdx.x * static_cast<int64_t>(blockDim.x) * kUnroll; base < n;
       base += nthreads * kUnroll) {
    In x[kUnroll], y[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      int64_t i = base + threadIdx.x + k * blockDim.x;
      if (i < n) {
        x[k] = a[i];
        y[k] = b[i];
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      int64_t i = base + threadIdx.x + k * blockDim.x;
      if (i < n) out[i] = f(x[k], y[k]);
    }
  }
}

template <int kSlots, typename F, typename P>
__global__ void __launch_bounds__(kThreads) map_slots_kernel(const __grid_constant__ P p, F f) {
  const int64_t n = p.numel, nthreads = grid_threads();
  for (int64_t i = global_thread(); i < n; i += nthreads) {
    int64_t off[kSlots];
    if (p.contiguous) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) off[s] = i;
    } else {
      strided_offsets<kSlots>(p, i, off);
    }
    f(p, off);
  }
}

}  // namespace anvil::cuda_device
