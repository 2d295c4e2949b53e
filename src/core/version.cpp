#include "anvil/version.h"

#include <omp.h>

#include "anvil/cuda.h"
#include "core/util.h"

namespace anvil {

const char* version() { return "0.1.0"; }

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  ANVIL_CHECK(n > 0, Error, "[set_num_threads] expected a positive number of threads, got ", n);
  omp_set_num_threads(n);
}

#ifndef ANVIL_CUDA_ARCHS
#define ANVIL_CUDA_ARCHS ""
#endif

std::string build_info() {
  return detail::cat_message("anvil ", version(), "; cuda backend: ",
                             cuda::built_with_cuda() ? std::string("on (") + ANVIL_CUDA_ARCHS + ")" : std::string("off"),
#ifdef ANVIL_SANITIZE_BUILD
                             "; sanitizers: address+undefined",
#endif
                             "; compiler: ", __VERSION__);
}

}  // namespace anvil
