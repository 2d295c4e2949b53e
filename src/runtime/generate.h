// Text generation over a Model: the prompt in one prefill, then one token per decode step, each
// sampled on the model's device (the only host read of a step is the sampled id).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "anvil/nn.h"
#include "runtime/model.h"

namespace anvil::runtime {

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

// New ids after `prompt` (non-empty). on_token(id) sees each new id as it is sampled; returning
// false ends generation there.
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
