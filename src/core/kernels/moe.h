#pragma once
// MoE routing, combine, and the fused router and experts.
// Params and the kernel entry points of both backends (the backend boundary: core/kernels.h).

#include "core/kernels.h"

namespace anvil {

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

#define ANVIL_MOE_KERNELS(X)               \
  X(moe_route, const MoeRouteParams&)      \
  X(moe_combine, const MoeCombineParams&)
ANVIL_DECLARE_KERNELS(ANVIL_MOE_KERNELS)

#define ANVIL_MOE_FUSED(X)                 \
  X(moe_router, const MoeRouterParams&)    \
  X(moe_experts, const MoeExpertsParams&)
ANVIL_DECLARE_FUSED(ANVIL_MOE_FUSED)

}  // namespace anvil
