#pragma once
// Layer and group normalisation, as aten's native_layer_norm / native_group_norm and their
// backward (libtorch's names and argument order). Computed in float32 for float16 / bfloat16
// (float64 for float64) and rounded once; mean and rstd come back in the input's dtype, as on
// PyTorch's CPU (its CUDA kernels return them in float32). rstd = 1 / sqrt(biased var + eps).
#include <array>
#include <tuple>

#include "anvil/tensor.h"

namespace anvil {

// Over the trailing normalized_shape dims; weight / bias (optional) have normalized_shape.
// Returns (out, mean, rstd), mean and rstd of input's leading dims followed by 1s.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input, const Shape& normalized_shape,
                                                               const Tensor& weight, const Tensor& bias, double eps);
ANVIL_API Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                            const Tensor& bias = {}, double eps = 1e-5);
// (grad_input, grad_weight, grad_bias) from native_layer_norm's mean and rstd; output_mask picks
// which are computed (the others come back undefined).
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                                        const Shape& normalized_shape, const Tensor& mean,
                                                                        const Tensor& rstd, const Tensor& weight,
                                                                        const Tensor& bias,
                                                                        std::array<bool, 3> output_mask = {true, true, true});

// input [N, C, *] in `group` groups of C / group channels; weight / bias (optional) [C].
// Returns (out, mean [N, group], rstd [N, group]).
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_group_norm(const Tensor& input, const Tensor& weight,
                                                               const Tensor& bias, int64_t n, int64_t c, int64_t hxw,
                                                               int64_t group, double eps);
ANVIL_API Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                            double eps = 1e-5);
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_group_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                                        const Tensor& mean, const Tensor& rstd,
                                                                        const Tensor& weight, int64_t n, int64_t c,
                                                                        int64_t hxw, int64_t group,
                                                                        std::array<bool, 3> output_mask = {true, true, true});

}  // namespace anvil
