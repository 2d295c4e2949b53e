#pragma once
// Streams and events, with torch.cuda's surface. On CPU, ops run synchronously on the calling
// thread: the CPU stream is a single default stream and CPU events record host time.
#include <cstdint>
#include <memory>

#include "anvil/device.h"
#include "anvil/export.h"

namespace anvil {

class ANVIL_API Stream {
 public:
  Stream() = default;
  Stream(Device device, void* handle, int64_t id) : device_(device), handle_(handle), id_(id) {}
  // A new stream on `device` (CUDA: a non-blocking cudaStream_t, kept for the process' life).
  static Stream create(Device device);
  Device device() const { return device_; }
  void* native_handle() const { return handle_; }  // cudaStream_t on CUDA, null on CPU
  int64_t id() const { return id_; }               // 0 is the default stream
  void synchronize() const;
  bool query() const;  // true when all queued work has finished
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  Device device_;
  void* handle_ = nullptr;
  int64_t id_ = 0;
};

ANVIL_API Stream default_stream(Device device);
ANVIL_API Stream current_stream(Device device);
ANVIL_API void set_stream(const Stream& stream);
// Waits for all work on every stream of `device`.
ANVIL_API void synchronize(Device device);

// Makes `stream` current for its device in this scope, restoring the previous one after.
class ANVIL_API StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

class ANVIL_API Event {
 public:
  explicit Event(Device device = kCPU, bool enable_timing = false);
  void record();  // on the current stream of the event's device
  void record(const Stream& stream);
  void synchronize() const;
  bool query() const;
  void wait(const Stream& stream) const;  // future work on `stream` waits for this event
  // Milliseconds from this event to `end`; both must have been recorded (and, on CUDA, created
  // with enable_timing).
  float elapsed_time(const Event& end) const;
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace anvil
