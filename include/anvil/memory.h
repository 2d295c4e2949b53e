#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

// The allocator's history (torch.cuda.memory._record_memory_history's role): while recording,
// each block handed out or returned and each system allocation taken or released is appended,
// keeping the newest `max_events`. It answers "why did reserved memory grow" offline, by
// replaying the requests. Turning it on clears the history.
struct MemoryEvent {
  enum class Kind : uint8_t { Alloc, Free, SegmentAlloc, SegmentFree };
  Kind kind = Kind::Alloc;
  int64_t bytes = 0;      // the block's size as the allocator rounded it, or the segment's
  uint64_t address = 0;
  uint64_t stream = 0;    // the CUDA stream the block belongs to (0 on CPU)
};
ANVIL_API void record_memory_history(Device device, bool enabled, size_t max_events = 1000000);
ANVIL_API std::vector<MemoryEvent> memory_history(Device device);

}  // namespace anvil
