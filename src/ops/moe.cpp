// MoE routing and combine: validation and one kernel call each; nothing is read on the host.
#include "anvil/nn.h"
#include "core/kernels.h"
#include "core/util.h"

namespace anvil {

MoeRouting moe_route(const Tensor& router_logits, int64_t top_k, bool norm_topk_prob) {
  const char* op = "[moe_route]";
  ANVIL_CHECK(router_logits.defined(), Error, op, " undefined tensor");
  const DType t = router_logits.dtype();
  ANVIL_CHECK(t == kFloat32 || t == kBFloat16 || t == kFloat16, DTypeError, op,
              " router_logits must be float32, bfloat16 or float16, got ", describe(router_logits));
  ANVIL_CHECK(router_logits.dim() == 2, ShapeError, op, " router_logits must be [tokens, experts], got ",
              describe(router_logits));
  const int64_t tokens = router_logits.size(0), experts = router_logits.size(1);
  ANVIL_CHECK(experts >= 1 && experts < (int64_t{1} << 31), ShapeError, op, " expected 1 to 2^31 - 1 experts, got ",
              describe(router_logits));
  ANVIL_CHECK(top_k >= 1 && top_k <= experts, IndexError, op, " top_k must be in [1, ", experts, "], got ", top_k);
  ANVIL_CHECK(tokens * top_k < (int64_t{1} << 31), ShapeError, op,
              " tokens * top_k must fit int32 offsets, got ", tokens, " x ", top_k);
  const Device d = router_logits.device();
  const TensorOptions i64 = TensorOptions(kInt64).device(d);
  MoeRouting r;
  r.topk_weights = empty({tokens, top_k}, TensorOptions(kFloat32).device(d));
  r.topk_ids = empty({tokens, top_k}, i64);
  r.offs = empty({experts}, TensorOptions(kInt32).device(d));
  r.token_index = empty({tokens * top_k}, i64);
  r.sorted_pos = empty({tokens, top_k}, i64);
  if (tokens == 0) {
    r.offs.fill_(0);
    return r;
  }
  const Tensor x = as_rows(router_logits, tokens, experts);
  MoeRouteParams p;
  p.logits = x.raw_data_ptr();
  p.weights = static_cast<float*>(r.topk_weights.raw_data_ptr());
  p.ids = static_cast<int64_t*>(r.topk_ids.raw_data_ptr());
  p.offs = static_cast<int32_t*>(r.offs.raw_data_ptr());
  p.token_index = static_cast<int64_t*>(r.token_index.raw_data_ptr());
  p.sorted_pos = static_cast<int64_t*>(r.sorted_pos.raw_data_ptr());
  p.dtype = t;
  p.tokens = tokens;
  p.experts = experts;
  p.top_k = top_k;
  p.stride_row = row_stride(x);
  p.renormalize = norm_topk_prob;
  ANVIL_KERNEL(d, moe_route, p);
  return r;
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

}  // namespace anvil
