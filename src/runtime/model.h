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

// Which projection and expert weights load as float8 (embeddings, norms and MoE routers are
// always in the compute dtype).
enum class Fp8Weights : uint8_t {
  Checkpoint,  // float8 where the checkpoint stores it (with its own block scales), dtype elsewhere
  Quantize,    // also the checkpoint's other projections, quantised to e4m3fn with row scales
  Dequantize,  // none: float8 weights dequantised once at load into dtype
};

struct LoadOptions {
  Device device = kCPU;
  DType dtype = kBFloat16;    // compute and weight dtype: float32 / bfloat16 / float16
  int64_t max_context = 0;    // KV cache rows; 0: min(max_position_embeddings, 4096)
  bool keep_router = false;   // keep each MoE layer's router logits of the last forward (analysis)
  Fp8Weights fp8_weights = Fp8Weights::Checkpoint;
  // A checkpoint tensor the model does not read is a FormatError (a layout we do not know is
  // never half-loaded); true ignores such tensors (the CLI's --allow-unread-tensors).
  bool allow_unread = false;
  // CUDA: run each one-token step as a CUDA graph captured at the first one (kernels launched
  // back to back, no host work between them).
  bool cuda_graph = true;
  // CUDA: a dense model whose weights the persistent kernel takes (anvil::PersistentDecoder's
  // plan) can run one-token steps as one launch ("persistent" in Model::decode_paths); true
  // makes that the default path, false (for now: the graph is still faster, docs/PERFORMANCE.md)
  // leaves the graph first.
  bool persistent_decode = false;
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
  // How one-token steps run, the one chosen at load first: "persistent" (one persistent kernel,
  // anvil/decoder.h), "graph" (the eager step's kernels replayed from a CUDA graph), "eager".
  virtual std::vector<std::string> decode_paths() const { return {"eager"}; }
  virtual std::string decode_path() const { return "eager"; }
  // The persistent step behind the "persistent" path (profiling), or null.
  virtual PersistentDecoder* persistent_decoder() { return nullptr; }
  // Switches the path of later steps (they share the weights and the KV cache); Error when the
  // model has no such path.
  virtual void set_decode_path(const std::string& path) {
    ANVIL_CHECK(path == "eager", Error, "[decode_path] this model runs one-token steps eagerly only, not as '", path, "'");
  }
};

// A projection's (or stacked experts') weight [..., n, k] as the kernels take it: in the load
// dtype, or float8 with row scales [..., n] or block scales [..., ceil(n / bn), ceil(k / bk)].
struct ProjWeight {
  Tensor w, scale;
  Shape block;  // {bn, bk} with block scales, else empty
  bool fp8() const { return scale.defined(); }
  uint64_t nbytes() const { return w.nbytes() + (scale.defined() ? scale.nbytes() : 0); }
};
// Projections of one input stacked along their rows ([n_0 + n_1 + ..., k]): one GEMV computes
// them all. Block scales whose blocks do not line up with the parts are re-blocked to the
// greatest common divisor of the block and the parts' rows (each scale repeated: exact); a mix
// of float8 and dense parts is dequantised to the dense parts' dtype.
ProjWeight stack_rows(const std::vector<ProjWeight>& parts);
// Experts [E, n, k] from E weights of one shape and format.
ProjWeight stack_experts(const std::vector<ProjWeight>& experts);
// Block-scaled a and b re-blocked to one block (the gcd of their row blocks) when they differ,
// for ops that take one block for two weights (moe_experts' gate_up and down).
void same_blocks(ProjWeight& a, ProjWeight& b);
// x @ p^T through linear or scaled_linear.
Tensor project(const Tensor& x, const ProjWeight& p);

// Where a model's weights come from: a checkpoint folder, or random numbers in a real model's
// shapes (benchmarks and the demo need no download).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // `name` shaped `shape`, contiguous, in the load dtype on the load device; FormatError naming
  // it when absent or shaped otherwise.
  virtual Tensor get(const std::string& name, const Shape& shape) = 0;
  // A projection weight under LoadOptions::fp8_weights: the checkpoint's float8 with its scales,
  // quantised, dequantised or dense.
  virtual ProjWeight projection(const std::string& name, const Shape& shape) = 0;
  virtual uint64_t total_bytes() const { return 0; }  // of every weight in the source, when known
  uint64_t loaded_bytes() const { return loaded_; }   // source bytes of the weights got so far
  // Tensors of the source that nothing has read (a checkpoint's; empty for random weights).
  virtual std::vector<std::string> unread() const { return {}; }

 protected:
  uint64_t loaded_ = 0;
};
// DIR's safetensors (Checkpoint's `stem`: "model", or diffusers' "diffusion_pytorch_model").
std::unique_ptr<WeightSource> checkpoint_weights(const std::string& dir, const LoadOptions& options,
                                                 const std::string& stem = "model");
// Norm weights 1 + 0.1 N(0, 1), every other matrix N(0, (0.5 / sqrt(fan_in))^2) (the recipe of
// the tiny goldens), made on the device from `seed` (tiled from a pool of 2^22 draws, so values
// repeat across weights); experts in the fused layout. block_fp8: projections quantised to
// e4m3fn in 128 x 128 blocks, as the Hub's FP8 checkpoints (benchmarks of that path).
std::unique_ptr<WeightSource> random_weights(const LoadOptions& options, uint64_t seed, bool block_fp8 = false);

// Progress drawn on stderr (the caller checks that it is a terminal), for the CLI and the Python
// package: a load's bar "[load] [#####    ]  42% 1.20 / 2.85 GB" (LoadOptions::progress), and a
// long call's "LABEL done / total" counter, erased when it completes (Vae::set_progress).
std::function<void(uint64_t done, uint64_t total)> stderr_load_progress();
std::function<void(int64_t done, int64_t total)> stderr_step_progress(const std::string& label);

// Loads the checkpoint folder DIR (config.json, safetensors) for its model_type.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);
// A model of `config` over `weights` (load_model's second half).
std::unique_ptr<Model> build_model(const ModelConfig& config, WeightSource& weights, const LoadOptions& options);

// Architectures (one file each under models/).
std::unique_ptr<Model> build_qwen3(const ModelConfig& config, WeightSource& weights, const LoadOptions& options);

}  // namespace anvil::runtime
