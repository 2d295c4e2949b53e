// anvil.llm: the LLM runtime from Python. load() / random() give a Model; Model.generate() is an
// iterator over the new text (or ids) as they are sampled, Model.logits() the float32 logits of a
// sequence; anvil.llm.Tokenizer is the runtime's byte-level BPE.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "runtime/config.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

namespace anvil::python {
namespace {

using runtime::Tokenizer;

// A loaded model and its tokenizer. Every forward (logits, a generation's step) holds `mu` with
// the GIL released; `epoch` counts the calls that write the KV cache (generate, any logits), so that
// a generation started before one of them refuses to go on with the wrong cache.
struct LanguageModel {
  std::unique_ptr<runtime::Model> model;
  std::optional<Tokenizer> tokenizer;
  DType dtype = kBFloat16;
  std::mutex mu;
  uint64_t epoch = 0;
};

// The tokenizer.json shipped in the package (the Qwen3 vocabulary of the random-weight presets).
std::string packaged_tokenizer() {
  nb::object file = nb::module_::import_("anvil").attr("__file__");
  nb::object os_path = nb::module_::import_("os.path");
  nb::object dir = os_path.attr("dirname")(file);
  return nb::cast<std::string>(os_path.attr("join")(dir, "data", "qwen3-tokenizer.json"));
}

runtime::Fp8Weights fp8_mode(const std::string& s) {
  if (s == "checkpoint") return runtime::Fp8Weights::Checkpoint;
  if (s == "quantize") return runtime::Fp8Weights::Quantize;
  if (s == "dequantize") return runtime::Fp8Weights::Dequantize;
  throw ValueError("[anvil.llm.load] fp8 must be 'checkpoint', 'quantize' or 'dequantize', got '" + s + "'");
}

runtime::LoadOptions load_options(const char* op, nb::handle device, std::optional<DType> dtype, int64_t max_context,
                                  bool cuda_graph, std::optional<bool> progress) {
  runtime::LoadOptions o;
  o.device = device_arg(device);
  o.dtype = dtype.value_or(kBFloat16);
  ANVIL_CHECK(o.dtype == kFloat32 || o.dtype == kBFloat16 || o.dtype == kFloat16, DTypeError, op,
              " dtype must be anvil.float32, bfloat16 or float16, got ", dtype_name(o.dtype));
  ANVIL_CHECK(max_context >= 0, ValueError, op, " max_context must be >= 0 (0: min(max_position_embeddings, 4096)), got ",
              max_context);
  o.max_context = max_context;
  o.cuda_graph = cuda_graph;
  if (show_progress(progress)) o.progress = runtime::stderr_load_progress();
  return o;
}

std::unique_ptr<LanguageModel> finish(std::unique_ptr<runtime::Model> model, std::optional<Tokenizer> tok, DType dtype) {
  auto lm = std::make_unique<LanguageModel>();
  lm->model = std::move(model);
  lm->tokenizer = std::move(tok);
  lm->dtype = dtype;
  if (lm->tokenizer)
    ANVIL_CHECK(lm->tokenizer->size() <= lm->model->config().vocab_size, ValueError, "[anvil.llm] the tokenizer's ",
                lm->tokenizer->size(), " ids do not fit the model's vocabulary of ", lm->model->config().vocab_size,
                " (a tokenizer of another model?)");
  return lm;
}

std::unique_ptr<LanguageModel> load(const std::string& path, nb::handle device, std::optional<DType> dtype,
                                    int64_t max_context, const std::string& fp8, bool allow_unread, bool cuda_graph,
                                    std::optional<std::string> tokenizer, std::optional<bool> progress) {
  require_folder(path, "[anvil.llm.load]");
  runtime::LoadOptions o = load_options("[anvil.llm.load]", device, dtype, max_context, cuda_graph, progress);
  o.fp8_weights = fp8_mode(fp8);
  o.allow_unread = allow_unread;
  // The tokenizer first: a missing or bad one fails before minutes of loading.
  std::optional<Tokenizer> tok;
  const std::string own = path + "/tokenizer.json";
  nb::object exists = nb::module_::import_("os.path").attr("isfile");
  if (tokenizer) tok = Tokenizer::from_file(*tokenizer);
  else if (nb::cast<bool>(exists(own))) tok = Tokenizer::from_file(own);
  std::unique_ptr<runtime::Model> model;
  {
    nb::gil_scoped_release release;
    model = runtime::load_model(path, o);
  }
  return finish(std::move(model), std::move(tok), o.dtype);
}

std::unique_ptr<LanguageModel> random_model(const std::string& preset, nb::handle device, std::optional<DType> dtype,
                                            uint64_t seed, bool block_fp8, int64_t max_context, bool cuda_graph,
                                            std::optional<std::string> tokenizer, std::optional<bool> progress) {
  const runtime::ModelConfig c = runtime::preset_config(preset);
  runtime::LoadOptions o = load_options("[anvil.llm.random]", device, dtype, max_context, cuda_graph, progress);
  std::optional<Tokenizer> tok = Tokenizer::from_file(tokenizer ? *tokenizer : packaged_tokenizer());
  std::unique_ptr<runtime::Model> model;
  {
    nb::gil_scoped_release release;
    const auto w = runtime::random_weights(o, seed, block_fp8);
    model = runtime::build_model(c, *w, o);
  }
  return finish(std::move(model), std::move(tok), o.dtype);
}

nb::dict config_dict(const runtime::ModelConfig& c) {
  nb::dict d;
  d["model_type"] = c.model_type;
  d["hidden_size"] = c.hidden_size;
  d["num_hidden_layers"] = c.num_hidden_layers;
  d["num_attention_heads"] = c.num_attention_heads;
  d["num_key_value_heads"] = c.num_key_value_heads;
  d["head_dim"] = c.head_dim;
  d["intermediate_size"] = c.intermediate_size;
  d["vocab_size"] = c.vocab_size;
  d["max_position_embeddings"] = c.max_position_embeddings;
  d["rms_norm_eps"] = c.rms_norm_eps;
  d["rope_theta"] = c.rope_theta;
  d["tie_word_embeddings"] = c.tie_word_embeddings;
  d["num_experts"] = c.num_experts;
  d["num_experts_per_tok"] = c.num_experts_per_tok;
  d["moe_intermediate_size"] = c.moe_intermediate_size;
  d["eos_token_id"] = c.eos_token_ids;
  return d;
}

// Token ids from a list / tuple of ints or a 1-d integer tensor (a [1, T] one too: batch 1).
std::vector<int64_t> ids_of(nb::handle h, const char* op) {
  std::vector<int64_t> ids;
  if (nb::isinstance<Tensor>(h)) {
    Tensor t = nb::cast<Tensor>(h);
    ANVIL_CHECK(is_integral(t.dtype()), DTypeError, op, " token ids must be an integer tensor, got ",
                dtype_name(t.dtype()));
    ANVIL_CHECK(t.dim() == 1 || (t.dim() == 2 && t.size(0) == 1), ShapeError, op,
                " token ids must be [T] or [1, T] (one sequence), got ", shape_str(t.sizes()));
    t = t.reshape({-1}).to(kCPU, kInt64).contiguous();
    ids.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    return ids;
  }
  if (!nb::isinstance<nb::sequence>(h) || nb::isinstance<nb::str>(h))
    throw nb::type_error((std::string(op) + " token ids must be a list of ints or an integer tensor, got " +
                          py_type_name(h)).c_str());
  for (nb::handle v : nb::iter(h)) {
    if (!is_int(v))
      throw nb::type_error((std::string(op) + " token ids must be ints, got " + py_type_name(v)).c_str());
    ids.push_back(nb::cast<int64_t>(v));
  }
  return ids;
}

const Tokenizer& need_tokenizer(const LanguageModel& lm, const char* op) {
  ANVIL_CHECK(lm.tokenizer.has_value(), ValueError, op,
              " this model has no tokenizer (its folder holds no tokenizer.json): pass token ids, or load it with "
              "tokenizer=PATH");
  return *lm.tokenizer;
}

Tensor logits(LanguageModel& lm, nb::handle input, int64_t start_pos) {
  constexpr const char* op = "[anvil.llm.Model.logits]";
  const bool batched = nb::isinstance<Tensor>(input) && nb::cast<Tensor>(input).dim() == 2;
  std::vector<int64_t> ids;
  if (nb::isinstance<nb::str>(input)) {
    const std::vector<int32_t> e = need_tokenizer(lm, op).encode(nb::cast<std::string>(input));
    ids.assign(e.begin(), e.end());
  } else {
    ids = ids_of(input, op);
  }
  const runtime::ModelConfig& c = lm.model->config();
  const int64_t T = static_cast<int64_t>(ids.size());
  ANVIL_CHECK(T > 0, ValueError, op, " no tokens to run");
  ANVIL_CHECK(start_pos >= 0 && start_pos + T <= lm.model->max_context(), ValueError, op, " positions [", start_pos,
              ", ", start_pos + T, ") are outside the model's context of ", lm.model->max_context(),
              " tokens (load with a larger max_context)");
  for (int64_t id : ids)
    ANVIL_CHECK(id >= 0 && id < c.vocab_size, IndexError, op, " token ", id, " is outside the model's vocabulary of ",
                c.vocab_size);
  Tensor t = empty({T}, TensorOptions(kInt64));
  std::copy(ids.begin(), ids.end(), t.data_ptr<int64_t>());
  Tensor out;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(lm.mu);
    ++lm.epoch;  // any positions it writes may be a running generation's
    // A copy: a decode step's logits can live in the step's own (CUDA graph) buffer.
    out = lm.model->forward(t, start_pos).clone();
  }
  return batched ? out.unsqueeze(0) : out;
}

// One generate() call as a Python iterator: text pieces for a text prompt, ids for ids.
struct PyGeneration {
  LanguageModel* lm;
  uint64_t epoch;
  std::unique_ptr<runtime::Generation> gen;
  runtime::SamplingChoice sampling;
  std::optional<Tokenizer::Stream> text;  // set for a text prompt
  std::string all_text;
  bool finished = false;
};

PyGeneration* generate(LanguageModel& lm, nb::handle prompt, int64_t max_new_tokens, std::optional<double> temperature,
                       std::optional<int64_t> top_k, std::optional<double> top_p, uint64_t seed, bool chat,
                       const std::string& system, bool thinking, nb::handle stop) {
  constexpr const char* op = "[anvil.llm.Model.generate]";
  ANVIL_CHECK(max_new_tokens >= 0, ValueError, op, " max_new_tokens must be >= 0, got ", max_new_tokens);
  if (temperature)
    ANVIL_CHECK(std::isfinite(*temperature) && *temperature >= 0, ValueError, op,
                " temperature must be finite and >= 0 (0: greedy), got ", *temperature);
  if (top_k) ANVIL_CHECK(*top_k >= 0, ValueError, op, " top_k must be >= 0 (0: no top-k cut), got ", *top_k);
  if (top_p) ANVIL_CHECK(*top_p > 0 && *top_p <= 1, ValueError, op, " top_p must be in (0, 1], got ", *top_p);
  const runtime::ModelConfig& c = lm.model->config();
  auto g = std::make_unique<PyGeneration>();
  g->lm = &lm;
  runtime::GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  g->sampling = runtime::choose_sampling(c.generation, {temperature, top_p, top_k});
  o.sampling = g->sampling.options;
  o.seed = seed;
  o.stop_ids = c.eos_token_ids;
  std::vector<int64_t> ids;
  const bool is_text = nb::isinstance<nb::str>(prompt);
  ANVIL_CHECK(is_text || (!chat && system.empty()), ValueError, op,
              " chat / system format a text prompt: give the prompt as a string");
  if (is_text) {
    const Tokenizer& tok = need_tokenizer(lm, op);
    const std::string user = nb::cast<std::string>(prompt);
    const bool as_chat = chat || !system.empty();
    const std::vector<int32_t> e = tok.encode(as_chat ? runtime::chat_prompt(user, {system, thinking}) : user);
    ids.assign(e.begin(), e.end());
    if (as_chat) {
      const int32_t im_end = tok.token_id("<|im_end|>");
      if (im_end >= 0) o.stop_ids.push_back(im_end);
    }
    g->text.emplace(tok, true);
  } else {
    ids = ids_of(prompt, op);
  }
  if (!stop.is_none()) {
    if (!nb::isinstance<nb::sequence>(stop) || nb::isinstance<nb::str>(stop))
      throw nb::type_error("[anvil.llm.Model.generate] stop must be a list of token ids or token strings");
    for (nb::handle s : nb::iter(stop)) {
      if (is_int(s)) {
        o.stop_ids.push_back(nb::cast<int64_t>(s));
      } else if (nb::isinstance<nb::str>(s)) {
        const std::string name = nb::cast<std::string>(s);
        const int32_t id = need_tokenizer(lm, op).token_id(name);
        ANVIL_CHECK(id >= 0, ValueError, op, " stop token '", name, "' is not a token of the tokenizer");
        o.stop_ids.push_back(id);
      } else {
        throw nb::type_error((std::string(op) + " stop entries must be ints or strings, got " + py_type_name(s)).c_str());
      }
    }
  }
  g->gen = std::make_unique<runtime::Generation>(*lm.model, std::move(ids), o);
  {
    std::lock_guard<std::mutex> lock(lm.mu);
    g->epoch = ++lm.epoch;
  }
  return g.release();
}

nb::object next_piece(PyGeneration& g) {
  while (!g.finished) {
    LanguageModel& lm = *g.lm;
    std::optional<int64_t> id;
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(lm.mu);
      ANVIL_CHECK(lm.epoch == g.epoch, Error, "[anvil.llm.Generation] a later generate() or logits() on the same model ",
                  "has rewritten its KV cache: this generation cannot go on (finish one before starting the next)");
      id = g.gen->next();
    }
    if (!id) {
      g.finished = true;
      if (g.text) {
        const std::string rest = g.text->flush();
        g.all_text += rest;
        if (!rest.empty()) return nb::str(rest.data(), rest.size());
      }
      break;
    }
    if (!g.text) return nb::int_(*id);
    const std::string piece = g.text->push(static_cast<int32_t>(*id));
    if (piece.empty()) continue;  // a character still split across tokens
    g.all_text += piece;
    return nb::str(piece.data(), piece.size());
  }
  throw nb::stop_iteration();
}

nb::dict stats_dict(const runtime::GenerateStats& s) {
  nb::dict d;
  d["prompt_tokens"] = s.prompt_tokens;
  d["new_tokens"] = s.new_tokens;
  d["prompt_seconds"] = s.prompt_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["prompt_tokens_per_second"] = s.prompt_seconds > 0 ? s.prompt_tokens / s.prompt_seconds : 0.0;
  d["decode_tokens_per_second"] = s.decode_seconds > 0 ? (s.new_tokens - 1) / s.decode_seconds : 0.0;
  d["stopped"] = s.stopped;
  d["context_full"] = s.context_full;
  return d;
}

void bind_tokenizer(nb::module_& l) {
  nb::class_<Tokenizer>(l, "Tokenizer", "A Hugging Face tokenizer.json's byte-level BPE (Qwen, Llama 3, GPT-2 style)")
      .def("__init__", [](Tokenizer* t, const std::string& path) { new (t) Tokenizer(Tokenizer::from_file(path)); },
           nb::arg("path"))
      .def("encode", [](const Tokenizer& t, const std::string& text) {
        const std::vector<int32_t> ids = t.encode(text);
        return std::vector<int64_t>(ids.begin(), ids.end());
      }, nb::arg("text"), "Ids as transformers' encode(text, add_special_tokens=False).")
      .def("decode", [](const Tokenizer& t, nb::handle ids, bool skip) {
        const std::vector<int64_t> v = ids_of(ids, "[anvil.llm.Tokenizer.decode]");
        std::vector<int32_t> ids32;
        for (int64_t id : v) {
          ANVIL_CHECK(id >= 0 && id < t.size(), IndexError, "[anvil.llm.Tokenizer.decode] id ", id,
                      " is outside the vocabulary of ", t.size());
          ids32.push_back(static_cast<int32_t>(id));
        }
        return t.decode(ids32, skip);
      }, nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def("token_to_id", [](const Tokenizer& t, const std::string& token) -> std::optional<int64_t> {
        const int32_t id = t.token_id(token);
        return id < 0 ? std::nullopt : std::optional<int64_t>(id);
      }, nb::arg("token"))
      .def("is_special", [](const Tokenizer& t, int64_t id) {
        ANVIL_CHECK(id >= 0 && id < t.size(), IndexError, "[anvil.llm.Tokenizer.is_special] id ", id,
                    " is outside the vocabulary of ", t.size());
        return t.is_special(static_cast<int32_t>(id));
      }, nb::arg("id"))
      .def_prop_ro("vocab_size", &Tokenizer::size)
      .def("__len__", &Tokenizer::size);
}

}  // namespace

void bind_llm(nb::module_& m) {
  nb::module_ l = m.def_submodule("llm", "anvil.llm: Qwen3 / Qwen3-MoE checkpoints, generation and logits");
  bind_tokenizer(l);

  nb::class_<PyGeneration>(l, "Generation",
                           "The iterator generate() returns: each next() runs one step and gives the new text "
                           "(a text prompt) or id (an id prompt).")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", &next_piece)
      .def_prop_ro("tokens", [](const PyGeneration& g) { return g.gen->tokens(); }, "The new ids so far.")
      .def_prop_ro("text", [](const PyGeneration& g) { return g.all_text; }, "The new text so far (a text prompt).")
      .def_prop_ro("done", [](const PyGeneration& g) { return g.finished || g.gen->done(); })
      .def_prop_ro("stats", [](const PyGeneration& g) { return stats_dict(g.gen->stats()); },
                   "prompt / new token counts, seconds and tokens per second, and what ended it.")
      .def_prop_ro("sampling", [](const PyGeneration& g) {
        nb::dict d;
        d["greedy"] = g.sampling.greedy();
        d["temperature"] = g.sampling.options.temperature;
        d["top_k"] = g.sampling.options.top_k;
        d["top_p"] = g.sampling.options.top_p;
        return d;
      }, "The sampling in force: the given values over generation_config.json's, as transformers.");

  nb::class_<LanguageModel>(l, "Model", "A loaded LLM: weights on its device, a KV cache of max_context tokens")
      .def_prop_ro("config", [](const LanguageModel& lm) { return config_dict(lm.model->config()); })
      .def_prop_ro("tokenizer", [](LanguageModel& lm) -> Tokenizer* { return lm.tokenizer ? &*lm.tokenizer : nullptr; },
                   nb::rv_policy::reference_internal)
      .def_prop_ro("device", [](const LanguageModel& lm) { return lm.model->forward_device(); })
      .def_prop_ro("dtype", [](const LanguageModel& lm) { return lm.dtype; })
      .def_prop_ro("max_context", [](const LanguageModel& lm) { return lm.model->max_context(); })
      .def_prop_ro("num_parameters", [](const LanguageModel& lm) { return lm.model->parameters(); })
      .def_prop_ro("weight_bytes", [](const LanguageModel& lm) { return lm.model->weight_bytes(); })
      .def_prop_ro("decode_bytes", [](const LanguageModel& lm) { return lm.model->decode_bytes(); },
                   "Weight bytes one decode token reads.")
      .def_prop_ro("decode_paths", [](const LanguageModel& lm) { return lm.model->decode_paths(); },
                   "How this model can run one-token steps, the default first: 'persistent' (one CUDA launch "
                   "per token), 'graph' (the step's kernels replayed from a CUDA graph), 'eager'.")
      .def_prop_rw(
          "decode_path", [](const LanguageModel& lm) { return lm.model->decode_path(); },
          [](LanguageModel& lm, const std::string& path) { lm.model->set_decode_path(path); },
          "The decode path of later steps (one of decode_paths); they share the weights and the KV cache.")
      .def("logits", &logits, nb::arg("ids"), nb::arg("start_pos") = 0,
           "Float32 logits [T, vocab] of ids (a list, a [T] or [1, T] integer tensor, or text) at positions "
           "[start_pos, start_pos + T); start_pos > 0 continues the sequence run before.")
      .def("generate", &generate, nb::arg("prompt"), nb::arg("max_new_tokens") = 128, nb::kw_only(),
           nb::arg("temperature").none() = nb::none(), nb::arg("top_k").none() = nb::none(),
           nb::arg("top_p").none() = nb::none(), nb::arg("seed") = 0, nb::arg("chat") = false,
           nb::arg("system") = "", nb::arg("thinking") = true, nb::arg("stop").none() = nb::none(),
           nb::keep_alive<0, 1>(), nb::rv_policy::take_ownership,
           "An iterator over the continuation of prompt (text: str pieces; ids: ints), ending at an eos id, "
           "a stop token, max_new_tokens or the context's end.");

  l.def("load", &load, nb::arg("path"), nb::arg("device") = "cpu", nb::arg("dtype").none() = nb::none(),
        nb::kw_only(), nb::arg("max_context") = 0, nb::arg("fp8") = "checkpoint",
        nb::arg("allow_unread_tensors") = false, nb::arg("cuda_graph") = true,
        nb::arg("tokenizer").none() = nb::none(), nb::arg("progress").none() = nb::none(),
        "A Hugging Face checkpoint folder (config.json, safetensors, tokenizer.json) for its model_type; "
        "dtype None: bfloat16.");
  l.def("random", &random_model, nb::arg("preset") = "demo-moe", nb::arg("device") = "cpu",
        nb::arg("dtype").none() = nb::none(), nb::kw_only(), nb::arg("seed") = 0, nb::arg("block_fp8") = false,
        nb::arg("max_context") = 0, nb::arg("cuda_graph") = true, nb::arg("tokenizer").none() = nb::none(),
        nb::arg("progress").none() = nb::none(),
        "A real model's shape ('demo-moe', 'qwen3-0.6b', 'qwen3-30b-a3b') with random weights and the Qwen3 "
        "tokenizer: the speed without a download (the text is noise).");
}

}  // namespace anvil::python
