// MoE routing, combine and the fused experts: validation and kernel calls; nothing is read on
// the host.
#include <cstdint>

#include "anvil/nn.h"
#include "anvil/ops.h"
#include "core/align.h"
#include "core/kernels.h"
#include "core/fp8_blocks.h"
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

// moe_router's one-kernel path: one token; on CUDA 16-bit rows of 16-byte packs and at most
// 1024 experts (the routing warp's registers).
bool router_kernel_applies(const Tensor& hidden, const Tensor& w) {
  const int64_t H = hidden.size(1);
  if (hidden.size(0) != 1 || H == 0 || (H > 1 && (hidden.stride(1) != 1 || w.stride(1) != 1))) return false;
  if (hidden.is_cpu()) return true;
  return (hidden.dtype() == kBFloat16 || hidden.dtype() == kFloat16) && H % 8 == 0 && w.size(0) <= 1024 &&
         (w.size(0) <= 1 || w.stride(0) % 8 == 0) && aligned16(hidden.raw_data_ptr()) && aligned16(w.raw_data_ptr());
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

std::tuple<Tensor, MoeRouting> moe_router(const Tensor& hidden, const Tensor& router_weight, int64_t top_k,
                                          bool norm_topk_prob) {
  const char* op = "[moe_router]";
  ANVIL_CHECK(hidden.defined() && router_weight.defined(), Error, op, " undefined tensor");
  check_same_device(op, hidden, router_weight);
  const DType t = hidden.dtype();
  ANVIL_CHECK((t == kFloat32 || t == kBFloat16 || t == kFloat16) && router_weight.dtype() == t, DTypeError, op,
              " hidden and router_weight must share float32, bfloat16 or float16, got ", describe(hidden), " and ",
              describe(router_weight));
  ANVIL_CHECK(hidden.dim() == 2 && router_weight.dim() == 2 && router_weight.size(1) == hidden.size(1), ShapeError, op,
              " expected hidden [T, H] and router_weight [E, H], got ", describe(hidden), " and ", describe(router_weight));
  const int64_t tokens = hidden.size(0), experts = router_weight.size(0), H = hidden.size(1);
  check_routing_args(op, tokens, experts, top_k);
  if (!router_kernel_applies(hidden, router_weight)) {
    Tensor logits = linear(hidden, router_weight);
    return {logits, moe_route(logits, top_k, norm_topk_prob)};
  }
  Tensor logits = empty({1, experts}, TensorOptions(t).device(hidden.device()));
  MoeRouting r;
  MoeRouterParams p;
  p.route = routing_params(r, logits, 1, experts, top_k, norm_topk_prob);
  p.hidden = hidden.raw_data_ptr();
  p.weight = router_weight.raw_data_ptr();
  p.logits = logits.raw_data_ptr();
  p.hidden_size = H;
  p.stride_w_row = experts <= 1 ? H : router_weight.stride(0);
  ANVIL_KERNEL(hidden.device(), moe_router, p);
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

// What the CUDA kernels need beyond the op's rules (see MoeExpertsParams).
bool cuda_fusable(const Tensor& h, const Tensor& gate_up, const Tensor& down) {
  if (h.dtype() != kBFloat16 && h.dtype() != kFloat16) return false;
  const int64_t w = static_cast<int64_t>(element_size(gate_up.dtype()));
  const int64_t per_load = 16 / w, a = static_cast<int64_t>(element_size(h.dtype()));
  const int64_t H = h.size(1), I = down.size(2);
  return H % per_load == 0 && I % per_load == 0 && aligned16(h.raw_data_ptr()) && aligned16(gate_up.raw_data_ptr()) &&
         aligned16(down.raw_data_ptr()) &&
         (row_stride(h) * a) % 16 == 0 && (gate_up.stride(0) * w) % 16 == 0 && (gate_up.stride(1) * w) % 16 == 0 &&
         (down.stride(0) * w) % 16 == 0 && (down.stride(1) * w) % 16 == 0;
}

// Weight rows with unit column stride: a view when they have it, else a contiguous copy.
Tensor unit_rows(const Tensor& w) { return w.stride(2) == 1 || w.size(2) <= 1 ? w : w.contiguous(); }

}  // namespace

Tensor moe_experts(const Tensor& hidden, const MoeRouting& routing, const Tensor& gate_up, const Tensor& down,
                   const Tensor& gate_up_scale, const Tensor& down_scale, const Shape& block) {
  const char* op = "[moe_experts]";
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
  const bool fp8 = is_float8(gate_up.dtype());
  if (fp8) {
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
  const int64_t K = ids.size(1);
  ANVIL_CHECK(routing.topk_weights.dtype() == kFloat32, DTypeError, op, " routing.topk_weights must be float32, got ",
              describe(routing.topk_weights));
  ANVIL_CHECK(routing.topk_weights.sizes() == ids.sizes(), ShapeError, op, " routing.topk_weights must be [", T, ", ",
              K, "], got ", describe(routing.topk_weights));

  // The fused CUDA kernels apply the Hub's 128 x 128 blocks and others moe_experts_block_ok
  // takes; other block shapes run on the layer's dequantised experts.
  if (fp8 && !block.empty() && hidden.device().is_cuda() && !moe_experts_block_ok(gate_up.dtype(), block[0], block[1], I))
    return moe_experts(hidden, routing, dequantize_fp8(gate_up, gate_up_scale, block, dt),
                       dequantize_fp8(down, down_scale, block, dt));
  const TensorOptions o = TensorOptions(dt).device(hidden.device());
  if (T == 0 || H == 0) return empty({T, H}, o);
  if (K == 0 || I == 0) return zeros({T, H}, o);
  const Tensor gu = unit_rows(gate_up), dn = unit_rows(down);
  const Tensor h = as_rows(hidden, T, H);
  // The fused kernels read each (token, slot) pair's expert rows once: they take decode's few
  // pairs; many tokens sharing experts go through the grouped products.
  const bool fused = T * K <= kMoeExpertsMaxPairs && K <= kMoeExpertsMaxTopK &&
                     (!hidden.device().is_cuda() || cuda_fusable(h, gu, dn));
  if (!fused) {
    ANVIL_CHECK(routing.offs.defined() && routing.token_index.defined() && routing.sorted_pos.defined(), Error, op,
                " ", T, " tokens x top ", K, " run the grouped products, which need routing.offs, token_index and"
                " sorted_pos (moe_route's result)");
    return as_op(op, [&] {
      const Tensor x = index_select(h, 0, routing.token_index);
      if (!block.empty()) {
        // Block scales vary along k, so they cannot be the grouped product's row scales: the
        // layer's experts are dequantised (a transient [E, 2I, H] + [E, H, I] in dt).
        const Tensor g = grouped_mm(x, dequantize_fp8(gu, gate_up_scale, block, dt).transpose(1, 2), routing.offs);
        const Tensor a = silu_mul(g.narrow(1, 0, I), g.narrow(1, I, I));
        const Tensor y = grouped_mm(a, dequantize_fp8(dn, down_scale, block, dt).transpose(1, 2), routing.offs);
        return moe_combine(y, routing.topk_weights, routing.sorted_pos);
      }
      const Tensor gs = fp8 ? gate_up_scale.reshape({E, 2 * I}) : Tensor(), ds = fp8 ? down_scale.reshape({E, H}) : Tensor();
      const Tensor g = fp8 ? scaled_grouped_mm(x, gu.transpose(1, 2), {}, gs, routing.offs, dt)
                           : grouped_mm(x, gu.transpose(1, 2), routing.offs);
      const Tensor a = silu_mul(g.narrow(1, 0, I), g.narrow(1, I, I));
      const Tensor y = fp8 ? scaled_grouped_mm(a, dn.transpose(1, 2), {}, ds, routing.offs, dt)
                           : grouped_mm(a, dn.transpose(1, 2), routing.offs);
      return moe_combine(y, routing.topk_weights, routing.sorted_pos);
    });
  }
  const Tensor idc = ids.contiguous(), wc = routing.topk_weights.contiguous();
  const Tensor gsc = fp8 ? gate_up_scale.contiguous() : Tensor(), dsc = fp8 ? down_scale.contiguous() : Tensor();
  Tensor out = empty({T, H}, o);
  Tensor act = empty({T * K, I}, o);
  MoeExpertsParams p;
  p.hidden = h.raw_data_ptr();
  p.ids = static_cast<const int64_t*>(idc.raw_data_ptr());
  p.weights = static_cast<const float*>(wc.raw_data_ptr());
  p.gate_up = gu.raw_data_ptr();
  p.down = dn.raw_data_ptr();
  if (fp8 && !block.empty()) {
    p.gate_up_block = block_scale_of(gsc, block);
    p.down_block = block_scale_of(dsc, block);
  } else if (fp8) {
    p.gate_up_scale = static_cast<const float*>(gsc.raw_data_ptr());
    p.down_scale = static_cast<const float*>(dsc.raw_data_ptr());
  }
  p.act = act.raw_data_ptr();
  p.out = out.raw_data_ptr();
  p.dtype = dt;
  p.w_dtype = gate_up.dtype();
  p.tokens = T;
  p.top_k = K;
  p.experts = E;
  p.hidden_size = H;
  p.inter = I;
  p.stride_hidden_row = row_stride(h);
  p.stride_out_row = H;
  p.stride_gu_expert = gu.stride(0);
  p.stride_gu_row = gu.stride(1);
  p.stride_down_expert = dn.stride(0);
  p.stride_down_row = dn.stride(1);
  ANVIL_KERNEL(hidden.device(), moe_experts, p);
  return out;
}

}  // namespace anvil
