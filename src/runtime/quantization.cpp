#include "runtime/quantization.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/io.h"

namespace anvil::runtime {
namespace {

using nlohmann::json;
constexpr const char* kOp = "[quantization]";

// A field that is present and not null.
const json* get(const json& q, const char* name) { return q.contains(name) && !q[name].is_null() ? &q[name] : nullptr; }

}  // namespace

bool QuantizationConfig::converted(const std::string& weight_name) const {
  const size_t dot = weight_name.rfind('.');
  const std::string module = dot == std::string::npos ? weight_name : weight_name.substr(0, dot);
  for (const std::string& m : not_converted)
    if (module == m ||
        (module.size() > m.size() && module.compare(module.size() - m.size() - 1, std::string::npos, "." + m) == 0))
      return false;
  return true;
}

QuantizationConfig parse_quantization(const std::string& config_json, const std::string& where) {
  QuantizationConfig r;
  json c;
  try {
    c = json::parse(config_json);
  } catch (const json::exception& e) {
    format_fail(kOp, where, "not valid JSON: ", e.what());
  }
  if (!c.is_object() || !c.contains("quantization_config") || c["quantization_config"].is_null()) return r;
  const json& q = c["quantization_config"];
  if (!q.is_object()) format_fail(kOp, where, "quantization_config must be an object, got ", q.dump());
  const json* method = get(q, "quant_method");
  if (!method || !method->is_string()) format_fail(kOp, where, "quantization_config has no quant_method");
  if (*method != "fp8")
    format_fail(kOp, where, "quant_method \"", method->get<std::string>(),
                "\" is not supported: anvil runs unquantised checkpoints and block-scaled FP8 (quant_method \"fp8\")");
  static const std::set<std::string> known = {"quant_method", "fmt", "weight_block_size", "activation_scheme",
                                              "modules_to_not_convert", "ignored_layers"};
  for (const auto& [key, value] : q.items())
    if (!known.count(key))
      format_fail(kOp, where, "quantization_config field \"", key, "\" (", value.dump(),
                  ") is not supported by anvil's fp8 loader");
  if (const json* f = get(q, "fmt"); f && *f != "e4m3")
    format_fail(kOp, where, "fp8 fmt ", f->dump(), " is not supported (only \"e4m3\")");
  if (const json* a = get(q, "activation_scheme"); a && *a != "dynamic")
    format_fail(kOp, where, "fp8 activation_scheme ", a->dump(),
                " is not supported (only \"dynamic\": activations stay in the compute dtype)");
  const json* b = get(q, "weight_block_size");
  if (!b)
    format_fail(kOp, where, "fp8 without weight_block_size (per-tensor scales) is not supported; "
                            "anvil runs block-scaled FP8 such as [128, 128]");
  if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
      (*b)[0].get<int64_t>() < 1 || (*b)[1].get<int64_t>() < 1)
    format_fail(kOp, where, "weight_block_size must be two positive integers, got ", b->dump());
  r.fp8 = true;
  r.block = {(*b)[0].get<int64_t>(), (*b)[1].get<int64_t>()};
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    const json* list = get(q, key);
    if (!list) continue;
    if (!list->is_array()) format_fail(kOp, where, key, " must be a list of module names, got ", list->dump());
    for (const json& m : *list) {
      if (!m.is_string()) format_fail(kOp, where, key, " must be a list of module names, got ", m.dump());
      r.not_converted.push_back(m.get<std::string>());
    }
  }
  return r;
}

QuantizationConfig load_quantization(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  return parse_quantization(read_file(path, kOp), path);
}

}  // namespace anvil::runtime
