#pragma once
// Layer and group normalisation, as aten's native_layer_norm / native_group_norm and their
// backward (libtorch's names and argument order). Computed in float32 for float16 / bfloat16
// (float64 for float64) and rounded once; mean and rstd come back in the input's dtype, as on
// PyTorch's CPU (its CUDA kernels return them in float32). rstd = 1 / sqrt(biased var + eps).
#include <array>
#include <optional>
#include <tuple>

#include "anvil/plan.h"
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
// Returns (out, mean [N, group], rstd [N, group]). Plans (group_norm_plan): the CPU runs one
// fused kernel, CUDA three (statistics accumulated in float64 on both); the composition of
// var_mean and elementwise ops stays as the reference.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_group_norm(const Tensor& input, const Tensor& weight,
                                                               const Tensor& bias, int64_t n, int64_t c, int64_t hxw,
                                                               int64_t group, double eps);
ANVIL_API Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                            double eps = 1e-5);
ANVIL_API FusedPlan group_norm_plan(const Tensor& input, int64_t num_groups);
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_group_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                                        const Tensor& mean, const Tensor& rstd,
                                                                        const Tensor& weight, int64_t n, int64_t c,
                                                                        int64_t hxw, int64_t group,
                                                                        std::array<bool, 3> output_mask = {true, true, true});

// F.normalize: input / max(||input||_p over dim, eps), the norm kept along dim and broadcast.
// p = 2 runs as one kernel where the backend has it (normalize_plan: the CPU always; CUDA when
// the dims after `dim` hold 16 or more elements, so a channel's loads coalesce); other p (1,
// inf, -inf, 0 counts the nonzeros, any other as (sum |x|^p)^(1/p)) and the rest run the
// composition. Computed in float32 for float16 / bfloat16 (float64 for float64), rounded once
// (PyTorch rounds the norm to the input dtype before dividing); floating inputs only.
ANVIL_API Tensor normalize(const Tensor& input, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
ANVIL_API FusedPlan normalize_plan(const Tensor& input, double p = 2.0, int64_t dim = 1);

// Batch normalisation over input [N, C, *] per channel (every dim but 1), as aten's
// native_batch_norm (libtorch's argument order). weight, bias, running_mean, running_var: [C],
// each optional. Training: the batch's mean and biased variance normalise; running_mean /
// running_var, when given, are updated in place to (1 - m) * running + m * batch with the
// unbiased variance, in float64 and rounded once to their dtype. Eval: the running statistics
// normalise (both needed). Returns (out, save_mean, save_invstd): training, the batch mean and
// 1 / sqrt(biased var + eps) [C]; eval, two empty tensors. They are in the input's dtype unless a
// float32 parameter meets a float16 / bfloat16 input (then float32), as PyTorch's CPU kernel. A
// channels-last input gives a channels-last out.
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_batch_norm(const Tensor& input, const Tensor& weight,
                                                               const Tensor& bias, const Tensor& running_mean,
                                                               const Tensor& running_var, bool training,
                                                               double momentum, double eps);
// F.batch_norm with nn.BatchNorm's bookkeeping: when training, a num_batches_tracked given
// (int64, one element) is incremented in place, and momentum = nullopt takes the cumulative
// average, m = 1 / num_batches_tracked (computed on the device: no host sync). Training needs more
// than one value per channel.
ANVIL_API Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                            const Tensor& running_var, bool training, std::optional<double> momentum = 0.1,
                            double eps = 1e-5, const Tensor& num_batches_tracked = {});
// (grad_input, grad_weight, grad_bias) [C] of native_batch_norm. train: from save_mean /
// save_invstd (the batch statistics); eval: from running_mean / running_var and eps (the input
// enters only through grad_weight). grad_weight / grad_bias come in weight's dtype (the input's
// without a weight, then computed for a weight of ones).
ANVIL_API std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(
    const Tensor& grad_out, const Tensor& input, const Tensor& weight, const Tensor& running_mean,
    const Tensor& running_var, const Tensor& save_mean, const Tensor& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask = {true, true, true});

}  // namespace anvil
