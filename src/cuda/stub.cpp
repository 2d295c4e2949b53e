// Built instead of the CUDA backend when ANVIL_CUDA is OFF: every CUDA entry point throws
// DeviceError, availability queries say why CUDA is missing.
#include "anvil/cuda.h"
#include "core/kernels/all.h"

namespace anvil {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(detail::cat_message("[", what, "] anvil was built without CUDA"));
}
}  // namespace

namespace cuda_backend {
#define ANVIL_STUB_KERNEL(name, arg) \
  void name(arg) { no_cuda(#name); }
#define ANVIL_STUB_PLAN(name, arg) \
  FusedPlan name##_plan(arg) { no_cuda(#name); }
ANVIL_ALL_KERNELS(ANVIL_STUB_KERNEL)
ANVIL_ALL_FUSED(ANVIL_STUB_KERNEL)
ANVIL_ALL_FUSED(ANVIL_STUB_PLAN)
#undef ANVIL_STUB_KERNEL
#undef ANVIL_STUB_PLAN

std::shared_ptr<StorageImpl> allocate(Device, size_t) { no_cuda("allocate"); }
size_t conv_plan_cache_size() { return 0; }
void set_conv_plan_cache_capacity(size_t) {}
bool cudnn_is_available() { return false; }
void set_cudnn_enabled(bool) {}
bool cudnn_enabled() { return false; }
void set_cudnn_allow_fft_winograd(bool) {}
bool cudnn_allow_fft_winograd() { return false; }
void memcpy_to_device(void*, const void*, size_t, Device) { no_cuda("memcpy_to_device"); }
void memcpy_to_host(void*, const void*, size_t, Device) { no_cuda("memcpy_to_host"); }
void memcpy_device_to_device(void*, const void*, size_t, Device) { no_cuda("memcpy_device_to_device"); }
void record_stream(void*, const Stream&) { no_cuda("record_stream"); }
bool is_available() { return false; }
std::string unavailable_reason() { return "anvil was built without CUDA (configure with -DANVIL_CUDA=ON)"; }
int device_count() { return 0; }
cuda::DeviceProperties properties(int) { no_cuda("get_device_properties"); }
Stream default_stream(int) { no_cuda("default_stream"); }
Stream current_stream(int) { no_cuda("current_stream"); }
void set_current_stream(const Stream&) { no_cuda("set_stream"); }
Stream create_stream(int) { no_cuda("Stream.create"); }
void stream_synchronize(const Stream&) { no_cuda("Stream.synchronize"); }
bool stream_query(const Stream&) { no_cuda("Stream.query"); }
void device_synchronize(int) { no_cuda("synchronize"); }
void* event_create(int, bool) { no_cuda("Event"); }
void event_destroy(void*) {}
void event_record(void*, const Stream&) { no_cuda("Event.record"); }
void event_synchronize(void*) { no_cuda("Event.synchronize"); }
bool event_query(void*) { no_cuda("Event.query"); }
void event_wait(void*, const Stream&) { no_cuda("Event.wait"); }
float event_elapsed_ms(void*, void*) { no_cuda("Event.elapsed_time"); }
MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void empty_cache(int) {}
void record_memory_history(int, bool, size_t) { no_cuda("record_memory_history"); }
std::vector<MemoryEvent> memory_history(int) { no_cuda("memory_history"); }
}  // namespace cuda_backend

namespace cuda {
bool is_available() { return false; }
std::string unavailable_reason() { return cuda_backend::unavailable_reason(); }
int device_count() { return 0; }
bool built_with_cuda() { return false; }
DeviceProperties get_device_properties(int) { no_cuda("cuda::get_device_properties"); }

struct Graph::Impl {};
Graph::Graph() = default;
Graph::~Graph() = default;
void Graph::capture_begin() { no_cuda("cuda::Graph"); }
void Graph::capture_end() { no_cuda("cuda::Graph"); }
void Graph::replay() { no_cuda("cuda::Graph"); }
void Graph::reset() {}
}  // namespace cuda

}  // namespace anvil
