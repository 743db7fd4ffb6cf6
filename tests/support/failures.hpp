#pragma once
// Failure messages collected by the ranks (threads) of a test world while it runs; the test reports
// them once the world has joined.
#include <mutex>
#include <string>
#include <vector>

namespace gsync_test {

/// A thread-safe list of failure messages; keeps the first 20 (a broken schedule fails everywhere).
struct failures {
  std::mutex m;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard lk(m);
    if (list.size() < 20) list.push_back(std::move(s));
  }
};

}  // namespace gsync_test
