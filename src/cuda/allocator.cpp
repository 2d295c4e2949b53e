#include "cuda/allocator.h"

#include <array>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "anvil/error.h"
#include "core/memory_history.h"
#include "cuda/runtime.h"

namespace anvil::cuda_backend::allocator {
namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallSize = size_t{1} << 20;       // requests up to this share small segments
constexpr size_t kSmallSegment = size_t{2} << 20;
constexpr size_t kLargeSegment = size_t{20} << 20;   // shared by requests of 1 to 10 MiB
constexpr size_t kMinOwnSegment = size_t{10} << 20;  // from here a request gets its own segment
constexpr size_t kSegmentRound = size_t{2} << 20;
constexpr size_t kMaxRequest = size_t{1} << 56;
constexpr int kMaxDevices = 64;

struct Pool;

// A range of one segment (one cudaMalloc). Segments belong to one stream and one pool.
struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;
  Pool* pool = nullptr;
  bool small = false;        // carved from a small (2 MiB) segment
  bool allocated = false;
  bool in_free_set = false;  // free and reusable now
  int pending_events = 0;    // record_stream events still running
  Block* prev = nullptr;     // neighbours in the segment
  Block* next = nullptr;
  std::vector<Stream> stream_uses;
};

// Free blocks ordered by (stream, size, address): lower_bound finds the best fit of a stream.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return std::less<cudaStream_t>()(a->stream, b->stream);
    if (a->size != b->size) return a->size < b->size;
    return std::less<char*>()(a->ptr, b->ptr);
  }
};
using FreeSet = std::set<Block*, BlockOrder>;

struct Pool {
  uint64_t id = 0;  // 0: the device's default pool; others belong to a graph
  FreeSet small, large;
  int64_t segments = 0;
  bool released = false;  // its graph was reset: segments move to the default pool once free
  FreeSet& set_for(bool is_small) { return is_small ? small : large; }
};

struct PendingEvent {
  cudaEvent_t event;
  int device;
  Block* block;
};

size_t round_size(size_t n) { return (n + kRound - 1) / kRound * kRound; }

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinOwnSegment) return kLargeSegment;
  return (size + kSegmentRound - 1) / kSegmentRound * kSegmentRound;
}

std::string human_bytes(int64_t n) {
  char buf[64];
  double v = static_cast<double>(n);
  if (v >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof(buf), "%.2f GiB", v / (1024.0 * 1024 * 1024));
  else if (v >= 1024.0 * 1024) std::snprintf(buf, sizeof(buf), "%.2f MiB", v / (1024.0 * 1024));
  else std::snprintf(buf, sizeof(buf), "%.2f KiB", v / 1024.0);
  return buf;
}

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes, cudaStream_t stream, bool persistent) {
    std::lock_guard<std::mutex> lock(mu_);
    // Event queries are illegal on events captured into a graph; wait for the capture to end.
    if (capture_pools_.empty()) process_events();
    if (nbytes > kMaxRequest) {  // would overflow the rounding; no device has this much
      ++stats_.num_ooms;
      throw OutOfMemoryError(oom_message(nbytes));
    }
    Pool& pool = persistent ? default_pool_ : pool_for(stream);
    size_t size = round_size(nbytes);
    bool is_small = size <= kSmallSize;
    Block* b = take_free(pool.set_for(is_small), stream, size);
    if (b) ++stats_.num_cache_hits;
    else b = new_segment(pool, stream, size, is_small, nbytes);
    size_t rest = b->size - size;
    if (is_small ? rest >= kRound : rest > kSmallSize) split(b, size);
    b->allocated = true;
    active_.emplace(b->ptr, b);
    stats_.allocated_bytes += static_cast<int64_t>(b->size);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.num_allocs;
    history_.add(MemoryEvent::Kind::Alloc, b->size, b->ptr, stream);
    return b->ptr;
  }

  void free(void* ptr) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(ptr);
    if (it == active_.end()) return;
    Block* b = it->second;
    active_.erase(it);
    b->allocated = false;
    stats_.allocated_bytes -= static_cast<int64_t>(b->size);
    ++stats_.num_frees;
    history_.add(MemoryEvent::Kind::Free, b->size, b->ptr, b->stream);
    if (b->stream_uses.empty()) {
      free_block(b);
    } else if (!capture_pools_.empty()) {
      deferred_.push_back(b);  // events cannot be recorded and queried safely mid-capture
    } else {
      insert_events(b);
    }
  }

  bool record_stream(void* ptr, const Stream& stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(ptr);
    if (it == active_.end()) return false;
    Block* b = it->second;
    if (stream.device().index == device_ && native_stream(stream) == b->stream) return true;
    for (const Stream& s : b->stream_uses)
      if (s == stream) return true;
    b->stream_uses.push_back(stream);
    return true;
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void record_history(bool enabled, size_t max_events) {
    std::lock_guard<std::mutex> lock(mu_);
    history_.set(enabled, max_events);
  }

  std::vector<MemoryEvent> history() {
    std::lock_guard<std::mutex> lock(mu_);
    return history_.events();
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!capture_pools_.empty()) return;  // cudaFree would break the capture
    process_events();
    release_cached(true);
    release_cached(false);
  }

  uint64_t create_pool() {
    std::lock_guard<std::mutex> lock(mu_);
    auto pool = std::make_unique<Pool>();
    pool->id = next_pool_id_++;
    uint64_t id = pool->id;
    private_pools_.emplace(id, std::move(pool));
    return id;
  }

  void begin_capture(uint64_t pool, unsigned long long capture_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = private_pools_.find(pool);
    if (it != private_pools_.end()) capture_pools_[capture_id] = it->second.get();
  }

  void end_capture(unsigned long long capture_id) {
    std::lock_guard<std::mutex> lock(mu_);
    capture_pools_.erase(capture_id);
    if (!capture_pools_.empty()) return;
    std::vector<Block*> deferred;
    deferred.swap(deferred_);
    for (Block* b : deferred) {
      // A private block's other-stream uses were captured into the same graph, which replays
      // as a unit; the block only serves later captures into this pool.
      if (b->pool->id != 0) {
        b->stream_uses.clear();
        free_block(b);
      } else {
        insert_events(b);
      }
    }
  }

  void release_pool(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = private_pools_.find(id);
    if (it == private_pools_.end()) return;
    Pool* pool = it->second.get();
    for (auto c = capture_pools_.begin(); c != capture_pools_.end();)
      c = c->second == pool ? capture_pools_.erase(c) : std::next(c);
    pool->released = true;
    for (FreeSet* set : {&pool->small, &pool->large}) {
      for (auto b = set->begin(); b != set->end();) {
        Block* blk = *b;
        if (blk->prev || blk->next) { ++b; continue; }
        b = set->erase(b);
        blk->in_free_set = false;
        move_to_default_pool(blk);
      }
    }
    if (pool->segments == 0) private_pools_.erase(it);
  }

 private:
  Pool& pool_for(cudaStream_t stream) {
    if (capture_pools_.empty() || stream == nullptr) return default_pool_;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
      cudaGetLastError();
      return default_pool_;
    }
    if (status != cudaStreamCaptureStatusActive) return default_pool_;
    auto it = capture_pools_.find(id);
    return it == capture_pools_.end() ? default_pool_ : *it->second;
  }

  static Block* take_free(FreeSet& set, cudaStream_t stream, size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = set.lower_bound(&key);
    if (it == set.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    set.erase(it);
    b->in_free_set = false;
    return b;
  }

  void insert_free(Block* b) {
    b->in_free_set = true;
    b->pool->set_for(b->small).insert(b);
  }

  Block* new_segment(Pool& pool, cudaStream_t stream, size_t size, bool is_small, size_t nbytes) {
    size_t seg = segment_size(size);
    // Growing while a segment's worth of cache sits in free segments too small for this request
    // (or on other streams) is how reserved memory drifts away from peak use when sizes vary
    // (a model of this policy on tests/test_memory_stream.cpp's churn loop: 172 MB reserved for
    // a 45 MB peak without this step, 48 MB with it).
    // cudaFree waits for the device, so it happens only on this miss path, never mid-capture.
    if (capture_pools_.empty() && whole_free_bytes(is_small) >= seg) release_cached(is_small);
    void* p = nullptr;
    cudaError_t err = raw_malloc(&p, seg);
    if (err == cudaErrorMemoryAllocation && capture_pools_.empty()) {
      cudaGetLastError();
      process_events();
      release_cached(true);
      release_cached(false);
      err = raw_malloc(&p, seg);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ++stats_.num_ooms;
      throw OutOfMemoryError(oom_message(nbytes));
    }
    if (err != cudaSuccess) throw_cuda_error("[cuda allocator]", err);
    auto* b = new Block;
    b->ptr = static_cast<char*>(p);
    b->size = seg;
    b->stream = stream;
    b->pool = &pool;
    b->small = is_small;
    ++pool.segments;
    stats_.reserved_bytes += static_cast<int64_t>(seg);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    ++stats_.num_segments;
    history_.add(MemoryEvent::Kind::SegmentAlloc, seg, p, stream);
    return b;
  }

  cudaError_t raw_malloc(void** p, size_t n) {
    DeviceGuard guard(device_);
    RelaxedCaptureMode relaxed;
    return cudaMalloc(p, n);
  }

  std::string oom_message(size_t nbytes) {
    size_t free_b = 0, total_b = 0;
    {
      DeviceGuard guard(device_);
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    }
    return detail::cat_message(
        "[cuda allocator] out of memory: tried to allocate ", nbytes, " bytes (",
        human_bytes(static_cast<int64_t>(nbytes)), ") on cuda:", device_, "; anvil has ",
        human_bytes(stats_.allocated_bytes), " allocated and ", human_bytes(stats_.reserved_bytes),
        " reserved (", stats_.num_segments, " segments); the device has ",
        human_bytes(static_cast<int64_t>(free_b)), " free of ", human_bytes(static_cast<int64_t>(total_b)),
        " total");
  }

  void split(Block* b, size_t size) {
    auto* rest = new Block;
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->pool = b->pool;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    insert_free(rest);
  }

  // Returns a block to its pool, merged with free neighbours.
  void free_block(Block* b) {
    Pool* pool = b->pool;
    FreeSet& set = pool->set_for(b->small);
    if (b->prev && b->prev->in_free_set) {
      Block* p = b->prev;
      set.erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      delete b;
      b = p;
    }
    if (b->next && b->next->in_free_set) {
      Block* n = b->next;
      set.erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      delete n;
    }
    b->in_free_set = false;
    if (pool->released && !b->prev && !b->next) {
      move_to_default_pool(b);
      if (pool->segments == 0) private_pools_.erase(pool->id);
      return;
    }
    insert_free(b);
  }

  // A whole free segment of a reset graph's pool becomes ordinary cache.
  void move_to_default_pool(Block* b) {
    --b->pool->segments;
    b->pool = &default_pool_;
    ++default_pool_.segments;
    insert_free(b);
  }

  // One event per recorded stream; the block returns to its pool when all have completed.
  void insert_events(Block* b) {
    std::vector<Stream> uses;
    uses.swap(b->stream_uses);
    for (const Stream& s : uses) {
      int dev = s.device().index;
      cudaEvent_t ev = take_event(dev);
      bool ok = ev != nullptr;
      if (ok) {
        DeviceGuard guard(dev);
        ok = cudaEventRecord(ev, native_stream(s)) == cudaSuccess;
      }
      if (!ok) {
        // Could not order reuse after that stream (e.g. the runtime is shutting down): keep the
        // block out of the pool for good with an event that never completes.
        cudaGetLastError();
        ++b->pending_events;
        return;
      }
      pending_.push_back({ev, dev, b});
      ++b->pending_events;
    }
    if (b->pending_events == 0) free_block(b);
  }

  cudaEvent_t take_event(int dev) {
    auto& spare = spare_events_[dev];
    if (!spare.empty()) {
      cudaEvent_t ev = spare.back();
      spare.pop_back();
      return ev;
    }
    DeviceGuard guard(dev);
    RelaxedCaptureMode relaxed;
    cudaEvent_t ev = nullptr;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return nullptr;
    return ev;
  }

  void process_events() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      PendingEvent pe = pending_[i];
      cudaError_t e = cudaEventQuery(pe.event);
      if (e == cudaErrorNotReady) {
        pending_[kept++] = pe;
        continue;
      }
      if (e != cudaSuccess) cudaGetLastError();  // a failed stream does not use the block any more
      spare_events_[pe.device].push_back(pe.event);
      if (--pe.block->pending_events == 0) free_block(pe.block);
    }
    pending_.resize(kept);
  }

  size_t whole_free_bytes(bool is_small) const {
    size_t n = 0;
    for (const Block* b : is_small ? default_pool_.small : default_pool_.large)
      if (!b->prev && !b->next) n += b->size;
    return n;
  }

  // cudaFree of every whole, free segment of one kind in the default pool (the other pools
  // belong to live graphs).
  void release_cached(bool is_small) {
    DeviceGuard guard(device_);
    {
      FreeSet* set = is_small ? &default_pool_.small : &default_pool_.large;
      for (auto it = set->begin(); it != set->end();) {
        Block* b = *it;
        if (b->prev || b->next) { ++it; continue; }
        it = set->erase(it);
        if (cudaFree(b->ptr) != cudaSuccess) cudaGetLastError();
        history_.add(MemoryEvent::Kind::SegmentFree, b->size, b->ptr, b->stream);
        stats_.reserved_bytes -= static_cast<int64_t>(b->size);
        --stats_.num_segments;
        --default_pool_.segments;
        delete b;
      }
    }
  }

  const int device_;
  std::mutex mu_;
  Pool default_pool_;
  std::unordered_map<uint64_t, std::unique_ptr<Pool>> private_pools_;
  std::unordered_map<unsigned long long, Pool*> capture_pools_;  // capture id -> pool
  uint64_t next_pool_id_ = 1;
  std::unordered_map<void*, Block*> active_;
  std::vector<PendingEvent> pending_;
  std::unordered_map<int, std::vector<cudaEvent_t>> spare_events_;
  std::vector<Block*> deferred_;  // freed mid-capture with record_stream uses
  MemoryStats stats_;
  detail::MemoryHistory history_;
};

// Allocators are never destroyed: Storage deleters may run during static destruction.
std::mutex g_mu;
std::array<DeviceAllocator*, kMaxDevices> g_allocators{};

DeviceAllocator& get(int device) {
  ANVIL_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "[cuda allocator] invalid device index ", device);
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_allocators[device]) g_allocators[device] = new DeviceAllocator(device);
  return *g_allocators[device];
}

DeviceAllocator* find(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return device >= 0 && device < kMaxDevices ? g_allocators[device] : nullptr;
}

}  // namespace

void* allocate(int device, size_t nbytes, cudaStream_t stream, bool persistent) {
  return get(device).allocate(nbytes, stream, persistent);
}

void free(int device, void* ptr) noexcept {
  if (DeviceAllocator* a = find(device)) a->free(ptr);
}

// The block usually lives on the stream's device; look on the others when it does not.
void record_stream(void* ptr, const Stream& stream) {
  int dev = stream.device().index;
  if (DeviceAllocator* a = find(dev); a && a->record_stream(ptr, stream)) return;
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceAllocator* a = d == dev ? nullptr : find(d);
    if (a && a->record_stream(ptr, stream)) return;
  }
}

MemoryStats stats(int device) { return get(device).stats(); }
void reset_peak_stats(int device) { get(device).reset_peak(); }
void empty_cache(int device) { get(device).empty_cache(); }
void record_history(int device, bool enabled, size_t max_events) { get(device).record_history(enabled, max_events); }
std::vector<MemoryEvent> history(int device) { return get(device).history(); }
uint64_t create_pool(int device) { return get(device).create_pool(); }
void begin_capture(int device, uint64_t pool, unsigned long long capture_id) {
  get(device).begin_capture(pool, capture_id);
}
void end_capture(int device, unsigned long long capture_id) { get(device).end_capture(capture_id); }
void release_pool(int device, uint64_t pool) { get(device).release_pool(pool); }

}  // namespace anvil::cuda_backend::allocator
