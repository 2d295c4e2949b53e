// CUDA device runtime: availability, devices, streams (current stream per thread per device),
// events, memory and copies, the index error flag, and cuda::Graph.
#include "cuda/runtime.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "anvil/cuda.h"
#include "anvil/profile.h"
#include "core/kernels.h"
#include "cuda/allocator.h"

namespace anvil::cuda_backend {
namespace {

constexpr int kMaxDevices = 64;

struct Availability {
  bool ok = false;
  int count = 0;
  std::string reason;
};

std::string version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// Probed once: the answer cannot change while the process runs.
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    cudaGetLastError();
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (err == cudaSuccess && n > 0) {
      r.ok = true;
      r.count = n;
    } else if (err == cudaSuccess || err == cudaErrorNoDevice) {
      r.reason = "no CUDA device found (driver " + version_str(driver) + ")";
    } else if (err == cudaErrorInsufficientDriver && driver > 0) {
      r.reason = "driver too old for this build (driver " + version_str(driver) + ", runtime " +
                 version_str(runtime) + ")";
    } else if (err == cudaErrorInsufficientDriver || err == cudaErrorStubLibrary || driver == 0) {
      r.reason = "no NVIDIA driver found (libcuda.so.1 could not be loaded or is the toolkit's stub)";
    } else {
      r.reason = std::string("CUDA initialisation failed: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    }
    return r;
  }();
  return a;
}

void check_device(int device, const char* op) {
  const Availability& a = availability();
  ANVIL_CHECK(a.ok, DeviceError, op, " CUDA is not available: ", a.reason);
  ANVIL_CHECK(device >= 0 && device < a.count, DeviceError, op, " invalid CUDA device index ", device, " (",
              a.count, " device", a.count == 1 ? "" : "s", ")");
}

Stream make_default_stream(int device) { return Stream(Device(kCUDA, device), nullptr, 0); }

// The current stream of each device for this thread; unset slots mean the default stream.
thread_local std::array<Stream, kMaxDevices> t_current_stream;
thread_local std::array<bool, kMaxDevices> t_current_set{};

std::array<std::atomic<int64_t>, kMaxDevices> g_streams_created{};
std::array<std::atomic<int>, kMaxDevices> g_sm_count{};
std::array<std::atomic<int>, kMaxDevices> g_capability{};
std::array<std::atomic<int>, kMaxDevices> g_smem_optin{};

// A device attribute read once per device and kept in `slot`.
int cached_attribute(std::array<std::atomic<int>, kMaxDevices>& slot, int device, cudaDeviceAttr attr) {
  int n = slot[device].load(std::memory_order_relaxed);
  if (n == 0) {
    ANVIL_CUDA_CHECK("[cuda]", cudaDeviceGetAttribute(&n, attr, device));
    slot[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

std::once_flag g_flag_once;
volatile int* g_flag_host = nullptr;
int* g_flag_device = nullptr;

cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

// ---- helpers shared by the backend (runtime.h)

void throw_cuda_error(const char* op, cudaError_t err) {
  cudaGetLastError();  // clear a non-sticky error so later calls work
  std::string msg = detail::cat_message(op, " cuda error: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  if (err == cudaErrorMemoryAllocation) throw OutOfMemoryError(msg);
  throw DeviceError(msg);
}

DeviceGuard::DeviceGuard(int device) {
  int cur = -1;
  ANVIL_CUDA_CHECK("[cuda]", cudaGetDevice(&cur));
  if (cur != device) {
    ANVIL_CUDA_CHECK("[cuda]", cudaSetDevice(device));
    prev_ = cur;
  }
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) cudaSetDevice(prev_);
}

int device_of(const void* ptr) {
  if (device_count() == 1) return 0;
  if (ptr != nullptr) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) == cudaSuccess && attr.type != cudaMemoryTypeUnregistered &&
        attr.device >= 0)
      return attr.device;
    cudaGetLastError();
  }
  int cur = 0;
  ANVIL_CUDA_CHECK("[cuda]", cudaGetDevice(&cur));
  return cur;
}

int multiprocessor_count(int device) { return cached_attribute(g_sm_count, device, cudaDevAttrMultiProcessorCount); }

int max_shared_memory_optin(int device) {
  return cached_attribute(g_smem_optin, device, cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

int compute_capability(int device) {
  int cc = g_capability[device].load(std::memory_order_relaxed);
  if (cc == 0) {
    int major = 0, minor = 0;
    ANVIL_CUDA_CHECK("[cuda]", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    ANVIL_CUDA_CHECK("[cuda]", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    cc = major * 10 + minor;
    g_capability[device].store(cc, std::memory_order_relaxed);
  }
  return cc;
}

cudaStream_t native_stream(const Stream& stream) { return static_cast<cudaStream_t>(stream.native_handle()); }

KernelLaunch::KernelLaunch(int device, int)
    : device_(device),
      guard_(device),
      stream_(native_stream(current_stream(device))),
      sm_count_(multiprocessor_count(device)),
      max_blocks_(sm_count_ * (2048 / kThreads)) {}

unsigned KernelLaunch::blocks(int64_t work_items, int per_thread) const {
  int64_t items = (work_items + per_thread - 1) / per_thread;
  int64_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, max_blocks_));
}

void KernelLaunch::check(const char* op) const { ANVIL_CUDA_CHECK(op, cudaGetLastError()); }

int* index_error_flag() {
  std::call_once(g_flag_once, [] {
    // Allocated outside any capture in practice (allocate() calls this first); relaxed anyway.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    void* host = nullptr;
    cudaError_t err = cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable);
    void* dev = nullptr;
    if (err == cudaSuccess) err = cudaHostGetDevicePointer(&dev, host, 0);
    cudaThreadExchangeStreamCaptureMode(&mode);
    ANVIL_CUDA_CHECK("[index]", err);
    *static_cast<volatile int*>(host) = 0;
    g_flag_host = static_cast<volatile int*>(host);
    g_flag_device = static_cast<int*>(dev);
  });
  return g_flag_device;
}

void check_index_error_flag() {
  if (g_flag_host == nullptr || *g_flag_host == 0) return;
  *g_flag_host = 0;
  throw IndexError("[index] index out of range (detected on the device)");
}

// ---- device runtime (kernels.h)

bool is_available() { return availability().ok; }
std::string unavailable_reason() { return availability().reason; }
int device_count() { return availability().count; }

cuda::DeviceProperties properties(int device) {
  check_device(device, "[cuda::get_device_properties]");
  cudaDeviceProp p{};
  ANVIL_CUDA_CHECK("[cuda::get_device_properties]", cudaGetDeviceProperties(&p, device));
  cuda::DeviceProperties out;
  out.name = p.name;
  out.total_memory = static_cast<int64_t>(p.totalGlobalMem);
  out.multiprocessor_count = p.multiProcessorCount;
  out.major = p.major;
  out.minor = p.minor;
  out.l2_cache_size = p.l2CacheSize;
  cudaDriverGetVersion(&out.driver_version);
  cudaRuntimeGetVersion(&out.runtime_version);
  return out;
}

Stream default_stream(int device) {
  check_device(device, "[default_stream]");
  return make_default_stream(device);
}

Stream current_stream(int device) {
  check_device(device, "[current_stream]");
  return t_current_set[device] ? t_current_stream[device] : make_default_stream(device);
}

void set_current_stream(const Stream& stream) {
  int d = stream.device().index;
  check_device(d, "[set_stream]");
  t_current_stream[d] = stream;
  t_current_set[d] = true;
}

// Non-blocking: created streams do not serialise with the legacy default stream. Never
// destroyed, as Stream handles are plain copies with no owner.
Stream create_stream(int device) {
  check_device(device, "[Stream::create]");
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  ANVIL_CUDA_CHECK("[Stream::create]", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(Device(kCUDA, device), s, g_streams_created[device].fetch_add(1) + 1);
}

void stream_synchronize(const Stream& stream) {
  DeviceGuard guard(stream.device().index);
  ANVIL_CUDA_CHECK("[Stream::synchronize]", cudaStreamSynchronize(native_stream(stream)));
  check_index_error_flag();
}

bool stream_query(const Stream& stream) {
  DeviceGuard guard(stream.device().index);
  cudaError_t err = cudaStreamQuery(native_stream(stream));
  if (err == cudaErrorNotReady) return false;
  ANVIL_CUDA_CHECK("[Stream::query]", err);
  return true;
}

void device_synchronize(int device) {
  check_device(device, "[synchronize]");
  DeviceGuard guard(device);
  ANVIL_CUDA_CHECK("[synchronize]", cudaDeviceSynchronize());
  check_index_error_flag();
}

void* event_create(int device, bool enable_timing) {
  check_device(device, "[Event]");
  DeviceGuard guard(device);
  cudaEvent_t ev = nullptr;
  ANVIL_CUDA_CHECK("[Event]", cudaEventCreateWithFlags(&ev, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return ev;
}

// Runs in Event destructors: errors (e.g. at process exit) are dropped.
void event_destroy(void* event) {
  if (event != nullptr && cudaEventDestroy(as_event(event)) != cudaSuccess) cudaGetLastError();
}

void event_record(void* event, const Stream& stream) {
  DeviceGuard guard(stream.device().index);
  ANVIL_CUDA_CHECK("[Event::record]", cudaEventRecord(as_event(event), native_stream(stream)));
}

void event_synchronize(void* event) {
  ANVIL_CUDA_CHECK("[Event::synchronize]", cudaEventSynchronize(as_event(event)));
  check_index_error_flag();
}

bool event_query(void* event) {
  cudaError_t err = cudaEventQuery(as_event(event));
  if (err == cudaErrorNotReady) return false;
  ANVIL_CUDA_CHECK("[Event::query]", err);
  return true;
}

void event_wait(void* event, const Stream& stream) {
  DeviceGuard guard(stream.device().index);
  ANVIL_CUDA_CHECK("[Event::wait]", cudaStreamWaitEvent(native_stream(stream), as_event(event), 0));
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  ANVIL_CUDA_CHECK("[Event::elapsed_time]", cudaEventElapsedTime(&ms, as_event(start), as_event(end)));
  return ms;
}

MemoryStats memory_stats(int device) {
  check_device(device, "[memory_stats]");
  return allocator::stats(device);
}

void reset_peak_memory_stats(int device) {
  check_device(device, "[reset_peak_memory_stats]");
  allocator::reset_peak_stats(device);
}

void empty_cache(int device) {
  check_device(device, "[empty_cache]");
  allocator::empty_cache(device);
}

void record_memory_history(int device, bool enabled, size_t max_events) {
  check_device(device, "[record_memory_history]");
  allocator::record_history(device, enabled, max_events);
}

std::vector<MemoryEvent> memory_history(int device) {
  check_device(device, "[memory_history]");
  return allocator::history(device);
}

// ---- memory and copies

std::shared_ptr<StorageImpl> allocate(Device device, size_t nbytes) {
  int d = device.index;
  check_device(d, "[allocate]");
  if (nbytes == 0) return std::make_shared<StorageImpl>(nullptr, 0, device, std::function<void(void*)>());
  index_error_flag();  // set up before any kernel (and before any graph capture) needs it
  void* ptr = allocator::allocate(d, nbytes, native_stream(current_stream(d)));
  return std::make_shared<StorageImpl>(ptr, nbytes, device, [d](void* p) { allocator::free(d, p); });
}

// Pageable host memory: cudaMemcpyAsync itself waits for the stream before staging the bytes,
// and pinned memory may be reused by the caller once we return, so we wait for the copy.
void memcpy_to_device(void* dst, const void* src, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  KernelLaunch launch(device.index, 0);
  ANVIL_CUDA_CHECK("[copy_]", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, launch.stream()));
  ANVIL_CUDA_CHECK("[copy_]", cudaStreamSynchronize(launch.stream()));
}

// Waits for the current stream only: the bytes are ordered after the work that produced them.
// Small reads (a scalar, bincount's size, a sampled token) go through a pinned buffer: the copy
// engine writes it directly, where pageable memory is staged by the driver.
void memcpy_to_host(void* dst, const void* src, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  KernelLaunch launch(device.index, 0);
  constexpr size_t kStaged = 4096;
  static std::mutex mu;
  static void* staging = nullptr;  // shared by every device (portable), never freed
  if (nbytes <= kStaged) {
    std::lock_guard<std::mutex> lock(mu);
    if (staging == nullptr) ANVIL_CUDA_CHECK("[copy_]", cudaHostAlloc(&staging, kStaged, cudaHostAllocPortable));
    ANVIL_CUDA_CHECK("[copy_]", cudaMemcpyAsync(staging, src, nbytes, cudaMemcpyDeviceToHost, launch.stream()));
    ANVIL_CUDA_CHECK("[copy_]", cudaStreamSynchronize(launch.stream()));
    std::memcpy(dst, staging, nbytes);
  } else {
    ANVIL_CUDA_CHECK("[copy_]", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, launch.stream()));
    ANVIL_CUDA_CHECK("[copy_]", cudaStreamSynchronize(launch.stream()));
  }
  check_index_error_flag();
}

// cudaMemcpyDefault: peer copies between devices go through unified addressing.
void memcpy_device_to_device(void* dst, const void* src, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  KernelLaunch launch(device.index, 0);
  ANVIL_CUDA_CHECK("[copy_]", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, launch.stream()));
}

void record_stream(void* ptr, const Stream& stream) {
  if (ptr != nullptr) allocator::record_stream(ptr, stream);
}

}  // namespace anvil::cuda_backend

// ---- public anvil::cuda API

namespace anvil::cuda {

bool is_available() { return cuda_backend::is_available(); }
std::string unavailable_reason() { return cuda_backend::unavailable_reason(); }
int device_count() { return cuda_backend::device_count(); }
bool built_with_cuda() { return true; }
DeviceProperties get_device_properties(int device) { return cuda_backend::properties(device); }

struct Graph::Impl {
  int device = -1;
  cudaStream_t capture_stream = nullptr;
  unsigned long long capture_id = 0;
  uint64_t pool = 0;
  bool capturing = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t last_replay = nullptr;  // recorded after each replay; reset() waits for it
  bool replayed = false;
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}

Graph::~Graph() {
  try {
    reset();
  } catch (...) {
    // A destructor cannot report; reset() already released what it could.
  }
}

void Graph::capture_begin() {
  using namespace cuda_backend;
  Impl& g = *impl_;
  ANVIL_CHECK(is_available(), DeviceError, "[cuda::Graph] CUDA is not available: ", unavailable_reason());
  ANVIL_CHECK(!g.capturing && g.exec == nullptr, DeviceError,
              "[cuda::Graph] capture_begin: the graph already holds a capture; call reset() first");
  ANVIL_CHECK(!profile::enabled(), Error,
              "[cuda::Graph] capture_begin: kernel profiling is on (its timing events would join the graph); "
              "profile::set_enabled(false) first");
  int device = 0;
  ANVIL_CUDA_CHECK("[cuda::Graph]", cudaGetDevice(&device));
  Stream s = current_stream(device);
  ANVIL_CHECK(s.native_handle() != nullptr, DeviceError,
              "[cuda::Graph] capture on the default stream is not allowed; use a StreamGuard with Stream::create(...)");
  DeviceGuard guard(device);
  g.device = device;
  g.capture_stream = native_stream(s);
  g.pool = allocator::create_pool(device);
  cudaError_t err = cudaStreamBeginCapture(g.capture_stream, cudaStreamCaptureModeThreadLocal);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (err == cudaSuccess) err = cudaStreamGetCaptureInfo(g.capture_stream, &status, &g.capture_id);
  if (err != cudaSuccess) {
    allocator::release_pool(device, g.pool);
    g.pool = 0;
    throw_cuda_error("[cuda::Graph] capture_begin", err);
  }
  allocator::begin_capture(device, g.pool, g.capture_id);
  g.capturing = true;
}

void Graph::capture_end() {
  using namespace cuda_backend;
  Impl& g = *impl_;
  ANVIL_CHECK(g.capturing, DeviceError, "[cuda::Graph] capture_end without capture_begin");
  DeviceGuard guard(g.device);
  g.capturing = false;
  cudaError_t err = cudaStreamEndCapture(g.capture_stream, &g.graph);
  allocator::end_capture(g.device, g.capture_id);
  if (err == cudaSuccess) err = cudaGraphInstantiate(&g.exec, g.graph, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    reset();
    throw_cuda_error("[cuda::Graph] capture_end", err);
  }
}

void Graph::replay() {
  using namespace cuda_backend;
  Impl& g = *impl_;
  ANVIL_CHECK(g.exec != nullptr, DeviceError, "[cuda::Graph] replay: nothing was captured");
  DeviceGuard guard(g.device);
  cudaStream_t stream = native_stream(current_stream(g.device));
  ANVIL_CUDA_CHECK("[cuda::Graph] replay", cudaGraphLaunch(g.exec, stream));
  if (g.last_replay == nullptr)
    ANVIL_CUDA_CHECK("[cuda::Graph] replay", cudaEventCreateWithFlags(&g.last_replay, cudaEventDisableTiming));
  ANVIL_CUDA_CHECK("[cuda::Graph] replay", cudaEventRecord(g.last_replay, stream));
  g.replayed = true;
}

// Waits for the last replay before its memory returns to the cache (a host sync, by design:
// reset is not an op and the pool must not be reused under a running graph).
void Graph::reset() {
  using namespace cuda_backend;
  Impl& g = *impl_;
  if (g.device < 0) return;
  DeviceGuard guard(g.device);
  if (g.capturing) {
    cudaGraph_t discarded = nullptr;
    if (cudaStreamEndCapture(g.capture_stream, &discarded) == cudaSuccess && discarded) cudaGraphDestroy(discarded);
    cudaGetLastError();
    allocator::end_capture(g.device, g.capture_id);
    g.capturing = false;
  }
  cudaError_t err = cudaSuccess;
  if (g.replayed) err = cudaEventSynchronize(g.last_replay);
  if (g.last_replay) cudaEventDestroy(g.last_replay);
  if (g.exec) cudaGraphExecDestroy(g.exec);
  if (g.graph) cudaGraphDestroy(g.graph);
  if (g.pool) allocator::release_pool(g.device, g.pool);
  cudaGetLastError();
  g = Impl();
  ANVIL_CUDA_CHECK("[cuda::Graph] reset", err);
}

}  // namespace anvil::cuda
