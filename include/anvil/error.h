#pragma once
// Typed errors. Every message starts with "[op]" and names the offending shapes and dtypes.
#include <sstream>
#include <stdexcept>
#include <string>

#include "anvil/export.h"

namespace anvil {

class ANVIL_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};
class ANVIL_API ShapeError : public Error { public: using Error::Error; };
class ANVIL_API DTypeError : public Error { public: using Error::Error; };
class ANVIL_API DeviceError : public Error { public: using Error::Error; };
class ANVIL_API IndexError : public Error { public: using Error::Error; };
class ANVIL_API FormatError : public Error { public: using Error::Error; };
class ANVIL_API OutOfMemoryError : public Error { public: using Error::Error; };
// An argument's value outside what the op takes: an unknown mode string, a probability outside
// [0, 1] (Python's ValueError / NotImplementedError where PyTorch raises those).
class ANVIL_API ValueError : public Error { public: using Error::Error; };
// A matrix the algorithm cannot factor or invert (singular, not positive-definite), as
// torch.linalg.LinAlgError: the message names the batch element and the failing pivot.
class ANVIL_API LinAlgError : public Error { public: using Error::Error; };

namespace detail {
template <typename... Args>
std::string cat_message(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace anvil

// ANVIL_CHECK(cond, ErrorType, "[op] ...", args...): throws ErrorType with the concatenated message.
#define ANVIL_CHECK(cond, ErrorType, ...)                                   \
  do {                                                                      \
    if (!(cond)) throw ::anvil::ErrorType(::anvil::detail::cat_message(__VA_ARGS__)); \
  } while (0)
