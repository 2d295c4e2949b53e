#pragma once
// Host-side helpers shared by the CUDA backend's files: CUDA error -> anvil error, the device
// and stream a kernel launches on, launch sizes, and the device-side index error flag.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "anvil/error.h"
#include "anvil/stream.h"
#include "core/dispatch.h"

namespace anvil::cuda_backend {

// Clears the runtime's last error and throws OutOfMemoryError (cudaErrorMemoryAllocation) or
// DeviceError("[op] cuda error: <name>: <text>").
[[noreturn]] void throw_cuda_error(const char* op, cudaError_t err);

#define ANVIL_CUDA_CHECK(op, expr)                                            \
  do {                                                                        \
    cudaError_t anvil_cuda_err_ = (expr);                                     \
    if (anvil_cuda_err_ != cudaSuccess) ::anvil::cuda_backend::throw_cuda_error(op, anvil_cuda_err_); \
  } while (0)

// Makes `device` the calling thread's current CUDA device for the scope (no call when it
// already is, so the common single-GPU path costs one cudaGetDevice).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// The device that owns a device pointer (null: the current device). Free with one GPU;
// a cudaPointerGetAttributes call with several.
int device_of(const void* ptr);
int multiprocessor_count(int device);
// major * 10 + minor (90 for H100 / H200: the sm_90a kernels, wgmma, run only there).
int compute_capability(int device);
// Dynamic shared memory one block may opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize).
int max_shared_memory_optin(int device);
cudaStream_t native_stream(const Stream& stream);

// Everything a kernel launch needs, derived from one of its device pointers: that pointer's
// device made current, its current stream, and a grid size for grid-stride loops.
class KernelLaunch {
 public:
  static constexpr int kThreads = 256;
  explicit KernelLaunch(const void* ptr) : KernelLaunch(device_of(ptr), 0) {}
  KernelLaunch(int device, int /*tag*/);
  // Blocks for `work_items` items at `per_thread` items per thread, capped at what fills the
  // GPU (8 blocks of 256 per SM): the kernels loop over the rest.
  unsigned blocks(int64_t work_items, int per_thread = 1) const;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }
  int max_blocks() const { return max_blocks_; }  // 8 resident blocks of 256 per SM
  // Throws DeviceError naming `op` if the launch failed.
  void check(const char* op) const;

 private:
  int device_;
  DeviceGuard guard_;
  cudaStream_t stream_;
  int sm_count_;
  int max_blocks_;
};

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic dependent launch allowed: its
// blocks may start while the previous kernel in the stream drains (hiding the launch gap inside
// CUDA graphs), so the kernel must call cuda_device::pdl_wait() before it touches memory an
// earlier kernel uses. Throws DeviceError naming `op` if the launch fails.
template <typename... Params, typename... Args>
void launch_pdl(const char* op, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  ANVIL_CUDA_CHECK(op, cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// Blocks of `threads` threads and `smem` dynamic shared bytes resident at once on one SM (at
// least 1; 1 when the query fails, its error cleared).
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads, size_t smem) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  return n > 0 ? n : 1;
}

// Clusters of `cluster` blocks of `threads` threads and `smem` bytes that can be resident at
// once (0 when such a cluster cannot launch).
template <typename Kernel>
int max_clusters(Kernel kernel, int cluster, int threads, size_t smem) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// dispatch_arith_types / dispatch_real_types reject float8 (and complex) at run time but still
// instantiate their lambda for every dtype; kernels guard with these to skip dead instances.
template <typename T>
inline constexpr bool is_float8_v = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;
template <typename T>
inline constexpr bool is_arith_v = !is_float8_v<T>;
template <typename T>
inline constexpr bool is_real_arith_v = !is_float8_v<T> && !std::is_same_v<T, Complex64>;

// cudaMalloc and cudaEventCreate (and library handle creation, which allocates) are "potentially
// unsafe" during stream capture; callers that make such long-lived resources knowingly (they
// outlive the graph) relax the thread's capture mode for the scope.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Device address of the process-wide index error flag: kernels that meet an index out of
// range skip it and store 1 here. Host-mapped, so reading it after a synchronize needs no copy.
int* index_error_flag();
// Throws IndexError (and clears the flag) if a kernel set it; called after synchronizations.
void check_index_error_flag();

}  // namespace anvil::cuda_backend
