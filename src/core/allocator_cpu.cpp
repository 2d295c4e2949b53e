// CPU allocator: 64-byte aligned (one cache line, the widest AVX-512 vector), with stats.
// Blocks of 1 MiB and more are rounded to 2 MiB and kept in a bounded cache on free: the
// system returns such blocks to the kernel, and faulting a fresh 256 MiB output back in cost
// 60% of an fp32 add's time on the 2-core Zen 5 dev machine. They are 2 MiB aligned and advised
// as transparent huge pages (host_alloc). Small blocks go to malloc.
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "anvil/memory.h"
#include "core/kernels.h"
#include "core/memory_history.h"
#include "core/util.h"

namespace anvil {
namespace {

constexpr size_t kLargeBlock = size_t{1} << 20;
constexpr size_t kLargeRound = size_t{2} << 20;
constexpr int64_t kCacheLimit = int64_t{2} << 30;  // cached (free) bytes kept at most

struct CpuStats {
  std::mutex mu;
  MemoryStats s;
  std::multimap<size_t, void*> cache;  // free large blocks by size
  int64_t cached_bytes = 0;
  detail::MemoryHistory history;
};
CpuStats& cpu_stats() {
  static CpuStats* stats = new CpuStats;  // leaked on purpose: storages may die during exit
  return *stats;
}

// Large blocks start on a 2 MiB boundary and ask for transparent huge pages (this machine's THP
// mode is madvise): the decode GEMVs stream gigabytes of weights, and with 4 KiB pages every 4 KiB
// of the stream is a TLB miss.
void* host_alloc(size_t rounded) {
  if (rounded < kLargeBlock) return std::aligned_alloc(64, rounded);
  void* p = std::aligned_alloc(kLargeRound, rounded);
#ifdef __linux__
  if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
#endif
  return p;
}

void cpu_free(void* p, size_t nbytes) {
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s.allocated_bytes -= static_cast<int64_t>(nbytes);
  st.s.num_frees += 1;
  st.history.add(MemoryEvent::Kind::Free, nbytes, p);
  if (nbytes >= kLargeBlock && static_cast<int64_t>(nbytes) <= kCacheLimit) {
    // Keep the most recently freed block: evict the largest cached ones until it fits.
    while (st.cached_bytes + static_cast<int64_t>(nbytes) > kCacheLimit) {
      auto victim = std::prev(st.cache.end());
      std::free(victim->second);
      st.cached_bytes -= static_cast<int64_t>(victim->first);
      st.s.reserved_bytes -= static_cast<int64_t>(victim->first);
      st.history.add(MemoryEvent::Kind::SegmentFree, victim->first, victim->second);
      st.s.num_segments -= 1;
      st.cache.erase(victim);
    }
    st.cache.emplace(nbytes, p);
    st.cached_bytes += static_cast<int64_t>(nbytes);
    return;
  }
  std::free(p);
  st.history.add(MemoryEvent::Kind::SegmentFree, nbytes, p);
  st.s.reserved_bytes -= static_cast<int64_t>(nbytes);
  st.s.num_segments -= 1;
}

void release_cache(CpuStats& st) {
  for (auto& [size, p] : st.cache) {
    std::free(p);
    st.history.add(MemoryEvent::Kind::SegmentFree, size, p);
    st.s.reserved_bytes -= static_cast<int64_t>(size);
    st.s.num_segments -= 1;
  }
  st.cache.clear();
  st.cached_bytes = 0;
}

}  // namespace

std::shared_ptr<StorageImpl> allocate_storage(Device device, size_t nbytes) {
  if (device.is_cuda()) return cuda_backend::allocate(device, nbytes);
  size_t rounded = (nbytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  if (rounded >= kLargeBlock) rounded = (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
  auto& st = cpu_stats();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.cache.find(rounded);
    if (it != st.cache.end()) {
      void* p = it->second;
      st.cache.erase(it);
      st.cached_bytes -= static_cast<int64_t>(rounded);
      st.s.allocated_bytes += static_cast<int64_t>(rounded);
      st.s.peak_allocated_bytes = std::max(st.s.peak_allocated_bytes, st.s.allocated_bytes);
      st.s.num_allocs += 1;
      st.s.num_cache_hits += 1;
      st.history.add(MemoryEvent::Kind::Alloc, rounded, p);
      return std::make_shared<StorageImpl>(p, nbytes, device, [rounded](void* q) { cpu_free(q, rounded); });
    }
  }
  void* p = host_alloc(rounded);
  if (!p && !st.cache.empty()) {
    std::lock_guard<std::mutex> lock(st.mu);
    release_cache(st);
    p = host_alloc(rounded);
  }
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
    st.history.add(MemoryEvent::Kind::SegmentAlloc, rounded, p);
    st.history.add(MemoryEvent::Kind::Alloc, rounded, p);
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
  if (device.is_cuda()) return cuda_backend::empty_cache(device.index);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  release_cache(st);
}

void record_memory_history(Device device, bool enabled, size_t max_events) {
  if (device.is_cuda()) return cuda_backend::record_memory_history(device.index, enabled, max_events);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.history.set(enabled, max_events);
}

std::vector<MemoryEvent> memory_history(Device device) {
  if (device.is_cuda()) return cuda_backend::memory_history(device.index);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.history.events();
}

std::string memory_stats_str(Device device) {
  MemoryStats s = memory_stats(device);
  return detail::cat_message("allocated ", s.allocated_bytes, " B (peak ", s.peak_allocated_bytes, " B), reserved ",
                             s.reserved_bytes, " B (peak ", s.peak_reserved_bytes, " B), ", s.num_allocs, " allocs, ",
                             s.num_frees, " frees, ", s.num_segments, " segments, ", s.num_ooms, " OOMs");
}

}  // namespace anvil
