// A model folder's config.json (and generation_config.json) as one struct, in both the Hub's and
// transformers v5's field names (num_experts / num_local_experts, rope_theta /
// rope_parameters.rope_theta). Unknown architectures and missing fields are FormatErrors that
// name them; so are features the runtime does not implement (attention biases, sliding windows,
// rope scaling), rather than a silently different model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anvil::runtime {

// generation_config.json's sampling fields as the file gives them (empty: absent or null);
// choose_sampling (generate.h) merges them with the user's values.
struct GenerationDefaults {
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;

  bool has_sampling_fields() const {
    return do_sample.has_value() || temperature.has_value() || top_k.has_value() || top_p.has_value();
  }
};

struct ModelConfig {
  std::string model_type;  // "qwen3" | "qwen3_moe"
  std::string dtype;       // the checkpoint's "dtype" / "torch_dtype" ("bfloat16", ...; may be empty)
  int64_t hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0;
  int64_t head_dim = 0, intermediate_size = 0, vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  // Mixture of experts (qwen3_moe): layer l is sparse iff l is not in mlp_only_layers and
  // (l + 1) % decoder_sparse_step == 0.
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0, decoder_sparse_step = 1;
  bool norm_topk_prob = false;
  std::vector<int64_t> mlp_only_layers;
  std::vector<int64_t> eos_token_ids;  // generation_config.json's, else config.json's
  GenerationDefaults generation;        // generation_config.json's sampling fields

  bool is_moe() const { return num_experts > 0; }
  bool sparse_layer(int64_t l) const;
};

// Reads DIR/config.json and, when present, DIR/generation_config.json.
ModelConfig load_config(const std::string& dir);
// Built-in configs of real models, for random-weight benchmarks and the demo: "qwen3-30b-a3b",
// "qwen3-0.6b" (the Hub's config.json values) and "demo-moe" (a Qwen3-MoE of 8 layers, 32 experts,
// the Qwen3 vocabulary: ~0.45 GB of bf16 weights read per decode token). Error listing the names
// for anything else.
ModelConfig preset_config(const std::string& name);

// The same from JSON text (`where` and `generation_where` name the two in messages);
// generation_config may be empty.
ModelConfig parse_config(const std::string& config, const std::string& generation_config, const std::string& where,
                         const std::string& generation_where = "generation_config.json");
// generation_config.json's sampling fields: FormatError naming `where` and the field when one has
// the wrong type or range (do_sample a bool, temperature finite >= 0, top_k an integer >= 0,
// top_p in (0, 1]).
GenerationDefaults parse_generation_defaults(const std::string& generation_config, const std::string& where);

}  // namespace anvil::runtime
