#pragma once
// Upsampling, as torch.nn.functional.interpolate and the aten upsample ops behind it (PyTorch
// 2.15's index rules, shape rules and messages). Modes: "nearest" (source index
// min(floor(dst * s), in - 1)), "nearest-exact" (min(floor((dst + 0.5) * s), in - 1)), both in
// float32 for every dtype; "linear" (3-d input), "bilinear" (4-d), "trilinear" (5-d) and
// "bicubic" (4-d, Keys' A = -0.75, taps clamped at the border) in float (double for float64),
// with or without align_corners. s is 1 / scale_factor when a scale factor is given and
// recompute_scale_factor is not true, else in / out (align_corners: (in - 1) / (out - 1)). As
// PyTorch's CPU kernels, a linear axis whose output extent equals its input's copies it.
// Outputs keep the input's layout (a channels-last input gives a channels-last output). The
// backward is each forward's exact adjoint as a gather: every input element sums the weighted
// gradients of the outputs that read it, in a fixed order, without atomics (the same bits
// every run). float16, bfloat16, float32, float64.
#include <optional>
#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil {

// F.interpolate: exactly one of size and scale_factor, each with one entry per spatial dim or
// a single entry for all (Python's int form). The output extent is floor(in * scale_factor).
// align_corners only with the interpolating modes (default false).
ANVIL_API Tensor interpolate(const Tensor& input, const std::optional<Shape>& size,
                             const std::optional<std::vector<double>>& scale_factor = std::nullopt,
                             const std::string& mode = "nearest", std::optional<bool> align_corners = std::nullopt,
                             std::optional<bool> recompute_scale_factor = std::nullopt);

// The aten op under interpolate (upsample_nearest2d, upsample_bilinear2d, ... in one): output_size
// per spatial dim, scales one per spatial dim or empty (an unset or non-positive entry: in / out).
ANVIL_API Tensor upsample(const Tensor& input, const Shape& output_size, const std::string& mode,
                          bool align_corners = false, const std::vector<std::optional<double>>& scales = {});
// Its backward (upsample_*_backward): grad_input of input_size [N, C, *] from grad_output
// [N, C, output_size], with the forward's mode, align_corners and scales.
ANVIL_API Tensor upsample_backward(const Tensor& grad_output, const Shape& output_size, const Shape& input_size,
                                   const std::string& mode, bool align_corners = false,
                                   const std::vector<std::optional<double>>& scales = {});

}  // namespace anvil
