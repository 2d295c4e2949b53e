#pragma once
// The event log behind anvil::record_memory_history, one per allocator; the allocator's own
// mutex guards it.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "anvil/memory.h"

namespace anvil::detail {

class MemoryHistory {
 public:
  void set(bool enabled, size_t max_events) {
    enabled_ = enabled && max_events > 0;
    max_events_ = max_events;
    if (enabled_) events_.clear();
  }
  void add(MemoryEvent::Kind kind, size_t bytes, const void* address, const void* stream = nullptr) {
    if (!enabled_) return;
    if (events_.size() == max_events_) events_.pop_front();
    events_.push_back({kind, static_cast<int64_t>(bytes), reinterpret_cast<uint64_t>(address),
                       reinterpret_cast<uint64_t>(stream)});
  }
  std::vector<MemoryEvent> events() const { return {events_.begin(), events_.end()}; }

 private:
  bool enabled_ = false;
  size_t max_events_ = 0;
  std::deque<MemoryEvent> events_;
};

}  // namespace anvil::detail
