#pragma once
// Convolution passes through cuDNN 9's graph API (cudnn-frontend), when the build has it
// (ANVIL_WITH_CUDNN). Plans are built once per configuration from the heuristics' choices that
// keep float32 exact (no TF32), sums in float32, and results deterministic (no FFT, Winograd,
// reduced-precision reductions or atomics), with workspace within conv_workspace_limit; they
// live in a bounded LRU cache. Unsupported configurations are cached as such too.
#include <cstddef>

#include "core/kernels/conv.h"

namespace anvil::cuda_backend {

// Whether cuDNN runs these params (builds and caches the plan on first sight).
bool cudnn_conv_supported(const ConvDirectParams& p);
// Runs a supported pass on the current stream of y's device; the workspace comes from the
// caching allocator.
void cudnn_conv_run(const ConvDirectParams& p);

size_t cudnn_plan_cache_size();
void set_cudnn_plan_cache_capacity(size_t plans);
// libcudnn loads (and the build has cuDNN); the switch that turns its use off (true by default).
bool cudnn_loadable();
void set_cudnn_use(bool enabled);
bool cudnn_use();
// Whether plans may take FFT / Winograd engines (false by default); part of the plan key.
void set_cudnn_fft_winograd(bool allow);
bool cudnn_fft_winograd();

}  // namespace anvil::cuda_backend
