// Op benchmarks: every case knows its bytes moved; each prints median time, GB/s and the
// fraction of a ceiling measured in the same run (copy bandwidth, and read bandwidth on CPU);
// compute-bound cases print TFLOP/s against the mm of their dtype measured in the same run.
// CUDA: events around each eager call, plus CUDA-graph replay of 20 calls for kernel time;
// inputs are rotated over several copies so every call reads from DRAM, not cache.
#include "bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <vector>

#include "cases.h"

namespace anvil::bench {
namespace {

struct Result {
  std::string name, ceiling, group;
  double eager_us = 0, graph_us = 0, bytes = 0, gbps = 0, fraction = 0;
  nlohmann::json spec;
  double flops = 0;
  DType dtype = kFloat32;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median (or, for ceilings, minimum) microseconds of one call.
double time_eager(Device dev, const Runner& run, int reps, bool best = false) {
  // Warm-up: two calls, and on the CPU at least 20 ms of calls (a short case measured right after
  // the 1 GiB ceiling runs read 2.5-3.8x slow over 15 calls on the 2-vCPU VM: group_norm [1, 128,
  // 64, 64] 476 vs 125 us after 200).
  const auto w0 = std::chrono::steady_clock::now();
  for (int w = 0; w < 2 || (dev.is_cpu() && w < 1000 && std::chrono::steady_clock::now() - w0 < std::chrono::milliseconds(20));
       ++w)
    run(w);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    if (dev.is_cpu()) {
      auto t0 = std::chrono::steady_clock::now();
      run(r);
      auto t1 = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    } else {
      Event a(dev, true), b(dev, true);
      a.record();
      run(r);
      b.record();
      b.synchronize();
      t.push_back(a.elapsed_time(b) * 1000.0);
    }
  }
  return best ? *std::min_element(t.begin(), t.end()) : median(t);
}

// CUDA kernel time: capture 20 calls in a graph, replay, divide (no launch gaps).
double time_graph(Device dev, const Runner& run, int reps) {
  constexpr int kCalls = 20;
  Stream s = Stream::create(dev);
  StreamGuard guard(s);
  run(0);  // warm-up allocations outside the capture
  synchronize(dev);
  cuda::Graph g;
  g.capture_begin();
  for (int i = 0; i < kCalls; ++i) run(i);
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

// Empty matches all; "A|B" matches names containing A or B.
bool matches_filter(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  for (size_t begin = 0;;) {
    const size_t end = filter.find('|', begin);
    const std::string part = filter.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    if (end == std::string::npos) return false;
    begin = end + 1;
  }
}

}  // namespace

int run_bench_ops(const BenchOpsOptions& o) {
  Device dev(o.device);
  if (dev.is_cuda() && !cuda::is_available()) {
    std::fprintf(stderr, "[bench-ops] CUDA is not available: %s\n", cuda::unavailable_reason().c_str());
    return 2;
  }
  const int reps = o.reps > 0 ? o.reps : (dev.is_cpu() ? 15 : 50);
  std::printf("anvil bench-ops on %s (%s), %d threads\n", dev.str().c_str(),
              dev.is_cpu() ? ("SIMD " + cpu_simd_target()).c_str() : cuda::get_device_properties(dev.index).name.c_str(),
              get_num_threads());
  // Ceilings over 1 GiB buffers, far above any cache. They are measured again between cases
  // and the best of all runs is the ceiling: on a shared machine a single measurement can land
  // in a slow moment and make every fraction look too good.
  const int64_t ceil_n = int64_t{1} << 28;  // float32 elements
  Tensor ceil_a = rand({ceil_n}, TensorOptions(kFloat32).device(dev));
  Tensor ceil_b = empty({ceil_n}, TensorOptions(kFloat32).device(dev));
  double copy_gbps = 0, read_gbps = 0;
  auto measure_ceilings = [&](int runs) {
    double us = time_eager(dev, [&](int) { ceil_b.copy_(ceil_a); }, runs, true);
    if (dev.is_cuda()) {
      // The driver's memcpy is the stricter ceiling when it beats our copy kernel.
      Runner driver = [&](int) { cuda::memcpy_device(ceil_b.raw_data_ptr(), ceil_a.raw_data_ptr(), ceil_b.nbytes(), dev); };
      us = std::min(us, time_eager(dev, driver, runs, true));
    }
    copy_gbps = std::max(copy_gbps, 8.0 * ceil_n / us * 1e-3);
    read_gbps = std::max(read_gbps, 4.0 * ceil_n / time_eager(dev, [&](int) { (void)sum(ceil_a); }, runs, true) * 1e-3);
  };
  std::printf("measuring ceilings over 1 GiB buffers, then the cases (ceilings re-measured between cases)\n");
  std::fflush(stdout);
  measure_ceilings(dev.is_cpu() ? 9 : 20);

  std::vector<Case> cases = core_cases(dev);
  for (Case& c : decode_cases(dev)) cases.push_back(std::move(c));
  for (Case& c : moe_cases(dev)) cases.push_back(std::move(c));
  for (Case& c : pad_cases(dev)) cases.push_back(std::move(c));
  for (Case& c : release_cases(dev)) cases.push_back(std::move(c));
  for (Case& c : conv_cases(dev)) cases.push_back(std::move(c));
  for (Case& c : vision_cases(dev)) cases.push_back(std::move(c));
  for (Case& c : linalg_cases(dev)) cases.push_back(std::move(c));
  // GEMM ceilings in TFLOP/s per dtype, measured when a case needs one (square mm, the best of
  // every measurement): CUDA 8192 (float32: 4096, no TF32), CPU 1024.
  std::map<DType, double> gemm_tflops;
  auto measure_gemm = [&](DType t, int runs) {
    const int64_t n = dev.is_cpu() ? 1024 : t == kFloat32 || t == kFloat64 ? 4096 : 8192;
    const Tensor a = rand({n, n}, TensorOptions(t).device(dev)), b = rand({n, n}, TensorOptions(t).device(dev));
    const double us = time_eager(dev, [&](int) { (void)mm(a, b); }, runs, true);
    gemm_tflops[t] = std::max(gemm_tflops[t], 2.0 * static_cast<double>(n * n) * static_cast<double>(n) / us * 1e-6);
  };
  std::vector<Result> results;
  for (const Case& c : cases) {
    if (!matches_filter(c.name, o.filter)) continue;
    std::printf("  %s\n", c.name.c_str());
    std::fflush(stdout);
    Result r{c.name, c.ceiling, c.group, 0, 0, c.bytes, 0, 0, c.spec, c.flops, c.dtype};
    if (c.ceiling == "gemm") measure_gemm(c.dtype, gemm_tflops.count(c.dtype) ? 2 : 5);
    {
      Runner run = c.prepare();
      r.eager_us = time_eager(dev, run, reps);
      if (dev.is_cuda() && c.graphable) r.graph_us = time_graph(dev, run, reps);
    }
    r.gbps = c.bytes / (r.graph_us > 0 ? r.graph_us : r.eager_us) * 1e-3;  // no graph: its eager time
    results.push_back(r);
    measure_ceilings(dev.is_cpu() ? 2 : 3);
  }

  std::printf("\nceiling (best of all runs): copy %.1f GB/s (read+write%s), read %.1f GB/s (float32 sum)\n\n",
              copy_gbps, dev.is_cuda() ? ", best of copy_ and cudaMemcpyAsync" : "", read_gbps);
  for (const auto& [t, tf] : gemm_tflops) std::printf("gemm ceiling %s: %.2f TFLOP/s (square mm)\n", dtype_name(t), tf);
  std::printf("%-52s %10s %10s %9s %10s\n", "case", dev.is_cpu() ? "median us" : "eager us", dev.is_cpu() ? "" : "graph us",
              "GB/s", "of ceiling");
  std::map<std::string, std::pair<double, int>> group_log;  // group -> (sum of log fractions, count)
  for (Result& r : results) {
    const double us = r.graph_us > 0 ? r.graph_us : r.eager_us;
    const double tflops = r.flops / us * 1e-6;
    r.fraction = r.ceiling == "gemm" ? tflops / gemm_tflops[r.dtype] : r.gbps / (r.ceiling == "copy" ? copy_gbps : read_gbps);
    char graph[32] = "";
    if (dev.is_cuda()) std::snprintf(graph, sizeof graph, "%.2f", r.graph_us);
    if (r.ceiling == "gemm")
      std::printf("%-52s %10.2f %10s %6.2f TF %9.2f gemm %s\n", r.name.c_str(), r.eager_us, graph, tflops, r.fraction,
                  dtype_name(r.dtype));
    else
      std::printf("%-52s %10.2f %10s %9.1f %9.2f%s\n", r.name.c_str(), r.eager_us, graph, r.gbps, r.fraction,
                  r.ceiling == "copy" ? " copy" : " read");
    if (!r.group.empty()) {
      group_log[r.group].first += std::log(r.fraction);
      group_log[r.group].second += 1;
    }
  }
  for (const auto& [group, acc] : group_log)
    std::printf("\n%s: %d cases, geometric mean %.3f of the %s ceiling\n", group.c_str(), acc.second,
                std::exp(acc.first / acc.second), group == "conv" ? "gemm" : dev.is_cpu() ? "read" : "copy");
  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["device"] = dev.str();
    j["threads"] = get_num_threads();
    j["ceiling_copy_gbps"] = copy_gbps;
    j["ceiling_read_gbps"] = read_gbps;
    for (const auto& [t, tf] : gemm_tflops) j["ceiling_gemm_tflops"][dtype_name(t)] = tf;
    for (const Result& r : results)
      j["cases"].push_back({{"name", r.name}, {"eager_us", r.eager_us}, {"graph_us", r.graph_us}, {"bytes", r.bytes},
                            {"gbps", r.gbps}, {"fraction", r.fraction}, {"ceiling", r.ceiling}, {"group", r.group},
                            {"spec", r.spec}});
    std::ofstream(o.json_path) << j.dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace anvil::bench
