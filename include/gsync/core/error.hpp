#pragma once
/// \file
/// gsync's single exception type and its error codes.
///
/// Every failure that gsync reports reaches the caller as `gsync::error`, a `std::system_error` whose
/// code belongs to `gsync::error_category()`. The code says what kind of failure it was (so programs can
/// react: retry on timeout, tear down on peer_lost); `what()` says, in words, which rank, which peer,
/// which operation.

#include <stdexcept>
#include <string>
#include <utility>
#include <system_error>

namespace gsync {

/// Kinds of failure. Values are stable (they may appear in logs and exit codes).
enum class errc : int {
  timeout = 1,           ///< a blocking wait passed its deadline
  peer_lost = 2,         ///< a peer closed its connection or died
  invalid_argument = 3,  ///< the caller passed something unusable (sizes, ranks, env values)
  mismatch = 4,          ///< ranks disagree on the operation (size, kind, sequence) or a frame is malformed
  auth_failed = 5,       ///< a connection failed the job-key handshake
  aborted = 6,           ///< the communicator was aborted
  system = 7,            ///< an operating-system call failed (see the message for errno text)
  non_finite = 8,        ///< gradients held NaN or Inf (raised on every rank alike; the data is intact)
  cuda = 9,              ///< a CUDA call failed (the message names the call and CUDA's error)
  corrupted = 10,        ///< a payload failed its checksum (GSYNC_CHECKSUM): the link between two ranks altered it
  excluded = 11,         ///< a shrink went on without this rank (it was cut off or stopped, or on a partition's smaller side)
};

/// The highest `errc` value: a number read from another rank is a known kind when in 1..this.
inline constexpr int errc_last = static_cast<int>(errc::excluded);

/// The exit status a rank that `shrink` excluded should end with (`exit(gsync::excluded_exit_status)`):
/// `gsyncrun --elastic` lets such a rank go without ending the others (75 is sysexits' EX_TEMPFAIL).
inline constexpr int excluded_exit_status = 75;

namespace detail {
class error_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "gsync"; }
  std::string message(int c) const override {
    switch (static_cast<errc>(c)) {
      case errc::timeout: return "timeout";
      case errc::peer_lost: return "peer lost";
      case errc::invalid_argument: return "invalid argument";
      case errc::mismatch: return "mismatch";
      case errc::auth_failed: return "authentication failed";
      case errc::aborted: return "aborted";
      case errc::system: return "system error";
      case errc::non_finite: return "non-finite values";
      case errc::cuda: return "CUDA error";
      case errc::corrupted: return "corrupted data";
      case errc::excluded: return "excluded";
    }
    return "unknown gsync error";
  }
};
}  // namespace detail

/// The category of all `gsync::errc` codes.
inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl cat;
  return cat;
}

/// Makes a `std::error_code` from a `gsync::errc`.
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// The exception gsync throws. `code()` compares equal to a `gsync::errc`:
/// `catch (const gsync::error& e) { if (e.code() == gsync::errc::timeout) ... }`.
class error : public std::system_error {
 public:
  error(errc e, const std::string& what) : std::system_error(make_error_code(e), what), what_(what) {}
  /// The gsync error kind of this exception.
  errc kind() const noexcept { return static_cast<errc>(code().value()); }
  /// The message alone (std::system_error would append ": <code message>").
  const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // reference-counted: copying the exception never throws
};

namespace detail {
/// A peer's failure message without the "rank P reported: " a relay may already have put before it.
inline std::string unrelayed(int peer, std::string why) {
  const std::string pre = "rank " + std::to_string(peer) + " reported: ";
  if (why.rfind(pre, 0) == 0) why.erase(0, pre.size());
  return why;
}
/// "rank P reported: WHY": a failure passed on from peer P, one level of "reported" kept.
inline std::string relayed(int peer, std::string why) {
  return "rank " + std::to_string(peer) + " reported: " + unrelayed(peer, std::move(why));
}
}  // namespace detail

}  // namespace gsync

template <>
struct std::is_error_code_enum<gsync::errc> : std::true_type {};
