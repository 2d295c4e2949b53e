#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "anvil/anvil.h"

namespace anvil::runtime {

std::vector<int64_t> generate(Model& model, const std::vector<int64_t>& prompt, const GenerateOptions& o,
                              const std::function<bool(int64_t)>& on_token, GenerateStats* stats) {
  ANVIL_CHECK(!prompt.empty(), Error, "[generate] the prompt has no tokens");
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
