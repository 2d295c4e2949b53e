// CPU allocator: 64-byte aligned (one cache line, the widest AVX-512 vector), with stats.
// It does not cache: the system allocator already does, and CPU memory is not the scarce kind.
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "anvil/memory.h"
#include "core/kernels.h"
#include "core/util.h"

namespace anvil {
namespace {

struct CpuStats {
  std::mutex mu;
  MemoryStats s;
};
CpuStats& cpu_stats() {
  static CpuStats* stats = new CpuStats;  // leaked on purpose: storages may die during exit
  return *stats;
}

void cpu_free(void* p, size_t nbytes) {
  std::free(p);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s.allocated_bytes -= static_cast<int64_t>(nbytes);
  st.s.reserved_bytes -= static_cast<int64_t>(nbytes);
  st.s.num_frees += 1;
  st.s.num_segments -= 1;
}

}  // namespace

std::shared_ptr<StorageImpl> allocate_storage(Device device, size_t nbytes) {
  if (device.is_cuda()) return cuda_backend::allocate(device, nbytes);
  size_t rounded = (nbytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  auto& st = cpu_stats();
  if (!p) {
    std::lock_guard<std::mutex> lock(st.mu);
    st.s.num_ooms += 1;
    throw OutOfMemoryError(detail::cat_message("[cpu allocator] out of memory: tried to allocate ", nbytes,
                                               " bytes; allocated ", st.s.allocated_bytes, " bytes"));
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.s.allocated_bytes += static_cast<int64_t>(rounded);
    st.s.reserved_bytes += static_cast<int64_t>(rounded);
    st.s.peak_allocated_bytes = std::max(st.s.peak_allocated_bytes, st.s.allocated_bytes);
    st.s.peak_reserved_bytes = std::max(st.s.peak_reserved_bytes, st.s.reserved_bytes);
    st.s.num_allocs += 1;
    st.s.num_segments += 1;
  }
  return std::make_shared<StorageImpl>(p, nbytes, device, [rounded](void* q) { cpu_free(q, rounded); });
}

MemoryStats memory_stats(Device device) {
  if (device.is_cuda()) return cuda_backend::memory_stats(device.index);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.s;
}

void reset_peak_memory_stats(Device device) {
  if (device.is_cuda()) return cuda_backend::reset_peak_memory_stats(device.index);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s.peak_allocated_bytes = st.s.allocated_bytes;
  st.s.peak_reserved_bytes = st.s.reserved_bytes;
}

void empty_cache(Device device) {
  if (device.is_cuda()) cuda_backend::empty_cache(device.index);
}

std::string memory_stats_str(Device device) {
  MemoryStats s = memory_stats(device);
  return detail::cat_message("allocated ", s.allocated_bytes, " B (peak ", s.peak_allocated_bytes, " B), reserved ",
                             s.reserved_bytes, " B (peak ", s.peak_reserved_bytes, " B), ", s.num_allocs, " allocs, ",
                             s.num_frees, " frees, ", s.num_segments, " segments, ", s.num_ooms, " OOMs");
}

}  // namespace anvil
