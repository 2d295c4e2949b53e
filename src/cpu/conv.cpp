// CPU im2col / col2im (core/kernels/conv.h). im2col copies runs of each output row (unit-stride
// runs become memcpy); col2im adds columns back channel by channel (channels-first: each thread
// owns whole channels, so the sum order is fixed) or input position by position (channels-last:
// each input element gathers its taps in tap order). Nothing is accumulated atomically.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/kernels/conv.h"
#include "cpu/loop.h"

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

// col is [P, C * K]: per output position, per group, K runs of Cg channels.
template <typename T>
void im2col_channels_last(const Im2colParams& p, const T* x, T* col) {
  const ConvGeometry& g = p.geo;
  const ConvAxis &a0 = g.axis[0], &a1 = g.axis[1], &a2 = g.axis[2];
  const int64_t k = conv_taps(g), C = g.channels, cg = C / g.groups;
  const int64_t P = (g.row_end - g.row_begin) * a1.out * a2.out;
#pragma omp parallel for schedule(static) if (C * k * P >= kParallelGrain)
  for (int64_t pos = 0; pos < P; ++pos) {
    const int64_t o2 = pos % a2.out, o1 = pos / a2.out % a1.out, o0 = g.row_begin + pos / (a2.out * a1.out);
    T* row = col + pos * C * k;
    for (int64_t tap = 0; tap < k; ++tap) {
      const int64_t i0 = o0 * a0.stride - a0.pad + tap / (a1.kernel * a2.kernel) * a0.dilation;
      const int64_t i1 = o1 * a1.stride - a1.pad + tap / a2.kernel % a1.kernel * a1.dilation;
      const int64_t i2 = o2 * a2.stride - a2.pad + tap % a2.kernel * a2.dilation;
      const bool inside = i0 >= 0 && i0 < a0.in && i1 >= 0 && i1 < a1.in && i2 >= 0 && i2 < a2.in;
      const T* src = inside ? x + ((i0 * a1.in + i1) * a2.in + i2) * C : nullptr;
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        T* dst = row + grp * k * cg + tap * cg;
        if (inside) std::memcpy(dst, src + grp * cg, static_cast<size_t>(cg) * sizeof(T));
        else std::fill(dst, dst + cg, T(0));
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

}  // namespace

// The CPU has no kernel of its own for a whole pass yet: every pass is the im2col composition.
FusedPlan conv_direct_plan(const ConvDirectParams&) { return FusedPlan::Composed; }
void conv_direct(const ConvDirectParams&) { throw DeviceError("[conv] the CPU backend runs every pass as im2col + GEMM"); }

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
