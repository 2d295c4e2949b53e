#pragma once
// The backend boundary. Each op family declares its POD params and kernel entry points in
// core/kernels/<family>.h (a list macro ANVIL_<FAMILY>_KERNELS, declared for both backends by
// ANVIL_DECLARE_KERNELS), so a family's change recompiles only what uses it; src/cpu implements
// anvil::cpu::*, src/cuda anvil::cuda_backend::*, and a build without CUDA gets throwing
// definitions of the latter from src/cuda/stub.cpp (core/kernels/all.h lists the families).
// Fused ops (ANVIL_DECLARE_FUSED) also declare NAME_plan(params): whether the backend runs those
// params as its fused kernel or the op must run its composition (anvil/plan.h). A backend's
// fused kernel is called only for params its plan answered Fused for.
// This header holds what every family shares: those macros, ANVIL_KERNEL / ANVIL_PLAN, and the
// CUDA runtime entry points behind memory, streams and events.
#include <cstddef>
#include <memory>
#include <string>

#include "anvil/cuda.h"
#include "anvil/memory.h"
#include "anvil/plan.h"
#include "anvil/profile.h"
#include "anvil/stream.h"
#include "anvil/tensor.h"
#include "core/params.h"

#define ANVIL_DECLARE_KERNEL_(name, arg) void name(arg);
#define ANVIL_DECLARE_PLAN_(name, arg) ::anvil::FusedPlan name##_plan(arg);
#define ANVIL_DECLARE_KERNELS(LIST)               \
  namespace cpu {                                 \
  LIST(ANVIL_DECLARE_KERNEL_)                     \
  }                                               \
  namespace cuda_backend {                        \
  LIST(ANVIL_DECLARE_KERNEL_)                     \
  }
#define ANVIL_DECLARE_FUSED(LIST)                 \
  ANVIL_DECLARE_KERNELS(LIST)                     \
  namespace cpu {                                 \
  LIST(ANVIL_DECLARE_PLAN_)                       \
  }                                               \
  namespace cuda_backend {                        \
  LIST(ANVIL_DECLARE_PLAN_)                       \
  }

namespace anvil {
namespace cuda_backend {
// Memory and copies between host and device. Device memory comes from the caching allocator
// on the current stream. memcpy_* are asynchronous on the current stream except where the
// host needs the bytes: memcpy_to_host waits for them.
std::shared_ptr<StorageImpl> allocate(Device device, size_t nbytes);
void memcpy_to_device(void* dst, const void* src, size_t nbytes, Device device);
void memcpy_to_host(void* dst, const void* src, size_t nbytes, Device device);
void memcpy_device_to_device(void* dst, const void* src, size_t nbytes, Device device);
void record_stream(void* ptr, const Stream& stream);

// Device runtime behind the public Stream / Event / memory / cuda:: API (src/core dispatches
// CPU devices itself and forwards CUDA devices here).
bool is_available();
std::string unavailable_reason();
int device_count();
cuda::DeviceProperties properties(int device);
Stream default_stream(int device);
Stream current_stream(int device);
void set_current_stream(const Stream& stream);
Stream create_stream(int device);
void stream_synchronize(const Stream& stream);
bool stream_query(const Stream& stream);
void device_synchronize(int device);
void* event_create(int device, bool enable_timing);
void event_destroy(void* event);
void event_record(void* event, const Stream& stream);
void event_synchronize(void* event);
bool event_query(void* event);
void event_wait(void* event, const Stream& stream);
float event_elapsed_ms(void* start, void* end);
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
void empty_cache(int device);
void record_memory_history(int device, bool enabled, size_t max_events);
std::vector<MemoryEvent> memory_history(int device);
}  // namespace cuda_backend

// Calls the backend of `device`: ANVIL_KERNEL(dev, reduce, params); timed per kernel name while
// anvil/profile.h's profiling is on.
#define ANVIL_KERNEL_CALL_(device, name, arg) \
  ((device).is_cpu() ? ::anvil::cpu::name(arg) : ::anvil::cuda_backend::name(arg))
#define ANVIL_KERNEL(device, name, arg)                                                                    \
  (::anvil::profile::enabled()                                                                             \
       ? ::anvil::profile::detail::timed(#name, (device), [&] { ANVIL_KERNEL_CALL_(device, name, arg); }) \
       : ANVIL_KERNEL_CALL_(device, name, arg))
// Asks the backend of `device` for a fused op's plan: ANVIL_PLAN(dev, moe_experts, params).
#define ANVIL_PLAN(device, name, arg) \
  ((device).is_cpu() ? ::anvil::cpu::name##_plan(arg) : ::anvil::cuda_backend::name##_plan(arg))

}  // namespace anvil
