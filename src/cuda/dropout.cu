// CUDA dropout and its backward. A thread takes groups of four elements, one Philox-4x32-10
// counter each (core/kernels/dropout.h's keep rule, so the mask is the CPU backend's bit for
// bit), with packed loads and stores where the group is whole and aligned. Values are computed
// in float32 (float64 for float64) and rounded once, as the CPU backend.
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/dropout.h"
#include "cuda/device/map.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::kThreads;
using cuda_device::Pack;

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_kernel(const __grid_constant__ DropoutParams p, bool packed) {
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const Acc<T> scale = static_cast<Acc<T>>(p.scale);
  const int64_t groups = (p.numel + 3) / 4;
  for (int64_t g = cuda_device::global_thread(); g < groups; g += cuda_device::grid_threads()) {
    const Philox4 r = philox4x32(p.seed, p.offset + static_cast<uint64_t>(g));
    const int64_t i0 = 4 * g;
    if (packed && i0 + 4 <= p.numel) {
      const Pack<T, 4> v = *reinterpret_cast<const Pack<T, 4>*>(x + i0);
      Pack<T, 4> y;
      uint32_t m = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const bool k = dropout_keeps(r.v[w], p.threshold);
        m |= static_cast<uint32_t>(k) << (8 * w);
        y.v[w] = convert<T>(convert<Acc<T>>(v.v[w]) * (k ? scale : Acc<T>(0)));
      }
      *reinterpret_cast<Pack<T, 4>*>(out + i0) = y;
      *reinterpret_cast<uint32_t*>(p.mask + i0) = m;
    } else {
      for (int w = 0; w < 4 && i0 + w < p.numel; ++w) {
        const bool k = dropout_keeps(r.v[w], p.threshold);
        p.mask[i0 + w] = k;
        out[i0 + w] = convert<T>(convert<Acc<T>>(x[i0 + w]) * (k ? scale : Acc<T>(0)));
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_backward_kernel(const __grid_constant__ DropoutBackwardParams p,
                                                                     bool packed) {
  const T* g = static_cast<const T*>(p.grad);
  T* out = static_cast<T*>(p.out);
  const Acc<T> scale = static_cast<Acc<T>>(p.scale);
  const int64_t groups = (p.numel + 3) / 4;
  for (int64_t q = cuda_device::global_thread(); q < groups; q += cuda_device::grid_threads()) {
    const int64_t i0 = 4 * q;
    if (packed && i0 + 4 <= p.numel) {
      const Pack<T, 4> v = *reinterpret_cast<const Pack<T, 4>*>(g + i0);
      const uint32_t m = *reinterpret_cast<const uint32_t*>(p.mask + i0);
      Pack<T, 4> y;
#pragma unroll
      for (int w = 0; w < 4; ++w)
        y.v[w] = convert<T>(convert<Acc<T>>(v.v[w]) * ((m >> (8 * w)) & 0xFFu ? scale : Acc<T>(0)));
      *reinterpret_cast<Pack<T, 4>*>(out + i0) = y;
    } else {
      for (int64_t i = i0; i < i0 + 4 && i < p.numel; ++i)
        out[i] = convert<T>(convert<Acc<T>>(g[i]) * (p.mask[i] ? scale : Acc<T>(0)));
    }
  }
}

}  // namespace

void dropout(const DropoutParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[dropout]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool packed = aligned(p.x, 4 * sizeof(T)) && aligned(p.out, 4 * sizeof(T)) && aligned(p.mask, 4);
    dropout_kernel<T><<<launch.blocks((p.numel + 3) / 4), kThreads, 0, launch.stream()>>>(p, packed);
  });
  launch.check("[dropout]");
}

void dropout_backward(const DropoutBackwardParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.out);
  dispatch_float_types(p.dtype, "[native_dropout_backward]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool packed = aligned(p.grad, 4 * sizeof(T)) && aligned(p.out, 4 * sizeof(T)) && aligned(p.mask, 4);
    dropout_backward_kernel<T><<<launch.blocks((p.numel + 3) / 4), kThreads, 0, launch.stream()>>>(p, packed);
  });
  launch.check("[native_dropout_backward]");
}

}  // namespace anvil::cuda_backend
