#pragma once
#include <string>

#include "anvil/export.h"

namespace anvil {
ANVIL_API const char* version();
// Build options and the SIMD target Highway chose on this CPU, for `anvil info`.
ANVIL_API std::string build_info();
ANVIL_API std::string cpu_simd_target();
}  // namespace anvil
