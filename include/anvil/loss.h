#pragma once
// Losses, as torch.nn.functional and the aten ops behind them (libtorch's names and argument
// order, PyTorch 2.15's dtype rules). Input and target broadcast together as F's losses do
// (PyTorch also warns when their sizes differ; nothing is printed here). The backward functions
// take aten's arguments and return the gradient for `input` in the broadcast shape.
#include "anvil/tensor.h"

namespace anvil {

// at::Reduction: the elementwise losses, their mean (NaN for none) or their sum (0 for none).
enum class Reduction : int8_t { None, Mean, Sum };

// (input - target)^2 in the promoted floating dtype (PyTorch's mse kernel: the difference
// rounded to the dtype, then squared), then reduced. Floating dtypes only.
ANVIL_API Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// norm * (input - target) * grad_output with norm = 2 / numel (mean) or 2, rounded to the dtype
// first, multiplied in that order (aten's mse_loss_backward).
ANVIL_API Tensor mse_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                                   Reduction reduction);

// |input - target|, then reduced (aten's composite l1_loss: integers allowed for None and Sum,
// Mean needs a floating or complex dtype).
ANVIL_API Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// What autograd gives l1_loss's input: sign(input - target) * grad_output, the gradient first
// divided by numel for Mean (sign(NaN) = 0, as torch.sign). Floating dtypes.
ANVIL_API Tensor l1_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                                  Reduction reduction);

// Classification losses over input [C] (target 0-d), [N, C] (target [N]) or [N, C, d1, ...]
// (target [N, d1, ...]); class indices are int64, `ignore_index` entries count for nothing.
// nll_loss: -weight[t] * input[t] per element; Mean divides the sum by the sum of the counted
// weights (NaN when every target is ignored). An index outside [0, C) raises IndexError (on CUDA
// at the next synchronisation, from the gather's device-side check).
ANVIL_API Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                          Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
// d nll_loss / d input: -weight[t] * grad_output (/ the total weight for Mean) at each target.
ANVIL_API Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                                   const Tensor& weight = {}, Reduction reduction = Reduction::Mean,
                                   int64_t ignore_index = -100);
// F.cross_entropy: log_softmax over the class dim, then nll_loss with class-index targets, or
// -sum(weight * target * log_softmax) with probability targets (floating, input's shape; Mean
// divides by the number of rows, ignore_index must stay negative); label_smoothing mixes in
// the uniform distribution as PyTorch's composite does.
ANVIL_API Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                               Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                               double label_smoothing = 0.0);
// d cross_entropy / d input for the same arguments.
ANVIL_API Tensor cross_entropy_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                                        const Tensor& weight = {}, Reduction reduction = Reduction::Mean,
                                        int64_t ignore_index = -100, double label_smoothing = 0.0);

}  // namespace anvil
