// generation_config.json's sampling fields (parse_generation_defaults, load_config) and the rule
// that merges them with the user's values (choose_sampling), which every front end shares:
// transformers' semantics (do_sample false or absent: greedy; absent fields: 1.0, 50, 1.0), a
// given value wins for its field, a given temperature 0 is greedy.
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "harness.h"
#include "runtime/config.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace {

using namespace anvil;
using anvil::runtime::choose_sampling;
using anvil::runtime::GenerationDefaults;
using anvil::runtime::parse_generation_defaults;
using anvil::runtime::SamplingChoice;
using anvil::runtime::SamplingRequest;
using anvil::runtime::SamplingSource;

// Qwen3's generation_config.json as the Hub ships it.
constexpr const char* kQwen3 = R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
  "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})";

std::string tiny_dir() { return th::source_dir() + "/tests/data/qwen3-dense-tiny"; }

::testing::AssertionResult same(const SamplingChoice& c, double temperature, int64_t top_k, double top_p,
                                SamplingSource t, SamplingSource k, SamplingSource p) {
  const SamplingOptions& o = c.options;
  if (o.temperature == temperature && o.top_k == top_k && o.top_p == top_p && c.temperature == t && c.top_k == k &&
      c.top_p == p)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got {" << o.temperature << ", " << o.top_k << ", " << o.top_p
                                       << "} from {" << static_cast<int>(c.temperature) << ", "
                                       << static_cast<int>(c.top_k) << ", " << static_cast<int>(c.top_p) << "}";
}

TEST(GenerationDefaults, Fields) {
  const GenerationDefaults q = parse_generation_defaults(kQwen3, "g.json");
  EXPECT_EQ(q.do_sample, true);
  EXPECT_EQ(q.temperature, 0.6);
  EXPECT_EQ(q.top_k, 20);
  EXPECT_EQ(q.top_p, 0.95);
  EXPECT_TRUE(q.has_sampling_fields());

  const GenerationDefaults off = parse_generation_defaults(R"({"do_sample": false, "temperature": 1})", "g.json");
  EXPECT_EQ(off.do_sample, false);
  EXPECT_EQ(off.temperature, 1.0);  // an integer is a number
  EXPECT_FALSE(off.top_k.has_value());

  // Absent and null are the same: no field.
  for (const char* text : {R"({"eos_token_id": 2, "transformers_version": "4.51.0"})",
                           R"({"do_sample": null, "temperature": null, "top_k": null, "top_p": null})"}) {
    const GenerationDefaults d = parse_generation_defaults(text, "g.json");
    EXPECT_FALSE(d.has_sampling_fields()) << text;
    EXPECT_FALSE(d.do_sample.has_value()) << text;
  }
}

// The fields reach ModelConfig through parse_config and load_config; a checkpoint without
// generation_config.json (or without its sampling fields, as the tiny ones) has none.
TEST(GenerationDefaults, InModelConfig) {
  std::string config;
  {
    std::ifstream in(tiny_dir() + "/config.json");
    config.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto c = runtime::parse_config(config, kQwen3, "c.json");
  EXPECT_EQ(c.generation.top_k, 20);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_FALSE(runtime::parse_config(config, "", "c.json").generation.has_sampling_fields());
  EXPECT_FALSE(runtime::load_config(tiny_dir()).generation.has_sampling_fields());
}

// A field of the wrong type or range is a FormatError naming the file and the field.
TEST(GenerationDefaults, Errors) {
  auto fails = [](const std::string& text, const std::string& what) {
    try {
      (void)parse_generation_defaults(text, "g.json");
    } catch (const FormatError& e) {
      const std::string m = e.what();
      return m.rfind("[config] g.json: ", 0) == 0 && m.find(what) != std::string::npos
                 ? ::testing::AssertionSuccess()
                 : ::testing::AssertionFailure() << m;
    }
    return ::testing::AssertionFailure() << "accepted " << text << "; expected " << what;
  };
  EXPECT_TRUE(fails(R"({"do_sample": "true"})", "\"do_sample\" must be true or false, got \"true\""));
  EXPECT_TRUE(fails(R"({"do_sample": 1})", "\"do_sample\" must be true or false, got 1"));
  EXPECT_TRUE(fails(R"({"temperature": "0.6"})", "\"temperature\" must be a finite number >= 0, got \"0.6\""));
  EXPECT_TRUE(fails(R"({"temperature": -0.5})", "\"temperature\" must be a finite number >= 0, got -0.5"));
  EXPECT_TRUE(fails(R"({"top_k": 20.5})", "\"top_k\" must be an integer >= 0, got 20.5"));
  EXPECT_TRUE(fails(R"({"top_k": -1})", "\"top_k\" must be an integer >= 0, got -1"));
  EXPECT_TRUE(fails(R"({"top_k": [20]})", "\"top_k\" must be an integer >= 0, got [20]"));
  EXPECT_TRUE(fails(R"({"top_p": 0})", "\"top_p\" must be a number in (0, 1], got 0"));
  EXPECT_TRUE(fails(R"({"top_p": 1.5})", "\"top_p\" must be a number in (0, 1], got 1.5"));
  EXPECT_TRUE(fails(R"({"top_p": true})", "\"top_p\" must be a number in (0, 1], got true"));
  EXPECT_TRUE(fails("[1]", "not a JSON object"));

  // load_config names the checkpoint's generation_config.json.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("anvil_gen_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(tiny_dir() + "/config.json", dir / "config.json");
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": true, "top_p": "0.9"})";
  try {
    (void)runtime::load_config(dir.string());
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), "[config] " + (dir / "generation_config.json").string() +
                                         ": \"top_p\" must be a number in (0, 1], got \"0.9\"");
  }
  fs::remove_all(dir);
}

TEST(ChooseSampling, CheckpointFields) {
  using S = SamplingSource;
  const GenerationDefaults qwen3 = parse_generation_defaults(kQwen3, "g.json");
  EXPECT_TRUE(same(choose_sampling(qwen3, {}), 0.6, 20, 0.95, S::kCheckpoint, S::kCheckpoint, S::kCheckpoint));
  // do_sample true, the other fields absent: transformers' defaults.
  EXPECT_TRUE(same(choose_sampling(GenerationDefaults{true, {}, {}, {}}, {}), 1.0, 50, 1.0, S::kTransformersDefault,
                   S::kTransformersDefault, S::kTransformersDefault));
  EXPECT_TRUE(same(choose_sampling(GenerationDefaults{true, 0.8, {}, {}}, {}), 0.8, 50, 1.0, S::kCheckpoint,
                   S::kTransformersDefault, S::kTransformersDefault));
}

TEST(ChooseSampling, Greedy) {
  using S = SamplingSource;
  const GenerationDefaults qwen3 = parse_generation_defaults(kQwen3, "g.json");
  // No sampling fields: anvil's default.
  const SamplingChoice none = choose_sampling({}, {});
  EXPECT_TRUE(none.greedy());
  EXPECT_TRUE(same(none, 0.0, 0, 1.0, S::kAnvilDefault, S::kAnvilDefault, S::kAnvilDefault));
  // do_sample false, or absent (transformers reads it as false), whatever the other fields say.
  for (const GenerationDefaults& d : {GenerationDefaults{false, 0.6, 0.95, 20}, GenerationDefaults{{}, 0.6, 0.95, 20}})
    EXPECT_TRUE(same(choose_sampling(d, {}), 0.0, 0, 1.0, S::kCheckpoint, S::kCheckpoint, S::kCheckpoint));
  // The checkpoint's temperature 0.
  EXPECT_TRUE(same(choose_sampling(GenerationDefaults{true, 0.0, {}, 20}, {}), 0.0, 0, 1.0, S::kCheckpoint,
                   S::kCheckpoint, S::kCheckpoint));
  // --temp 0 wins over the checkpoint and over the other given fields.
  SamplingRequest zero;
  zero.temperature = 0.0;
  zero.top_k = 5;
  zero.top_p = 0.5;
  EXPECT_TRUE(same(choose_sampling(qwen3, zero), 0.0, 0, 1.0, S::kGiven, S::kGiven, S::kGiven));
  EXPECT_TRUE(same(choose_sampling({}, zero), 0.0, 0, 1.0, S::kGiven, S::kGiven, S::kGiven));
}

TEST(ChooseSampling, GivenOverrides) {
  using S = SamplingSource;
  const GenerationDefaults qwen3 = parse_generation_defaults(kQwen3, "g.json");
  SamplingRequest temp;
  temp.temperature = 1.2;
  EXPECT_TRUE(same(choose_sampling(qwen3, temp), 1.2, 20, 0.95, S::kGiven, S::kCheckpoint, S::kCheckpoint));
  SamplingRequest all;
  all.temperature = 0.3;
  all.top_k = 0;
  all.top_p = 1.0;
  EXPECT_TRUE(same(choose_sampling(qwen3, all), 0.3, 0, 1.0, S::kGiven, S::kGiven, S::kGiven));
  // A given field samples where the checkpoint is greedy or says nothing.
  EXPECT_TRUE(same(choose_sampling({}, temp), 1.2, 50, 1.0, S::kGiven, S::kTransformersDefault,
                   S::kTransformersDefault));
  SamplingRequest top_p;
  top_p.top_p = 0.9;
  EXPECT_TRUE(same(choose_sampling(GenerationDefaults{false, 0.7, {}, {}}, top_p), 0.7, 50, 0.9, S::kCheckpoint,
                   S::kTransformersDefault, S::kGiven));
}

// max_new_tokens 0 runs the prompt only and times it (anvil run -n 0); negative is an Error.
TEST(Generate, PromptOnly) {
  runtime::LoadOptions lo;
  lo.dtype = kFloat32;
  lo.max_context = 16;
  auto m = runtime::load_model(tiny_dir(), lo);
  runtime::GenerateOptions o;
  o.max_new_tokens = 0;
  runtime::GenerateStats st;
  EXPECT_TRUE(runtime::generate(*m, {1, 2, 3}, o, {}, &st).empty());
  EXPECT_EQ(st.prompt_tokens, 3);
  EXPECT_EQ(st.new_tokens, 0);
  EXPECT_GT(st.prompt_seconds, 0.0);
  EXPECT_EQ(st.decode_seconds, 0.0);
  o.max_new_tokens = -1;
  EXPECT_THROW((void)runtime::generate(*m, {1, 2, 3}, o), Error);
}

}  // namespace
