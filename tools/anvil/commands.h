// The CLI's commands beyond info / bench-ops: options structs filled by CLI11 in main.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "anvil/dtype.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace anvil::cli {

struct TokenizeOptions {
  std::string tokenizer, text, text_file;
};
struct DetokenizeOptions {
  std::string tokenizer, ids;
  bool skip_special = false;
};

struct LogitsOptions {
  std::string model, ids, mode = "prefill", device = "cpu", dtype = "float32", out;
  bool allow_unread = false;
};

struct RunOptions {
  std::string model, prompt = "The capital of France is", tokenizer, device = "cpu", dtype;
  bool allow_unread = false;
  int64_t n = 64, context = 0;
  runtime::SamplingRequest sampling;  // --temp, --top-k, --top-p as given; empty: the checkpoint's
  uint64_t seed = 0;
  bool chat = false, no_think = false;
  std::string system;
};

struct BenchOptions {
  std::string model, shape, device = "cpu", dtype, json;
  bool allow_unread = false;
  int64_t p = 512, n = 128;
  int reps = 5;
  // --vae NAME: a VAE preset's decode (and --encode) with random weights instead (vae.cpp)
  std::string vae, size;
  int64_t frames = 0;
  bool tiled = false, encode = false, profile = false;
  bool trace = false;  // LLMs: the persistent decode step's time per op (bench_model.cpp)
};

// anvil vae decode | encode | roundtrip (vae.cpp).
struct VaeOptions {
  std::string action, model, latents, input, out, device = "cpu", dtype = "float32";
  bool allow_unread = false, tiled = false, scaled = false, sample = false;
  int64_t tile_sample = 0, tile_latent = 0, tile_stride = 0;  // 0: the model's defaults
  double tile_overlap = 0.25;
  uint64_t seed = 0;
};

int cmd_tokenize(const TokenizeOptions& o);
int cmd_vae(const VaeOptions& o);
int cmd_bench_vae(const BenchOptions& o);
int cmd_bench(const BenchOptions& o);
int cmd_run(const RunOptions& o);
int cmd_logits(const LogitsOptions& o);
int cmd_detokenize(const DetokenizeOptions& o);
// "1,2,3", "1 2 3" or "[1, 2, 3]" -> ids; Error naming `op` on anything else.
std::vector<int32_t> parse_ids(const std::string& s, const char* op);
// The shipped data (data/qwen3-tokenizer): $ANVIL_DATA_DIR, else the source tree's data/.
std::string data_dir();
// The option checks before anything is read (options.cpp), each an Error "[op] OPTION ...":
// -m DIR is a folder holding config.json;
void check_model_dir(const std::string& dir, const char* op);
// a file to read exists and is not a folder;
void check_input_file(const std::string& path, const char* op, const char* option);
// a file to write has an existing folder;
void check_output_file(const std::string& path, const char* op, const char* option);
// --device is cpu, cuda or cuda:N, and that CUDA device is present.
Device parse_device(const std::string& s, const char* op);
// --dtype: empty (the checkpoint's: bfloat16, an FP8 checkpoint's float8 weights kept), bfloat16 /
// float16 / float32 (and short names; FP8 checkpoints dequantised at load), fp8 (bfloat16
// activations with float8 projection and expert weights: a checkpoint's own blocks, else row
// scales), or fp8-block (the checkpoint's; random weights of `bench --shape` in 128 x 128 blocks,
// the return value); Error naming `op` otherwise.
bool set_dtype(const std::string& s, runtime::LoadOptions& lo, const char* op);
// A loading progress bar on stderr when it is a terminal (nothing otherwise).
void set_progress(runtime::LoadOptions& lo);
// Seconds from t0 to now (steady clock).
double seconds_since(std::chrono::steady_clock::time_point t0);
// The device's read bandwidth now, GB/s: the best of 3 float32 sums over a buffer far past the
// caches (1 GiB on CUDA, 256 MiB on the CPU), after one warm-up.
double read_ceiling_gbps(Device dev);

}  // namespace anvil::cli
