#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <utility>

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

Generation::Generation(Model& model, std::vector<int64_t> prompt, const GenerateOptions& o)
    : model_(&model), prompt_(std::move(prompt)), options_(o) {
  ANVIL_CHECK(!prompt_.empty(), Error, "[generate] the prompt has no tokens");
  ANVIL_CHECK(o.max_new_tokens >= 0, Error, "[generate] max_new_tokens must be >= 0, got ", o.max_new_tokens);
  const int64_t P = static_cast<int64_t>(prompt_.size());
  ANVIL_CHECK(P < model.max_context(), Error, "[generate] the prompt's ", P, " tokens fill the context of ",
              model.max_context(), " tokens (raise the context or shorten the prompt)");
  for (int64_t id : prompt_)
    ANVIL_CHECK(id >= 0 && id < model.config().vocab_size, IndexError, "[generate] prompt token ", id,
                " is outside the model's vocabulary of ", model.config().vocab_size,
                " (do the tokenizer and the model match?)");
  stats_.prompt_tokens = P;
}

std::optional<int64_t> Generation::next() {
  if (done_) return std::nullopt;
  if (!started_) {  // the prompt in one prefill
    started_ = true;
    const int64_t P = stats_.prompt_tokens;
    Tensor ids = empty({P}, TensorOptions(kInt64));
    std::copy(prompt_.begin(), prompt_.end(), ids.data_ptr<int64_t>());
    rng_ = sampler_state(options_.seed, model_->forward_device());
    t0_ = Clock::now();
    logits_ = model_->forward(ids, 0);
    pos_ = P;
    if (options_.max_new_tokens == 0) {  // the prompt only: its last row read back ends the timing
      (void)logits_.select(0, P - 1).to(kCPU);
      stats_.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
      done_ = true;
      return std::nullopt;
    }
  } else {  // the step of the id sampled last
    logits_ = model_->forward(full({1}, out_.back(), TensorOptions(kInt64)), pos_++);
  }
  const int64_t id =
      sample(logits_.select(0, logits_.size(0) - 1), options_.sampling, rng_).to(kCPU).item<int64_t>();
  if (out_.empty()) {
    stats_.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    t0_ = Clock::now();
  }
  out_.push_back(id);
  stats_.new_tokens = static_cast<int64_t>(out_.size());
  stats_.decode_seconds = out_.size() > 1 ? std::chrono::duration<double>(Clock::now() - t0_).count() : 0.0;
  if (std::find(options_.stop_ids.begin(), options_.stop_ids.end(), id) != options_.stop_ids.end()) {
    stats_.stopped = true;
    done_ = true;
  } else if (stats_.new_tokens >= options_.max_new_tokens) {
    done_ = true;
  } else if (pos_ >= model_->max_context()) {
    stats_.context_full = true;
    done_ = true;
  }
  return id;
}

std::vector<int64_t> generate(Model& model, const std::vector<int64_t>& prompt, const GenerateOptions& o,
                              const std::function<bool(int64_t)>& on_token, GenerateStats* stats) {
  Generation g(model, prompt, o);
  while (const std::optional<int64_t> id = g.next())
    if (on_token && !on_token(*id)) break;
  if (stats) *stats = g.stats();
  return g.tokens();
}

std::string chat_prompt(const std::string& user, const ChatOptions& o) {
  std::string s;
  if (!o.system.empty()) s += "<|im_start|>system\n" + o.system + "<|im_end|>\n";
  s += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  if (!o.thinking) s += "<think>\n\n</think>\n\n";
  return s;
}

}  // namespace anvil::runtime
