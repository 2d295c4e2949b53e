#pragma once
// Convolution references, written from the definition (PyTorch's documented formulas), not from
// the kernels' im2col: every product x * w of a convolution is enumerated in float64 loops, and
// forward, input gradient and weight gradient all sum those same products into their output.
#include "reference/ref_array.h"

namespace ref {

// One entry per spatial dim.
struct ConvSpec {
  Shape stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
};

// The output's shape for input x_sizes and weight w_sizes.
Shape conv_output_sizes(const Shape& x_sizes, const Shape& w_sizes, const ConvSpec& s);
// y = conv(x, w) + b; x [N, C_in, *], w [C_out, C_in / g, *k] ([C_in, C_out / g, *k] transposed);
// b [C_out] or nullptr.
Array conv(const Array& x, const Array& w, const Array* b, const ConvSpec& s);
// d(sum(gy * conv(x, w))) / dx for x of x_sizes, and / dw for w of w_sizes.
Array conv_grad_input(const Array& gy, const Array& w, const Shape& x_sizes, const ConvSpec& s);
Array conv_grad_weight(const Array& x, const Array& gy, const Shape& w_sizes, const ConvSpec& s);

}  // namespace ref
