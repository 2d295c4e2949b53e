#pragma once
#include <cstdint>
#include <string>

#include "anvil/device.h"
#include "anvil/export.h"

namespace anvil {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors
  int64_t reserved_bytes = 0;        // taken from the system (cached + allocated)
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t num_allocs = 0;            // allocation requests served
  int64_t num_frees = 0;
  int64_t num_segments = 0;          // system allocations currently held (cudaMalloc / aligned_alloc)
  int64_t num_ooms = 0;
  int64_t num_cache_hits = 0;        // requests served from the cache without a system call
};

ANVIL_API MemoryStats memory_stats(Device device);
ANVIL_API void reset_peak_memory_stats(Device device);
// Returns cached, unused blocks to the system (CUDA; on CPU the cache of blocks >= 1 MiB).
ANVIL_API void empty_cache(Device device = Device(kCUDA, 0));
ANVIL_API std::string memory_stats_str(Device device);

}  // namespace anvil
