#pragma once
// The persistent decoder step: one launch runs a whole one-token step of a pre-norm decoder
// (Qwen3's: rms norms, q / k norms, neox RoPE, grouped-query attention over a KV cache, SwiGLU
// MLP, lm_head) as a schedule of ops that the op layer builds once from the model's shapes
// (src/ops/decoder.cpp) and the backend replays every token. Params and the kernel entry points
// of both backends (the backend boundary: core/kernels.h); only CUDA runs it, the CPU plans
// Composed.

#include "core/kernels.h"

namespace anvil {

// What an op computes. A Gemv op is y = x w^T over n weight rows of k columns in tiles of
// kDecoderTileRows rows; its input row x is made once per block by its prologue (below) in
// shared memory. An Attention op is one decode step of attention for every kv head: items are
// (kv head, key split); each normalises and rotates its q heads (and, in the split holding the
// new position, k, writing k and v into the cache), runs over its keys and writes (max, sum,
// output) partials; the last split of a kv head to finish combines them into `out`.
enum class DecoderOpKind : int32_t { Gemv, Attention };

// A Gemv op's input row x (k elements of the dtype):
//  AddNorm: s = round(a + b) (a null: s = b; `gather`: b is row in[0] of a [rows, k] table),
//           x = round(rms_norm(s) * norm_w); the block holding tile 0 writes s to sum_out.
//  SiluMul: x = round(silu(a[c]) * a[k + c]) (a = gate and up, [2 k]); ExpertsSum: one such row
//           per slot, from a's rows [top_k, 2 k], at x + slot * k.
//  Copy:    x = a.
enum class DecoderPrologue : int32_t { AddNorm, SiluMul, Copy };

// A Gemv op over an MoE layer's experts (w: [experts, n, k], expert e's rows at w + e n k), the
// experts chosen on the device from the logits of an earlier Gemv op (the router, y = logits
// [experts]): softmax in float32, the top_k (ties: lower expert first), weights divided by their
// sum iff norm_topk (moe_route's rule, cuda/device/moe_route.cuh on CUDA).
//  None:       a plain Gemv.
//  Experts:    item slot * tiles + tile: the tile of slot's expert, y + slot * n (gate_up).
//  ExpertsSum: item tile: for every slot in order the tile's rows of slot's expert against the
//              prologue's row `slot` (SiluMul of a's row slot), each product rounded, then
//              y = round(sum over slots of weight * product) in float32 (down and the combine).
enum class DecoderRouting : int32_t { None, Experts, ExpertsSum };

// A Gemv op's weights: the activations' dtype, or float8 e4m3fn with float32 scales as
// scaled_linear's (per expert, scale_expert floats apart):
//  Row:   scale [n]: y_j = round(dot_j * scale[j]);
//  Block: scale [ceil(n / bn), ceil(k / bk)] (bn % 8 == 0, bk % 32 == 0): each block's part of
//         the dot times its scale, summed in float32, one rounding.
enum class DecoderScale : int32_t { None, Row, Block };

constexpr int kDecoderTileRows = 8;
constexpr int kDecoderMaxTopK = 8;      // experts per token of a routed op
constexpr int kDecoderMaxExperts = 256;
constexpr int kTraceSlots = 5;

struct DecoderOp {
  DecoderOpKind kind = DecoderOpKind::Gemv;
  DecoderPrologue prologue = DecoderPrologue::Copy;
  int32_t dep = -1;         // op whose completion this op waits for (-1: none)
  uint32_t dep_count = 0;   // the dependency's counter value at its completion (its `signals`)
  uint32_t signals = 0;     // what this op adds to its counter in total: tiles, or kv heads
  int32_t gather = 0;       // AddNorm: b is the row in[0] of the table at b
  int32_t out_f32 = 0;      // Gemv: y is float32 (the value rounded to the dtype first)
  // Gemv
  const void* w = nullptr;  // [n, k], rows contiguous, 16-byte aligned
  int64_t n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* norm_w = nullptr;  // [k]
  void* sum_out = nullptr;       // [k]
  void* y = nullptr;             // [n]; null: the step's params.out
  float eps = 0.f;
  DecoderScale scaling = DecoderScale::None;  // None: w has the activations' dtype; else float8 e4m3fn
  const float* w_scale = nullptr;
  int64_t scale_bn = 0, scale_bk = 0, scale_expert = 0;
  // Routed Gemv (MoE)
  DecoderRouting routing = DecoderRouting::None;
  int32_t route_op = -1;         // the router op: the op whose y holds the logits
  uint32_t route_count = 0;      // its signals
  const void* logits = nullptr;  // its y, [experts]
  int32_t experts = 0, top_k = 0, norm_topk = 0;
  // Attention (the qkv row is [n_heads + 2 n_kv] heads of head_dim; caches [n_kv, cache_rows,
  // head_dim] contiguous; partials [n_heads][splits][head_dim + 2])
  const void* qkv = nullptr;
  const void* q_norm = nullptr;  // [head_dim]
  const void* k_norm = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  float* part = nullptr;
  uint32_t* tickets = nullptr;  // [n_kv], zero between launches
  void* out = nullptr;          // [n_heads * head_dim]
  int64_t cache_rows = 0;
  int32_t n_heads = 0, n_kv = 0, head_dim = 0, splits = 0;
  float scale = 0.f;  // softmax scale
};

// One unit of a block's work: a Gemv tile (routed: see DecoderRouting) or an Attention (kv head *
// splits + split).
struct DecoderItem {
  int32_t op = 0, index = 0;
};

struct DecoderStepParams {
  const DecoderOp* ops = nullptr;  // device
  int32_t n_ops = 0;
  const DecoderItem* items = nullptr;    // device: block b's items are [block_begin[b], block_begin[b + 1])
  const int32_t* block_begin = nullptr;  // device, [blocks + 1]
  int32_t blocks = 0;                    // grid size: at most one block per SM
  uint32_t* counters = nullptr;  // device [n_ops + 1], zero between launches (the kernel's last block re-zeroes them)
  int32_t* status = nullptr;     // device [2]: a timed-out wait's op + 1, 0 when fine; the abort flag
  const int32_t* in = nullptr;   // device int32 [3]: token id, its cache row, the cache length after it
  void* out = nullptr;           // the output of the op whose y is null (the logits)
  int32_t device = 0;
  int32_t op_begin = 0, op_end = 0;  // run ops [op_begin, op_end) (the debug mode runs one per launch)
  int64_t max_k = 0;                 // the largest Gemv input (k, or top_k k of an ExpertsSum): the prologue's shared memory
  int32_t max_group = 0;             // the most q heads per kv head
  int32_t max_experts = 0, max_top_k = 0;  // of the routed ops (0: none)
  int32_t head_dim = 0;              // of the attention ops
  DType dtype = kBFloat16;           // activations and weights (bfloat16 or float16)
  int64_t timeout_ns = 0;            // a wait longer than this sets status and ends the launch
  // Profiling (null: off): per block and op [blocks][n_ops][kTraceSlots], the global timer (ns)
  // when the block reached the op, when its inputs were ready, when its prologue was done and
  // when it was done with the op; then the ns it waited for weight stages in the op.
  uint64_t* trace = nullptr;
};

#define ANVIL_DECODER_FUSED(X) X(decoder_step, const DecoderStepParams&)
ANVIL_DECLARE_FUSED(ANVIL_DECODER_FUSED)

}  // namespace anvil
