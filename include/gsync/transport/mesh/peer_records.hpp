#pragma once
/// \file
/// `transport::peer_records`: every rank's set-up record (bootstrap/rank_record.hpp: the data
/// listener's address and port, the recovery and heartbeat ports, the kernel and host identities),
/// taken from the store once at set-up (setup_steps.ipp) and never changed after. It owns the
/// records and what the host mesh reads from them: a lower rank's listener, which a dial on first
/// use connects to (connect.ipp); the words naming a link's two ends in a report (link_path.ipp);
/// the host identities and the ranks on this kernel (setup.ipp); the addresses and hosts a shrink
/// uses (shrink.ipp).

#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/core/error.hpp"

namespace gsync::transport {

class peer_records {
 public:
  /// Takes every rank's record: `mine` for rank `self`, the others parsed from `stored[j]` (rank
  /// j's text; `stored[self]` is not read). Throws errc::mismatch naming the rank of a malformed one.
  void take(int self, const bootstrap::rank_record& mine, std::span<const std::string> stored) {
    self_ = self;
    all_.clear();
    all_.reserve(stored.size());
    for (int j = 0; j < static_cast<int>(stored.size()); ++j)
      all_.push_back(j == self ? mine : bootstrap::rank_record::parse(stored[static_cast<std::size_t>(j)], j));
  }

  /// Rank `r`'s record.
  const bootstrap::rank_record& of(int r) const noexcept { return all_[static_cast<std::size_t>(r)]; }
  /// This rank's record.
  const bootstrap::rank_record& mine() const noexcept { return of(self_); }

  /// Rank `peer`'s data listener (throws errc::mismatch when its record's address is not one).
  asio::ip::tcp::endpoint listener(int peer) const {
    const bootstrap::rank_record& r = of(peer);
    asio::error_code ec;
    const auto addr = asio::ip::make_address(r.address, ec);
    if (ec) throw error(errc::mismatch, "bad address '" + r.address.substr(0, 60) + "' in the set-up record of rank " + std::to_string(peer));
    return asio::ip::tcp::endpoint(addr, r.port);
  }
  /// "ADDRESS (HOST)" of rank `r`, for reports.
  std::string where(int r) const { return of(r).address + " (" + of(r).host + ")"; }
  /// Every rank's host identity, in rank order.
  std::vector<std::string> hosts() const {
    std::vector<std::string> ids;
    ids.reserve(all_.size());
    for (const auto& r : all_) ids.push_back(r.host);
    return ids;
  }
  /// The ranks whose machine runs this rank's kernel (bootstrap::kernel_id()), this one included.
  int on_my_kernel() const noexcept {
    int k = 0;
    for (const auto& r : all_) k += r.kernel == mine().kernel;
    return k;
  }

 private:
  int self_ = -1;
  std::vector<bootstrap::rank_record> all_;
};

}  // namespace gsync::transport
