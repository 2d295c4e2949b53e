#pragma once
// `anvil bench-ops`: op cases timed against a bandwidth ceiling measured in the same run.
#include <string>

namespace anvil::bench {

struct BenchOpsOptions {
  std::string device = "cpu";
  std::string filter;     // substring of case names; empty = all
  std::string json_path;  // write results as JSON when set
  int reps = 0;           // 0 = per-device default
};

int run_bench_ops(const BenchOpsOptions& opts);

}  // namespace anvil::bench
