#pragma once
// Convolution's data movement, forward and backward: im2col (the input's receptive fields as the
// columns of a GEMM operand) and col2im (its adjoint, summing the columns back onto the input).
// The GEMMs themselves are bmm's (core/kernels/matmul.h). Params, the kernel entry points of both
// backends (the backend boundary: core/kernels.h) and the index rule both backends use.
#include "core/kernels.h"

namespace anvil {

// One spatial axis of a convolution: input extent `in`, output extent `out`, kernel extent
// `kernel`; output index o, tap t read input index o * stride - pad + t * dilation (zero outside
// [0, in)). Geometries always hold three axes; a conv1d / conv2d has leading axes of extent 1.
struct ConvAxis {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, pad = 0, dilation = 1;
};

// Input and column layouts for one batch element and one chunk of output rows [row_begin,
// row_end) along axis 0 of the geometry (the conv's outermost spatial axis), P = the chunk's
// output positions (rows x out[1] x out[2]), K = kernel[0] x kernel[1] x kernel[2] taps, C
// channels in `groups` groups of Cg:
//   channels-first  x is [C, in0, in1, in2]; col is [C * K, P] (row c * K + tap)
//   channels-last   x is [in0, in1, in2, C]; col is [P, C * K] (column g * K * Cg + tap * Cg + c
//                   for channel g * Cg + c), so each group's block is a GEMM operand
// im2col writes every column element (zeros where the tap falls in the padding), in x's dtype.
// col2im adds each column element onto the input element it read: x += col2im(col), x and col
// in the accumulation dtype (float32, float64 for float64 data), the same sum order every run.
struct ConvGeometry {
  ConvAxis axis[3];
  int64_t channels = 0, groups = 1;
  bool channels_last = false;
  int64_t row_begin = 0, row_end = 1;
};

struct Im2colParams {
  const void* x = nullptr;
  void* col = nullptr;
  DType dtype = kFloat32;
  ConvGeometry geo;
};

struct Col2imParams {
  const void* col = nullptr;
  void* x = nullptr;
  DType dtype = kFloat32;  // of col and x: float32 or float64
  ConvGeometry geo;
};

ANVIL_HD int64_t conv_taps(const ConvGeometry& g) {
  return g.axis[0].kernel * g.axis[1].kernel * g.axis[2].kernel;
}

// Output rows [o0, o1) of an axis read input indices [first, last) (clipped to the input).
struct ConvInputRange {
  int64_t first, last;
};
ANVIL_HD ConvInputRange conv_input_range(const ConvAxis& a, int64_t o0, int64_t o1) {
  int64_t first = o0 * a.stride - a.pad, last = (o1 - 1) * a.stride - a.pad + (a.kernel - 1) * a.dilation + 1;
  return {first < 0 ? 0 : first, last > a.in ? a.in : last};
}

// The taps t (ascending) of axis a whose output o = (i + pad - t * dilation) / stride reads input
// index i, for outputs in [lo, hi): f(t, o). col2im's gather on both backends.
template <typename F>
ANVIL_HD void conv_taps_reading(const ConvAxis& a, int64_t i, int64_t lo, int64_t hi, F&& f) {
  for (int64_t t = 0; t < a.kernel; ++t) {
    const int64_t num = i + a.pad - t * a.dilation;
    if (num < 0 || num % a.stride) continue;
    const int64_t o = num / a.stride;
    if (o >= lo && o < hi && o < a.out) f(t, o);
  }
}

// One pass of a plain convolution run by a backend's own kernel (cuDNN on CUDA) instead of the
// im2col composition: x [N, c_in, in], w [c_out, c_in / groups, kernel], y [N, c_out, out] over
// `spatial` axes (axis[0..spatial)), all dense in one layout (channels-last or not).
//   Forward         y = conv(x, w)                        reads x, w; writes y
//   BackwardInput   x = the adjoint of conv applied to y  reads y, w; writes x
//   BackwardWeight  w = the sum over N and positions      reads x, y; writes w
// Products accumulate in float32 (float64); bias [c_out] (Forward) or [c_in] (BackwardInput, a
// transposed conv's) when set is added before the one rounding.
enum class ConvPass : int8_t { Forward, BackwardInput, BackwardWeight };
struct ConvDirectParams {
  ConvPass pass = ConvPass::Forward;
  DType dtype = kFloat32;
  int spatial = 2;
  int64_t n = 0, c_in = 0, c_out = 0, groups = 1;
  ConvAxis axis[3];
  bool channels_last = false;
  int device = 0;  // CUDA device index
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;  // a plan query may leave the written tensor null (a fresh allocation)
  const void* bias = nullptr;
  bool has_bias = false;  // plan queries know whether there is a bias before its pointer
};

// Taps per output position (the product of the kernel extents).
inline int64_t conv_taps(const ConvDirectParams& p) {
  int64_t k = 1;
  for (int i = 0; i < p.spatial; ++i) k *= p.axis[i].kernel;
  return k;
}

// A stride-1 input grad as a forward conv: x = sum over taps t of w[t] gy[i + p - t d] is the
// conv of gy with the taps reversed (the caller reads w[k - 1 - t]) and padding (k - 1) d - p,
// the roles of x and y swapped. Both backends' depthwise kernels run it so.
inline ConvDirectParams input_grad_as_forward(const ConvDirectParams& given) {
  ConvDirectParams p = given;
  p.pass = ConvPass::Forward;
  for (int i = 0; i < p.spatial; ++i) {
    const ConvAxis& a = given.axis[i];
    p.axis[i] = ConvAxis{a.out, a.in, a.kernel, 1, (a.kernel - 1) * a.dilation - a.pad, a.dilation};
  }
  p.x = given.y;
  p.y = given.x;
  return p;
}

#define ANVIL_CONV_KERNELS(X) \
  X(im2col, const Im2colParams&) \
  X(col2im, const Col2imParams&)
ANVIL_DECLARE_KERNELS(ANVIL_CONV_KERNELS)

#define ANVIL_CONV_FUSED(X) \
  X(conv_direct, const ConvDirectParams&)
ANVIL_DECLARE_FUSED(ANVIL_CONV_FUSED)

namespace cuda_backend {
// cuDNN behind conv_direct (anvil/conv.h's conv_plan_cache_* and cudnn_*).
size_t conv_plan_cache_size();
void set_conv_plan_cache_capacity(size_t plans);
bool cudnn_is_available();
void set_cudnn_enabled(bool enabled);
bool cudnn_enabled();
void set_cudnn_allow_fft_winograd(bool allow);
bool cudnn_allow_fft_winograd();
}  // namespace cuda_backend

}  // namespace anvil
