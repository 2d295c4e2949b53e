// Public Stream / Event API: CPU devices are handled here (synchronous, host clock); CUDA
// devices are forwarded to the CUDA backend.
#include "anvil/stream.h"

#include <chrono>

#include "core/kernels.h"
#include "core/util.h"

namespace anvil {

Stream Stream::create(Device device) {
  if (device.is_cpu()) return Stream(device, nullptr, 0);
  return cuda_backend::create_stream(device.index);
}
void Stream::synchronize() const {
  if (device_.is_cuda()) cuda_backend::stream_synchronize(*this);
}
bool Stream::query() const { return device_.is_cpu() ? true : cuda_backend::stream_query(*this); }

Stream default_stream(Device device) {
  return device.is_cpu() ? Stream(device, nullptr, 0) : cuda_backend::default_stream(device.index);
}
Stream current_stream(Device device) {
  return device.is_cpu() ? Stream(device, nullptr, 0) : cuda_backend::current_stream(device.index);
}
void set_stream(const Stream& stream) {
  if (stream.device().is_cuda()) cuda_backend::set_current_stream(stream);
}
void cuda::memcpy_device(void* dst, const void* src, size_t nbytes, Device device) {
  ANVIL_CHECK(device.is_cuda(), DeviceError, "[cuda::memcpy_device] expected a CUDA device, got ", device.str());
  cuda_backend::memcpy_device_to_device(dst, src, nbytes, device);
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda_backend::device_synchronize(device.index);
}

StreamGuard::StreamGuard(const Stream& stream) : prev_(current_stream(stream.device())) { set_stream(stream); }
StreamGuard::~StreamGuard() { set_stream(prev_); }

struct Event::Impl {
  Device device;
  bool timing = false;
  void* cuda_event = nullptr;
  bool recorded = false;
  std::chrono::steady_clock::time_point host_time;
  ~Impl() {
    if (cuda_event) cuda_backend::event_destroy(cuda_event);
  }
};

Event::Event(Device device, bool enable_timing) : impl_(std::make_shared<Impl>()) {
  impl_->device = device;
  impl_->timing = enable_timing;
  if (device.is_cuda()) impl_->cuda_event = cuda_backend::event_create(device.index, enable_timing);
}

void Event::record() { record(current_stream(impl_->device)); }

void Event::record(const Stream& stream) {
  ANVIL_CHECK(stream.device() == impl_->device, DeviceError, "[Event.record] event on ", impl_->device.str(),
              " cannot be recorded on a stream of ", stream.device().str());
  impl_->recorded = true;
  if (impl_->device.is_cpu()) {
    impl_->host_time = std::chrono::steady_clock::now();
    return;
  }
  cuda_backend::event_record(impl_->cuda_event, stream);
}

void Event::synchronize() const {
  if (impl_->device.is_cuda() && impl_->recorded) cuda_backend::event_synchronize(impl_->cuda_event);
}

bool Event::query() const {
  if (impl_->device.is_cpu() || !impl_->recorded) return true;
  return cuda_backend::event_query(impl_->cuda_event);
}

void Event::wait(const Stream& stream) const {
  if (impl_->device.is_cpu() || !impl_->recorded) return;
  cuda_backend::event_wait(impl_->cuda_event, stream);
}

float Event::elapsed_time(const Event& end) const {
  ANVIL_CHECK(impl_->recorded && end.impl_->recorded, Error,
              "[Event.elapsed_time] both events must be recorded before calculating elapsed time");
  ANVIL_CHECK(impl_->device == end.impl_->device, DeviceError, "[Event.elapsed_time] events are on different devices: ",
              impl_->device.str(), " and ", end.impl_->device.str());
  if (impl_->device.is_cpu())
    return std::chrono::duration<float, std::milli>(end.impl_->host_time - impl_->host_time).count();
  ANVIL_CHECK(impl_->timing && end.impl_->timing, Error,
              "[Event.elapsed_time] both events must be created with enable_timing=true");
  return cuda_backend::event_elapsed_ms(impl_->cuda_event, end.impl_->cuda_event);
}

}  // namespace anvil
