// CUDA upsampling, forward and backward. A thread per destination element, in the destination's
// memory order (NC(D)HW or channels-last), sums in the CPU backend's nested order (W innermost,
// then H, then D). The forward computes each axis's taps from core/kernels/upsample.h (the
// nearest modes copy rows); the backward first builds a table per axis in scratch memory (each
// input index's output range, upsample_output_range, and its summed weights), then gathers:
// each grad_input element sums the weighted gradients of the outputs in its ranges, no atomics.
// Values accumulate in float (double for float64) and round once.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/upsample.h"
#include "cuda/device/map.cuh"
#include "cuda/allocator.h"
#include "cuda/device/strided.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

using cuda_device::kThreads;

// Element e of a [n, c, D, H, W] tensor in its memory order: its five indices, computed in the
// index type I: uint32_t when both tensors have fewer than 2^31 elements (64-bit division and
// modulo cost ~4x as much: H200, nearest 2x of [1, 512, 64, 64] bf16 took 153 us in int64).
template <typename I>
struct Coord {
  I n, c, d, h, w;
};
template <typename I>
__device__ __forceinline__ Coord<I> coord_of(I e, bool channels_last, I c, I D, I H, I W) {
  Coord<I> k;
  if (channels_last) {
    k.c = e % c;
    e /= c;
    k.w = e % W;
    e /= W;
    k.h = e % H;
    e /= H;
    k.d = e % D;
    k.n = e / D;
  } else {
    k.w = e % W;
    e /= W;
    k.h = e % H;
    e /= H;
    k.d = e % D;
    e /= D;
    k.c = e % c;
    k.n = e / c;
  }
  return k;
}

// Offset of (n, c) at spatial (d, h, w) in a tensor of that layout and extents.
template <typename I>
__device__ __forceinline__ I offset_of(bool channels_last, I n, I ch, I c, I D, I H, I W, I d, I h, I w) {
  return channels_last ? (((n * D + d) * H + h) * W + w) * c + ch : (((n * c + ch) * D + d) * H + h) * W + w;
}

template <typename T, typename Acc, typename I>
__global__ void __launch_bounds__(kThreads) upsample_kernel(const __grid_constant__ UpsampleParams p, I total) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const UpsampleAxis &aD = p.axis[0], &aH = p.axis[1], &aW = p.axis[2];
  const I c = static_cast<I>(p.c);
  for (I e = static_cast<I>(cuda_device::global_thread()); e < total; e += static_cast<I>(cuda_device::grid_threads())) {
    const Coord<I> k = coord_of<I>(e, p.channels_last, c, static_cast<I>(aD.out), static_cast<I>(aH.out), static_cast<I>(aW.out));
    int64_t id[4], ih[4], iw[4];
    Acc wd[4], wh[4], ww[4];
    const int nd = upsample_taps<Acc>(p.mode, p.align_corners, aD, k.d, id, wd);
    const int nh = upsample_taps<Acc>(p.mode, p.align_corners, aH, k.h, ih, wh);
    const int nw = upsample_taps<Acc>(p.mode, p.align_corners, aW, k.w, iw, ww);
    Acc acc_d = Acc(0);
    for (int a = 0; a < nd; ++a) {
      Acc acc_h = Acc(0);
      for (int b = 0; b < nh; ++b) {
        Acc acc_w = Acc(0);
        for (int j = 0; j < nw; ++j)
          acc_w += ww[j] * convert<Acc>(src[offset_of<I>(p.channels_last, k.n, k.c, c, static_cast<I>(aD.in),
                                                          static_cast<I>(aH.in), static_cast<I>(aW.in), static_cast<I>(id[a]),
                                                          static_cast<I>(ih[b]), static_cast<I>(iw[j]))]);
        acc_h += wh[b] * acc_w;
      }
      acc_d += wd[a] * acc_h;
    }
    dst[e] = convert<T>(acc_d);
  }
}

// ---- backward: a table per axis, then the gather.
// Input index i of an axis is read by the outputs [lo, lo + count) (upsample_output_range; each
// of them reads i, since an output's taps are contiguous from its lowest to its highest), with
// weight w_j for output lo + j: the sum, from 0 in tap order, of that output's taps at i (clamped
// taps repeat an index), as the CPU's backward list sums them. The table keeps w_j for j < kTableTaps
// (j-major, so that neighbouring input indices are neighbouring words); longer ranges (large
// scale factors, or scales inconsistent with the sizes) recompute the rest (weight_at).
constexpr int kTableTaps = 8;

template <typename Acc>
struct AxisTable {
  const int64_t* lo;   // [in]
  const int32_t* count;  // [in]
  const Acc* w;        // [kTableTaps][stride]
  int64_t stride;      // in_D + in_H + in_W: the j-th weights of every axis form one row
};

// The summed weight with which output o of axis a reads input i.
template <typename Acc>
__device__ __forceinline__ Acc weight_at(const UpsampleParams& p, const UpsampleAxis& a, int64_t o, int64_t i) {
  int64_t idx[4];
  Acc tw[4];
  const int n = upsample_taps<Acc>(p.mode, p.align_corners, a, o, idx, tw);
  Acc w = Acc(0);
  for (int j = 0; j < n; ++j)
    if (idx[j] == i) w += tw[j];
  return w;
}

// A thread per input index of every axis (axis 0's first).
template <typename Acc>
__global__ void __launch_bounds__(kThreads) upsample_tables_kernel(const __grid_constant__ UpsampleParams p, int64_t* lo,
                                                                   int32_t* count, Acc* w) {
  const int64_t total = p.axis[0].in + p.axis[1].in + p.axis[2].in;
  for (int64_t t = cuda_device::global_thread(); t < total; t += cuda_device::grid_threads()) {
    const int a = t < p.axis[0].in ? 0 : t < p.axis[0].in + p.axis[1].in ? 1 : 2;
    const int64_t i = a == 0 ? t : a == 1 ? t - p.axis[0].in : t - p.axis[0].in - p.axis[1].in;
    const UpsampleRange r = upsample_output_range<Acc>(p.mode, p.align_corners, p.axis[a], i);
    lo[t] = r.lo;
    count[t] = static_cast<int32_t>(r.hi - r.lo);
    for (int j = 0; j < kTableTaps; ++j) w[j * total + t] = r.lo + j < r.hi ? weight_at<Acc>(p, p.axis[a], r.lo + j, i) : Acc(0);
  }
}

// The weight of the j-th output reading input index t of the table (i of axis a).
template <typename Acc>
__device__ __forceinline__ Acc table_weight(const UpsampleParams& p, const AxisTable<Acc>& tab, const UpsampleAxis& a,
                                            int64_t t, int64_t i, int64_t lo, int j) {
  return j < kTableTaps ? tab.w[j * tab.stride + t] : weight_at<Acc>(p, a, lo + j, i);
}

// grad_input's extents in its memory order, innermost first: (W, H, D, c) channels-first,
// (c, W, H, D) channels-last.
template <typename I>
struct BackwardDivs {
  cuda_device::IndexDiv<I> d0, d1, d2, d3;
};

// A thread per grad_input element, in its memory order; the D and H table entries are warp-
// uniform loads (neighbouring threads share d and h). Sums nest as the CPU's: W within H within
// D, outputs ascending; values accumulate in Acc and round once. kUnit: the nearest modes, whose
// every weight is 1 (a product by it is exact, so the sums skip it and keep the same bits).
template <typename T, typename Acc, typename I, bool kUnit>
__global__ void __launch_bounds__(kThreads) upsample_backward_kernel(const __grid_constant__ UpsampleParams p,
                                                                     const __grid_constant__ AxisTable<Acc> tab,
                                                                     const __grid_constant__ BackwardDivs<I> dv, I total) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  const UpsampleAxis &aD = p.axis[0], &aH = p.axis[1], &aW = p.axis[2];
  const I oD = static_cast<I>(aD.out), oH = static_cast<I>(aH.out), oW = static_cast<I>(aW.out);
  const I c = static_cast<I>(p.c);
  const int64_t base_h = aD.in, base_w = aD.in + aH.in;  // the axes' first rows in the table
  for (I e = static_cast<I>(cuda_device::global_thread()); e < total; e += static_cast<I>(cuda_device::grid_threads())) {
    I q, nn, ch = 0, d, h, w;
    if (!p.channels_last) {
      dv.d0(e, q, w);
      dv.d1(q, q, h);
      dv.d2(q, nn, d);  // nn = n * c + ch
    } else {
      dv.d0(e, q, ch);
      dv.d1(q, q, w);
      dv.d2(q, q, h);
      dv.d3(q, nn, d);  // nn = n
    }
    const int64_t tw = base_w + w, th = base_h + h;
    const int64_t lo_w = tab.lo[tw], lo_h = tab.lo[th], lo_d = tab.lo[d];
    const int n_w = tab.count[tw], n_h = tab.count[th], n_d = tab.count[d];
    const I step = p.channels_last ? c : I(1);
    Acc acc_d = Acc(0);
    for (int a = 0; a < n_d; ++a) {
      const I od = static_cast<I>(lo_d + a);
      Acc acc_h = Acc(0);
      for (int b = 0; b < n_h; ++b) {
        const I row = (nn * oD + od) * oH + static_cast<I>(lo_h + b);
        const T* line = p.channels_last ? src + (row * oW + static_cast<I>(lo_w)) * c + ch : src + row * oW + static_cast<I>(lo_w);
        Acc acc_w = Acc(0);
        for (int j = 0; j < n_w; ++j) {
          const Acc x = convert<Acc>(line[static_cast<I>(j) * step]);
          if constexpr (kUnit) acc_w += x;
          else acc_w += table_weight(p, tab, aW, tw, w, lo_w, j) * x;
        }
        if constexpr (kUnit) acc_h += acc_w;
        else acc_h += table_weight(p, tab, aH, th, h, lo_h, b) * acc_w;
      }
      if constexpr (kUnit) acc_d += acc_h;
      else acc_d += table_weight(p, tab, aD, d, d, lo_d, a) * acc_h;
    }
    dst[e] = convert<T>(acc_d);
  }
}

// The nearest modes' forward as a copy, a warp per output row (channels-first: a row along W;
// channels-last: one position's C channels): the row's source is computed once per warp, each
// lane only maps its W index (or none), so the per-element index arithmetic of upsample_kernel
// (~250 instructions, the bound of nearest 2x there) goes. E: the element's storage type.
template <typename E>
__global__ void __launch_bounds__(kThreads) upsample_nearest_rows_kernel(const __grid_constant__ UpsampleParams p,
                                                                          int64_t rows) {
  const E* src = static_cast<const E*>(p.src);
  E* dst = static_cast<E*>(p.dst);
  const UpsampleAxis &aD = p.axis[0], &aH = p.axis[1], &aW = p.axis[2];
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  int64_t idx[4];
  float w[4];
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    if (!p.channels_last) {  // r = ((n c) d) h, the row runs along W
      const int64_t nc = r / (aD.out * aH.out), d = r / aH.out % aD.out, h = r % aH.out;
      upsample_taps<float>(p.mode, false, aD, d, idx, w);
      const int64_t sd = idx[0];
      upsample_taps<float>(p.mode, false, aH, h, idx, w);
      const E* line = src + ((nc * aD.in + sd) * aH.in + idx[0]) * aW.in;
      E* out = dst + r * aW.out;
      for (int64_t o = lane; o < aW.out; o += 32) {
        upsample_taps<float>(p.mode, false, aW, o, idx, w);
        out[o] = line[idx[0]];
      }
    } else {  // r = ((n d) h) w, the row runs along C
      const int64_t n = r / (aD.out * aH.out * aW.out), d = r / (aH.out * aW.out) % aD.out, h = r / aW.out % aH.out,
                    x = r % aW.out;
      upsample_taps<float>(p.mode, false, aD, d, idx, w);
      const int64_t sd = idx[0];
      upsample_taps<float>(p.mode, false, aH, h, idx, w);
      const int64_t sh = idx[0];
      upsample_taps<float>(p.mode, false, aW, x, idx, w);
      const E* px = src + (((n * aD.in + sd) * aH.in + sh) * aW.in + idx[0]) * p.c;
      E* out = dst + r * p.c;
      for (int64_t c = lane; c < p.c; c += 32) out[c] = px[c];
    }
  }
}

}  // namespace

// Both tensors index in 32 bits (with room for the grid stride's overshoot).
bool fits_u32(const UpsampleParams& p) {
  const int64_t in = p.n * p.c * p.axis[0].in * p.axis[1].in * p.axis[2].in;
  const int64_t out = p.n * p.c * p.axis[0].out * p.axis[1].out * p.axis[2].out;
  return in < (int64_t{1} << 31) && out < (int64_t{1} << 31);
}

void upsample(const UpsampleParams& p) {
  const int64_t total = p.n * p.c * p.axis[0].out * p.axis[1].out * p.axis[2].out;
  if (total == 0) return;
  KernelLaunch launch(p.dst);
  if (p.mode == UpsampleMode::Nearest || p.mode == UpsampleMode::NearestExact) {
    const int64_t rows = total / (p.channels_last ? p.c : p.axis[2].out);
    dispatch_element_size(element_size(p.dtype), "[upsample]", [&](auto e) {
      upsample_nearest_rows_kernel<typename decltype(e)::type>
          <<<launch.blocks(rows * 32), kThreads, 0, launch.stream()>>>(p, rows);  // a warp per row
    });
    launch.check("[upsample]");
    return;
  }
  dispatch_upsample(p, "[upsample]", [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    if (fits_u32(p))
      upsample_kernel<T, Acc, uint32_t><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, static_cast<uint32_t>(total));
    else
      upsample_kernel<T, Acc, int64_t><<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, total);
  });
  launch.check("[upsample]");
}

void upsample_backward(const UpsampleParams& p) {
  const int64_t total = p.n * p.c * p.axis[0].in * p.axis[1].in * p.axis[2].in;
  if (total == 0) return;
  KernelLaunch launch(p.dst);
  dispatch_upsample(p, "[upsample_backward]", [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    const UpsampleAxis &aD = p.axis[0], &aH = p.axis[1], &aW = p.axis[2];
    const int64_t ins = aD.in + aH.in + aW.in;
    // The tables: lo (int64), w (Acc) and count (int32), in that order for alignment.
    const size_t lo_bytes = static_cast<size_t>(ins) * sizeof(int64_t);
    const size_t w_bytes = static_cast<size_t>(ins) * kTableTaps * sizeof(Acc);
    allocator::Scratch tables(launch.device(), lo_bytes + w_bytes + static_cast<size_t>(ins) * sizeof(int32_t),
                              launch.stream());
    char* base = static_cast<char*>(tables.get());
    AxisTable<Acc> tab{reinterpret_cast<int64_t*>(base), reinterpret_cast<int32_t*>(base + lo_bytes + w_bytes),
                       reinterpret_cast<Acc*>(base + lo_bytes), ins};
    upsample_tables_kernel<Acc><<<launch.blocks(ins), kThreads, 0, launch.stream()>>>(
        p, const_cast<int64_t*>(tab.lo), const_cast<int32_t*>(tab.count), const_cast<Acc*>(tab.w));
    auto run = [&](auto index) {
      using I = decltype(index);
      BackwardDivs<I> dv;
      if (!p.channels_last) {
        using Div = cuda_device::IndexDiv<I>;
        dv.d0 = Div(aW.in), dv.d1 = Div(aH.in), dv.d2 = Div(aD.in);
      } else {
        using Div = cuda_device::IndexDiv<I>;
        dv.d0 = Div(p.c), dv.d1 = Div(aW.in), dv.d2 = Div(aH.in), dv.d3 = Div(aD.in);
      }
      if (p.mode == UpsampleMode::Nearest || p.mode == UpsampleMode::NearestExact)
        upsample_backward_kernel<T, Acc, I, true>
            <<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, tab, dv, static_cast<I>(total));
      else
        upsample_backward_kernel<T, Acc, I, false>
            <<<launch.blocks(total), kThreads, 0, launch.stream()>>>(p, tab, dv, static_cast<I>(total));
    };
    if (fits_u32(p)) run(uint32_t{});
    else run(int64_t{});
  });
  launch.check("[upsample_backward]");
}

}  // namespace anvil::cuda_backend
