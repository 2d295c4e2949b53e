// Whole models against Hugging Face transformers: the tiny Qwen3-MoE and Qwen3 checkpoints of
// tests/data/ (golden.json: float32 logits of every position, computed by transformers in
// float32 from the stored bf16 weights), run as one prefill over the sequence and token by token
// through the KV cache, in float32 and bfloat16, plus greedy generation and the config / weight
// errors a user meets first.
#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "harness.h"
#include "runtime/config.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

namespace {

using namespace anvil;
using anvil::runtime::load_model;
using anvil::runtime::LoadOptions;

// Options by field (a positional aggregate leaves `progress` and later fields to -Wextra's
// missing-initializer warning).
LoadOptions opts(Device device, DType dtype, int64_t max_context, bool keep_router = false) {
  LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  o.max_context = max_context;
  o.keep_router = keep_router;
  return o;
}

struct Golden {
  std::vector<int64_t> ids;
  int64_t prompt_len = 0;
  std::vector<std::vector<double>> logits;
  std::vector<double> margin;
};

std::string model_dir(const std::string& name) { return th::source_dir() + "/tests/data/" + name; }

const Golden& golden(const std::string& name) {
  static std::map<std::string, Golden> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  std::ifstream in(model_dir(name) + "/golden.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.ids = j["input_ids"].get<std::vector<int64_t>>();
  g.prompt_len = j["prompt_len"].get<int64_t>();
  g.logits = j["logits"].get<std::vector<std::vector<double>>>();
  g.margin = j["top2_margin"].get<std::vector<double>>();
  return cache.emplace(name, std::move(g)).first->second;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t begin, size_t end) {
  Tensor t = empty({static_cast<int64_t>(end - begin)}, TensorOptions(kInt64));
  for (size_t i = begin; i < end; ++i) t.data_ptr<int64_t>()[i - begin] = ids[i];
  return t;
}

// Logits [T, vocab] as rows of doubles (CPU copy).
std::vector<std::vector<double>> rows(const Tensor& logits) {
  const Tensor c = logits.to(kCPU).contiguous();
  const int64_t T = c.size(0), V = c.size(1);
  std::vector<std::vector<double>> r(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(V)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) r[static_cast<size_t>(t)][static_cast<size_t>(v)] = c.data_ptr<float>()[t * V + v];
  return r;
}

size_t argmax(const std::vector<double>& v) { return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

// float32: |got - want| <= 1e-3 max|want| per row, same argmax where the margin > 1e-3;
// bfloat16: cosine >= 0.999 per row, same argmax where the margin > 0.05; float8 weights
// (fp8 = true): cosine >= 0.99, same argmax where the margin > 0.25.
::testing::AssertionResult matches(const std::vector<std::vector<double>>& got, const Golden& g, DType t,
                                   bool fp8 = false) {
  if (got.size() != g.logits.size()) return ::testing::AssertionFailure() << got.size() << " rows, want " << g.logits.size();
  for (size_t r = 0; r < got.size(); ++r) {
    const std::vector<double>& w = g.logits[r];
    if (got[r].size() != w.size()) return ::testing::AssertionFailure() << "row " << r << " has " << got[r].size() << " logits";
    double scale = 0, err = 0, dot = 0, ng = 0, nw = 0;
    for (size_t v = 0; v < w.size(); ++v) {
      scale = std::max(scale, std::abs(w[v]));
      err = std::max(err, std::abs(got[r][v] - w[v]));
      dot += got[r][v] * w[v];
      ng += got[r][v] * got[r][v];
      nw += w[v] * w[v];
    }
    const bool f32 = t == kFloat32;
    if (f32 && !(err <= 1e-3 * scale))
      return ::testing::AssertionFailure() << "row " << r << ": max error " << err << " > 1e-3 x " << scale;
    const double cosine = dot / std::sqrt(ng * nw);
    if (!f32 && !(cosine >= (fp8 ? 0.99 : 0.999))) return ::testing::AssertionFailure() << "row " << r << ": cosine " << cosine;
    if (g.margin[r] > (f32 ? 1e-3 : fp8 ? 0.25 : 0.05) && argmax(got[r]) != argmax(w))
      return ::testing::AssertionFailure() << "row " << r << ": argmax " << argmax(got[r]) << ", want " << argmax(w)
                                           << " (margin " << g.margin[r] << ")";
  }
  return ::testing::AssertionSuccess();
}

class Models : public th::DeviceTest {};

// The first token whose routing in some MoE layer is a near tie: the top_k-th and next
// probabilities (float32 run) closer than 1e-4, which bfloat16 activations do not resolve, so a
// bfloat16 run may pick the other expert there, and every later token attends to it. T when
// there is none (dense models). The threshold sits between the gaps of qwen3-moe-tiny's bfloat16
// run: 3.4e-5 flipped (row 24: cosine 0.79), 3.7e-4 did not (row 12: 0.99997).
size_t first_near_tie(const std::vector<Tensor>& router_logits, int64_t top_k, size_t T, float gap = 1e-4f) {
  size_t first = T;
  for (const Tensor& logits : router_logits) {
    const Tensor p = softmax(logits.to(kCPU, kFloat32), -1).contiguous();
    const int64_t E = p.size(1);
    for (int64_t t = 0; t < p.size(0); ++t) {
      std::vector<float> row(p.data_ptr<float>() + t * E, p.data_ptr<float>() + (t + 1) * E);
      std::sort(row.begin(), row.end(), std::greater<float>());
      if (row[static_cast<size_t>(top_k) - 1] - row[static_cast<size_t>(top_k)] < gap) first = std::min(first, static_cast<size_t>(t));
    }
  }
  return first;
}

TEST_P(Models, MatchTransformersLogits) {
  for (const std::string name : {"qwen3-moe-tiny", "qwen3-dense-tiny"}) {
    const Golden& g = golden(name);
    // bfloat16 rows are compared up to the first near-tied routing decision (qwen3-moe-tiny:
    // layer 0, token 24, probabilities 3.4e-5 apart); float32 rows all.
    size_t tie = g.ids.size();
    for (DType t : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(name + " " + dtype_name(t));
      auto m = load_model(model_dir(name), opts(dev(), t, 64, t == kFloat32));
      auto prefill = rows(m->forward(ids_tensor(g.ids, 0, g.ids.size()), 0));
      if (t == kFloat32) tie = first_near_tie(m->router_logits(), m->config().num_experts_per_tok, g.ids.size());
      Golden head = g;  // the rows compared
      const size_t n = t == kFloat32 ? g.ids.size() : tie;
      ASSERT_GE(n, g.ids.size() / 2) << "too few rows before a near tie to test";
      head.logits.resize(n);
      head.margin.resize(n);
      prefill.resize(n);
      EXPECT_TRUE(matches(prefill, head, t)) << "prefill";
      std::vector<std::vector<double>> step;
      for (size_t i = 0; i < n; ++i) step.push_back(rows(m->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i)))[0]);
      EXPECT_TRUE(matches(step, head, t)) << "decode";
      // A prefill of 5 tokens, then one decode step over the cache it wrote.
      (void)m->forward(ids_tensor(g.ids, 0, 5), 0);
      Golden row5;
      row5.logits = {g.logits[5]};
      row5.margin = {g.margin[5]};
      EXPECT_TRUE(matches(rows(m->forward(ids_tensor(g.ids, 5, 6), 5)), row5, t)) << "prefill then decode";
    }
  }
}

// Float8 projection and expert weights (row scales), bfloat16 activations: prefill and decode
// against the goldens up to the first routing decision within float8's noise (top_k-th and next
// probabilities closer than 2e-3: qwen3-moe-tiny's token 5, 1.4e-3 apart in layer 1, flips).
TEST_P(Models, Fp8Weights) {
  for (const std::string name : {"qwen3-moe-tiny", "qwen3-dense-tiny"}) {
    SCOPED_TRACE(name);
    const Golden& g = golden(name);
    LoadOptions f32 = opts(dev(), kFloat32, 64, true);
    auto ref = load_model(model_dir(name), f32);
    (void)ref->forward(ids_tensor(g.ids, 0, g.ids.size()), 0);
    const size_t n = first_near_tie(ref->router_logits(), ref->config().num_experts_per_tok, g.ids.size(), 2e-3f);
    ASSERT_GE(n, 5u);
    LoadOptions o = opts(dev(), kBFloat16, 64);
    o.fp8_weights = anvil::runtime::Fp8Weights::Quantize;
    auto m = load_model(model_dir(name), o);
    EXPECT_LT(m->weight_bytes(), ref->weight_bytes() / 2);  // 1 byte per projection weight, 2 per embedding, against 4
    EXPECT_EQ(m->parameters(), ref->parameters());
    Golden head = g;
    head.logits.resize(n);
    head.margin.resize(n);
    auto prefill = rows(m->forward(ids_tensor(g.ids, 0, g.ids.size()), 0));
    prefill.resize(n);
    EXPECT_TRUE(matches(prefill, head, kBFloat16, true)) << "prefill";
    std::vector<std::vector<double>> step;
    for (size_t i = 0; i < n; ++i) step.push_back(rows(m->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i)))[0]);
    EXPECT_TRUE(matches(step, head, kBFloat16, true)) << "decode";
  }
}

// The Hub's block-scaled FP8 layout (tests/data/*-fp8, made by scripts/make_fp8_checkpoints.py:
// e4m3 weights with weight_scale_inv per 32 x 32 / 48 x 64 block, partial blocks; reference/ holds
// the same model with the dequantised weights in float32). Native float8 (the default) and
// dequantised-at-load bfloat16 against the reference in float32: cosine >= 0.999 per row, the same
// argmax where the margin allows, in prefill and decode, up to the first near-tied routing;
// dequantised float32 against it at float32's tolerance.
TEST_P(Models, BlockFp8Checkpoints) {
  using anvil::runtime::Fp8Weights;
  for (const std::string name : {"qwen3-moe-tiny-fp8", "qwen3-dense-tiny-fp8"}) {
    SCOPED_TRACE(name);
    const Golden& g0 = golden(name.substr(0, name.size() - 4));  // the prompt and ids
    auto ref = load_model(model_dir(name) + "/reference", opts(dev(), kFloat32, 64, true));
    Golden g = g0;
    g.logits = rows(ref->forward(ids_tensor(g.ids, 0, g.ids.size()), 0));
    for (size_t r = 0; r < g.logits.size(); ++r) {
      std::vector<double> sorted = g.logits[r];
      std::sort(sorted.begin(), sorted.end(), std::greater<double>());
      g.margin[r] = sorted[0] - sorted[1];
    }
    const size_t n = first_near_tie(ref->router_logits(), ref->config().num_experts_per_tok, g.ids.size());
    ASSERT_GE(n, g.ids.size() / 2);
    g.logits.resize(n);
    g.margin.resize(n);
    auto ref_bf16 = load_model(model_dir(name) + "/reference", opts(dev(), kBFloat16, 64));
    for (const Fp8Weights mode : {Fp8Weights::Checkpoint, Fp8Weights::Quantize, Fp8Weights::Dequantize}) {
      for (DType t : {kBFloat16, kFloat32}) {
        if (t == kFloat32 && mode != Fp8Weights::Dequantize) continue;
        SCOPED_TRACE(std::string(dtype_name(t)) + " mode " + std::to_string(static_cast<int>(mode)));
        LoadOptions o = opts(dev(), t, 64);
        o.fp8_weights = mode;
        auto m = load_model(model_dir(name), o);
        EXPECT_EQ(m->parameters(), ref->parameters());
        if (mode != Fp8Weights::Dequantize) EXPECT_LT(m->weight_bytes(), ref_bf16->weight_bytes() * 3 / 4);
        else EXPECT_EQ(m->weight_bytes(), t == kFloat32 ? ref->weight_bytes() : ref_bf16->weight_bytes());
        auto prefill = rows(m->forward(ids_tensor(g.ids, 0, g.ids.size()), 0));
        prefill.resize(n);
        EXPECT_TRUE(matches(prefill, g, t)) << "prefill";
        std::vector<std::vector<double>> step;
        for (size_t i = 0; i < n; ++i) step.push_back(rows(m->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i)))[0]);
        EXPECT_TRUE(matches(step, g, t)) << "decode";
      }
    }
  }
}

// Greedy generation from the prompt reproduces the reference's continuation (float32); sampling
// with one seed gives the same tokens every time; stop ids and the context end it.
TEST_P(Models, Generate) {
  using anvil::runtime::generate;
  using anvil::runtime::GenerateOptions;
  using anvil::runtime::GenerateStats;
  for (const std::string name : {"qwen3-moe-tiny", "qwen3-dense-tiny"}) {
    SCOPED_TRACE(name);
    const Golden& g = golden(name);
    auto m = load_model(model_dir(name), opts(dev(), kFloat32, 64));
    const std::vector<int64_t> prompt(g.ids.begin(), g.ids.begin() + g.prompt_len);
    const std::vector<int64_t> want(g.ids.begin() + g.prompt_len, g.ids.end());
    GenerateOptions o;
    o.max_new_tokens = static_cast<int64_t>(want.size());
    GenerateStats st;
    std::vector<int64_t> seen;
    EXPECT_EQ(generate(*m, prompt, o, [&](int64_t id) { seen.push_back(id); return true; }, &st), want);
    EXPECT_EQ(seen, want);
    EXPECT_EQ(st.prompt_tokens, g.prompt_len);
    EXPECT_EQ(st.new_tokens, static_cast<int64_t>(want.size()));
    o.sampling = SamplingOptions{0.8, 50, 0.9};
    o.seed = 1234;
    const std::vector<int64_t> a = generate(*m, prompt, o), b = generate(*m, prompt, o);
    EXPECT_EQ(a, b);
    o.seed = 1235;
    EXPECT_NE(generate(*m, prompt, o), a);  // 28 tokens from another seed
    o.sampling = SamplingOptions{0.0, 0, 1.0};
    o.stop_ids = {want[3]};  // generation ends at its first occurrence
    const auto stop_at = std::find(want.begin(), want.end(), want[3]) + 1;
    EXPECT_EQ(generate(*m, prompt, o, {}, &st), std::vector<int64_t>(want.begin(), stop_at));
    EXPECT_TRUE(st.stopped);
    EXPECT_EQ(generate(*m, prompt, o, [](int64_t) { return false; }).size(), 1u);  // the callback ends it
  }
  auto small = load_model(model_dir("qwen3-dense-tiny"), opts(dev(), kFloat32, 16));
  GenerateOptions o;
  o.max_new_tokens = 100;
  GenerateStats st;
  EXPECT_EQ(generate(*small, std::vector<int64_t>(10, 7), o, {}, &st).size(), 7u);  // positions 10..15, then one more sample
  EXPECT_TRUE(st.context_full);
  EXPECT_THROWS_OP(Error, "generate", generate(*small, std::vector<int64_t>(16, 7), o));
  EXPECT_THROWS_OP(IndexError, "generate", generate(*small, {1, 512}, o));
}

TEST_P(Models, ContextLimitAndBadIds) {
  auto m = load_model(model_dir("qwen3-dense-tiny"), opts(dev(), kFloat32, 8));
  EXPECT_EQ(m->max_context(), 8);
  EXPECT_THROWS_OP(Error, "forward", m->forward(ids_tensor({1, 2, 3}, 0, 3), 6));
  EXPECT_THROWS_OP(ShapeError, "forward", m->forward(empty({0}, TensorOptions(kInt64)), 0));
  EXPECT_THROWS_OP(DTypeError, "load", load_model(model_dir("qwen3-dense-tiny"), opts(dev(), kInt32, 8)));
}

ANVIL_INSTANTIATE_DEVICE_TESTS(Models);

// CUDA: one-token steps replayed from a captured graph give the eager steps' logits bit for bit,
// at every position (the graph reads the token, positions and cache lengths on the device).
TEST(ModelsCuda, DecodeGraphMatchesEager) {
  ANVIL_REQUIRE_CUDA();
  for (const std::string name : {"qwen3-moe-tiny", "qwen3-dense-tiny"}) {
    SCOPED_TRACE(name);
    const Golden& g = golden(name);
    LoadOptions o = opts(Device(kCUDA, 0), kBFloat16, 64);
    o.cuda_graph = false;
    auto eager = load_model(model_dir(name), o);
    eager->set_decode_path("eager");  // without the graph the persistent kernel would come first
    o.cuda_graph = true;
    auto graphed = load_model(model_dir(name), o);
    ASSERT_EQ(graphed->decode_path(), "graph");
    (void)eager->forward(ids_tensor(g.ids, 0, 4), 0);
    (void)graphed->forward(ids_tensor(g.ids, 0, 4), 0);
    for (size_t i = 4; i < g.ids.size(); ++i) {
      const Tensor a = eager->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i));
      const Tensor b = graphed->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i));
      ASSERT_EQ(th::to_bits(a), th::to_bits(b)) << "position " << i;
    }
  }
}

// CUDA: the one-token steps of the dense and the MoE model run as the persistent kernel when
// asked (LoadOptions::persistent_decode); its logits match the eager step's to float32 rounding of
// the sums (cosine >= 0.9999, the same greedy token) at every position, and each path can be chosen.
TEST(ModelsCuda, PersistentDecodeMatchesEager) {
  ANVIL_REQUIRE_CUDA();
  for (const char* name : {"qwen3-dense-tiny", "qwen3-moe-tiny"}) {
    SCOPED_TRACE(name);
    const Golden& g = golden(name);
    LoadOptions o = opts(Device(kCUDA, 0), kBFloat16, 64);
    o.persistent_decode = true;
    auto fast = load_model(model_dir(name), o);
    ASSERT_EQ(fast->decode_paths(), (std::vector<std::string>{"persistent", "graph", "eager"}));
    EXPECT_EQ(fast->decode_path(), "persistent");
    o.persistent_decode = false;  // the graph first, the persistent step still there
    auto eager = load_model(model_dir(name), o);
    EXPECT_EQ(eager->decode_paths(), (std::vector<std::string>{"graph", "persistent", "eager"}));
    EXPECT_EQ(eager->decode_path(), "graph");
    eager->set_decode_path("eager");
    EXPECT_THROWS_OP(Error, "decode_path", eager->set_decode_path("warp"));
    (void)fast->forward(ids_tensor(g.ids, 0, 4), 0);
    (void)eager->forward(ids_tensor(g.ids, 0, 4), 0);
    for (size_t i = 4; i < g.ids.size(); ++i) {
      const Tensor a = fast->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i)).to(kCPU, kFloat64);
      const Tensor b = eager->forward(ids_tensor(g.ids, i, i + 1), static_cast<int64_t>(i)).to(kCPU, kFloat64);
      const double* pa = a.data_ptr<double>();
      const double* pb = b.data_ptr<double>();
      double ab = 0, aa = 0, bb = 0;
      int64_t ia = 0, ib = 0;
      for (int64_t j = 0; j < a.numel(); ++j) {
        ab += pa[j] * pb[j];
        aa += pa[j] * pa[j];
        bb += pb[j] * pb[j];
        if (pa[j] > pa[ia]) ia = j;
        if (pb[j] > pb[ib]) ib = j;
      }
      EXPECT_GE(ab / std::sqrt(aa * bb), 0.9999) << "position " << i;
      if (g.margin[i] > 0.05) {
        EXPECT_EQ(ia, ib) << "position " << i;
      }
    }
  }
  // Kept router logits come from the eager step: no persistent path then.
  LoadOptions k = opts(Device(kCUDA, 0), kBFloat16, 64);
  k.keep_router = true;
  EXPECT_EQ(load_model(model_dir("qwen3-moe-tiny"), k)->decode_paths(), (std::vector<std::string>{"eager"}));
}

// config.json: both field spellings, clear errors for what is missing or unsupported.
TEST(ModelConfig, FieldNamesAndErrors) {
  using anvil::runtime::parse_config;
  const std::string hub = R"({"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
    "num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
    "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,"norm_topk_prob":true,"decoder_sparse_step":2,
    "mlp_only_layers":[3],"intermediate_size":128,"eos_token_id":5})";
  const auto c = parse_config(hub, R"({"eos_token_id":[7,8]})", "c.json");
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.head_dim, 16);  // hidden / heads when absent
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 8}));  // generation_config wins
  EXPECT_FALSE(c.sparse_layer(0));  // step 2: layers 1, 3 sparse; 3 is mlp_only
  EXPECT_TRUE(c.sparse_layer(1));
  EXPECT_FALSE(c.sparse_layer(3));
  const auto v5 = parse_config(R"({"model_type":"qwen3_moe","hidden_size":64,
    "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512,"max_position_embeddings":64,"rms_norm_eps":1e-6,
    "rope_parameters":{"rope_theta":5e5,"rope_type":"default"},"num_local_experts":4,"num_experts_per_tok":1,
    "moe_intermediate_size":8})", "", "v5.json");
  EXPECT_EQ(v5.num_experts, 4);
  EXPECT_EQ(v5.num_key_value_heads, 4);
  EXPECT_EQ(v5.rope_theta, 5e5);
  auto fails = [&](const std::string& text, const std::string& what) {
    try {
      (void)parse_config(text, "", "c.json");
    } catch (const FormatError& e) {
      const std::string m = e.what();
      return m.rfind("[config] c.json: ", 0) == 0 && m.find(what) != std::string::npos
                 ? ::testing::AssertionSuccess()
                 : ::testing::AssertionFailure() << m;
    }
    return ::testing::AssertionFailure() << "accepted; expected " << what;
  };
  EXPECT_TRUE(fails(R"({"model_type":"llama"})", "model_type \"llama\" is not supported"));
  EXPECT_TRUE(fails(R"({"model_type":"qwen3"})", "missing field \"hidden_size\""));
  std::string no_experts = hub;
  no_experts.replace(no_experts.find("\"num_experts\":8,"), 16, "");
  EXPECT_TRUE(fails(no_experts, "missing field \"num_experts\" or \"num_local_experts\""));
  std::string scaled = hub;
  scaled.replace(scaled.find("\"rope_theta\":1000000.0"), 22, R"("rope_parameters":{"rope_theta":1e6,"rope_type":"yarn"})");
  EXPECT_TRUE(fails(scaled, "rope_type \"yarn\" is not supported"));
  std::string heads = hub;
  heads.replace(heads.find("\"num_key_value_heads\":2"), 23, "\"num_key_value_heads\":3");
  EXPECT_TRUE(fails(heads, "is not a multiple of num_key_value_heads 3"));
  EXPECT_TRUE(fails("[1]", "not a JSON object"));
}

// A checkpoint whose tensors do not fit its config names the tensor and both shapes.
TEST(ModelConfig, WrongWeightShapes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("anvil_models_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(model_dir("qwen3-dense-tiny"), dir, fs::copy_options::recursive);
  std::string cfg;
  {
    std::ifstream in(dir / "config.json");
    cfg.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  cfg.replace(cfg.find("\"intermediate_size\": 128"), 24, "\"intermediate_size\": 96");
  std::ofstream(dir / "config.json") << cfg;
  try {
    (void)load_model(dir.string(), opts(kCPU, kFloat32, 8));
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.gate_proj.weight has shape [128, 64], the config gives [96, 64]"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// Strict FP8 loading: every unsupported quantization scheme or field, a float8 tensor without
// its scale or with a scale of the wrong grid, and checkpoint tensors the model does not read
// are FormatErrors that name them (the last one can be waived with allow_unread).
TEST(ModelConfig, StrictFp8Loading) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("anvil_fp8_" + std::to_string(::getpid()));
  const std::string src = model_dir("qwen3-dense-tiny-fp8");
  std::ifstream in(src + "/config.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  // A copy of the checkpoint with config edited by `edit` and, when `drop` is set, that tensor
  // hidden behind an index that lists every other one.
  auto load_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& drop = "",
                        bool allow_unread = false) -> std::string {
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(src + "/model.safetensors", dir / "model.safetensors");
    nlohmann::json c = base;
    edit(c);
    std::ofstream(dir / "config.json") << c.dump(2);
    if (!drop.empty()) {
      nlohmann::json map = nlohmann::json::object();
      auto ck = runtime::Checkpoint(src);
      for (const std::string& t : ck.names())
        if (t != drop) map[t] = "model.safetensors";
      std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
    }
    LoadOptions o = opts(kCPU, kBFloat16, 8);
    o.allow_unread = allow_unread;
    try {
      (void)load_model(dir.string(), o);
    } catch (const FormatError& e) {
      return e.what();
    }
    return "loaded";
  };
  auto q = [](nlohmann::json& c) -> nlohmann::json& { return c["quantization_config"]; };
  auto has = [](const std::string& msg, const std::string& what) {
    return msg.find(what) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << msg;
  };
  EXPECT_EQ(load_error([](nlohmann::json&) {}), "loaded");
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["quant_method"] = "awq"; }), "quant_method \"awq\" is not supported"));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["quant_method"] = "gptq"; }), "quant_method \"gptq\""));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["quant_method"] = "compressed-tensors"; }),
                  "quant_method \"compressed-tensors\""));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["activation_scheme"] = "static"; }),
                  "activation_scheme \"static\" is not supported"));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["fmt"] = "e5m2"; }), "fmt \"e5m2\" is not supported"));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["bits"] = 8; }), "field \"bits\""));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c).erase("weight_block_size"); }), "without weight_block_size"));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { c.erase("quantization_config"); }),
                  "model.layers.0.self_attn.q_proj.weight is float8_e4m3fn but config.json has no fp8 quantization_config"));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["weight_block_size"] = {64, 32}; }),
                  "q_proj.weight_scale_inv has shape [2, 2]; weight [64, 64] in 64 x 32 blocks needs [1, 2]"));
  EXPECT_TRUE(has(load_error([&](nlohmann::json& c) { q(c)["modules_to_not_convert"].push_back("model.layers.1.self_attn.o_proj"); }),
                  "model.layers.1.self_attn.o_proj.weight is float8 but its module is listed in modules_to_not_convert"));
  EXPECT_TRUE(has(load_error([](nlohmann::json&) {}, "model.layers.1.self_attn.q_proj.weight_scale_inv"),
                  "float8 tensor model.layers.1.self_attn.q_proj.weight has no scale model.layers.1.self_attn.q_proj.weight_scale_inv"));
  const std::string unread = load_error([](nlohmann::json& c) { c["num_hidden_layers"] = 1; });
  EXPECT_TRUE(has(unread, "18 checkpoint tensor(s) are not read by the qwen3 model (model.layers.1."));
  EXPECT_TRUE(has(unread, "--allow-unread-tensors"));
  EXPECT_EQ(load_error([](nlohmann::json& c) { c["num_hidden_layers"] = 1; }, "", true), "loaded");
  fs::remove_all(dir);
}

}  // namespace
