// Qwen3 (dense) and Qwen3-MoE, as transformers' modeling_qwen3{,_moe}.py:
//   x = embed_tokens[ids]
//   per layer: h = rms_norm(x) (input_layernorm)
//              q, k, v = h Wq^T, h Wk^T, h Wv^T, split into heads of head_dim
//              q, k = rms_norm over head_dim (q_norm, k_norm), then neox RoPE at their positions
//              k, v appended to the cache; o = causal attention over the cache (grouped-query)
//              x = x + o Wo^T
//              h = rms_norm(x) (post_attention_layernorm)
//              x = x + mlp(h): dense SwiGLU down(silu(gate h) * up h), or the MoE block: router
//                  logits h Wg^T -> softmax over all experts -> top k (renormalised iff
//                  norm_topk_prob) -> the chosen experts' SwiGLUs weighted and summed
//   logits = rms_norm(x) (norm) lm_head^T (embed_tokens when tie_word_embeddings)
// Kernels per layer, fewest first: q / k / v as one GEMV over their stacked weights (so are a dense
// MLP's gate and up); q / k norms, RoPE and the cache writes as one (qk_norm_rope_cache); each
// residual add fused with the rms_norm after it (add_rms_norm), and where a GEMV follows (q / k /
// v, a dense MLP's gate / up) with that GEMV too (add_rms_norm_linear: one kernel for one token
// on CUDA); the MoE router with its routing
// (moe_router) and the experts (moe_experts: gate_up, then down with the weighted sum).
// Expert weights load from either layout: per expert (mlp.experts.E.{gate,up,down}_proj.weight,
// the Hub's) or fused (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I],
// transformers v5's), into moe_experts' stacked [E, 2I, H] / [E, H, I].
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "runtime/io.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

namespace anvil::runtime {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

constexpr const char* kOp = "[load]";

struct Layer {
  Tensor in_norm, q_norm, k_norm, post_norm;
  ProjWeight qkv, o;                         // q, k and v stacked: one GEMV
  ProjWeight gate_up, down;                  // dense MLP, gate and up stacked
  Tensor router;                             // MoE router [E, H], kept in the compute dtype
  ProjWeight experts_gate_up, experts_down;  // MoE experts [E, 2I, H], [E, H, I] (one block shape)
};

class Qwen3 final : public Model {
 public:
  Qwen3(const ModelConfig& c, WeightSource& ck, const LoadOptions& o) : c_(c), o_(o) {
    const int64_t H = c.hidden_size, D = c.head_dim;
    embed_ = take(ck, "model.embed_tokens.weight", {c.vocab_size, H});
    norm_ = take(ck, "model.norm.weight", {H});
    head_ = c.tie_word_embeddings ? ProjWeight{embed_, {}, {}} : proj(ck, "lm_head.weight", {c.vocab_size, H});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Layer L;
      L.in_norm = take(ck, p + "input_layernorm.weight", {H});
      L.post_norm = take(ck, p + "post_attention_layernorm.weight", {H});
      L.qkv = stacked(ck, {{p + "self_attn.q_proj.weight", {c.num_attention_heads * D, H}},
                           {p + "self_attn.k_proj.weight", {c.num_key_value_heads * D, H}},
                           {p + "self_attn.v_proj.weight", {c.num_key_value_heads * D, H}}});
      L.o = proj(ck, p + "self_attn.o_proj.weight", {H, c.num_attention_heads * D});
      L.q_norm = take(ck, p + "self_attn.q_norm.weight", {D});
      L.k_norm = take(ck, p + "self_attn.k_norm.weight", {D});
      if (c.sparse_layer(l)) {
        load_experts(ck, p + "mlp.", L);
      } else {
        const int64_t I = c.intermediate_size;
        L.gate_up = stacked(ck, {{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}});
        L.down = proj(ck, p + "mlp.down_proj.weight", {H, I});
      }
      layers_.push_back(std::move(L));
    }
    max_context_ = o.max_context > 0 ? o.max_context : std::min<int64_t>(c.max_position_embeddings, 4096);
    const TensorOptions t = TensorOptions(o.dtype).device(o.device);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      k_cache_.push_back(zeros({1, c.num_key_value_heads, max_context_, D}, t));
      v_cache_.push_back(zeros({1, c.num_key_value_heads, max_context_, D}, t));
    }
    // transformers keeps the rotary inv_freq as a buffer in the dtype the checkpoint is loaded in:
    // a bfloat16 / float16 checkpoint rotates with inv_freq rounded to it, whatever the compute
    // dtype (the goldens of tests/data match only so: float32 inv_freq moves their logits by up to
    // 1.1e-3 of the row's scale at position 39, rounded ones by < 1e-6).
    inv_freq_ = rope_inv_freq(D, c.rope_theta, kCPU);
    if (c.dtype == "bfloat16") inv_freq_ = inv_freq_.to(kBFloat16).to(kFloat32);
    else if (c.dtype == "float16") inv_freq_ = inv_freq_.to(kFloat16).to(kFloat32);
    inv_freq_ = inv_freq_.to(o.device);
    if (o.device.is_cuda()) {
      stream_ = Stream::create(o.device);
      synchronize(o.device);  // the weights were written on the loading stream
      make_persistent();
    }
    path_ = decode_paths().front();
  }

  const ModelConfig& config() const override { return c_; }
  int64_t max_context() const override { return max_context_; }
  Device forward_device() const override { return o_.device; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  uint64_t parameters() const override { return parameters_; }
  uint64_t decode_bytes() const override {
    const double chosen = c_.is_moe() ? static_cast<double>(c_.num_experts_per_tok) / static_cast<double>(c_.num_experts) : 1.0;
    const uint64_t embed = c_.tie_word_embeddings ? 0 : embed_.nbytes();  // tied: read whole as the head
    return weight_bytes_ - embed - expert_bytes_ + static_cast<uint64_t>(chosen * static_cast<double>(expert_bytes_));
  }
  std::vector<Tensor> router_logits() const override { return router_; }
  std::vector<std::string> decode_paths() const override {
    std::vector<std::string> paths;
    const bool graph = o_.device.is_cuda() && o_.cuda_graph && !o_.keep_router;
    if (persistent_ && (o_.persistent_decode || !graph)) paths.push_back("persistent");
    if (graph) paths.push_back("graph");
    if (persistent_ && !o_.persistent_decode && graph) paths.push_back("persistent");
    paths.push_back("eager");
    return paths;
  }
  std::string decode_path() const override { return path_; }
  PersistentDecoder* persistent_decoder() override { return persistent_.get(); }
  void set_decode_path(const std::string& path) override {
    const std::vector<std::string> paths = decode_paths();
    ANVIL_CHECK(std::find(paths.begin(), paths.end(), path) != paths.end(), Error, "[decode_path] this model has no '",
                path, "' path (it has ", join(paths), ")");
    path_ = path;
  }

  Tensor forward(const Tensor& ids_in, int64_t pos) override {
    ANVIL_CHECK(ids_in.dim() == 1 && ids_in.size(0) >= 1, ShapeError, "[forward] ids must be [T] with T >= 1, got ",
                shape_str(ids_in.sizes()));
    const int64_t T = ids_in.size(0);
    ANVIL_CHECK(pos >= 0 && pos + T <= max_context_, Error, "[forward] positions ", pos, "..", pos + T - 1,
                " exceed the context of ", max_context_, " tokens");
    const Device dev = o_.device;
    if (!dev.is_cuda()) return step(ids_in, full({1}, pos, TensorOptions(kInt32)), full({1}, pos + T, TensorOptions(kInt32)), T);
    // CUDA: the model's own stream, ordered after the caller's work (its ids) and before the
    // caller's next work (the logits).
    Event inputs(dev);
    inputs.record(current_stream(dev));
    inputs.wait(stream_);
    Tensor logits;
    {
      StreamGuard guard(stream_);
      if (T == 1 && path_ == "persistent") {
        logits = persistent_->step(ids_in.to(kCPU, kInt64).item<int64_t>(), pos);
      } else if (T == 1 && path_ == "graph") {
        logits = decode_graph(ids_in, pos);
      } else {
        const Tensor where = tensor<int32_t>({static_cast<int32_t>(pos), static_cast<int32_t>(pos + T)}).to(dev);
        logits = step(ids_in.to(dev), where.narrow(0, 0, 1), where.narrow(0, 1, 1), T);
      }
    }
    Event done(dev);
    done.record(stream_);
    done.wait(current_stream(dev));
    return logits;
  }

 private:
  // One decode step as a CUDA graph captured at the first call and replayed after: the token,
  // its cache row and the cache length live in one int32 device tensor written (one copy) before
  // each replay and read on the device; the logits live in the graph's memory (returned as a copy).
  Tensor decode_graph(const Tensor& ids_in, int64_t pos) {
    const Device dev = o_.device;
    if (!graph_) g_in_ = empty({3}, TensorOptions(kInt32).device(dev));
    const int32_t id = static_cast<int32_t>(ids_in.to(kCPU, kInt64).item<int64_t>());
    g_in_.copy_(tensor<int32_t>({id, static_cast<int32_t>(pos), static_cast<int32_t>(pos + 1)}));
    const Tensor ids = g_in_.narrow(0, 0, 1), start = g_in_.narrow(0, 1, 1), lens = g_in_.narrow(0, 2, 1);
    if (!graph_) {
      // An eager step first (lazy kernel setup must not happen under capture); it computes this
      // very step, which the replay below recomputes identically.
      (void)step(ids, start, lens, 1);
      stream_.synchronize();
      graph_ = std::make_unique<cuda::Graph>();
      graph_->capture_begin();
      g_logits_ = step(ids, start, lens, 1);
      graph_->capture_end();
    }
    graph_->replay();
    return g_logits_.clone();
  }

  // Logits [T, vocab] float32 of ids (int32 / int64 [T]) at positions start .. start + T - 1
  // (start int32 [1]), whose keys and values go to those cache rows; attention sees lens (int32
  // [1]) keys. All on the model's device.
  Tensor step(const Tensor& ids, const Tensor& start, const Tensor& lens, int64_t T) {
    const int64_t H = c_.hidden_size, D = c_.head_dim, nh = c_.num_attention_heads, nkv = c_.num_key_value_heads;
    router_.clear();
    const double eps = c_.rms_norm_eps;
    Tensor x = embedding(embed_, ids), branch;  // x [T, H]; branch: the residual not yet added
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      // The residual add and input norm in the q / k / v GEMV's blocks (one token on CUDA).
      Tensor qkv;
      if (branch.defined())
        std::tie(qkv, x) = add_rms_norm_linear(branch, x, L.in_norm, eps, L.qkv.w, L.qkv.scale, L.qkv.block);
      else qkv = project(rms_norm(x, {H}, L.in_norm, eps), L.qkv);
      // q / k norms, RoPE and the cache writes of k and v: one kernel (q [1, nh, T, D]).
      const Tensor q =
          qk_norm_rope_cache(qkv.unsqueeze(0), nh, nkv, L.q_norm, L.k_norm, eps, inv_freq_, k_cache_[l], v_cache_[l], start);
      const Tensor a = decode_attention(q, k_cache_[l], v_cache_[l], lens);  // [1, nh, T, D]
      const Tensor o = project(a.squeeze(0).permute({1, 0, 2}).reshape({T, nh * D}), L.o);
      if (L.router.defined()) {
        Tensor h2;
        std::tie(h2, x) = add_rms_norm(o, x, {H}, L.post_norm, eps);
        branch = moe(L, h2);
      } else {  // dense: the add and norm in the gate / up GEMV's blocks
        Tensor gu;
        std::tie(gu, x) = add_rms_norm_linear(o, x, L.post_norm, eps, L.gate_up.w, L.gate_up.scale, L.gate_up.block);
        const int64_t I = gu.size(1) / 2;
        branch = project(silu_mul(gu.narrow(1, 0, I), gu.narrow(1, I, I)), L.down);
      }
    }
    Tensor h;
    std::tie(h, x) = add_rms_norm(branch, x, {H}, norm_, eps);
    return project(h, head_).to(kFloat32);
  }

  // The persistent step (anvil/decoder.h) for dense and MoE models, 16-bit or float8 (the head
  // 16-bit; not when the router logits are kept), where its plan says Fused; the eager step and its graph stay for prefill, and for
  // everything else.
  void make_persistent() {
    if (head_.scale.defined() || (c_.is_moe() && o_.keep_router)) return;  // router logits come from the eager step
    DecoderWeights w;
    w.embed = embed_;
    w.final_norm = norm_;
    w.head = head_.w;
    w.inv_freq = inv_freq_;
    w.n_heads = c_.num_attention_heads;
    w.n_kv_heads = c_.num_key_value_heads;
    w.eps = c_.rms_norm_eps;
    w.top_k = c_.num_experts_per_tok;
    w.norm_topk_prob = c_.norm_topk_prob;
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      const bool moe = L.router.defined();
      const ProjWeight& gu = moe ? L.experts_gate_up : L.gate_up;
      const ProjWeight& dn = moe ? L.experts_down : L.down;
      w.layers.push_back({L.in_norm, L.qkv.w, L.q_norm, L.k_norm, L.o.w, L.post_norm, gu.w, dn.w, k_cache_[l],
                          v_cache_[l], L.router, {L.qkv.scale, L.qkv.block}, {L.o.scale, L.o.block},
                          {gu.scale, gu.block}, {dn.scale, dn.block}});
    }
    if (PersistentDecoder::plan(w) == FusedPlan::Fused) persistent_ = std::make_unique<PersistentDecoder>(w);
  }

  Tensor moe(const Layer& L, const Tensor& h) {
    const auto [logits, r] = moe_router(h, L.router, c_.num_experts_per_tok, c_.norm_topk_prob);  // one kernel
    if (o_.keep_router) router_.push_back(logits);
    const ProjWeight &gu = L.experts_gate_up, &dn = L.experts_down;
    return moe_experts(h, r, gu.w, dn.w, gu.scale, dn.scale, gu.block);
  }

  Tensor take(WeightSource& ck, const std::string& name, const Shape& shape) {
    Tensor t = fetch(ck, name, shape);
    weight_bytes_ += t.nbytes();
    return t;
  }

  // ck.get with the progress callback told.
  Tensor fetch(WeightSource& ck, const std::string& name, const Shape& shape) {
    Tensor t = ck.get(name, shape);
    parameters_ += static_cast<uint64_t>(t.numel());
    if (o_.progress) o_.progress(ck.loaded_bytes(), ck.total_bytes());
    return t;
  }

  // A projection as LoadOptions::fp8_weights says (WeightSource::projection), not yet counted.
  ProjWeight fetch_proj(WeightSource& ck, const std::string& name, const Shape& shape) {
    ProjWeight p = ck.projection(name, shape);
    parameters_ += static_cast<uint64_t>(p.w.numel());
    if (o_.progress) o_.progress(ck.loaded_bytes(), ck.total_bytes());
    return p;
  }

  ProjWeight counted(ProjWeight p) {
    weight_bytes_ += p.nbytes();
    return p;
  }

  ProjWeight proj(WeightSource& ck, const std::string& name, const Shape& shape) {
    return counted(fetch_proj(ck, name, shape));
  }

  // Projections of one input stacked along their rows: one GEMV computes them all.
  ProjWeight stacked(WeightSource& ck, const std::vector<std::pair<std::string, Shape>>& parts) {
    std::vector<ProjWeight> ws;
    for (const auto& [name, shape] : parts) ws.push_back(fetch_proj(ck, name, shape));
    return counted(stack_rows(ws));
  }

  void load_experts(WeightSource& ck, const std::string& p, Layer& L) {
    const int64_t E = c_.num_experts, H = c_.hidden_size, I = c_.moe_intermediate_size;
    L.router = take(ck, p + "gate.weight", {E, H});
    if (ck.has(p + "experts.gate_up_proj")) {
      L.experts_gate_up = fetch_proj(ck, p + "experts.gate_up_proj", {E, 2 * I, H});
      L.experts_down = fetch_proj(ck, p + "experts.down_proj", {E, H, I});
    } else {
      std::vector<ProjWeight> gate_up, down;
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + "experts." + std::to_string(e) + ".";
        gate_up.push_back(stack_rows({fetch_proj(ck, q + "gate_proj.weight", {I, H}),
                                      fetch_proj(ck, q + "up_proj.weight", {I, H})}));
        down.push_back(fetch_proj(ck, q + "down_proj.weight", {H, I}));
      }
      L.experts_gate_up = stack_experts(gate_up);
      L.experts_down = stack_experts(down);
    }
    same_blocks(L.experts_gate_up, L.experts_down);
    const uint64_t bytes = L.experts_gate_up.nbytes() + L.experts_down.nbytes();
    weight_bytes_ += bytes;
    expert_bytes_ += bytes;
  }

  ModelConfig c_;
  LoadOptions o_;
  Tensor embed_, norm_, inv_freq_;
  ProjWeight head_;
  std::vector<Layer> layers_;
  std::vector<Tensor> k_cache_, v_cache_, router_;
  Stream stream_;
  std::unique_ptr<cuda::Graph> graph_;
  std::unique_ptr<PersistentDecoder> persistent_;
  std::string path_;  // of one-token steps: decode_paths()
  Tensor g_in_, g_logits_;  // the graph's inputs (token, cache row, cache length) and logits
  int64_t max_context_ = 0;
  uint64_t weight_bytes_ = 0, expert_bytes_ = 0, parameters_ = 0;
};

}  // namespace

std::unique_ptr<Model> build_qwen3(const ModelConfig& config, WeightSource& weights, const LoadOptions& options) {
  return std::make_unique<Qwen3>(config, weights, options);
}

}  // namespace anvil::runtime
