// The runtime's file handling: whole-file reads and file-format errors ("[op] FILE: what",
// thrown as FormatError).
#pragma once

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "anvil/error.h"

namespace anvil::runtime {

template <typename... Args>
[[noreturn]] void format_fail(const char* op, const std::string& where, Args&&... args) {
  std::ostringstream s;
  s << op << " " << where << ": ";
  (s << ... << args);
  throw FormatError(s.str());
}

// The bytes of the file at `path`; Error "[op] cannot open PATH" when it cannot be read.
inline std::string read_file(const std::string& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string(op) + " cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace anvil::runtime
