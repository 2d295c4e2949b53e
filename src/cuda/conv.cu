// CUDA convolution kernels (core/kernels/conv.h).
// - im2col / col2im for the composition. im2col: a thread per column element, in the column's
//   memory order. col2im: a thread per input element of the chunk's input range gathers the
//   column elements of its taps in tap order and adds them to its own element: no atomics, the
//   same bits every run.
// - conv_direct's own kernels, ahead of cuDNN: channels-first depthwise convolutions of any rank
//   (forward, stride-1 input grad, weight grad); then cuDNN.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/conv.h"
#include "cuda/cudnn_conv.h"
#include "cuda/device/map.cuh"
#include "cuda/device/reduce.cuh"
#include "cuda/device/strided.cuh"
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

// ---- depthwise, channels-first: groups == c_in == c_out > 1, weight [C, 1, k...] ---------------
// The conv's axes moved last (leading axes of extent 1), as the CPU's kernel does. A thread per
// run of kDepthwiseRun (8) outputs along the last axis: on rows of 256+ outputs every 32nd of a warp's
// 256 (each load and store a contiguous 32-element piece of a row), on shorter rows 8
// consecutive ones. Each output sums its taps (t0, t1, t2 ascending) over x in Acc (float,
// double for double) from the bias, one rounding; a run shares one index decomposition and its
// weight loads (a thread per output spent ~150 instructions on each: 40 us, 3 % of DRAM, for
// [1, 1536, 2048] k4 bf16), neighbouring threads share their inputs through L1. The input grad
// with every stride 1 runs the same kernel (run_depthwise). Channels-last stays with cuDNN, and
// so does a strided input grad: a thread per element measured 9x (a channels-last 3 x 3) and
// 2.8x slower than PyTorch there (docs/PERFORMANCE.md, session 21).
constexpr int kDepthwiseRun = 8;

template <typename I>
struct DepthwiseGeo {
  ConvAxis ax[3];
  I taps, in_plane, out_plane;  // positions per (n, c) plane of x and of y
  I lanes;                      // threads per run along the last axis: 32 (a warp) or 1
  bool flip;                    // taps read in reverse (the input grad as a forward conv)
  cuda_device::IndexDiv<I> o0, o1, runs, c;  // y's first two extents, runs per row, channels
};

template <typename I>
DepthwiseGeo<I> depthwise_geo(const ConvDirectParams& p, int lanes, bool flip) {
  DepthwiseGeo<I> g{};
  g.flip = flip;
  for (int i = 0; i < p.spatial; ++i) g.ax[3 - p.spatial + i] = p.axis[i];
  g.taps = static_cast<I>(g.ax[0].kernel * g.ax[1].kernel * g.ax[2].kernel);
  g.in_plane = static_cast<I>(g.ax[0].in * g.ax[1].in * g.ax[2].in);
  g.out_plane = static_cast<I>(g.ax[0].out * g.ax[1].out * g.ax[2].out);
  g.lanes = static_cast<I>(lanes);
  const int64_t span = int64_t{kDepthwiseRun} * lanes;
  g.o0 = cuda_device::IndexDiv<I>(g.ax[0].out);
  g.o1 = cuda_device::IndexDiv<I>(g.ax[1].out);
  g.runs = cuda_device::IndexDiv<I>((g.ax[2].out + span - 1) / span);
  g.c = cuda_device::IndexDiv<I>(p.c_in);
  return g;
}

template <typename T, typename Acc, typename I>
__global__ void __launch_bounds__(kThreads) depthwise_kernel(const DepthwiseGeo<I> g, const T* __restrict__ x,
                                                             const T* __restrict__ w, const T* __restrict__ bias,
                                                             T* __restrict__ y, I threads) {
  const ConvAxis &a0 = g.ax[0], &a1 = g.ax[1], &a2 = g.ax[2];
  for (I u = static_cast<I>(cuda_device::global_thread()); u < threads; u += static_cast<I>(cuda_device::grid_threads())) {
    // Thread u -> its plane (n * C + c), channel and first output; its outputs are that one and
    // every lanes-th after it (lanes is 1 or 32: a shift).
    I q = u / g.lanes, r, o0, o1, o2, plane, c, n;
    g.runs(q, q, r);
    g.o1(q, q, o1);
    g.o0(q, plane, o0);
    g.c(plane, n, c);
    o2 = r * g.lanes * kDepthwiseRun + (u & (g.lanes - 1));
    const I room = static_cast<I>(a2.out) - o2;  // output v exists when v * lanes < room
    const Acc b = bias ? static_cast<Acc>(bias[c]) : Acc(0);
    Acc acc[kDepthwiseRun];
#pragma unroll
    for (int v = 0; v < kDepthwiseRun; ++v) acc[v] = b;
    const T* wc = w + c * g.taps;
    for (I t0 = 0; t0 < a0.kernel; ++t0) {
      const I j0 = o0 * static_cast<I>(a0.stride) - static_cast<I>(a0.pad) + t0 * static_cast<I>(a0.dilation);
      if (j0 < 0 || j0 >= a0.in) continue;
      for (I t1 = 0; t1 < a1.kernel; ++t1) {
        const I j1 = o1 * static_cast<I>(a1.stride) - static_cast<I>(a1.pad) + t1 * static_cast<I>(a1.dilation);
        if (j1 < 0 || j1 >= a1.in) continue;
        const T* row = x + plane * g.in_plane + (j0 * static_cast<I>(a1.in) + j1) * static_cast<I>(a2.in);
        const I f = (t0 * static_cast<I>(a1.kernel) + t1) * static_cast<I>(a2.kernel);  // flat tap of t2 = 0
        for (I t2 = 0; t2 < a2.kernel; ++t2) {
          const Acc wv = static_cast<Acc>(g.flip ? wc[g.taps - 1 - f - t2] : wc[f + t2]);
          const I jb = o2 * static_cast<I>(a2.stride) - static_cast<I>(a2.pad) + t2 * static_cast<I>(a2.dilation);
#pragma unroll
          for (int v = 0; v < kDepthwiseRun; ++v) {
            const I j2 = jb + v * g.lanes * static_cast<I>(a2.stride);
            if (v * g.lanes < room && j2 >= 0 && j2 < a2.in) acc[v] += wv * static_cast<Acc>(row[j2]);
          }
        }
      }
    }
    T* out = y + plane * g.out_plane + (o0 * static_cast<I>(a1.out) + o1) * static_cast<I>(a2.out) + o2;
#pragma unroll
    for (int v = 0; v < kDepthwiseRun; ++v)
      if (v * g.lanes < room) out[v * g.lanes] = static_cast<T>(acc[v]);
  }
}

// Depthwise weight grad, channels-first: gw[c, tap] = the sum over the batch and the output
// positions of gy[n, c, o] x[n, c, o s - p + t d]. A block per channel; each thread sums its
// positions for every tap in registers (kMaxTaps of them, taps' input offsets from shared
// memory), then the block combines them in a fixed order: the same bits every run, no atomics.
template <typename I>
struct DepthwiseWgradGeo {
  ConvAxis ax[3];
  I taps, channels, in_plane, out_plane, total;  // total: N x out_plane, each channel's sum
  cuda_device::IndexDiv<I> plane, o1, o2;        // by out_plane, out1, out2
};

template <typename Acc>
struct AccSum {
  __device__ Acc init() const { return Acc(0); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

template <typename T, typename Acc, typename I, int kMaxTaps>
__global__ void __launch_bounds__(kThreads) depthwise_weight_grad_kernel(const DepthwiseWgradGeo<I> g,
                                                                         const T* __restrict__ x,
                                                                         const T* __restrict__ gy, T* __restrict__ gw) {
  __shared__ int tap_off[3][kMaxTaps];  // t_i x dilation_i of each tap
  __shared__ Acc partial[kThreads / 32];
  const ConvAxis &a0 = g.ax[0], &a1 = g.ax[1], &a2 = g.ax[2];
  for (int j = static_cast<int>(threadIdx.x); j < kMaxTaps; j += kThreads) {
    const int64_t t = j < g.taps ? j : 0;
    tap_off[0][j] = static_cast<int>(t / (a1.kernel * a2.kernel) * a0.dilation);
    tap_off[1][j] = static_cast<int>(t / a2.kernel % a1.kernel * a1.dilation);
    tap_off[2][j] = static_cast<int>(t % a2.kernel * a2.dilation);
  }
  __syncthreads();
  const I c = static_cast<I>(blockIdx.x);
  Acc acc[kMaxTaps];
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) acc[j] = Acc(0);
  for (I e = static_cast<I>(threadIdx.x); e < g.total; e += kThreads) {
    I n, pos, q, o0, o1, o2;
    g.plane(e, n, pos);
    g.o2(pos, q, o2);
    g.o1(q, o0, o1);
    const Acc gv = static_cast<Acc>(gy[(n * g.channels + c) * g.out_plane + pos]);
    const T* xp = x + (n * g.channels + c) * g.in_plane;
    const I b0 = o0 * static_cast<I>(a0.stride) - static_cast<I>(a0.pad);
    const I b1 = o1 * static_cast<I>(a1.stride) - static_cast<I>(a1.pad);
    const I b2 = o2 * static_cast<I>(a2.stride) - static_cast<I>(a2.pad);
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j) {
      if (j >= g.taps) break;
      const I i0 = b0 + tap_off[0][j], i1 = b1 + tap_off[1][j], i2 = b2 + tap_off[2][j];
      if (i0 >= 0 && i0 < a0.in && i1 >= 0 && i1 < a1.in && i2 >= 0 && i2 < a2.in)
        acc[j] += gv * static_cast<Acc>(xp[(i0 * static_cast<I>(a1.in) + i1) * static_cast<I>(a2.in) + i2]);
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) {
    if (j >= g.taps) break;
    const Acc v = cuda_device::block_reduce(acc[j], AccSum<Acc>{}, partial);
    if (threadIdx.x == 0) gw[c * g.taps + j] = static_cast<T>(v);
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

namespace {

constexpr int kDepthwiseMaxTaps = 32;  // the weight grad's register sums

// Channels-first depthwise passes: the forward; the input grad when every stride is 1 (then it is
// a forward conv of grad_output with the taps reversed and padding (k - 1) d - p); the weight grad
// of up to 32 taps.
bool depthwise(const ConvDirectParams& p) {
  if (p.channels_last || p.groups <= 1 || p.groups != p.c_in || p.c_out != p.c_in) return false;
  switch (p.pass) {
    case ConvPass::Forward: return true;
    case ConvPass::BackwardInput:
      for (int i = 0; i < p.spatial; ++i)
        if (p.axis[i].stride != 1) return false;
      return true;
    case ConvPass::BackwardWeight: return conv_taps(p) <= kDepthwiseMaxTaps;
  }
  return false;
}

// A 1-d conv with few output positions is a GEMM of few columns: im2col + cuBLASLt beats
// cuDNN's kernels there (H200, EnCodec-style streaming [1, 512, 64] k7 float32: 21 us vs 84 us)
// and a direct kernel of ours (27-39 us, docs/PERFORMANCE.md session 21), so it stays composed.
bool short_conv1d(const ConvDirectParams& p) {
  return p.pass == ConvPass::Forward && p.spatial == 1 && p.axis[0].out <= 256;
}

// Positions per (n, c) plane of x and of y.
struct Planes {
  int64_t in = 1, out = 1;
};
Planes planes_of(const ConvDirectParams& p) {
  Planes r;
  for (int i = 0; i < p.spatial; ++i) {
    r.in *= p.axis[i].in;
    r.out *= p.axis[i].out;
  }
  return r;
}

void run_depthwise_weight_grad(const ConvDirectParams& p) {
  const int64_t out_plane = planes_of(p).out, in_plane = planes_of(p).in;
  KernelLaunch launch(p.w);
  dispatch_float_types(p.dtype, "[conv]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    auto go = [&](auto index) {
      using I = decltype(index);
      DepthwiseWgradGeo<I> g{};
      for (int i = 0; i < p.spatial; ++i) g.ax[3 - p.spatial + i] = p.axis[i];
      g.taps = static_cast<I>(conv_taps(p));
      g.channels = static_cast<I>(p.c_in);
      g.in_plane = static_cast<I>(in_plane);
      g.out_plane = static_cast<I>(out_plane);
      g.total = static_cast<I>(p.n * out_plane);
      g.plane = cuda_device::IndexDiv<I>(out_plane);
      g.o1 = cuda_device::IndexDiv<I>(g.ax[1].out);
      g.o2 = cuda_device::IndexDiv<I>(g.ax[2].out);
      const T* x = static_cast<const T*>(p.x);
      const T* gy = static_cast<const T*>(p.y);
      T* gw = static_cast<T*>(p.w);
      const unsigned blocks = static_cast<unsigned>(p.c_in);
      if (g.taps <= 8) depthwise_weight_grad_kernel<T, Acc, I, 8><<<blocks, kThreads, 0, launch.stream()>>>(g, x, gy, gw);
      else depthwise_weight_grad_kernel<T, Acc, I, kDepthwiseMaxTaps><<<blocks, kThreads, 0, launch.stream()>>>(g, x, gy, gw);
    };
    if (p.n * p.c_in * std::max(out_plane, in_plane) < (int64_t{1} << 31)) go(int32_t{});
    else go(int64_t{});
  });
  launch.check("[conv]");
}

// The forward, or the input grad as a forward conv of grad_output with reversed taps.
void run_depthwise(const ConvDirectParams& given) {
  if (given.pass == ConvPass::BackwardWeight) return run_depthwise_weight_grad(given);
  const bool flip = given.pass == ConvPass::BackwardInput;
  const ConvDirectParams p = flip ? input_grad_as_forward(given) : given;
  const int64_t outs = p.n * p.c_in * planes_of(p).out, ins = p.n * p.c_in * planes_of(p).in;
  if (outs == 0) return;
  KernelLaunch launch(p.y);
  dispatch_float_types(p.dtype, "[conv]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    auto go = [&](auto index) {
      using I = decltype(index);
      const int64_t last = p.axis[p.spatial - 1].out;
      const int lanes = last >= 32 * kDepthwiseRun ? 32 : 1;
      const int64_t span = int64_t{kDepthwiseRun} * lanes, threads = outs / last * ((last + span - 1) / span) * lanes;
      // A block per 256 threads, not a grid-stride loop over a resident grid: a thread's runs
      // wait on each other's loads, so fresh blocks are what keeps loads in flight.
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((threads + kThreads - 1) / kThreads, INT32_MAX));
      depthwise_kernel<T, Acc, I><<<blocks, kThreads, 0, launch.stream()>>>(
          depthwise_geo<I>(p, lanes, flip), static_cast<const T*>(p.x), static_cast<const T*>(p.w),
          static_cast<const T*>(p.has_bias ? p.bias : nullptr), static_cast<T*>(p.y), static_cast<I>(threads));
    };
    if (std::max(outs, ins) < (int64_t{1} << 31)) go(int32_t{});
    else go(int64_t{});
  });
  launch.check("[conv]");
}

}  // namespace

// Plan: our own kernels for channels-first depthwise convolutions (depthwise() says which
// passes) whatever set_cudnn_enabled says (it governs cuDNN only, as
// torch.backends.cudnn.enabled); cuDNN where the build has it and it has a plan for the params,
// short 1-d forwards aside; else the im2col composition.
FusedPlan conv_direct_plan(const ConvDirectParams& p) {
  if (depthwise(p)) return FusedPlan::Fused;
  return !short_conv1d(p) && cudnn_conv_supported(p) ? FusedPlan::Fused : FusedPlan::Composed;
}

void conv_direct(const ConvDirectParams& p) {
  if (depthwise(p)) return run_depthwise(p);
  cudnn_conv_run(p);
}

size_t conv_plan_cache_size() { return cudnn_plan_cache_size(); }
void set_conv_plan_cache_capacity(size_t plans) { set_cudnn_plan_cache_capacity(plans); }
bool cudnn_is_available() { return cudnn_loadable(); }
void set_cudnn_enabled(bool enabled) { set_cudnn_use(enabled); }
bool cudnn_enabled() { return cudnn_use(); }
void set_cudnn_allow_fft_winograd(bool allow) { set_cudnn_fft_winograd(allow); }
bool cudnn_allow_fft_winograd() { return cudnn_fft_winograd(); }

}  // namespace anvil::cuda_backend
