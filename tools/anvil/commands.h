// The CLI's commands beyond info / bench-ops: options structs filled by CLI11 in main.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anvil::cli {

struct TokenizeOptions {
  std::string tokenizer, text, text_file;
};
struct DetokenizeOptions {
  std::string tokenizer, ids;
  bool skip_special = false;
};

int cmd_tokenize(const TokenizeOptions& o);
int cmd_detokenize(const DetokenizeOptions& o);
// "1,2,3", "1 2 3" or "[1, 2, 3]" -> ids; Error naming `op` on anything else.
std::vector<int32_t> parse_ids(const std::string& s, const char* op);

}  // namespace anvil::cli
