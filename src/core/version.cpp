#include "anvil/version.h"

#include "anvil/cuda.h"
#include "core/util.h"
#include "cpu/simd.h"

namespace anvil {

const char* version() { return "0.1.0"; }

std::string cpu_simd_target() { return cpu::simd::target_name(); }

std::string build_info() {
  return detail::cat_message("anvil ", version(), "; cuda backend: ", cuda::built_with_cuda() ? "on (sm_90 + PTX)" : "off",
#ifdef ANVIL_SANITIZE_BUILD
                             "; sanitizers: address+undefined",
#endif
                             "; compiler: ", __VERSION__);
}

}  // namespace anvil
