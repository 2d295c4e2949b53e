#pragma once
// EXPECT_THROWS_SAYING(E, op, text, stmt): stmt throws anvil::E whose message starts with
// "[op]" and contains `text` (PyTorch's wording where the op follows PyTorch).
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace th {

template <typename E, typename F>
::testing::AssertionResult throws_saying(F&& f, const std::string& op, const std::string& text) {
  try {
    f();
  } catch (const E& e) {
    const std::string what = e.what();
    if (what.rfind("[" + op + "]", 0) != 0 || what.find(text) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks [" << op << "] or \"" << text << "\": " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception";
}

}  // namespace th

#define EXPECT_THROWS_SAYING(E, op, text, stmt) \
  EXPECT_TRUE(::th::throws_saying<::anvil::E>([&] { (void)(stmt); }, op, text))
