#pragma once
// Padding, as torch.nn.functional.pad and the aten ops behind it (libtorch's names, argument
// order, shape rules and messages, PyTorch 2.15). `pad` / `padding` list (before, after) pairs
// from the last dim backwards, as F.pad: {left, right, top, bottom, front, back}; negative
// entries crop. Outputs keep the input's layout (suggest_memory_format: a channels-last input
// gives a channels-last output), except circular padding, whose output is contiguous as in
// PyTorch. The backward functions are gathers: each input element sums the gradient of every
// output element that read it, without atomics, so they give the same bits every run.
#include <optional>
#include <string>

#include "anvil/tensor.h"

namespace anvil {

// Any rank and dtype; `value` is rounded to the dtype as fill_ does. All pads <= 0 still copy.
ANVIL_API Tensor constant_pad_nd(const Tensor& input, const Shape& pad, const Scalar& value = 0);

// F.pad. "constant" pads any trailing dims; "reflect", "replicate" and "circular" pad the last
// 1, 2 or 3 dims (pad.size() 2, 4 or 6) of a 2-3-d, 3-4-d or 4-5-d input. `value` is for
// constant mode (other modes take none, or 0). ValueError for an unknown mode or a
// size / rank pair outside those.
ANVIL_API Tensor pad(const Tensor& input, const Shape& pad, const std::string& mode = "constant",
                     std::optional<double> value = std::nullopt);

// Reflection (the edge not repeated; each pad < the size of its dim) and replication (the edge
// repeated) of the last 1, 2 or 3 dims; the input has that many dims plus one or two (batch).
// Every dtype but bool and the float8 types; the backward takes float16, bfloat16, float32,
// float64 and complex64 and accumulates in float32 (float64 for float64).
ANVIL_API Tensor reflection_pad1d(const Tensor& input, const Shape& padding);
ANVIL_API Tensor reflection_pad2d(const Tensor& input, const Shape& padding);
ANVIL_API Tensor reflection_pad3d(const Tensor& input, const Shape& padding);
ANVIL_API Tensor replication_pad1d(const Tensor& input, const Shape& padding);
ANVIL_API Tensor replication_pad2d(const Tensor& input, const Shape& padding);
ANVIL_API Tensor replication_pad3d(const Tensor& input, const Shape& padding);
ANVIL_API Tensor reflection_pad1d_backward(const Tensor& grad_output, const Tensor& input, const Shape& padding);
ANVIL_API Tensor reflection_pad2d_backward(const Tensor& grad_output, const Tensor& input, const Shape& padding);
ANVIL_API Tensor reflection_pad3d_backward(const Tensor& grad_output, const Tensor& input, const Shape& padding);
ANVIL_API Tensor replication_pad1d_backward(const Tensor& grad_output, const Tensor& input, const Shape& padding);
ANVIL_API Tensor replication_pad2d_backward(const Tensor& grad_output, const Tensor& input, const Shape& padding);
ANVIL_API Tensor replication_pad3d_backward(const Tensor& grad_output, const Tensor& input, const Shape& padding);

// torch._pad_circular: the input cropped by the negative pads, then wrapped around by the
// positive ones (each at most the cropped size), over the last pad.size() / 2 dims, which leave
// one or two dims unpadded. Any dtype.
ANVIL_API Tensor pad_circular(const Tensor& input, const Shape& pad);

// The backward of constant_pad_nd (PyTorch's autograd formula: the gradient cropped back) and
// of pad_circular (which PyTorch differentiates through its slices): grad_output has the padded
// shape, the result the input's, grad_output.size(d) - before - after. Float dtypes and
// complex64 as above; constant_pad_nd_backward keeps grad_output's layout.
ANVIL_API Tensor constant_pad_nd_backward(const Tensor& grad_output, const Shape& pad);
ANVIL_API Tensor pad_circular_backward(const Tensor& grad_output, const Shape& pad);

}  // namespace anvil
