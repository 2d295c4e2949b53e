// The model registry and load_model: a checkpoint folder's config picks the architecture, whose
// builder reads its weights; a checkpoint tensor that no builder read is an error.
#include <cstdio>
#include <string>

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
                "): a layout anvil does not know; --allow-unread-tensors (Python: allow_unread_tensors=True) loads "
                "without them");
  }
  return model;
}

std::function<void(uint64_t, uint64_t)> stderr_load_progress() {
  return [last = -1](uint64_t done, uint64_t total) mutable {
    const int pct = total ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : -1;
    if (pct == last && total) return;
    last = pct;
    if (total) {
      const int bar = pct / 4;
      std::fprintf(stderr, "\r[load] [%s%s] %3d%% %.2f / %.2f GB", std::string(static_cast<size_t>(bar), '#').c_str(),
                   std::string(static_cast<size_t>(25 - bar), ' ').c_str(), pct, done * 1e-9, total * 1e-9);
      if (done >= total) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "\r[load] %.2f GB", done * 1e-9);
    }
    std::fflush(stderr);
  };
}

std::function<void(int64_t, int64_t)> stderr_step_progress(const std::string& label) {
  return [label](int64_t done, int64_t total) {
    std::fprintf(stderr, "\r%s %lld / %lld", label.c_str(), static_cast<long long>(done), static_cast<long long>(total));
    if (done == total) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  };
}

}  // namespace anvil::runtime
