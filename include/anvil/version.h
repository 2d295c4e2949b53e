#pragma once
#include <string>

#include "anvil/export.h"

namespace anvil {
ANVIL_API const char* version();
// Build options and the SIMD target Highway chose on this CPU, for `anvil info`.
ANVIL_API std::string build_info();
ANVIL_API std::string cpu_simd_target();
// Whether the CPU has AVX512-BF16 (with AVX512-VBMI): the bfloat16 pair-product kernels (GEMM,
// GEMV dots, the implicit-GEMM convolution) run only there.
ANVIL_API bool cpu_has_bf16_dots();
// Whether the CPU has AVX-512 (F and VL): the float32 implicit-GEMM convolution (channels-last)
// runs only there.
ANVIL_API bool cpu_has_avx512();
// Threads of the CPU backend's OpenMP team (torch.get_num_threads / set_num_threads).
ANVIL_API int get_num_threads();
ANVIL_API void set_num_threads(int n);
}  // namespace anvil
