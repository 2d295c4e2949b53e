#pragma once
// Upsampling references, written from PyTorch's formulas (UpSample.h / UpSampleKernel.cpp of
// PyTorch 2.15) rather than from the kernels' tap functions: each output's source position is
// computed per element in the precision PyTorch uses for it (float for nearest, float or double
// for the interpolating modes), its weights are then applied in float64, and the backward is
// the scatter-add of the forward's weights (the kernels gather instead).
#include <optional>
#include <vector>

#include "reference/ref_array.h"

namespace ref {

enum class UpKind { Nearest, NearestExact, Linear, Cubic };

// x [N, C, *spatial] to [N, C, *out]; scales per spatial dim (unset: in / out); index_f64: the
// interpolating modes locate sources in double (float64 data) instead of float.
Array upsample(const Array& x, const Shape& out, UpKind kind, bool align_corners,
               const std::vector<std::optional<double>>& scales, bool index_f64);
// d(sum(g * upsample(x))) / dx for grad_output g and an input of `in_sizes`.
Array upsample_backward(const Array& g, const Shape& in_sizes, UpKind kind, bool align_corners,
                        const std::vector<std::optional<double>>& scales, bool index_f64);

}  // namespace ref
