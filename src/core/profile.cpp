// anvil/profile.h: timing events around kernel calls, summed per (kernel, device).
#include "anvil/profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "anvil/stream.h"

namespace anvil::profile {
namespace {

struct Pending {
  const char* kernel;
  Device device;
  Event start, end;
};

struct State {
  std::mutex mu;
  std::vector<Pending> pending;
  std::map<std::pair<std::string, std::string>, Entry> sums;  // by (kernel, device)

  // Waits for the pending events and adds their times (mu held).
  void flush() {
    for (Pending& p : pending) {
      p.end.synchronize();
      Entry& e = sums[{p.kernel, p.device.str()}];
      e.kernel = p.kernel;
      e.device = p.device;
      ++e.calls;
      e.ms += static_cast<double>(p.start.elapsed_time(p.end));
    }
    pending.clear();
  }
};

std::atomic<bool> g_on{false};

State& state() {
  static State s;
  return s;
}

}  // namespace

void set_enabled(bool on) { g_on.store(on); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

std::vector<Entry> report() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.flush();
  std::vector<Entry> out;
  for (const auto& kv : s.sums) out.push_back(kv.second);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return out;
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.flush();
  s.sums.clear();
}

namespace detail {

void timed(const char* kernel, Device device, const std::function<void()>& call) {
  Event start(device, true), end(device, true);
  start.record();
  call();
  end.record();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.pending.push_back({kernel, device, std::move(start), std::move(end)});
  if (s.pending.size() >= 4096) s.flush();  // bounds the live events
}

}  // namespace detail
}  // namespace anvil::profile
