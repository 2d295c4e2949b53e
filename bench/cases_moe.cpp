// Mixture-of-experts cases at the Qwen3-30B-A3B layer's shapes (hidden 2048, 128 experts, top 8,
// expert intermediate 768): routing, combine, and the whole experts block of one decode token
// (router linear, moe_route, index_select, grouped gate_up, SwiGLU, grouped down, combine) in
// bfloat16 and with float8 expert weights, composed from the public ops and through the fused
// moe_experts op (router linear, moe_route, moe_experts). Bytes are what one call must read and write: for the
// block, the router and the eight active experts' weights.
#include "cases.h"

namespace anvil::bench {
namespace {

constexpr int64_t kHidden = 2048, kExperts = 128, kTopK = 8, kInter = 768;

// The expert weights of one layer in the checkpoint's layout: gate_up [E, 2I, H], down [E, H, I];
// with fp8 also their row-wise scales [E, 2I] and [E, H], or 128 x 128 block scales.
struct Experts {
  Tensor router, gate_up, down, gate_up_scale, down_scale;
  Shape block;
};

Experts make_experts(Device dev, bool fp8, bool blocks = false) {
  const TensorOptions o = TensorOptions(kBFloat16).device(dev);
  Experts e;
  e.router = mul(randn({kExperts, kHidden}, o), 0.05);
  e.gate_up = mul(randn({kExperts, 2 * kInter, kHidden}, o), 0.02);
  e.down = mul(randn({kExperts, kHidden, kInter}, o), 0.02);
  if (blocks) {
    auto [gq, gs] = quantize_fp8(e.gate_up, ScalingType::BlockWise128x128);
    auto [dq, ds] = quantize_fp8(e.down, ScalingType::BlockWise128x128);
    e.gate_up = gq;
    e.down = dq;
    e.gate_up_scale = gs;
    e.down_scale = ds;
    e.block = {128, 128};
  } else if (fp8) {
    auto [gq, gs] = quantize_fp8(e.gate_up);
    auto [dq, ds] = quantize_fp8(e.down);
    e.gate_up = gq;
    e.down = dq;
    e.gate_up_scale = gs.reshape({kExperts, 2 * kInter});
    e.down_scale = ds.reshape({kExperts, kHidden});
  }
  return e;
}

Tensor experts_block(const Experts& e, const Tensor& h, bool fused) {
  Tensor logits = linear(h, e.router);
  MoeRouting r = moe_route(logits, kTopK, true);
  if (fused) return moe_experts(h, r, e.gate_up, e.down, e.gate_up_scale, e.down_scale, e.block);
  Tensor x = index_select(h, 0, r.token_index);
  const bool fp8 = e.gate_up_scale.defined();
  Tensor gu = fp8 ? scaled_grouped_mm(x, e.gate_up.transpose(1, 2), {}, e.gate_up_scale, r.offs)
                  : grouped_mm(x, e.gate_up.transpose(1, 2), r.offs);
  Tensor act = silu_mul(gu.narrow(1, 0, kInter), gu.narrow(1, kInter, kInter));
  Tensor y = fp8 ? scaled_grouped_mm(act, e.down.transpose(1, 2), {}, e.down_scale, r.offs)
                 : grouped_mm(act, e.down.transpose(1, 2), r.offs);
  return moe_combine(y, r.topk_weights, r.sorted_pos);
}

}  // namespace

std::vector<Case> moe_cases(Device dev) {
  std::vector<Case> cases;
  for (int64_t tokens : {int64_t{1}, int64_t{4096}}) {
    const double bytes = 2.0 * tokens * kExperts + (4.0 + 8 * 3) * tokens * kTopK + 4.0 * kExperts;
    nlohmann::json spec{{"op", "moe_route"}, {"tokens", tokens}, {"experts", kExperts}, {"top_k", kTopK},
                        {"dtype", "bfloat16"}};
    cases.push_back({"moe_route bf16 " + std::to_string(tokens) + "x" + std::to_string(kExperts) + " top8", bytes,
                     ceiling_for(dev), [=]() -> Runner {
                       const int rot = rotations_for(dev, 2.0 * tokens * kExperts);
                       std::vector<Tensor> in;
                       for (int i = 0; i < rot; ++i)
                         in.push_back(randn({tokens, kExperts}, TensorOptions(kBFloat16).device(dev)));
                       return [=](int i) { (void)moe_route(in[i % rot], kTopK, true); };
                     },
                     "", spec});
  }
  {
    const double bytes = 2.0 * (kTopK + 1) * kHidden;
    nlohmann::json spec{{"op", "moe_combine"}, {"tokens", 1}, {"top_k", kTopK}, {"hidden", kHidden}, {"dtype", "bfloat16"}};
    cases.push_back({"moe_combine bf16 8x2048->1x2048", bytes, ceiling_for(dev), [=]() -> Runner {
                       const Device d = dev;
                       Tensor y = randn({kTopK, kHidden}, TensorOptions(kBFloat16).device(d));
                       MoeRouting r = moe_route(randn({1, kExperts}, TensorOptions(kFloat32).device(d)), kTopK, true);
                       return [=](int) { (void)moe_combine(y, r.topk_weights, r.sorted_pos); };
                     },
                     "", spec});
  }
  // Variants: bf16, fp8 row scales, composed and fused; then fused with 128 x 128 block scales.
  for (int variant = 0; variant < 5; ++variant) {
    const bool blocks = variant == 4, fp8 = variant % 2 == 1 || blocks, fused = variant >= 2;
    const double wbytes = fp8 ? 1.0 : 2.0;
    const double scale_bytes = blocks ? 4.0 * (2 * kInter / 128 * kHidden / 128 + kHidden / 128 * kInter / 128)
                                      : fp8 ? 4.0 * (2 * kInter + kHidden) : 0.0;
    const double bytes = 2.0 * kExperts * kHidden + kTopK * (wbytes * 3.0 * kInter * kHidden + scale_bytes);
    nlohmann::json spec{{"op", "moe_block"}, {"tokens", 1},        {"hidden", kHidden}, {"experts", kExperts},
                        {"top_k", kTopK},    {"inter", kInter},    {"fp8", fp8},        {"dtype", "bfloat16"}};
    cases.push_back({std::string("moe_block ") + (fused ? "fused " : "") +
                         (blocks ? "fp8-128x128-blocks" : fp8 ? "fp8-weights" : "bf16") + " Qwen3-30B-A3B 1 token",
                     bytes,
                     ceiling_for(dev), [=]() -> Runner {
                       Experts e = make_experts(dev, fp8, blocks);
                       // Rotating tokens route to different experts, so the weights come from memory.
                       const int rot = 16;
                       std::vector<Tensor> h;
                       for (int i = 0; i < rot; ++i) h.push_back(randn({1, kHidden}, TensorOptions(kBFloat16).device(dev)));
                       return [=](int i) { (void)experts_block(e, h[i % rot], fused); };
                     },
                     "", spec});
  }
  return cases;
}

}  // namespace anvil::bench
