#pragma once
// Setting GSYNC_* variables for one scope of a test, for the tests of the environment's parsing.
// Tests of a behaviour pass options (gsync::config, its transport member) instead.
#include <cstdlib>
#include <optional>
#include <string>

namespace gsync_test {

/// Sets (or, with nullptr, unsets) an environment variable for one scope, restoring the previous
/// value at its end. Set it before any rank thread starts.
struct scoped_env {
  std::string name;
  std::optional<std::string> old;
  scoped_env(const char* n, const char* value) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    if (value) ::setenv(n, value, 1);
    else ::unsetenv(n);
  }
  ~scoped_env() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
};

}  // namespace gsync_test

#include <cstdio>

namespace gsync_test {

/// Reports the running test case to ctest as skipped (tests/CMakeLists.txt matches this line with
/// SKIP_REGULAR_EXPRESSION), for a test whose subject this build lacks. The caller returns next.
inline void skip(const char* why) {
  std::printf("GSYNC-TEST-SKIPPED: %s\n", why);
  std::fflush(stdout);
}

}  // namespace gsync_test
