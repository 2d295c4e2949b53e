// A checkpoint's config.json `quantization_config`, read strictly: the Hub's fine-grained FP8
// (quant_method "fp8", fmt "e4m3", weight_block_size [bn, bk], activation_scheme "dynamic",
// modules_to_not_convert / ignored_layers) is the one scheme anvil runs; any other method, value
// or field is a FormatError that names it, so a checkpoint we cannot run exactly never runs.
#pragma once

#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil::runtime {

struct QuantizationConfig {
  bool fp8 = false;                          // false: no quantization_config
  Shape block;                               // weight_block_size {bn, bk}
  std::vector<std::string> not_converted;    // module names kept in the checkpoint's dtype
  bool converted(const std::string& weight_name) const;  // "model.x.weight": is model.x listed?
};

// From config.json's text (`where` names it in messages).
QuantizationConfig parse_quantization(const std::string& config_json, const std::string& where);
QuantizationConfig load_quantization(const std::string& dir);

}  // namespace anvil::runtime
