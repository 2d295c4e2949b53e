// A loaded language model: weights converted once into the dtype and layout the kernels want,
// a preallocated KV cache, and one forward step built from public ops that serves both prefill
// (many tokens) and decode (one token).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "anvil/anvil.h"
#include "runtime/config.h"

namespace anvil::runtime {

struct LoadOptions {
  Device device = kCPU;
  DType dtype = kBFloat16;    // compute and weight dtype: float32 / bfloat16 / float16
  int64_t max_context = 0;    // KV cache rows; 0: min(max_position_embeddings, 4096)
  bool keep_router = false;   // keep each MoE layer's router logits of the last forward (analysis)
  // Projection and expert weights as float8 e4m3fn with one scale per row (dtype: the activations'
  // and the rest's); embeddings, norms and MoE routers stay in dtype.
  bool fp8_weights = false;
  // CUDA: run each one-token step as a CUDA graph captured at the first one (kernels launched
  // back to back, no host work between them).
  bool cuda_graph = true;
  // Called after each weight is loaded: bytes read from the source so far, of `total` (0 when
  // the source cannot tell). The CLI draws a progress bar with it on a terminal.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

class Model {
 public:
  virtual ~Model() = default;
  // Float32 logits [T, vocab] of ids (int64 [T], any device) at positions [pos, pos + T). The
  // keys and values of those positions are written into the cache; positions before `pos` must
  // have been run before (the cache holds them). Throws Error when pos + T exceeds the context.
  virtual Tensor forward(const Tensor& ids, int64_t pos) = 0;
  virtual const ModelConfig& config() const = 0;
  virtual int64_t max_context() const = 0;
  virtual Device forward_device() const = 0;  // where the weights, cache and logits live
  virtual uint64_t weight_bytes() const = 0;  // of the converted weights
  virtual uint64_t parameters() const = 0;    // weight elements (an untied lm_head counted once)
  // Weight bytes one decode token reads: everything but the embedding table (one row) and the
  // experts not chosen (top_k of the experts per MoE layer).
  virtual uint64_t decode_bytes() const = 0;
  // With LoadOptions::keep_router: the router logits [T, experts] of each MoE layer (in layer
  // order) from the last forward; empty otherwise.
  virtual std::vector<Tensor> router_logits() const { return {}; }
};

// Where a model's weights come from: a checkpoint folder, or random numbers in a real model's
// shapes (benchmarks and the demo need no download).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // `name` shaped `shape`, contiguous, in the load dtype on the load device; FormatError naming
  // it when absent or shaped otherwise.
  virtual Tensor get(const std::string& name, const Shape& shape) = 0;
  virtual uint64_t total_bytes() const { return 0; }  // of every weight in the source, when known
  uint64_t loaded_bytes() const { return loaded_; }   // source bytes of the weights got so far

 protected:
  uint64_t loaded_ = 0;
};
std::unique_ptr<WeightSource> checkpoint_weights(const std::string& dir, const LoadOptions& options);
// Norm weights 1 + 0.1 N(0, 1), every other matrix N(0, (0.5 / sqrt(fan_in))^2) (the recipe of
// the tiny goldens), made on the device from `seed` (tiled from a pool of 2^22 draws, so values
// repeat across weights); experts in the fused layout.
std::unique_ptr<WeightSource> random_weights(const LoadOptions& options, uint64_t seed);

// Loads the checkpoint folder DIR (config.json, safetensors) for its model_type.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);
// A model of `config` over `weights` (load_model's second half).
std::unique_ptr<Model> build_model(const ModelConfig& config, WeightSource& weights, const LoadOptions& options);

// Architectures (one file each under models/).
std::unique_ptr<Model> build_qwen3(const ModelConfig& config, WeightSource& weights, const LoadOptions& options);

}  // namespace anvil::runtime
