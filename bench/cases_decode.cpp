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
