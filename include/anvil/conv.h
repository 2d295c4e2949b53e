#pragma once
// Convolution, as torch.nn.functional.conv{1,2,3}d / conv_transpose{1,2,3}d and the aten
// convolution / convolution_backward ops behind them: PyTorch 2.15's argument rules, output
// sizes and messages. input [N, C_in, *] (or unbatched [C_in, *]), weight [C_out, C_in / groups,
// *k] ([C_in, C_out / groups, *k] when transposed), bias [C_out] or undefined. Output extent per
// spatial dim: floor((in + 2 p - d (k - 1) - 1) / s) + 1; transposed: (in - 1) s - 2 p +
// d (k - 1) + output_padding + 1. float16, bfloat16, float32 (products summed in float32, one
// rounding with the bias added in float32), float64. TF32 is never used. The output (and each
// gradient) is channels-last when the input or the weight is (4-d / 5-d), as PyTorch's
// suggested conv memory format.
// Plans (convolution_plan says which runs; docs/SEMANTICS.md): Fused, the backend's own kernel
// for the pass (CUDA: cuDNN 9 with deterministic, exact-sum engines, no TF32, the bias fused);
// Composed, im2col / col2im over chunks of output rows plus the backend GEMM (OpenBLAS / our
// bfloat16 GEMM on the CPU, cuBLASLt on CUDA), the bias added before the one rounding (cuDNN's
// fused engines mostly do too; some round the conv first, as PyTorch's CUDA path always does).
// Every gradient has the same bits run to run.
#include <array>
#include <string>
#include <tuple>
#include <type_traits>

#include "anvil/plan.h"
#include "anvil/tensor.h"

namespace anvil {

// A padding mode by name: "same" (stride 1 only: the output keeps the input's extent, an odd
// total pad puts the extra element at the end) or "valid" (no padding). It converts from a
// string literal or a std::string only, so a braced int list such as {0} stays a Shape.
struct ConvPadding {
  template <size_t N>
  ConvPadding(const char (&s)[N]) : mode(s) {}
  template <typename S, typename = std::enable_if_t<std::is_same_v<S, std::string>>>
  ConvPadding(const S& s) : mode(s) {}
  std::string mode;
};

// padding: one int for all spatial dims or one per dim, or a ConvPadding.
ANVIL_API Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Shape& stride = {1},
                        const Shape& padding = {0}, const Shape& dilation = {1}, int64_t groups = 1);
ANVIL_API Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Shape& stride = {1},
                        const Shape& padding = {0}, const Shape& dilation = {1}, int64_t groups = 1);
ANVIL_API Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Shape& stride = {1},
                        const Shape& padding = {0}, const Shape& dilation = {1}, int64_t groups = 1);
ANVIL_API Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const ConvPadding& padding, const Shape& dilation = {1}, int64_t groups = 1);
ANVIL_API Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const ConvPadding& padding, const Shape& dilation = {1}, int64_t groups = 1);
ANVIL_API Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const ConvPadding& padding, const Shape& dilation = {1}, int64_t groups = 1);

// output_padding < stride or < dilation per dim (it only resolves which output extent is meant).
ANVIL_API Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                  const Shape& stride = {1}, const Shape& padding = {0},
                                  const Shape& output_padding = {0}, int64_t groups = 1, const Shape& dilation = {1});
ANVIL_API Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                  const Shape& stride = {1}, const Shape& padding = {0},
                                  const Shape& output_padding = {0}, int64_t groups = 1, const Shape& dilation = {1});
ANVIL_API Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                  const Shape& stride = {1}, const Shape& padding = {0},
                                  const Shape& output_padding = {0}, int64_t groups = 1, const Shape& dilation = {1});

// aten::convolution: batched input only, stride / padding / dilation / output_padding one int or
// one per spatial dim.
ANVIL_API Tensor convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                             const Shape& padding, const Shape& dilation, bool transposed, const Shape& output_padding,
                             int64_t groups);

// aten::convolution_backward: (grad_input, grad_weight, grad_bias) of convolution(input, weight,
// bias, ...) for grad_output; output_mask says which to compute (the others are undefined).
// bias_sizes is bias's shape ([C_out]) or empty when there is no bias (grad_bias is then undefined).
ANVIL_API std::tuple<Tensor, Tensor, Tensor> convolution_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Shape& bias_sizes, const Shape& stride,
    const Shape& padding, const Shape& dilation, bool transposed, const Shape& output_padding, int64_t groups,
    std::array<bool, 3> output_mask = {true, true, true});

// The column workspace (im2col / col2im) of one call holds at most this many bytes: columns are
// built for chunks of output rows, never less than one row. Defaults: 16 MiB on the CPU (the
// GEMM's operand stays near the caches), 128 MiB on CUDA (also the bound on cuDNN plans'
// workspace), or ANVIL_CONV_WORKSPACE_MB (MiB, read at the first conv) when set.
// set_conv_workspace_limit(0) restores the defaults; a positive value applies to every device.
ANVIL_API void set_conv_workspace_limit(int64_t bytes);
ANVIL_API int64_t conv_workspace_limit(const Device& device);

// CUDA bfloat16 / float16 channels-first 2-d convs of one group (not 1x1) whose input (for a
// transposed conv: its output, the input of the conv it runs as) holds at least this many bytes
// run on cuDNN's channels-last plans between two tiled layout conversions
// (H200, the FLUX VAE's [1, 128, 1024, 1024] 3x3: 1.2 ms instead of 10.4; SD's 16 MiB
// [1, 512, 128, 128] runs faster in its own layout). Default 32 MiB, or never (INT64_MAX) when
// the environment sets ANVIL_CONV_CUDA_KEEP_LAYOUT=1; 0 moves every such conv; a negative value
// restores the default.
ANVIL_API void set_conv_cuda_channels_last_min_bytes(int64_t bytes);
ANVIL_API int64_t conv_cuda_channels_last_min_bytes();

// Which plan convolution(...) runs for these arguments (its forward pass), with or without a bias.
ANVIL_API FusedPlan convolution_plan(const Tensor& input, const Tensor& weight, const Shape& stride,
                                     const Shape& padding, const Shape& dilation, bool transposed,
                                     const Shape& output_padding, int64_t groups, bool has_bias = false);
// The CUDA backend's plan cache (cuDNN plans, one per pass and configuration, the least
// recently used dropped past the capacity; default 256): its size and capacity.
ANVIL_API size_t conv_plan_cache_size();
ANVIL_API void set_conv_plan_cache_capacity(size_t plans);
// As torch.backends.cudnn: whether this build has cuDNN and libcudnn.so.9 loads; whether CUDA
// convolutions may use it (default true; false runs every pass as the composition).
ANVIL_API bool cudnn_is_available();
ANVIL_API void set_cudnn_enabled(bool enabled);
ANVIL_API bool cudnn_enabled();
// Whether cuDNN may pick FFT and Winograd engines (default false). Off, every CUDA convolution
// sums its products directly in float32 / float64, as the reference does; on, float32 passes may
// take PyTorch's faster engines (H200 float32 ResNet backward: cuDNN's FFT input grad and
// Winograd weight grad), at their rounding (relative error ~1e-6 instead of a direct sum's
// ~1e-7), still deterministic. TF32, reduced-precision reductions and non-deterministic engines
// stay off either way.
ANVIL_API void set_cudnn_allow_fft_winograd(bool allow);
ANVIL_API bool cudnn_allow_fft_winograd();

}  // namespace anvil
