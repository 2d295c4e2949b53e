// Placeholder until the CUDA attention kernels land: the op exists on the CPU only.
#include "core/kernels.h"

namespace anvil::cuda_backend {

void attention(const AttentionParams&) { throw DeviceError("[scaled_dot_product_attention] not implemented on CUDA yet"); }

}  // namespace anvil::cuda_backend
