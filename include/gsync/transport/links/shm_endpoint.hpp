#pragma once
/// \file
/// The shared-memory link's endpoint (`link_endpoint`, transport/links/link_setup.hpp): this
/// rank's segment (a ring per rank of its host, which those ranks write, and its doorbell), the
/// segments of the same-host peers it mapped, and the host's choice of fences. A pair uses shared
/// memory only when both ranks created a segment, so both sides always agree; a rank whose
/// segment cannot be created (no /dev/shm room) says so in the store, and its host's ranks reach
/// it over the next link type (TCP). Layout and doorbells: transport/shm.hpp.

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gsync/bootstrap/store_client.hpp"
#include "gsync/core/error.hpp"
#include "gsync/detail/posix_shm.hpp"
#include "gsync/transport/links/link_setup.hpp"
#include "gsync/transport/links/shm_link.hpp"
#include "gsync/transport/shm.hpp"

namespace gsync::transport {

/// See the file comment.
class shm_endpoint final : public doorbell_owner {
 public:
  /// Creates this rank's segment when shared memory is on (`shm_options::enabled`) and its host runs
  /// other ranks, and publishes its name, ring size and whether this rank can use asymmetric
  /// fences under `gsync/shm/R` ("-": no segment).
  shm_endpoint(const link_setup& s, const shm_options& o) : local_(s.topo->ranks_on(s.topo->host_of(s.rank))) {
    std::string rec = "-";
    // Asymmetric fences (shm.hpp) take the fence off every message's path and put a membarrier
    // call on every sleep. Where ranks share cores they sleep often (their spin is short), so
    // there the plain fences stay. Every rank of the host must agree: each one says whether it
    // can, and the host uses them only if all can.
    const bool light_capable = o.light && !s.shares_cores && shm::asymmetric_fences_available();
    if (o.enabled && local_.size() > 1) {
      char what[48];
      std::snprintf(what, sizeof what, "%016llx-%d", static_cast<unsigned long long>(s.nonce), s.rank);
      const std::string nb = gsync::detail::shm_name(static_cast<long>(::getpid()), what);
      try {
        seg_ = shm::segment::create(nb, static_cast<std::uint32_t>(local_.size()), o.ring_bytes);
        shm::publish_probe(seg_.header());
        rec = nb + " " + std::to_string(o.ring_bytes) + (light_capable ? " 1" : " 0");
      } catch (const error& e) {
        s.log.warn(std::string(e.what()) + "; ranks on this host will talk to rank " + std::to_string(s.rank) + " over TCP");
      }
    }
    s.store->set("gsync/shm/" + std::to_string(s.rank), rec, s.dl);
    light_ = seg_ && light_capable;
    ring_bytes_ = o.ring_bytes;
    single_copy_min_ = o.single_copy_bytes;
    if (seg_) peer_segs_.resize(static_cast<std::size_t>(s.size));
  }
  shm_endpoint(const shm_endpoint&) = delete;
  shm_endpoint& operator=(const shm_endpoint&) = delete;

  /// Maps `peer`'s segment and attaches `l` to the two rings of the pair, when `peer` runs on
  /// this host and both ranks have a segment.
  bool connect(const link_setup& s, int peer, shm_link& l) {
    if (!seg_ || std::find(local_.begin(), local_.end(), peer) == local_.end()) return false;
    const std::string& r = record_of(s, peer);
    if (r == "-") return false;
    const auto sp = r.find(' ');
    if (sp == std::string::npos) throw error(errc::mismatch, "bad shared-memory record for rank " + std::to_string(peer) + ": " + r);
    // The store's values are not trusted: a checked size, and only a segment gsync names.
    std::size_t rb = 0;
    const auto sp_end = std::min(r.size(), r.find(' ', sp + 1));
    const auto [end, ec] = std::from_chars(r.data() + sp + 1, r.data() + sp_end, rb);
    if (ec != std::errc{} || end != r.data() + sp_end || !host_options::valid_ring_bytes(rb) || !r.starts_with("/gsync-") || r.find('/', 1) < sp)
      throw error(errc::mismatch, "bad shared-memory record for rank " + std::to_string(peer) + ": " + r.substr(0, 200));
    const auto sp2 = r.find(' ', sp + 1);
    if (sp2 == std::string::npos || r.substr(sp2 + 1) != "1") light_ = false;
    auto& ps = peer_segs_[static_cast<std::size_t>(peer)];
    ps = shm::segment::open(r.substr(0, sp), static_cast<std::uint32_t>(local_.size()), rb);
    const std::uint32_t me = slot_of(s.rank), them = slot_of(peer);
    std::memset(ps.data(me), 0, rb);  // touch every page of our ring now, not on the first pass (shm::segment::create)
    l.attach(&ps.ctl(me), ps.data(me), rb, &seg_.ctl(them), seg_.data(them), ring_bytes_, &ps.bell());
    // Single copy: this rank reads the peer's large payloads from its memory if the kernel lets
    // it (the probe word reads back), which the flag in the pair's inbound ring tells the peer.
    // Not where ranks share cores: there the reader's copy takes a core another rank needs, and it
    // measured no faster than the ring (benchmarks/results/issue52/compare_ompi_shm.md, N = 4).
    l.set_single_copy(single_copy_min_);
    if (s.shares_cores) shares_cores_ = true;
    if (single_copy_min_ != 0 && !s.shares_cores) {
      int why = 0;
      if (shm::probe_peer(ps.header(), why)) {
        l.set_peer_process(ps.header().owner_pid);
        seg_.ctl(them).single_copy.store(1, std::memory_order_release);
        ++single_copy_;
      } else {
        refused_ += (refused_.empty() ? "" : ", ") + std::to_string(peer);
        refused_why_ = why;
      }
    }
    linked_.push_back(&l);
    return true;
  }
  /// Sets the host's choice of fences on every link, known once all are mapped.
  void finish(const link_setup&) {
    for (shm_link* l : linked_) l->set_light_fences(light_);
  }
  /// The fences this host's shared-memory pairs use, for the set-up log.
  std::string report() const {
    if (linked_.empty()) return {};
    std::string r = light_ ? "shared-memory fences: membarrier" : "shared-memory fences: full";
    if (shares_cores_ && single_copy_ == 0) r += "; no single copy (more ranks than cores)";
    if (single_copy_ > 0) r += "; single copy (process_vm_readv) from " + std::to_string(single_copy_) + " of " + std::to_string(linked_.size()) + " same-host peers";
    if (!refused_.empty())
      r += "; the kernel refuses single copy from rank(s) " + refused_ + " (" + std::strerror(refused_why_) +
           ": Yama ptrace_scope, seccomp, or another PID namespace): their large messages cross the ring in two copies";
    return r;
  }

  /// True when this rank has a segment (then its doorbell is where its waits sleep).
  explicit operator bool() const noexcept { return static_cast<bool>(seg_); }
  bool has_bell() const noexcept override { return static_cast<bool>(seg_); }
  /// This rank's doorbell, in its segment: the peers ring it when they write or free room.
  shm::doorbell& bell() noexcept override { return seg_.bell(); }
  /// True when every shared-memory rank of this host uses asymmetric fences (shm.hpp).
  bool light() const noexcept override { return light_; }
  /// Removes the segment's name once every peer has mapped it (the mapping stays).
  void unlink() noexcept override { seg_.unlink(); }
  /// Raises this rank's `failed` word (rank lost first + 1, with `left` when it left normally)
  /// and rings every connected peer, so that same-host peers waiting for it learn at once.
  void mark_failed(std::uint32_t word) noexcept override {
    if (!seg_) return;
    seg_.bell().failed.store(word, std::memory_order_release);
    for (shm_link* l : linked_) l->wake_peer_strong();
  }

 private:
  std::uint32_t slot_of(int r) const {
    return static_cast<std::uint32_t>(std::find(local_.begin(), local_.end(), r) - local_.begin());
  }
  /// `peer`'s record. The first call reads every same-host peer's in one store request, so that
  /// a host of L ranks asks the store L times in all, not L (L - 1) times.
  const std::string& record_of(const link_setup& s, int peer) {
    if (records_.empty()) {
      std::vector<std::string> keys;
      keys.reserve(local_.size());
      for (int q : local_) keys.push_back("gsync/shm/" + std::to_string(q));
      records_ = s.store->get_many(keys, s.dl);
    }
    return records_[slot_of(peer)];
  }

  std::vector<int> local_;               // ranks of this host, by slot
  shm::segment seg_;                     // this rank's segment (its inbound rings and doorbell)
  std::vector<shm::segment> peer_segs_;  // same-host peers' segments, by rank
  std::vector<shm_link*> linked_;        // the links connected (the mesh's, stable from set-up on)
  std::vector<std::string> records_;     // same-host ranks' records, by slot (read once, record_of)
  bool light_ = false;
  std::size_t ring_bytes_ = 0;           // of this rank's inbound rings (shm_options)
  std::size_t single_copy_min_ = 0;      // smallest message sent by reference (shm_options)
  std::size_t single_copy_ = 0;          // peers whose memory this rank reads by reference
  bool shares_cores_ = false;            // ... none: this machine runs more ranks than cores
  std::string refused_;                  // peers whose memory the kernel would not let it read
  int refused_why_ = 0;                  // ... and the errno it gave
};

static_assert(link_endpoint<shm_endpoint, shm_link>);

}  // namespace gsync::transport
