// Byte-level BPE tokenizers from a Hugging Face tokenizer.json (Qwen, Llama 3, GPT-2 style):
//  encode: added tokens matched first (leftmost, longest) in the raw text; the rest NFC-normalised
//    (utf8proc) when the normalizer says so, split by the pre-tokenizer's regex (PCRE2 with
//    Unicode properties; "Isolated": matches and the gaps between them are pieces), each piece's
//    bytes mapped to GPT-2's byte characters and merged by BPE in merge-rank order.
//  decode: byte characters back to bytes; added tokens as their text.
// What tokenizer.json may hold and this refuses (a FormatError naming it): model types other
// than BPE, normalizers other than NFC / none, pre-tokenizers other than Split (regex) and
// ByteLevel, byte_fallback, dropout, continuing-subword prefixes, and added tokens with
// single_word / lstrip / rstrip.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace anvil::runtime {

class Tokenizer {
 public:
  // Reads tokenizer.json (FormatError on anything malformed or unsupported).
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(const std::string& text, const std::string& where);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Ids of `text` as Hugging Face's encode(text, add_special_tokens=False).
  std::vector<int32_t> encode(std::string_view text) const;
  // The text of `ids` (bytes that are not valid UTF-8 become U+FFFD); added tokens marked
  // special are left out when skip_special.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // -1 when `token` is neither in the vocabulary nor an added token.
  int32_t token_id(std::string_view token) const;
  // Largest id + 1 (the embedding rows a model needs at least).
  int64_t size() const;
  bool is_special(int32_t id) const;

  struct Impl;  // tokenizer.cpp

  // Incremental decode for streaming: push ids one by one, get the text that is complete so far
  // (a UTF-8 character split across tokens comes out once its last byte arrives). An id past the
  // vocabulary (a model's padding rows, e.g. Qwen3's 151669..151935) gives no text, as Hugging
  // Face's decode skips it; a negative id is an IndexError.
  class Stream {
   public:
    explicit Stream(const Tokenizer& t, bool skip_special = false) : t_(&t), skip_special_(skip_special) {}
    std::string push(int32_t id);
    std::string flush();  // whatever is pending, invalid bytes as U+FFFD

   private:
    const Tokenizer* t_;
    bool skip_special_;
    std::string pending_;
  };

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GPT-2's byte-level character of byte `b` (UTF-8): the vocabulary spelling of single bytes.
std::string byte_level_char(uint8_t b);

// Bytes -> valid UTF-8, each maximal invalid subsequence replaced by U+FFFD. When `keep_tail`,
// a trailing incomplete (but so far valid) sequence is not converted: its length is returned
// in *tail and it is left out of the result.
std::string utf8_sanitize(std::string_view bytes, bool keep_tail = false, size_t* tail = nullptr);

}  // namespace anvil::runtime
