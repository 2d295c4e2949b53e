#pragma once
// Caching allocator for CUDA device memory, one per device. cudaMalloc / cudaFree synchronize
// and cost tens of microseconds, so freed blocks are kept and reused:
//  - sizes round up to 512 B; requests up to 1 MiB are carved from 2 MiB segments, larger ones
//    from 20 MiB segments (below 10 MiB) or their own segment rounded to 2 MiB; blocks split,
//    and merge with free neighbours when freed;
//  - a freed block returns to the pool of the stream it was allocated on, so reuse is ordered
//    after that stream's queued work without waiting; record_stream adds other streams, and
//    such a block waits (cudaEventQuery, never a blocking sync) until events recorded on those
//    streams at free time complete;
//  - while a stream captures a CUDA graph, its allocations come from the graph's private pool,
//    kept until the graph is reset, so every replay finds its memory where capture put it.
// On cudaMalloc failure the allocator releases its unused cached segments and retries once,
// then throws OutOfMemoryError with the request and the stats; the process keeps working.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "anvil/memory.h"
#include "anvil/stream.h"

namespace anvil::cuda_backend::allocator {

// `stream` is the stream the memory will be used on (the current stream of `device`).
// `persistent` memory outlives any graph being captured (library workspaces): it never comes
// from a capture pool.
void* allocate(int device, size_t nbytes, cudaStream_t stream, bool persistent = false);
// Never throws (it runs in Storage deleters, possibly at process exit).
void free(int device, void* ptr) noexcept;
// `ptr` must be the start of a block from allocate(); other pointers are ignored.
void record_stream(void* ptr, const Stream& stream);

MemoryStats stats(int device);
void reset_peak_stats(int device);
void empty_cache(int device);
void record_history(int device, bool enabled, size_t max_events);
std::vector<MemoryEvent> history(int device);

// Graph capture: create_pool() makes a private pool; begin_capture() routes allocations of the
// capture sequence `capture_id` (cudaStreamGetCaptureInfo) to it until end_capture();
// release_pool() is called when the graph is reset, after its last replay has finished.
uint64_t create_pool(int device);
void begin_capture(int device, uint64_t pool, unsigned long long capture_id);
void end_capture(int device, unsigned long long capture_id);
void release_pool(int device, uint64_t pool);

// Temporary device memory for one op (split-reduction partials, ...), freed at scope exit.
// Freeing right after the launches is safe: the block is reused only by later work on the
// same stream, which runs after the kernels that use it.
class Scratch {
 public:
  Scratch(int device, size_t nbytes, cudaStream_t stream)
      : device_(device), ptr_(nbytes ? allocate(device, nbytes, stream) : nullptr) {}
  ~Scratch() { free(device_, ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_;
};

}  // namespace anvil::cuda_backend::allocator
