// CUDA im2col / col2im (core/kernels/conv.h). im2col: a thread per column element, in the
// column's memory order. col2im: a thread per input element of the chunk's input range gathers
// the column elements of its taps in tap order and adds them to its own element: no atomics, the
// same bits every run.
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels/conv.h"
#include "cuda/cudnn_conv.h"
#include "cuda/device/map.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::kThreads;

struct Taps {
  int64_t t0, t1, t2;
};
__device__ __forceinline__ Taps split_tap(const ConvGeometry& g, int64_t tap) {
  return {tap / (g.axis[1].kernel * g.axis[2].kernel), tap / g.axis[2].kernel % g.axis[1].kernel, tap % g.axis[2].kernel};
}

__device__ __forceinline__ int64_t input_index(const ConvAxis& a, int64_t o, int64_t t) {
  return o * a.stride - a.pad + t * a.dilation;
}

// col element e -> the input element it copies, or -1 in the padding.
__device__ __forceinline__ int64_t im2col_source(const ConvGeometry& g, int64_t e) {
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const int64_t k = conv_taps(g), P = (g.row_end - g.row_begin) * a1.out * a2.out;
  int64_t c, tap, pos;
  if (g.channels_last) {  // col [P, C * K], column grp * K * cg + tap * cg + c
    const int64_t ck = g.channels * k, cg = g.channels / g.groups;
    pos = e / ck;
    const int64_t rem = e % ck, grp = rem / (k * cg);
    tap = rem / cg % k;
    c = grp * cg + rem % cg;
  } else {  // col [C * K, P], row c * K + tap
    pos = e % P;
    c = e / P / k;
    tap = e / P % k;
  }
  const Taps t = split_tap(g, tap);
  const int64_t o2 = pos % a2.out, o1 = pos / a2.out % a1.out, o0 = g.row_begin + pos / (a2.out * a1.out);
  const int64_t i0 = input_index(a0, o0, t.t0), i1 = input_index(a1, o1, t.t1), i2 = input_index(a2, o2, t.t2);
  if (i0 < 0 || i0 >= a0.in || i1 < 0 || i1 >= a1.in || i2 < 0 || i2 >= a2.in) return -1;
  const int64_t spatial = (i0 * a1.in + i1) * a2.in + i2;
  return g.channels_last ? spatial * g.channels + c : c * a0.in * a1.in * a2.in + spatial;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) im2col_kernel(const __grid_constant__ Im2colParams p, int64_t total) {
  const T* x = static_cast<const T*>(p.x);
  T* col = static_cast<T*>(p.col);
  for (int64_t e = cuda_device::global_thread(); e < total; e += cuda_device::grid_threads()) {
    const int64_t s = im2col_source(p.geo, e);
    col[e] = s < 0 ? T(0) : x[s];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) col2im_kernel(const __grid_constant__ Col2imParams p, int64_t first_row,
                                                          int64_t total) {
  const ConvGeometry& g = p.geo;
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const T* col = static_cast<const T*>(p.col);
  T* x = static_cast<T*>(p.x);
  const int64_t k = conv_taps(g), cg = g.channels / g.groups, P = (g.row_end - g.row_begin) * a1.out * a2.out;
  const int64_t rows = total / (g.channels * a1.in * a2.in);
  for (int64_t e = cuda_device::global_thread(); e < total; e += cuda_device::grid_threads()) {
    int64_t c, q;  // channel, spatial index within the chunk's input rows
    if (g.channels_last) c = e % g.channels, q = e / g.channels;
    else q = e % (rows * a1.in * a2.in), c = e / (rows * a1.in * a2.in);
    const int64_t i2 = q % a2.in, i1 = q / a2.in % a1.in, i0 = first_row + q / (a2.in * a1.in);
    const int64_t grp = c / cg, cc = c % cg;
    T acc = T(0);
    conv_taps_reading(a0, i0, g.row_begin, g.row_end, [&](int64_t t0, int64_t o0) {
      conv_taps_reading(a1, i1, 0, a1.out, [&](int64_t t1, int64_t o1) {
        conv_taps_reading(a2, i2, 0, a2.out, [&](int64_t t2, int64_t o2) {
          const int64_t tap = (t0 * a1.kernel + t1) * a2.kernel + t2;
          const int64_t pos = ((o0 - g.row_begin) * a1.out + o1) * a2.out + o2;
          acc += g.channels_last ? col[pos * g.channels * k + grp * k * cg + tap * cg + cc] : col[(c * k + tap) * P + pos];
        });
      });
    });
    const int64_t spatial = (i0 * a1.in + i1) * a2.in + i2;
    x[g.channels_last ? spatial * g.channels + c : c * a0.in * a1.in * a2.in + spatial] += acc;
  }
}

}  // namespace

void im2col(const Im2colParams& p) {
  const ConvGeometry& g = p.geo;
  const int64_t total = g.channels * conv_taps(g) * (g.row_end - g.row_begin) * g.axis[1].out * g.axis[2].out;
  if (total == 0) return;
  KernelLaunch launch(p.col);
  dispatch_element_size(element_size(p.dtype), "[im2col]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    im2col_kernel<T><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, total);
  });
  launch.check("[im2col]");
}

void col2im(const Col2imParams& p) {
  const ConvGeometry& g = p.geo;
  const ConvInputRange r0 = conv_input_range(g.axis[0], g.row_begin, g.row_end);
  const int64_t total = g.channels * (r0.last - r0.first) * g.axis[1].in * g.axis[2].in;
  if (total <= 0) return;
  KernelLaunch launch(p.x);
  dispatch_float_types(p.dtype, "[col2im]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      col2im_kernel<T><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, r0.first, total);
    else
      throw DTypeError(detail::cat_message("[col2im] sums in float32 or float64, got ", dtype_name(p.dtype)));
  });
  launch.check("[col2im]");
}

// A 1-d conv with few output positions is a GEMM of few columns: im2col + cuBLASLt beats
// cuDNN's kernels there (H200, EnCodec-style streaming [1, 512, 64] k7 float32: 21 us vs 84 us).
bool short_conv1d(const ConvDirectParams& p) {
  return p.pass == ConvPass::Forward && p.spatial == 1 && p.axis[0].out <= 256;
}

// Plan: cuDNN where the build has it and it has a plan for the params, short 1-d convs aside;
// else the im2col composition.
FusedPlan conv_direct_plan(const ConvDirectParams& p) {
  return !short_conv1d(p) && cudnn_conv_supported(p) ? FusedPlan::Fused : FusedPlan::Composed;
}

void conv_direct(const ConvDirectParams& p) { cudnn_conv_run(p); }

size_t conv_plan_cache_size() { return cudnn_plan_cache_size(); }
void set_conv_plan_cache_capacity(size_t plans) { set_cudnn_plan_cache_capacity(plans); }
bool cudnn_is_available() { return cudnn_loadable(); }
void set_cudnn_enabled(bool enabled) { set_cudnn_use(enabled); }
bool cudnn_enabled() { return cudnn_use(); }
void set_cudnn_allow_fft_winograd(bool allow) { set_cudnn_fft_winograd(allow); }
bool cudnn_allow_fft_winograd() { return cudnn_fft_winograd(); }

}  // namespace anvil::cuda_backend
