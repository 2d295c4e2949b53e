#pragma once
// Elementwise map kernels over an ElementwiseParams-like struct (slot 0 out, slots 1.. inputs):
//  map1 / map2: out = f(a) / f(a, b) with value functors; four paths chosen at launch (MapPath):
//    contiguous and aligned -> packed vector loads (16 B per thread and operand where the
//    dtypes allow), contiguous misaligned -> 4 independent loads per thread, rows of packs
//    (the innermost dim dense or broadcast in every operand: a bias over an image), strided.
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

// Packed: contiguous operands, packs aligned; Elements: contiguous, misaligned; InnerPacks: the
// innermost dim a whole number of packs, of stride 1 in the output and 1 or 0 in each input,
// every stride-1 operand's packs aligned (inner_packs_fit); Strided: anything else.
enum class MapPath : int { Packed, Elements, InnerPacks, Strided };

// The pack of V elements at a + off: loaded whole where the operand runs along the innermost
// dim (row), else its one element repeated (the innermost dim broadcast).
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_row_pack(const T* a, int64_t off, bool row) {
  if (row) return *reinterpret_cast<const Pack<T, V>*>(a + off);
  Pack<T, V> x;
  const T v = a[off];
#pragma unroll
  for (int k = 0; k < V; ++k) x.v[k] = v;
  return x;
}

__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename Out, typename In, typename F, typename P>
__global__ void __launch_bounds__(kThreads) map1_kernel(const __grid_constant__ P p, F f, MapPath path) {
  Out* out = static_cast<Out*>(p.ptr[0]);
  const In* a = static_cast<const In*>(p.ptr[1]);
  const int64_t n = p.numel, tid = global_thread(), nthreads = grid_threads();
  if (path == MapPath::InnerPacks) {
    constexpr int V = pack_width<In, Out>();
    const bool a_row = p.strides[1][p.ndim - 1] != 0;
    for (int64_t j = tid; j < n / V; j += nthreads) {
      int64_t off[2];
      strided_offsets<2>(p, j * V, off);
      const Pack<In, V> x = load_row_pack<In, V>(a, off[1], a_row);
      Pack<Out, V> y;
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = f(x.v[k]);
      *reinterpret_cast<Pack<Out, V>*>(out + off[0]) = y;
    }
    return;
  }
  if (path == MapPath::Strided) {
    for (int64_t i = tid; i < n; i += nthreads) {
      int64_t off[2];
      strided_offsets<2>(p, i, off);
      out[off[0]] = f(a[off[1]]);
    }
    return;
  }
  int64_t start = 0;
  if (path == MapPath::Packed) {
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
__global__ void __launch_bounds__(kThreads) map2_kernel(const __grid_constant__ P p, F f, MapPath path) {
  Out* out = static_cast<Out*>(p.ptr[0]);
  const In* a = static_cast<const In*>(p.ptr[1]);
  const In* b = static_cast<const In*>(p.ptr[2]);
  const int64_t n = p.numel, tid = global_thread(), nthreads = grid_threads();
  if (path == MapPath::InnerPacks) {
    constexpr int V = pack_width<In, Out>();
    const bool a_row = p.strides[1][p.ndim - 1] != 0, b_row = p.strides[2][p.ndim - 1] != 0;
    for (int64_t j = tid; j < n / V; j += nthreads) {
      int64_t off[3];
      strided_offsets<3>(p, j * V, off);
      const Pack<In, V> x = load_row_pack<In, V>(a, off[1], a_row), y = load_row_pack<In, V>(b, off[2], b_row);
      Pack<Out, V> z;
#pragma unroll
      for (int k = 0; k < V; ++k) z.v[k] = f(x.v[k], y.v[k]);
      *reinterpret_cast<Pack<Out, V>*>(out + off[0]) = z;
    }
    return;
  }
  if (path == MapPath::Strided) {
    for (int64_t i = tid; i < n; i += nthreads) {
      int64_t off[3];
      strided_offsets<3>(p, i, off);
      out[off[0]] = f(a[off[1]], b[off[2]]);
    }
    return;
  }
  int64_t start = 0;
  if (path == MapPath::Packed) {
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
