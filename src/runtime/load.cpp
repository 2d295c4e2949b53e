// The model registry and load_model: a checkpoint folder's config picks the architecture, whose
// builder reads its weights; a checkpoint tensor that no builder read is an error.
#include "runtime/io.h"
#include "runtime/model.h"

namespace anvil::runtime {

std::unique_ptr<Model> build_model(const ModelConfig& c, WeightSource& weights, const LoadOptions& options) {
  ANVIL_CHECK(options.dtype == kFloat32 || options.dtype == kBFloat16 || options.dtype == kFloat16, DTypeError,
              "[load] compute dtype must be float32, bfloat16 or float16, got ", dtype_name(options.dtype));
  if (c.model_type == "qwen3" || c.model_type == "qwen3_moe") return build_qwen3(c, weights, options);
  throw FormatError("[load] model_type \"" + c.model_type + "\" has no implementation");
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options) {
  const ModelConfig c = load_config(dir);
  const auto w = checkpoint_weights(dir, options);
  auto model = build_model(c, *w, options);
  const std::vector<std::string> unread = w->unread();
  if (!unread.empty() && !options.allow_unread) {
    std::string names;
    for (size_t i = 0; i < unread.size() && i < 5; ++i) names += (i ? ", " : "") + unread[i];
    format_fail("[load]", dir, unread.size(), " checkpoint tensor(s) are not read by the ", c.model_type,
                " model (", names, unread.size() > 5 ? ", ..." : "",
                "): a layout anvil does not know; --allow-unread-tensors loads without them");
  }
  return model;
}

}  // namespace anvil::runtime
