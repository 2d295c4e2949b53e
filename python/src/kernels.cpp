// anvil.ops.anvil: anvil's own LLM kernels, which have no torch name (torch.ops' custom-namespace
// convention): the fused SwiGLU gate, RoPE, the fused residual + norm (+ projection), the FP8
// projection, MoE routing / experts / combine over device-resident offsets, and the KV cache's
// write and decode attention. Each is documented in include/anvil/nn.h with its reference
// composition; the *_plan functions say whether the fused kernel runs for given arguments.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <array>
#include <optional>
#include <string>

#include "anvil/nn.h"
#include "anvil/plan.h"
#include "bindings.h"

namespace anvil::python {
namespace {

using T = const Tensor&;

Shape block_arg(nb::handle block, const char* op) { return block.is_none() ? Shape{} : int_list(block, op, "block"); }

// MoeRouting's fields, in the order of the named tuple that carries it in Python.
constexpr std::array<const char*, 5> kRoutingFields{"topk_weights", "topk_ids", "offs", "token_index", "sorted_pos"};

// The routing moe_experts takes back: the named tuple (or anything with those attributes).
MoeRouting routing_of(nb::handle r) {
  std::array<Tensor, 5> f;
  for (size_t i = 0; i < f.size(); ++i) {
    if (!nb::hasattr(r, kRoutingFields[i]))
      throw nb::type_error(("[moe_experts] routing must be the MoeRouting moe_route / moe_router return; " +
                            py_type_name(r) + " has no " + kRoutingFields[i]).c_str());
    f[i] = nb::cast<Tensor>(r.attr(kRoutingFields[i]));
  }
  return MoeRouting{f[0], f[1], f[2], f[3], f[4]};
}

}  // namespace

void bind_kernels(nb::module_& m) {
  nb::module_ a = nb::cast<nb::module_>(m.attr("ops")).def_submodule(
      "anvil", "anvil.ops.anvil: anvil's LLM kernels with no torch name (include/anvil/nn.h)");
  // Never freed: a Python object must not be released after the interpreter has finalised.
  static const Named& routing_t = *new Named("MoeRouting", {kRoutingFields.begin(), kRoutingFields.end()});
  auto routing_tuple = [](const MoeRouting& r) {
    return routing_t(std::make_tuple(r.topk_weights, r.topk_ids, r.offs, r.token_index, r.sorted_pos));
  };

  a.def("silu_mul", &silu_mul, nb::arg("gate"), nb::arg("up"));
  a.def("rope", &rope, nb::arg("input"), nb::arg("positions"), nb::arg("inv_freq"));
  a.def("rope_inv_freq", [](int64_t dim, double theta, nb::handle device) {
    return rope_inv_freq(dim, theta, device_arg(device));
  }, nb::arg("rotary_dim"), nb::arg("theta"), nb::arg("device").none() = nb::none());
  a.def("add_rms_norm", [](T x, T residual, nb::handle shape, const OptTensor& w, std::optional<double> eps) {
    return add_rms_norm(x, residual, int_list(shape, "add_rms_norm", "normalized_shape"), or_undefined(w), eps);
  }, nb::arg("input"), nb::arg("residual"), nb::arg("normalized_shape"), nb::arg("weight").none() = nb::none(),
        nb::arg("eps").none() = nb::none());
  a.def("add_rms_norm_linear", [](T x, T residual, const OptTensor& nw, std::optional<double> eps, T w,
                                  const OptTensor& ws, nb::handle block) {
    return add_rms_norm_linear(x, residual, or_undefined(nw), eps, w, or_undefined(ws),
                               block_arg(block, "add_rms_norm_linear"));
  }, nb::arg("input"), nb::arg("residual"), nb::arg("norm_weight").none(), nb::arg("eps").none(), nb::arg("weight"),
        nb::arg("weight_scale").none() = nb::none(), nb::arg("block").none() = nb::none());
  a.def("add_rms_norm_linear_plan", [](T x, T residual, const OptTensor& nw, std::optional<double> eps, T w,
                                       const OptTensor& ws, nb::handle block) {
    return plan_name(add_rms_norm_linear_plan(x, residual, or_undefined(nw), eps, w, or_undefined(ws),
                                              block_arg(block, "add_rms_norm_linear_plan")));
  }, nb::arg("input"), nb::arg("residual"), nb::arg("norm_weight").none(), nb::arg("eps").none(), nb::arg("weight"),
        nb::arg("weight_scale").none() = nb::none(), nb::arg("block").none() = nb::none());
  a.def("scaled_linear", [](T x, T w, T ws, const OptTensor& b, nb::handle block) {
    return scaled_linear(x, w, ws, or_undefined(b), block_arg(block, "scaled_linear"));
  }, nb::arg("input"), nb::arg("weight"), nb::arg("weight_scale"), nb::arg("bias").none() = nb::none(),
        nb::arg("block").none() = nb::none());

  // Mixture of experts: the routing is a named tuple (topk_weights, topk_ids, offs, token_index,
  // sorted_pos) that moe_experts takes back.
  a.def("moe_route", [routing_tuple](T logits, int64_t top_k, bool norm) {
    return routing_tuple(moe_route(logits, top_k, norm));
  }, nb::arg("router_logits"), nb::arg("top_k"), nb::arg("norm_topk_prob"));
  a.def("moe_router", [routing_tuple](T hidden, T w, int64_t top_k, bool norm) {
    auto [logits, routing] = moe_router(hidden, w, top_k, norm);
    return nb::make_tuple(logits, routing_tuple(routing));
  }, nb::arg("hidden"), nb::arg("router_weight"), nb::arg("top_k"), nb::arg("norm_topk_prob"));
  a.def("moe_router_plan", [](T hidden, T w, int64_t top_k) { return plan_name(moe_router_plan(hidden, w, top_k)); },
        nb::arg("hidden"), nb::arg("router_weight"), nb::arg("top_k"));
  a.def("moe_experts", [](T hidden, nb::handle routing, T gate_up, T down, const OptTensor& gs,
                                    const OptTensor& ds, nb::handle block) {
    return moe_experts(hidden, routing_of(routing), gate_up, down, or_undefined(gs), or_undefined(ds),
                       block_arg(block, "moe_experts"));
  }, nb::arg("hidden"), nb::arg("routing"), nb::arg("gate_up"), nb::arg("down"),
        nb::arg("gate_up_scale").none() = nb::none(), nb::arg("down_scale").none() = nb::none(),
        nb::arg("block").none() = nb::none());
  a.def("moe_experts_plan", [](T hidden, nb::handle routing, T gate_up, T down, const OptTensor& gs,
                                         const OptTensor& ds, nb::handle block) {
    return plan_name(moe_experts_plan(hidden, routing_of(routing), gate_up, down, or_undefined(gs), or_undefined(ds),
                                      block_arg(block, "moe_experts_plan")));
  }, nb::arg("hidden"), nb::arg("routing"), nb::arg("gate_up"), nb::arg("down"),
        nb::arg("gate_up_scale").none() = nb::none(), nb::arg("down_scale").none() = nb::none(),
        nb::arg("block").none() = nb::none());
  a.def("moe_combine", &moe_combine, nb::arg("expert_out"), nb::arg("topk_weights"), nb::arg("sorted_pos"));

  // The KV cache: writes in place (the caches' memory is the caller's), attention over it.
  a.def("cache_write", [](nb::handle cache, T values, T positions) {  // in place: returns cache itself
    Tensor c = nb::cast<Tensor>(cache);
    cache_write(c, values, positions);
    return nb::borrow(cache);
  }, nb::arg("cache"), nb::arg("values"), nb::arg("positions"));
  a.def("decode_attention", &decode_attention, nb::arg("query"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("cache_lens"), nb::kw_only(), nb::arg("scale").none() = nb::none());
  a.def("qk_norm_rope_cache", [](T qkv, int64_t n_heads, int64_t n_kv_heads, const OptTensor& qn,
                                 const OptTensor& kn, double eps, T inv_freq, Tensor k_cache, Tensor v_cache,
                                 T start) {
    return qk_norm_rope_cache(qkv, n_heads, n_kv_heads, or_undefined(qn), or_undefined(kn), eps, inv_freq, k_cache,
                              v_cache, start);
  }, nb::arg("qkv"), nb::arg("n_heads"), nb::arg("n_kv_heads"), nb::arg("q_norm_weight").none(),
        nb::arg("k_norm_weight").none(), nb::arg("eps"), nb::arg("inv_freq"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("start"));
}

}  // namespace anvil::python
