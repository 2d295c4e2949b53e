#pragma once
// Dropout, as torch.nn.functional.dropout and aten's native_dropout / native_dropout_backward
// (libtorch's names and argument order). The mask comes from the global Philox generator
// (manual_seed): element i of a call keeps when the top 24 bits of word i % 4 of
// Philox(seed, offset + i / 4) fall below ceil((1 - p) * 2^24), so a seed gives the same mask on
// CPU and CUDA; a call advances the generator by ceil(numel / 4) counters. The counter runs over
// the elements in memory order of the input's layout (a channels-last input stays channels-last).
// Kept values are x / (1 - p), computed in float32 (float64 for float64) and rounded once.
#include <optional>
#include <tuple>

#include "anvil/tensor.h"

namespace anvil {

// train and 0 < p < 1: x * mask / (1 - p); p = 1: x * 0 (NaN and inf give NaN, as PyTorch);
// p = 0, eval or an empty x: x itself (no copy), as PyTorch. Floating x; 0 <= p <= 1.
ANVIL_API Tensor dropout(const Tensor& input, double p, bool train = true);
// (out, mask) with a bool mask. Training (train unset or true): out = x * mask * scale with
// scale = 1 / (1 - p) (0 for p = 1), drawing even for p = 0; eval: (a copy of x, all true).
// An empty x gives (x, an empty bool mask).
ANVIL_API std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, std::optional<bool> train = std::nullopt);
// grad_output * mask * scale (mask bool, of grad_output's shape), rounded once.
ANVIL_API Tensor native_dropout_backward(const Tensor& grad_output, const Tensor& mask, double scale);

}  // namespace anvil
