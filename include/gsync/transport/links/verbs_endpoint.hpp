#pragma once
/// \file
/// The verbs link's endpoint (`link_endpoint`): loads libibverbs (verbs/library.hpp), finds this
/// rank's port (verbs/discovery.hpp, GSYNC_IB_HCA) and opens it, and publishes in the store
/// whether it can use verbs, saying why not at INFO when it cannot (no library, no device, no
/// active port, GSYNC_IB_DISABLE). A pair of ranks on different hosts (or any pair, with
/// GSYNC_IB_INTRA=1) whose ports share a link layer gets a verbs link; both sides decide from
/// what both published. `finish` exchanges the queue pairs' addresses in one store key per rank,
/// moves every queue pair to RTS, and waits until every linked peer has done the same before any
/// frame is written. Set-up code, compiled once.

#include "gsync/transport/links/verbs_link.hpp"

#if GSYNC_HAVE_VERBS
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gsync/bootstrap/store_client.hpp"
#include "gsync/core/host_options.hpp"
#include "gsync/detail/random.hpp"
#include "gsync/transport/links/link_setup.hpp"

namespace gsync::transport {

/// Rank-wide part of the verbs link type (see the file comment).
class verbs_endpoint {
 public:
  verbs_endpoint(const link_setup& s, const ib_options& o) : o_(o) {
    // A job on one host has no pair for verbs (unless GSYNC_IB_INTRA): nothing is loaded or published.
    if (!o_.intra && s.topo->hosts() <= 1) return;
    std::string rec = "0";
    try {
      rec = open(s);
    } catch (const error& e) {  // a port that cannot be opened is a reason to use TCP, not a failed job
      why_not_ = e.what();
      dev_.reset();
    }
    if (!dev_) s.log.info("verbs: not used (" + why_not_ + "); ranks on other hosts are reached over TCP");
    s.store->set(key("dev", s.rank), rec, s.dl);
  }
  verbs_endpoint(const verbs_endpoint&) = delete;
  verbs_endpoint& operator=(const verbs_endpoint&) = delete;

  /// A verbs link to `peer` when both have a port of one link layer and the pair crosses hosts
  /// (or GSYNC_IB_INTRA=1): opens `l` and returns true.
  bool connect(const link_setup& s, int peer, verbs_link& l) {
    if (!dev_) return false;
    const bool across = s.topo->host_of(peer) != s.topo->host_of(s.rank);
    if (!across && !o_.intra) return false;
    const std::string& theirs = record_of(s, peer);
    if (theirs.size() < 2 || theirs[0] != '1' || theirs[1] != (dev_->port().ethernet ? 'E' : 'I')) return false;
    verbs::qp_settings qs;
    qs.timeout = o_.timeout;
    qs.retry_cnt = o_.retry_cnt;
    l.open(dev_, qs, o_.ring_bytes);
    const std::uint32_t psn = static_cast<std::uint32_t>(gsync::detail::random::u64()) & 0xffffff;
    linked_.push_back({peer, &l, psn});
    return true;
  }

  /// Exchanges the queue pairs' addresses, connects them, and waits until every linked peer has.
  void finish(const link_setup& s) {
    if (linked_.empty()) return;
    std::string mine;
    for (const auto& x : linked_) {
      const verbs::qp_address a = x.link->address(x.psn);
      put(mine, x.peer);
      mine.append(reinterpret_cast<const char*>(&a), sizeof a);
    }
    s.store->set(key("qp", s.rank), mine, s.dl);
    std::vector<std::string> keys;
    for (const auto& x : linked_) keys.push_back(key("qp", x.peer));
    const std::vector<std::string> theirs = s.store->get_many(keys, s.dl);
    for (std::size_t i = 0; i < linked_.size(); ++i) {
      const auto& x = linked_[i];
      const verbs::qp_address a = address_for(theirs[i], s.rank, x.peer);
      x.link->connect(a, x.psn, x.peer);
      if (s.log.enabled(log_level::info))
        s.log.info("verbs: rank " + std::to_string(s.rank) + " <-> rank " + std::to_string(x.peer) + " on " + dev_->port().name() + " (" +
                   (dev_->port().ethernet ? "RoCE" : "InfiniBand") + ", GID " + verbs::gid_text(dev_->port().gid) +
                   (dev_->port().ethernet ? "" : ", LID " + std::to_string(dev_->port().lid)) + ", MTU " +
                   std::to_string(verbs::mtu_bytes(std::min<int>(dev_->port().active_mtu, a.mtu))) + ", peer QP " + std::to_string(a.qpn) + ")");
    }
    // Both sides at RTS before either writes: a write to a queue pair not yet at RTR is dropped.
    s.store->set(key("up", s.rank), "1", s.dl);
    keys.clear();
    for (const auto& x : linked_) keys.push_back(key("up", x.peer));
    s.store->get_many(keys, s.dl);
  }

  /// "verbs on mlx5_0:1 to 7 peers" for the set-up log ("" when no peer uses verbs).
  std::string report() const {
    if (linked_.empty()) return {};
    return "verbs on " + dev_->port().name() + " to " + std::to_string(linked_.size()) + " peer" + (linked_.size() == 1 ? "" : "s");
  }
  /// Why this rank does not use verbs ("" when it can).
  const std::string& why_not() const noexcept { return why_not_; }

 private:
  struct pending {
    int peer;
    verbs_link* link;
    std::uint32_t psn;
  };

  // Loads the library, finds and opens this rank's port; returns the record peers read:
  // "1I <port>" / "1E <port>" (InfiniBand / Ethernet), or "0" with `why_not_` set.
  std::string open(const link_setup& s) {
    if (!o_.enabled) return why_not_ = "GSYNC_IB_DISABLE=1", "0";
    const verbs::hca_filter filter(o_.hca);
    std::string why;
    const verbs::library* lib = verbs::library::load(o_.library, why);
    if (!lib) return why_not_ = why, "0";
    const verbs::discovery d = verbs::discover(*lib, filter, o_.gid_index);
    if (d.ports.empty()) return why_not_ = d.why_none, "0";
    // Ranks of one host spread over its ports, as NCCL spreads them over NICs.
    const int slot = s.topo->local_index(s.rank);
    lib->fork_init();  // registered pages stay with this process in a child made by fork (before any registration)
    dev_ = std::make_shared<const verbs::device>(*lib, d.ports[static_cast<std::size_t>(slot) % d.ports.size()]);
    const verbs::port_info& p = dev_->port();  // as the opened context sees it
    s.log.info("verbs: " + p.name() + " (" + (p.ethernet ? "RoCE, GID index " + std::to_string(p.gid_index) + " " + verbs::gid_text(p.gid)
                                                         : "InfiniBand, LID " + std::to_string(p.lid)) +
               ", MTU " + std::to_string(verbs::mtu_bytes(p.active_mtu)) + ")");
    return std::string("1") + (p.ethernet ? "E " : "I ") + p.name();
  }

  // `peer`'s device record; the first call reads every peer's in one store request.
  const std::string& record_of(const link_setup& s, int peer) {
    if (records_.empty()) {
      std::vector<std::string> keys;
      keys.reserve(static_cast<std::size_t>(s.size));
      for (int r = 0; r < s.size; ++r) keys.push_back(key("dev", r));
      records_ = s.store->get_many(keys, s.dl);
    }
    return records_[static_cast<std::size_t>(peer)];
  }

  // The address `peer` published for its queue pair to `me` (its key lists one per linked peer).
  static verbs::qp_address address_for(const std::string& v, int me, int peer) {
    constexpr std::size_t entry = sizeof(std::int32_t) + sizeof(verbs::qp_address);
    if (v.size() % entry != 0) throw error(errc::mismatch, "verbs: rank " + std::to_string(peer) + "'s queue pair addresses are malformed");
    for (std::size_t at = 0; at < v.size(); at += entry) {
      std::int32_t who = 0;
      std::memcpy(&who, v.data() + at, sizeof who);
      if (who != me) continue;
      verbs::qp_address a;
      std::memcpy(&a, v.data() + at + sizeof who, sizeof a);
      return a;
    }
    throw error(errc::mismatch, "verbs: rank " + std::to_string(peer) + " made no queue pair for rank " + std::to_string(me) +
                                    " (the two ranks disagree on the medium: do GSYNC_IB_* settings differ?)");
  }
  static void put(std::string& out, int v) {
    const std::int32_t x = v;
    out.append(reinterpret_cast<const char*>(&x), sizeof x);
  }
  static std::string key(const char* what, int rank) { return std::string("gsync/ib/") + what + "/" + std::to_string(rank); }

  ib_options o_;
  std::shared_ptr<const verbs::device> dev_;  // this rank's port (shared with its links), when usable
  std::string why_not_;
  std::vector<std::string> records_;  // every rank's device record (read once)
  std::vector<pending> linked_;       // peers with a verbs link, waiting for `finish`
};

}  // namespace gsync::transport

namespace gsync {
/// Verbs: priced as a network link (the mesh's probe measures links between hosts); host memory
/// only for now; waited for by the completion channel's descriptor, which turns readable (not
/// writable) when the peer's notice frees room; frames read in place from the ring.
template <>
struct link_traits<transport::verbs_link> {
  static constexpr link_costs costs{"verbs", cost_model::tcp_loopback(), /*shared_memory=*/false};
  static constexpr bool moves_host_memory = true;
  static constexpr bool moves_device_memory = false;
  static constexpr link_wait wait = link_wait::descriptor;
  static constexpr bool room_by_read = true;
  static constexpr bool reads_in_place = true;
  static constexpr std::size_t payload_align = 16;  ///< frames start 64-byte aligned, payloads 48 bytes in
  using endpoint = transport::verbs_endpoint;
  using options = transport::ib_options;
  static options options_from(const transport::host_options& o) { return o.ib; }
};
static_assert(link<transport::verbs_link>);
static_assert(transport::link_endpoint<transport::verbs_endpoint, transport::verbs_link>);
}  // namespace gsync

#endif  // GSYNC_HAVE_VERBS
