#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "anvil/export.h"
#include "anvil/stream.h"

namespace anvil::cuda {

// True when anvil was built with CUDA and a usable device and driver are present.
ANVIL_API bool is_available();
// Why is_available() is false: built without CUDA, no driver, no device, driver too old; "" if available.
ANVIL_API std::string unavailable_reason();
ANVIL_API int device_count();
ANVIL_API bool built_with_cuda();

struct DeviceProperties {
  std::string name;
  int64_t total_memory = 0;
  int multiprocessor_count = 0;
  int major = 0, minor = 0;
  int64_t l2_cache_size = 0;
  int driver_version = 0, runtime_version = 0;
};
ANVIL_API DeviceProperties get_device_properties(int device);

// Raw device-to-device byte copy with the driver's copy engine path (cudaMemcpyAsync) on the
// current stream of `device`: what bench-ops measures the copy ceiling with.
ANVIL_API void memcpy_device(void* dst, const void* src, size_t nbytes, Device device);

// CUDA graph capture of the current stream, replayed later. Allocations made during capture come
// from a private pool that stays reserved for the graph's life, so replays reuse the same memory.
class ANVIL_API Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void capture_begin();  // the current stream must not be the legacy default stream
  void capture_end();
  void replay();
  void reset();
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::cuda
