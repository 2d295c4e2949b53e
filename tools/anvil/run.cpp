// anvil run: stream a checkpoint's continuation of a prompt, then the speed (tok/s, GB/s of
// weights read per decode token, and the fraction of the device's read bandwidth measured
// right after).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "anvil/anvil.h"
#include "commands.h"
#include "runtime/config.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "runtime/quantization.h"
#include "runtime/tokenizer.h"

namespace anvil::cli {
namespace {

constexpr const char* kOp = "[run]";

// Every option, before anything is read.
void check_options(const RunOptions& o) {
  ANVIL_CHECK(o.n >= 0, Error, kOp, " -n must be >= 0 (0: the prompt only), got ", o.n);
  ANVIL_CHECK(o.context >= 0, Error, kOp, " --context must be >= 0 (0: min(max_position_embeddings, 4096)), got ",
              o.context);
  const runtime::SamplingRequest& s = o.sampling;
  if (s.temperature)
    ANVIL_CHECK(std::isfinite(*s.temperature) && *s.temperature >= 0, Error, kOp,
                " --temp must be finite and >= 0 (0: greedy), got ", *s.temperature);
  if (s.top_k) ANVIL_CHECK(*s.top_k >= 0, Error, kOp, " --top-k must be >= 0 (0: no top-k cut), got ", *s.top_k);
  if (s.top_p) ANVIL_CHECK(*s.top_p > 0 && *s.top_p <= 1, Error, kOp, " --top-p must be in (0, 1], got ", *s.top_p);
  if (!o.model.empty()) check_model_dir(o.model, kOp);
  if (!o.tokenizer.empty()) check_input_file(o.tokenizer, kOp, "--tokenizer");
  else if (!o.model.empty())
    ANVIL_CHECK(std::filesystem::is_regular_file(std::filesystem::path(o.model) / "tokenizer.json"), Error, kOp, " -m ",
                o.model, " holds no tokenizer.json (give one with --tokenizer FILE)");
  else
    check_input_file(data_dir() + "/qwen3-tokenizer/tokenizer.json", kOp, "the demo's tokenizer (ANVIL_DATA_DIR)");
}

// Why the choice is greedy, for the sampling line.
const char* greedy_reason(const runtime::SamplingChoice& c, const runtime::GenerationDefaults& d, bool demo) {
  using runtime::SamplingSource;
  if (c.temperature == SamplingSource::kGiven) return "--temp 0";
  if (c.temperature != SamplingSource::kCheckpoint)
    return demo ? "anvil's default for the demo model"
                : "anvil's default; the checkpoint has no generation_config.json sampling fields";
  if (!d.do_sample) return "generation_config.json has no do_sample, which transformers reads as false";
  return *d.do_sample ? "generation_config.json: temperature 0" : "generation_config.json: do_sample false";
}

const char* source_name(runtime::SamplingSource s, const char* flag) {
  if (s == runtime::SamplingSource::kGiven) return flag;
  return s == runtime::SamplingSource::kCheckpoint ? "generation_config.json" : "transformers' default";
}

// One stderr line: the settings in use and where each came from.
void print_sampling(const runtime::SamplingChoice& c, const runtime::GenerationDefaults& d, bool demo, uint64_t seed) {
  if (c.greedy()) {
    std::fprintf(stderr, "[run] sampling: greedy (%s)\n", greedy_reason(c, d, demo));
    return;
  }
  const double temp = c.options.temperature, top_p = c.options.top_p;
  const long long top_k = static_cast<long long>(c.options.top_k);
  const unsigned long long s = static_cast<unsigned long long>(seed);
  if (c.temperature == c.top_k && c.top_k == c.top_p) {
    const char* from = c.temperature == runtime::SamplingSource::kGiven        ? "from --temp, --top-k, --top-p"
                       : c.temperature == runtime::SamplingSource::kCheckpoint ? "from generation_config.json"
                                                                               : "transformers' defaults";
    std::fprintf(stderr, "[run] sampling: temperature %g, top_k %lld, top_p %g (%s), seed %llu\n", temp, top_k, top_p,
                 from, s);
  } else {
    std::fprintf(stderr, "[run] sampling: temperature %g (%s), top_k %lld (%s), top_p %g (%s), seed %llu\n", temp,
                 source_name(c.temperature, "--temp"), top_k, source_name(c.top_k, "--top-k"), top_p,
                 source_name(c.top_p, "--top-p"), s);
  }
}

}  // namespace

int cmd_run(const RunOptions& o) {
  check_options(o);
  runtime::LoadOptions lo;
  lo.device = parse_device(o.device, kOp);
  set_dtype(o.dtype, lo, kOp);
  lo.allow_unread = o.allow_unread;
  set_progress(lo);
  lo.max_context = o.context;
  const bool demo = o.model.empty();
  if (demo)
    std::fprintf(stderr, "[run] no -m: the built-in demo model, a Qwen3-MoE shape (demo-moe) with RANDOM weights "
                         "(the text is noise; it shows the speed), and the Qwen3 tokenizer\n");
  // The config before the weights: its errors and the sampling line come first.
  const runtime::ModelConfig config = demo ? runtime::preset_config("demo-moe") : runtime::load_config(o.model);
  const runtime::SamplingChoice sampling = runtime::choose_sampling(config.generation, o.sampling);
  print_sampling(sampling, config.generation, demo, o.seed);

  const std::string tok_path = !o.tokenizer.empty() ? o.tokenizer
                               : demo ? data_dir() + "/qwen3-tokenizer/tokenizer.json"
                                      : (std::filesystem::path(o.model) / "tokenizer.json").string();
  const runtime::Tokenizer tok = runtime::Tokenizer::from_file(tok_path);
  const bool chat = o.chat || !o.system.empty() || o.no_think;
  const std::string text = chat ? runtime::chat_prompt(o.prompt, {o.system, !o.no_think}) : o.prompt;
  const std::vector<int32_t> ids32 = tok.encode(text);
  ANVIL_CHECK(!ids32.empty(), Error, "[run] the prompt encodes to no tokens");
  std::vector<int64_t> prompt(ids32.begin(), ids32.end());

  const auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<runtime::Model> model;
  if (demo) {
    const auto w = runtime::random_weights(lo, o.seed);
    model = runtime::build_model(config, *w, lo);
  } else {
    model = runtime::load_model(o.model, lo);
  }
  std::fprintf(stderr, "[run] %s (%s, %.1f MB of weights) ready in %.1f s\n", demo ? "demo-moe" : o.model.c_str(),
               model->config().model_type.c_str(), model->weight_bytes() / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  if (!demo) {
    const runtime::QuantizationConfig q = runtime::load_quantization(o.model);
    if (q.fp8)
      std::fprintf(stderr, "[run] weights: the checkpoint's float8 e4m3 in %lld x %lld blocks, %s\n",
                   static_cast<long long>(q.block[0]), static_cast<long long>(q.block[1]),
                   lo.fp8_weights == runtime::Fp8Weights::Dequantize ? "dequantised once at load (--dtype)"
                                                                     : "kept as float8 with their block scales");
  }
  runtime::GenerateOptions g;
  g.max_new_tokens = o.n;
  g.sampling = sampling.options;
  g.seed = o.seed;
  g.stop_ids = model->config().eos_token_ids;
  if (chat) {
    const int32_t im_end = tok.token_id("<|im_end|>");
    if (im_end >= 0) g.stop_ids.push_back(im_end);
  }
  runtime::Tokenizer::Stream stream(tok, true);
  runtime::GenerateStats st;
  bool echoed = false;
  auto echo_prompt = [&] {  // once the prompt has run
    if (!echoed && !chat) std::fputs(o.prompt.c_str(), stdout);
    echoed = true;
  };
  (void)runtime::generate(*model, prompt, g, [&](int64_t id) {
    echo_prompt();
    std::fputs(stream.push(static_cast<int32_t>(id)).c_str(), stdout);
    std::fflush(stdout);
    return true;
  }, &st);
  echo_prompt();  // -n 0
  std::fputs(stream.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (st.context_full) std::fprintf(stderr, "[run] stopped: the context of %lld tokens is full\n", static_cast<long long>(model->max_context()));
  if (st.prompt_seconds > 0)
    std::fprintf(stderr, "[run] prompt: %lld tokens, %.1f tok/s\n", static_cast<long long>(st.prompt_tokens),
                 static_cast<double>(st.prompt_tokens) / st.prompt_seconds);
  else
    std::fprintf(stderr, "[run] prompt: %lld tokens\n", static_cast<long long>(st.prompt_tokens));
  if (st.new_tokens > 1 && st.decode_seconds > 0) {
    const double tps = static_cast<double>(st.new_tokens - 1) / st.decode_seconds;
    const double gbps = tps * static_cast<double>(model->decode_bytes()) * 1e-9;
    const double ceiling = read_ceiling_gbps(lo.device);
    std::fprintf(stderr,
                 "[run] decode: %lld tokens, %.1f tok/s, %.1f GB/s of weights (%.2f of the %.1f GB/s read ceiling)\n",
                 static_cast<long long>(st.new_tokens - 1), tps, gbps, ceiling > 0 ? gbps / ceiling : 0.0, ceiling);
  }
  return 0;
}

}  // namespace anvil::cli
