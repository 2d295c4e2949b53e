// Placeholder until the CUDA scaled_mm kernels land: the op exists on the CPU only.
#include "core/kernels.h"

namespace anvil::cuda_backend {

void scaled_mm(const ScaledMmParams&) { throw DeviceError("[scaled_mm] not implemented on CUDA yet"); }

}  // namespace anvil::cuda_backend
