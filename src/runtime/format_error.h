// The runtime's file-format errors: "[op] FILE: what", thrown as FormatError.
#pragma once

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

}  // namespace anvil::runtime
