#pragma once
/// \file
/// The shared-memory link type: two rings between two ranks of one host, the one this rank
/// writes in the peer's segment and the one the peer writes in this rank's (layout, stamps and
/// doorbells: transport/shm.hpp). Posting copies a frame into the peer's ring (at once when it
/// fits, else from the queue as room appears); reading takes the header once its stamp is there
/// and hands the payload over where it lies in the ring, so a reduction reads the peer's bytes in
/// place. Waiting, routing and the failure protocol are the mesh's (transport/mesh/); set-up
/// (segments, mapping) is transport/mesh/setup.ipp, which hands the rings over with `attach`.
/// A collective's payload of at least `set_single_copy`'s bytes goes by reference where the
/// consumer proved at set-up that it can read this process (transport/shm_single_copy.hpp): the
/// ring carries its address, the consumer copies it once (or, reducing, declines it and gets the
/// payload through the ring), and the frame completes when the consumer has answered.
/// What the choices of algorithms and memory paths read about it: `link_traits<shm_link>`.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <string_view>

#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/core/host_options.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/transport/frame.hpp"
#include "gsync/transport/shm.hpp"
#include "gsync/transport/shm_single_copy.hpp"

namespace gsync::transport {

/// A shared-memory connection between two ranks of one host (see the file comment).
class shm_link {
 public:
  using frame = frame_header;  ///< what `post` takes
  static constexpr std::string_view name = "shm";  ///< in logs
  shm_link() = default;
  shm_link(const shm_link&) = delete;  // one reader position per ring
  shm_link& operator=(const shm_link&) = delete;
  shm_link(shm_link&&) = default;
  shm_link& operator=(shm_link&&) = default;
  /// Bytes published per ring update while copying a large payload in.
  static constexpr std::size_t chunk = 64 << 10;

  /// Takes the rings: `out` (`out_data`, `out_cap` bytes) in the peer's segment, which this rank
  /// writes; `in` in this rank's segment, which the peer writes; `peer_bell` the peer's doorbell.
  void attach(shm::ring_ctl* out, std::byte* out_data, std::uint64_t out_cap, shm::ring_ctl* in, std::byte* in_data,
              std::uint64_t in_cap, shm::doorbell* peer_bell) noexcept {
    out_ = out, out_data_ = out_data, out_cap_ = out_cap, out_key_ = out->stamp_key;
    in_ = in, in_data_ = in_data, in_cap_ = in_cap, in_key_ = in->stamp_key;
    bell_ = peer_bell;
  }
  /// Wakes with asymmetric fences when every rank of the host uses them (transport/shm.hpp).
  void set_light_fences(bool light) noexcept { light_ = light; }
  /// True once attached.
  bool active() const noexcept { return out_ != nullptr; }
  /// Producer: sends collective payloads of at least `min_bytes` by reference when the consumer
  /// allows it (0: never).
  void set_single_copy(std::size_t min_bytes) noexcept { ref_min_ = min_bytes; }
  /// Consumer: the producer's process, whose memory by-reference messages point into.
  void set_peer_process(std::int64_t pid) noexcept { peer_pid_ = pid; }
  /// Bytes of a by-reference payload read per call (the progress loop gets control back between).
  static constexpr std::size_t ref_piece = 1 << 20;

  /// Frames posted and not yet fully copied into the peer's ring.
  std::deque<send_op> q;

  /// Posts a frame into the ring at once if nothing is queued before it and its stamp covers the
  /// whole payload and there is room; returns false (nothing written) otherwise.
  bool post_direct(const frame_header& h, const std::byte* p, std::size_t n) {
    if (!q.empty()) return false;
    std::uint64_t head = out_->head.load(std::memory_order_relaxed);
    if (shm::stamped_payload(shm::align64(head), n, out_cap_) != n || begin(head, h, p, n) == SIZE_MAX) return false;
    publish(head);
    return true;
  }
  /// Posts a frame: queued; `pump` copies it.
  void post(const frame_header& h, const std::byte* p, std::size_t n) { q.push_back(send_op{h, p, n, 0}); }

  /// Copies as much of the queue into the ring as there is room for, publishing as it goes; adds
  /// the frames completed to `completed`; `bytes` is nonzero when any byte moved or a
  /// by-reference frame was answered (a ring cannot fail: `err` stays 0). Messages start on
  /// 64-byte boundaries: [stamp][frame header][payload]; the stamp goes in once the header and the
  /// payload's stamped bytes are written (shm.hpp). A by-reference frame stays at the queue's
  /// front, nothing behind it moving, until the consumer answers: read (the frame is complete) or
  /// declined (its payload then follows the reference through the ring, as a plain frame's).
  link_io pump(std::size_t& completed) {
    const std::uint64_t cap = out_cap_;
    std::uint64_t head = out_->head.load(std::memory_order_relaxed);  // only this rank writes it
    const std::uint64_t head0 = head;
    bool moved = false, unpublished = false;
    if (!q.empty() && q.front().ref != 0) {
      auto& op = q.front();
      const std::uint64_t a = out_->ref_answer.load(std::memory_order_acquire);
      if ((a >> 1) != op.ref) return link_io{};  // not answered yet
      moved = true;
      if (a & 1) {
        op.ref = 0;
        op.done = sizeof(frame_header);  // declined: the payload goes on from its first byte, at `head`
      } else {
        q.pop_front();
        ++completed;
      }
    }
    while (!q.empty()) {
      auto& op = q.front();
      if (op.done == 0) {
        if (by_reference(op)) {
          if (begin_ref(head, op)) {
            op.ref = ++refs_sent_;
            op.done = sizeof(frame_header) + op.n;
            publish(head);
            moved = true, unpublished = false;
          }
          break;  // the answer comes later
        }
        const std::size_t first = begin(head, op.h, op.p, op.n);
        if (first == SIZE_MAX) break;
        op.done = sizeof(frame_header) + first;
        moved = unpublished = true;
      }
      while (op.done < sizeof(frame_header) + op.n) {
        if (!room(head, 1)) break;
        const std::size_t off = op.done - sizeof(frame_header);
        const std::uint64_t pos = head % cap;
        const std::size_t k = static_cast<std::size_t>(
            std::min<std::uint64_t>({cap - (head - out_tail_), cap - pos, op.n - off, chunk}));
        std::memcpy(out_data_ + pos, op.p + off, k);
        head += k;
        op.done += k;
        moved = true;
        publish(head);  // one release store and one wake-up check per piece, header and payload together
        unpublished = false;
      }
      if (unpublished) publish(head), unpublished = false;
      if (op.done < sizeof(frame_header) + op.n) break;
      q.pop_front();
      ++completed;
    }
    return link_io{moved ? static_cast<std::size_t>(std::max<std::uint64_t>(head - head0, 1)) : 0, false, 0};
  }

  /// Arms the wait for the next frame's header (its stamp); `ready` then says when it is there.
  void expect_header() noexcept {
    const std::uint64_t start = shm::align64(in_pos_);
    stamp_at_ = start % in_cap_;
    need_stamp_ = shm::stamp_of(start, in_key_);
  }
  /// True once the ring holds what the pending read needs: the next frame's stamp (after
  /// `expect_header`), or the payload bytes `read_some` last found missing.
  bool ready() const noexcept {
    if (need_stamp_) {
      const std::uint64_t st = shm::get_stamp(in_data_ + stamp_at_);
      return st == need_stamp_ || st == (need_stamp_ ^ ref_bit);
    }
    return in_->head.load(std::memory_order_acquire) >= need_head_;
  }
  /// Takes the header once `ready` (the stamped payload bytes are then known to be there too).
  /// The tail is published with the payload's first piece (or at its end, for an empty payload):
  /// one store and one wake-up check per small message.
  void take_header(frame_header& h) noexcept {
    static_assert(sizeof(frame_header) == shm::header_slot - shm::header_offset);
    const std::uint64_t start = shm::align64(in_pos_);
    std::memcpy(&h, in_data_ + stamp_at_ + shm::header_offset, sizeof h);
    if (shm::get_stamp(in_data_ + stamp_at_) != need_stamp_) [[unlikely]] {  // by reference: the payload's address follows
      std::memcpy(&ref_src_, in_data_ + stamp_at_ + shm::header_slot, sizeof ref_src_);
      ref_left_ = static_cast<std::size_t>(h.bytes);
      need_stamp_ = 0;
      in_known_ = in_pos_ = start + shm::ref_slot;
      return;
    }
    need_stamp_ = 0;
    in_pos_ = start + shm::header_slot;
    in_known_ = in_pos_ + shm::stamped_payload(start, static_cast<std::size_t>(h.bytes), in_cap_);
  }

  /// Copies the next frame's header if its stamp is there, without taking it (diagnostics look
  /// at what a peer sent without consuming it); false when none has arrived.
  bool peek_header(frame_header& h) const noexcept {
    const std::uint64_t start = shm::align64(in_pos_);
    const std::uint64_t st = shm::get_stamp(in_data_ + start % in_cap_);
    if (st != shm::stamp_of(start, in_key_) && st != shm::ref_stamp_of(start, in_key_)) return false;
    std::memcpy(&h, in_data_ + start % in_cap_ + shm::header_offset, sizeof h);
    return true;
  }

  /// Reads what is there now of the `want` payload bytes still expected: copies them to `dst`,
  /// or hands them to `consume` in pieces that are multiples of `align` (which divides 64, so no
  /// element straddles the ring's end). Returns the bytes taken; 0 when none can be taken now
  /// (the peer gets the header's room back, and `ready` turns true once they can).
  std::size_t read_some(std::byte* dst, std::size_t want, std::size_t align,
                        detail::function_ref<void(std::span<const std::byte>)>* consume) {
    const std::uint64_t tail = in_pos_;
    if (in_known_ < tail + want) in_known_ = std::max(in_known_, in_->head.load(std::memory_order_acquire));
    const std::uint64_t avail = in_known_ - tail;
    const std::uint64_t pos = tail % in_cap_;
    std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>({avail, in_cap_ - pos, want}));
    if (consume) k -= k % align;
    if (k == 0) {
      if (in_->tail.load(std::memory_order_relaxed) != tail) release();  // the header's bytes: room for the peer
      need_head_ = tail + std::min(align, want);
      return 0;
    }
    if (consume) (*consume)(std::span<const std::byte>(in_data_ + pos, k));
    else std::memcpy(dst, in_data_ + pos, k);
    in_pos_ = tail + k;
    release();
    return k;
  }
  /// Ends a read: releases what is still unreleased (an empty payload's header).
  void end_read() noexcept {
    if (in_->tail.load(std::memory_order_relaxed) != in_pos_) release();
  }

  /// The `link` concept's receive calls: `try_header` is `done` once the next frame's stamp is
  /// there (its header then taken; no payload comes with it, `dst` and `n` are unused).
  link_io try_header(frame_header& h, std::byte* /*dst*/, std::size_t /*n*/) noexcept {
    expect_header();
    if (!ready()) return {};
    take_header(h);
    return link_io{0, true, 0};
  }
  /// `read_some` in the concept's shape (a ring cannot fail: `err` stays 0).
  link_io try_payload(std::byte* dst, std::size_t want, std::size_t align,
                      detail::function_ref<void(std::span<const std::byte>)>* consume) {
    if (ref_left_) [[unlikely]] return read_ref(dst, want, align, consume);
    return link_io{read_some(dst, want, align, consume), false, 0};
  }

  /// Bytes read so far from the peer's ring.
  std::uint64_t read_position() const noexcept { return in_pos_; }
  /// Liveness: the peer's `failed` word (0 while it runs; see shm::doorbell).
  std::uint32_t peer_failed() const noexcept { return bell_->failed.load(std::memory_order_acquire); }
  /// Liveness for the `link` concept: true once the peer has failed or left (its `failed` word).
  bool peer_gone() const noexcept { return peer_failed() != 0; }
  /// Detaches from the rings (the segments belong to the mesh, which unmaps them).
  void close() noexcept { *this = shm_link{}; }
  /// Rings the peer's doorbell (it re-checks its waits).
  void wake_peer() const noexcept { shm::notify(*bell_, light_); }
  /// Rings the peer's doorbell with full fences (failure paths, where the host's choice of
  /// fences does not matter).
  void wake_peer_strong() const noexcept { shm::notify(*bell_); }

 private:
  // True when the ring has room for `need` more bytes at `head`. The consumer's tail is used as
  // last read: it only grows, so it errs on the safe side, and rereading it (a cache line the
  // consumer writes after every message) only when it shows too little room saves a cache-line
  // transfer per message.
  bool room(std::uint64_t head, std::uint64_t need) noexcept {
    if (head + need - out_tail_ <= out_cap_) return true;
    out_tail_ = out_->tail.load(std::memory_order_acquire);
    return head + need - out_tail_ <= out_cap_;
  }
  // Starts message (h, p, n) at the first 64-byte boundary from `head`, if there is room for its
  // header and stamped payload bytes: writes them, then the stamp, and moves `head` past them.
  // Returns the payload bytes written, or SIZE_MAX (nothing written) without room.
  std::size_t begin(std::uint64_t& head, const frame_header& h, const std::byte* p, std::size_t n) noexcept {
    const std::uint64_t start = shm::align64(head);
    const std::size_t first = shm::stamped_payload(start, n, out_cap_);
    if (!room(head, start - head + shm::header_slot + first)) return SIZE_MAX;
    std::byte* at = out_data_ + start % out_cap_;
    std::memcpy(at + shm::header_offset, &h, sizeof h);
    if (first) std::memcpy(at + shm::header_slot, p, first);
    shm::put_stamp(at, shm::stamp_of(start, out_key_));
    head = start + shm::header_slot + first;
    return first;
  }
  static constexpr std::uint64_t ref_bit = std::uint64_t{1} << 63;  // shm::ref_stamp_of

  // A collective's frame (not a point-to-point one, whose sender may count on an early
  // completion) large enough, to a consumer that can read this process.
  bool by_reference(const send_op& op) const noexcept {
    return ref_min_ != 0 && op.n >= ref_min_ && !is_p2p_tag(op.h.tag) && op.h.magic == frame_magic &&
           out_->single_copy.load(std::memory_order_acquire) != 0;
  }
  // Starts by-reference message `op` at the first 64-byte boundary from `head` if there is room:
  // header, the payload's address, then the stamp.
  bool begin_ref(std::uint64_t& head, const send_op& op) noexcept {
    const std::uint64_t start = shm::align64(head);
    if (!room(head, start - head + shm::ref_slot)) return false;
    std::byte* at = out_data_ + start % out_cap_;
    std::memcpy(at + shm::header_offset, &op.h, sizeof op.h);
    const std::uint64_t addr = reinterpret_cast<std::uintptr_t>(op.p);
    std::memcpy(at + shm::header_slot, &addr, sizeof addr);
    shm::put_stamp(at, shm::ref_stamp_of(start, out_key_));
    head = start + shm::ref_slot;
    return true;
  }
  // Reads the next piece of a by-reference payload from the producer's memory into `dst`; the
  // last piece answers "read", which frees the producer's buffer. A reduction (`consume`)
  // declines at once instead (shm_single_copy.hpp): the payload then comes through the ring.
  link_io read_ref(std::byte* dst, std::size_t want, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)>* consume) {
    if (consume) {
      ref_left_ = 0;
      in_->ref_answer.store((++refs_taken_ << 1) | 1, std::memory_order_release);
      release();  // the reference's slot, and the wake-up the producer waits for
      return link_io{read_some(dst, want, align, consume), false, 0};
    }
    const std::size_t k = std::min({want, ref_left_, ref_piece});
    if (const int e = shm::read_peer(peer_pid_, ref_src_, dst, k)) return link_io{0, false, e};
    // A producer that failed meanwhile may have freed the buffer: what was read cannot be trusted.
    if (peer_failed()) return link_io{0, false, link_io::closed};
    ref_src_ += k;
    ref_left_ -= k;
    if (ref_left_ == 0) {
      in_->ref_answer.store(++refs_taken_ << 1, std::memory_order_release);
      release();
    }
    return link_io{k, false, 0};
  }
  // Publishes the head (release) and wakes the consumer if it sleeps.
  void publish(std::uint64_t head) noexcept {
    out_->head.store(head, std::memory_order_release);
    shm::notify(*bell_, light_);
  }
  // Publishes what this rank has read, waking the peer if it waits for room.
  void release() noexcept {
    in_->tail.store(in_pos_, std::memory_order_release);
    shm::notify(*bell_, light_);
  }

  shm::ring_ctl* out_ = nullptr;  // ring this rank writes, in the peer's segment
  std::byte* out_data_ = nullptr;
  std::uint64_t out_cap_ = 0;
  std::uint64_t out_tail_ = 0;    // the consumer's tail as last read (reread only when short of room)
  std::uint64_t out_key_ = 0;     // stamp key of `out` (shm.hpp)
  shm::ring_ctl* in_ = nullptr;   // ring the peer writes, in this rank's segment
  std::byte* in_data_ = nullptr;
  std::uint64_t in_cap_ = 0;
  std::uint64_t need_head_ = 0;   // a wait on `in` ends once head reaches this
  std::uint64_t need_stamp_ = 0;  // ... or, when not 0, once this stamp is at in_data + stamp_at
  std::uint64_t stamp_at_ = 0;
  std::uint64_t in_known_ = 0;    // `in` holds bytes up to here (a stamp or head said so)
  std::uint64_t in_key_ = 0;      // stamp key of `in`
  std::uint64_t in_pos_ = 0;      // bytes of `in` read; published as its tail after each piece
  shm::doorbell* bell_ = nullptr; // the peer's doorbell
  bool light_ = false;
  // Single copy (shm_single_copy.hpp). Producer side:
  std::size_t ref_min_ = 0;        // smallest payload sent by reference (0: none)
  std::uint64_t refs_sent_ = 0;    // by-reference messages written into `out` (the last one's number)
  // Consumer side:
  std::int64_t peer_pid_ = 0;      // the producer's process
  std::uint64_t ref_src_ = 0;      // where the by-reference payload being read goes on
  std::size_t ref_left_ = 0;       // its bytes still to read (0: none being read)
  std::uint64_t refs_taken_ = 0;   // by-reference messages answered on `in`

};

class shm_endpoint;  // transport/links/shm_endpoint.hpp

/// The shared-memory link's settings (its part of `host_options`, where the GSYNC_SHM_*
/// variables land: core/host_options.hpp says what each one does).
struct shm_options {
  bool enabled = true;                          ///< `host_options::shm`
  bool light = true;                            ///< `host_options::shm_light`
  std::size_t ring_bytes = 1 << 20;             ///< `host_options::shm_ring_bytes`
  std::size_t single_copy_bytes = 1 << 20;      ///< `host_options::shm_single_copy_bytes`
};

}  // namespace gsync::transport

namespace gsync {
/// Shared memory: the assumed shared-memory model (core/cost_model.hpp), host memory only; the
/// two ranks share memory, so on a machine with more ranks than cores the measured table of
/// algo/select.hpp applies.
template <>
struct link_traits<transport::shm_link> {
  static constexpr link_costs costs{"shm", cost_model::shared_memory(), /*shared_memory=*/true};
  static constexpr bool moves_host_memory = true;     ///< reads and writes pageable host memory
  static constexpr bool moves_device_memory = false;  ///< device memory must be staged through host memory
  static constexpr link_wait wait = link_wait::doorbell;  ///< the rank's futex doorbell (shm.hpp)
  static constexpr bool reads_in_place = true;  ///< a reduction reads the peer's bytes in the ring
  static constexpr std::size_t payload_align = 8;  ///< payloads start 8-byte aligned in the ring (shm.hpp)
  using endpoint = transport::shm_endpoint;  ///< rank-wide set-up (`link_endpoint`): the segments
  using options = transport::shm_options;    ///< its settings
  /// Its settings, from the mesh's.
  static options options_from(const transport::host_options& o) noexcept {
    return options{o.shm, o.shm_light, o.shm_ring_bytes, o.shm_single_copy_bytes};
  }
};
static_assert(link<transport::shm_link>);  // after its traits: the concept reads them
}  // namespace gsync
