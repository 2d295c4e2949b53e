#pragma once
// Neural-network ops of the decode hot path, with libtorch's names and argument order where
// libtorch has the op. Every CUDA op here is asynchronous, makes no host sync and can be
// captured in a CUDA graph.
#include <optional>
#include <tuple>

#include "anvil/tensor.h"

namespace anvil {

// y = input @ weight^T + bias. input [*, k]; weight [n, k] (or [k]: the last output dim is
// dropped); bias [n] or broadcastable to the output. input, weight and bias share a floating
// dtype; the output has it too. Few rows (decode, `[1, 1, k]` and `[b, 1, k]` alike) go to a
// GEMV kernel with the bias fused; many rows go to the GEMM. float32 accumulation.
ANVIL_API Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});

// softmax / log_softmax along `dim`; `dtype` casts the input first (as torch's dtype=).
// float16/bfloat16 accumulate in float32. A row of all -inf gives NaN, as PyTorch CPU.
ANVIL_API Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
ANVIL_API Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// torch.nn.functional.rms_norm: x * rsqrt(mean(x^2 over the normalized dims) + eps) * weight,
// computed in float32 with one rounding to x's dtype. eps defaults to the dtype's epsilon.
// weight has normalized_shape and x's dtype or float32.
ANVIL_API Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                          std::optional<double> eps = std::nullopt);
// Fused residual add + rms_norm: h = x + residual (rounded to the dtype), returns
// (rms_norm(h, ...), h). Reference composition: add then rms_norm.
ANVIL_API std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                                  const Tensor& weight = {}, std::optional<double> eps = std::nullopt);

// SwiGLU's gate: silu(gate) * up with one rounding (the composition rounds twice). Same shapes;
// gate and up may be strided views such as the two halves of a fused gate_up projection.
ANVIL_API Tensor silu_mul(const Tensor& gate, const Tensor& up);

// Rotary position embedding, neox style (Llama / Qwen / Mistral: rotate the two halves of the
// first rotary_dim = 2 * inv_freq.size(0) columns of the last dim; the rest pass through).
// x [*, head_dim] float; positions int32/int64 broadcastable to x.shape[:-1], read on the
// device (x [b, s, h, d] takes positions [b, s, 1]; x [b, h, s, d] takes [b, 1, s]).
// inv_freq float32 [rotary_dim / 2] on x's device (see rope_inv_freq).
ANVIL_API Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
// inv_freq[i] = 1 / theta^(2i / rotary_dim) in float32, bit-equal to Hugging Face's
// `1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`.
ANVIL_API Tensor rope_inv_freq(int64_t rotary_dim, double theta, Device device = kCPU);

}  // namespace anvil
