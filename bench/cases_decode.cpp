// Decode hot-path cases: the decode-linear suite (one token through the projections of real
// open models), softmax / log_softmax over vocabularies, rms_norm, SwiGLU and RoPE at the
// Qwen3-30B-A3B layer's shapes (decode and a 4096-token prefill).
#include <set>

#include "cases.h"

namespace anvil::bench {
namespace {

// (k, n) = (in_features, out_features) of one projection, from the model's config.json.
struct LinearShape {
  const char* model;
  const char* proj;
  int64_t k, n;
};

// Projections of real open models. Fused projections appear as the checkpoint stores them
// (Phi-3 qkv_proj / gate_up_proj); duplicate (k, n) pairs are timed once, under the first name.
const LinearShape kDecodeLinearShapes[] = {
    {"Qwen3-30B-A3B", "q_proj", 2048, 4096},
    {"Qwen3-30B-A3B", "k_proj", 2048, 512},
    {"Qwen3-30B-A3B", "o_proj", 4096, 2048},
    {"Qwen3-30B-A3B", "router", 2048, 128},
    {"Qwen3-30B-A3B", "expert gate_up", 2048, 1536},
    {"Qwen3-30B-A3B", "expert up", 2048, 768},
    {"Qwen3-30B-A3B", "expert down", 768, 2048},
    {"Qwen3-30B-A3B", "lm_head", 2048, 151936},
    {"Qwen3-0.6B", "q_proj", 1024, 2048},
    {"Qwen3-0.6B", "k_proj", 1024, 1024},
    {"Qwen3-0.6B", "o_proj", 2048, 1024},
    {"Qwen3-0.6B", "up_proj", 1024, 3072},
    {"Qwen3-0.6B", "down_proj", 3072, 1024},
    {"Qwen3-0.6B", "lm_head", 1024, 151936},
    {"Qwen3-4B", "q_proj", 2560, 4096},
    {"Qwen3-4B", "k_proj", 2560, 1024},
    {"Qwen3-4B", "o_proj", 4096, 2560},
    {"Qwen3-4B", "up_proj", 2560, 9728},
    {"Qwen3-4B", "down_proj", 9728, 2560},
    {"Qwen3-8B", "q_proj", 4096, 4096},
    {"Qwen3-8B", "k_proj", 4096, 1024},
    {"Qwen3-8B", "up_proj", 4096, 12288},
    {"Qwen3-8B", "down_proj", 12288, 4096},
    {"Qwen3-8B", "lm_head", 4096, 151936},
    {"Qwen3-235B-A22B", "q_proj", 4096, 8192},
    {"Qwen3-235B-A22B", "k_proj", 4096, 512},
    {"Qwen3-235B-A22B", "o_proj", 8192, 4096},
    {"Qwen3-235B-A22B", "expert up", 4096, 1536},
    {"Qwen3-235B-A22B", "expert down", 1536, 4096},
    {"Llama-3.1-8B", "up_proj", 4096, 14336},
    {"Llama-3.1-8B", "down_proj", 14336, 4096},
    {"Llama-3.1-8B", "lm_head", 4096, 128256},
    {"Llama-3.2-1B", "q_proj", 2048, 2048},
    {"Llama-3.2-1B", "up_proj", 2048, 8192},
    {"Llama-3.2-1B", "down_proj", 8192, 2048},
    {"Llama-3.2-1B", "lm_head", 2048, 128256},
    {"Llama-3.2-3B", "q_proj", 3072, 3072},
    {"Llama-3.2-3B", "k_proj", 3072, 1024},
    {"Llama-3.2-3B", "up_proj", 3072, 8192},
    {"Llama-3.2-3B", "down_proj", 8192, 3072},
    {"Llama-3.1-70B", "q_proj", 8192, 8192},
    {"Llama-3.1-70B", "k_proj", 8192, 1024},
    {"Llama-3.1-70B", "up_proj", 8192, 28672},
    {"Llama-3.1-70B", "down_proj", 28672, 8192},
    {"Llama-2-7B", "up_proj", 4096, 11008},
    {"Llama-2-7B", "down_proj", 11008, 4096},
    {"Llama-2-7B", "lm_head", 4096, 32000},
    {"Mistral-7B-v0.3", "lm_head", 4096, 32768},
    {"Mistral-Small-24B", "q_proj", 5120, 4096},
    {"Mistral-Small-24B", "k_proj", 5120, 1024},
    {"Mistral-Small-24B", "o_proj", 4096, 5120},
    {"Mistral-Small-24B", "up_proj", 5120, 32768},
    {"Mistral-Small-24B", "down_proj", 32768, 5120},
    {"Mixtral-8x7B", "router", 4096, 8},
    {"Qwen2.5-7B", "q_proj", 3584, 3584},
    {"Qwen2.5-7B", "k_proj", 3584, 512},
    {"Qwen2.5-7B", "up_proj", 3584, 18944},
    {"Qwen2.5-7B", "down_proj", 18944, 3584},
    {"Qwen2.5-7B", "lm_head", 3584, 152064},
    {"Gemma-2-2B", "q_proj", 2304, 2048},
    {"Gemma-2-2B", "k_proj", 2304, 1024},
    {"Gemma-2-2B", "o_proj", 2048, 2304},
    {"Gemma-2-2B", "up_proj", 2304, 9216},
    {"Gemma-2-2B", "down_proj", 9216, 2304},
    {"Gemma-2-2B", "lm_head", 2304, 256000},
    {"Gemma-3-4B", "q_proj", 2560, 2048},
    {"Gemma-3-4B", "up_proj", 2560, 10240},
    {"Gemma-3-4B", "down_proj", 10240, 2560},
    {"Phi-3-mini", "qkv_proj", 3072, 9216},
    {"Phi-3-mini", "gate_up_proj", 3072, 16384},
    {"Phi-3-mini", "lm_head", 3072, 32064},
    {"gpt-oss-20b", "q_proj", 2880, 4096},
    {"gpt-oss-20b", "k_proj", 2880, 512},
    {"gpt-oss-20b", "o_proj", 4096, 2880},
    {"gpt-oss-20b", "router", 2880, 32},
    {"gpt-oss-20b", "expert gate_up", 2880, 5760},
    {"gpt-oss-20b", "expert down", 2880, 2880},
    {"OLMoE-1B-7B", "router", 2048, 64},
    {"OLMoE-1B-7B", "expert up", 2048, 1024},
    {"OLMoE-1B-7B", "expert down", 1024, 2048},
    {"OLMoE-1B-7B", "lm_head", 2048, 50304},
    {"DeepSeek-V2-Lite", "q_proj", 2048, 3072},
    {"DeepSeek-V2-Lite", "kv_a_proj", 2048, 576},
    {"DeepSeek-V2-Lite", "kv_b_proj", 512, 4096},
    {"DeepSeek-V2-Lite", "expert up", 2048, 1408},
    {"DeepSeek-V2-Lite", "expert down", 1408, 2048},
    {"DeepSeek-V2-Lite", "lm_head", 2048, 102400},
};

double numel(const Shape& s) {
  double n = 1;
  for (int64_t v : s) n *= static_cast<double>(v);
  return n;
}

std::string dims(const Shape& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

const char* short_name(DType t) { return t == kBFloat16 ? "bf16" : t == kFloat16 ? "f16" : t == kFloat32 ? "f32" : "f64"; }

// y = linear(x[m, k], w[n, k] (+ bias)): weight copies rotate, x stays.
Case linear_case(Device dev, const std::string& label, int64_t m, int64_t k, int64_t n, DType t, bool bias,
                 const std::string& group) {
  const double es = static_cast<double>(element_size(t));
  const double bytes = es * (static_cast<double>(n) * k + m * k + m * n + (bias ? n : 0));
  std::string name = "linear " + std::string(short_name(t)) + " m" + std::to_string(m) + " " + std::to_string(k) + "->" +
                     std::to_string(n) + (bias ? " +bias" : "") + (label.empty() ? "" : " " + label);
  nlohmann::json spec{{"op", "linear"}, {"m", m}, {"k", k}, {"n", n}, {"dtype", dtype_name(t)}, {"bias", bias}};
  return {name, bytes, ceiling_for(dev), [=]() -> Runner {
            const int rot = rotations_for(dev, es * static_cast<double>(n) * k);
            const TensorOptions o = TensorOptions(t).device(dev);
            std::vector<Tensor> w;
            for (int i = 0; i < rot; ++i) w.push_back(mul(randn({n, k}, o), 0.05));
            Tensor x = randn({m, k}, o), b = bias ? randn({n}, o) : Tensor();
            return [=](int i) { (void)linear(x, w[i % rot], b); };
          },
          group, spec};
}

// scaled_mm e4m3 x e4m3 -> bf16 with b = W^T of a row-major W [n, k] (the GEMV's and cuBLASLt's
// layout), tensor-wise, row-wise or block-wise (1x128 rows of a, 128 x 128 blocks of W: the
// DeepSeek recipe) scales from quantize_fp8; weight copies rotate. The spec's flops let the
// torch script print TFLOP/s for the compute-bound shapes.
Case scaled_mm_case(Device dev, int64_t m, int64_t k, int64_t n, ScalingType r) {
  const bool blocks = r == ScalingType::BlockWise1x128;
  const double scale_bytes = blocks ? 4.0 * (m + (n + 127) / 128) * ((k + 127) / 128) : 0.0;
  const double bytes = static_cast<double>(n) * k + static_cast<double>(m) * k + 2.0 * m * n + scale_bytes;
  const std::string recipe = blocks ? "1x128 x 128x128" : r == ScalingType::RowWise ? "row-wise" : "tensor-wise";
  std::string name = "scaled_mm e4m3 " + recipe + " m" + std::to_string(m) + " " + std::to_string(k) + "->" +
                     std::to_string(n);
  nlohmann::json spec{{"op", "scaled_mm"}, {"m", m}, {"k", k}, {"n", n}, {"dtype", "float8_e4m3fn"},
                      {"recipe", blocks ? "blockwise_1x128_128x128" : r == ScalingType::RowWise ? "rowwise" : "tensorwise"},
                      {"out_dtype", "bfloat16"}, {"flops", 2.0 * m * n * k}};
  return {name, bytes, ceiling_for(dev), [=]() -> Runner {
            const int rot = rotations_for(dev, static_cast<double>(n) * k);
            const TensorOptions o = TensorOptions(kFloat32).device(dev);
            const ScalingType rb = blocks ? ScalingType::BlockWise128x128 : r;
            std::vector<Tensor> b, sb;
            for (int i = 0; i < rot; ++i) {
              auto [wq, ws] = quantize_fp8(randn({n, k}, o), rb);
              b.push_back(wq.t());
              sb.push_back(blocks ? ws.t() : r == ScalingType::RowWise ? ws.reshape({1, n}) : ws);
            }
            const auto [aq, as] = quantize_fp8(randn({m, k}, o), r);
            const Tensor a = aq, sa = as;
            return [=](int i) { (void)scaled_mm(a, b[i % rot], sa, r, sb[i % rot], rb); };
          },
          "", spec};
}

// Weight-only FP8 linear: bf16 x [1, k], e4m3 W [n, k] with one scale per weight row, or with
// 128 x 128 block scales (`blocks`: the Hub's FP8 checkpoints; the row-scaled case of the same
// shape is its anchor).
Case scaled_linear_case(Device dev, const std::string& label, int64_t k, int64_t n, bool blocks = false) {
  const double scale_bytes = blocks ? 4.0 * ((n + 127) / 128) * ((k + 127) / 128) : 4.0 * n;
  const double bytes = static_cast<double>(n) * k + 2.0 * k + 2.0 * n + scale_bytes;
  std::string name = std::string("scaled_linear bf16 x e4m3") + (blocks ? " 128x128-blocks" : "") + " m1 " +
                     std::to_string(k) + "->" + std::to_string(n) + " " + label;
  nlohmann::json spec{{"op", "scaled_linear"}, {"m", 1}, {"k", k}, {"n", n}, {"dtype", "bfloat16"},
                      {"w_dtype", "float8_e4m3fn"}, {"block", blocks ? nlohmann::json{128, 128} : nlohmann::json()}};
  return {name, bytes, ceiling_for(dev), [=]() -> Runner {
            const int rot = rotations_for(dev, static_cast<double>(n) * k);
            const TensorOptions o = TensorOptions(kFloat32).device(dev);
            std::vector<Tensor> w, s;
            for (int i = 0; i < rot; ++i) {
              auto [wq, ws] = quantize_fp8(randn({n, k}, o), blocks ? ScalingType::BlockWise128x128 : ScalingType::RowWise);
              w.push_back(wq);
              s.push_back(ws);
            }
            Tensor x = randn({1, k}, TensorOptions(kBFloat16).device(dev));
            const Shape block = blocks ? Shape{128, 128} : Shape{};
            return [=](int i) { (void)scaled_linear(x, w[i % rot], s[i % rot], {}, block); };
          },
          "", spec};
}

// MoE experts through grouped_mm: `tokens` x top-8 of 128 experts, b = W^T of row-major expert
// weights W [128, n, k] (transformers' layout). Decode (one token): each call routes to 8 other
// experts (offs rotate, so the active weights come from DRAM); bytes are the active experts'
// weights. Prefill: uniform routing, every expert's weights plus activations and output.
// fp8: e4m3 weights with per-column scales, bf16 activations (scaled_grouped_mm weight-only).
Case grouped_case(Device dev, const std::string& label, int64_t tokens, int64_t k, int64_t n, bool fp8) {
  constexpr int64_t kExperts = 128, kTopK = 8;
  const int64_t rows = tokens * kTopK;
  const double wes = fp8 ? 1.0 : 2.0, expert_bytes = wes * static_cast<double>(n) * k;
  const bool decode = tokens == 1;
  const double bytes = decode ? kTopK * expert_bytes : kExperts * expert_bytes + 2.0 * rows * (k + n);
  std::string name = std::string("grouped_mm ") + (fp8 ? "bf16 x e4m3 " : "bf16 ") + std::to_string(tokens) + "x top8/128 " +
                     std::to_string(k) + "->" + std::to_string(n) + " " + label;
  nlohmann::json spec{{"op", fp8 ? "scaled_grouped_mm" : "grouped_mm"}, {"tokens", tokens}, {"top_k", kTopK},
                      {"experts", kExperts}, {"k", k}, {"n", n}, {"dtype", "bfloat16"},
                      {"w_dtype", fp8 ? "float8_e4m3fn" : "bfloat16"}};
  if (!decode) spec["flops"] = 2.0 * rows * n * k;
  return {name, bytes, ceiling_for(dev), [=]() -> Runner {
            const Device d = dev;
            // Decode: call i takes experts 16 j + i % rot, j < 8 (distinct for rot <= 16).
            const int rot = decode ? std::min(16, rotations_for(d, kTopK * expert_bytes)) : 1;
            std::vector<Tensor> offs;
            for (int i = 0; i < rot; ++i) {
              std::vector<int32_t> o(kExperts);
              int32_t count = 0;
              for (int64_t g = 0; g < kExperts; ++g) {
                if (decode) count += g % 16 == i ? 1 : 0;
                else count += static_cast<int32_t>(tokens * kTopK / kExperts);
                o[static_cast<size_t>(g)] = count;
              }
              offs.push_back(from_blob(o.data(), {kExperts}, kInt32).clone().to(d));
            }
            Tensor w = mul(randn({kExperts, n, k}, TensorOptions(kBFloat16).device(d)), 0.05);
            Tensor a = randn({rows, k}, TensorOptions(kBFloat16).device(d));
            if (!fp8) {
              Tensor b = w.transpose(1, 2);
              return [=](int i) { (void)grouped_mm(a, b, offs[i % rot]); };
            }
            Tensor b = w.to(kFloat8_e4m3fn).transpose(1, 2);
            Tensor sb = add(rand({kExperts, n}, TensorOptions(kFloat32).device(d)), 0.5);
            return [=](int i) { (void)scaled_grouped_mm(a, b, Tensor(), sb, offs[i % rot], kBFloat16); };
          },
          "", spec};
}

// Decode attention of one token, 32 query heads over `n_kv_heads` cached heads of `ctx` keys:
// decode_attention with device-side cache lengths, or scaled_dot_product_attention with
// enable_gqa over the same keys. Bytes are the K / V read (plus q and out); caches rotate.
Case attention_decode_case(Device dev, int64_t n_kv_heads, int64_t ctx, int64_t head_dim, bool sdpa) {
  constexpr int64_t kHeads = 32;
  const double kv_bytes = 2.0 * 2.0 * n_kv_heads * ctx * head_dim, bytes = kv_bytes + 4.0 * kHeads * head_dim;
  std::string name = "attention decode bf16 " + std::to_string(kHeads) + "q/" + std::to_string(n_kv_heads) + "kv hd" +
                     std::to_string(head_dim) + " ctx " + std::to_string(ctx) + (sdpa ? " sdpa gqa" : " cache_lens");
  nlohmann::json spec{{"op", "attention"}, {"batch", 1},      {"n_heads", kHeads}, {"n_kv_heads", n_kv_heads},
                      {"q_len", 1},         {"kv_len", ctx},  {"head_dim", head_dim}, {"causal", false},
                      {"dtype", "bfloat16"}};
  return {name, bytes, ceiling_for(dev), [=]() -> Runner {
            const int rot = rotations_for(dev, kv_bytes);
            const TensorOptions o = TensorOptions(kBFloat16).device(dev);
            std::vector<Tensor> k, v;
            for (int i = 0; i < rot; ++i) {
              k.push_back(randn({1, n_kv_heads, ctx, head_dim}, o));
              v.push_back(randn({1, n_kv_heads, ctx, head_dim}, o));
            }
            Tensor q = randn({1, kHeads, 1, head_dim}, o);
            Tensor lens = full({1}, ctx, TensorOptions(kInt32).device(dev));
            if (sdpa)
              return [=](int i) {
                (void)scaled_dot_product_attention(q, k[i % rot], v[i % rot], {}, 0.0, false, std::nullopt, true);
              };
            return [=](int i) { (void)decode_attention(q, k[i % rot], v[i % rot], lens); };
          },
          "", spec};
}

// Prefill attention, `heads` heads of seq x seq (bf16): compute-bound, the spec's flops (4 L S E
// per head, half with is_causal) give TFLOP/s in the torch script.
Case attention_prefill_case(Device dev, int64_t heads, int64_t seq, int64_t head_dim, bool causal) {
  const double elems = static_cast<double>(heads) * seq * head_dim, bytes = 4.0 * 2.0 * elems;
  std::string name = "attention prefill bf16 " + std::to_string(heads) + "h " + std::to_string(seq) + "x" +
                     std::to_string(seq) + " hd" + std::to_string(head_dim) + (causal ? " causal" : "");
  nlohmann::json spec{{"op", "attention"}, {"batch", 1},     {"n_heads", heads},     {"n_kv_heads", heads},
                      {"q_len", seq},       {"kv_len", seq}, {"head_dim", head_dim}, {"causal", causal},
                      {"dtype", "bfloat16"}, {"flops", 4.0 * elems * seq * (causal ? 0.5 : 1.0)}};
  return {name, bytes, ceiling_for(dev), [=]() -> Runner {
            const TensorOptions o = TensorOptions(kBFloat16).device(dev);
            Tensor q = randn({1, heads, seq, head_dim}, o), k = randn({1, heads, seq, head_dim}, o),
                   v = randn({1, heads, seq, head_dim}, o);
            return [=](int) { (void)scaled_dot_product_attention(q, k, v, {}, 0.0, causal); };
          },
          "", spec};
}

// A unary-shaped op over `shape`: rotated inputs, `bytes` read + written per call.
Case shaped_case(Device dev, const std::string& op, const Shape& shape, DType t, double bytes,
                 std::function<Runner(std::vector<Tensor>, int)> make) {
  nlohmann::json spec{{"op", op}, {"shape", shape}, {"dtype", dtype_name(t)}};
  return {op + " " + short_name(t) + " " + dims(shape), bytes, ceiling_for(dev), [=]() -> Runner {
            const int rot = rotations_for(dev, bytes);
            std::vector<Tensor> in;
            for (int i = 0; i < rot; ++i) in.push_back(mul(randn(shape, TensorOptions(t).device(dev)), 3.0));
            return make(in, rot);
          },
          "", spec};
}

}  // namespace

std::vector<Case> decode_cases(Device dev) {
  std::vector<Case> cases;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const LinearShape& s : kDecodeLinearShapes) {
    if (!seen.insert({s.k, s.n}).second) continue;
    cases.push_back(linear_case(dev, std::string(s.model) + " " + s.proj, 1, s.k, s.n, kBFloat16, false, "decode-linear"));
  }
  // Other dtypes, a fused bias (Qwen2.5 q_proj has one), and a few rows of batched decode.
  cases.push_back(linear_case(dev, "Qwen3-30B-A3B q_proj", 1, 2048, 4096, kFloat16, false, ""));
  cases.push_back(linear_case(dev, "Qwen3-30B-A3B q_proj", 1, 2048, 4096, kFloat32, false, ""));
  cases.push_back(linear_case(dev, "Qwen2.5-7B q_proj", 1, 3584, 3584, kBFloat16, true, ""));
  for (int64_t m : {2, 4, 8}) cases.push_back(linear_case(dev, "Qwen3-30B-A3B q_proj", m, 2048, 4096, kBFloat16, false, ""));

  // FP8: decode GEMVs (the weight's bytes against copy bandwidth) and the 8192^3 cuBLASLt GEMM
  // (compute-bound: compare the time, or the TFLOP/s the torch script prints, with PyTorch).
  for (ScalingType r : {ScalingType::TensorWise, ScalingType::RowWise, ScalingType::BlockWise1x128}) {
    for (int64_t m : {1, 8}) cases.push_back(scaled_mm_case(dev, m, 4096, 4096, r));
    if (dev.is_cuda()) cases.push_back(scaled_mm_case(dev, 8192, 8192, 8192, r));
  }
  cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B q_proj", 2048, 4096));
  cases.push_back(scaled_linear_case(dev, "Llama-3.1-8B up_proj", 4096, 14336));
  cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B lm_head", 2048, 151936));
  // The runtime's fp8 decode projections (q / k / v stacked, o; Qwen3-0.6B's dense MLP).
  cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B qkv", 2048, 5120));
  cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B o_proj", 4096, 2048));
  cases.push_back(scaled_linear_case(dev, "Qwen3-0.6B qkv", 1024, 4096));
  cases.push_back(scaled_linear_case(dev, "Qwen3-0.6B o_proj", 2048, 1024));
  // The same projections with 128 x 128 block scales (Qwen/Qwen3-*-FP8 checkpoints).
  for (bool blocks : {true}) {
    cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B q_proj", 2048, 4096, blocks));
    cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B lm_head", 2048, 151936, blocks));
    cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B qkv", 2048, 5120, blocks));
    cases.push_back(scaled_linear_case(dev, "Qwen3-30B-A3B o_proj", 4096, 2048, blocks));
    cases.push_back(scaled_linear_case(dev, "Qwen3-0.6B qkv", 1024, 4096, blocks));
    cases.push_back(scaled_linear_case(dev, "Qwen3-0.6B o_proj", 2048, 1024, blocks));
  }
  cases.push_back(scaled_linear_case(dev, "Qwen3-0.6B gate_up", 1024, 6144));
  cases.push_back(scaled_linear_case(dev, "Qwen3-0.6B down", 3072, 1024));

  // MoE experts at the Qwen3-30B-A3B shape: decode gate_up / up and down, bf16 and fp8 weights;
  // a 512-token prefill.
  for (bool fp8 : {false, true}) {
    cases.push_back(grouped_case(dev, "Qwen3-30B-A3B up", 1, 2048, 768, fp8));
    cases.push_back(grouped_case(dev, "Qwen3-30B-A3B gate_up", 1, 2048, 1536, fp8));
    cases.push_back(grouped_case(dev, "Qwen3-30B-A3B down", 1, 768, 2048, fp8));
  }
  if (dev.is_cuda()) cases.push_back(grouped_case(dev, "Qwen3-30B-A3B gate_up prefill", 512, 2048, 1536, false));

  // Attention: decode over a KV cache (32q / 8kv GQA, head dims 80 and 128), prefill 4K x 4K
  // head dim 40 and 8K causal head dim 128 (CUDA only: minutes on a CPU).
  for (int64_t ctx : {4096, 32768}) {
    for (bool sdpa : {false, true}) cases.push_back(attention_decode_case(dev, 8, ctx, 80, sdpa));
  }
  for (int64_t ctx : {4096, 16384}) cases.push_back(attention_decode_case(dev, 8, ctx, 128, false));
  if (dev.is_cuda()) {
    cases.push_back(attention_prefill_case(dev, 32, 4096, 40, false));
    cases.push_back(attention_prefill_case(dev, 32, 8192, 128, true));
  }

  for (const char* op : {"softmax", "log_softmax"}) {
    for (const Shape& shape : {Shape{1, 151936}, Shape{1, 128256}, Shape{32, 128}, Shape{64, 151936}}) {
      const double bytes = 8.0 * numel(shape);
      const bool log = std::string(op) == "log_softmax";
      cases.push_back(shaped_case(dev, op, shape, kFloat32, bytes, [log](std::vector<Tensor> in, int rot) -> Runner {
        return [=](int i) { (void)(log ? log_softmax(in[i % rot], -1) : softmax(in[i % rot], -1)); };
      }));
    }
  }
  // Qwen3-30B-A3B: hidden 2048, 32 q heads x 128, one decode token and a 4096-token prefill.
  for (const Shape& shape : {Shape{1, 2048}, Shape{4096, 2048}, Shape{32, 128}}) {
    const int64_t cols = shape.back();
    const double bytes = 4.0 * numel(shape) + 2.0 * cols;
    cases.push_back(shaped_case(dev, "rms_norm", shape, kBFloat16, bytes, [=](std::vector<Tensor> in, int rot) -> Runner {
      Tensor w = randn({cols}, TensorOptions(kBFloat16).device(in[0].device()));
      return [=](int i) { (void)rms_norm(in[i % rot], {cols}, w, 1e-6); };
    }));
  }
  for (const Shape& shape : {Shape{1, 2048}, Shape{4096, 2048}}) {
    const int64_t cols = shape.back();
    const double bytes = 8.0 * numel(shape) + 2.0 * cols;
    cases.push_back(shaped_case(dev, "add_rms_norm", shape, kBFloat16, bytes, [=](std::vector<Tensor> in, int rot) -> Runner {
      Tensor w = randn({cols}, TensorOptions(kBFloat16).device(in[0].device()));
      return [=](int i) { (void)add_rms_norm(in[i % rot], in[(i + 1) % rot], {cols}, w, 1e-6); };
    }));
  }
  // SwiGLU on the two halves of a fused gate_up output: 8 experts x 768 for one token, and a
  // Llama-3.1-8B prefill of 4096 tokens.
  for (const Shape& shape : {Shape{8, 1536}, Shape{4096, 28672}}) {
    const double bytes = 3.0 * numel(shape);  // read 2 halves, write 1 half, bf16
    cases.push_back(shaped_case(dev, "silu_mul", shape, kBFloat16, bytes, [=](std::vector<Tensor> in, int rot) -> Runner {
      const int64_t half = shape.back() / 2;
      return [=](int i) { (void)silu_mul(in[i % rot].narrow(-1, 0, half), in[i % rot].narrow(-1, half, half)); };
    }));
  }
  // q of Qwen3-30B-A3B as [batch, seq, heads, head_dim]: one decode token and a prefill.
  for (const Shape& shape : {Shape{1, 1, 32, 128}, Shape{1, 4096, 32, 128}}) {
    const double bytes = 4.0 * numel(shape);
    cases.push_back(shaped_case(dev, "rope", shape, kBFloat16, bytes, [=](std::vector<Tensor> in, int rot) -> Runner {
      const Device d = in[0].device();
      Tensor pos = add(arange(shape[1], TensorOptions(kInt64).device(d)), 1000).view({1, shape[1], 1});
      Tensor inv_freq = rope_inv_freq(128, 1e6, d);
      return [=](int i) { (void)rope(in[i % rot], pos, inv_freq); };
    }));
  }
  // Routing top-8 of 128 experts (one token, and a 4096-token prefill); sampling one token
  // from the Qwen3 vocabulary (greedy, and top-k 50 / top-p 0.9 at temperature 0.7).
  for (const Shape& shape : {Shape{1, 128}, Shape{4096, 128}}) {
    cases.push_back(shaped_case(dev, "topk8", shape, kFloat32, 4.0 * numel(shape), [](std::vector<Tensor> in, int rot) -> Runner {
      return [=](int i) { (void)topk(in[i % rot], 8, -1); };
    }));
  }
  for (double temperature : {0.0, 0.7}) {
    const Shape shape{1, 151936};
    const std::string op = temperature == 0 ? "sample_greedy" : "sample_topk50_topp0.9";
    cases.push_back(shaped_case(dev, op, shape, kFloat32, 4.0 * numel(shape), [=](std::vector<Tensor> in, int rot) -> Runner {
      Tensor state = sampler_state(1234, in[0].device());
      const SamplingOptions opts{temperature, temperature == 0 ? 0 : 50, temperature == 0 ? 1.0 : 0.9};
      return [=](int i) { (void)sample(in[i % rot], opts, state); };
    }));
  }
  return cases;
}

}  // namespace anvil::bench
