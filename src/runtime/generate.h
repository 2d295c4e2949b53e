// Text generation over a Model: the prompt in one prefill, then one token per decode step, each
// sampled on the model's device (the only host read of a step is the sampled id).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "anvil/nn.h"
#include "runtime/config.h"
#include "runtime/model.h"

namespace anvil::runtime {

// The sampling values a user gave (CLI flags, a request's fields); empty: not given. Every front
// end checks their ranges itself, naming its own option (sample() checks them again).
struct SamplingRequest {
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
};

enum class SamplingSource {
  kGiven,                // the user's value
  kCheckpoint,           // generation_config.json's
  kTransformersDefault,  // a field the checkpoint leaves out: transformers' 1.0, 50, 1.0
  kAnvilDefault,         // nothing asks for sampling: greedy
};

struct SamplingChoice {
  SamplingOptions options;  // temperature 0: greedy
  SamplingSource temperature = SamplingSource::kAnvilDefault, top_k = SamplingSource::kAnvilDefault,
                 top_p = SamplingSource::kAnvilDefault;  // greedy: all three say why
  bool greedy() const { return options.temperature == 0; }
};

// Transformers' rule with the user's values on top: a given field overrides the checkpoint's;
// given temperature 0 is greedy; any other given field, or do_sample true, samples, with the
// checkpoint's value for each field not given, else transformers' default; otherwise (do_sample
// false or absent) greedy. A temperature of 0 from the checkpoint is greedy too.
SamplingChoice choose_sampling(const GenerationDefaults& checkpoint, const SamplingRequest& given);

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling{0.0, 0, 1.0};  // greedy by default
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
};

struct GenerateStats {
  int64_t prompt_tokens = 0, new_tokens = 0;
  // prompt_seconds: the prefill and the first sample; decode_seconds: the new_tokens - 1 steps after.
  double prompt_seconds = 0, decode_seconds = 0;
  bool stopped = false;                           // a stop id ended it
  bool context_full = false;                      // the model's context ended it
};

// One generation as a stepper: next() returns each new id as it is sampled, nullopt once it has
// ended (max_new_tokens reached, a stop id emitted, the context full). The prompt runs in the first
// next(); each later one runs the step of the id before it. The model's cache is the generation's
// from then on: another forward on the model (or another Generation) makes this one's later steps
// read the wrong cache, so the caller runs one at a time.
class Generation {
 public:
  // Validates prompt (non-empty, ids inside the vocabulary, shorter than the context) and options.
  Generation(Model& model, std::vector<int64_t> prompt, const GenerateOptions& options);
  std::optional<int64_t> next();
  bool done() const { return done_; }
  const std::vector<int64_t>& tokens() const { return out_; }  // the new ids so far
  const GenerateStats& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  Model* model_;
  std::vector<int64_t> prompt_, out_;
  GenerateOptions options_;
  GenerateStats stats_;
  Tensor logits_, rng_;
  Clock::time_point t0_;
  int64_t pos_ = 0;
  bool started_ = false, done_ = false;
};

// New ids after `prompt` (non-empty): a Generation run to its end. on_token(id) sees each new id
// as it is sampled; returning false ends generation there. max_new_tokens 0 runs the prompt only
// (prompt_seconds times it).
std::vector<int64_t> generate(Model& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              const std::function<bool(int64_t)>& on_token = {}, GenerateStats* stats = nullptr);

// Qwen3's chat template (its tokenizer_config.json, rendered with add_generation_prompt) for one
// user turn: an optional system turn, the user turn, the assistant header; thinking = false adds
// the empty think block that enable_thinking=False adds. Other templates are not interpreted.
struct ChatOptions {
  std::string system;     // empty: no system turn
  bool thinking = true;   // enable_thinking
};
std::string chat_prompt(const std::string& user, const ChatOptions& options = {});

}  // namespace anvil::runtime
