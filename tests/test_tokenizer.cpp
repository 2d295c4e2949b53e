// Tokenizer: the shipped Qwen3 tokenizer.json against Hugging Face's ids for every entry of
// tests/data/qwen3-visible.json (both directions), NFC normalisation, streaming decode of
// characters split across tokens, UTF-8 repair, added / special tokens, both merges spellings,
// and the refusals of what the implementation does not support.
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "runtime/generate.h"
#include "runtime/tokenizer.h"

namespace {

using anvil::FormatError;
using anvil::runtime::byte_level_char;
using anvil::runtime::Tokenizer;
using anvil::runtime::utf8_sanitize;

const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_file(th::source_dir() + "/data/qwen3-tokenizer/tokenizer.json");
  return t;
}

TEST(Tokenizer, Qwen3MatchesHuggingFace) {
  std::ifstream in(th::source_dir() + "/tests/data/qwen3-visible.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(qwen3().encode(text), want) << text;
    EXPECT_EQ(qwen3().decode(want), text) << text;  // every golden text is already NFC
    std::string streamed;
    Tokenizer::Stream s(qwen3());
    for (int32_t id : want) streamed += s.push(id);
    streamed += s.flush();
    EXPECT_EQ(streamed, text) << text;
  }
}

// The chat prompt against Qwen3's own template: the expected strings are the template of the
// shipped tokenizer_config.json rendered by jinja2 (add_generation_prompt=True), and the special
// tokens encode to their single ids.
TEST(Tokenizer, Qwen3ChatTemplate) {
  using anvil::runtime::chat_prompt;
  EXPECT_EQ(chat_prompt("Hello, world!"), "<|im_start|>user\nHello, world!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_prompt("Hi", {"You are terse.", true}),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_prompt("Hi", {"", false}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(chat_prompt("Hi", {"S", false}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const std::vector<int32_t> ids = qwen3().encode(chat_prompt("Hi"));
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), qwen3().token_id("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), qwen3().token_id("<|im_end|>")), 1);
}

TEST(Tokenizer, Qwen3Vocabulary) {
  EXPECT_EQ(qwen3().size(), 151669);
  EXPECT_EQ(qwen3().token_id("<|im_end|>"), 151645);
  EXPECT_EQ(qwen3().token_id("Hello"), 9707);
  EXPECT_EQ(qwen3().token_id("no such token"), -1);
  EXPECT_TRUE(qwen3().is_special(151644));
  EXPECT_FALSE(qwen3().is_special(151667));  // <think>: added, not special
  EXPECT_FALSE(qwen3().is_special(9707));
  const std::vector<int32_t> ids = qwen3().encode("<|im_start|>user\nhi<|im_end|><think>");
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151667);
  EXPECT_EQ(qwen3().decode(ids, true), "user\nhi<think>");
  EXPECT_THROWS_OP(IndexError, "tokenizer", qwen3().decode(std::vector<int32_t>{151669}));
  EXPECT_THROWS_OP(IndexError, "tokenizer", qwen3().decode(std::vector<int32_t>{-1}));
}

TEST(Tokenizer, NormalisesToNfc) {
  // "café naïve" with combining accents encodes as the precomposed text does.
  EXPECT_EQ(qwen3().encode("cafe\xCC\x81 nai\xCC\x88ve"), qwen3().encode("caf\xC3\xA9 na\xC3\xAFve"));
  EXPECT_EQ(qwen3().decode(qwen3().encode("cafe\xCC\x81")), "caf\xC3\xA9");
}

TEST(Tokenizer, StreamsSplitCharacters) {
  // " U+1F680" is three tokens: " " plus the rocket's first two bytes, then one byte each.
  const std::vector<int32_t> rocket = qwen3().encode(" \xF0\x9F\x9A\x80");
  ASSERT_EQ(rocket, (std::vector<int32_t>{11162, 248, 222}));
  Tokenizer::Stream s(qwen3());
  EXPECT_EQ(s.push(rocket[0]), " ");  // the incomplete character waits
  EXPECT_EQ(s.push(rocket[1]), "");
  EXPECT_EQ(s.push(rocket[2]), "\xF0\x9F\x9A\x80");
  EXPECT_EQ(s.flush(), "");
  // Decoded alone, the pieces are not UTF-8: each maximal invalid piece becomes U+FFFD.
  EXPECT_EQ(qwen3().decode(std::vector<int32_t>{rocket[0]}), " \xEF\xBF\xBD");
  // An incomplete character flushed at the end becomes U+FFFD.
  Tokenizer::Stream t(qwen3());
  EXPECT_EQ(t.push(rocket[0]), " ");
  EXPECT_EQ(t.push(rocket[1]), "");
  EXPECT_EQ(t.flush(), "\xEF\xBF\xBD");
  // Qwen3's padding ids (the model's 151936 rows past the tokenizer's 151669) stream no text.
  Tokenizer::Stream u(qwen3());
  EXPECT_EQ(u.push(151669), "");
  EXPECT_EQ(u.push(151935), "");
  EXPECT_EQ(u.push(rocket[0]), " ");
  EXPECT_THROWS_OP(IndexError, "tokenizer", u.push(-1));
}

TEST(Tokenizer, Utf8Repair) {
  EXPECT_EQ(utf8_sanitize("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(utf8_sanitize("\xE2\x82" "A"), "\xEF\xBF\xBD" "A");  // maximal subpart: one replacement
  EXPECT_EQ(utf8_sanitize("\x80\xBF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // past U+10FFFF
  size_t tail = 0;
  EXPECT_EQ(utf8_sanitize("a\xF0\x9F\x9A", true, &tail), "a");
  EXPECT_EQ(tail, 3u);
}

// A byte-level vocabulary plus "ab" and "abc", with the merges in either spelling.
std::string tiny_tokenizer(const std::string& merges, const std::string& extra = "") {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<uint8_t>(b))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return R"({"model":{"type":"BPE","vocab":)" + vocab.dump() + R"(,"merges":)" + merges +
         R"(},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"added_tokens":[)" + extra + "]}";
}

TEST(Tokenizer, MergesInBothSpellings) {
  const Tokenizer a = Tokenizer::from_json(tiny_tokenizer(R"(["a b","ab c"])"), "a");
  const Tokenizer b = Tokenizer::from_json(tiny_tokenizer(R"([["a","b"],["ab","c"]])"), "b");
  const std::vector<int32_t> want = {257, 256, 'x'};
  EXPECT_EQ(a.encode("abcabx"), want);
  EXPECT_EQ(b.encode("abcabx"), want);
  EXPECT_EQ(a.decode(want), "abcabx");
}

TEST(Tokenizer, RefusesWhatItDoesNotSupport) {
  auto refuses = [](const std::string& json, const std::string& what) {
    try {
      (void)Tokenizer::from_json(json, "t.json");
    } catch (const FormatError& e) {
      const std::string m = e.what();
      return m.rfind("[tokenizer] t.json: ", 0) == 0 && m.find(what) != std::string::npos
                 ? ::testing::AssertionSuccess()
                 : ::testing::AssertionFailure() << m;
    }
    return ::testing::AssertionFailure() << "accepted; expected " << what;
  };
  EXPECT_TRUE(refuses("{", "not valid JSON"));
  EXPECT_TRUE(refuses(R"({"model":{"type":"Unigram"}})", "model type \"Unigram\" is not supported"));
  EXPECT_TRUE(refuses(tiny_tokenizer(R"(["a zz"])"), "names a token missing from the vocabulary"));
  EXPECT_TRUE(refuses(tiny_tokenizer(R"(["ab"])"), "is not \"left right\""));
  EXPECT_TRUE(refuses(tiny_tokenizer("[]", R"({"id":258,"content":"<x>","lstrip":true})"), "uses lstrip"));
  std::string no_byte = tiny_tokenizer("[]");
  no_byte.replace(no_byte.find("\"a\":97"), 6, "\"A2\":97");
  EXPECT_TRUE(refuses(no_byte, "lacks the byte-level character of byte 97"));
}

}  // namespace
