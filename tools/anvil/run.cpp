// anvil run: stream a checkpoint's continuation of a prompt, then the speed (tok/s, GB/s of
// weights read per decode token, and the fraction of the device's read bandwidth measured
// right after).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "anvil/anvil.h"
#include "commands.h"
#include "runtime/generate.h"
#include "runtime/config.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

namespace anvil::cli {
int cmd_run(const RunOptions& o) {
  const bool demo = o.model.empty();
  const std::string tok_path = !o.tokenizer.empty() ? o.tokenizer
                               : demo ? data_dir() + "/qwen3-tokenizer/tokenizer.json"
                                      : (std::filesystem::path(o.model) / "tokenizer.json").string();
  const runtime::Tokenizer tok = runtime::Tokenizer::from_file(tok_path);
  runtime::LoadOptions lo;
  lo.device = Device(o.device);
  set_dtype(o.dtype, lo, "[run]");
  set_progress(lo);
  lo.max_context = o.context;
  const auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<runtime::Model> model;
  if (demo) {
    std::fprintf(stderr, "[run] no -m: the built-in demo model, a Qwen3-MoE shape (demo-moe) with RANDOM weights "
                         "(the text is noise; it shows the speed), and the Qwen3 tokenizer\n");
    const auto w = runtime::random_weights(lo, o.seed);
    model = runtime::build_model(runtime::preset_config("demo-moe"), *w, lo);
  } else {
    model = runtime::load_model(o.model, lo);
  }
  std::fprintf(stderr, "[run] %s (%s, %.1f MB of weights) ready in %.1f s\n", demo ? "demo-moe" : o.model.c_str(),
               model->config().model_type.c_str(), model->weight_bytes() / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  const bool chat = o.chat || !o.system.empty() || o.no_think;
  const std::string text = chat ? runtime::chat_prompt(o.prompt, {o.system, !o.no_think}) : o.prompt;
  const std::vector<int32_t> ids32 = tok.encode(text);
  ANVIL_CHECK(!ids32.empty(), Error, "[run] the prompt encodes to no tokens");
  std::vector<int64_t> prompt(ids32.begin(), ids32.end());
  runtime::GenerateOptions g;
  g.max_new_tokens = o.n;
  g.sampling = SamplingOptions{o.temp, o.top_k, o.top_p};
  g.seed = o.seed;
  g.stop_ids = model->config().eos_token_ids;
  if (chat) {
    const int32_t im_end = tok.token_id("<|im_end|>");
    if (im_end >= 0) g.stop_ids.push_back(im_end);
  }
  runtime::Tokenizer::Stream stream(tok, true);
  runtime::GenerateStats st;
  bool first = true;
  (void)runtime::generate(*model, prompt, g, [&](int64_t id) {
    if (first && !chat) std::fputs(o.prompt.c_str(), stdout);  // echoed once the prompt has run
    first = false;
    std::fputs(stream.push(static_cast<int32_t>(id)).c_str(), stdout);
    std::fflush(stdout);
    return true;
  }, &st);
  std::fputs(stream.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (st.context_full) std::fprintf(stderr, "[run] stopped: the context of %lld tokens is full\n", static_cast<long long>(model->max_context()));
  const double prompt_tps = st.prompt_tokens / st.prompt_seconds;
  std::fprintf(stderr, "[run] prompt: %lld tokens, %.1f tok/s\n", static_cast<long long>(st.prompt_tokens), prompt_tps);
  if (st.new_tokens > 1 && st.decode_seconds > 0) {
    const double tps = static_cast<double>(st.new_tokens - 1) / st.decode_seconds;
    const double gbps = tps * static_cast<double>(model->decode_bytes()) * 1e-9;
    const double ceiling = read_ceiling_gbps(lo.device);
    std::fprintf(stderr, "[run] decode: %lld tokens, %.1f tok/s, %.1f GB/s of weights (%.2f of the %.1f GB/s read ceiling)\n",
                 static_cast<long long>(st.new_tokens - 1), tps, gbps, gbps / ceiling, ceiling);
  }
  return 0;
}

}  // namespace anvil::cli
