#pragma once
/// \file
/// `gsync::detail::choice_memo`: the last few automatic algorithm choices of one collective,
/// keyed by message bytes and pipelining unit. A training loop repeats the same few sizes every
/// step, and working the choice out again (a dozen closed-form cost estimates, the GSYNC_ALGO
/// check) is a sizeable part of a small same-host allreduce's time
/// (benchmarks/results/from_code_comments.md). The estimates depend only on the bytes, the segment
/// size and what is fixed for a communicator's life (world size, placement, transport, link probe,
/// GSYNC_ALGO), so a stored choice stays right.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace gsync::detail {

/// Eight (bytes, segment bytes) -> algorithm code entries, replaced round-robin. Not thread-safe:
/// a communicator runs one operation at a time.
class choice_memo {
 public:
  /// The stored code for `bytes` with pipelining unit `segment`, if any.
  std::optional<std::uint8_t> find(std::size_t bytes, std::size_t segment) const noexcept {
    for (const entry& e : e_)
      if (e.used && e.bytes == bytes && e.segment == segment) return e.code;
    return std::nullopt;
  }
  /// Stores `code` for (`bytes`, `segment`), replacing the oldest entry.
  void put(std::size_t bytes, std::size_t segment, std::uint8_t code) noexcept {
    e_[next_] = {bytes, segment, code, true};
    next_ = (next_ + 1) % e_.size();
  }

 private:
  struct entry {
    std::size_t bytes = 0;
    std::size_t segment = 0;
    std::uint8_t code = 0;
    bool used = false;
  };
  std::array<entry, 8> e_{};
  std::size_t next_ = 0;
};

}  // namespace gsync::detail
