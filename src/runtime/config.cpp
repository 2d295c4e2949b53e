#include "runtime/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "anvil/error.h"
#include "runtime/io.h"

namespace anvil::runtime {
namespace {

using nlohmann::json;
constexpr const char* kOp = "[config]";

json parse(const std::string& text, const std::string& where) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) format_fail(kOp, where, "not a JSON object");
    return j;
  } catch (const json::exception& e) {
    format_fail(kOp, where, "not valid JSON: ", e.what());
  }
}

// The first of `names` present; FormatError naming them all when none is.
const json& field(const json& j, std::initializer_list<const char*> names, const std::string& where) {
  for (const char* n : names)
    if (j.contains(n) && !j[n].is_null()) return j[n];
  std::string list;
  for (const char* n : names) list += (list.empty() ? "\"" : " or \"") + std::string(n) + "\"";
  format_fail(kOp, where, "missing field ", list);
}

int64_t positive(const json& j, std::initializer_list<const char*> names, const std::string& where) {
  const json& v = field(j, names, where);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    format_fail(kOp, where, "\"", *names.begin(), "\" must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

std::vector<int64_t> ids_of(const json& v) {
  std::vector<int64_t> r;
  if (v.is_number_integer()) r.push_back(v.get<int64_t>());
  else if (v.is_array())
    for (const json& x : v)
      if (x.is_number_integer()) r.push_back(x.get<int64_t>());
  return r;
}

// The field `name` of g when present and not null.
const json* optional_field(const json& g, const char* name) {
  return g.contains(name) && !g[name].is_null() ? &g[name] : nullptr;
}

GenerationDefaults generation_defaults(const json& g, const std::string& where) {
  GenerationDefaults d;
  if (const json* v = optional_field(g, "do_sample")) {
    if (!v->is_boolean()) format_fail(kOp, where, "\"do_sample\" must be true or false, got ", v->dump());
    d.do_sample = v->get<bool>();
  }
  if (const json* v = optional_field(g, "temperature")) {
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0)
      format_fail(kOp, where, "\"temperature\" must be a finite number >= 0, got ", v->dump());
    d.temperature = v->get<double>();
  }
  if (const json* v = optional_field(g, "top_k")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0)
      format_fail(kOp, where, "\"top_k\" must be an integer >= 0, got ", v->dump());
    d.top_k = v->get<int64_t>();
  }
  if (const json* v = optional_field(g, "top_p")) {
    if (!v->is_number() || !(v->get<double>() > 0 && v->get<double>() <= 1))
      format_fail(kOp, where, "\"top_p\" must be a number in (0, 1], got ", v->dump());
    d.top_p = v->get<double>();
  }
  return d;
}

}  // namespace

GenerationDefaults parse_generation_defaults(const std::string& generation_config, const std::string& where) {
  return generation_defaults(parse(generation_config, where), where);
}

bool ModelConfig::sparse_layer(int64_t l) const {
  return is_moe() && std::find(mlp_only_layers.begin(), mlp_only_layers.end(), l) == mlp_only_layers.end() &&
         (l + 1) % decoder_sparse_step == 0;
}

ModelConfig parse_config(const std::string& config, const std::string& generation_config, const std::string& where,
                         const std::string& generation_where) {
  const json j = parse(config, where);
  ModelConfig c;
  c.model_type = j.value("model_type", "");
  if (c.model_type != "qwen3" && c.model_type != "qwen3_moe")
    format_fail(kOp, where, "model_type \"", c.model_type, "\" is not supported (qwen3, qwen3_moe)");
  for (const char* f : {"dtype", "torch_dtype"})
    if (c.dtype.empty() && j.contains(f) && j[f].is_string()) c.dtype = j[f].get<std::string>();
  c.hidden_size = positive(j, {"hidden_size"}, where);
  c.num_hidden_layers = positive(j, {"num_hidden_layers"}, where);
  c.num_attention_heads = positive(j, {"num_attention_heads"}, where);
  c.num_key_value_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                              ? positive(j, {"num_key_value_heads"}, where)
                              : c.num_attention_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? positive(j, {"head_dim"}, where)
                                                                   : c.hidden_size / c.num_attention_heads;
  c.vocab_size = positive(j, {"vocab_size"}, where);
  c.max_position_embeddings = positive(j, {"max_position_embeddings"}, where);
  c.rms_norm_eps = field(j, {"rms_norm_eps"}, where).get<double>();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    c.rope_theta = field(rp, {"rope_theta"}, where + " rope_parameters").get<double>();
    const std::string type = rp.value("rope_type", "default");
    if (type != "default") format_fail(kOp, where, "rope_type \"", type, "\" is not supported (default only)");
  } else {
    c.rope_theta = field(j, {"rope_theta"}, where).get<double>();
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    format_fail(kOp, where, "rope_scaling is not supported");
  if (j.value("attention_bias", false)) format_fail(kOp, where, "attention_bias is not supported");
  if (j.value("use_sliding_window", false)) format_fail(kOp, where, "use_sliding_window is not supported");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    format_fail(kOp, where, "hidden_act ", j["hidden_act"].dump(), " is not supported (silu)");
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    format_fail(kOp, where, "num_attention_heads ", c.num_attention_heads, " is not a multiple of num_key_value_heads ",
                c.num_key_value_heads);
  if (c.model_type == "qwen3_moe") {
    c.num_experts = positive(j, {"num_experts", "num_local_experts"}, where);
    c.num_experts_per_tok = positive(j, {"num_experts_per_tok"}, where);
    c.moe_intermediate_size = positive(j, {"moe_intermediate_size"}, where);
    c.decoder_sparse_step = j.contains("decoder_sparse_step") ? positive(j, {"decoder_sparse_step"}, where) : 1;
    c.norm_topk_prob = j.value("norm_topk_prob", false);
    if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array()) c.mlp_only_layers = ids_of(j["mlp_only_layers"]);
    if (c.num_experts_per_tok > c.num_experts)
      format_fail(kOp, where, "num_experts_per_tok ", c.num_experts_per_tok, " exceeds the ", c.num_experts, " experts");
  }
  // Dense layers (qwen3, and qwen3_moe's mlp_only / non-sparse layers) use intermediate_size.
  const bool needs_dense = !c.is_moe() || [&] {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      if (!c.sparse_layer(l)) return true;
    return false;
  }();
  if (needs_dense) c.intermediate_size = positive(j, {"intermediate_size"}, where);
  if (j.contains("eos_token_id")) c.eos_token_ids = ids_of(j["eos_token_id"]);
  if (!generation_config.empty()) {
    const json g = parse(generation_config, generation_where);
    if (const json* v = optional_field(g, "eos_token_id")) c.eos_token_ids = ids_of(*v);
    c.generation = generation_defaults(g, generation_where);
  }
  return c;
}

ModelConfig preset_config(const std::string& name) {
  static const std::map<std::string, std::string> presets = {
      {"qwen3-30b-a3b", R"({"model_type":"qwen3_moe","hidden_size":2048,"intermediate_size":6144,
        "moe_intermediate_size":768,"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,
        "head_dim":128,"num_experts":128,"num_experts_per_tok":8,"norm_topk_prob":true,"decoder_sparse_step":1,
        "mlp_only_layers":[],"vocab_size":151936,"max_position_embeddings":40960,"rope_theta":1000000.0,
        "rms_norm_eps":1e-6,"tie_word_embeddings":false,"torch_dtype":"bfloat16","eos_token_id":151645})"},
      {"qwen3-0.6b", R"({"model_type":"qwen3","hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,
        "num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,
        "max_position_embeddings":40960,"rope_theta":1000000.0,"rms_norm_eps":1e-6,"tie_word_embeddings":true,
        "torch_dtype":"bfloat16","eos_token_id":151645})"},
      {"demo-moe", R"({"model_type":"qwen3_moe","hidden_size":1024,"moe_intermediate_size":512,
        "num_hidden_layers":8,"num_attention_heads":16,"num_key_value_heads":4,"head_dim":64,"num_experts":32,
        "num_experts_per_tok":4,"norm_topk_prob":true,"vocab_size":151936,"max_position_embeddings":4096,
        "rope_theta":1000000.0,"rms_norm_eps":1e-6,"tie_word_embeddings":false,"torch_dtype":"bfloat16"})"}};
  const auto it = presets.find(name);
  if (it == presets.end()) {
    std::string names;
    for (const auto& [n, text] : presets) names += (names.empty() ? "" : ", ") + n;
    throw Error(std::string(kOp) + " no built-in shape \"" + name + "\" (built in: " + names + ")");
  }
  return parse_config(it->second, "", "built-in " + name);
}

ModelConfig load_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir), cfg = d / "config.json", gen = d / "generation_config.json";
  if (!fs::exists(cfg)) throw Error(std::string(kOp) + " " + dir + " has no config.json");
  return parse_config(read_file(cfg.string(), kOp), fs::exists(gen) ? read_file(gen.string(), kOp) : std::string(),
                      cfg.string(), gen.string());
}

}  // namespace anvil::runtime
