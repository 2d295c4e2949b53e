#include "runtime/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "anvil/error.h"
#include "runtime/io.h"

namespace anvil::runtime {
namespace {

using nlohmann::json;

constexpr const char* kOp = "[tokenizer]";

template <typename... Args>
[[noreturn]] void fail(const std::string& where, Args&&... args) {
  format_fail(kOp, where, std::forward<Args>(args)...);
}

// GPT-2's byte <-> character table: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100.. in byte order, so every byte is one visible character.
struct ByteChars {
  std::array<std::string, 256> utf8;  // byte -> its character, UTF-8 encoded
  std::unordered_map<uint32_t, uint8_t> byte_of;  // code point -> byte
  ByteChars() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = self ? static_cast<uint32_t>(b) : next++;
      utf8[static_cast<size_t>(b)] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                                               : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      byte_of[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteChars& byte_chars() {
  static const ByteChars t;
  return t;
}

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Regex {
  pcre2_code* code = nullptr;
  Regex() = default;
  Regex(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err, &off,
                         nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(where, "the pre-tokenizer regex does not compile at offset ", off, ": ", reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  }
  Regex(Regex&& o) noexcept : code(o.code) { o.code = nullptr; }
  Regex& operator=(Regex&& o) noexcept {
    std::swap(code, o.code);
    return *this;
  }
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

}  // namespace

struct Tokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> token_of;  // id -> vocabulary string (byte characters) or added content
  std::vector<uint8_t> added_of;      // id -> 0 (vocabulary), 1 (added), 2 (added, special)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged id)
  std::vector<AddedToken> added;                                      // longest first
  std::array<int32_t, 256> byte_id{};                                 // id of each byte's character
  bool nfc = false, ignore_merges = false, add_prefix_space = false;
  std::vector<Regex> splits;  // applied in order, each splitting the pieces of the previous
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  // One piece of pre-tokenized text (raw bytes) -> ids.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    std::string chars;
    for (unsigned char b : piece) chars += byte_chars().utf8[b];
    if (ignore_merges) {
      const auto it = vocab.find(chars);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(cache_mutex);
      const auto it = cache.find(chars);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> s;
    s.reserve(piece.size());
    for (unsigned char b : piece) s.push_back(byte_id[b]);
    // The lowest-ranked adjacent pair merges first, the leftmost of equal pairs first.
    while (s.size() > 1) {
      int32_t best = std::numeric_limits<int32_t>::max(), merged = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const auto it = merges.find(key(s[i], s[i + 1]));
        if (it != merges.end() && it->second.first < best) {
          best = it->second.first;
          merged = it->second.second;
          at = i;
        }
      }
      if (merged < 0) break;
      s[at] = merged;
      s.erase(s.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    out.insert(out.end(), s.begin(), s.end());
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() > 200000) cache.clear();
    cache.emplace(std::move(chars), std::move(s));
  }

  // Splits `text` by the regexes (Isolated: matches and the gaps between them are pieces).
  void pre_tokenize(std::string_view text, std::vector<std::string_view>& pieces) const {
    pieces.assign(1, text);
    for (const Regex& re : splits) {
      std::vector<std::string_view> next;
      pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
      for (std::string_view p : pieces) {
        size_t pos = 0, gap = 0;
        while (pos < p.size()) {
          const int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), pos, 0, md, nullptr);
          if (rc < 0) break;
          const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
          const size_t b = ov[0], e = ov[1];
          if (b > gap) next.push_back(p.substr(gap, b - gap));
          if (e > b) next.push_back(p.substr(b, e - b));
          gap = e;
          // An empty match moves on by one character (whole UTF-8 sequence).
          pos = e > b ? e : e + 1;
          while (e == b && pos < p.size() && (static_cast<unsigned char>(p[pos]) & 0xC0) == 0x80) ++pos;
        }
        if (gap < p.size()) next.push_back(p.substr(gap));
      }
      pcre2_match_data_free(md);
      pieces = std::move(next);
    }
  }

  // A text segment without added tokens -> ids.
  void encode_segment(std::string_view seg, std::vector<int32_t>& out) const {
    std::string buf;
    if (nfc && !seg.empty()) {
      utf8proc_uint8_t* n = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(std::string(seg).c_str()));
      if (n) {
        buf.assign(reinterpret_cast<char*>(n));
        std::free(n);
      } else {
        buf.assign(seg);  // invalid UTF-8: left as bytes, as the byte-level model can encode them
      }
    } else {
      buf.assign(seg);
    }
    if (add_prefix_space && !buf.empty() && buf[0] != ' ') buf.insert(buf.begin(), ' ');
    std::vector<std::string_view> pieces;
    pre_tokenize(buf, pieces);
    for (std::string_view p : pieces) bpe(p, out);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(read_file(path, kOp), path); }

Tokenizer Tokenizer::from_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(where, "not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail(where, "no \"model\" object");
  auto impl = std::make_unique<Impl>();
  const json& m = j["model"];
  const std::string type = m.value("type", "");
  if (type != "BPE") fail(where, "model type \"", type, "\" is not supported (byte-level BPE only)");
  if (m.contains("dropout") && !m["dropout"].is_null()) fail(where, "BPE dropout is not supported");
  if (m.value("byte_fallback", false)) fail(where, "byte_fallback is not supported");
  for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(f) && !m[f].is_null() && !m[f].get<std::string>().empty()) fail(where, f, " is not supported");
  impl->ignore_merges = m.value("ignore_merges", false);
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail(where, "model has no \"vocab\" object");
  int32_t max_id = -1;
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 30))
      fail(where, "vocab id of \"", tok, "\" is not a valid id");
    impl->vocab[tok] = id.get<int32_t>();
    max_id = std::max(max_id, id.get<int32_t>());
  }
  // Added tokens (their ids may extend the vocabulary).
  std::vector<AddedToken> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      const std::string content = a.value("content", "");
      if (content.empty() || !a.contains("id") || !a["id"].is_number_integer()) fail(where, "an added token has no content or id");
      for (const char* f : {"single_word", "lstrip", "rstrip"})
        if (a.value(f, false)) fail(where, "added token \"", content, "\" uses ", f, ", which is not supported");
      added.push_back({content, a["id"].get<int32_t>(), a.value("special", false)});
      max_id = std::max(max_id, added.back().id);
    }
  }
  impl->token_of.assign(static_cast<size_t>(max_id + 1), std::string());
  impl->added_of.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : impl->vocab) impl->token_of[static_cast<size_t>(id)] = tok;
  for (const AddedToken& a : added) {
    impl->token_of[static_cast<size_t>(a.id)] = a.content;
    impl->added_of[static_cast<size_t>(a.id)] = a.special ? 2 : 1;
  }
  std::sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  impl->added = std::move(added);
  for (int b = 0; b < 256; ++b) {
    const auto it = impl->vocab.find(byte_chars().utf8[static_cast<size_t>(b)]);
    if (it == impl->vocab.end()) fail(where, "the vocabulary lacks the byte-level character of byte ", b);
    impl->byte_id[static_cast<size_t>(b)] = it->second;
  }
  // Merges: "left right" strings or [left, right] pairs.
  if (!m.contains("merges") || !m["merges"].is_array()) fail(where, "model has no \"merges\" array");
  int32_t rank = 0;
  for (const json& mg : m["merges"]) {
    std::string l, r;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail(where, "merge \"", s, "\" is not \"left right\"");
      l = s.substr(0, sp);
      r = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      l = mg[0].get<std::string>();
      r = mg[1].get<std::string>();
    } else {
      fail(where, "merge ", mg.dump(), " is neither \"left right\" nor [left, right]");
    }
    const auto il = impl->vocab.find(l), ir = impl->vocab.find(r), im = impl->vocab.find(l + r);
    if (il == impl->vocab.end() || ir == impl->vocab.end() || im == impl->vocab.end())
      fail(where, "merge \"", l, "\" + \"", r, "\" names a token missing from the vocabulary");
    impl->merges.emplace(Impl::key(il->second, ir->second), std::make_pair(rank++, im->second));
  }
  // Normalizer: NFC or none.
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    std::vector<json> list = n.value("type", "") == "Sequence" ? n.value("normalizers", std::vector<json>{}) : std::vector<json>{n};
    for (const json& x : list) {
      if (x.value("type", "") != "NFC") fail(where, "normalizer \"", x.value("type", ""), "\" is not supported (NFC only)");
      impl->nfc = true;
    }
  }
  // Pre-tokenizer: Split (regex, Isolated) and ByteLevel, alone or in a Sequence.
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    const json& pt = j["pre_tokenizer"];
    std::vector<json> list = pt.value("type", "") == "Sequence" ? pt.value("pretokenizers", std::vector<json>{}) : std::vector<json>{pt};
    for (const json& x : list) {
      const std::string t = x.value("type", "");
      if (t == "Split") {
        if (!x.contains("pattern") || !x["pattern"].contains("Regex")) fail(where, "Split pre-tokenizers need a Regex pattern");
        if (x.value("behavior", "") != "Isolated" || x.value("invert", false))
          fail(where, "Split behavior \"", x.value("behavior", ""), "\" is not supported (Isolated only)");
        impl->splits.emplace_back(x["pattern"]["Regex"].get<std::string>(), where);
      } else if (t == "ByteLevel") {
        impl->add_prefix_space = x.value("add_prefix_space", false);
        if (x.value("use_regex", true)) impl->splits.emplace_back(kGpt2Pattern, where);
      } else {
        fail(where, "pre-tokenizer \"", t, "\" is not supported");
      }
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t seg = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : impl_->added) {  // longest first: the first hit is the longest
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    impl_->encode_segment(text.substr(seg, i - seg), out);
    out.push_back(hit->id);
    i += hit->content.size();
    seg = i;
  }
  impl_->encode_segment(text.substr(seg), out);
  return out;
}

namespace {
// Appends the raw bytes of token `id` to `out`.
void append_token(const Tokenizer::Impl& t, int32_t id, bool skip_special, std::string& out) {
  if (id < 0 || static_cast<size_t>(id) >= t.token_of.size()) throw IndexError(std::string(kOp) + " id " + std::to_string(id) + " is not in the vocabulary (size " + std::to_string(t.token_of.size()) + ")");
  const uint8_t kind = t.added_of[static_cast<size_t>(id)];
  const std::string& s = t.token_of[static_cast<size_t>(id)];
  if (kind == 2 && skip_special) return;
  if (kind != 0) {
    out += s;
    return;
  }
  for (size_t i = 0; i < s.size();) {  // byte characters (1 or 2 UTF-8 bytes each) -> bytes
    const unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp = c;
    size_t n = 1;
    if (c >= 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      n = 2;
    }
    const auto it = byte_chars().byte_of.find(cp);
    if (it != byte_chars().byte_of.end()) out += static_cast<char>(it->second);
    else out.append(s, i, n);
    i += n;
  }
}
}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) append_token(*impl_, id, skip_special, bytes);
  return utf8_sanitize(bytes);
}

int32_t Tokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == token) return a.id;
  const auto it = impl_->vocab.find(std::string(token));
  return it == impl_->vocab.end() ? -1 : it->second;
}

int64_t Tokenizer::size() const { return static_cast<int64_t>(impl_->token_of.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->added_of.size() && impl_->added_of[static_cast<size_t>(id)] == 2;
}

std::string Tokenizer::Stream::push(int32_t id) {
  if (id >= t_->size()) return {};  // a model's padding rows past the vocabulary: no text, as Hugging Face's decode
  append_token(*t_->impl_, id, skip_special_, pending_);
  size_t tail = 0;
  std::string out = utf8_sanitize(pending_, true, &tail);
  pending_.erase(0, pending_.size() - tail);
  return out;
}

std::string Tokenizer::Stream::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

std::string byte_level_char(uint8_t b) { return byte_chars().utf8[b]; }

std::string utf8_sanitize(std::string_view s, bool keep_tail, size_t* tail) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  if (tail) *tail = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) n = 1;
    else if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (n == 0) {  // not a lead byte
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    // The valid prefix of this sequence (maximal subpart).
    size_t k = 1;
    while (k < n && i + k < s.size()) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
      ++k;
    }
    if (k == n) {
      out.append(s.substr(i, n));
    } else if (i + k == s.size() && keep_tail) {
      if (tail) *tail = k;  // incomplete but valid so far: wait for more bytes
      return out;
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += k;
  }
  return out;
}

}  // namespace anvil::runtime
