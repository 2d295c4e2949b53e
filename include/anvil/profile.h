#pragma once
// Kernel time per backend entry point (conv_direct, bmm, im2col, group_norm, binary, ...): while
// enabled, every kernel call records a pair of timing events around itself on the current stream
// of its device (the CPU: host timestamps; its kernels are synchronous), summed per (kernel,
// device). For finding where a model's time goes (`anvil bench --vae ... --profile`). Costs two
// event records per kernel and a device wait every 4096 kernels; a CUDA graph capture refuses to
// start while it is on (the events would become part of the graph).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "anvil/device.h"
#include "anvil/export.h"

namespace anvil::profile {

ANVIL_API void set_enabled(bool on);
ANVIL_API bool enabled();

struct Entry {
  std::string kernel;
  Device device;
  int64_t calls = 0;
  double ms = 0;
};
// Waits for the recorded kernels and returns the sums so far, most time first.
ANVIL_API std::vector<Entry> report();
// Drops everything recorded so far (waiting for it first).
ANVIL_API void reset();

namespace detail {
// The kernel dispatch's hook (core/kernels.h ANVIL_KERNEL): call() between two recorded events.
ANVIL_API void timed(const char* kernel, Device device, const std::function<void()>& call);
}  // namespace detail

}  // namespace anvil::profile
