#pragma once
// The backend boundary: the entry points every backend implements, listed once.
// src/cpu implements anvil::cpu::*, src/cuda implements anvil::cuda_backend::*; a build without
// CUDA gets throwing definitions of the latter from src/cuda/stub.cpp.
#include <cstddef>
#include <memory>

#include <string>

#include "anvil/cuda.h"
#include "anvil/memory.h"
#include "anvil/stream.h"
#include "anvil/tensor.h"
#include "core/params.h"

#define ANVIL_BACKEND_KERNELS(X)                       \
  X(copy, const ElementwiseParams&)                  \
  X(fill, const ElementwiseParams&)                  \
  X(unary, const ElementwiseParams&)                 \
  X(binary, const ElementwiseParams&)                \
  X(where, const ElementwiseParams&)                 \
  X(clamp, const ElementwiseParams&)                 \
  X(reduce, const ReduceParams&)                     \
  X(index_select, const IndexSelectParams&)          \
  X(gather, const GatherParams&)                     \
  X(scatter, const GatherParams&)                    \
  X(bmm, const BmmParams&)                           \
  X(random, const RandomParams&)                     \
  X(gemv, const GemvParams&)                         \
  X(softmax, const SoftmaxParams&)                   \
  X(rms_norm, const RmsNormParams&)                  \
  X(silu_mul, const SiluMulParams&)                  \
  X(rope, const RopeParams&)                         \
  X(qk_norm_rope_cache, const QkNormRopeCacheParams&) \
  X(topk, const TopkParams&)                         \
  X(sample, const SampleParams&)                     \
  X(scaled_mm, const ScaledMmParams&)                \
  X(grouped_mm, const GroupedMmParams&)              \
  X(moe_route, const MoeRouteParams&)                \
  X(moe_router, const MoeRouterParams&)              \
  X(moe_combine, const MoeCombineParams&)            \
  X(moe_experts, const MoeExpertsParams&)            \
  X(attention, const AttentionParams&)                \
  X(cache_write, const CacheWriteParams&)            \
  X(cache_prefetch, const PrefetchParams&)

namespace anvil {

#define ANVIL_DECLARE_KERNEL(name, arg) void name(arg);
namespace cpu {
ANVIL_BACKEND_KERNELS(ANVIL_DECLARE_KERNEL)
}
namespace cuda_backend {
ANVIL_BACKEND_KERNELS(ANVIL_DECLARE_KERNEL)

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
}  // namespace cuda_backend
#undef ANVIL_DECLARE_KERNEL

// Calls the backend of `device`: ANVIL_KERNEL(dev, reduce, params).
#define ANVIL_KERNEL(device, name, arg) \
  ((device).is_cpu() ? ::anvil::cpu::name(arg) : ::anvil::cuda_backend::name(arg))

}  // namespace anvil
