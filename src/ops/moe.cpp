// MoE routing, combine and the fused experts: validation and kernel calls; nothing is read on
// the host.
#include <cstdint>
#include <optional>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/kernels/moe.h"
#include "core/util.h"
#include "ops/block_scale.h"

namespace anvil {

namespace {

// Checks of a routing over `experts` for `tokens` tokens (op names the caller).
void check_routing_args(const char* op, int64_t tokens, int64_t experts, int64_t top_k) {
  ANVIL_CHECK(experts >= 1 && experts < (int64_t{1} << 31), ShapeError, op, " expected 1 to 2^31 - 1 experts, got ",
              experts);
  ANVIL_CHECK(top_k >= 1 && top_k <= experts, IndexError, op, " top_k must be in [1, ", experts, "], got ", top_k);
  ANVIL_CHECK(tokens * top_k < (int64_t{1} << 31), ShapeError, op, " tokens * top_k must fit int32 offsets, got ", tokens,
              " x ", top_k);
}

// The routing's outputs, allocated, and the kernel parameters over logits x [tokens, experts].
MoeRouteParams routing_params(MoeRouting& r, const Tensor& x, int64_t tokens, int64_t experts, int64_t top_k,
                              bool norm_topk_prob) {
  const Device d = x.device();
  const TensorOptions i64 = TensorOptions(kInt64).device(d);
  r.topk_weights = empty({tokens, top_k}, TensorOptions(kFloat32).device(d));
  r.topk_ids = empty({tokens, top_k}, i64);
  r.offs = empty({experts}, TensorOptions(kInt32).device(d));
  r.token_index = empty({tokens * top_k}, i64);
  r.sorted_pos = empty({tokens, top_k}, i64);
  MoeRouteParams p;
  p.logits = x.raw_data_ptr();
  p.weights = static_cast<float*>(r.topk_weights.raw_data_ptr());
  p.ids = static_cast<int64_t*>(r.topk_ids.raw_data_ptr());
  p.offs = static_cast<int32_t*>(r.offs.raw_data_ptr());
  p.token_index = static_cast<int64_t*>(r.token_index.raw_data_ptr());
  p.sorted_pos = static_cast<int64_t*>(r.sorted_pos.raw_data_ptr());
  p.dtype = x.dtype();
  p.tokens = tokens;
  p.experts = experts;
  p.top_k = top_k;
  p.stride_row = tokens == 0 ? experts : row_stride(x);
  p.renormalize = norm_topk_prob;
  return p;
}

// moe_router's fused params (outputs unset) for what they hold: one token, unit-stride rows.
std::optional<MoeRouterParams> router_params(const Tensor& hidden, const Tensor& w, int64_t top_k,
                                             bool norm_topk_prob) {
  const int64_t H = hidden.size(1), E = w.size(0);
  if (hidden.size(0) != 1 || H == 0 || (H > 1 && (hidden.stride(1) != 1 || w.stride(1) != 1))) return std::nullopt;
  MoeRouterParams p;
  p.hidden = hidden.raw_data_ptr();
  p.weight = w.raw_data_ptr();
  p.hidden_size = H;
  p.stride_w_row = E <= 1 ? H : w.stride(0);
  p.route.dtype = hidden.dtype();
  p.route.tokens = 1;
  p.route.experts = E;
  p.route.top_k = top_k;
  p.route.stride_row = E;
  p.route.renormalize = norm_topk_prob;
  return p;
}

// moe_router's checks.
void check_router(const char* op, const Tensor& hidden, const Tensor& router_weight, int64_t top_k) {
  ANVIL_CHECK(hidden.defined() && router_weight.defined(), Error, op, " undefined tensor");
  check_same_device(op, hidden, router_weight);
  const DType t = hidden.dtype();
  ANVIL_CHECK((t == kFloat32 || t == kBFloat16 || t == kFloat16) && router_weight.dtype() == t, DTypeError, op,
              " hidden and router_weight must share float32, bfloat16 or float16, got ", describe(hidden), " and ",
              describe(router_weight));
  ANVIL_CHECK(hidden.dim() == 2 && router_weight.dim() == 2 && router_weight.size(1) == hidden.size(1), ShapeError, op,
              " expected hidden [T, H] and router_weight [E, H], got ", describe(hidden), " and ", describe(router_weight));
  check_routing_args(op, hidden.size(0), router_weight.size(0), top_k);
}

}  // namespace

MoeRouting moe_route(const Tensor& router_logits, int64_t top_k, bool norm_topk_prob) {
  const char* op = "[moe_route]";
  ANVIL_CHECK(router_logits.defined(), Error, op, " undefined tensor");
  const DType t = router_logits.dtype();
  ANVIL_CHECK(t == kFloat32 || t == kBFloat16 || t == kFloat16, DTypeError, op,
              " router_logits must be float32, bfloat16 or float16, got ", describe(router_logits));
  ANVIL_CHECK(router_logits.dim() == 2, ShapeError, op, " router_logits must be [tokens, experts], got ",
              describe(router_logits));
  const int64_t tokens = router_logits.size(0), experts = router_logits.size(1);
  check_routing_args(op, tokens, experts, top_k);
  const Tensor x = tokens == 0 ? router_logits : as_rows(router_logits, tokens, experts);
  MoeRouting r;
  const MoeRouteParams p = routing_params(r, x, tokens, experts, top_k, norm_topk_prob);
  if (tokens == 0) {
    r.offs.fill_(0);
    return r;
  }
  ANVIL_KERNEL(x.device(), moe_route, p);
  return r;
}

FusedPlan moe_router_plan(const Tensor& hidden, const Tensor& router_weight, int64_t top_k) {
  check_router("[moe_router_plan]", hidden, router_weight, top_k);
  const std::optional<MoeRouterParams> p = router_params(hidden, router_weight, top_k, false);
  return p ? ANVIL_PLAN(hidden.device(), moe_router, *p) : FusedPlan::Composed;
}

std::tuple<Tensor, MoeRouting> moe_router(const Tensor& hidden, const Tensor& router_weight, int64_t top_k,
                                          bool norm_topk_prob) {
  check_router("[moe_router]", hidden, router_weight, top_k);
  std::optional<MoeRouterParams> p = router_params(hidden, router_weight, top_k, norm_topk_prob);
  if (!p || ANVIL_PLAN(hidden.device(), moe_router, *p) != FusedPlan::Fused) {  // the composition
    Tensor logits = linear(hidden, router_weight);
    return {logits, moe_route(logits, top_k, norm_topk_prob)};
  }
  Tensor logits = empty({1, router_weight.size(0)}, TensorOptions(hidden.dtype()).device(hidden.device()));
  MoeRouting r;
  p->route = routing_params(r, logits, 1, router_weight.size(0), top_k, norm_topk_prob);
  p->logits = logits.raw_data_ptr();
  ANVIL_KERNEL(hidden.device(), moe_router, *p);
  return {logits, r};
}

Tensor moe_combine(const Tensor& expert_out, const Tensor& topk_weights, const Tensor& sorted_pos) {
  const char* op = "[moe_combine]";
  ANVIL_CHECK(expert_out.defined() && topk_weights.defined() && sorted_pos.defined(), Error, op, " undefined tensor");
  check_same_device(op, expert_out, topk_weights);
  check_same_device(op, expert_out, sorted_pos);
  const DType t = expert_out.dtype();
  ANVIL_CHECK(t == kFloat32 || t == kBFloat16 || t == kFloat16, DTypeError, op,
              " expert_out must be float32, bfloat16 or float16, got ", describe(expert_out));
  ANVIL_CHECK(topk_weights.dtype() == kFloat32, DTypeError, op, " topk_weights must be float32, got ",
              describe(topk_weights));
  ANVIL_CHECK(sorted_pos.dtype() == kInt64, DTypeError, op, " sorted_pos must be int64, got ", describe(sorted_pos));
  ANVIL_CHECK(topk_weights.dim() == 2 && sorted_pos.sizes() == topk_weights.sizes(), ShapeError, op,
              " topk_weights and sorted_pos must both be [tokens, top_k], got ", describe(topk_weights), " and ",
              describe(sorted_pos));
  const int64_t tokens = topk_weights.size(0), top_k = topk_weights.size(1);
  ANVIL_CHECK(expert_out.dim() == 2 && expert_out.size(0) == tokens * top_k, ShapeError, op,
              " expert_out must be [tokens * top_k, hidden] = [", tokens * top_k, ", hidden], got ",
              describe(expert_out));
  const int64_t hidden = expert_out.size(1);
  Tensor out = empty({tokens, hidden}, TensorOptions(t).device(expert_out.device()));
  if (out.numel() == 0) return out;
  if (top_k == 0) return out.fill_(0);
  const Tensor in = as_rows(expert_out, tokens * top_k, hidden);
  const Tensor w = topk_weights.contiguous(), pos = sorted_pos.contiguous();
  MoeCombineParams p;
  p.in = in.raw_data_ptr();
  p.weights = static_cast<const float*>(w.raw_data_ptr());
  p.sorted_pos = static_cast<const int64_t*>(pos.raw_data_ptr());
  p.out = out.raw_data_ptr();
  p.dtype = t;
  p.tokens = tokens;
  p.top_k = top_k;
  p.hidden = hidden;
  p.stride_in_row = row_stride(in);
  p.stride_out_row = hidden;
  ANVIL_KERNEL(expert_out.device(), moe_combine, p);
  return out;
}

namespace {

// Weight rows with unit column stride: a view when they have it, else a contiguous copy.
Tensor unit_rows(const Tensor& w) { return w.stride(2) == 1 || w.size(2) <= 1 ? w : w.contiguous(); }

// moe_experts' checks.
void check_experts(const char* op, const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up,
                   const Tensor& down, const Tensor& gate_up_scale, const Tensor& down_scale, const Shape& block) {
  ANVIL_CHECK(hidden.defined() && gate_up.defined() && down.defined(), Error, op, " undefined tensor");
  ANVIL_CHECK(routing.topk_ids.defined() && routing.topk_weights.defined(), Error, op,
              " routing.topk_ids and routing.topk_weights must be defined");
  for (const Tensor* t : {&gate_up, &down, &routing.topk_ids, &routing.topk_weights}) check_same_device(op, hidden, *t);
  const DType dt = hidden.dtype();
  ANVIL_CHECK(dt == kFloat32 || dt == kBFloat16 || dt == kFloat16, DTypeError, op,
              " hidden must be float32, bfloat16 or float16, got ", describe(hidden));
  ANVIL_CHECK(hidden.dim() == 2, ShapeError, op, " hidden must be [tokens, hidden], got ", describe(hidden));
  const int64_t T = hidden.size(0), H = hidden.size(1);
  ANVIL_CHECK(gate_up.dim() == 3 && gate_up.size(2) == H && gate_up.size(1) % 2 == 0, ShapeError, op,
              " gate_up must be [experts, 2 * inter, ", H, "], got ", describe(gate_up));
  const int64_t E = gate_up.size(0), I = gate_up.size(1) / 2;
  ANVIL_CHECK(E >= 1, ShapeError, op, " gate_up has no experts: ", describe(gate_up));
  ANVIL_CHECK(down.dim() == 3 && down.size(0) == E && down.size(1) == H && down.size(2) == I, ShapeError, op,
              " down must be [", E, ", ", H, ", ", I, "] for gate_up ", describe(gate_up), ", got ", describe(down));
  if (is_float8(gate_up.dtype())) {
    ANVIL_CHECK(down.dtype() == gate_up.dtype(), DTypeError, op, " gate_up and down must be one float8 dtype or both ",
                dtype_name(dt), ", got ", describe(gate_up), " and ", describe(down));
    ANVIL_CHECK(dt != kFloat32, DTypeError, op, " float8 experts take bfloat16 or float16 hidden, got ",
                describe(hidden));
    ANVIL_CHECK(gate_up_scale.defined() && down_scale.defined(), Error, op,
                " float8 experts need gate_up_scale [", E, ", ", 2 * I, "] and down_scale [", E, ", ", H, "]");
    for (const Tensor* t : {&gate_up_scale, &down_scale}) check_same_device(op, hidden, *t);
    ANVIL_CHECK(gate_up_scale.dtype() == kFloat32 && down_scale.dtype() == kFloat32, DTypeError, op,
                " the scales must be float32, got ", describe(gate_up_scale), " and ", describe(down_scale));
    if (!block.empty()) {
      check_block_scale(op, gate_up_scale, "gate_up_scale", gate_up, block);
      check_block_scale(op, down_scale, "down_scale", down, block);
    } else {
      ANVIL_CHECK(gate_up_scale.numel() == E * 2 * I && gate_up_scale.size(0) == E && down_scale.numel() == E * H &&
                      down_scale.size(0) == E,
                  ShapeError, op, " gate_up_scale must be [", E, ", ", 2 * I, "] and down_scale [", E, ", ", H,
                  "], got ", describe(gate_up_scale), " and ", describe(down_scale));
    }
  } else {
    ANVIL_CHECK(gate_up.dtype() == dt && down.dtype() == dt, DTypeError, op,
                " gate_up and down must be hidden's dtype ", dtype_name(dt), " (or float8 with scales), got ",
                describe(gate_up), " and ", describe(down));
    ANVIL_CHECK(!gate_up_scale.defined() && !down_scale.defined() && block.empty(), Error, op,
                " scales are for float8 experts only, got ", describe(gate_up), " with a scale");
  }
  const Tensor& ids = routing.topk_ids;
  ANVIL_CHECK(ids.dtype() == kInt64, DTypeError, op, " routing.topk_ids must be int64, got ", describe(ids));
  ANVIL_CHECK(ids.dim() == 2 && ids.size(0) == T, ShapeError, op, " routing.topk_ids must be [", T,
              ", top_k], got ", describe(ids));
  ANVIL_CHECK(routing.topk_weights.dtype() == kFloat32, DTypeError, op, " routing.topk_weights must be float32, got ",
              describe(routing.topk_weights));
  ANVIL_CHECK(routing.topk_weights.sizes() == ids.sizes(), ShapeError, op, " routing.topk_weights must be [", T, ", ",
              ids.size(1), "], got ", describe(routing.topk_weights));
}

// The fused kernels' params (act and out unset) and the unit-stride views they point into.
struct ExpertsCall {
  MoeExpertsParams p;
  Tensor h, gate_up, down, ids, weights, gate_up_scale, down_scale;
};

ExpertsCall experts_call(const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up, const Tensor& down,
                         const Tensor& gate_up_scale, const Tensor& down_scale, const Shape& block) {
  const int64_t T = hidden.size(0), H = hidden.size(1), E = gate_up.size(0), I = gate_up.size(1) / 2;
  const bool fp8 = is_float8(gate_up.dtype());
  ExpertsCall c;
  c.h = as_rows(hidden, T, H);
  c.gate_up = unit_rows(gate_up);
  c.down = unit_rows(down);
  c.ids = routing.topk_ids.contiguous();
  c.weights = routing.topk_weights.contiguous();
  if (fp8) {
    c.gate_up_scale = gate_up_scale.contiguous();
    c.down_scale = down_scale.contiguous();
  }
  MoeExpertsParams& p = c.p;
  p.hidden = c.h.raw_data_ptr();
  p.ids = static_cast<const int64_t*>(c.ids.raw_data_ptr());
  p.weights = static_cast<const float*>(c.weights.raw_data_ptr());
  p.gate_up = c.gate_up.raw_data_ptr();
  p.down = c.down.raw_data_ptr();
  if (fp8 && !block.empty()) {
    p.gate_up_block = block_scale_of(c.gate_up_scale, block);
    p.down_block = block_scale_of(c.down_scale, block);
  } else if (fp8) {
    p.gate_up_scale = static_cast<const float*>(c.gate_up_scale.raw_data_ptr());
    p.down_scale = static_cast<const float*>(c.down_scale.raw_data_ptr());
  }
  p.dtype = hidden.dtype();
  p.w_dtype = gate_up.dtype();
  p.tokens = T;
  p.top_k = c.ids.size(1);
  p.experts = E;
  p.hidden_size = H;
  p.inter = I;
  p.stride_hidden_row = row_stride(c.h);
  p.stride_out_row = H;
  p.stride_gu_expert = c.gate_up.stride(0);
  p.stride_gu_row = c.gate_up.stride(1);
  p.stride_down_expert = c.down.stride(0);
  p.stride_down_row = c.down.stride(1);
  return c;
}

}  // namespace

FusedPlan moe_experts_plan(const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up, const Tensor& down,
                           const Tensor& gate_up_scale, const Tensor& down_scale, const Shape& block) {
  check_experts("[moe_experts_plan]", hidden, routing, gate_up, down, gate_up_scale, down_scale, block);
  const ExpertsCall c = experts_call(hidden, routing, gate_up, down, gate_up_scale, down_scale, block);
  return ANVIL_PLAN(hidden.device(), moe_experts, c.p);
}

Tensor moe_experts(const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up, const Tensor& down,
                   const Tensor& gate_up_scale, const Tensor& down_scale, const Shape& block) {
  const char* op = "[moe_experts]";
  check_experts(op, hidden, routing, gate_up, down, gate_up_scale, down_scale, block);
  const int64_t T = hidden.size(0), H = hidden.size(1), I = gate_up.size(1) / 2, K = routing.topk_ids.size(1);
  const DType dt = hidden.dtype();
  const TensorOptions o = TensorOptions(dt).device(hidden.device());
  if (T == 0 || H == 0) return empty({T, H}, o);
  if (K == 0 || I == 0) return zeros({T, H}, o);
  ExpertsCall c = experts_call(hidden, routing, gate_up, down, gate_up_scale, down_scale, block);
  if (ANVIL_PLAN(hidden.device(), moe_experts, c.p) == FusedPlan::Fused) {
    Tensor out = empty({T, H}, o);
    Tensor act = empty({T * K, I}, o);
    c.p.act = act.raw_data_ptr();
    c.p.out = out.raw_data_ptr();
    ANVIL_KERNEL(hidden.device(), moe_experts, c.p);
    return out;
  }
  // The composition. Block scales vary along k, so they cannot be the grouped products' row
  // scales: the layer's experts are dequantised (a transient [E, 2I, H] + [E, H, I] in hidden's
  // dtype) and those run, fused where their plan allows.
  if (!block.empty())
    return moe_experts(hidden, routing, dequantize_fp8(gate_up, gate_up_scale, block, dt),
                       dequantize_fp8(down, down_scale, block, dt));
  ANVIL_CHECK(routing.offs.defined() && routing.token_index.defined() && routing.sorted_pos.defined(), Error, op, " ",
              T, " tokens x top ", K, " run the grouped products, which need routing.offs, token_index and"
              " sorted_pos (moe_route's result)");
  return as_op(op, [&] {
    const bool fp8 = is_float8(gate_up.dtype());
    const int64_t E = gate_up.size(0);
    const Tensor x = index_select(c.h, 0, routing.token_index);
    const Tensor gs = fp8 ? gate_up_scale.reshape({E, 2 * I}) : Tensor(), ds = fp8 ? down_scale.reshape({E, H}) : Tensor();
    const Tensor g = fp8 ? scaled_grouped_mm(x, c.gate_up.transpose(1, 2), {}, gs, routing.offs, dt)
                         : grouped_mm(x, c.gate_up.transpose(1, 2), routing.offs);
    const Tensor a = silu_mul(g.narrow(1, 0, I), g.narrow(1, I, I));
    const Tensor y = fp8 ? scaled_grouped_mm(a, c.down.transpose(1, 2), {}, ds, routing.offs, dt)
                         : grouped_mm(a, c.down.transpose(1, 2), routing.offs);
    return moe_combine(y, routing.topk_weights, routing.sorted_pos);
  });
}

}  // namespace anvil
