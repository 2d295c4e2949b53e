// PersistentDecoder: validates the weights, builds the persistent step's schedule once (the ops,
// a chain where each waits for the one before, and each block's items) and its buffers, and
// launches the backend's decoder_step (core/kernels/decoder.h) per token.
// Ops per layer: qkv (AddNorm prologue: the residual add and input norm), attention, o (Copy),
// then a dense layer's gate_up (AddNorm: the residual add and post-attention norm) and down
// (SiluMul), or an MoE layer's router (AddNorm, its output the logits), experts' gate_up (AddNorm
// again, routed: Experts) and down (SiluMul per slot, routed: ExpertsSum, the weighted sum);
// then the lm_head (AddNorm: the final norm), whose float32 output is the step's logits. Items are
// dealt round robin over the blocks, continuing from op to op, so every block holds an equal
// share of each weight stream and of the whole step.
#include "anvil/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "anvil/cuda.h"
#include "anvil/stream.h"
#include "core/kernels/decoder.h"
#include "core/util.h"

namespace anvil {
namespace {

constexpr const char* kOp = "[persistent_decoder]";

// The model's sizes, from validated weights.
struct Dims {
  int64_t H = 0, D = 0, vocab = 0, logits = 0, layers = 0, nh = 0, nkv = 0, rows = 0;
  std::vector<int64_t> I, E;  // per layer: intermediate size, experts (0: dense)
  int64_t max_gu = 0, max_e = 0, max_in = 0;  // the largest gate_up output row (all slots), E and Gemv input
};

void check_shape(const Tensor& t, const Shape& want, const std::string& name) {
  ANVIL_CHECK(t.defined(), Error, kOp, " ", name, " is undefined");
  ANVIL_CHECK(t.sizes() == want, ShapeError, kOp, " ", name, " must be ", shape_str(want), ", got ", describe(t));
}

// Shapes, dtypes and devices of one model (throws); the plan's questions come after.
Dims validate(const DecoderWeights& w) {
  ANVIL_CHECK(!w.layers.empty(), ShapeError, kOp, " the model has no layers");
  ANVIL_CHECK(w.embed.defined() && w.embed.dim() == 2, ShapeError, kOp, " embed must be [vocab, hidden], got ",
              w.embed.defined() ? describe(w.embed) : "undefined");
  Dims d;
  d.vocab = w.embed.size(0);
  d.H = w.embed.size(1);
  d.layers = static_cast<int64_t>(w.layers.size());
  d.nh = w.n_heads;
  d.nkv = w.n_kv_heads;
  ANVIL_CHECK(d.nh > 0 && d.nkv > 0 && d.nh % d.nkv == 0, ShapeError, kOp, " n_heads (", d.nh,
              ") must be a positive multiple of n_kv_heads (", d.nkv, ")");
  ANVIL_CHECK(w.inv_freq.defined() && w.inv_freq.dim() == 1, ShapeError, kOp, " inv_freq must be [head_dim / 2]");
  d.D = 2 * w.inv_freq.size(0);
  const DecoderLayerWeights& l0 = w.layers[0];
  ANVIL_CHECK(l0.k_cache.defined() && l0.k_cache.dim() == 4, ShapeError, kOp,
              " layer 0 k_cache must be [1, n_kv_heads, rows, head_dim]");
  d.rows = l0.k_cache.size(2);
  ANVIL_CHECK(w.head.defined() && w.head.dim() == 2, ShapeError, kOp, " head must be [logits, hidden]");
  d.logits = w.head.size(0);
  const DType dt = w.embed.dtype();
  const Device dev = w.embed.device();
  auto same = [&](const Tensor& t, const std::string& name) {
    ANVIL_CHECK(t.dtype() == dt, DTypeError, kOp, " ", name, " must have embed's dtype ", dtype_name(dt), ", got ",
                describe(t));
    ANVIL_CHECK(t.device() == dev, DeviceError, kOp, " ", name, " must be on embed's device ", dev.str(), ", got ",
                describe(t));
  };
  auto weight = [&](const Tensor& t, const Shape& want, const std::string& name) {
    check_shape(t, want, name);
    same(t, name);
  };
  // A projection: embed's dtype, or float8 with its scales (DecoderWeightScale's shapes).
  auto proj = [&](const Tensor& t, const DecoderWeightScale& sc, const Shape& want, const std::string& name) {
    if (!sc.scale.defined()) return weight(t, want, name);
    check_shape(t, want, name);
    ANVIL_CHECK(is_float8(t.dtype()), DTypeError, kOp, " ", name, " has scales, so it must be float8, got ", describe(t));
    ANVIL_CHECK(t.device() == dev && sc.scale.device() == dev, DeviceError, kOp, " ", name, " and its scale must be on ",
                dev.str(), ", got ", describe(t), " and ", describe(sc.scale));
    ANVIL_CHECK(sc.scale.dtype() == kFloat32, DTypeError, kOp, " ", name, "'s scale must be float32, got ",
                describe(sc.scale));
    const int64_t n = want[want.size() - 2], k = want.back();
    Shape s(want.begin(), want.end() - 2);
    if (sc.block.empty()) {
      s.push_back(n);
      Shape s1 = s;
      s1.push_back(1);
      const bool one = want.size() == 2 && sc.scale.numel() == 1;  // scaled_linear's one scale (plan: Composed)
      ANVIL_CHECK(one || sc.scale.sizes() == s || sc.scale.sizes() == s1, ShapeError, kOp, " ", name,
                  "'s row scale must be ", shape_str(s), " or ", shape_str(s1), ", got ", describe(sc.scale));
      return;
    }
    ANVIL_CHECK(sc.block.size() == 2 && sc.block[0] > 0 && sc.block[1] > 0, ShapeError, kOp, " ", name,
                "'s block must be {bn, bk} > 0, got ", shape_str(sc.block));
    s.push_back((n + sc.block[0] - 1) / sc.block[0]);
    s.push_back((k + sc.block[1] - 1) / sc.block[1]);
    check_shape(sc.scale, s, name + "'s block scale");
  };
  weight(w.final_norm, {d.H}, "final_norm");
  weight(w.head, {d.logits, d.H}, "head");
  ANVIL_CHECK(w.inv_freq.dtype() == kFloat32 && w.inv_freq.device() == dev, DTypeError, kOp,
              " inv_freq must be float32 on ", dev.str(), ", got ", describe(w.inv_freq));
  for (int64_t l = 0; l < d.layers; ++l) {
    const DecoderLayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string p = "layer " + std::to_string(l) + " ";
    weight(L.input_norm, {d.H}, p + "input_norm");
    proj(L.qkv, L.qkv_scale, {(d.nh + 2 * d.nkv) * d.D, d.H}, p + "qkv");
    if (L.q_norm.defined()) weight(L.q_norm, {d.D}, p + "q_norm");
    if (L.k_norm.defined()) weight(L.k_norm, {d.D}, p + "k_norm");
    proj(L.o, L.o_scale, {d.H, d.nh * d.D}, p + "o");
    weight(L.post_norm, {d.H}, p + "post_norm");
    const int64_t E = L.router.defined() ? L.router.size(0) : 0;
    if (E > 0) weight(L.router, {E, d.H}, p + "router");
    const int64_t gd = E > 0 ? 3 : 2;
    ANVIL_CHECK(L.gate_up.defined() && L.gate_up.dim() == gd && L.gate_up.size(gd - 2) % 2 == 0, ShapeError, kOp, " ", p,
                "gate_up must be ", E > 0 ? "[experts, 2 * intermediate, hidden]" : "[2 * intermediate, hidden]",
                ", got ", L.gate_up.defined() ? describe(L.gate_up) : "undefined");
    const int64_t I = L.gate_up.size(gd - 2) / 2;
    if (E > 0) {
      ANVIL_CHECK(w.top_k >= 1 && w.top_k <= E, ShapeError, kOp, " top_k (", w.top_k, ") must be in [1, ", E,
                  "] for ", p, "with ", E, " experts");
      proj(L.gate_up, L.gate_up_scale, {E, 2 * I, d.H}, p + "gate_up");
      proj(L.down, L.down_scale, {E, d.H, I}, p + "down");
    } else {
      proj(L.gate_up, L.gate_up_scale, {2 * I, d.H}, p + "gate_up");
      proj(L.down, L.down_scale, {d.H, I}, p + "down");
    }
    d.I.push_back(I);
    d.E.push_back(E);
    const int64_t slots = E > 0 ? w.top_k : 1;
    d.max_gu = std::max(d.max_gu, slots * 2 * I);
    d.max_e = std::max(d.max_e, E);
    d.max_in = std::max(d.max_in, slots * I);
    weight(L.k_cache, {1, d.nkv, d.rows, d.D}, p + "k_cache");
    weight(L.v_cache, {1, d.nkv, d.rows, d.D}, p + "v_cache");
  }
  return d;
}

// Every tensor the kernel reads through a plain pointer must be dense and start on 16 bytes (its
// bulk copies and 16-byte loads; a view at an odd offset would fault).
bool all_dense_aligned(const DecoderWeights& w) {
  auto ok = [](const Tensor& t) {
    return !t.defined() || (t.is_contiguous() && reinterpret_cast<std::uintptr_t>(t.raw_data_ptr()) % 16 == 0);
  };
  bool c = ok(w.embed) && ok(w.final_norm) && ok(w.head) && ok(w.inv_freq);
  for (const DecoderLayerWeights& L : w.layers)
    c = c && ok(L.input_norm) && ok(L.qkv) && ok(L.q_norm) && ok(L.k_norm) && ok(L.o) && ok(L.post_norm) &&
        ok(L.gate_up) && ok(L.down) && ok(L.k_cache) && ok(L.v_cache) && ok(L.router) && ok(L.qkv_scale.scale) &&
        ok(L.o_scale.scale) && ok(L.gate_up_scale.scale) && ok(L.down_scale.scale);
  return c;
}

// Float8 weights the kernel decodes: e4m3fn, rows of whole 16-byte copies (k % 16), a scale per
// row or blocks of whole tiles (bn % 8) and of whole 32-column chunks (bk % 32); an MoE layer's
// experts only with bk = 64 x 2^i, where moe_experts also scales inside the dots (for other
// blocks it dequantises first: another rounding).
bool kernel_scales(const DecoderWeights& w) {
  auto ok = [](const Tensor& t, const DecoderWeightScale& s) {
    if (!s.scale.defined()) return true;
    if (t.dtype() != kFloat8_e4m3fn || t.size(-1) % 16 != 0) return false;
    const int64_t rows = t.numel() / t.size(-1);
    if (s.block.empty()) return s.scale.numel() == rows;  // not one scale for the whole tensor
    const int64_t bn = s.block[0], bk = s.block[1];
    const bool pow2 = bk % 64 == 0 && ((bk / 64) & (bk / 64 - 1)) == 0;
    return bn % 8 == 0 && bk % 32 == 0 && (t.dim() == 2 || pow2);
  };
  for (const DecoderLayerWeights& L : w.layers)
    if (!ok(L.qkv, L.qkv_scale) || !ok(L.o, L.o_scale) || !ok(L.gate_up, L.gate_up_scale) || !ok(L.down, L.down_scale))
      return false;
  return true;
}

int sm_count(Device dev) { return cuda::get_device_properties(dev.index).multiprocessor_count; }

// The plan-relevant params (no buffers yet).
DecoderStepParams plan_params(const Dims& d, const DecoderWeights& w) {
  DecoderStepParams p;
  p.dtype = w.embed.dtype();
  p.device = w.embed.device().index;
  p.blocks = sm_count(w.embed.device());
  p.max_k = std::max({d.H, d.nh * d.D, d.max_in});
  p.max_group = static_cast<int32_t>(d.nh / d.nkv);
  p.max_experts = static_cast<int32_t>(std::min<int64_t>(d.max_e, INT32_MAX));
  p.max_top_k = d.max_e > 0 ? static_cast<int32_t>(std::min<int64_t>(w.top_k, INT32_MAX)) : 0;
  p.head_dim = static_cast<int32_t>(d.D);
  return p;
}

FusedPlan plan_of(const Dims& d, const DecoderWeights& w) {
  if (!w.embed.device().is_cuda() || !all_dense_aligned(w) || !kernel_scales(w)) return FusedPlan::Composed;
  if (d.H % 8 != 0 || (d.nh * d.D) % 8 != 0 || d.D % 8 != 0) return FusedPlan::Composed;
  for (const int64_t I : d.I)
    if (I % 8 != 0) return FusedPlan::Composed;
  return ANVIL_PLAN(w.embed.device(), decoder_step, plan_params(d, w));
}

const void* ptr(const Tensor& t) { return t.defined() ? t.raw_data_ptr() : nullptr; }

// Copies a host vector of POD into a new uint8 device tensor.
template <typename V>
Tensor upload(const std::vector<V>& v, Device dev) {
  const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(V));
  Tensor host = empty({bytes}, TensorOptions(kUInt8));
  if (bytes > 0) std::memcpy(host.data_ptr(), v.data(), static_cast<size_t>(bytes));
  return host.to(dev);
}

}  // namespace

struct PersistentDecoder::Impl {
  DecoderWeights w;
  Dims d;
  Device dev;
  Tensor resid, qkv, attn, o, gu, down, router, part, tickets, counters, status, in;
  Tensor ops_dev, items_dev, begin_dev;
  std::vector<DecoderOp> ops;
  std::vector<std::string> names;
  std::vector<Tensor> outputs;  // each op's output (the logits op: undefined, checked separately)
  int64_t items = 0;
  DecoderStepParams p;

  // Writes the step's inputs; returns the logits tensor the launch fills.
  Tensor begin_step(int64_t token, int64_t pos) {
    ANVIL_CHECK(token >= 0 && token < d.vocab, IndexError, kOp, " token ", token, " is outside the vocabulary of ",
                d.vocab);
    ANVIL_CHECK(pos >= 0 && pos < d.rows, IndexError, kOp, " position ", pos, " is outside the cache of ", d.rows,
                " rows");
    in.copy_(tensor<int32_t>({static_cast<int32_t>(token), static_cast<int32_t>(pos), static_cast<int32_t>(pos + 1)}));
    Tensor logits = empty({1, d.logits}, TensorOptions(kFloat32).device(dev));
    p.out = logits.raw_data_ptr();
    return logits;
  }

  // Throws when a wait of the last launch timed out (reads the status: synchronises).
  void throw_status(const std::string& when) {
    const Tensor s = status.to(kCPU);
    const int32_t op = s.data_ptr<int32_t>()[0];
    if (op != 0) status.copy_(zeros({2}, TensorOptions(kInt32)));  // the next launch starts clean
    ANVIL_CHECK(op == 0, Error, kOp, " ", when, ": op ", op - 1, " (", names[static_cast<size_t>(op - 1)],
                ") timed out waiting for ", op >= 2 ? names[static_cast<size_t>(op - 2)] : std::string("its inputs"),
                " (the launch's outputs are garbage)");
  }
};

FusedPlan PersistentDecoder::plan(const DecoderWeights& weights) { return plan_of(validate(weights), weights); }

PersistentDecoder::PersistentDecoder(const DecoderWeights& weights) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = validate(weights);
  ANVIL_CHECK(plan_of(m.d, weights) == FusedPlan::Fused, Error, kOp,
              " the persistent kernel does not take these weights (its plan is composed): ", anvil::describe(weights.embed),
              ", head_dim ", m.d.D, ", ", m.d.nh / m.d.nkv, " q heads per kv head");
  m.w = weights;
  m.dev = weights.embed.device();
  const Dims& d = m.d;
  const int64_t L = d.layers, H = d.H, D = d.D, nh = d.nh, nkv = d.nkv;
  const TensorOptions t = TensorOptions(weights.embed.dtype()).device(m.dev);
  m.p = plan_params(d, weights);
  const int G = m.p.blocks;
  // Key splits per kv head: about one attention item per block (at most 128: the combine's
  // weights share the attention work area).
  const int64_t splits = std::clamp<int64_t>((G + nkv / 2) / nkv, 1, 128);
  m.resid = empty({2 * L + 1, H}, t);
  m.qkv = empty({L, (nh + 2 * nkv) * D}, t);
  m.attn = empty({L, nh * D}, t);
  m.o = empty({L, H}, t);
  m.gu = empty({L, d.max_gu}, t);
  m.router = empty({L, std::max<int64_t>(d.max_e, 1)}, t);
  m.down = empty({L, H}, t);
  m.part = empty({L, nh * splits * (D + 2)}, TensorOptions(kFloat32).device(m.dev));
  m.tickets = zeros({L, nkv}, TensorOptions(kInt32).device(m.dev));
  m.status = zeros({2}, TensorOptions(kInt32).device(m.dev));
  m.in = zeros({3}, TensorOptions(kInt32).device(m.dev));

  auto row = [](const Tensor& x, int64_t i) { return x.select(0, i).raw_data_ptr(); };
  auto part_row = [](const Tensor& x, int64_t i, int64_t n) { return x.select(0, i).narrow(0, 0, n); };
  auto gemv = [&](const std::string& name, const Tensor& wt, const DecoderWeightScale& sc, DecoderPrologue pro,
                  const void* a, const void* b, const Tensor& norm, void* sum_out, const Tensor& out) {
    DecoderOp op;
    op.kind = DecoderOpKind::Gemv;
    op.prologue = pro;
    op.w = wt.raw_data_ptr();
    op.n = wt.size(-2);  // an MoE layer's experts [E, n, k]: one expert's rows
    op.k = wt.size(-1);
    op.a = a;
    op.b = b;
    op.norm_w = ptr(norm);
    op.sum_out = sum_out;
    op.y = out.defined() ? out.raw_data_ptr() : nullptr;
    op.eps = static_cast<float>(weights.eps);
    op.signals = static_cast<uint32_t>((op.n + kDecoderTileRows - 1) / kDecoderTileRows);
    if (sc.scale.defined()) {
      op.scaling = sc.block.empty() ? DecoderScale::Row : DecoderScale::Block;
      op.w_scale = static_cast<const float*>(sc.scale.raw_data_ptr());
      if (op.scaling == DecoderScale::Block) {
        op.scale_bn = sc.block[0];
        op.scale_bk = sc.block[1];
      }
      op.scale_expert = wt.dim() == 3 ? sc.scale.numel() / wt.size(0) : 0;
    }
    m.ops.push_back(op);
    m.names.push_back(name);
    m.outputs.push_back(out);
  };
  // The op just added runs over the experts op `router` chooses (its y: the logits).
  auto routed = [&](int32_t router, DecoderRouting routing) {
    DecoderOp& op = m.ops.back();
    const DecoderOp& r = m.ops[static_cast<size_t>(router)];
    op.routing = routing;
    op.route_op = router;
    op.route_count = r.signals;
    op.logits = r.y;
    op.experts = static_cast<int32_t>(r.n);
    op.top_k = static_cast<int32_t>(weights.top_k);
    op.norm_topk = weights.norm_topk_prob ? 1 : 0;
    if (routing == DecoderRouting::Experts) op.signals *= static_cast<uint32_t>(weights.top_k);  // a tile per slot
  };
  for (int64_t l = 0; l < L; ++l) {
    const DecoderLayerWeights& W = weights.layers[static_cast<size_t>(l)];
    const std::string p = "layer " + std::to_string(l) + " ";
    if (l == 0) {
      gemv(p + "qkv", W.qkv, W.qkv_scale, DecoderPrologue::AddNorm, nullptr, weights.embed.raw_data_ptr(), W.input_norm, row(m.resid, 0),
           m.qkv.select(0, l));
      m.ops.back().gather = 1;
    } else {
      gemv(p + "qkv", W.qkv, W.qkv_scale, DecoderPrologue::AddNorm, row(m.down, l - 1), row(m.resid, 2 * l - 1), W.input_norm,
           row(m.resid, 2 * l), m.qkv.select(0, l));
    }
    DecoderOp at;
    at.kind = DecoderOpKind::Attention;
    at.qkv = row(m.qkv, l);
    at.q_norm = ptr(W.q_norm);
    at.k_norm = ptr(W.k_norm);
    at.inv_freq = static_cast<const float*>(weights.inv_freq.raw_data_ptr());
    at.k_cache = W.k_cache.raw_data_ptr();
    at.v_cache = W.v_cache.raw_data_ptr();
    at.part = static_cast<float*>(row(m.part, l));
    at.tickets = static_cast<uint32_t*>(row(m.tickets, l));
    at.out = row(m.attn, l);
    at.cache_rows = d.rows;
    at.n_heads = static_cast<int32_t>(nh);
    at.n_kv = static_cast<int32_t>(nkv);
    at.head_dim = static_cast<int32_t>(D);
    at.splits = static_cast<int32_t>(splits);
    at.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    at.eps = static_cast<float>(weights.eps);
    at.signals = static_cast<uint32_t>(nkv);
    m.ops.push_back(at);
    m.names.push_back(p + "attention");
    m.outputs.push_back(m.attn.select(0, l));
    gemv(p + "o", W.o, W.o_scale, DecoderPrologue::Copy, row(m.attn, l), nullptr, Tensor(), nullptr, m.o.select(0, l));
    const int64_t I = d.I[static_cast<size_t>(l)], E = d.E[static_cast<size_t>(l)];
    if (E > 0) {  // router, then the routed experts (gate_up recomputes the router's input row)
      const auto router = static_cast<int32_t>(m.ops.size());
      gemv(p + "router", W.router, {}, DecoderPrologue::AddNorm, row(m.o, l), row(m.resid, 2 * l), W.post_norm,
           row(m.resid, 2 * l + 1), part_row(m.router, l, E));
      gemv(p + "experts gate_up", W.gate_up, W.gate_up_scale, DecoderPrologue::AddNorm, row(m.o, l), row(m.resid, 2 * l), W.post_norm,
           nullptr, part_row(m.gu, l, weights.top_k * 2 * I));
      routed(router, DecoderRouting::Experts);
      gemv(p + "experts down", W.down, W.down_scale, DecoderPrologue::SiluMul, row(m.gu, l), nullptr, Tensor(), nullptr,
           m.down.select(0, l));
      routed(router, DecoderRouting::ExpertsSum);
    } else {
      gemv(p + "gate_up", W.gate_up, W.gate_up_scale, DecoderPrologue::AddNorm, row(m.o, l), row(m.resid, 2 * l), W.post_norm,
           row(m.resid, 2 * l + 1), part_row(m.gu, l, 2 * I));
      gemv(p + "down", W.down, W.down_scale, DecoderPrologue::SiluMul, row(m.gu, l), nullptr, Tensor(), nullptr, m.down.select(0, l));
    }
  }
  gemv("lm_head", weights.head, {}, DecoderPrologue::AddNorm, row(m.down, L - 1), row(m.resid, 2 * L - 1), weights.final_norm,
       row(m.resid, 2 * L), Tensor());
  m.ops.back().out_f32 = 1;
  const int32_t n_ops = static_cast<int32_t>(m.ops.size());
  for (int32_t i = 1; i < n_ops; ++i) {  // the chain
    m.ops[static_cast<size_t>(i)].dep = i - 1;
    m.ops[static_cast<size_t>(i)].dep_count = m.ops[static_cast<size_t>(i - 1)].signals;
  }

  // Items round robin over the blocks, continuing from op to op.
  std::vector<std::vector<DecoderItem>> per_block(static_cast<size_t>(G));
  int64_t cursor = 0;
  for (int32_t i = 0; i < n_ops; ++i) {
    const DecoderOp& op = m.ops[static_cast<size_t>(i)];
    const int64_t n = op.kind == DecoderOpKind::Gemv ? op.signals : nkv * splits;
    for (int64_t j = 0; j < n; ++j, ++cursor) per_block[static_cast<size_t>(cursor % G)].push_back({i, static_cast<int32_t>(j)});
  }
  std::vector<DecoderItem> items;
  std::vector<int32_t> begin{0};
  for (const auto& b : per_block) {
    items.insert(items.end(), b.begin(), b.end());
    begin.push_back(static_cast<int32_t>(items.size()));
  }
  m.items = static_cast<int64_t>(items.size());
  m.ops_dev = upload(m.ops, m.dev);
  m.items_dev = upload(items, m.dev);
  m.begin_dev = upload(begin, m.dev);
  m.counters = zeros({n_ops + 1}, TensorOptions(kInt32).device(m.dev));

  DecoderStepParams& p = m.p;
  p.ops = static_cast<const DecoderOp*>(m.ops_dev.raw_data_ptr());
  p.n_ops = n_ops;
  p.items = static_cast<const DecoderItem*>(m.items_dev.raw_data_ptr());
  p.block_begin = static_cast<const int32_t*>(m.begin_dev.raw_data_ptr());
  p.counters = static_cast<uint32_t*>(m.counters.raw_data_ptr());
  p.status = static_cast<int32_t*>(m.status.raw_data_ptr());
  p.in = static_cast<const int32_t*>(m.in.raw_data_ptr());
  p.op_begin = 0;
  p.op_end = n_ops;
  p.timeout_ns = int64_t{10} * 1000 * 1000 * 1000;
  synchronize(m.dev);  // the uploads and zeroed buffers are in place before any stream uses them
}

PersistentDecoder::~PersistentDecoder() = default;

namespace {

void check_finite(const Tensor& t, const std::string& what) {
  const Tensor h = t.to(kCPU, kFloat32).contiguous();
  const float* v = h.data_ptr<float>();
  for (int64_t i = 0; i < h.numel(); ++i)
    ANVIL_CHECK(std::isfinite(v[i]), Error, kOp, " ", what, ": element ", i, " is ", v[i]);
}

}  // namespace

Tensor PersistentDecoder::step(int64_t token, int64_t pos) {
  Impl& m = *impl_;
  Tensor logits = m.begin_step(token, pos);
  m.p.op_begin = 0;
  m.p.op_end = m.p.n_ops;
  ANVIL_KERNEL(m.dev, decoder_step, m.p);
  return logits;
}

Tensor PersistentDecoder::step_checked(int64_t token, int64_t pos) {
  Impl& m = *impl_;
  Tensor logits = m.begin_step(token, pos);
  for (int32_t i = 0; i < m.p.n_ops; ++i) {
    m.p.op_begin = i;
    m.p.op_end = i + 1;
    ANVIL_KERNEL(m.dev, decoder_step, m.p);
    synchronize(m.dev);
    m.throw_status("checked step, op " + std::to_string(i));
    const Tensor& out = m.outputs[static_cast<size_t>(i)];
    check_finite(out.defined() ? out : logits, "checked step, op " + std::to_string(i) + " (" +
                                                   m.names[static_cast<size_t>(i)] + ") output");
  }
  m.p.op_begin = 0;
  m.p.op_end = m.p.n_ops;
  return logits;
}

std::vector<DecoderOpTime> PersistentDecoder::profile_step(int64_t token, int64_t pos) {
  Impl& m = *impl_;
  const int64_t n = m.p.n_ops;
  Tensor trace = zeros({m.p.blocks, n, kTraceSlots}, TensorOptions(kInt64).device(m.dev));
  (void)m.begin_step(token, pos);
  m.p.trace = static_cast<uint64_t*>(trace.raw_data_ptr());
  ANVIL_KERNEL(m.dev, decoder_step, m.p);
  m.p.trace = nullptr;
  m.throw_status("profiled step");
  const Tensor h = trace.to(kCPU);
  const auto* t = h.data_ptr<int64_t>();
  int64_t t0 = INT64_MAX;
  for (int64_t i = 0; i < m.p.blocks * n * kTraceSlots; i += kTraceSlots)
    if (t[i] > 0) t0 = std::min(t0, t[i]);
  std::vector<DecoderOpTime> out(static_cast<size_t>(n));
  for (int64_t o = 0; o < n; ++o) {
    DecoderOpTime& r = out[static_cast<size_t>(o)];
    r.name = m.names[static_cast<size_t>(o)];
    int64_t start = INT64_MAX, end = 0, blocks = 0;
    double wait = 0, prologue = 0, work = 0, stages = 0;
    for (int64_t b = 0; b < m.p.blocks; ++b) {
      const int64_t* e = t + (b * n + o) * kTraceSlots;
      if (e[0] == 0) continue;  // no items of this op in block b
      start = std::min(start, e[1]);
      end = std::max(end, e[3]);
      wait += static_cast<double>(e[1] - e[0]);
      prologue += static_cast<double>(e[2] - e[1]);
      work += static_cast<double>(e[3] - e[2]);
      stages += static_cast<double>(e[4]);
      ++blocks;
    }
    if (blocks == 0) continue;
    const double per = 1e-3 / static_cast<double>(blocks);
    r.start_us = static_cast<double>(start - t0) * 1e-3;
    r.end_us = static_cast<double>(end - t0) * 1e-3;
    r.wait_us = wait * per;
    r.prologue_us = prologue * per;
    r.work_us = work * per;
    r.stage_wait_us = stages * per;
  }
  return out;
}

void PersistentDecoder::check() {
  synchronize(impl_->dev);
  impl_->throw_status("last step");
}

Tensor PersistentDecoder::residual(int64_t i) const {
  ANVIL_CHECK(i >= 0 && i < impl_->resid.size(0), IndexError, kOp, " residual ", i, " is outside [0, ",
              impl_->resid.size(0), ")");
  return impl_->resid.select(0, i);
}

Tensor PersistentDecoder::router_logits(int64_t layer) const {
  const Impl& m = *impl_;
  ANVIL_CHECK(layer >= 0 && layer < m.d.layers, IndexError, kOp, " layer ", layer, " is outside [0, ", m.d.layers, ")");
  const int64_t E = m.d.E[static_cast<size_t>(layer)];
  ANVIL_CHECK(E > 0, Error, kOp, " layer ", layer, " is dense: it has no router logits");
  return m.router.select(0, layer).narrow(0, 0, E);
}

std::string PersistentDecoder::describe() const {
  const Impl& m = *impl_;
  return detail::cat_message(m.p.n_ops, " ops, ", m.items, " items on ", m.p.blocks, " blocks (", m.d.layers,
                             " layers, ", m.ops[1].splits, " key splits per kv head)");
}

}  // namespace anvil
