#pragma once
/// \file
/// `gsync::communicator<Transport>`: a group of ranks connected by a transport, plus the settings
/// and state every collective needs (timeout, segment size, operation sequence number, logger).
/// Movable, not copyable. Collectives are free functions taking a communicator (allreduce.hpp).

#include <chrono>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/aligned_buffer.hpp"

namespace gsync {

/// A group of ranks over transport `X`.
/// \tparam X a type satisfying `gsync::transport_policy`.
template <transport_policy X>
class communicator {
 public:
  using transport_type = X;  ///< the transport policy

  /// Wraps an established transport endpoint.
  explicit communicator(std::unique_ptr<X> x, config cfg = config::from_env(), int local_rank = -1)
      : x_(std::move(x)), cfg_(std::move(cfg)), log_(x_->rank()), local_rank_(local_rank < 0 ? x_->rank() : local_rank),
        scratch_(detail::make_aligned_bytes(scratch_bytes)) {}

  /// Joins the job described by the environment (see bootstrap/launch_env.hpp and README) — for
  /// transports that can bootstrap themselves, such as TCP.
  static communicator from_env()
    requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>
  {
    return join(bootstrap::launch_info::from_env(), config::from_env());
  }

  /// Joins the job described by `li` (rank, size, store address) with settings `cfg`.
  static communicator join(const bootstrap::launch_info& li, config cfg)
    requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>
  {
    auto x = std::make_unique<X>(li, cfg.timeout, logger(li.rank));
    return communicator(std::move(x), std::move(cfg), li.local_rank);
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  int rank() const noexcept { return x_->rank(); }      ///< this rank, 0 <= rank < size
  int size() const noexcept { return x_->size(); }      ///< number of ranks
  int local_rank() const noexcept { return local_rank_; }  ///< rank among this host's processes

  /// Deadline length of every blocking wait.
  std::chrono::milliseconds timeout() const noexcept { return cfg_.timeout; }
  /// Sets the deadline length of every later blocking wait (must be positive).
  void set_timeout(std::chrono::milliseconds t) {
    if (t.count() <= 0) throw error(errc::invalid_argument, "set_timeout: timeout must be positive");
    cfg_.timeout = t;
  }
  /// Pipelining unit of segmented schedules, in bytes.
  std::size_t segment_bytes() const noexcept { return cfg_.segment_bytes; }
  /// Sets the pipelining unit (>= 1 byte; tiny values force many segments, which tests use).
  void set_segment_bytes(std::size_t b) {
    if (b == 0) throw error(errc::invalid_argument, "set_segment_bytes: must be at least 1");
    cfg_.segment_bytes = b;
  }
  /// Settings in force.
  const config& settings() const noexcept { return cfg_; }

  /// The transport endpoint (for primitives and algorithms).
  X& transport() noexcept { return *x_; }
  /// Size of the communicator's fixed scratch buffer (allocated once, at construction).
  static constexpr std::size_t scratch_bytes = 256 << 10;
  /// The scratch buffer, for schedules that must hold a whole incoming message before combining it.
  std::span<std::byte> scratch() noexcept { return {scratch_.get(), scratch_bytes}; }

  /// This rank's logger.
  const logger& log() const noexcept { return log_; }

  /// Starts a new operation: its sequence number (identical on every rank that issues the same
  /// sequence of collectives) and its deadline.
  std::uint64_t next_seq() noexcept { return ++seq_; }
  /// Numbers the next point-to-point message this rank sends to `peer` (1, 2, ...). Point-to-point
  /// traffic involves two ranks only, so it never advances the collective sequence (`next_seq`).
  /// \param peer a valid rank other than this one.
  std::uint64_t next_p2p_send_seq(int peer) { return ++p2p_seq(peer).sent; }
  /// Numbers the next point-to-point message this rank expects from `peer` (1, 2, ...): the n-th
  /// recv from a peer matches that peer's n-th send to this rank.
  std::uint64_t next_p2p_recv_seq(int peer) { return ++p2p_seq(peer).received; }
  /// Deadline for an operation starting now.
  deadline make_deadline() const { return std::chrono::steady_clock::now() + cfg_.timeout; }

  /// True the first time a collective shape is seen (used to log algorithm choices once per shape).
  bool first_time(const std::string& shape) { return logged_shapes_.insert(shape).second; }

 private:
  struct p2p_counters {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
  };
  p2p_counters& p2p_seq(int peer) {
    if (p2p_.empty()) p2p_.resize(static_cast<std::size_t>(size()));  // once per communicator
    return p2p_[static_cast<std::size_t>(peer)];
  }

  std::unique_ptr<X> x_;
  config cfg_;
  logger log_;
  int local_rank_ = 0;
  std::uint64_t seq_ = 0;
  std::vector<p2p_counters> p2p_;  // per peer, for send/recv
  std::set<std::string> logged_shapes_;
  detail::aligned_bytes scratch_;
};

}  // namespace gsync
