// anvil tokenize / detokenize: a tokenizer.json's ids for a text (a JSON array), and back.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "anvil/error.h"
#include "commands.h"
#include "runtime/io.h"
#include "runtime/tokenizer.h"

namespace anvil::cli {

std::string data_dir() {
  const char* env = std::getenv("ANVIL_DATA_DIR");
  return env && *env ? std::string(env) : std::string(ANVIL_DATA_DIR);
}

int cmd_tokenize(const TokenizeOptions& o) {
  check_input_file(o.tokenizer, "[tokenize]", "--tokenizer");
  ANVIL_CHECK(o.text.empty() || o.text_file.empty(), Error, "[tokenize] give the text or --text-file, not both");
  if (!o.text_file.empty()) check_input_file(o.text_file, "[tokenize]", "--text-file");
  std::string text = o.text;
  if (!o.text_file.empty()) text = runtime::read_file(o.text_file, "[tokenize] --text-file:");
  const runtime::Tokenizer t = runtime::Tokenizer::from_file(o.tokenizer);
  const std::vector<int32_t> ids = t.encode(text);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  std::printf("%s]\n", out.c_str());
  return 0;
}

std::vector<int32_t> parse_ids(const std::string& s, const char* op) {
  std::vector<int32_t> ids;
  std::string cur;
  auto take = [&] {
    if (cur.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ANVIL_CHECK(used == cur.size() && v >= 0 && v <= INT32_MAX, Error, op, " --ids: \"", cur, "\" is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ' || c == '[' || c == ']' || c == '\n' || c == '\t') take();
    else cur += c;
  }
  take();
  return ids;
}

int cmd_detokenize(const DetokenizeOptions& o) {
  const std::vector<int32_t> ids = parse_ids(o.ids, "[detokenize]");
  check_input_file(o.tokenizer, "[detokenize]", "--tokenizer");
  const runtime::Tokenizer t = runtime::Tokenizer::from_file(o.tokenizer);
  std::printf("%s\n", t.decode(ids, o.skip_special).c_str());
  return 0;
}

}  // namespace anvil::cli
