// CPU im2col / col2im (core/kernels/conv.h). im2col copies runs of each output row (unit-stride
// runs become memcpy); col2im adds columns back channel by channel (channels-first: each thread
// owns whole channels, so the sum order is fixed) or input position by position (channels-last:
// each input element gathers its taps in tap order). Nothing is accumulated atomically.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "anvil/conv.h"
#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/conv.h"
#include "cpu/loop.h"
#include "cpu/simd.h"

namespace anvil::cpu {
namespace {

// The output indices [lo, hi) of axis a whose tap t reads inside the input.
struct OutRange {
  int64_t lo, hi;
};
OutRange valid_outputs(const ConvAxis& a, int64_t t) {
  const int64_t off = t * a.dilation - a.pad;  // input index = o * stride + off
  int64_t lo = off >= 0 ? 0 : (-off + a.stride - 1) / a.stride;
  int64_t hi = a.in - off <= 0 ? 0 : (a.in - off - 1) / a.stride + 1;
  hi = std::min(hi, a.out);
  return {std::min(lo, hi), hi};
}

// col is [C * K, P]: one row per (channel, tap), each row P = rows x out1 x out2 outputs.
template <typename T>
void im2col_channels_first(const Im2colParams& p, const T* x, T* col) {
  const ConvGeometry& g = p.geo;
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const int64_t k = conv_taps(g), rows = g.row_end - g.row_begin, plane = a1.out * a2.out, P = rows * plane;
  const int64_t in_plane = a0.in * a1.in * a2.in;
#pragma omp parallel for schedule(static) if (g.channels * k * P >= kParallelGrain)
  for (int64_t r = 0; r < g.channels * k; ++r) {
    const int64_t c = r / k, tap = r % k;
    const int64_t t0 = tap / (a1.kernel * a2.kernel), t1 = tap / a2.kernel % a1.kernel, t2 = tap % a2.kernel;
    const T* xc = x + c * in_plane;
    T* out = col + r * P;
    if (plane == 1 && a1.in == 1 && a2.in == 1) {  // 1-d: one run along axis 0 (a copy per element was 18 % of a
      // [1, 512, 64] k7 float32 conv). A tap whose inner offsets fall outside the extent-1 axes
      // (a 3-wide kernel over a width-1 image with padding 1) reads only padding: a zero row.
      if (t1 * a1.dilation != a1.pad || t2 * a2.dilation != a2.pad) {
        std::fill(out, out + rows, T(0));
        continue;
      }
      const OutRange v0 = valid_outputs(a0, t0);
      const int64_t lo = std::clamp(v0.lo, g.row_begin, g.row_end), hi = std::clamp(v0.hi, lo, g.row_end);
      const T* src = xc + t0 * a0.dilation - a0.pad;  // index o0 * stride
      std::fill(out, out + (lo - g.row_begin), T(0));
      if (a0.stride == 1) std::memcpy(out + (lo - g.row_begin), src + lo, static_cast<size_t>(hi - lo) * sizeof(T));
      else
        for (int64_t o0 = lo; o0 < hi; ++o0) out[o0 - g.row_begin] = src[o0 * a0.stride];
      std::fill(out + (hi - g.row_begin), out + rows, T(0));
      continue;
    }
    const OutRange v2 = valid_outputs(a2, t2);
    for (int64_t o0 = g.row_begin; o0 < g.row_end; ++o0) {
      const int64_t i0 = o0 * a0.stride - a0.pad + t0 * a0.dilation;
      for (int64_t o1 = 0; o1 < a1.out; ++o1) {
        const int64_t i1 = o1 * a1.stride - a1.pad + t1 * a1.dilation;
        T* dst = out + ((o0 - g.row_begin) * a1.out + o1) * a2.out;
        if (i0 < 0 || i0 >= a0.in || i1 < 0 || i1 >= a1.in) {
          std::fill(dst, dst + a2.out, T(0));
          continue;
        }
        const T* src = xc + (i0 * a1.in + i1) * a2.in + t2 * a2.dilation - a2.pad;  // index o2 * stride
        std::fill(dst, dst + v2.lo, T(0));
        if (a2.stride == 1) std::memcpy(dst + v2.lo, src + v2.lo, static_cast<size_t>(v2.hi - v2.lo) * sizeof(T));
        else
          for (int64_t o2 = v2.lo; o2 < v2.hi; ++o2) dst[o2] = src[o2 * a2.stride];
        std::fill(dst + v2.hi, dst + a2.out, T(0));
      }
    }
  }
}

// col is [P, C * K]: per output position, per group, K runs of Cg channels. Each thread walks
// its positions with carried (o0, o1, o2) counters and a table of the taps' offsets: divisions
// per element made a one-channel conv over 2^31 samples spend 60 s here.
template <typename T>
void im2col_channels_last(const Im2colParams& p, const T* x, T* col) {
  const ConvGeometry& g = p.geo;
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const int64_t k = conv_taps(g), C = g.channels, cg = C / g.groups;
  const int64_t P = (g.row_end - g.row_begin) * a1.out * a2.out;
  std::vector<std::array<int64_t, 3>> taps(static_cast<size_t>(k));
  for (int64_t tap = 0; tap < k; ++tap)
    taps[static_cast<size_t>(tap)] = {tap / (a1.kernel * a2.kernel) * a0.dilation,
                                      tap / a2.kernel % a1.kernel * a1.dilation, tap % a2.kernel * a2.dilation};
  auto copy = [cg](T* dst, const T* src) {
    if (cg == 1) *dst = src ? *src : T(0);
    else if (src) std::memcpy(dst, src, static_cast<size_t>(cg) * sizeof(T));
    else std::fill(dst, dst + cg, T(0));
  };
  const bool par = C * k * P >= kParallelGrain;
#pragma omp parallel if (par)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t p0 = P * t / nt, p1 = P * (t + 1) / nt;
    int64_t o2 = p0 % a2.out, o1 = p0 / a2.out % a1.out, o0 = g.row_begin + p0 / (a2.out * a1.out);
    for (int64_t pos = p0; pos < p1; ++pos) {
      T* row = col + pos * C * k;
      const int64_t b0 = o0 * a0.stride - a0.pad, b1 = o1 * a1.stride - a1.pad, b2 = o2 * a2.stride - a2.pad;
      for (int64_t tap = 0; tap < k; ++tap) {
        const auto& d = taps[static_cast<size_t>(tap)];
        const int64_t i0 = b0 + d[0], i1 = b1 + d[1], i2 = b2 + d[2];
        const bool inside = i0 >= 0 && i0 < a0.in && i1 >= 0 && i1 < a1.in && i2 >= 0 && i2 < a2.in;
        const T* src = inside ? x + ((i0 * a1.in + i1) * a2.in + i2) * C : nullptr;
        for (int64_t grp = 0; grp < g.groups; ++grp) copy(row + grp * k * cg + tap * cg, src ? src + grp * cg : nullptr);
      }
      if (++o2 == a2.out) {
        o2 = 0;
        if (++o1 == a1.out) {
          o1 = 0;
          ++o0;
        }
      }
    }
  }
}

template <typename T>
void col2im_channels_first(const Col2imParams& p, const T* col, T* x) {
  const ConvGeometry& g = p.geo;
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const int64_t k = conv_taps(g), P = (g.row_end - g.row_begin) * a1.out * a2.out;
  const int64_t in_plane = a0.in * a1.in * a2.in;
#pragma omp parallel for schedule(static) if (g.channels * k * P >= kParallelGrain)
  for (int64_t c = 0; c < g.channels; ++c) {
    T* xc = x + c * in_plane;
    for (int64_t tap = 0; tap < k; ++tap) {
      const int64_t t0 = tap / (a1.kernel * a2.kernel), t1 = tap / a2.kernel % a1.kernel, t2 = tap % a2.kernel;
      const T* src = col + (c * k + tap) * P;
      const OutRange v2 = valid_outputs(a2, t2);
      for (int64_t o0 = g.row_begin; o0 < g.row_end; ++o0) {
        const int64_t i0 = o0 * a0.stride - a0.pad + t0 * a0.dilation;
        if (i0 < 0 || i0 >= a0.in) continue;
        for (int64_t o1 = 0; o1 < a1.out; ++o1) {
          const int64_t i1 = o1 * a1.stride - a1.pad + t1 * a1.dilation;
          if (i1 < 0 || i1 >= a1.in) continue;
          const T* s = src + ((o0 - g.row_begin) * a1.out + o1) * a2.out;
          T* d = xc + (i0 * a1.in + i1) * a2.in + t2 * a2.dilation - a2.pad;
          for (int64_t o2 = v2.lo; o2 < v2.hi; ++o2) d[o2 * a2.stride] += s[o2];
        }
      }
    }
  }
}

template <typename T>
void col2im_channels_last(const Col2imParams& p, const T* col, T* x) {
  const ConvGeometry& g = p.geo;
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const int64_t k = conv_taps(g), C = g.channels, cg = C / g.groups;
  const ConvInputRange r0 = conv_input_range(a0, g.row_begin, g.row_end);
  const int64_t n_in = (r0.last - r0.first) * a1.in * a2.in;
#pragma omp parallel for schedule(static) if (n_in * C * k >= kParallelGrain)
  for (int64_t q = 0; q < n_in; ++q) {
    const int64_t i2 = q % a2.in, i1 = q / a2.in % a1.in, i0 = r0.first + q / (a2.in * a1.in);
    T* dst = x + ((i0 * a1.in + i1) * a2.in + i2) * C;
    conv_taps_reading(a0, i0, g.row_begin, g.row_end, [&](int64_t t0, int64_t o0) {
      conv_taps_reading(a1, i1, 0, a1.out, [&](int64_t t1, int64_t o1) {
        conv_taps_reading(a2, i2, 0, a2.out, [&](int64_t t2, int64_t o2) {
          const int64_t tap = (t0 * a1.kernel + t1) * a2.kernel + t2;
          const T* src = col + (((o0 - g.row_begin) * a1.out + o1) * a2.out + o2) * C * k + tap * cg;
          for (int64_t grp = 0; grp < g.groups; ++grp)
            for (int64_t c = 0; c < cg; ++c) dst[grp * cg + c] += src[grp * k * cg + c];
        });
      });
    });
  }
}

// Calls f(t0, t1, i0, i1) for the taps of the first two axes whose input index falls inside the
// input for output (o0, o1), in ascending tap order.
template <typename F>
void taps_inside(const ConvAxis& a0, const ConvAxis& a1, int64_t o0, int64_t o1, F&& f) {
  for (int64_t t0 = 0; t0 < a0.kernel; ++t0) {
    const int64_t i0 = o0 * a0.stride - a0.pad + t0 * a0.dilation;
    if (i0 < 0 || i0 >= a0.in) continue;
    for (int64_t t1 = 0; t1 < a1.kernel; ++t1) {
      const int64_t i1 = o1 * a1.stride - a1.pad + t1 * a1.dilation;
      if (i1 >= 0 && i1 < a1.in) f(t0, t1, i0, i1);
    }
  }
}

// y [N, C, out] = depthwise conv of x [N, C, in] with w [C, 1, k] (+ bias), in Acc, one
// rounding. Channels-first: each (n, c) plane is widened into a zero-padded Acc copy once, then
// every output row is a run of taps over it (unit stride vectorises). Channels-last: each output
// position sums its taps over contiguous channel vectors.
template <typename T, typename Acc>
void depthwise_forward_kernel(const ConvDirectParams& p, const T* x, const T* w, T* y, const T* bias, bool flip) {
  // The conv's axes moved last (the leading ones of extent 1), so the innermost loop runs along
  // the longest run: a 1-d conv's length.
  ConvAxis ax[3];
  for (int i = 0; i < p.spatial; ++i) ax[3 - p.spatial + i] = p.axis[i];
  const ConvAxis &a0 = ax[0], &a1 = ax[1], &a2 = ax[2];
  const int64_t C = p.c_in, k = a0.kernel * a1.kernel * a2.kernel;
  const int64_t in_plane = a0.in * a1.in * a2.in, out_plane = a0.out * a1.out * a2.out;
  std::vector<Acc> wt(static_cast<size_t>(C * k));  // [tap][c]
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < k; ++t) wt[static_cast<size_t>(t * C + c)] = static_cast<Acc>(w[c * k + (flip ? k - 1 - t : t)]);
  auto b_of = [&](int64_t c) { return bias ? static_cast<Acc>(bias[c]) : Acc(0); };
  if (!p.channels_last) {
    // The last axis in tiles of up to 4096 outputs, each with its window of input (a plane-sized
    // copy per thread took 17 GB for two channels of 2^30 samples); the same sums in the same
    // order either way.
    const int64_t e0 = a0.in + 2 * a0.pad, e1 = a1.in + 2 * a1.pad;
    const int64_t tile = std::min<int64_t>(a2.out, 4096), tiles = (a2.out + tile - 1) / tile;
    const int64_t win = (tile - 1) * a2.stride + (a2.kernel - 1) * a2.dilation + 1;
#pragma omp parallel if (p.n * C * out_plane * k >= kParallelGrain)
    {
      std::vector<Acc> xp(static_cast<size_t>(e0 * e1 * win)), row(static_cast<size_t>(tile));
      std::vector<int64_t> taps_off(static_cast<size_t>(a2.kernel));
      std::vector<float> taps_w(static_cast<size_t>(a2.kernel));
#pragma omp for schedule(static)
      for (int64_t task = 0; task < p.n * C * tiles; ++task) {
        const int64_t plane = task / tiles, o2a = task % tiles * tile, w2 = std::min(tile, a2.out - o2a);
        const int64_t base2 = o2a * a2.stride - a2.pad;  // input index of the window's column 0
        const int64_t j0 = std::clamp<int64_t>(-base2, 0, win), j1 = std::clamp<int64_t>(a2.in - base2, j0, win);
        const int64_t c = plane % C;
        const T* xs = x + plane * in_plane;
        std::fill(xp.begin(), xp.end(), Acc(0));
        for (int64_t i0 = 0; i0 < a0.in; ++i0)
          for (int64_t i1 = 0; i1 < a1.in; ++i1) {
            Acc* d = xp.data() + ((i0 + a0.pad) * e1 + i1 + a1.pad) * win;
            const T* src = xs + (i0 * a1.in + i1) * a2.in;
            if constexpr (std::is_same_v<Acc, float> && !std::is_same_v<T, float>)
              simd::decode_f32(p.dtype, src + base2 + j0, d + j0, j1 - j0);  // 16-bit rows widened by SIMD
            else
              for (int64_t j = j0; j < j1; ++j) d[j] = static_cast<Acc>(src[base2 + j]);
          }
        T* ys = y + plane * out_plane + o2a;
        // One tap row (a 1-d conv) at stride 1: the bias and every tap summed in one SIMD pass,
        // the accumulators in registers (simd::banded_rows; the same sums as the axpys below).
        // bf16 [1, 1536, 512] k4 on 2 Zen 5 threads: 253-400 us as one axpy pass per tap.
        bool one_pass = false;
        if constexpr (std::is_same_v<Acc, float>)
          one_pass = a0.kernel == 1 && a1.kernel == 1 && a2.stride == 1 && a2.kernel <= 16;
        if (one_pass) {
          for (int64_t t2 = 0; t2 < a2.kernel; ++t2) {
            taps_off[static_cast<size_t>(t2)] = t2 * a2.dilation;
            taps_w[static_cast<size_t>(t2)] = static_cast<float>(wt[static_cast<size_t>(t2 * C + c)]);
          }
        }
        for (int64_t o0 = 0; o0 < a0.out; ++o0)
          for (int64_t o1 = 0; o1 < a1.out; ++o1) {
            bool summed = false;
            if constexpr (std::is_same_v<Acc, float>) {
              const float* src = xp.data() + (o0 * a0.stride * e1 + o1 * a1.stride) * win;
              const float one = 1.0f;
              const int64_t begin[2] = {0, 1};
              summed = one_pass && simd::banded_rows(&src, win, &one, begin, 1, true, 1, taps_off.data(), taps_w.data(),
                                                     static_cast<int>(a2.kernel), b_of(c), row.data(), w2, 0, w2);
            }
            if (!summed) std::fill(row.begin(), row.begin() + w2, b_of(c));
            for (int64_t t0 = 0; t0 < a0.kernel && !summed; ++t0)
              for (int64_t t1 = 0; t1 < a1.kernel; ++t1) {
                const Acc* src = xp.data() + ((o0 * a0.stride + t0 * a0.dilation) * e1 + o1 * a1.stride + t1 * a1.dilation) * win;
                for (int64_t t2 = 0; t2 < a2.kernel; ++t2) {
                  const Acc wv = wt[static_cast<size_t>(((t0 * a1.kernel + t1) * a2.kernel + t2) * C + c)];
                  const Acc* s2 = src + t2 * a2.dilation;
                  if constexpr (std::is_same_v<Acc, float>) {
                    if (a2.stride == 1) {  // SIMD (GCC's loop is the x86-64 baseline's SSE2)
                      simd::axpy(wv, s2, row.data(), w2);
                      continue;
                    }
                  }
                  if (a2.stride == 1)
                    for (int64_t o2 = 0; o2 < w2; ++o2) row[static_cast<size_t>(o2)] += wv * s2[o2];
                  else
                    for (int64_t o2 = 0; o2 < w2; ++o2) row[static_cast<size_t>(o2)] += wv * s2[o2 * a2.stride];
                }
              }
            T* d = ys + (o0 * a1.out + o1) * a2.out;
            if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>)
              simd::encode_f32(p.dtype, row.data(), d, w2);  // the scalar rounding, vectorised
            else
              for (int64_t o2 = 0; o2 < w2; ++o2) d[o2] = T(row[static_cast<size_t>(o2)]);
          }
      }
    }
    return;
  }
  // Channels-last: a thread per output row (n, o0, o1); the row's positions whose W taps all lie
  // inside (the interior) in one SIMD call that keeps several positions' accumulators in
  // registers and loads each weight vector once for them, the border positions one by one.
  // Every position sums its taps inside the input in ascending order, each product and sum
  // rounded: the scalar loop's bits. bf16 [1, 256, 56, 56] 3 x 3 on 2 Zen 5 threads: 554-631 us
  // as GCC's SSE2 loop (this file is built for the x86-64 baseline), 393-585 with a SIMD call
  // per tap, 263 with one per position, 233-268 with one per row; widening the input rows to
  // float32 once (no widening per tap) measured slower, 328-374 (twice the bytes per tap load).
  const int64_t o2_lo = std::clamp<int64_t>((a2.pad + a2.stride - 1) / a2.stride, 0, a2.out);  // first o2 with i2(t2 = 0) >= 0
  const int64_t last_tap = (a2.kernel - 1) * a2.dilation;  // interior o2: i2 of the last tap < in
  const int64_t o2_hi = std::max(o2_lo, std::min(a2.out, a2.in - 1 + a2.pad - last_tap >= 0
                                                             ? (a2.in - 1 + a2.pad - last_tap) / a2.stride + 1
                                                             : int64_t{0}));
  std::vector<Acc> b_vec(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) b_vec[static_cast<size_t>(c)] = b_of(c);
#pragma omp parallel if (p.n * C * out_plane * k >= kParallelGrain)
  {
    std::vector<Acc> acc(static_cast<size_t>(C));
    std::vector<const void*> x_rows(static_cast<size_t>(k)), groups;
    std::vector<const Acc*> w_rows(static_cast<size_t>(k));
    // The taps of positions [q0, q0 + count) (o2 = q0.. of row (n, o0, o1)), all inside along W
    // when count > 1, from the bias to the rounded output d[(o2 - q0) * C + c].
    auto sum_taps = [&](int64_t n, int64_t o0, int64_t o1, int64_t q0, int64_t count, T* d) {
      int64_t nt = 0;  // the taps inside the input, ascending
      taps_inside(a0, a1, o0, o1, [&](int64_t t0, int64_t t1, int64_t i0, int64_t i1) {
        for (int64_t t2 = 0; t2 < a2.kernel; ++t2) {
          const int64_t i2 = q0 * a2.stride - a2.pad + t2 * a2.dilation;
          if (i2 < 0 || i2 >= a2.in) continue;
          x_rows[static_cast<size_t>(nt)] = x + (n * in_plane + (i0 * a1.in + i1) * a2.in + i2) * C;
          w_rows[static_cast<size_t>(nt++)] = wt.data() + ((t0 * a1.kernel + t1) * a2.kernel + t2) * C;
        }
      });
      const int64_t step = a2.stride * C;
      if constexpr (std::is_same_v<Acc, float>) {
        const float* init = bias ? b_vec.data() : nullptr;
        // stride and dilation 1 along W: the window's taps of a group share their input loads
        // (bf16 [1, 256, 56, 56] 3 x 3: 205-232 us with every tap loading its own)
        if (count > 1 && a2.stride == 1 && a2.dilation == 1 && nt % a2.kernel == 0) {
          groups.clear();
          for (int64_t t = 0; t < nt; t += a2.kernel) groups.push_back(x_rows[static_cast<size_t>(t)]);
          if (simd::mul_add_window(p.dtype, w_rows.data(), groups.data(), nt / a2.kernel, a2.kernel, count, init, d, C))
            return;
        }
        if (simd::mul_add_taps(p.dtype, w_rows.data(), x_rows.data(), nt, count, step, init, d, C)) return;
      }
      for (int64_t q = 0; q < count; ++q) {
        std::copy(b_vec.begin(), b_vec.end(), acc.begin());
        for (int64_t t = 0; t < nt; ++t) {
          const T* src = static_cast<const T*>(x_rows[static_cast<size_t>(t)]) + q * step;
          const Acc* wv = w_rows[static_cast<size_t>(t)];
          for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += wv[c] * static_cast<Acc>(src[c]);
        }
        if constexpr (std::is_same_v<T, Half>) simd::encode_f32(p.dtype, acc.data(), d + q * C, C);  // the scalar rounding, vectorised
        else
          for (int64_t c = 0; c < C; ++c) d[q * C + c] = T(acc[static_cast<size_t>(c)]);
      }
    };
#pragma omp for schedule(static)
    for (int64_t row = 0; row < p.n * a0.out * a1.out; ++row) {
      const int64_t n = row / (a0.out * a1.out), o0 = row / a1.out % a0.out, o1 = row % a1.out;
      T* d = y + row * a2.out * C;
      for (int64_t o2 = 0; o2 < o2_lo; ++o2) sum_taps(n, o0, o1, o2, 1, d + o2 * C);
      if (o2_hi > o2_lo) sum_taps(n, o0, o1, o2_lo, o2_hi - o2_lo, d + o2_lo * C);
      for (int64_t o2 = o2_hi; o2 < a2.out; ++o2) sum_taps(n, o0, o1, o2, 1, d + o2 * C);
    }
  }
}

// gw [C, 1, k] = the sum over the batch and the output positions of gy [N, C, out] times x [N,
// C, in] at each tap, channels-first, in Acc, one rounding per weight: a channel's sums in one
// thread in a fixed order (batch, then positions row by row, a tap's row run as one loop).
template <typename T, typename Acc>
void depthwise_weight_grad_kernel(const ConvDirectParams& p, const T* x, const T* gy, T* gw) {
  ConvAxis ax[3];
  for (int i = 0; i < p.spatial; ++i) ax[3 - p.spatial + i] = p.axis[i];
  const ConvAxis &a0 = ax[0], &a1 = ax[1], &a2 = ax[2];
  const int64_t C = p.c_in, k = a0.kernel * a1.kernel * a2.kernel;
  const int64_t in_plane = a0.in * a1.in * a2.in, out_plane = a0.out * a1.out * a2.out;
#pragma omp parallel if (p.n * C * out_plane * k >= kParallelGrain)
  {
    std::vector<Acc> xs(static_cast<size_t>(a2.in)), gs(static_cast<size_t>(a2.out)), acc(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t n = 0; n < p.n; ++n) {
        const T* xp = x + (n * C + c) * in_plane;
        const T* gp = gy + (n * C + c) * out_plane;
        for (int64_t o0 = 0; o0 < a0.out; ++o0)
          for (int64_t o1 = 0; o1 < a1.out; ++o1) {
            const T* g = gp + (o0 * a1.out + o1) * a2.out;
            for (int64_t o2 = 0; o2 < a2.out; ++o2) gs[static_cast<size_t>(o2)] = static_cast<Acc>(g[o2]);
            taps_inside(a0, a1, o0, o1, [&](int64_t t0, int64_t t1, int64_t i0, int64_t i1) {
              const T* r = xp + (i0 * a1.in + i1) * a2.in;
              for (int64_t i2 = 0; i2 < a2.in; ++i2) xs[static_cast<size_t>(i2)] = static_cast<Acc>(r[i2]);
              for (int64_t t2 = 0; t2 < a2.kernel; ++t2) {
                // Outputs o2 in [lo, hi) read x inside the row: o2 s - p + t2 d in [0, in).
                const int64_t off = t2 * a2.dilation - a2.pad;
                const int64_t lo = off >= 0 ? 0 : (-off + a2.stride - 1) / a2.stride;
                const int64_t hi = std::min(a2.out, a2.in - off <= 0 ? int64_t{0} : (a2.in - off - 1) / a2.stride + 1);
                Acc sum = Acc(0);
                for (int64_t o2 = lo; o2 < hi; ++o2)
                  sum += gs[static_cast<size_t>(o2)] * xs[static_cast<size_t>(o2 * a2.stride + off)];
                acc[static_cast<size_t>((t0 * a1.kernel + t1) * a2.kernel + t2)] += sum;
              }
            });
          }
      }
      for (int64_t t = 0; t < k; ++t) gw[c * k + t] = T(acc[static_cast<size_t>(t)]);
    }
  }
}

// ---- bfloat16 dense convolutions as implicit GEMMs ----------------------------------------
// Channels-first, one group (ops/conv.cpp's shifted GEMMs, without a GEMM per tap, and with
// strides): split the zero-padded input (E = in + 2 pad per axis) into its stride phases (phase
// r of an axis of stride s holds padded positions r, r + s, ..., E' = ceil(E / s) of them), so
// the padded position o s + t d that output o's tap t reads is index o + (t d) / s of phase
// (t d) % s. Index a chunk's outputs by the phase extents, m = (o0 E1' + o1) E2' + o2
// (positions with o1 >= out1 or o2 >= out2 are junk, computed and dropped): then every (channel,
// tap) reads one contiguous run of its phase image, starting at ((t0 d0 / s0) E1' + t1 d1 / s1)
// E2' + t2 d2 / s2. y [Co, M] = W [Co, C K] B with B's row c K + t that run: one AVX512-BF16
// pair GEMM whose column panels are packed straight from the phase images (no columns written
// or read back: 2 x 25 MB per Wan decoder conv), each panel's float32 results rounded into y (+
// bias) while still in cache. The input grad (every stride 1) runs as the forward of the
// adjoint kernel.

// The channels each tap's run holds in the forward a pass runs as: c_in, or for the input grad
// (the adjoint's forward over grad_output) c_out.
int64_t tap_channels(const ConvDirectParams& p) { return p.pass == ConvPass::Forward ? p.c_in : p.c_out; }

// The geometry the implicit GEMMs take: any stride forward and weight grad, the input grad with
// every stride 1 and pad at most (k - 1) x dilation (the adjoint's forward); not pointwise (a
// plain GEMM operand for the caller).
bool implicit_gemm_axes(const ConvDirectParams& p) {
  bool pointwise = true;  // read as a plain GEMM operand by the caller, no padding needed
  for (int i = 0; i < p.spatial; ++i) {
    const ConvAxis& a = p.axis[i];
    if (a.stride < 1 || a.pad < 0) return false;
    if (p.pass == ConvPass::BackwardInput && (a.stride != 1 || a.pad > (a.kernel - 1) * a.dilation)) return false;
    pointwise &= a.kernel == 1 && a.pad == 0 && a.stride == 1;
  }
  return !pointwise;
}

bool dense_pair_direct(const ConvDirectParams& p) {
  if (p.dtype != kBFloat16 || p.groups != 1 || !simd::bf16_dots_supported()) return false;
  // Channels-last: the forward and the stride-1 input grad when the channel runs of their taps
  // pair up (an even count of the channels read); the weight grad.
  if (p.channels_last && p.pass != ConvPass::BackwardWeight && tap_channels(p) % 2 != 0) return false;
  return implicit_gemm_axes(p);
}

// float32 channels-last convolutions of one group: the position GEMMs of the bfloat16 ones
// (dense_forward_rows, dense_weight_grad_channels_last) with fused multiply-adds. Intel Xeon VM
// with AVX-512 (2026-12-05), 2 threads, [4, 64, 56, 56] 3x3: OpenBLAS's shifted GEMMs (one per
// tap) took 4.5 / 4.5 / 8.5 ms (forward / input grad / weight grad), these 3.1 / 3.1 / 3.8, where
// PyTorch's oneDNN takes 2.7 / 2.7 / 2.7 (docs/PERFORMANCE.md, session 29).
// Where it wins there: a GEMM of 32 columns or more (the forward's and weight grad's c_out, the
// input grad's c_in: a 3-channel conv_out ran 16.2 -> 23.5 ms on a 32-column panel) and weights
// of at most 1 MiB (the packed B every row block runs over stays in L2: [1, 512, 64, 64] 3x3,
// 9.4 MB, ran 70.8 -> 92.1 ms; [1, 128, 256, 256], 0.6 MB, 77.6 -> 78.4 forward and 105 -> 93
// weight grad).
bool dense_f32_direct(const ConvDirectParams& p) {
  if (p.dtype != kFloat32 || p.groups != 1 || !p.channels_last || !simd::f32_row_gemm_supported()) return false;
  const int64_t taps = p.axis[0].kernel * p.axis[1].kernel * p.axis[2].kernel;
  const int64_t columns = p.pass == ConvPass::BackwardInput ? p.c_in : p.c_out;
  constexpr int64_t kMaxWeightBytes = int64_t{1} << 20;
  if (columns < simd::kPairPanel || taps * p.c_in * p.c_out * 4 > kMaxWeightBytes) return false;
  return implicit_gemm_axes(p);
}

// The calling thread's scratch buffer `slot` of at least n elements, kept between calls: a fresh
// vector of several MiB per conv was mmap'd, page-faulted and zeroed by the kernel every call
// (8 % of a Wan2.1 bf16 decode in clear_page).
template <typename T, int slot>
T* scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// The bias (bfloat16 or float32) of `count` channels in float32 (zeros without one).
std::vector<float> float_bias(const ConvDirectParams& p, int64_t count) {
  std::vector<float> b(static_cast<size_t>(count), 0.f);
  if (p.has_bias)
    for (int64_t c = 0; c < count; ++c)
      b[static_cast<size_t>(c)] = p.dtype == kFloat32 ? static_cast<const float*>(p.bias)[c]
                                                      : static_cast<float>(static_cast<const BFloat16*>(p.bias)[c]);
  return b;
}

// The GEMM of an element type: bfloat16 bits by pair products, float32 by fused multiply-adds.
bool row_gemm(const simd::RowGemm<uint16_t>& g) { return simd::bf16_pair_gemm(g); }
bool row_gemm(const simd::RowGemm<float>& g) { return simd::f32_row_gemm(g); }

// A conv's axes as the row-wise kernels take them: a 2-d conv as (H, 1, W), so chunks of rows run
// along H and inner runs along W (as (H, W, 1) every copy and output run was one element long);
// 1-d and 3-d as they are.
void row_axes(const ConvDirectParams& p, ConvAxis (&ax)[3]) {
  for (int i = 0; i < 3; ++i) ax[i] = p.axis[i];
  if (p.spatial == 2) {
    ax[1] = ConvAxis{};
    ax[2] = p.axis[1];
  }
}

// gw [Co, kc] from its transpose acc [kc, Co] (float32 sums), in gw's element type.
template <typename T>
void store_transposed(const float* acc, int64_t kc, int64_t Co, T* gw) {
#pragma omp parallel for schedule(static) if (kc * Co >= kParallelGrain)
  for (int64_t co = 0; co < Co; ++co)
    for (int64_t q = 0; q < kc; ++q) gw[co * kc + q] = T(acc[q * Co + co]);
}

// The phase images of a channels-first forward problem's input (C channels), a chunk of output
// rows at a time, and the run every (channel, tap) reads in them.
struct PhaseImages {
  ConvAxis ax[3];
  int64_t C = 0, K = 0, e1 = 0, e2 = 0, halo = 0, phases = 0, rows = 0;
  std::vector<int64_t> tap_phase, tap_off;  // per tap: its phase, its run's start in the image
  // [C, phases, rows + halo, E1', E2'] (the thread's scratch)
  uint16_t* xp = nullptr;

  // out_bytes: what the caller keeps per output position of a chunk besides the images (the
  // weight grad's transposed gy), counted in the chunk's bound too.
  PhaseImages(const ConvDirectParams& p, int64_t channels, int64_t out_bytes = 0)
      : C(channels) {
    row_axes(p, ax);
    const ConvAxis &a0 = ax[0], &a1 = ax[1], &a2 = ax[2];
    K = a0.kernel * a1.kernel * a2.kernel;
    auto phase_extent = [](const ConvAxis& a) { return (a.in + 2 * a.pad + a.stride - 1) / a.stride; };
    e1 = phase_extent(a1);
    e2 = phase_extent(a2);
    halo = (a0.kernel - 1) * a0.dilation / a0.stride;
    phases = a0.stride * a1.stride * a2.stride;
    tap_phase.resize(static_cast<size_t>(K));
    tap_off.resize(static_cast<size_t>(K));
    for (int64_t t = 0; t < K; ++t) {
      const int64_t d0 = t / (a1.kernel * a2.kernel) * a0.dilation, d1 = t / a2.kernel % a1.kernel * a1.dilation,
                    d2 = t % a2.kernel * a2.dilation;
      tap_phase[static_cast<size_t>(t)] = (d0 % a0.stride * a1.stride + d1 % a1.stride) * a2.stride + d2 % a2.stride;
      tap_off[static_cast<size_t>(t)] = (d0 / a0.stride * e1 + d1 / a1.stride) * e2 + d2 / a2.stride;
    }
    // Output rows per chunk: the images (and out_bytes per position) within
    // conv_workspace_limit where a row allows (at least one row and its halo).
    const int64_t row_bytes = (C * phases * static_cast<int64_t>(sizeof(uint16_t)) + out_bytes) * e1 * e2;
    rows = std::clamp<int64_t>(conv_workspace_limit(Device(kCPU)) / row_bytes - halo, 1, a0.out);
    xp = scratch<uint16_t, 0>(C * phases * (rows + halo) * e1 * e2);
  }

  // Output position m of a chunk (o0 E1' + o1) E2' + o2 as (o0, o1, o2).
  std::array<int64_t, 3> position(int64_t m) const { return {m / (e1 * e2), m / e2 % e1, m % e2}; }
  // Positions from m on (at o1, o2) that are real outputs with consecutive output offsets, up to
  // `end`: 0 at a junk position (then skip(o1, o2) positions reach the next real one).
  int64_t real_run(int64_t o1, int64_t o2, int64_t left) const {
    if (o1 >= ax[1].out || o2 >= ax[2].out) return 0;
    // A run goes on into the next row where an axis has no junk (a 1-d conv's whole panel).
    const int64_t run = ax[2].out < e2 ? ax[2].out - o2 : ax[1].out < e1 ? (ax[1].out - o1) * e2 - o2 : left;
    return std::min(run, left);
  }
  int64_t skip(int64_t o1, int64_t o2) const { return o1 >= ax[1].out ? (e1 - o1) * e2 - o2 : e2 - o2; }

  // Fills the images of batch element n's output rows [r0, r0 + nr) from x [N, C, in] and points
  // runs[c K + t] at its runs; returns M, the chunk's GEMM extent (up to its last real output:
  // no run reads past its image).
  int64_t fill(const uint16_t* x, int64_t n, int64_t r0, int64_t nr, const uint16_t** runs) {
    const ConvAxis &a0 = ax[0], &a1 = ax[1], &a2 = ax[2];
    const int64_t slab = nr + halo, plane = slab * e1 * e2, in_plane = a0.in * a1.in * a2.in;
#pragma omp parallel for schedule(static) if (C * phases * plane >= kParallelGrain)
    for (int64_t cp = 0; cp < C * phases; ++cp) {  // phase image (c, ph): [slab, E1', E2']
      const int64_t c = cp / phases, ph = cp % phases;
      const int64_t q0 = ph / (a1.stride * a2.stride), q1 = ph / a2.stride % a1.stride, q2 = ph % a2.stride;
      uint16_t* d = xp + cp * plane;
      const uint16_t* src = x + (n * C + c) * in_plane;
      const auto [j1_lo, j1_hi] = inside(a1, q1, e1);
      const auto [j2_lo, j2_hi] = inside(a2, q2, e2);
      if (j1_lo == j1_hi || j2_lo == j2_hi) {  // a phase of padding only
        std::fill(d, d + plane, uint16_t{0});
        continue;
      }
      if (e1 * e2 == 1) {  // one position across axes 1, 2 (a 1-d conv): the run is along axis 0
        const auto [j0_lo, j0_hi] = inside(a0, r0 * a0.stride + q0, slab);
        const int64_t inner = a1.in * a2.in, step = a0.stride * inner;
        const uint16_t* s0 = src + (q1 - a1.pad) * a2.in + q2 - a2.pad + (r0 * a0.stride + q0 - a0.pad) * inner;
        zero_outside(d, slab, j0_lo, j0_hi, 1);
        if (step == 1) std::memcpy(d + j0_lo, s0 + j0_lo, static_cast<size_t>(j0_hi - j0_lo) * sizeof(uint16_t));
        else
          for (int64_t j0 = j0_lo; j0 < j0_hi; ++j0) d[j0] = s0[j0 * step];
        continue;
      }
      for (int64_t j0 = 0; j0 < slab; ++j0) {
        const int64_t i0 = (r0 + j0) * a0.stride + q0 - a0.pad;
        uint16_t* d0 = d + j0 * e1 * e2;
        if (i0 < 0 || i0 >= a0.in) {
          std::fill(d0, d0 + e1 * e2, uint16_t{0});
          continue;
        }
        zero_outside(d0, e1, j1_lo, j1_hi, e2);
        for (int64_t j1 = j1_lo; j1 < j1_hi; ++j1) {
          const int64_t i1 = j1 * a1.stride + q1 - a1.pad;
          const uint16_t* s_row = src + (i0 * a1.in + i1) * a2.in + q2 - a2.pad;  // input index j2 s2 + q2 - pad2
          uint16_t* d_row = d0 + j1 * e2;
          zero_outside(d_row, e2, j2_lo, j2_hi, 1);
          if (a2.stride == 1) std::memcpy(d_row + j2_lo, s_row + j2_lo, static_cast<size_t>(j2_hi - j2_lo) * sizeof(uint16_t));
          else
            for (int64_t j2 = j2_lo; j2 < j2_hi; ++j2) d_row[j2] = s_row[j2 * a2.stride];
        }
      }
    }
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < K; ++t)
        runs[c * K + t] = xp + (c * phases + tap_phase[static_cast<size_t>(t)]) * plane + tap_off[static_cast<size_t>(t)];
    return ((nr - 1) * e1 + a1.out - 1) * e2 + a2.out;
  }

  // Zeros positions [0, lo) and [hi, count) of a run of `count` positions of `size` elements each
  // (the padding around the copied input: the images are written once, not zeroed first).
  static void zero_outside(uint16_t* d, int64_t count, int64_t lo, int64_t hi, int64_t size) {
    std::fill(d, d + lo * size, uint16_t{0});
    std::fill(d + hi * size, d + count * size, uint16_t{0});
  }

  // Phase index j of axis a holds input index j s + q - pad: the range of j with it inside [0, in),
  // clamped to [0, j_end).
  static std::pair<int64_t, int64_t> inside(const ConvAxis& a, int64_t q, int64_t j_end) {
    const int64_t off = q - a.pad;
    const int64_t lo = off >= 0 ? 0 : (-off + a.stride - 1) / a.stride;
    const int64_t hi = a.in - off <= 0 ? 0 : (a.in - off - 1) / a.stride + 1;
    return {std::min(lo, j_end), std::clamp(hi, std::min(lo, j_end), j_end)};
  }
};

// A channels-last conv's GEMM operand without images: tap t of output position m (the real
// outputs of a chunk of rows along axis 0, in order) reads the C contiguous channels of one input
// position, or padding: runs[m K + t] points at them, or at C zeros. (Phase images copied the
// input into a zero-padded buffer first and computed the junk positions between their rows:
// bf16 [4, 64, 56, 56] 3x3 input grad, Zen 5, 2 threads, 2.62-2.74 ms that way, 2.45 this way.)
template <typename T>
struct TapRuns {
  ConvAxis ax[3];
  int64_t C = 0, K = 0, plane = 0, rows = 0;  // plane: positions per row of axis 0
  std::vector<T> zeros;

  // per_position: the bytes the caller keeps per output position of a chunk besides the K run
  // pointers, counted in the chunk's bound (conv_workspace_limit) too.
  TapRuns(const ConvDirectParams& p, int64_t channels, int64_t per_position)
      : C(channels), zeros(static_cast<size_t>(channels), 0) {
    row_axes(p, ax);
    K = ax[0].kernel * ax[1].kernel * ax[2].kernel;
    plane = ax[1].out * ax[2].out;
    const int64_t row_bytes = (K * static_cast<int64_t>(sizeof(void*)) + per_position) * plane;
    rows = std::clamp<int64_t>(conv_workspace_limit(Device(kCPU)) / row_bytes, 1, ax[0].out);
  }

  // Input positions per batch element.
  int64_t input_plane() const { return ax[0].in * ax[1].in * ax[2].in; }

  // The input rows along axis 0 that output rows [r0, r0 + nr) read: [lo, hi).
  std::pair<int64_t, int64_t> input_rows(int64_t r0, int64_t nr) const {
    const ConvAxis& a = ax[0];
    const int64_t lo = r0 * a.stride - a.pad, hi = (r0 + nr - 1) * a.stride + (a.kernel - 1) * a.dilation - a.pad + 1;
    return {std::clamp<int64_t>(lo, 0, a.in), std::clamp<int64_t>(hi, 0, a.in)};
  }

  // Points runs[m K + t] for output rows [r0, r0 + nr) into one batch element's input [in..., C]
  // whose rows along axis 0 start at row `lo` at xn; returns M, the chunk's positions.
  int64_t fill(const T* xn, int64_t lo, int64_t r0, int64_t nr, const T** runs) const {
    const ConvAxis &a0 = ax[0], &a1 = ax[1], &a2 = ax[2];
    // The input index of output o's tap t along axis a, or -1 in the padding.
    auto at = [](const ConvAxis& a, int64_t o, int64_t t) {
      const int64_t i = o * a.stride + t * a.dilation - a.pad;
      return i >= 0 && i < a.in ? i : int64_t{-1};
    };
#pragma omp parallel for schedule(static) if (nr * plane * K >= kParallelGrain)
    for (int64_t r = 0; r < nr * a1.out; ++r) {  // one row (o0, o1) of positions along axis 2
      const int64_t o0 = r0 + r / a1.out, o1 = r % a1.out;
      const T** out = runs + r * a2.out * K;
      for (int64_t t0 = 0; t0 < a0.kernel; ++t0) {
        const int64_t i0 = at(a0, o0, t0);
        for (int64_t t1 = 0; t1 < a1.kernel; ++t1) {
          const int64_t i1 = i0 < 0 ? -1 : at(a1, o1, t1);
          const int64_t t = (t0 * a1.kernel + t1) * a2.kernel;
          const T* row = i1 < 0 ? nullptr : xn + ((i0 - lo) * a1.in + i1) * a2.in * C;
          for (int64_t t2 = 0; t2 < a2.kernel; ++t2)
            for (int64_t o2 = 0; o2 < a2.out; ++o2) {
              const int64_t i2 = o2 * a2.stride + t2 * a2.dilation - a2.pad;
              out[o2 * K + t + t2] = row && i2 >= 0 && i2 < a2.in ? row + i2 * C : zeros.data();
            }
        }
      }
    }
    return nr * plane;
  }
};

// Forward (and the stride-1 input grad as the adjoint's forward): y [Co, M] = W [Co, C K] B, B's
// rows the runs.
void dense_pair_forward(const ConvDirectParams& given) {
  const bool flip = given.pass == ConvPass::BackwardInput;
  const ConvDirectParams p = flip ? input_grad_as_forward(given) : given;
  const int64_t C = flip ? given.c_out : given.c_in, Co = flip ? given.c_in : given.c_out;
  PhaseImages im(p, C);
  const int64_t K = im.K, kc = C * K;
  const int64_t out1 = im.ax[1].out, out2 = im.ax[2].out, out_plane = im.ax[0].out * out1 * out2;
  const auto* w = static_cast<const uint16_t*>(p.w);
  auto* y = static_cast<BFloat16*>(p.y);
  // A [Co, C K], column c K + t. The input grad's adjoint kernel: w [C, Co, K] (the forward's
  // [c_out, c_in, K]) with channels swapped and taps reversed.
  std::vector<uint16_t> wf;
  const uint16_t* A = w;
  if (flip) {
    wf.resize(static_cast<size_t>(Co * kc));
    for (int64_t co = 0; co < Co; ++co)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < K; ++t) wf[static_cast<size_t>(co * kc + c * K + t)] = w[(c * Co + co) * K + K - 1 - t];
    A = wf.data();
  }
  std::vector<const uint16_t*> a_rows(static_cast<size_t>(Co)), b_rows(static_cast<size_t>(kc));
  for (int64_t co = 0; co < Co; ++co) a_rows[static_cast<size_t>(co)] = A + co * kc;
  const std::vector<float> bias = float_bias(p, Co);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t r0 = 0; r0 < im.ax[0].out; r0 += im.rows) {
      const int64_t nr = std::min(im.rows, im.ax[0].out - r0);
      BFloat16* y_chunk = y + n * Co * out_plane + r0 * out1 * out2;
      const int64_t M = im.fill(static_cast<const uint16_t*>(p.x), n, r0, nr, b_rows.data());
      auto emit = [&](int64_t j0, int64_t width, float* tile) {  // the panel's real outputs, run by run
        for (int64_t j = 0; j < width;) {
          const auto [o0, o1, o2] = im.position(j0 + j);
          const int64_t len = im.real_run(o1, o2, width - j);
          if (len == 0) {
            j += im.skip(o1, o2);
            continue;
          }
          const int64_t dst = (o0 * out1 + o1) * out2 + o2;
          for (int64_t co = 0; co < Co; ++co) {
            float* v = tile + co * simd::kPairPanel + j;
            if (p.has_bias)
              for (int64_t i = 0; i < len; ++i) v[i] += bias[static_cast<size_t>(co)];
            simd::encode_f32(kBFloat16, v, y_chunk + co * out_plane + dst, len);
          }
          j += len;
        }
      };
      simd::bf16_pair_gemm({.a_rows = a_rows.data(), .b_rows = b_rows.data(), .m = Co, .n = M, .k = kc, .emit = emit});
    }
}

// The zero-padded input grid of a stride-1 conv, which the AMX paths read in place: a 2-d conv
// as (H, 1, W); extent in + 2 pad = out + (k - 1) d per axis, a row along axis 0 holding g
// positions. Output position m of the grid reads tap t at grid position m + offsets[t]; the
// grid's positions that are no output (the ends of rows past the output's width, the pad rows)
// are computed alongside and dropped. Chunks stack whole images while their grids
// (`per_position` bytes each) fit conv_workspace_limit (one chunk of ResNet's [4, 64, 56, 56]
// weight grad took 1.5 of its four images' ms), else take rows of one image with their halo.
struct PaddedGrid {
  ConvAxis ax[3];
  int64_t P1 = 1, P2 = 1, g = 1, K = 1, halo = 0, images = 1, rows = 1;
  std::vector<int64_t> offsets;

  PaddedGrid(const ConvDirectParams& p, int64_t per_position) {
    row_axes(p, ax);
    P1 = ax[1].in + 2 * ax[1].pad;
    P2 = ax[2].in + 2 * ax[2].pad;
    g = P1 * P2;
    K = ax[0].kernel * ax[1].kernel * ax[2].kernel;
    halo = (ax[0].kernel - 1) * ax[0].dilation;
    offsets.resize(static_cast<size_t>(K));
    for (int64_t t = 0; t < K; ++t)
      offsets[static_cast<size_t>(t)] = (t / (ax[1].kernel * ax[2].kernel) * ax[0].dilation * P1 +
                                         t / ax[2].kernel % ax[1].kernel * ax[1].dilation) * P2 +
                                        t % ax[2].kernel * ax[2].dilation;
    const int64_t budget = conv_workspace_limit(Device(kCPU)) / (g * per_position);  // rows of g positions
    images = std::clamp<int64_t>(budget / (ax[0].out + halo), 1, p.n);
    rows = images > 1 ? ax[0].out : std::clamp<int64_t>(budget - halo, 1, ax[0].out);
  }

  static bool stride_one(const ConvDirectParams& p) {
    for (int i = 0; i < p.spatial; ++i)
      if (p.axis[i].stride != 1) return false;
    return true;
  }

  // One chunk: images [n0, n0 + ni), output rows [r0, r0 + nr) of each, slot = nr + halo grid
  // rows per image; positions: the GEMM's extent (whole 32-position blocks).
  struct Chunk {
    int64_t n0, ni, r0, nr, slot, positions;
  };
  template <typename F>
  void for_each_chunk(int64_t n, F&& f) const {
    for (int64_t n0 = 0; n0 < n; n0 += images)
      for (int64_t r0 = 0; r0 < ax[0].out; r0 += rows) {
        Chunk c{n0, std::min(images, n - n0), r0, std::min(rows, ax[0].out - r0), 0, 0};
        c.slot = c.nr + halo;
        c.positions = (((c.ni - 1) * c.slot + c.nr) * g + 31) / 32 * 32;
        f(c);
      }
  }

  // Grid position m of chunk c as (image, o0, o1, o2) within it; real: an output position.
  std::array<int64_t, 4> decode(const Chunk& c, int64_t m) const {
    return {m / (c.slot * g), m / g % c.slot, m / P2 % P1, m % P2};
  }
  bool real(const Chunk& c, const std::array<int64_t, 4>& q) const {
    return q[0] < c.ni && q[1] < c.nr && q[2] < ax[1].out && q[3] < ax[2].out;
  }
};

// B's kc rows (b_rows, Co columns each) in panels of 32 columns as the AMX tap GEMMs read them,
// in the thread's scratch.
const uint16_t* pack_tap_panels(const uint16_t* const* b_rows, int64_t kc, int64_t Co) {
  const int64_t panels = (Co + simd::kPairPanel - 1) / simd::kPairPanel;
  uint16_t* bp = scratch<uint16_t, 2>(panels * kc / 2 * 64);
#pragma omp parallel for schedule(static) if (kc * Co >= kParallelGrain)
  for (int64_t j = 0; j < panels; ++j)
    simd::pack_pairs(b_rows, 1, 0, kc, j * simd::kPairPanel, std::min<int64_t>(simd::kPairPanel, Co - j * simd::kPairPanel),
                     bp + j * kc / 2 * 64);
  return bp;
}

// A channels-last bfloat16 forward (or stride-1 input grad as its adjoint's forward) on AMX tiles
// reading x in place (simd::bf16_amx_row_tap_gemm): a GEMM row per output row along the innermost
// axis, each tap's input row by pointer (null where it falls in the padding), so no padded copy of
// the input and no grid positions computed only to be dropped (FLUX VAE [1, 32, 512, 512] 3x3, AMX
// VM: 5.2 -> 3.5 ms; on the grid its copy was 14 % of the conv, bias and rounding in two passes
// 29 %). Rows shorter than their 16-position tiles by more than kMaxWaste fall back (stride 1: to
// the grid; else the position GEMM). b_rows: B's kc rows (tap-major).
bool amx_forward_rows(const ConvDirectParams& p, int64_t C, int64_t Co, const uint16_t* const* b_rows,
                      const std::vector<float>& bias) {
  if (!p.channels_last || !simd::amx_bf16_supported() || !simd::bf16_dots_supported() || C % 32 != 0) return false;
  const int s = p.spatial;
  const ConvAxis& inner = p.axis[s - 1];
  constexpr double kMaxWaste = 0.15;
  if (static_cast<double>((inner.out + 15) / 16 * 16) > (1 + kMaxWaste) * static_cast<double>(inner.out)) return false;
  int64_t K = 1, outer_out = 1, outer_in = 1;
  for (int i = 0; i < s; ++i) K *= p.axis[i].kernel;
  for (int i = 0; i < s - 1; ++i) {
    outer_out *= p.axis[i].out;
    outer_in *= p.axis[i].in;
  }
  const int64_t rows = p.n * outer_out;
  std::vector<int64_t> shift(static_cast<size_t>(K));
  for (int64_t t = 0; t < K; ++t) shift[static_cast<size_t>(t)] = t % inner.kernel * inner.dilation - inner.pad;
  const auto* x = static_cast<const uint16_t*>(p.x);
  auto* y = static_cast<uint16_t*>(p.y);
  std::vector<const uint16_t*> a_rows(static_cast<size_t>(rows * K));
  std::vector<uint16_t*> y_rows(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    y_rows[static_cast<size_t>(r)] = y + r * inner.out * Co;
    const int64_t n = r / outer_out;
    for (int64_t t = 0; t < K; ++t) {
      // Outer coordinates, last outer axis fastest, for the output row and the tap.
      int64_t o = r % outer_out, k = t / inner.kernel, in_row = 0, scale = 1;
      bool inside = true;
      for (int i = s - 2; i >= 0; --i) {
        const ConvAxis& a = p.axis[i];
        const int64_t c = o % a.out * a.stride + k % a.kernel * a.dilation - a.pad;
        inside = inside && c >= 0 && c < a.in;
        in_row += c * scale;
        scale *= a.in;
        o /= a.out;
        k /= a.kernel;
      }
      a_rows[static_cast<size_t>(r * K + t)] = inside ? x + (n * outer_in + in_row) * inner.in * C : nullptr;
    }
  }
  const uint16_t* bp = pack_tap_panels(b_rows, K * C, Co);
  return simd::bf16_amx_row_tap_gemm({.a_rows = a_rows.data(), .ldx = C, .in_width = inner.in, .stride = inner.stride,
                                      .shift = shift.data(), .rows = rows, .width = inner.out, .taps = K,
                                      .channels = C, .co = Co, .bp = bp, .bias = p.has_bias ? bias.data() : nullptr,
                                      .y_rows = y_rows.data(), .ldy = Co});
}

// A stride-1 bfloat16 forward (or input grad as its adjoint's forward) on AMX tiles over a
// zero-padded copy of the input (channels-first inputs, and channels-last ones whose rows are too
// short for amx_forward_rows): simd::bf16_amx_row_tap_gemm with the grid as one row, output
// position m reading tap t at grid position m + offset(t), so each tap's A tile is 16
// consecutive grid positions loaded in place, never gathered; the grid's positions that are no
// output (the ends of rows past the output's width, the pad rows) are computed and dropped. p: the
// forward it runs; b_rows: B's kc rows (tap-major, c_out columns each); C a multiple of 32.
bool amx_forward_grid(const ConvDirectParams& p, int64_t C, int64_t Co, const uint16_t* const* b_rows,
                      const std::vector<float>& bias) {
  if (!simd::amx_bf16_supported() || !simd::bf16_dots_supported() || C % 32 != 0 || !PaddedGrid::stride_one(p))
    return false;
  const bool cf = !p.channels_last;  // channels-first x and y: transposed into the grid and out of it
  const PaddedGrid pg(p, C * 2);
  const ConvAxis* ax = pg.ax;
  const int64_t P1 = pg.P1, P2 = pg.P2, kc = pg.K * C, off_max = pg.offsets.back();
  const int64_t out1 = ax[1].out, out2 = ax[2].out, out_plane = ax[0].out * out1 * out2;
  const int64_t in_plane = ax[0].in * ax[1].in * ax[2].in;
  const uint16_t* bp = pack_tap_panels(b_rows, kc, Co);
  const auto* x = static_cast<const uint16_t*>(p.x);
  auto* y = static_cast<uint16_t*>(p.y);
  pg.for_each_chunk(p.n, [&](const PaddedGrid::Chunk& ch) {
    const int64_t ni = ch.ni, r0 = ch.r0, n0 = ch.n0, slot = ch.slot, positions = ch.positions;
    const int64_t grid_positions = positions + off_max + 32;  // the last block's reads
    uint16_t* grid = scratch<uint16_t, 0>(grid_positions * C);
    // Grid rows along axis 2 (P2 positions each): the input row between its pads, or zeros.
    const int64_t grid_rows = (grid_positions + P2 - 1) / P2;
#pragma omp parallel for schedule(static) if (grid_positions * C >= kParallelGrain)
    for (int64_t r = 0; r < grid_rows; ++r) {
      uint16_t* d = grid + r * P2 * C;
      const int64_t count = std::min(P2, grid_positions - r * P2);
      const int64_t i = r / (slot * P1), j0 = r / P1 % slot, j1 = r % P1;
      const int64_t i0 = r0 + j0 - ax[0].pad, i1 = j1 - ax[1].pad;
      if (i >= ni || i0 < 0 || i0 >= ax[0].in || i1 < 0 || i1 >= ax[1].in || count < P2) {
        std::fill(d, d + count * C, uint16_t{0});
        continue;
      }
      std::fill(d, d + ax[2].pad * C, uint16_t{0});
      const int64_t row = (i0 * ax[1].in + i1) * ax[2].in;
      if (cf) simd::transpose_u16(x + (n0 + i) * C * in_plane + row, in_plane, d + ax[2].pad * C, C, C, ax[2].in);
      else std::memcpy(d + ax[2].pad * C, x + ((n0 + i) * in_plane + row) * C, static_cast<size_t>(ax[2].in * C) * 2);
      std::fill(d + (ax[2].pad + ax[2].in) * C, d + P2 * C, uint16_t{0});
    }
    // The group's rows in runs of real outputs (consecutive in y), bias added in place.
    auto rows_done = [&](int64_t m0, int64_t count, float* c, int64_t ldc) {
      for (int64_t m = m0; m < m0 + count;) {
        const auto [i, o0, o1, o2] = pg.decode(ch, m);
        const bool real = pg.real(ch, {i, o0, o1, o2});
        const int64_t len = std::min(real ? out2 - o2 : P2 - o2, m0 + count - m);
        if (real) {  // bias and rounding in one call (a call per position: FLUX [1, 32, 512, 512] 10.4 vs 8.3 ms)
          const float* v = c + (m - m0) * ldc;
          const float* b = p.has_bias ? bias.data() : nullptr;
          const int64_t pos = ((r0 + o0) * out1 + o1) * out2 + o2;
          if (cf) {  // rounded into [len, Co], then transposed into y
            thread_local std::vector<uint16_t> block;
            block.resize(static_cast<size_t>(len * Co));
            simd::bias_rows_to_bf16(v, ldc, b, block.data(), Co, len, Co);
            simd::transpose_u16(block.data(), Co, y + (n0 + i) * Co * out_plane + pos, out_plane, len, Co);
          } else {
            simd::bias_rows_to_bf16(v, ldc, b, y + ((n0 + i) * out_plane + pos) * Co, Co, len, Co);
          }
        }
        m += len;
      }
    };
    // The grid as one row every tap reads in place at its offset (all inside the grid).
    const std::vector<const uint16_t*> a_rows(static_cast<size_t>(pg.K), grid);
    simd::bf16_amx_row_tap_gemm({.a_rows = a_rows.data(), .ldx = C, .in_width = grid_positions, .shift = pg.offsets.data(),
                                 .rows = 1, .width = positions, .taps = pg.K, .channels = C, .co = Co, .bp = bp,
                                 .rows_done = rows_done});
  });
  return true;
}

// Forward by positions: y [M, Co] = A [M, K C] W^T, A's row m the K runs of C channels its taps
// read (a segmented pair GEMM over TapRuns), W [Co, K, C] as B [K C, Co]; float32 results in the
// thread's scratch, rounded (+ bias) into y a block of rows at a time. No layout conversions for
// channels-last tensors (they cost 1.3 of 4.6 ms in the SD decoder conv [1, 128, 64, 64] k3, Zen
// 5). A channels-first input is transposed into channels-last slabs a chunk of rows at a time and
// y's blocks are stored transposed: with few output channels the channels-first GEMM repacked its
// B panel (the input's runs) for every Co rows of A (FLUX VAE [1, 32, 512, 512] 3x3 bf16, 2
// threads: 22.9 ms that way, 45 % of it packing). The stride-1 input grad runs as the adjoint's
// forward.
template <typename T>
void dense_forward_rows(const ConvDirectParams& given) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;  // else float32, channels-last only
  const bool flip = given.pass == ConvPass::BackwardInput;
  const ConvDirectParams p = flip ? input_grad_as_forward(given) : given;
  const int64_t C = flip ? given.c_out : given.c_in, Co = flip ? given.c_in : given.c_out;
  const bool cf = !p.channels_last;
  // Per position besides the run pointers: bfloat16's float32 results (and a channels-first
  // input's slab: about C elements per input position, stride positions per output position along
  // axis 0); float32 results go straight to y.
  const TapRuns<T> tr(p, C, kBf16 ? Co * static_cast<int64_t>(sizeof(float)) + (cf ? C * 2 * p.axis[0].stride : 0) : 0);
  const int64_t K = tr.K, kc = C * K;
  const ConvAxis &a0 = tr.ax[0], &a1 = tr.ax[1], &a2 = tr.ax[2];
  const int64_t in_row = a1.in * a2.in, in_plane = tr.input_plane();
  const auto* w = static_cast<const T*>(p.w);
  // B [K C, Co], row t C + c, from the weight in x's layout ([Co, K, C] channels-last, [Co, C, K]
  // channels-first). The adjoint's: the given weight ([C, K, Co] / [C, Co, K], its c_out first)
  // with the taps reversed. B's rows are given by pointers (b_rows[t C + c]): bfloat16 weights
  // are transposed in 32 x 32 tiles into rows of any order (channels-last adjoint rows point into
  // the weight itself); float32 ones a row at a time. (A scalar gather of every element took 19 %
  // of a Wan2.1 bf16 decode on the AMX VM.) The thread's scratch holds them: a fresh vector of a
  // 512-channel 3x3 conv's 4.7 MB was zeroed and page-faulted every call.
  std::vector<const T*> b_rows(static_cast<size_t>(kc));
  T* wt = scratch<T, 5>(kc * Co);
  if constexpr (kBf16) {
    if (flip && !cf) {  // [C, K, Co]: row (t, c) is the Co contiguous taps-reversed elements
      for (int64_t q = 0; q < kc; ++q) b_rows[static_cast<size_t>(q)] = w + (q % C * K + K - 1 - q / C) * Co;
    } else if (flip) {  // [C, Co, K] -> [C, K, Co] per input channel, row (t, c) at (c K + K - 1 - t)
#pragma omp parallel for schedule(static) if (kc * Co >= kParallelGrain)
      for (int64_t c = 0; c < C; ++c) simd::transpose_u16(w + c * Co * K, K, wt + c * K * Co, Co, Co, K);
      for (int64_t q = 0; q < kc; ++q) b_rows[static_cast<size_t>(q)] = wt + (q % C * K + K - 1 - q / C) * Co;
    } else {  // [Co, kc] -> [kc, Co]: channels-last rows t C + c, channels-first c K + t
      constexpr int64_t kBlock = 256;  // columns per task
#pragma omp parallel for schedule(static) if (kc * Co >= kParallelGrain)
      for (int64_t q0 = 0; q0 < kc; q0 += kBlock)
        simd::transpose_u16(w + q0, kc, wt + q0 * Co, Co, Co, std::min(kBlock, kc - q0));
      for (int64_t q = 0; q < kc; ++q)
        b_rows[static_cast<size_t>(q)] = wt + (cf ? q % C * K + q / C : q) * Co;
    }
  } else {
#pragma omp parallel for schedule(static) if (kc * Co >= kParallelGrain)
    for (int64_t q = 0; q < kc; ++q) {
      const int64_t t = q / C, c = q % C;
      for (int64_t co = 0; co < Co; ++co) {
        const int64_t src = flip ? (cf ? (c * Co + co) * K + K - 1 - t : (c * K + K - 1 - t) * Co + co)
                                 : (cf ? (co * C + c) * K + t : (co * K + t) * C + c);
        wt[q * Co + co] = w[src];
      }
    }
    for (int64_t q = 0; q < kc; ++q) b_rows[static_cast<size_t>(q)] = wt + q * Co;
  }
  const std::vector<float> bias = float_bias(p, Co);
  if constexpr (kBf16)
    if (amx_forward_rows(p, C, Co, b_rows.data(), bias) || amx_forward_grid(p, C, Co, b_rows.data(), bias)) return;
  const auto* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const int64_t out_plane = a0.out * tr.plane;
  const T** a_rows = scratch<const T*, 3>(tr.rows * tr.plane * K);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t r0 = 0; r0 < a0.out; r0 += tr.rows) {
      const int64_t nr = std::min(tr.rows, a0.out - r0);
      const T* xn = x + n * in_plane * C;
      int64_t lo = 0;
      if constexpr (kBf16)
        if (cf) {  // the rows this chunk reads, [C, rows, in_row] -> [rows, in_row, C]
          const auto [r_lo, r_hi] = tr.input_rows(r0, nr);
          const int64_t P = (r_hi - r_lo) * in_row;
          uint16_t* slab = scratch<uint16_t, 4>(std::max<int64_t>(P, 1) * C);
          const uint16_t* src = xn + r_lo * in_row;
          constexpr int64_t kBlock = 256;  // positions per task
#pragma omp parallel for schedule(static) if (P * C >= kParallelGrain)
          for (int64_t p0 = 0; p0 < P; p0 += kBlock)
            simd::transpose_u16(src + p0, in_plane, slab + p0 * C, C, C, std::min(kBlock, P - p0));
          xn = slab;
          lo = r_lo;
        }
      const int64_t M = tr.fill(xn, lo, r0, nr, a_rows);
      T* y_chunk = y + (n * out_plane + r0 * tr.plane) * Co;  // channels-last
      float* acc;
      if constexpr (kBf16) acc = scratch<float, 1>(M * Co);
      else acc = y_chunk;
      auto round_rows = [&](int64_t m0, int64_t count) {  // (+ bias) into y, a block of rows at a time
        if (p.has_bias)
          for (int64_t m = m0; m < m0 + count; ++m)
            for (int64_t co = 0; co < Co; ++co) acc[m * Co + co] += bias[static_cast<size_t>(co)];
        if constexpr (kBf16) {
          if (!cf) return simd::encode_f32(kBFloat16, acc + m0 * Co, y_chunk + m0 * Co, count * Co);
          thread_local std::vector<uint16_t> block;  // the rows rounded, [count, Co], then stored transposed
          block.resize(static_cast<size_t>(count * Co));
          simd::encode_f32(kBFloat16, acc + m0 * Co, block.data(), count * Co);
          simd::transpose_u16(block.data(), Co, y + n * Co * out_plane + r0 * tr.plane + m0, out_plane, count, Co);
        }
      };
      const simd::RowGemm<T> gemm{.a_rows = a_rows, .b_rows = b_rows.data(), .m = M, .n = Co, .k = kc, .c = acc,
                                  .ldc = Co, .accumulate = false, .emit = {}, .a_segments = K, .rows_done = round_rows};
      // AMX tiles where the CPU has them and every run is whole 32-channel tiles.
      if constexpr (kBf16)
        if (simd::bf16_amx_row_gemm(gemm)) continue;
      row_gemm(gemm);
    }
}

// Weight grad: gw^T [C K, Co] = sum over images and chunks of B [C K, M] (the runs as rows) times
// gy^T [M, Co] (gy transposed into the chunk's positions, zero rows at the junk ones, which
// would otherwise multiply real inputs), in float32 over everything, rounded once.
template <typename T>
void dense_weight_grad_channels_last(const ConvDirectParams& p);

bool amx_weight_grad(const ConvDirectParams& p);

void dense_pair_weight_grad(const ConvDirectParams& p) {
  if (p.channels_last) {
    if (amx_weight_grad(p)) return;
    return dense_weight_grad_channels_last<uint16_t>(p);
  }
  const int64_t C = p.c_in, Co = p.c_out;
  PhaseImages im(p, C, Co * static_cast<int64_t>(sizeof(uint16_t)));
  const int64_t K = im.K, kc = C * K;
  const int64_t out1 = im.ax[1].out, out2 = im.ax[2].out, out_plane = im.ax[0].out * out1 * out2;
  const auto* gy = static_cast<const uint16_t*>(p.y);
  std::vector<const uint16_t*> a_rows(static_cast<size_t>(kc)), b_rows;
  float* acc = scratch<float, 1>(kc * Co);
  bool first = true;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t r0 = 0; r0 < im.ax[0].out; r0 += im.rows) {
      const int64_t nr = std::min(im.rows, im.ax[0].out - r0);
      const int64_t M = im.fill(static_cast<const uint16_t*>(p.x), n, r0, nr, a_rows.data());
      uint16_t* gyt = scratch<uint16_t, 2>(M * Co);
      std::fill(gyt, gyt + M * Co, uint16_t{0});
      b_rows.resize(static_cast<size_t>(M));
      const uint16_t* gy_chunk = gy + n * Co * out_plane + r0 * out1 * out2;
#pragma omp parallel for schedule(static) if (M * Co >= kParallelGrain)
      for (int64_t m = 0; m < M; ++m) {
        b_rows[static_cast<size_t>(m)] = gyt + m * Co;
        const auto [o0, o1, o2] = im.position(m);
        if (o1 >= out1 || o2 >= out2) continue;
        const uint16_t* src = gy_chunk + (o0 * out1 + o1) * out2 + o2;
        for (int64_t co = 0; co < Co; ++co) gyt[m * Co + co] = src[co * out_plane];
      }
      simd::bf16_pair_gemm({.a_rows = a_rows.data(), .b_rows = b_rows.data(), .m = kc, .n = Co, .k = M, .c = acc,
                            .ldc = Co, .accumulate = !first, .emit = {}});
      first = false;
    }
  store_transposed(acc, kc, Co, static_cast<BFloat16*>(p.w));
}

// Channels-last bfloat16 weight grads with every stride 1 on AMX tiles: gw^T [K C, Co] = sum over
// positions of X_t^T gy, where over the zero-padded input grid (an output position m reads tap t
// at grid position m + offset(t)) X_t^T is one transposed copy of the input shifted by the
// tap's offset, read in place as A tiles, and gy is packed in pairs along the grid positions
// (zeros at the grid's positions that are no output: the ends of rows past the output's width,
// the pad rows). Those junk positions multiply real inputs by zero, so an input with an inf or
// NaN takes the exact path (false). 32-channel tiles only: C and Co multiples of 32.
bool all_finite_bf16(const uint16_t* x, int64_t n) {
  uint32_t bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) bad |= (x[i] & 0x7f80u) == 0x7f80u;
  return bad == 0;
}

bool amx_weight_grad(const ConvDirectParams& p) {
  if (!simd::amx_bf16_supported() || !simd::bf16_dots_supported() || !p.channels_last || p.c_in % 32 != 0 ||
      p.c_out % 32 != 0 || !PaddedGrid::stride_one(p))
    return false;
  const int64_t C = p.c_in, Co = p.c_out;
  // Per grid position: the transposed input, the packed gy and its row pointer.
  const PaddedGrid pg(p, 2 * C + 2 * Co + static_cast<int64_t>(sizeof(void*)));
  const ConvAxis* ax = pg.ax;
  const int64_t in_plane = ax[0].in * ax[1].in * ax[2].in, out_plane = ax[0].out * ax[1].out * ax[2].out;
  const int64_t P1 = pg.P1, P2 = pg.P2, K = pg.K, off_max = pg.offsets.back();
  const auto* x = static_cast<const uint16_t*>(p.x);
  if (!all_finite_bf16(x, p.n * in_plane * C)) return false;
  const std::vector<uint16_t> zeros(static_cast<size_t>(Co), 0);
  const auto* gy = static_cast<const uint16_t*>(p.y);
  float* acc = scratch<float, 1>(K * C * Co);
  bool first = true;
  pg.for_each_chunk(p.n, [&](const PaddedGrid::Chunk& ch) {
    const int64_t ni = ch.ni, r0 = ch.r0, n0 = ch.n0, slot = ch.slot, positions = ch.positions;
    const int64_t len = positions + off_max;
    // [C][len]: per image, grid rows r0 .. r0 + nr + halo (input rows from r0 - pad on), zeros around.
    uint16_t* at = scratch<uint16_t, 0>(C * len);
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (int64_t c = 0; c < C; ++c) std::fill(at + c * len, at + (c + 1) * len, uint16_t{0});
#pragma omp for schedule(static)
      for (int64_t r = 0; r < ni * slot * ax[1].in; ++r) {
        const int64_t i = r / (slot * ax[1].in), j0 = r / ax[1].in % slot, i1 = r % ax[1].in;
        const int64_t i0 = r0 + j0 - ax[0].pad;
        if (i0 < 0 || i0 >= ax[0].in) continue;
        const uint16_t* src = x + (((n0 + i) * ax[0].in + i0) * ax[1].in + i1) * ax[2].in * C;
        simd::transpose_u16(src, C, at + ((i * slot + j0) * P1 + i1 + ax[1].pad) * P2 + ax[2].pad, len, ax[2].in, C);
      }
    }
    // gy's row of each grid position, or zeros.
    const uint16_t** gy_rows = scratch<const uint16_t*, 3>(positions);
#pragma omp parallel for schedule(static) if (positions >= kParallelGrain)
    for (int64_t m = 0; m < positions; ++m) {
      const auto q = pg.decode(ch, m);
      gy_rows[m] = pg.real(ch, q)
                       ? gy + ((n0 + q[0]) * out_plane + ((r0 + q[1]) * ax[1].out + q[2]) * ax[2].out + q[3]) * Co
                       : zeros.data();
    }
    const int64_t panels = Co / simd::kPairPanel, kp = positions / 2;
    uint16_t* bp = scratch<uint16_t, 2>(panels * kp * 64);
    constexpr int64_t kSpan = 1024;  // positions per packing task
    const int64_t spans = (positions + kSpan - 1) / kSpan;
#pragma omp parallel for schedule(static) if (positions * Co >= kParallelGrain)
    for (int64_t task = 0; task < panels * spans; ++task) {
      const int64_t panel = task / spans, q0 = task % spans * kSpan;
      simd::pack_pairs(gy_rows + q0, 1, 0, std::min(kSpan, positions - q0), panel * simd::kPairPanel,
                       simd::kPairPanel, bp + (panel * kp + q0 / 2) * 64);
    }
    simd::bf16_amx_shifted_gemm({.at = at, .ld_at = len, .offsets = pg.offsets.data(), .taps = K, .channels = C,
                                 .co = Co, .positions = positions, .bp = bp, .c = acc, .ldc = Co,
                                 .accumulate = !first});
    first = false;
  });
  store_transposed(acc, K * C, Co, static_cast<BFloat16*>(p.w));  // gw [Co, K, C] from gw^T
  return true;
}

// Channels-last weight grad: gw [Co, K C] += gy^T [Co, M] X [M, K C], X's row m the K runs of C
// channels output m's taps read (TapRuns), gy given to the GEMM by its rows (the GEMM packs it in
// pairs, no transposed copy); float32 over everything in gw's own layout [Co, K, C], rounded
// once. Zen 5, 2 threads, bf16 [4, 64, 56, 56] 3x3: a GEMM per tap over a transposed copy of gy
// measured 3.36-3.44 ms; one GEMM for all taps 3.17-3.23; gy by its rows 2.91.
template <typename T>
void dense_weight_grad_channels_last(const ConvDirectParams& p) {
  const int64_t C = p.c_in, Co = p.c_out;
  // Per position besides its run pointers: its gy row pointer (the per-tap GEMMs' one more
  // pointer, tap_rows, is left out of the bound).
  const TapRuns<T> tr(p, C, static_cast<int64_t>(sizeof(void*)));
  const int64_t K = tr.K, kc = C * K;
  const int64_t out_plane = tr.ax[0].out * tr.plane;
  const auto* gy = static_cast<const T*>(p.y);
  std::vector<const T*> gy_rows, tap_rows;
  const T** runs = scratch<const T*, 3>(tr.rows * tr.plane * K);
  constexpr bool kF32 = std::is_same_v<T, float>;
  // bfloat16: gw [Co, K C] in float32, rounded at the end; float32: gw^T [K C, Co], transposed
  // into gw at the end.
  float* acc = scratch<float, 1>(Co * kc);
  bool first = true;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t r0 = 0; r0 < tr.ax[0].out; r0 += tr.rows) {
      const int64_t nr = std::min(tr.rows, tr.ax[0].out - r0);
      const int64_t M = tr.fill(static_cast<const T*>(p.x) + n * tr.input_plane() * C, 0, r0, nr, runs);
      const T* gy_chunk = gy + (n * out_plane + r0 * tr.plane) * Co;
      gy_rows.resize(static_cast<size_t>(M));
      for (int64_t m = 0; m < M; ++m) gy_rows[static_cast<size_t>(m)] = gy_chunk + m * Co;
      if constexpr (kF32) {
        // gw^T [K C, Co] += X^T [K C, M] gy [M, Co]: A (X^T) by its k rows, the K runs of each
        // output position read in place; B's rows gy's (packed two panels per chunk, where X as
        // B was packed a panel per 32 of K C columns: 20 % of the time).
        row_gemm(simd::RowGemm<T>{.a_rows = runs, .b_rows = gy_rows.data(), .m = kc, .n = Co, .k = M, .c = acc,
                                  .ldc = Co, .accumulate = !first, .emit = {}, .a_segments = K, .a_k_major = true});
      } else if (C % simd::kPairPanel == 0) {  // every tap in one GEMM: B's row m the K runs of output m
        row_gemm(simd::RowGemm<T>{.a_rows = gy_rows.data(), .b_rows = runs, .m = Co, .n = kc, .k = M, .c = acc,
                                  .ldc = kc, .accumulate = !first, .emit = {}, .b_segments = K, .a_k_major = true});
      } else {
        tap_rows.resize(static_cast<size_t>(M));
        for (int64_t t = 0; t < K; ++t) {
          for (int64_t m = 0; m < M; ++m) tap_rows[static_cast<size_t>(m)] = runs[m * K + t];
          row_gemm(simd::RowGemm<T>{.a_rows = gy_rows.data(), .b_rows = tap_rows.data(), .m = Co, .n = C, .k = M,
                                    .c = acc + t * C, .ldc = kc, .accumulate = !first, .emit = {}, .a_k_major = true});
        }
      }
      first = false;
    }
  if constexpr (kF32) {
    store_transposed(acc, kc, Co, static_cast<float*>(p.w));
  } else {
    simd::encode_f32(kBFloat16, acc, static_cast<BFloat16*>(p.w), Co * kc);
  }
}

}  // namespace

// ---- channels-first 2-d / 3-d forwards with at most 4 output channels (a VAE's conv_out) ------
// A GEMM of 3 rows spends its time packing B (FLUX conv_out [1, 32, 512, 512] bf16 on the pair
// GEMM: packing and phase images 2 / 3 of 6.5 ms, PyTorch 3.6). Here each output row (along W)
// is a sum of input rows shifted by the taps: the input rows decoded once into float32
// (zero-padded along W, a per-thread ring of the latest (k - 1) d + 1 rows along H for each of
// the latest along D; bfloat16 as interleaved channel pairs on AVX512-BF16 CPUs) and every
// output channel's accumulators kept in registers across all channels and taps
// (simd::conv_row_few / conv_row_pairs; vdpbf16ps reads subnormal bfloat16 inputs as zero, as
// the pair GEMMs do). Rows of at least 32 outputs (the kernels compute whole blocks of 64
// positions on AVX-512) and per-thread rings of at most 8 MiB.

// The axes as (D, H, W): a 2-d conv as depth 1.
void dhw_axes(const ConvDirectParams& p, ConvAxis (&ax)[3]) {
  for (int i = 0; i < 3; ++i) ax[i] = ConvAxis{};
  for (int i = 0; i < p.spatial; ++i) ax[3 - p.spatial + i] = p.axis[i];
}
int64_t window(const ConvAxis& a) { return (a.kernel - 1) * a.dilation + 1; }

bool few_outputs_direct(const ConvDirectParams& p) {
  if (p.pass != ConvPass::Forward || p.channels_last || p.groups != 1 || p.spatial < 2 || p.c_out > 4) return false;
  if (p.dtype != kFloat32 && p.dtype != kBFloat16) return false;
  ConvAxis ax[3];
  dhw_axes(p, ax);
  const int64_t ring_bytes = window(ax[0]) * window(ax[1]) * p.c_in * (ax[2].out + 64 + window(ax[2])) * 4;
  if (ax[2].out < 32 || ring_bytes > (int64_t{8} << 20)) return false;
  bool pointwise = true;
  for (const ConvAxis& a : ax) {
    if (a.stride != 1 || a.pad < 0) return false;
    pointwise &= a.kernel == 1 && a.pad == 0;
  }
  return !pointwise;
}

// R: float (decoded rows, fused multiply-adds) or uint32_t (bfloat16 channel pairs, vdpbf16ps).
template <typename R>
void few_outputs_rows(const ConvDirectParams& p) {
  constexpr bool kPairs = std::is_same_v<R, uint32_t>;
  ConvAxis ax[3];
  dhw_axes(p, ax);
  const ConvAxis a0 = ax[0], a1 = ax[1], a2 = ax[2];
  const int64_t C = p.c_in, Co = p.c_out, B = kPairs ? 64 : simd::conv_row_few_block();
  const int64_t width = (a2.out + B - 1) / B * B, L = width + (a2.kernel - 1) * a2.dilation;
  const int64_t Cr = kPairs ? (C + 1) / 2 : C;  // rows per input row: channels or channel pairs
  const int64_t ring0 = window(a0), ring1 = window(a1), taps01 = a0.kernel * a1.kernel;
  const int64_t nrows = Cr * taps01, K = taps01 * a2.kernel;
  const size_t es = element_size(p.dtype);
  // Weights [Co][Cr * k0 * k1][k2] in the rows' form: the kernel's row r = (c k0 + t0) k1 + t1.
  std::vector<R> w(static_cast<size_t>(Co * nrows * a2.kernel));
  if constexpr (kPairs) {
    const auto* wb = static_cast<const uint16_t*>(p.w);
    for (int64_t co = 0; co < Co; ++co)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < K; ++t)
          w[static_cast<size_t>((co * Cr + c / 2) * K + t)] |= static_cast<uint32_t>(wb[(co * C + c) * K + t])
                                                               << (c % 2 * 16);
  } else {
    simd::decode_f32(p.dtype, p.w, w.data(), static_cast<int64_t>(w.size()));
  }
  const std::vector<float> bias = float_bias(p, Co);
  // Work items: (image, output plane along D, band of output rows along H).
  const int threads = omp_get_max_threads();
  const int64_t planes = p.n * a0.out;
  const int64_t bands = std::max<int64_t>(1, std::min<int64_t>(a1.out, (threads + planes - 1) / planes));
  const int64_t band = (a1.out + bands - 1) / bands;
#pragma omp parallel for schedule(static) if (planes * C * a1.out * a2.out * K >= kParallelGrain)
  for (int64_t item = 0; item < planes * bands; ++item) {
    const int64_t n = item / bands / a0.out, o0 = item / bands % a0.out;
    const int64_t o_begin = item % bands * band, o_end = std::min(a1.out, o_begin + band);
    R* ring_buf = scratch<R, 0>(ring0 * ring1 * Cr * L);
    float* out = scratch<float, 1>(Co * width);
    std::vector<int64_t> held(static_cast<size_t>(ring0 * ring1), -1);  // the input row each slot holds
    std::vector<const R*> rows(static_cast<size_t>(nrows));
    const char* x = static_cast<const char*>(p.x) + static_cast<size_t>(n * C * a0.in * a1.in * a2.in) * es;
    auto x_row = [&](int64_t c, int64_t i0, int64_t i1) {
      return x + static_cast<size_t>(((c * a0.in + i0) * a1.in + i1) * a2.in) * es;
    };
    for (int64_t o1 = o_begin; o1 < o_end; ++o1) {
      for (int64_t t0 = 0; t0 < a0.kernel; ++t0)
        for (int64_t t1 = 0; t1 < a1.kernel; ++t1) {
          const int64_t i0 = o0 - a0.pad + t0 * a0.dilation, i1 = o1 - a1.pad + t1 * a1.dilation;
          const bool inside = i0 >= 0 && i0 < a0.in && i1 >= 0 && i1 < a1.in;
          const int64_t s = inside ? i0 % ring0 * ring1 + i1 % ring1 : 0;
          R* slot = ring_buf + s * Cr * L;
          if (inside && held[static_cast<size_t>(s)] != i0 * a1.in + i1) {
            for (int64_t c = 0; c < Cr; ++c) {
              R* r = slot + c * L;
              std::fill(r, r + a2.pad, R{0});
              if constexpr (kPairs)
                simd::interleave_u16(
                    reinterpret_cast<const uint16_t*>(x_row(2 * c, i0, i1)),
                    2 * c + 1 < C ? reinterpret_cast<const uint16_t*>(x_row(2 * c + 1, i0, i1)) : nullptr,
                    r + a2.pad, a2.in);
              else
                simd::decode_f32(p.dtype, x_row(c, i0, i1), r + a2.pad, a2.in);
              std::fill(r + a2.pad + a2.in, r + L, R{0});
            }
            held[static_cast<size_t>(s)] = i0 * a1.in + i1;
          }
          for (int64_t c = 0; c < Cr; ++c)
            rows[static_cast<size_t>((c * a0.kernel + t0) * a1.kernel + t1)] = inside ? slot + c * L : nullptr;
        }
      if constexpr (kPairs)
        simd::conv_row_pairs(rows.data(), nrows, w.data(), Co, a2.kernel, a2.dilation, a2.out, bias.data(), out, width);
      else
        simd::conv_row_few(rows.data(), nrows, w.data(), Co, a2.kernel, a2.dilation, a2.out, bias.data(), out, width);
      for (int64_t c = 0; c < Co; ++c)
        simd::encode_f32(p.dtype, out + c * width,
                         static_cast<char*>(p.y) +
                             static_cast<size_t>((((n * Co + c) * a0.out + o0) * a1.out + o1) * a2.out) * es,
                         a2.out);
    }
  }
}

void few_outputs_forward(const ConvDirectParams& p) {
  if (p.dtype == kBFloat16 && simd::bf16_dots_supported()) return few_outputs_rows<uint32_t>(p);
  few_outputs_rows<float>(p);
}

// Depthwise convolutions (one input and one output channel per group), which im2col + GEMM runs
// as thousands of tiny GEMMs (Zen 5, 2 threads: [1, 1536, 512] k4 bf16 forward 12 ms, backward
// 13.9 ms that way): the forward in either layout; the input grad with every stride 1 as the
// forward over grad_output with reversed taps and padding (k - 1) d - p (when that is >= 0); the
// weight grad channels-first.
bool depthwise_direct(const ConvDirectParams& p) {
  if (p.groups <= 1 || p.groups != p.c_in || p.c_out != p.c_in) return false;
  switch (p.pass) {
    case ConvPass::Forward: return true;
    case ConvPass::BackwardInput:  // the forward kernel's padded window needs (k - 1) d - p >= 0
      for (int i = 0; i < p.spatial; ++i)
        if (p.axis[i].stride != 1 || p.axis[i].pad > (p.axis[i].kernel - 1) * p.axis[i].dilation) return false;
      return true;
    case ConvPass::BackwardWeight: return !p.channels_last;
  }
  return false;
}

// Channels-first 2-d forwards (and stride-1 input grads) that run by positions through
// channels-last slabs (dense_pair_forward_rows): 32 or 64 output channels, where the channels-first
// GEMM packs a B panel per 4 or 8 blocks of A rows, and the position GEMM's panels are full. Zen
// 5, 2 threads, bf16 3x3 by bench-ops in one run: FLUX VAE [1, 32, 512, 512] 24.6 -> 17.5 ms; kept
// channels-first: the Wan conv3d [1, 32, 4, 92, 162] (4.7 / 4.9 ms, drivers alternated 4.72-4.94
// / 4.96-5.17), the FLUX conv_out's 3 output channels (6.4 -> 15.3 ms by positions), SD
// [1, 128, 64, 64] (3.1 / 3.0), FLUX [1, 128, 128, 128] (12.3 / 12.9) and Whisper's 1-d conv
// (3.4 / 3.8).
// On AMX machines every forward (and stride-1 input grad) whose taps' runs are whole 32-channel
// tiles and whose GEMM has 32 columns or more runs by positions: its GEMM then takes AMX tiles
// (simd::bf16_amx_row_gemm), which the channels-first GEMM does not.
bool rows_first(const ConvDirectParams& p) {
  const int64_t co = p.pass == ConvPass::Forward ? p.c_out : p.c_in;  // the output channels of the forward it runs
  if (p.pass == ConvPass::BackwardWeight) return false;
  if (simd::amx_bf16_supported() && tap_channels(p) % 32 == 0 && co >= 32) return true;
  return p.spatial == 2 && tap_channels(p) % 2 == 0 && (co == 32 || co == 64);
}

FusedPlan conv_direct_plan(const ConvDirectParams& p) {
  return depthwise_direct(p) || few_outputs_direct(p) || dense_pair_direct(p) || dense_f32_direct(p)
             ? FusedPlan::Fused
             : FusedPlan::Composed;
}

void conv_direct(const ConvDirectParams& given) {
  if (few_outputs_direct(given)) return few_outputs_forward(given);
  if (dense_pair_direct(given))
    return given.pass == ConvPass::BackwardWeight ? dense_pair_weight_grad(given)
           : given.channels_last || rows_first(given) ? dense_forward_rows<uint16_t>(given)
                                                        : dense_pair_forward(given);
  if (dense_f32_direct(given))
    return given.pass == ConvPass::BackwardWeight ? dense_weight_grad_channels_last<float>(given)
                                                  : dense_forward_rows<float>(given);
  ANVIL_CHECK(depthwise_direct(given), DeviceError,
              "[conv] the CPU runs only depthwise, (AVX512-BF16) bfloat16 and (AVX-512) channels-last float32 "
              "convolutions directly");
  const bool flip = given.pass == ConvPass::BackwardInput;
  const ConvDirectParams p = flip ? input_grad_as_forward(given) : given;
  dispatch_float_types(p.dtype, "[conv]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (p.pass == ConvPass::BackwardWeight)
      depthwise_weight_grad_kernel<T, Acc>(p, static_cast<const T*>(p.x), static_cast<const T*>(p.y),
                                           static_cast<T*>(p.w));
    else
      depthwise_forward_kernel<T, Acc>(p, static_cast<const T*>(p.x), static_cast<const T*>(p.w), static_cast<T*>(p.y),
                                       static_cast<const T*>(p.has_bias ? p.bias : nullptr), flip);
  });
}

void im2col(const Im2colParams& p) {
  dispatch_element_size(element_size(p.dtype), "[im2col]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(p.x);
    T* col = static_cast<T*>(p.col);
    if (p.geo.channels_last) im2col_channels_last(p, x, col);
    else im2col_channels_first(p, x, col);
  });
}

void col2im(const Col2imParams& p) {
  dispatch_float_types(p.dtype, "[col2im]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* col = static_cast<const T*>(p.col);
      T* x = static_cast<T*>(p.x);
      if (p.geo.channels_last) col2im_channels_last(p, col, x);
      else col2im_channels_first(p, col, x);
    } else {
      throw DTypeError(detail::cat_message("[col2im] sums in float32 or float64, got ", dtype_name(p.dtype)));
    }
  });
}

}  // namespace anvil::cpu
