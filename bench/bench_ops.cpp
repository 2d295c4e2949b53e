// Op benchmarks: every case knows its bytes moved; each prints median time, GB/s and the
// fraction of a ceiling measured in the same run (copy bandwidth, and read bandwidth on CPU).
// CUDA: events around each eager call, plus CUDA-graph replay of 20 calls for kernel time;
// inputs smaller than 2x L2 are rotated over several copies so every call reads from DRAM.
#include "bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "anvil/anvil.h"

namespace anvil::bench {
namespace {

struct Case {
  std::string name;
  double bytes = 0;            // bytes read + written by one call
  std::string ceiling = "copy";  // which ceiling the fraction refers to
  std::function<void(int)> run;  // run(rotation index)
  int rotations = 1;
};

struct Result {
  std::string name;
  double eager_us = 0, graph_us = 0, bytes = 0, gbps = 0, fraction = 0;
  std::string ceiling;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median (or, for ceilings, minimum) microseconds of one call.
double time_eager(Device dev, const Case& c, int reps, bool best = false) {
  for (int w = 0; w < 2; ++w) c.run(w % c.rotations);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    if (dev.is_cpu()) {
      auto t0 = std::chrono::steady_clock::now();
      c.run(r % c.rotations);
      auto t1 = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    } else {
      Event a(dev, true), b(dev, true);
      a.record();
      c.run(r % c.rotations);
      b.record();
      b.synchronize();
      t.push_back(a.elapsed_time(b) * 1000.0);
    }
  }
  return best ? *std::min_element(t.begin(), t.end()) : median(t);
}

// CUDA kernel time: capture 20 calls in a graph, replay, divide (no launch gaps).
double time_graph(Device dev, const Case& c, int reps) {
  constexpr int kCalls = 20;
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  c.run(0);  // warm-up allocations outside the capture
  synchronize(dev);
  cuda::Graph g;
  g.capture_begin();
  for (int i = 0; i < kCalls; ++i) c.run(i % c.rotations);
  g.capture_end();
  g.replay();
  std::vector<double> t;
  for (int r = 0; r < std::max(3, reps / 4); ++r) {
    Event a(dev, true), b(dev, true);
    a.record(s);
    g.replay();
    b.record(s);
    b.synchronize();
    t.push_back(a.elapsed_time(b) * 1000.0 / kCalls);
  }
  return median(t);
}

int rotations_for(Device dev, double bytes_per_input) {
  if (dev.is_cpu()) return 1;
  double l2 = static_cast<double>(cuda::get_device_properties(dev.index).l2_cache_size);
  return std::max(1, static_cast<int>(std::ceil(2.0 * l2 / std::max(bytes_per_input, 1.0))));
}

std::vector<Case> make_cases(Device dev, int64_t n) {
  std::vector<Case> cases;
  auto opts = [&](DType t) { return TensorOptions(t).device(dev); };
  const double f32 = 4.0 * n;
  // CPU fractions are of the read bandwidth (stores cost DRAM bandwidth too, so read is the
  // strict ceiling); CUDA fractions are of device-to-device copy bandwidth, as PyTorch quotes.
  const std::string ceil = dev.is_cpu() ? "read" : "copy";
  int rot = rotations_for(dev, f32);

  auto inputs = [&](DType t, int count) {
    std::vector<Tensor> v;
    for (int i = 0; i < count; ++i) v.push_back(rand({n}, opts(t)));
    return v;
  };
  {
    auto src = inputs(kFloat32, rot);
    Tensor dst = empty({n}, opts(kFloat32));
    cases.push_back({"copy f32 " + std::to_string(n), 2 * f32, ceil, [=](int r) mutable { dst.copy_(src[r]); }, rot});
  }
  {
    auto src = inputs(kFloat32, rot);
    Tensor dst = empty({n}, opts(kBFloat16));
    cases.push_back({"cast f32->bf16 " + std::to_string(n), f32 + 2.0 * n, ceil, [=](int r) mutable { dst.copy_(src[r]); }, rot});
  }
  {
    auto src = inputs(kFloat32, rot);
    Tensor dst = empty({n}, opts(kFloat8_e4m3fn));
    cases.push_back({"cast f32->fp8e4m3 " + std::to_string(n), f32 + 1.0 * n, ceil, [=](int r) mutable { dst.copy_(src[r]); }, rot});
  }
  {
    auto src = inputs(kBFloat16, rot);
    Tensor dst = empty({n}, opts(kFloat32));
    cases.push_back({"cast bf16->f32 " + std::to_string(n), 2.0 * n + f32, ceil, [=](int r) mutable { dst.copy_(src[r]); }, rot});
  }
  {
    auto a = inputs(kFloat32, rot), b = inputs(kFloat32, rot);
    cases.push_back({"add f32 " + std::to_string(n), 3 * f32, ceil, [=](int r) { (void)add(a[r], b[r]); }, rot});
  }
  {
    auto a = inputs(kBFloat16, rot), b = inputs(kBFloat16, rot);
    cases.push_back({"add bf16 " + std::to_string(n), 3 * 2.0 * n, ceil, [=](int r) { (void)add(a[r], b[r]); }, rot});
  }
  {
    auto a = inputs(kFloat32, rot);
    cases.push_back({"sum f32 " + std::to_string(n), f32, ceil, [=](int r) { (void)sum(a[r]); }, rot});
  }
  {
    auto a = inputs(kBFloat16, rot);
    cases.push_back({"sum bf16 " + std::to_string(n), 2.0 * n, ceil, [=](int r) { (void)sum(a[r]); }, rot});
  }
  return cases;
}

}  // namespace

int run_bench_ops(const BenchOpsOptions& o) {
  Device dev(o.device);
  if (dev.is_cuda() && !cuda::is_available()) {
    std::fprintf(stderr, "[bench-ops] CUDA is not available: %s\n", cuda::unavailable_reason().c_str());
    return 2;
  }
  const int reps = o.reps > 0 ? o.reps : (dev.is_cpu() ? 15 : 50);
  std::printf("anvil bench-ops on %s (%s)\n", dev.str().c_str(),
              dev.is_cpu() ? ("SIMD " + cpu_simd_target()).c_str() : cuda::get_device_properties(dev.index).name.c_str());
  // Ceilings over 1 GiB buffers, far above any cache. They are measured again between cases
  // and the best of all runs is the ceiling: on a shared machine a single measurement can land
  // in a slow moment and make every fraction look too good.
  const int64_t ceil_n = int64_t{1} << 28;  // float32 elements
  Tensor ceil_a = rand({ceil_n}, TensorOptions(kFloat32).device(dev));
  Tensor ceil_b = empty({ceil_n}, TensorOptions(kFloat32).device(dev));
  double copy_gbps = 0, read_gbps = 0;
  auto measure_ceilings = [&](int runs) {
    Case copy{"ceiling copy", 8.0 * ceil_n, "copy", [&](int) { ceil_b.copy_(ceil_a); }, 1};
    double us = time_eager(dev, copy, runs, true);
    if (dev.is_cuda()) {
      // The driver's memcpy is the stricter ceiling when it beats our copy kernel.
      Case driver{"ceiling memcpy", 8.0 * ceil_n, "copy",
                  [&](int) { cuda::memcpy_device(ceil_b.raw_data_ptr(), ceil_a.raw_data_ptr(), ceil_b.nbytes(), dev); }, 1};
      us = std::min(us, time_eager(dev, driver, runs, true));
    }
    copy_gbps = std::max(copy_gbps, copy.bytes / us * 1e-3);
    Case read{"ceiling read", 4.0 * ceil_n, "read", [&](int) { (void)sum(ceil_a); }, 1};
    read_gbps = std::max(read_gbps, read.bytes / time_eager(dev, read, runs, true) * 1e-3);
  };
  std::printf("measuring ceilings over 1 GiB buffers, then the cases (ceilings re-measured between cases)\n");
  std::fflush(stdout);
  measure_ceilings(dev.is_cpu() ? 9 : 20);

  const int64_t n = dev.is_cpu() ? (int64_t{1} << 26) : (int64_t{1} << 28);
  std::vector<Case> cases = make_cases(dev, n);
  std::vector<Result> results;
  for (const Case& c : cases) {
    if (!o.filter.empty() && c.name.find(o.filter) == std::string::npos) continue;
    std::printf("  %s\n", c.name.c_str());
    std::fflush(stdout);
    Result r;
    r.name = c.name;
    r.bytes = c.bytes;
    r.ceiling = c.ceiling;
    r.eager_us = time_eager(dev, c, reps);
    if (dev.is_cuda()) r.graph_us = time_graph(dev, c, reps);
    double kernel_us = dev.is_cuda() ? r.graph_us : r.eager_us;
    r.gbps = c.bytes / kernel_us * 1e-3;
    results.push_back(r);
    measure_ceilings(3);
  }

  std::printf("\nceiling (best of all runs): copy %.1f GB/s (read+write%s), read %.1f GB/s (float32 sum)\n\n",
              copy_gbps, dev.is_cuda() ? ", best of copy_ and cudaMemcpyAsync" : "", read_gbps);
  std::printf("%-28s %12s %12s %10s %10s\n", "case", dev.is_cpu() ? "median us" : "eager us", dev.is_cpu() ? "" : "graph us",
              "GB/s", "of ceiling");
  for (Result& r : results) {
    r.fraction = r.gbps / (r.ceiling == "copy" ? copy_gbps : read_gbps);
    char graph[32] = "";
    if (dev.is_cuda()) std::snprintf(graph, sizeof graph, "%.1f", r.graph_us);
    std::printf("%-28s %12.1f %12s %10.1f %9.2f%s\n", r.name.c_str(), r.eager_us, graph, r.gbps, r.fraction,
                r.ceiling == "copy" ? " copy" : " read");
  }
  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["device"] = dev.str();
    j["ceiling_copy_gbps"] = copy_gbps;
    j["ceiling_read_gbps"] = read_gbps;
    for (const Result& r : results)
      j["cases"].push_back({{"name", r.name}, {"eager_us", r.eager_us}, {"graph_us", r.graph_us}, {"bytes", r.bytes},
                            {"gbps", r.gbps}, {"fraction", r.fraction}, {"ceiling", r.ceiling}});
    std::ofstream(o.json_path) << j.dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace anvil::bench
