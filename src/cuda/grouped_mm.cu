// Placeholder until the CUDA grouped_mm kernels land: the op exists on the CPU only.
#include "core/kernels.h"

namespace anvil::cuda_backend {

void grouped_mm(const GroupedMmParams&) { throw DeviceError("[grouped_mm] not implemented on CUDA yet"); }

}  // namespace anvil::cuda_backend
