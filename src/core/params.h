#pragma once
// POD parameter structs shared by the op front ends and the CPU / CUDA kernels.
// Kernels never see a Tensor: they get pointers, element strides and these structs.
#include <cstdint>

#include "anvil/dtype.h"

namespace anvil {

inline constexpr int kMaxDims = 16;

// A host number handed to a kernel: `f` for floating dtypes, `i` (two's complement bits, so
// uint64 values above INT64_MAX survive) for integer and bool dtypes, `im` for complex.
struct ScalarArg {
  double f = 0;
  int64_t i = 0;
  double im = 0;
};

enum class UnaryOp : int8_t { Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sigmoid, Silu, Gelu, GeluTanh, Tanh, LogicalNot };
enum class BinaryOp : int8_t {
  Add,       // a + alpha * b
  Sub,       // a - alpha * b
  Mul,
  Div,       // true division (floating / complex dtypes only)
  DivTrunc,
  DivFloor,
  Pow,
  Maximum,
  Minimum,
  Eq, Ne, Lt, Le, Gt, Ge,  // out dtype bool
  LogicalAnd, LogicalOr,   // out dtype bool
};
inline constexpr bool is_compare(BinaryOp op) { return op >= BinaryOp::Eq; }

// One elementwise launch over an iteration space of `ndim` dims (already broadcast and with
// contiguous neighbouring dims merged). Slot 0 is the output, slots 1.. the inputs.
//  copy:   out[dst_dtype] = in[src_dtype] converted
//  fill:   out = scalar
//  unary:  out = op(in1)                       (in and out dtype equal, or bool for LogicalNot)
//  binary: out = op(in1, in2 [, alpha])        (inputs share `dtype`; out dtype or bool)
//  where:  out = in1(bool) ? in2 : (has_b ? in3 : scalar0)
//  clamp:  out = min(max(in1, lo), hi): lo/hi from in2/in3 tensors or scalar0/scalar1 when
//          the matching has_* flag says so
struct ElementwiseParams {
  int ndim = 0;
  int nargs = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  void* ptr[4] = {};
  int64_t strides[4][kMaxDims] = {};
  DType dtype = kFloat32;      // inputs
  DType out_dtype = kFloat32;  // slot 0
  int8_t op = 0;               // UnaryOp / BinaryOp value
  bool contiguous = false;     // every slot dense with the same layout: index == offset
  bool has_a = false, has_b = false;  // where / clamp operand flags (see above)
  ScalarArg alpha, scalar0, scalar1;
};

enum class ReduceOp : int8_t { Sum, Prod, Mean, Amax, Amin, Max, Min, Argmax, Argmin, Var, Std };

// Reduces `in` over the `red` dims for each point of the kept `out` dims. `out` (and
// `out_index` for Max/Min/Argmax/Argmin) are contiguous with n_out elements in kept-dim order.
struct ReduceParams {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t* out_index = nullptr;
  DType in_dtype = kFloat32;
  DType out_dtype = kFloat32;  // accumulation type follows out_dtype (float32 for low precision)
  ReduceOp op = ReduceOp::Sum;
  int64_t n_out = 1, n_red = 1;
  int out_ndim = 0, red_ndim = 0;
  int64_t out_sizes[kMaxDims] = {}, out_strides[kMaxDims] = {};  // input strides of kept dims
  int64_t red_sizes[kMaxDims] = {}, red_strides[kMaxDims] = {};  // input strides of reduced dims
  double correction = 1;  // Var / Std
};

// out[o, j, i] = in[o, index[j], i] over contiguous [outer, in_dim, inner] input and
// [outer, n_index, inner] output; `index` is contiguous int64.
struct IndexSelectParams {
  const void* in = nullptr;
  void* out = nullptr;
  const int64_t* index = nullptr;
  DType dtype = kFloat32;
  int64_t outer = 0, in_dim = 0, inner = 0, n_index = 0;
};

// gather:  out[p] = self[p with p[dim] = index[p]]              (p over index's shape)
// scatter: self[p with p[dim] = index[p]] = src[p] (or scalar0), accumulate adds
struct GatherParams {
  void* self = nullptr;
  void* out_or_src = nullptr;  // gather: out; scatter: src (null when the scalar is used)
  const int64_t* index = nullptr;
  DType dtype = kFloat32;
  int ndim = 0;
  int dim = 0;
  int64_t numel = 0;  // index elements
  int64_t sizes[kMaxDims] = {};  // index's sizes
  int64_t self_strides[kMaxDims] = {}, index_strides[kMaxDims] = {}, other_strides[kMaxDims] = {};
  int64_t self_dim_size = 0;
  bool accumulate = false;
  ScalarArg scalar0;
};

// C[b] = A[b] @ B[b]; A is [m, k], B is [k, n], C is [m, n] contiguous. A and B have one unit
// stride each (row- or column-major), batch strides may be 0 (broadcast).
struct BmmParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  DType dtype = kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 0;
  int64_t stride_b_batch = 0, stride_b_row = 0, stride_b_col = 0;
};

enum class RandomKind : int8_t { Uniform, Normal, Int };
// Contiguous output; element i draws from Philox(seed, counter = offset + i).
struct RandomParams {
  void* out = nullptr;
  DType dtype = kFloat32;
  int64_t numel = 0;
  uint64_t seed = 0, offset = 0;
  RandomKind kind = RandomKind::Uniform;
  int64_t low = 0, high = 1;  // Int: [low, high)
};

// ---- decode hot path (linear, softmax, norms, RoPE, SwiGLU). Row-major matrices whose last
// dim is unit-stride; `stride_*_row` is the row stride in elements.

// y[i, j] = sum_q x[i, q] * w[j, q] (+ bias[j]) for i < m, j < n: x [m, k], w [n, k], y [m, n].
// float32 accumulation (float64 for float64), bias added before the one rounding to `dtype`.
// Used for the few-row (decode) case; many rows go to the GEMM.
struct GemvParams {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // [n] contiguous or null
  void* y = nullptr;
  DType dtype = kFloat32;  // x, w, bias and y
  int64_t m = 0, n = 0, k = 0;
  int64_t stride_x_row = 0, stride_w_row = 0, stride_y_row = 0;
  // add_rms_norm_linear (CUDA, m = 1, 16-bit, k % 8 == 0, every row 16-byte aligned): with
  // residual set, the product's input is rms_norm(round(x + residual)) * norm_weight (norm_weight
  // null: unweighted), computed by every block; block 0 writes round(x + residual) to sum_out.
  const void* residual = nullptr;
  const void* norm_weight = nullptr;
  void* sum_out = nullptr;
  double eps = 0;
};

// Softmax over the middle dim of a contiguous [outer, dim_size, inner] input; out has the same
// layout. Loads convert in_dtype -> float32 (float64 for float64), stores round to out_dtype.
struct SoftmaxParams {
  const void* in = nullptr;
  void* out = nullptr;
  DType in_dtype = kFloat32, out_dtype = kFloat32;
  int64_t outer = 0, dim_size = 0, inner = 0;
  bool log = false;  // log_softmax
};

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight[:] over rows x cols.
// With `residual`: h = round(x + residual) is written to residual_out and normalised instead.
struct RmsNormParams {
  const void* x = nullptr;
  const void* residual = nullptr;  // null: plain rms_norm
  const void* weight = nullptr;    // [cols] contiguous or null
  void* out = nullptr;
  void* residual_out = nullptr;
  DType dtype = kFloat32, weight_dtype = kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t stride_x_row = 0, stride_residual_row = 0, stride_out_row = 0, stride_residual_out_row = 0;
  double eps = 0;
};

// out[r, c] = silu(gate[r, c]) * up[r, c] computed in float32, one rounding.
struct SiluMulParams {
  const void* gate = nullptr;
  const void* up = nullptr;
  void* out = nullptr;
  DType dtype = kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t stride_gate_row = 0, stride_up_row = 0, stride_out_row = 0;
};

// Neox-style rotary embedding over the last dim (head_dim) of x, one position per row:
//   a = x[.., c], b = x[.., c + half] for c < half = rotary_dim / 2,
//   angle = float(pos) * inv_freq[c], out = (a cos - b sin, b cos + a sin) in float32;
//   columns >= rotary_dim are copied. Rows are the points of the leading `ndim` dims; positions
//   (int32 or int64) are read on the device through their (broadcast, maybe 0) strides.
struct RopeParams {
  const void* x = nullptr;
  void* out = nullptr;
  const void* positions = nullptr;
  const float* inv_freq = nullptr;  // [rotary_dim / 2] float32 on x's device
  DType dtype = kFloat32, pos_dtype = kInt64;
  int ndim = 0;
  int64_t rows = 0, head_dim = 0, rotary_dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t stride_x[kMaxDims] = {}, stride_out[kMaxDims] = {}, stride_pos[kMaxDims] = {};
};

// qk_norm_rope_cache: rows (b, l, j) of qkv, j over heads q heads, kv_heads k heads, kv_heads v
// heads of head_dim columns. q / k heads: rms_norm (no weight pointer: no norm) rounded to the
// dtype, then neox rope at position start[b] + l; q goes to q_out [B, heads, L, head_dim]
// (contiguous), k and v to their caches at row start[b] + l (rows outside [0, cache_rows) dropped).
struct QkNormRopeCacheParams {
  const void* qkv = nullptr;        // unit-stride channels
  const void* q_weight = nullptr;   // [head_dim] or null
  const void* k_weight = nullptr;   // [head_dim] or null
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  const int32_t* start = nullptr;   // [batch]
  void* q_out = nullptr;
  void* k_cache = nullptr;          // [batch, kv_heads, cache_rows, head_dim], unit-stride last dim
  void* v_cache = nullptr;
  DType dtype = kFloat32, weight_dtype = kFloat32;  // both weights share weight_dtype
  int64_t batch = 0, len = 0, heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0, cache_rows = 0;
  int64_t stride_qkv[2] = {};       // batch, token
  int64_t stride_k[3] = {}, stride_v[3] = {};
  double eps = 0;
};

// Top-k along the middle dim of a contiguous [outer, dim_size, inner] input: values (input dtype)
// and int64 indices, each contiguous [outer, k, inner]. largest: NaN ranks above every number.
// Ties give the lower index first. sorted: descending (largest) / ascending order; else any order.
struct TopkParams {
  const void* in = nullptr;
  void* values = nullptr;
  int64_t* indices = nullptr;
  DType dtype = kFloat32;
  int64_t outer = 0, dim_size = 0, inner = 0, k = 0;
  bool largest = true, sorted = true;
};

// One token id per row of logits [rows, vocab] (row stride stride_row, unit column stride):
// probabilities softmax(logits / temperature), restricted to the top_k largest (0 = all), then
// to the smallest prefix of them, in descending order, whose mass reaches top_p (1 = all),
// renormalised; one uniform draw per row from Philox(seed = rng_state[0], counter =
// rng_state[1] + row). rng_state [2] int64 lives on the logits' device; the kernel adds `rows`
// to rng_state[1] after drawing, so a replayed CUDA graph draws fresh numbers. Greedy arrives
// as top_k = 1; with no cut at all (top_k 0, top_p 1) the draw walks the row in index order.
struct SampleParams {
  const void* logits = nullptr;
  int64_t* out = nullptr;
  int64_t* rng_state = nullptr;
  DType dtype = kFloat32;
  int64_t rows = 0, vocab = 0, stride_row = 0;
  float temperature = 1.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
};


// ---- FP8 and grouped products

// Rows up to which linear / scaled_mm take the GEMV kernels: the weight streams once for all of
// them; past this the GEMM, which re-reads it per row tile, wins.
inline constexpr int64_t kGemvMaxRows = 8;

// acc(i, j) = sum_q a[i, q] * w[j, q] in float32 over a [m, k] and w [n, k] (w[j, q] is
// mat_b[q, j]: the weight rows of a linear layer); out[i, j] = round(acc * (sa(i) * sw(j)) +
// bias[j]) with the scale product and the bias in float32. sa(i) = scale_a[per_row ? i : 0],
// 1 when scale_a is null (likewise sw). Operands: float8 (e4m3fn / e5m2) or float32 / bfloat16
// / float16 (weight-only FP8: a in a float dtype, w float8). Arbitrary strides on a and w; out
// has unit column stride. bias (bias_dtype) is [n] contiguous or null.
// Block scales of a float8 operand [n, k] (the Hub's FP8 checkpoints, scaled_linear's `block`,
// scaled_mm's block-wise recipes): element (j, q) decodes as x[j, q] * scale[(j / block_n) *
// stride_row + (q / block_k) * stride_col], experts' weights offset by stride_expert per expert.
// scale null: no block scales. Only scaled_mm passes stride_col != 1 (PyTorch's outer-dim-major
// scale layouts); the experts and scaled_linear grids are contiguous.
struct BlockScale {
  const float* scale = nullptr;
  int64_t block_n = 0, block_k = 0;
  int64_t stride_row = 0, stride_col = 1, stride_expert = 0;
};

struct ScaledMmParams {
  const void* a = nullptr;
  const void* w = nullptr;
  const float* scale_a = nullptr;
  const float* scale_w = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  DType a_dtype = kFloat8_e4m3fn, w_dtype = kFloat8_e4m3fn, bias_dtype = kBFloat16, out_dtype = kBFloat16;
  int64_t m = 0, n = 0, k = 0;
  int64_t stride_a_row = 0, stride_a_col = 1, stride_w_row = 0, stride_w_col = 1, stride_out_row = 0;
  bool scale_a_per_row = false, scale_w_per_row = false;
  BlockScale w_block;  // with it, scale_w is null: the block scales act inside the dot
  BlockScale a_block;  // a's block scales (block_n counts a's rows); with it, scale_a is null.
                       // With both, block_k is the same and w_block's stride_col may differ from 1.
};

// Which operand's dimension offs partitions (see grouped_mm in anvil/nn.h).
enum class GroupedLayout : int8_t {
  RowsByGroup,  // a [m, k], b [G, k, n] -> out [m, n]: rows [s_g, e_g) of a use b[g]
  ColsByGroup,  // a [G, m, k], b [k, n] -> out [m, n]: columns [s_g, e_g) of b use a[g]
  KByGroup,     // a [m, k], b [k, n] -> out [G, m, n]: out[g] = a[:, s_g:e_g] @ b[s_g:e_g, :]
  Batched,      // a [G, m, k], b [G, k, n] -> out [G, m, n], no offs
};

// Grouped product with group ends read on the device: e_g = clamp(offs[g], 0, extent) with the
// extent the partitioned size (m, n or k), s_g = e_{g-1} (0 for g = 0), a group with e_g <= s_g
// is empty (KByGroup writes zeros for it). Rows (columns) past e_{G-1} are not written.
// b is addressed as [.., k, n] (stride_b_row steps k, stride_b_col steps n); any strides.
// out has unit column stride. float32 accumulation, one rounding to out_dtype. The FP8 form
// (RowsByGroup only): b float8 with scale_b [G, n] contiguous, a float8 with scale_a [m] or a
// float dtype with scale_a null; out = round(acc * scale_a[i] * scale_b[g, j]).
struct GroupedMmParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  const int32_t* offs = nullptr;  // [groups] on the operands' device; null for Batched
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  DType a_dtype = kBFloat16, b_dtype = kBFloat16, out_dtype = kBFloat16;
  GroupedLayout layout = GroupedLayout::RowsByGroup;
  int64_t groups = 0, m = 0, n = 0, k = 0;
  int64_t stride_a_batch = 0, stride_a_row = 0, stride_a_col = 1;
  int64_t stride_b_batch = 0, stride_b_row = 0, stride_b_col = 1;
  int64_t stride_out_batch = 0, stride_out_row = 0;
};

// MoE routing of `tokens` rows of logits [tokens, experts] (row stride stride_row, unit column
// stride): float32 softmax over the experts, the top_k most probable (descending, ties lower
// expert first), renormalised to sum 1 iff `renormalize`; then the (token, slot) pairs sorted
// by expert: offs[e] = number of pairs with expert <= e, token_index[r] = token of sorted row r,
// sorted_pos[t * top_k + s] = row of pair (t, s).
struct MoeRouteParams {
  const void* logits = nullptr;
  float* weights = nullptr;       // [tokens, top_k]
  int64_t* ids = nullptr;         // [tokens, top_k]
  int32_t* offs = nullptr;        // [experts]
  int64_t* token_index = nullptr; // [tokens * top_k]
  int64_t* sorted_pos = nullptr;  // [tokens, top_k]
  DType dtype = kFloat32;
  int64_t tokens = 0, experts = 0, top_k = 0, stride_row = 0;
  bool renormalize = false;
};

// moe_router for one token: logits[e] = dot(hidden, weight[e]) in float32, rounded to dtype
// (stored to route.logits), then route's top-k over them (moe_route's outputs).
struct MoeRouterParams {
  const void* hidden = nullptr;  // [hidden_size], unit stride
  const void* weight = nullptr;  // [experts, hidden_size], unit column stride
  void* logits = nullptr;        // [experts], also route.logits
  int64_t hidden_size = 0, stride_w_row = 0;
  MoeRouteParams route;          // tokens = 1
};

// out[t, :] = round(sum_s weights[t, s] * in[sorted_pos[t, s], :]) with float32 accumulation in
// slot order; in [tokens * top_k, hidden] and out [tokens, hidden] with unit column strides.
struct MoeCombineParams {
  const void* in = nullptr;
  const float* weights = nullptr;
  const int64_t* sorted_pos = nullptr;
  void* out = nullptr;
  DType dtype = kBFloat16;
  int64_t tokens = 0, top_k = 0, hidden = 0, stride_in_row = 0, stride_out_row = 0;
};

// The routed experts of an MoE block for few (token, slot) pairs, fused (moe_experts' decode
// path): for pair q = t * top_k + s with expert e = clamp(ids[q], 0, experts - 1),
//   g_i, u_i = round(dot(hidden[t], gate_up[e, i]) * sg), round(dot(hidden[t], gate_up[e, inter + i]) * su)
//   act[q, i] = round(silu(g_i) * u_i)
//   y[q, j] = round(dot(act[q], down[e, j]) * sd)
//   out[t, j] = round(sum_s weights[t, s] * y[t * top_k + s, j])  (float32, slots in order)
// with the scales 1 unless gate_up_scale [experts, 2 inter] / down_scale [experts, hidden]
// (float8 weights). Every rounding is to `dtype`, as the composition's intermediates. Weight rows
// have unit stride along their columns; ids, weights are [tokens, top_k] contiguous; act is
// [tokens * top_k, inter] contiguous scratch (CUDA). The CUDA kernels take 16-bit activations,
// 16-byte aligned rows, hidden and inter multiples of 16 / sizeof(w element), the limits below.
constexpr int64_t kMoeExpertsMaxPairs = 64;  // tokens * top_k the fused kernels take
constexpr int64_t kMoeExpertsMaxTopK = 32;   // the CUDA down kernel's per-slot partials
struct MoeExpertsParams {
  const void* hidden = nullptr;
  const int64_t* ids = nullptr;
  const float* weights = nullptr;
  const void* gate_up = nullptr;
  const void* down = nullptr;
  const float* gate_up_scale = nullptr;
  const float* down_scale = nullptr;
  BlockScale gate_up_block, down_block;  // block-scaled float8 experts (then the row scales are null)
  void* act = nullptr;
  void* out = nullptr;
  DType dtype = kBFloat16, w_dtype = kBFloat16;
  int64_t tokens = 0, top_k = 0, experts = 0, hidden_size = 0, inter = 0;
  int64_t stride_hidden_row = 0, stride_out_row = 0;
  int64_t stride_gu_expert = 0, stride_gu_row = 0, stride_down_expert = 0, stride_down_row = 0;
};

// Attention over batch x heads_q of q [q_len, head_dim], k [kv_len, head_dim], v [kv_len,
// v_head_dim]; query head h reads key / value head h * heads_kv / heads_q (grouped-query heads
// and a broadcast single head alike). Every operand is addressed through strides over [batch,
// head, row, col] (0 for broadcast dims; the last stride of q, k, v and out is 1). For query row
// i of batch b the valid keys are j < len = (kv_lens ? min(kv_lens[b], kv_len) : kv_len), and
// with `causal` also j <= i + (causal_from_end ? len - q_len : 0). score_j = dot(q_i, k_j) *
// scale + mask (mask: null; bool with true = attend; or additive of mask_dtype); a key that is
// not valid or masked out does not take part. p = softmax(scores) in float32; out_i = sum_j p_j
// v_j with float32 accumulation, one rounding to dtype; a row with no key left gives zeros.
struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  const void* mask = nullptr;
  const int32_t* kv_lens = nullptr;  // [batch] on the operands' device, or null
  DType dtype = kFloat32, mask_dtype = kBool;
  int64_t batch = 0, heads_q = 0, heads_kv = 0, q_len = 0, kv_len = 0, head_dim = 0, v_head_dim = 0;
  int64_t stride_q[4] = {}, stride_k[4] = {}, stride_v[4] = {}, stride_out[4] = {}, stride_mask[4] = {};
  double scale = 1.0;
  bool causal = false;
  bool causal_from_end = false;
};

// KV cache append: cache[b, h, pos[b] + l, :] = src[b, h, l, :] for l < rows where pos[b] + l lies
// in [0, cache_rows); nothing else is written. pos int32 [batch] is read on the device. Strides
// in elements over [batch, head, row]; the last dim (cols) is unit-stride in both.
struct CacheWriteParams {
  void* cache = nullptr;
  const void* src = nullptr;
  const int32_t* pos = nullptr;
  int64_t elem_size = 2;
  int64_t batch = 0, heads = 0, rows = 0, cols = 0, cache_rows = 0;
  int64_t stride_cache[3] = {}, stride_src[3] = {};
};

// cache_prefetch: `slices` spans of `span_bytes` at base + index[i] * stride_bytes (index null:
// one span at base); indices outside [0, count) are skipped.
struct PrefetchParams {
  const void* base = nullptr;
  const void* index = nullptr;  // int32 / int64 [slices] or null
  bool index64 = true;
  int64_t slices = 1, count = 1, stride_bytes = 0, span_bytes = 0;
};

}  // namespace anvil
