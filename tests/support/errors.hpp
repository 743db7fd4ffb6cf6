#pragma once
// Helpers for tests that expect a gsync::error: which kind it was, and its message.
#include <string>

#include <gsync/core/error.hpp>

namespace gsync_test {

/// The errc of the gsync::error that f() throws (errc{} when it throws none).
template <class F>
gsync::errc kind_of(F f) {
  try {
    f();
  } catch (const gsync::error& e) {
    return e.kind();
  }
  return gsync::errc{};
}

/// The message of the gsync::error that f() throws ("" when it throws none).
template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const gsync::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace gsync_test
