// libFuzzer target for the safetensors header parser and the sharded index parser: any input
// must be accepted or rejected with FormatError, never crash, leak or hang. The first byte picks
// the parser. Built by -DANVIL_FUZZ=ON with clang (tests/fuzz/CMakeLists.txt); CI runs it briefly.
#include <cstddef>
#include <cstdint>
#include <string>

#include "anvil/error.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] & 1) {
      (void)anvil::runtime::parse_weight_map(std::string(reinterpret_cast<const char*>(data + 1), size - 1), "fuzz");
    } else {
      (void)anvil::runtime::parse_safetensors(data + 1, size - 1, "fuzz");
    }
  } catch (const anvil::FormatError&) {
  }
  return 0;
}
