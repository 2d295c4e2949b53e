// anvil bench: llama-bench's table for a checkpoint (-m) or a built-in shape with random weights
// (--shape): prompt processing of -p tokens in one prefill (ppP) and generation of -n tokens from
// position 0 through runtime::generate, greedy (tgN), -r timed repetitions after one warm-up, t/s
// as mean +- sample standard deviation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anvil/anvil.h"
#include "commands.h"
#include "runtime/config.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace anvil::cli {
namespace {

// One prefill of p tokens: seconds, the result read back.
double time_prompt(runtime::Model& m, const Tensor& ids) {
  const auto t0 = std::chrono::steady_clock::now();
  (void)m.forward(ids, 0).select(0, ids.size(0) - 1).to(kCPU);
  return seconds_since(t0);
}


// The persistent step's time per op, from `steps` profiled steps (positions 1..steps): per kind
// of op (the name without its layer), the sum over layers of busy time (first block ready to
// last block done) and of the gaps before it (previous op's last block done to this op's first
// block ready: the dependency's latency).
void print_trace(PersistentDecoder& dec, int steps) {
  std::vector<DecoderOpTime> mean;
  for (int s = 0; s < steps; ++s) {
    const std::vector<DecoderOpTime> t = dec.profile_step(1, 1 + s);
    if (mean.empty()) mean.assign(t.size(), DecoderOpTime{});
    for (size_t i = 0; i < t.size(); ++i) {
      mean[i].name = t[i].name;
      mean[i].start_us += t[i].start_us / steps;
      mean[i].end_us += t[i].end_us / steps;
      mean[i].wait_us += t[i].wait_us / steps;
      mean[i].prologue_us += t[i].prologue_us / steps;
      mean[i].work_us += t[i].work_us / steps;
      mean[i].stage_wait_us += t[i].stage_wait_us / steps;
    }
  }
  struct Kind {
    std::string name;
    int count = 0;
    double busy = 0, gap = 0, wait = 0, prologue = 0, work = 0, stages = 0;
  };
  std::vector<Kind> kinds;
  for (size_t i = 0; i < mean.size(); ++i) {
    std::string k = mean[i].name;
    if (k.rfind("layer ", 0) == 0) k = k.substr(k.find(' ', 6) + 1);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& x) { return x.name == k; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), Kind{k});
    ++it->count;
    it->busy += mean[i].end_us - mean[i].start_us;
    it->gap += mean[i].start_us - (i > 0 ? mean[i - 1].end_us : 0.0);
    it->wait += mean[i].wait_us;
    it->prologue += mean[i].prologue_us;
    it->work += mean[i].work_us;
    it->stages += mean[i].stage_wait_us;
  }
  std::printf("persistent step, %d profiled steps (mean): %.1f us from the first block's start to the last block's end\n",
              steps, mean.empty() ? 0.0 : mean.back().end_us);
  std::printf("(sums over the layers; busy: first block ready to last block done; gap: the op before's last block\n"
              "done to this op's first block ready; per-block means: waiting for inputs, prologue, its items (waiting\n"
              "for weights included), waiting for weights)\n");
  std::printf("| %-15s | %5s | %9s | %8s | %9s | %11s | %9s | %12s |\n", "op", "count", "busy us", "gap us", "wait us",
              "prologue us", "items us", "weights us");
  std::printf("| --------------- | ----- | --------- | -------- | --------- | ----------- | --------- | ------------ |\n");
  for (const Kind& k : kinds)
    std::printf("| %-15s | %5d | %9.1f | %8.1f | %9.1f | %11.1f | %9.1f | %12.1f |\n", k.name.c_str(), k.count, k.busy,
                k.gap, k.wait, k.prologue, k.work, k.stages);
}

}  // namespace

double read_ceiling_gbps(Device dev) {
  const int64_t n = dev.is_cuda() ? int64_t{1} << 28 : int64_t{1} << 26;
  const Tensor x = ones({n}, TensorOptions(kFloat32).device(dev));
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)sum(x).to(kCPU).item<float>();
    const double s = seconds_since(t0);
    if (i > 0 && s > 0) best = std::max(best, 4.0 * static_cast<double>(n) / s * 1e-9);
  }
  return best;
}

int cmd_bench(const BenchOptions& o) {
  const char* op = "[bench]";
  ANVIL_CHECK(o.model.empty() != o.shape.empty(), Error, op, o.model.empty() ? " give -m DIR or --shape NAME"
                                                                             : " give -m DIR or --shape NAME, not both");
  ANVIL_CHECK(o.p >= 0, Error, op, " -p must be >= 0 (0: no prompt test), got ", o.p);
  ANVIL_CHECK(o.n >= 0, Error, op, " -n must be >= 0 (0: no generation test), got ", o.n);
  ANVIL_CHECK(o.p + o.n > 0, Error, op, " -p and -n are both 0: nothing to measure");
  ANVIL_CHECK(o.reps >= 1, Error, op, " -r must be >= 1, got ", o.reps);
  ANVIL_CHECK(o.size.empty() && o.frames == 0 && !o.tiled && !o.encode && !o.profile, Error, op,
              " --size, --frames, --tiled, --encode and --profile are for --vae runs");
  if (!o.model.empty()) check_model_dir(o.model, op);
  if (!o.json.empty()) check_output_file(o.json, op, "--json");
  runtime::LoadOptions lo;
  lo.device = parse_device(o.device, op);
  const bool block_fp8 = set_dtype(o.dtype, lo, op);
  lo.allow_unread = o.allow_unread;
  set_progress(lo);
  lo.max_context = std::max<int64_t>(o.p, o.n + 1);  // tg: one prompt token, then n - 1 steps
  const runtime::ModelConfig preset = o.shape.empty() ? runtime::ModelConfig{} : runtime::preset_config(o.shape);
  std::unique_ptr<runtime::Model> model;
  std::string name;
  if (!o.shape.empty()) {
    const auto w = runtime::random_weights(lo, 0, block_fp8);
    model = runtime::build_model(preset, *w, lo);
    name = o.shape + " (random)";
  } else {
    model = runtime::load_model(o.model, lo);
    name = o.model;
  }
  const double gib = static_cast<double>(model->weight_bytes()) / 1073741824.0;
  const double params = static_cast<double>(model->parameters()) * 1e-9;
  const std::string backend = lo.device.is_cuda() ? "CUDA" : "CPU";
  Tensor ids = randint(0, model->config().vocab_size, {std::max<int64_t>(o.p, 1)}, TensorOptions(kInt64));
  struct Row {
    std::string test, path;  // path: the decode path of a tg row
    std::vector<double> tps;
  };
  std::vector<Row> rows;
  if (o.p > 0) rows.push_back({"pp" + std::to_string(o.p), "", {}});
  // tg: one row per decode path the model has (persistent, graph, eager), measured in the same run.
  const std::vector<std::string> paths = model->decode_paths();
  if (o.n > 0) {
    for (const std::string& path : paths)
      rows.push_back({"tg" + std::to_string(o.n) + (paths.size() > 1 ? " " + path : ""), path, {}});
  }
  // The read ceiling is measured before and after the runs, and the larger value counts: a VM or
  // a shared machine whose bandwidth changes during the run then understates the fraction rather
  // than inflating it.
  const double ceiling_before = o.n > 0 ? read_ceiling_gbps(lo.device) : 0.0;
  for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up
    for (Row& row : rows) {
      const bool pp = row.test[0] == 'p';
      double s = 0;
      if (pp) {
        s = time_prompt(*model, ids);
      } else {  // one prompt token, then n - 1 decode steps, each token the greedy sample of the last
        model->set_decode_path(row.path);
        runtime::GenerateOptions g;
        g.max_new_tokens = o.n;
        runtime::GenerateStats st;
        (void)runtime::generate(*model, {1}, g, {}, &st);
        s = st.prompt_seconds + st.decode_seconds;
      }
      if (r >= 0) row.tps.push_back(static_cast<double>(pp ? o.p : o.n) / s);
    }
  }
  std::printf("| %-28s | %9s | %8s | %-7s | %-16s | %18s |\n", "model", "size", "params", "backend", "test", "t/s");
  std::printf("| %s | %s | %s | %s | %s | %s |\n", std::string(28, '-').c_str(), std::string(9, '-').c_str(),
              std::string(8, '-').c_str(), std::string(7, '-').c_str(), std::string(16, '-').c_str(),
              std::string(18, '-').c_str());
  nlohmann::json out = nlohmann::json::array();
  for (const Row& row : rows) {
    double mean = 0, var = 0;
    for (double v : row.tps) mean += v / static_cast<double>(row.tps.size());
    for (double v : row.tps) var += (v - mean) * (v - mean) / std::max<double>(1.0, static_cast<double>(row.tps.size()) - 1);
    std::printf("| %-28s | %5.2f GiB | %6.2f B | %-7s | %-16s | %9.2f +- %6.2f |\n", name.c_str(), gib, params,
                backend.c_str(), row.test.c_str(), mean, std::sqrt(var));
    out.push_back({{"model", name}, {"size_gib", gib}, {"params_b", params}, {"backend", backend}, {"dtype", o.dtype.empty() ? "checkpoint" : o.dtype},
                   {"test", row.test}, {"decode_path", row.path}, {"tps_mean", mean}, {"tps_std", std::sqrt(var)}, {"tps", row.tps}});
  }
  // Generation against the read ceiling of this run: weight bytes read per token (the chosen
  // experts only) x t/s.
  for (Row& row : rows) {
    if (row.test[0] != 't') continue;
    double mean = 0;
    for (double v : row.tps) mean += v / static_cast<double>(row.tps.size());
    const double after = read_ceiling_gbps(lo.device), ceiling = std::max(ceiling_before, after);
    const double gbps = mean * static_cast<double>(model->decode_bytes()) * 1e-9;
    const double fraction = ceiling > 0 ? gbps / ceiling : 0.0;
    std::printf("%s: %.1f MB of weights per token, %.1f GB/s = %.3f of the %.1f GB/s read ceiling (measured before / "
                "after the runs: %.1f / %.1f GB/s)\n",
                row.test.c_str(), static_cast<double>(model->decode_bytes()) * 1e-6, gbps, fraction, ceiling,
                ceiling_before, after);
    out.push_back({{"test", row.test}, {"decode_bytes", model->decode_bytes()}, {"weights_gbps", gbps},
                   {"read_ceiling_gbps", ceiling}, {"read_ceiling_before_gbps", ceiling_before},
                   {"read_ceiling_after_gbps", after}, {"fraction_of_ceiling", fraction}});
  }
  if (o.trace) {
    PersistentDecoder* dec = model->persistent_decoder();
    ANVIL_CHECK(dec != nullptr, Error, op,
                " --trace needs the persistent decode path (a Qwen3 / Qwen3-MoE model with 16-bit or float8 "
                "e4m3 weights on a CUDA GPU of compute capability 9.0)");
    ANVIL_CHECK(lo.max_context > 8, Error, op, " --trace profiles positions 1..8: give -p or -n of at least 8");
    print_trace(*dec, 8);
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    ANVIL_CHECK(f.good(), Error, "[bench] cannot write ", o.json);
    f << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace anvil::cli
