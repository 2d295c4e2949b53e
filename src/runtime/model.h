// A loaded language model: weights converted once into the dtype and layout the kernels want,
// a preallocated KV cache, and one forward step built from public ops that serves both prefill
// (many tokens) and decode (one token).
#pragma once

#include <cstdint>
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
  // Weight bytes one decode token reads: everything but the embedding table (one row) and the
  // experts not chosen (top_k of the experts per MoE layer).
  virtual uint64_t decode_bytes() const = 0;
  // With LoadOptions::keep_router: the router logits [T, experts] of each MoE layer (in layer
  // order) from the last forward; empty otherwise.
  virtual std::vector<Tensor> router_logits() const { return {}; }
};

// Loads the checkpoint folder DIR (config.json, safetensors) for its model_type.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);

// Architectures (one file each under models/).
std::unique_ptr<Model> load_qwen3(const std::string& dir, const ModelConfig& config, const LoadOptions& options);

}  // namespace anvil::runtime
