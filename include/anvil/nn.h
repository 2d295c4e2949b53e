#pragma once
// Neural-network ops of the decode hot path, with libtorch's names and argument order where
// libtorch has the op. Every CUDA op here is asynchronous, makes no host sync and can be
// captured in a CUDA graph.
#include <array>
#include <optional>
#include <tuple>

#include "anvil/plan.h"
#include "anvil/tensor.h"

namespace anvil {

// y = input @ weight^T + bias. input [*, k]; weight [n, k] (or [k]: the last output dim is
// dropped); bias [n] or broadcastable to the output. input, weight and bias share a floating
// dtype; the output has it too. Few rows (decode, `[1, 1, k]` and `[b, 1, k]` alike) go to a
// GEMV kernel with the bias fused; many rows go to the GEMM. float32 accumulation.
ANVIL_API Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});

// softmax / log_softmax along `dim`; `dtype` casts the input first (as torch's dtype=).
// float16/bfloat16 accumulate in float32. A row of all -inf gives NaN, as PyTorch CPU.
ANVIL_API Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
ANVIL_API Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// torch.nn.functional.rms_norm: x * rsqrt(mean(x^2 over the normalized dims) + eps) * weight,
// computed in float32 with one rounding to x's dtype. eps defaults to the dtype's epsilon.
// weight has normalized_shape and x's dtype or float32.
ANVIL_API Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                          std::optional<double> eps = std::nullopt);
// rms_norm's backward: (grad_input, grad_weight), r = rsqrt(mean(x^2) + eps) per row,
// grad_input = r * (g w - x r^2 mean(g w x)), grad_weight = sum over rows of g x r; float32
// compute (float64 for float64), one rounding each. output_mask picks which are computed.
ANVIL_API std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                                       const Tensor& weight = {}, std::optional<double> eps = std::nullopt,
                                                       std::array<bool, 2> output_mask = {true, true});
// Fused residual add + rms_norm: h = x + residual (rounded to the dtype), returns
// (rms_norm(h, ...), h). Reference composition: add then rms_norm.
ANVIL_API std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                                  const Tensor& weight = {}, std::optional<double> eps = std::nullopt);
// The decode step's residual add, rms_norm and the projection after it: returns
// (linear(h, weight) or scaled_linear(h, weight, weight_scale), s) where (h, s) =
// add_rms_norm(x, residual, {K}, norm_weight, eps); x, residual [..., K], weight [N, K]; that
// composition is what runs unless the backend fuses it. CUDA fuses one row (bfloat16 / float16,
// no weight_scale, norm_weight of x's dtype or undefined, K % 8 == 0, K <= 8192, 16-byte aligned
// rows) whose GEMV grid is one wave: each GEMV block normalises the row into shared memory before
// its weight stream, so h is never written; its sum of squares is reduced in another order than
// add_rms_norm's, so an element of h may differ by one rounding. Past one wave that prologue costs
// more than the add_rms_norm kernel it saves, so the composition runs. The CPU always composes.
// weight_scale / block as scaled_linear's. add_rms_norm_linear_plan says which runs (anvil/plan.h).
ANVIL_API std::tuple<Tensor, Tensor> add_rms_norm_linear(const Tensor& x, const Tensor& residual,
                                                         const Tensor& norm_weight, std::optional<double> eps,
                                                         const Tensor& weight, const Tensor& weight_scale = {},
                                                         const Shape& block = {});
ANVIL_API FusedPlan add_rms_norm_linear_plan(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                                             std::optional<double> eps, const Tensor& weight,
                                             const Tensor& weight_scale = {}, const Shape& block = {});

// SwiGLU's gate: silu(gate) * up with one rounding (the composition rounds twice). Same shapes;
// gate and up may be strided views such as the two halves of a fused gate_up projection.
ANVIL_API Tensor silu_mul(const Tensor& gate, const Tensor& up);

// Rotary position embedding, neox style (Llama / Qwen / Mistral: rotate the two halves of the
// first rotary_dim = 2 * inv_freq.size(0) columns of the last dim; the rest pass through).
// x [*, head_dim] float; positions int32/int64 broadcastable to x.shape[:-1], read on the
// device (x [b, s, h, d] takes positions [b, s, 1]; x [b, h, s, d] takes [b, 1, s]).
// inv_freq float32 [rotary_dim / 2] on x's device (see rope_inv_freq).
ANVIL_API Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
// What Qwen3 / Llama / Mistral attention computes between the stacked qkv projection and
// attention over a KV cache, as one kernel. qkv [B, L, (n_heads + 2 n_kv_heads) * D]: the q
// heads, then the k heads, then the v heads of each token (D = the caches' head_dim); start int32
// [B] on the device: token l of batch b sits at position start[b] + l.
//   q = rope(rms_norm(q, {D}, q_norm_weight, eps), positions, inv_freq), returned [B, n_heads, L, D]
//   k = rope(rms_norm(k, {D}, k_norm_weight, eps), positions, inv_freq) -> k_cache [B, Hk, S_max, D]
//   v -> v_cache [B, Hk, S_max, D]
// at cache rows start[b] + l (rows outside [0, S_max) are dropped, as cache_write). An undefined
// norm weight means no norm (Llama). The normed values are rounded to the dtype before the
// rotation, as the composition rounds them. Reference composition: rms_norm, rope, cache_write.
// CUDA: rotary_dim <= 1024 and head_dim - rotary_dim <= 512.
ANVIL_API Tensor qk_norm_rope_cache(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Tensor& q_norm_weight,
                                    const Tensor& k_norm_weight, double eps, const Tensor& inv_freq, Tensor& k_cache,
                                    Tensor& v_cache, const Tensor& start);
// inv_freq[i] = 1 / theta^(2i / rotary_dim) in float32, bit-equal to Hugging Face's
// `1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`.
ANVIL_API Tensor rope_inv_freq(int64_t rotary_dim, double theta, Device device = kCPU);

// ---- top-k and token sampling

// torch.topk: the k largest (largest = false: smallest) elements along `dim` and their int64
// indices, in x's shape with size k at `dim`. NaN ranks above every number (first when largest,
// last when smallest, as torch), -0 and +0 are equal, and equal values give the lower index
// first. sorted = false allows the k in any order. Real dtypes (not bool, float8 or complex);
// k outside [0, size(dim)] is an IndexError. A 0-dim x gives itself and index 0 (k = 0 or 1).
ANVIL_API std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                          bool sorted = true);

// Token sampling, Hugging Face conventions. temperature 0: greedy (argmax, first index on ties;
// top_k and top_p ignored). top_k 0 or >= vocab: no top-k cut. top_p 1: no nucleus cut.
struct SamplingOptions {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
};
// One token id per row of logits [vocab] or [rows, vocab] (float32 / bfloat16 / float16; the
// result is int64 [] or [rows]), on the logits' device, without a host sync (CUDA graph safe).
// Per row: weights p = softmax(logits / temperature) in float32 (their sums in double); keep the
// top_k most probable; of those, in descending order, keep each token while the mass before it
// is < top_p (at least one), that mass measured after the top-k cut (renormalised, as HF and
// vLLM); pick by inverse CDF of u ~ U[0, 1) from Philox(seed, counter + row) over the kept,
// renormalised weights. Order: descending probability, ties by lower index; with no cut at all,
// the row in index order (nothing to sort). rng_state is an int64 [2] tensor {seed, counter} on
// the logits' device (see sampler_state); every call, greedy included, adds `rows` to the counter
// on the device, so repeated calls and CUDA graph replays draw fresh numbers. CPU and CUDA pick
// the same token for the same state, except where u falls within rounding of a boundary between
// two tokens (possible only without a top_k cut of at most 1024). A row holding NaN or +inf
// gives an unspecified (valid) token, the same on both backends.
ANVIL_API Tensor sample(const Tensor& logits, const SamplingOptions& options, const Tensor& rng_state);
// {seed, 0} as an int64 [2] tensor on `device`.
ANVIL_API Tensor sampler_state(uint64_t seed, Device device = kCPU);


// ---- FP8 products (torch.nn.functional.scaled_mm, PyTorch 2.15 rules)

// at::blas::ScalingType; the integer values are PyTorch's. TensorWise, RowWise, BlockWise1x128
// and BlockWise128x128 are implemented; BlockWise1x16 / 1x32 (FP4 / MX scales) are rejected.
enum class ScalingType : uint8_t {
  TensorWise = 0,
  RowWise = 1,
  BlockWise1x16 = 2,
  BlockWise1x32 = 3,
  BlockWise1x128 = 4,
  BlockWise128x128 = 5,
};

// out = (mat_a @ mat_b) * scale_a * scale_b (+ bias), accumulated in float32, scales applied
// after the whole K reduction, one rounding to output_dtype (float32, bfloat16 or float16).
// mat_a [M, K] and mat_b [K, N] are float8 (e4m3fn or e5m2, any strides); scales are float32
// decode (dequantisation) scales: TensorWise one element each, RowWise scale_a [M, 1] and
// scale_b [1, N], contiguous; both operands use the same recipe. Block-wise (DeepSeek-style,
// the layouts of torch._scaled_mm; L = ceil(K / 128), blocks past K, M or N partial):
// BlockWise1x128 scales each 128 consecutive k of a row: scale_a [M, L] with strides (1, M),
// scale_b [L, N] with strides (N, 1) (outer-dim-major); BlockWise128x128 each 128 x 128 block:
// scale_a [ceil(M / 128), L] with strides (L, 1), scale_b [L, ceil(N / 128)] with strides (1, L).
// The pairs (1x128, 1x128), (1x128, 128x128) and (128x128, 1x128); a and b not both e5m2. Each
// 128-column block's dot is multiplied by its two scales inside the K reduction:
// out[i, j] = sum_l sa(i, l) sb(l, j) sum_{q in l} a[i, q] b[q, j]. (PyTorch 2.15's
// F.scaled_mm takes scale_b as [N, L] and pads 128x128 grids to L rounded up to 4; this API
// keeps torch._scaled_mm's layouts, which quantize_fp8 returns.) bias [N] must match a
// bfloat16 / float16 output (no bias with a float32 output). Few rows run an FP8 GEMV that
// decodes mat_b in registers (mat_b = W^T of a row-major W [N, K] is the fast layout); more rows
// run cuBLASLt FP8 on CUDA (row-major a, column-major b, K and N multiples of 16; other shapes
// take a slower exact kernel) and a float32 GEMM of the decoded operands on the CPU. Block-wise
// recipes: the GEMV applies both scales per 128-column chunk of the dot; more rows on CUDA run
// cuBLASLt's block-scaled FP8 (sm_90, its VEC128 / BLK128x128 scale modes) or the exact tiled
// kernel where cuBLASLt declines.
ANVIL_API Tensor scaled_mm(const Tensor& mat_a, const Tensor& mat_b, const Tensor& scale_a, ScalingType scale_recipe_a,
                           const Tensor& scale_b, ScalingType scale_recipe_b, const Tensor& bias = {},
                           DType output_dtype = kBFloat16);

// Weight-only FP8 linear: y = input @ (weight * weight_scale)^T + bias with weight float8 [n, k]
// decoded in registers, weight_scale float32 per weight row ([n] or [n, 1]) or one element,
// input / bias / output in input's floating dtype, float32 accumulation and one rounding on the
// few-row (decode) path. More rows multiply by the weight converted to input's dtype (exact for
// e4m3fn / e5m2 values) and scale the product (two roundings).
// block = {bn, bk}: block scales as the Hub's FP8 checkpoints store them (weight_scale_inv):
// weight_scale [ceil(n / bn), ceil(k / bk)], w[j, q] * weight_scale[j / bn, q / bk], blocks past
// the edges partial. The few-row path applies each block's scale to its part of the dot (no
// dequantised copy); more rows multiply by dequantize_fp8(weight, ...) in input's dtype.
ANVIL_API Tensor scaled_linear(const Tensor& input, const Tensor& weight, const Tensor& weight_scale,
                               const Tensor& bias = {}, const Shape& block = {});

// weight float8 [..., n, k] times its block scales (float32 [..., ceil(n / bn), ceil(k / bk)],
// block = {bn, bk}) in float32, rounded once to dtype (float32 / bfloat16 / float16).
ANVIL_API Tensor dequantize_fp8(const Tensor& weight, const Tensor& scale, const Shape& block,
                                DType dtype = kBFloat16);

// Quantises x to float8 with decode scales, the form scaled_mm / scaled_linear take:
// RowWise: one scale per row of the last dim, scale [*, 1] = amax(|row|) / fp8 max (1 for an
// all-zero row); TensorWise: one scale []; BlockWise128x128: x [..., n, k], scale [..., ceil(n / 128),
// ceil(k / 128)] per 128 x 128 block (scaled_linear's block = {128, 128}; scaled_mm's
// BlockWise128x128 scale_a, and scale.t() its scale_b of mat_b = q.t()); BlockWise1x128: x [m, k],
// scale [m, ceil(k / 128)] per 128 columns of a row, strides (1, m) (scaled_mm's BlockWise1x128
// scale_a; scale.t() is its scale_b of mat_b = q.t()). q = saturate(x / scale). Returns (q, scale
// float32).
ANVIL_API std::tuple<Tensor, Tensor> quantize_fp8(const Tensor& x, ScalingType recipe = ScalingType::RowWise,
                                                  DType dtype = kFloat8_e4m3fn);

// ---- grouped products for mixture-of-experts (torch.nn.functional.grouped_mm)

// Groups of one operand's rows / columns / K range multiplied by per-group matrices, the group
// boundaries read on the device from offs (int32 cumulative ends: group g covers
// [offs[g-1], offs[g]), offs[-1] read as 0; empty groups allowed):
//   mat_a [M, K]    x mat_b [G, K, N] -> [M, N]      rows of a by group (MoE experts)
//   mat_a [G, M, K] x mat_b [K, N]    -> [M, N]      columns of b by group
//   mat_a [M, K]    x mat_b [K, N]    -> [G, M, N]   K by group (an empty group gives zeros)
//   mat_a [G, M, K] x mat_b [G, K, N] -> [G, M, N]   plain batched product, offs must be empty
// Rows (columns) past offs[-1] are not written. bfloat16 / float16 / float32, float32
// accumulation; out_dtype must equal mat_a's dtype. Like PyTorch, the output's row stride is
// padded to a multiple of 16 bytes. Offsets outside [0, extent] are clamped (never read out of
// bounds); decreasing offsets give unspecified values in the rows involved.
ANVIL_API Tensor grouped_mm(const Tensor& mat_a, const Tensor& mat_b, const Tensor& offs = {},
                            std::optional<DType> out_dtype = std::nullopt);
// grouped_mm into a preallocated out (unit column stride); for CUDA graphs and buffers reused
// across decode steps. Returns out.
ANVIL_API Tensor& grouped_mm_out(Tensor& out, const Tensor& mat_a, const Tensor& mat_b, const Tensor& offs = {});

// FP8 experts (torch._scaled_grouped_mm, rows-by-group layout): mat_a float8 [M, K] with
// scale_a float32 [M] (row-wise), or mat_a bfloat16 / float16 with scale_a undefined (weight-only
// FP8, an anvil extension); mat_b float8 [G, K, N] with scale_b float32 [G, N]; offs as
// grouped_mm. out = (a_g @ b_g) * scale_a[i] * scale_b[g, j], float32 accumulation, one rounding
// to out_dtype (bfloat16, float16 or float32).
ANVIL_API Tensor scaled_grouped_mm(const Tensor& mat_a, const Tensor& mat_b, const Tensor& scale_a,
                                   const Tensor& scale_b, const Tensor& offs, DType out_dtype = kBFloat16);

// ---- mixture-of-experts routing and combine (device-resident: no value is read on the host)

// The routing of T tokens over E experts, as Hugging Face's Qwen3-MoE / Mixtral / OLMoE blocks:
// probabilities softmax(router_logits) in float32 over all experts, the top_k most probable
// (ties: lower expert first), divided by their sum iff norm_topk_prob. The (token, slot) pairs
// sorted by expert give the rows of the grouped products.
struct MoeRouting {
  Tensor topk_weights;  // float32 [T, top_k], descending
  Tensor topk_ids;      // int64 [T, top_k], the experts of topk_weights
  Tensor offs;          // int32 [E]: cumulative ends of each expert's rows, grouped_mm's offs
  Tensor token_index;   // int64 [T * top_k]: the token of each expert-sorted row (index_select's index)
  Tensor sorted_pos;    // int64 [T, top_k]: the expert-sorted row of each (token, slot)
};
// router_logits [T, E] float32 / bfloat16 / float16, 1 <= top_k <= E (CUDA: E <= 1024). The sort
// is stable: within one expert the rows follow token order, the same on every device.
ANVIL_API MoeRouting moe_route(const Tensor& router_logits, int64_t top_k, bool norm_topk_prob);
// The router of an MoE block and its routing: logits = linear(hidden, router_weight) in hidden's
// dtype (as transformers computes them), then moe_route(logits, top_k, norm_topk_prob). Returns
// (logits [T, E], routing). hidden [T, H], router_weight [E, H], one float dtype. One token with
// unit-stride rows is one kernel on the CPU and on CUDA (there: bfloat16 / float16, H % 8 == 0,
// E <= 1024, 16-byte aligned rows; an 8-block cluster computes the logits, one warp routes
// them); anything else runs the reference composition, linear then moe_route. The routing always
// equals moe_route of the returned logits. moe_router_plan says which runs.
ANVIL_API std::tuple<Tensor, MoeRouting> moe_router(const Tensor& hidden, const Tensor& router_weight, int64_t top_k,
                                                    bool norm_topk_prob);
ANVIL_API FusedPlan moe_router_plan(const Tensor& hidden, const Tensor& router_weight, int64_t top_k);
// out[t, :] = sum_s topk_weights[t, s] * expert_out[sorted_pos[t, s], :] in float32 (slots in
// order), one rounding to expert_out's dtype. expert_out [T * top_k, H] in expert-sorted order;
// sorted_pos values outside [0, T * top_k) are clamped (never read out of bounds).
ANVIL_API Tensor moe_combine(const Tensor& expert_out, const Tensor& topk_weights, const Tensor& sorted_pos);

// The routed experts of an MoE block (a SwiGLU MLP per expert) for every token and slot:
//   e = routing.topk_ids[t, s]; [g, u] = hidden[t] @ gate_up[e]^T, rounded, split in halves;
//   a = silu(g) * u, rounded; y_s = a @ down[e]^T, rounded;
//   out[t] = sum_s routing.topk_weights[t, s] * y_s in float32 (slots in order), one rounding.
// hidden [T, H] float32 / bfloat16 / float16; gate_up [E, 2I, H] (the I gate rows, then the I up
// rows: transformers v5's fused layout), down [E, H, I], both hidden's dtype, or float8 with
// row-wise scales gate_up_scale [E, 2I] and down_scale [E, H] (float32; a product row is
// multiplied by its scale before rounding). Expert ids outside [0, E) are clamped. Equal to the
// composition index_select, grouped_mm (scaled_grouped_mm), silu_mul, grouped_mm, moe_combine
// over the routing's sorted order, which is what runs for many tokens; for few tokens (decode,
// T * top_k <= 64) fused kernels read each chosen expert's rows once per pair and never
// materialise the gathered or sorted rows (only routing.topk_ids / topk_weights are read).
// block = {bn, bk}: float8 experts with block scales gate_up_scale [E, ceil(2I / bn), ceil(H / bk)]
// and down_scale [E, ceil(H / bn), ceil(I / bk)] (see scaled_linear); the fused kernels apply
// them inside the dots (CUDA: e4m3, bn % 8 == 0, bk = 64 x 2^i, I % 4 == 0); otherwise the
// layer's experts are dequantised to hidden's dtype and those run. CUDA fuses bfloat16 / float16
// hidden with 16-byte aligned rows whose H and I fill whole 16-byte loads. moe_experts_plan says
// whether the fused kernels run on these arguments as given; a composed block-scaled call runs
// the dequantised experts, which are fused where their own plan says so.
ANVIL_API Tensor moe_experts(const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up,
                             const Tensor& down, const Tensor& gate_up_scale = {}, const Tensor& down_scale = {},
                             const Shape& block = {});
ANVIL_API FusedPlan moe_experts_plan(const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up,
                                     const Tensor& down, const Tensor& gate_up_scale = {},
                                     const Tensor& down_scale = {}, const Shape& block = {});

// ---- attention

// torch.nn.functional.scaled_dot_product_attention: query [..., Hq, L, E], key [..., H, S, E],
// value [..., H, S, Ev] -> [..., Hq, L, Ev] with the leading dims broadcast as matmul's (and the
// head dim too when enable_gqa is false); enable_gqa maps query head h to key / value head
// h / (Hq / H) (repeat_interleave). scores = q k^T * scale (default 1 / sqrt(E)) + attn_mask
// (bool: true may attend; or additive in the query's dtype or float32; broadcastable to
// [..., Hq, L, S]); is_causal keeps key j <= query i (top-left aligned, as PyTorch; not with a
// mask). float32 scores, softmax and accumulation whatever the dtype, one rounding of the output;
// a fully masked row gives zeros (PyTorch's math backend). dropout_p must be 0 (inference).
// float32 / bfloat16 / float16 (float64 on the CPU).
ANVIL_API Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                              const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                              bool is_causal = false, std::optional<double> scale = std::nullopt,
                                              bool enable_gqa = false);

// Appends new keys or values to a preallocated cache in place: cache [B, H, S_max, D] gets
// values [B, H, L, D] at rows [positions[b], positions[b] + L) of batch b, positions int32 [B]
// read on the device (a captured CUDA graph writes wherever the positions point at replay);
// rows that would fall outside [0, S_max) are dropped. Returns cache.
ANVIL_API Tensor& cache_write(Tensor& cache, const Tensor& values, const Tensor& positions);

// Attention of new queries over a preallocated KV cache whose valid lengths live on the device
// (a captured CUDA graph replays for every position). query [B, Hq, L, E] (L = 1 for decode);
// k_cache [B, H, S_max, E], v_cache [B, H, S_max, Ev] with Hq % H == 0 (grouped-query heads);
// cache_lens int32 [B]: keys [0, cache_lens[b]) are valid (clamped to S_max) and already hold
// the new tokens' keys, so query i sits at position cache_lens[b] - L + i and attends keys up to
// it (causal, bottom-right aligned). Returns [B, Hq, L, Ev]; float32 accumulation.
ANVIL_API Tensor decode_attention(const Tensor& query, const Tensor& k_cache, const Tensor& v_cache,
                                  const Tensor& cache_lens, std::optional<double> scale = std::nullopt);

}  // namespace anvil
