#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "anvil/anvil.h"

namespace anvil::runtime {

SamplingChoice choose_sampling(const GenerationDefaults& checkpoint, const SamplingRequest& given) {
  SamplingChoice c;
  c.options = SamplingOptions{0.0, 0, 1.0};
  if (given.temperature && *given.temperature == 0) {
    c.temperature = c.top_k = c.top_p = SamplingSource::kGiven;
    return c;
  }
  const bool asked = given.temperature || given.top_k || given.top_p;
  if (!asked && !checkpoint.do_sample.value_or(false)) {
    c.temperature = c.top_k = c.top_p =
        checkpoint.has_sampling_fields() ? SamplingSource::kCheckpoint : SamplingSource::kAnvilDefault;
    return c;
  }
  // Each field: the given value, else the checkpoint's, else transformers' default.
  auto pick = [](const auto& mine, const auto& theirs, auto fallback, SamplingSource& source) {
    using S = SamplingSource;
    source = mine ? S::kGiven : theirs ? S::kCheckpoint : S::kTransformersDefault;
    return mine ? *mine : theirs ? *theirs : fallback;
  };
  c.options.temperature = pick(given.temperature, checkpoint.temperature, 1.0, c.temperature);
  c.options.top_k = pick(given.top_k, checkpoint.top_k, int64_t{50}, c.top_k);
  c.options.top_p = pick(given.top_p, checkpoint.top_p, 1.0, c.top_p);
  if (c.greedy()) {  // the checkpoint's temperature 0
    c.options = SamplingOptions{0.0, 0, 1.0};
    c.top_k = c.top_p = c.temperature;
  }
  return c;
}

std::vector<int64_t> generate(Model& model, const std::vector<int64_t>& prompt, const GenerateOptions& o,
                              const std::function<bool(int64_t)>& on_token, GenerateStats* stats) {
  ANVIL_CHECK(!prompt.empty(), Error, "[generate] the prompt has no tokens");
  ANVIL_CHECK(o.max_new_tokens >= 0, Error, "[generate] max_new_tokens must be >= 0, got ", o.max_new_tokens);
  const int64_t P = static_cast<int64_t>(prompt.size());
  ANVIL_CHECK(P < model.max_context(), Error, "[generate] the prompt's ", P, " tokens fill the context of ",
              model.max_context(), " tokens (raise the context or shorten the prompt)");
  for (int64_t id : prompt)
    ANVIL_CHECK(id >= 0 && id < model.config().vocab_size, IndexError, "[generate] prompt token ", id,
                " is outside the model's vocabulary of ", model.config().vocab_size,
                " (do the tokenizer and the model match?)");
  using clock = std::chrono::steady_clock;
  GenerateStats st;
  st.prompt_tokens = P;
  Tensor ids = empty({P}, TensorOptions(kInt64));
  std::copy(prompt.begin(), prompt.end(), ids.data_ptr<int64_t>());
  const Device dev = model.forward_device();
  const Tensor rng = sampler_state(o.seed, dev);
  std::vector<int64_t> out;
  auto t0 = clock::now();
  Tensor logits = model.forward(ids, 0);
  if (o.max_new_tokens == 0) {  // the prompt only: its last row read back ends the timing
    (void)logits.select(0, P - 1).to(kCPU);
    st.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  }
  int64_t pos = P;
  while (static_cast<int64_t>(out.size()) < o.max_new_tokens) {
    const int64_t next = sample(logits.select(0, logits.size(0) - 1), o.sampling, rng).to(kCPU).item<int64_t>();
    if (out.empty()) {
      st.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
      t0 = clock::now();
    }
    out.push_back(next);
    if (on_token && !on_token(next)) break;
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) {
      st.stopped = true;
      break;
    }
    if (static_cast<int64_t>(out.size()) >= o.max_new_tokens) break;
    if (pos >= model.max_context()) {
      st.context_full = true;
      break;
    }
    Tensor one = full({1}, next, TensorOptions(kInt64));
    logits = model.forward(one, pos++);
  }
  st.new_tokens = static_cast<int64_t>(out.size());
  st.decode_seconds = out.size() > 1 ? std::chrono::duration<double>(clock::now() - t0).count() : 0.0;
  if (stats) *stats = st;
  return out;
}

std::string chat_prompt(const std::string& user, const ChatOptions& o) {
  std::string s;
  if (!o.system.empty()) s += "<|im_start|>system\n" + o.system + "<|im_end|>\n";
  s += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  if (!o.thinking) s += "<think>\n\n</think>\n\n";
  return s;
}

}  // namespace anvil::runtime
