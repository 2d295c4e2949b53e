#pragma once
// The persistent decoder step: a whole one-token step of a pre-norm decoder with q / k norms
// (Qwen3's dense and MoE layers) as one CUDA launch, one block per SM working through a schedule built
// once here from the model's shapes. It is an implementation of this composition of public ops
// (runtime/models/qwen3.cpp's eager step, which stays the oracle and the fallback):
//   x = embed[token];  per layer:
//     qkv, x = add_rms_norm_linear(branch, x, input_norm, eps, qkv)   (rms_norm + linear at layer 0)
//     q = qk_norm_rope_cache(qkv, n_heads, n_kv_heads, q_norm, k_norm, eps, inv_freq, k_cache, v_cache, pos)
//     a = decode_attention(q, k_cache, v_cache, pos + 1)
//     gu, x = add_rms_norm_linear(linear(a, o), x, post_norm, eps, gate_up)
//     branch = linear(silu_mul(gate, up), down)
//   or, in an MoE layer (Qwen3-MoE's), after the attention:
//     h, x = add_rms_norm(linear(a, o), x, post_norm, eps)
//     logits, routing = moe_router(h, router, top_k, norm_topk_prob)
//     branch = moe_experts(h, routing, gate_up, down)
//   h, x = add_rms_norm(branch, x, final_norm, eps);  logits = float(linear(h, head))
// (float8 weights: add_rms_norm_linear / scaled_linear / moe_experts with their scales) with the
// same roundings; products and attention sums run in another order, so logits agree to float32
// rounding of the sums (tests: cosine >= 0.9999 and the same greedy tokens).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "anvil/plan.h"
#include "anvil/tensor.h"

namespace anvil {

// The scales of a float8 weight, as scaled_linear's (and moe_experts' per expert): row-wise [n]
// or [n, 1] (block empty; a dense weight's one-element scale is valid but composes), or block =
// {bn, bk}: [ceil(n / bn), ceil(k / bk)]; an MoE layer's experts' with a leading [E]. Undefined:
// the weight has the activations' dtype. The kernel decodes e4m3fn codes exactly, except the NaN
// codes 0x7F / 0xFF, which bfloat16 activations read as +-480 (the eager GEMV: NaN).
struct DecoderWeightScale {
  Tensor scale;
  Shape block;
};

// One layer's weights and KV cache, in the layout the eager step uses (H hidden, D head_dim,
// I intermediate, E experts). All on one CUDA device, contiguous, in the activations' 16-bit
// dtype, or float8 with scales (the four projections). A layer with a router is an MoE layer:
// its gate_up and down are its experts'.
struct DecoderLayerWeights {
  Tensor input_norm;        // [H]
  Tensor qkv;               // [(n_heads + 2 n_kv_heads) D, H]: q, k and v stacked
  Tensor q_norm, k_norm;    // [D], or undefined (no q / k norm)
  Tensor o;                 // [H, n_heads D]
  Tensor post_norm;         // [H]
  Tensor gate_up;           // [2 I, H]: gate, then up (MoE: [E, 2 I, H])
  Tensor down;              // [H, I] (MoE: [E, H, I])
  Tensor k_cache, v_cache;  // [1, n_kv_heads, rows, D]
  Tensor router;            // [E, H]: an MoE layer; undefined: a dense one
  DecoderWeightScale qkv_scale, o_scale, gate_up_scale, down_scale;  // float8 weights' scales
};

// One op of a profiled step (PersistentDecoder::profile_step), microseconds from the launch's
// first block reaching its first op: `start` when the first block had its inputs, `end` when the
// last block was done; means over the blocks holding its items: `wait` from reaching the op to
// having its inputs, `prologue` making the input row (GEMVs), `stage_wait` waiting for weights.
struct DecoderOpTime {
  std::string name;  // "layer 3 qkv", ..., "lm_head"
  double start_us = 0, end_us = 0, wait_us = 0, prologue_us = 0, work_us = 0, stage_wait_us = 0;
};

struct DecoderWeights {
  Tensor embed;  // [vocab, H]
  std::vector<DecoderLayerWeights> layers;
  Tensor final_norm;  // [H]
  Tensor head;        // [n_logits, H] (the embedding when tied)
  Tensor inv_freq;    // float32 [D / 2]: neox RoPE over the whole head (rope_inv_freq)
  int64_t n_heads = 0, n_kv_heads = 0;
  double eps = 1e-6;
  int64_t top_k = 0;            // experts per token of the MoE layers
  bool norm_topk_prob = true;   // their weights divided by their sum
};

class ANVIL_API PersistentDecoder {
 public:
  // Fused where the persistent kernel runs these weights: a CUDA device of compute capability
  // 9.0 or later, bfloat16 / float16, head_dim 16, 64 or 128, at most 16 q heads per kv head, rows
  // of a multiple of 8 elements, MoE layers of at most 256 experts and top_k <= 8, float8 weights
  // e4m3fn with k % 16 == 0 and a scale per row or blocks of bn % 8 == 0 rows and bk % 32 == 0
  // columns (MoE experts: bk = 64 x 2^i). Composed otherwise (the caller runs the eager step). Throws
  // ShapeError / DTypeError / DeviceError when the weights do not describe one model.
  static FusedPlan plan(const DecoderWeights& weights);

  // Builds the schedule and the step's buffers (throws Error when the plan is Composed). The
  // tensors are kept: the caches are written by every step.
  explicit PersistentDecoder(const DecoderWeights& weights);
  ~PersistentDecoder();
  PersistentDecoder(const PersistentDecoder&) = delete;
  PersistentDecoder& operator=(const PersistentDecoder&) = delete;

  // Float32 logits [1, n_logits] of `token` at position `pos`: its k and v go to cache row pos,
  // attention sees pos + 1 keys. One launch, asynchronous on the current stream.
  Tensor step(int64_t token, int64_t pos);
  // The same step run one op per launch, each checked after it: the kernel's status (a wait that
  // timed out), and the op's output finite. Throws Error naming the op. Synchronises.
  Tensor step_checked(int64_t token, int64_t pos);
  // step() with each block's op timestamps recorded (global timer), per op. Synchronises.
  std::vector<DecoderOpTime> profile_step(int64_t token, int64_t pos);
  // Throws Error when a wait of the last step timed out (then its outputs are garbage).
  // Synchronises with the device.
  void check();

  // The residual stream of the last step, [H] rows: 0 the embedding row, 2 l + 1 after layer l's
  // attention, 2 l + 2 after its MLP (2 L: the final norm's input).
  Tensor residual(int64_t i) const;
  // MoE layer `layer`'s router logits of the last step, [E] (the routing's input, rounded as
  // moe_router's). IndexError past the layers; Error for a dense layer.
  Tensor router_logits(int64_t layer) const;
  // "ops, items, blocks and ring stages" of the schedule, for logs.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil
