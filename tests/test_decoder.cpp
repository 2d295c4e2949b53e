// The persistent decoder step (anvil/decoder.h) against its composition of public ops, the eager
// step written out here as runtime/models/qwen3.cpp runs it: random weights at several shapes
// (head_dim 16 / 64 / 128, 2 to 16 q heads per kv head, vocabularies that are not a multiple of
// the tile), every residual row of every step and the logits compared (cosine >= 0.9999, the
// same greedy token where the eager logits are not a near tie), positions spread over many key
// splits up to the full cache, the checked (one launch per op) mode bit for bit against the one
// launch, repeated launches, and the plan's and the validation's errors (the latter on the CPU).
// MoE layers (Qwen3-MoE's: router, routed experts, weighted sum) likewise, mixed with dense ones,
// with and without the top_k renormalisation, and with routing ties (duplicated router rows).
// Float8 e4m3fn projections (row scales and blocks; codes over their whole range, subnormals
// included) against the eager step's scaled_linear / add_rms_norm_linear / moe_experts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>
#include <vector>

#include "expect_throws.h"
#include "harness.h"

namespace {

using namespace anvil;

struct ModelShape {
  int64_t H, D, nh, nkv, I, vocab, layers, rows;
  int64_t E = 0, top_k = 0, dense_layers = 0;  // MoE: layers past dense_layers have E experts (I each)
  bool norm_topk = true, tied_router = false;  // tied_router: router rows 2 j and 2 j + 1 equal (routing ties)
  bool fp8 = false;                            // float8 projections: row scales, or blocks of fp8_block
  Shape fp8_block = {};
  bool subnormal = false;                      // every float8 code subnormal (or zero)
  bool gaussian = false;                       // float8 codes normal (std 64), not of log-normal magnitude
};

// Drawn on the device itself (the real widths' experts are 400M elements).
Tensor rnd(const Shape& s, double scale, DType dt, Device dev) {
  return mul(randn(s, TensorOptions(kFloat32).device(dev)), scale).to(dt);
}
Tensor norm_weight(int64_t n, DType dt, Device dev) {
  return add(mul(randn({n}, TensorOptions(kFloat32).device(dev)), 0.1), 1.0).to(dt);
}

// A float8 e4m3fn weight [..., n, k] whose dequantised values have about `std`: codes over the
// whole range (a log-normal magnitude: subnormals and large codes), subnormal ones only (at most
// 7 * 2^-9), or normal ones of std 64 (gaussian: a checkpoint's, whose sums of a few large
// products don't nearly cancel); scales over a few binades.
std::pair<Tensor, DecoderWeightScale> fp8_weight(const Shape& s, const Shape& block, double std, bool subnormal,
                                                 bool gaussian, Device dev) {
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev);
  const Tensor x = randn(s, f32);
  const Tensor codes = subnormal ? clamp(mul(x, std::ldexp(1.0, -8)), -7 * std::ldexp(1.0, -9), 7 * std::ldexp(1.0, -9))
                       : gaussian ? clamp(mul(x, 64.0), -448, 448)
                                  : clamp(mul(mul(x, exp(randn(s, f32))), 4.0), -448, 448);
  // E[(4 x e^z)^2] = 16 e^2
  const double rms = subnormal ? std::ldexp(1.0, -8) : gaussian ? 64.0 : 4.0 * std::exp(1.0);
  Shape ss(s.begin(), s.end() - 2);
  const int64_t n = s[s.size() - 2], k = s.back();
  if (block.empty()) {
    ss.push_back(n);
  } else {
    ss.push_back((n + block[0] - 1) / block[0]);
    ss.push_back((k + block[1] - 1) / block[1]);
  }
  const Tensor scale = mul(exp(mul(randn(ss, f32), 0.5)), std / rms);
  return {codes.to(kFloat8_e4m3fn), {scale, block}};
}

DecoderWeights random_model(const ModelShape& s, DType dt, Device dev) {
  DecoderWeights w;
  w.embed = rnd({s.vocab, s.H}, 1.0, dt, dev);
  w.final_norm = norm_weight(s.H, dt, dev);
  w.head = rnd({s.vocab, s.H}, 1.0 / std::sqrt(static_cast<double>(s.H)), dt, dev);
  w.inv_freq = rope_inv_freq(s.D, 1e6, dev);
  w.n_heads = s.nh;
  w.n_kv_heads = s.nkv;
  w.eps = 1e-6;
  w.top_k = s.top_k;
  w.norm_topk_prob = s.norm_topk;
  for (int64_t l = 0; l < s.layers; ++l) {
    DecoderLayerWeights L;
    L.input_norm = norm_weight(s.H, dt, dev);
    L.qkv = rnd({(s.nh + 2 * s.nkv) * s.D, s.H}, 1.0 / std::sqrt(static_cast<double>(s.H)), dt, dev);
    L.q_norm = norm_weight(s.D, dt, dev);
    L.k_norm = norm_weight(s.D, dt, dev);
    L.o = rnd({s.H, s.nh * s.D}, 1.0 / std::sqrt(static_cast<double>(s.nh * s.D)), dt, dev);
    L.post_norm = norm_weight(s.H, dt, dev);
    // Float8 projections replace the 16-bit ones after them (the random stream stays the same).
    auto fp8 = [&](Tensor& w, DecoderWeightScale& sc) {
      if (!s.fp8) return;
      std::tie(w, sc) =
          fp8_weight(w.sizes(), s.fp8_block, 1.0 / std::sqrt(static_cast<double>(w.size(-1))), s.subnormal, s.gaussian, dev);
    };
    if (s.E > 0 && l >= s.dense_layers) {
      // Logits of a few units, so the top_k are apart by more than their roundings (unless tied).
      Tensor r = rnd({s.E, s.H}, 3.0 / std::sqrt(static_cast<double>(s.H)), dt, kCPU);
      if (s.tied_router) r = r.narrow(0, 0, s.E / 2).unsqueeze(1).expand({s.E / 2, 2, s.H}).reshape({s.E, s.H}).contiguous();
      L.router = r.to(dev);
      L.gate_up = rnd({s.E, 2 * s.I, s.H}, 1.0 / std::sqrt(static_cast<double>(s.H)), dt, dev);
      L.down = rnd({s.E, s.H, s.I}, 1.0 / std::sqrt(static_cast<double>(s.I)), dt, dev);
    } else {
      L.gate_up = rnd({2 * s.I, s.H}, 1.0 / std::sqrt(static_cast<double>(s.H)), dt, dev);
      L.down = rnd({s.H, s.I}, 1.0 / std::sqrt(static_cast<double>(s.I)), dt, dev);
    }
    fp8(L.qkv, L.qkv_scale);
    fp8(L.o, L.o_scale);
    fp8(L.gate_up, L.gate_up_scale);
    fp8(L.down, L.down_scale);
    // Earlier positions' keys and values: random, so every key split has work.
    L.k_cache = rnd({1, s.nkv, s.rows, s.D}, 1.0, dt, dev);
    L.v_cache = rnd({1, s.nkv, s.rows, s.D}, 1.0, dt, dev);
    w.layers.push_back(L);
  }
  return w;
}

// The same weights with caches of their own (the eager oracle writes its own rows).
DecoderWeights with_cache_copies(const DecoderWeights& w) {
  DecoderWeights c = w;
  for (DecoderLayerWeights& L : c.layers) {
    L.k_cache = L.k_cache.clone();
    L.v_cache = L.v_cache.clone();
  }
  return c;
}

// The eager step (runtime/models/qwen3.cpp's composition for one token): float32 logits [1, V];
// resid gets the residual rows in PersistentDecoder::residual's order.
Tensor project(const Tensor& x, const Tensor& w, const DecoderWeightScale& sc) {
  return sc.scale.defined() ? scaled_linear(x, w, sc.scale, {}, sc.block) : linear(x, w);
}

std::vector<double> host(const Tensor& t) {
  const Tensor c = t.to(kCPU, kFloat64).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// The experts an MoE layer's routing takes from `logits`: the top_k largest, the lower expert
// first among equal ones (moe_router's order), as a sorted set.
std::vector<size_t> chosen(const std::vector<double>& logits, int64_t top_k) {
  std::vector<size_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t i, size_t j) { return logits[i] > logits[j]; });
  idx.resize(static_cast<size_t>(top_k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// An MoE layer's experts block of h for `routing` (moe_router's).
Tensor experts(const DecoderLayerWeights& L, const Tensor& h, const MoeRouting& routing) {
  return moe_experts(h, routing, L.gate_up, L.down, L.gate_up_scale.scale, L.down_scale.scale, L.gate_up_scale.block);
}

// router: each layer's router logits (undefined for a dense layer).
Tensor eager_step(DecoderWeights& w, int64_t token, int64_t pos, std::vector<Tensor>& resid, std::vector<Tensor>& router) {
  const Device dev = w.embed.device();
  const int64_t H = w.embed.size(1), D = 2 * w.inv_freq.size(0), nh = w.n_heads;
  const Tensor ids = tensor<int32_t>({static_cast<int32_t>(token)}).to(dev);
  const Tensor where = tensor<int32_t>({static_cast<int32_t>(pos), static_cast<int32_t>(pos + 1)}).to(dev);
  const Tensor start = where.narrow(0, 0, 1), lens = where.narrow(0, 1, 1);
  resid.clear();
  router.assign(w.layers.size(), Tensor());
  Tensor x = embedding(w.embed, ids), branch;
  resid.push_back(x);
  for (DecoderLayerWeights& L : w.layers) {
    Tensor qkv;
    if (branch.defined()) {
      std::tie(qkv, x) = add_rms_norm_linear(branch, x, L.input_norm, w.eps, L.qkv, L.qkv_scale.scale, L.qkv_scale.block);
      resid.push_back(x);
    } else {
      qkv = project(rms_norm(x, {H}, L.input_norm, w.eps), L.qkv, L.qkv_scale);
    }
    const Tensor q = qk_norm_rope_cache(qkv.unsqueeze(0), w.n_heads, w.n_kv_heads, L.q_norm, L.k_norm, w.eps, w.inv_freq,
                                        L.k_cache, L.v_cache, start);
    const Tensor a = decode_attention(q, L.k_cache, L.v_cache, lens);
    const Tensor o = project(a.squeeze(0).permute({1, 0, 2}).reshape({1, nh * D}), L.o, L.o_scale);
    if (L.router.defined()) {
      Tensor h;
      std::tie(h, x) = add_rms_norm(o, x, {H}, L.post_norm, w.eps);
      resid.push_back(x);
      const auto [logits, routing] = moe_router(h, L.router, w.top_k, w.norm_topk_prob);
      router[static_cast<size_t>(&L - w.layers.data())] = logits;
      branch = experts(L, h, routing);
      continue;
    }
    Tensor gu;
    std::tie(gu, x) = add_rms_norm_linear(o, x, L.post_norm, w.eps, L.gate_up, L.gate_up_scale.scale, L.gate_up_scale.block);
    resid.push_back(x);
    const int64_t I = gu.size(1) / 2;
    branch = project(silu_mul(gu.narrow(1, 0, I), gu.narrow(1, I, I)), L.down, L.down_scale);
  }
  Tensor h;
  std::tie(h, x) = add_rms_norm(branch, x, {H}, w.final_norm, w.eps);
  resid.push_back(x);
  return linear(h, w.head).to(kFloat32);
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return aa == 0 && bb == 0 ? 1.0 : ab / std::sqrt(aa * bb);
}

// The weights and caches on `dev` (copies).
DecoderWeights on_device(const DecoderWeights& w, Device dev) {
  auto to = [&](const Tensor& t) { return t.defined() ? t.to(dev) : t; };
  DecoderWeights c = w;
  c.embed = to(w.embed), c.final_norm = to(w.final_norm), c.head = to(w.head), c.inv_freq = to(w.inv_freq);
  for (DecoderLayerWeights& L : c.layers) {
    for (Tensor* t : {&L.input_norm, &L.qkv, &L.q_norm, &L.k_norm, &L.o, &L.post_norm, &L.gate_up, &L.down, &L.k_cache,
                      &L.v_cache, &L.router, &L.qkv_scale.scale, &L.o_scale.scale, &L.gate_up_scale.scale, &L.down_scale.scale})
      *t = to(*t);
  }
  return c;
}

// Index of the largest value and its margin over the second largest, relative to the row's range.
std::pair<size_t, double> top1(const std::vector<double>& v) {
  const size_t i = static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
  double second = -INFINITY;
  for (size_t j = 0; j < v.size(); ++j)
    if (j != i) second = std::max(second, v[j]);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {i, (v[i] - second) / std::max(1e-30, *hi - *lo)};
}

// The persistent step's MLP / MoE blocks and head, each recomputed on the CPU (weights c) from
// the step's own residual row before it: residual row 2 l + 2 = row 2 l + 1 + layer l's block of
// rms_norm(row 2 l + 1), the logits = head(rms_norm(last row)); each within 0.9999 in cosine. A
// layer whose CPU routing picks other experts than the step's (a near tie) ends the checks.
void local_checks(const DecoderWeights& c, PersistentDecoder& dec, size_t rows, const std::vector<double>& logits,
                  bool check_logits) {
  const int64_t H = c.embed.size(1);
  for (size_t l = 0; 2 * l + 2 < rows && l < c.layers.size(); ++l) {
    SCOPED_TRACE("local check, layer " + std::to_string(l));
    const DecoderLayerWeights& L = c.layers[l];
    const Tensor x = dec.residual(static_cast<int64_t>(2 * l + 1)).to(kCPU).unsqueeze(0);
    const Tensor h = rms_norm(x, {H}, L.post_norm, c.eps);
    Tensor branch;
    if (L.router.defined()) {
      const auto [lg, routing] = moe_router(h, L.router, c.top_k, c.norm_topk_prob);
      if (chosen(host(lg), c.top_k) != chosen(host(dec.router_logits(static_cast<int64_t>(l))), c.top_k)) return;
      branch = experts(L, h, routing);
    } else {
      const Tensor gu = project(h, L.gate_up, L.gate_up_scale);
      const int64_t I = gu.size(1) / 2;
      branch = project(silu_mul(gu.narrow(1, 0, I), gu.narrow(1, I, I)), L.down, L.down_scale);
    }
    EXPECT_GE(cosine(host(dec.residual(static_cast<int64_t>(2 * l + 2))), host(add(x, branch))), 0.9999)
        << "residual row " << 2 * l + 2 << " from row " << 2 * l + 1;
  }
  if (check_logits && rows == 2 * c.layers.size() + 1) {
    const Tensor x = dec.residual(static_cast<int64_t>(rows - 1)).to(kCPU).unsqueeze(0);
    EXPECT_GE(cosine(logits, host(linear(rms_norm(x, {H}, c.final_norm, c.eps), c.head).to(kFloat32))), 0.9999)
        << "logits from the last residual row";
  }
}

// Runs `positions` through both steps; each step's token is the eager step's greedy choice.
// Every MoE layer's router logits are compared; where the two steps' logits (equal to their
// roundings) route to different experts, only what comes before that layer's experts is compared,
// and the caches' new rows are made the oracle's so later steps start equal. Such splits sit at
// near ties of the top_k cut: with 128 experts in bfloat16 about a fifth of layer steps have the
// cut within a few roundings (at these widths the bfloat16 and float32 eager steps on the CPU
// route apart as often), so at most half of the steps may have one. A step on which the two CUDA
// steps are apart by more than 1e-4 is decided by local_checks.
void compare_steps(const ModelShape& s, DType dt, const std::vector<int64_t>& positions) {
  SCOPED_TRACE("H " + std::to_string(s.H) + ", " + std::to_string(s.layers) + " layers, E " + std::to_string(s.E) +
               (s.fp8 ? ", float8" : ""));
  const Device dev(kCUDA, 0);
  manual_seed(1234);
  DecoderWeights w = random_model(s, dt, dev);
  ASSERT_EQ(PersistentDecoder::plan(w), FusedPlan::Fused);
  DecoderWeights oracle = with_cache_copies(w);
  PersistentDecoder dec(w);
  int64_t token = 3, splits = 0;
  int64_t local_steps = 0;  // positions decided by the local checks
  DecoderWeights cpu;  // the weights on the CPU, for the local checks (copied at the first)
  auto cpu_weights = [&]() -> const DecoderWeights& {
    if (!cpu.embed.defined()) cpu = on_device(w, Device(kCPU));
    return cpu;
  };
  std::vector<Tensor> resid, router;
  for (int64_t pos : positions) {
    SCOPED_TRACE("position " + std::to_string(pos));
    const Tensor want = eager_step(oracle, token, pos, resid, router);
    const Tensor got = dec.step(token, pos);
    dec.check();
    ASSERT_EQ(got.sizes(), want.sizes());
    // Every sum has a fixed order, so a second launch at the position (rewriting the same cache
    // rows) gives the same bits: a difference is a race inside the step.
    const Tensor again = dec.step(token, pos);
    dec.check();
    EXPECT_EQ(th::to_bits(got), th::to_bits(again)) << "a second launch at the position differs";
    int64_t split = -1;  // the first MoE layer whose routing differs
    for (size_t l = 0; l < router.size() && split < 0; ++l) {
      if (!router[l].defined()) continue;
      const std::vector<double> a = host(dec.router_logits(static_cast<int64_t>(l))), b = host(router[l]);
      EXPECT_GE(cosine(a, b), 0.9999) << "router logits, layer " << l;
      if (chosen(a, s.top_k) != chosen(b, s.top_k)) split = static_cast<int64_t>(l);
    }
    splits += split >= 0;
    const size_t rows = split < 0 ? resid.size() : static_cast<size_t>(2 * split + 2);
    std::vector<std::vector<double>> mine(rows), theirs(rows);
    bool apart = false;  // a residual row or the logits under 0.9999 of the CUDA eager step's
    for (size_t i = 0; i < rows; ++i) {
      mine[i] = host(dec.residual(static_cast<int64_t>(i)));
      theirs[i] = host(resid[i]);
      apart = apart || cosine(mine[i], theirs[i]) < 0.9999;
    }
    const std::vector<double> a = host(got), b = host(want);
    const auto [want_top, margin] = top1(b);
    apart = apart || (split < 0 && cosine(a, b) < 0.9999);
    if (!apart) {
      // Two bfloat16 steps pick apart only at near ties: at these widths the CPU's bfloat16 and
      // float32 eager steps differ at margins up to 0.3 % of the logits' range.
      if (split < 0 && margin > 1e-2) {
        EXPECT_EQ(top1(a).first, want_top) << "greedy token (margin " << margin << ")";
      }
    } else {
      // Apart from the CUDA eager step: every MLP / MoE block and the head are recomputed on the
      // CPU from the persistent step's own inputs (its residual rows), and must give its next row
      // (and logits) within 0.9999. Two correct steps drift apart where a step is ill-conditioned:
      // measured, the CUDA and CPU eager steps 1.2e-4 apart in cosine at a residual row of the
      // log-normal float8 model, whose sums of a few large products nearly cancel; an op that is
      // wrong for its input fails here whatever came before it.
      local_checks(cpu_weights(), dec, rows, a, split < 0);
      ++local_steps;
    }
    // The k and v rows written at pos: the eager step's, to the roundings of the q / k / v sums.
    for (size_t l = 0; l < w.layers.size(); ++l) {
      DecoderLayerWeights &L = w.layers[l], &O = oracle.layers[l];
      if (split < 0 || static_cast<int64_t>(l) <= split) {
        EXPECT_GE(cosine(host(L.k_cache.select(2, pos)), host(O.k_cache.select(2, pos))), 0.9999) << "layer " << l;
        EXPECT_GE(cosine(host(L.v_cache.select(2, pos)), host(O.v_cache.select(2, pos))), 0.9999) << "layer " << l;
      }
      if (split >= 0) {
        L.k_cache.select(2, pos).copy_(O.k_cache.select(2, pos));
        L.v_cache.select(2, pos).copy_(O.v_cache.select(2, pos));
      }
    }
    token = static_cast<int64_t>(want_top);
  }
  EXPECT_LE(splits * 2, static_cast<int64_t>(positions.size())) << splits << " steps routed apart";
  // The ill-conditioned steps are rare: the CUDA eager step decides almost all of them.
  EXPECT_LE(local_steps * 10, static_cast<int64_t>(positions.size())) << local_steps << " steps needed the local checks";
}

TEST(PersistentDecoder, MatchesEagerHeadDim128) {
  ANVIL_REQUIRE_CUDA();
  // 2 q heads per kv head (Qwen3-0.6B's), a vocabulary of 125 tiles; positions over several splits.
  compare_steps({256, 128, 4, 2, 512, 1000, 3, 200}, kBFloat16, {0, 1, 2, 37, 63, 64, 65, 130, 199});
}

TEST(PersistentDecoder, MatchesEagerHeadDim64Group8) {
  ANVIL_REQUIRE_CUDA();
  // 8 q heads per kv head (Qwen3-30B-A3B's), k = 1024 + 512 (a partial stage), 777 logits (a partial tile).
  compare_steps({512, 64, 16, 2, 1536 / 2 * 2, 777, 2, 300}, kBFloat16, {0, 5, 150, 299});
}

TEST(PersistentDecoder, MatchesEagerHeadDim16Float16) {
  ANVIL_REQUIRE_CUDA();
  // The tiny golden model's shape (head_dim 16), float16.
  compare_steps({64, 16, 4, 2, 128, 512, 2, 64}, kFloat16, {0, 1, 31, 32, 63});
}

TEST(PersistentDecoder, MatchesEagerGroup16OneKvHead) {
  ANVIL_REQUIRE_CUDA();
  compare_steps({256, 128, 16, 1, 384, 300, 2, 80}, kBFloat16, {0, 40, 79});
}

TEST(PersistentDecoder, MoeMatchesEager) {
  ANVIL_REQUIRE_CUDA();
  // A dense layer, then MoE layers: 16 experts, top 4 renormalised, intermediate 136 (down's k a
  // partial stage).
  ModelShape s{256, 128, 4, 2, 136, 1000, 3, 100};
  s.E = 16, s.top_k = 4, s.dense_layers = 1;
  compare_steps(s, kBFloat16, {0, 1, 2, 64, 65, 99});
}

TEST(PersistentDecoder, MoeQwen3MoeLikeWithTies) {
  ANVIL_REQUIRE_CUDA();
  // Qwen3-30B-A3B's 128 experts (top 7, renormalised: an odd top_k cuts through a tied pair; 8 q
  // heads per kv head) at a small hidden size, router rows tied in pairs: the lower expert of a
  // tie is chosen.
  ModelShape s{512, 64, 16, 2, 96, 777, 2, 80};
  s.E = 128, s.top_k = 7, s.tied_router = true;
  compare_steps(s, kBFloat16, {0, 7, 79});
}

TEST(PersistentDecoder, MoeUnnormalisedFloat16) {
  ANVIL_REQUIRE_CUDA();
  // 200 experts (two 32-lane rounds of routing registers), top 2 without renormalisation, float16.
  ModelShape s{128, 16, 4, 2, 64, 512, 2, 40};
  s.E = 200, s.top_k = 2, s.norm_topk = false;
  compare_steps(s, kFloat16, {0, 1, 39});
}

TEST(PersistentDecoder, Fp8RowScales) {
  ANVIL_REQUIRE_CUDA();
  // Row-scaled float8 projections (anvil's fp8 loading), a dense layer and an MoE layer; k = 2048 +
  // 512 in the dense down (a partial float8 stage).
  ModelShape s{256, 128, 4, 2, 2560, 1000, 2, 100};
  s.E = 8, s.top_k = 2, s.dense_layers = 1, s.fp8 = true;
  compare_steps(s, kBFloat16, {0, 1, 70, 99});
  // Only subnormal codes: the bfloat16 decode keeps them (a flush would zero every projection).
  s.subnormal = true;
  compare_steps(s, kBFloat16, {0, 5});
}

TEST(PersistentDecoder, Fp8BlockScales) {
  ANVIL_REQUIRE_CUDA();
  // Block scales of 16 rows x 64 columns (several blocks per tile's row and per stage), MoE with
  // Qwen3-30B-A3B's routing; then the Hub's 128 x 128 blocks on a dense model, float16.
  ModelShape s{512, 64, 16, 2, 96, 777, 2, 80};
  s.E = 128, s.top_k = 8, s.fp8 = true, s.fp8_block = {16, 64};
  compare_steps(s, kBFloat16, {0, 7, 79});
  ModelShape d{384, 128, 4, 2, 640, 500, 2, 40};
  d.fp8 = true, d.fp8_block = {128, 128};
  compare_steps(d, kFloat16, {0, 39});
  // k = 272 and 48 (= 32 + 16: a partial 32-column chunk) in blocks of 16 x 32.
  ModelShape p{272, 16, 4, 2, 48, 300, 2, 40};
  p.fp8 = true, p.fp8_block = {16, 32};
  compare_steps(p, kBFloat16, {0, 1, 39});
}

// Real models' widths (Qwen3-0.6B; Qwen3-30B-A3B, bfloat16 and the Hub's 128 x 128 float8
// blocks) with a few layers, over 128 greedy steps (64 for float8): every residual row, the logits
// and the tokens as the eager step's.
std::vector<int64_t> first_positions(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

TEST(PersistentDecoder, RealWidths128Steps) {
  ANVIL_REQUIRE_CUDA();
  compare_steps({1024, 128, 16, 8, 3072, 151936, 3, 160}, kBFloat16, first_positions(128));
  ModelShape moe{2048, 128, 32, 4, 768, 151936, 2, 160};
  moe.E = 128, moe.top_k = 8;
  compare_steps(moe, kBFloat16, first_positions(128));
  // Normal float8 codes: with log-normal ones some steps are ill-conditioned (the CUDA and CPU
  // eager steps themselves 1.2e-4 apart in cosine at a residual row).
  moe.fp8 = true, moe.fp8_block = {128, 128}, moe.gaussian = true;
  compare_steps(moe, kBFloat16, first_positions(64));
}

// The checked mode (one launch per op, each checked) computes what the one launch does, bit for
// bit; repeated launches at one position give the same logits (the counters reset).
void expect_checked_and_repeated(const ModelShape& s, const std::string& ops) {
  DecoderWeights w = random_model(s, kBFloat16, Device(kCUDA, 0));
  PersistentDecoder dec(w);
  EXPECT_NE(dec.describe().find(ops), std::string::npos) << dec.describe();
  const Tensor a = dec.step(7, 10);
  const Tensor b = dec.step_checked(7, 10);
  const Tensor c = dec.step(7, 10);
  dec.check();
  EXPECT_EQ(th::to_bits(a), th::to_bits(b));
  EXPECT_EQ(th::to_bits(a), th::to_bits(c));
}

TEST(PersistentDecoder, CheckedModeAndRepeatedLaunches) {
  ANVIL_REQUIRE_CUDA();
  manual_seed(99);
  expect_checked_and_repeated({256, 128, 4, 2, 512, 1000, 2, 64}, "11 ops");
  // An MoE model: 2 layers of qkv, attention, o, router, experts gate_up, experts down; lm_head.
  ModelShape s{256, 128, 4, 2, 64, 500, 2, 64};
  s.E = 32, s.top_k = 8;
  expect_checked_and_repeated(s, "13 ops");
}

TEST(PersistentDecoder, BadInputs) {
  ANVIL_REQUIRE_CUDA();
  manual_seed(5);
  const Device dev(kCUDA, 0);
  DecoderWeights w = random_model({64, 16, 4, 2, 128, 512, 1, 32}, kBFloat16, dev);
  PersistentDecoder dec(w);
  EXPECT_THROWS_SAYING(IndexError, "persistent_decoder", "vocabulary", dec.step(512, 0));
  EXPECT_THROWS_SAYING(IndexError, "persistent_decoder", "cache of 32 rows", dec.step(1, 32));
  EXPECT_THROWS_SAYING(IndexError, "persistent_decoder", "residual 3", dec.residual(3));
  EXPECT_THROWS_SAYING(IndexError, "persistent_decoder", "layer 1 is outside", dec.router_logits(1));
  EXPECT_THROWS_SAYING(Error, "persistent_decoder", "layer 0 is dense", dec.router_logits(0));
  // Composed: float32 weights, head_dim 80.
  DecoderWeights f32 = random_model({64, 16, 4, 2, 128, 512, 1, 32}, kFloat32, dev);
  EXPECT_EQ(PersistentDecoder::plan(f32), FusedPlan::Composed);
  EXPECT_THROWS_SAYING(Error, "persistent_decoder", "plan is composed", PersistentDecoder(f32));
  DecoderWeights d80 = random_model({160, 80, 2, 1, 128, 64, 1, 16}, kBFloat16, dev);
  EXPECT_EQ(PersistentDecoder::plan(d80), FusedPlan::Composed);
  // Composed: a dense view that starts 2 bytes past 16 (the kernel's bulk copies need 16).
  DecoderWeights shifted = w;
  const Tensor& down = w.layers[0].down;
  const Tensor flat = empty({down.numel() + 1}, TensorOptions(down.dtype()).device(dev));
  shifted.layers[0].down = flat.narrow(0, 1, down.numel()).view(down.sizes());
  shifted.layers[0].down.copy_(down);
  EXPECT_EQ(PersistentDecoder::plan(shifted), FusedPlan::Composed);
  // Composed: 300 experts (the kernel routes over at most 256), top 9 of 64 (at most 8).
  ModelShape many{64, 16, 4, 2, 32, 64, 1, 16};
  many.E = 300, many.top_k = 2;
  EXPECT_EQ(PersistentDecoder::plan(random_model(many, kBFloat16, dev)), FusedPlan::Composed);
  many.E = 64, many.top_k = 9;
  EXPECT_EQ(PersistentDecoder::plan(random_model(many, kBFloat16, dev)), FusedPlan::Composed);
}

// Validation and the plan on the CPU (CI): the CPU always composes; shapes that do not describe
// one model are errors naming the tensor.
TEST(PersistentDecoder, PlanAndValidationOnCpu) {
  manual_seed(5);
  DecoderWeights w = random_model({64, 16, 4, 2, 128, 512, 2, 32}, kBFloat16, kCPU);
  EXPECT_EQ(PersistentDecoder::plan(w), FusedPlan::Composed);
  EXPECT_THROWS_SAYING(Error, "persistent_decoder", "plan is composed", PersistentDecoder(w));
  DecoderWeights bad = w;
  bad.layers[1].o = rnd({64, 32}, 1.0, kBFloat16, kCPU);
  EXPECT_THROWS_SAYING(ShapeError, "persistent_decoder", "layer 1 o must be [64, 64]", PersistentDecoder::plan(bad));
  bad = w;
  bad.layers[0].down = bad.layers[0].down.to(kFloat32);
  EXPECT_THROWS_SAYING(DTypeError, "persistent_decoder", "layer 0 down must have embed's dtype", PersistentDecoder::plan(bad));
  bad = w;
  bad.n_kv_heads = 3;
  EXPECT_THROWS_SAYING(ShapeError, "persistent_decoder", "multiple of n_kv_heads", PersistentDecoder::plan(bad));
  // MoE layers: experts' shapes, top_k within the experts; over 256 experts composes.
  ModelShape ms{64, 16, 4, 2, 32, 512, 2, 32};
  ms.E = 8, ms.top_k = 2;
  const DecoderWeights moe = random_model(ms, kBFloat16, kCPU);
  EXPECT_EQ(PersistentDecoder::plan(moe), FusedPlan::Composed);
  bad = moe;
  bad.top_k = 9;
  EXPECT_THROWS_SAYING(ShapeError, "persistent_decoder", "top_k (9) must be in [1, 8]", PersistentDecoder::plan(bad));
  bad = moe;
  bad.layers[1].gate_up = bad.layers[1].gate_up.select(0, 0);
  EXPECT_THROWS_SAYING(ShapeError, "persistent_decoder", "layer 1 gate_up must be [experts, 2 * intermediate, hidden]",
                       PersistentDecoder::plan(bad));
  bad = moe;
  bad.layers[0].down = bad.layers[0].down.narrow(2, 0, 16).contiguous();
  EXPECT_THROWS_SAYING(ShapeError, "persistent_decoder", "layer 0 down must be [8, 64, 32]", PersistentDecoder::plan(bad));
  bad = w;
  bad.layers.clear();
  EXPECT_THROWS_SAYING(ShapeError, "persistent_decoder", "no layers", PersistentDecoder::plan(bad));
}

}  // namespace
