#pragma once
/// \file
/// The InfiniBand / RoCE verbs link type: one RC queue pair between two ranks on different hosts.
/// Each side owns a registered ring (GSYNC_IB_RING_BYTES) that only its peer writes: a frame
/// (the same 48-byte header as TCP and shared memory, then the payload) goes as RDMA writes with
/// immediate into the peer's ring, from a registered mirror of it on the sending side, at the
/// next 64-byte boundary, as a byte stream (a frame larger than the free room goes in pieces).
/// The immediate (network byte order) says how many ring bytes the write advances; the receiver
/// reads frames where they lie (a reduction reads them in place) and tells the sender what it has
/// freed, and how many receive requests it has posted again, in a zero-length write with
/// immediate of its own (a *notice*). So the sender never overruns the ring or the posted
/// receives (no receive-not-ready storms), nothing is queued without bound, and every arrival,
/// data or notice, is a completion on the link's own completion queue, whose channel's
/// descriptor the mesh polls like a socket.
/// A payload of at least `zero_copy_min` bytes inside a buffer the caller registered
/// (`communicator::register_memory`; verbs/user_memory.hpp) skips the mirror: the write gathers the
/// header from the mirror and the payload from where it lies, and the frame is complete only when
/// that write's completion says the peer has it (until then the caller's bytes stay in use).
/// Liveness and failure notices stay on the pair's TCP connection (the mesh's); a completion in
/// error loses the link with the status and vendor code named (`link_io::why`).
/// Set-up (device, queue pair, the exchange through the store): verbs_endpoint.hpp.

#include "gsync/verbs/resources.hpp"
#include "gsync/verbs/ring_reader.hpp"

#if GSYNC_HAVE_VERBS
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync::transport {

/// One RC queue pair to a peer (see the file comment). Made by its endpoint (`open`, then
/// `connect` once both sides published their addresses); movable until opened.
class verbs_link {
 public:
  using frame = frame_header;
  static constexpr std::string_view name = "verbs";
  /// Payloads from this size up are written from a registered user buffer without a copy; below
  /// it the copy costs less than waiting for the write's completion.
  static constexpr std::size_t zero_copy_min = 32 << 10;
  /// Frames posted and not yet wholly written into the peer's ring.
  std::deque<send_op> q;

  verbs_link() = default;
  verbs_link(verbs_link&&) = default;
  verbs_link& operator=(verbs_link&&) = default;
  ~verbs_link() { close(); }

  /// Creates the queue pair, the ring the peer writes and its mirror here (`ring_bytes`, a
  /// multiple of 64), and posts the receive requests.
  /// The link shares the device (it is closed after its last link).
  void open(std::shared_ptr<const verbs::device> d, const verbs::qp_settings& s, std::size_t ring_bytes) {
    qp_ = verbs::queue_pair(*d, s);
    ring_ = verbs::ring_reader(*d, ring_bytes);
    mirror_ = verbs::registered(*d, ring_bytes, /*remote_write=*/false);
    lib_ = &d->lib();
    port_ = d->port().name();
    dev_ = std::move(d);
    for (int i = 0; i < s.recv_depth; ++i) post_recv();
    reposted_ = 0;
  }
  /// This side's address for the peer (queue pair, ring, receive depth).
  verbs::qp_address address(std::uint32_t psn) const {
    verbs::qp_address a = qp_.address(psn);
    a.ring_addr = ring_.memory().addr();
    a.ring_rkey = ring_.memory().rkey();
    a.ring_bytes = static_cast<std::uint32_t>(ring_.size());
    return a;
  }
  /// Connects to `peer` (rank `peer_rank`, for messages): RTR then RTS.
  void connect(const verbs::qp_address& peer, std::uint32_t my_psn, int peer_rank) {
    if (peer.ring_bytes != ring_.size())
      throw error(errc::mismatch, "verbs: rank " + std::to_string(peer_rank) + " has a ring of " + std::to_string(peer.ring_bytes) +
                                      " bytes, this rank " + std::to_string(ring_.size()) + " (GSYNC_IB_RING_BYTES must agree)");
    qp_.connect(peer, my_psn);
    peer_ring_ = peer.ring_addr;
    peer_rkey_ = peer.ring_rkey;
    peer_depth_ = peer.recv_depth;
    peer_rank_ = peer_rank;
  }
  /// True once connected and not closed.
  bool connected() const noexcept { return peer_ring_ != 0; }
  /// The completion channel's descriptor, for the mesh's poll(2).
  int fd() const noexcept { return qp_.fd(); }
  /// The adapter and port ("mlx5_0:1").
  std::string_view where() const noexcept { return port_; }
  /// The device's asynchronous event descriptor (shared by the links on the device), for the
  /// mesh's poll(2) while it waits: a port or device error, or this queue pair's, ends the wait.
  int event_fd() const noexcept { return dev_ ? dev_->async_fd() : -1; }
  /// Reads the device's asynchronous events; `err` with `why` once one says this link is lost.
  link_io take_events() {
    watch_device();
    return why_.empty() ? link_io{} : lost(link_io{});
  }
  /// The queue pair (the endpoint matches asynchronous events to it).
  const verbs::queue_pair& queue() const noexcept { return qp_; }
  /// Marks the link lost by an event seen elsewhere (a fatal asynchronous event).
  void mark_failed(std::string why) {
    if (why_.empty()) why_ = std::move(why);
  }

  /// Registers `bytes` with this link's device for zero-copy sends (see the file comment); the
  /// registration lasts while the result (or a write reading the buffer) does. Null when closed.
  std::shared_ptr<const registration_hold> register_memory(std::span<const std::byte> bytes) const {
    return dev_ && !bytes.empty() ? dev_->register_user(bytes) : nullptr;
  }
  /// Frames of `q` not yet wholly written (the rest wait for their writes' completions).
  std::size_t unsent() const noexcept { return q.size() - written_.size(); }
  /// Drops the frames not yet wholly written (a failing rank's; the written ones stay until their
  /// completions, or the queue pair's end); returns how many.
  std::size_t drop_unsent() noexcept {
    const std::size_t n = unsent();
    q.erase(q.begin() + static_cast<std::ptrdiff_t>(written_.size()), q.end());
    cur_region_.reset();
    return n;
  }

  /// Posts a frame: queued; `pump` writes it.
  void post(const frame_header& h, const std::byte* p, std::size_t n) { q.push_back(send_op{h, p, n, 0}); }
  /// Writes the frame at once when nothing is queued and the peer's ring has room for all of it.
  bool post_direct(const frame_header& h, const std::byte* p, std::size_t n) {
    if (!q.empty() || !why_.empty() || !connected() || user_region_for(p, n)) return false;  // zero-copy: through the queue
    poll();
    // Whole or not at all: at most two writes (one at the ring's end), and a notice's slot kept.
    // Otherwise the frame is queued, and the mesh pumps it (and arms the channel) before it sleeps.
    if (room() < frame_bytes(n) || !imm_budget(3) || !send_budget(3)) return false;
    send_op op{h, p, n, 0};
    write_some(op, nullptr);
    return true;
  }

  /// Writes as much of the queue into the peer's ring as it has room for; adds the frames whose
  /// bytes are all written to `completed` (the caller's buffers are free then: the bytes are in
  /// the mirror), a zero-copy frame once its last write has completed. `err` with `why` once the
  /// link is lost.
  link_io pump(std::size_t& completed) {
    link_io io;
    poll();
    if (!why_.empty()) return lost(io);
    for (;;) {
      retire(completed);
      while (q.size() > written_.size() && connected()) {
        send_op& op = q[written_.size()];
        if (op.done == 0) cur_region_ = user_region_for(op.p, op.n);  // (a frame not started may be another by now)
        const std::size_t before = op.done;
        if (!write_some(op, cur_region_.get())) break;
        io.bytes += op.done - before;
        if (op.done != sizeof(frame_header) + op.n) break;
        const std::uint64_t wait_for = cur_region_ ? last_user_write_ : 0;
        written_.push_back(in_flight{std::move(cur_region_), wait_for});
        retire(completed);
      }
      // Before the mesh sleeps on the descriptor; a notice taken on the way may have freed room.
      if (q.empty() || !arm_if_idle()) break;
    }
    if (!why_.empty()) return lost(io);
    return io;
  }

  /// Takes the next frame's header once it has arrived whole, and up to `n` payload bytes that
  /// came with it into `dst`.
  link_io try_header(frame_header& h, std::byte* dst, std::size_t n) {
    link_io io;
    poll();
    if (ring_.ready() < sizeof h && (!arm_if_idle() || ring_.ready() < sizeof h)) {
      if (!why_.empty()) return lost(io);
      return io;
    }
    ring_.copy_out(reinterpret_cast<std::byte*>(&h), sizeof h);
    io.done = true;
    const std::size_t k = std::min<std::size_t>({n, ring_.ready(), static_cast<std::size_t>(h.bytes)});
    if (k) ring_.copy_out(dst, k);
    io.bytes = k;
    return io;
  }
  /// Takes what has arrived of the payload, up to `want`: copied to `dst`, or handed to `*consume`
  /// where it lies, in pieces that are multiples of `align`.
  link_io try_payload(std::byte* dst, std::size_t want, std::size_t align, detail::function_ref<void(std::span<const std::byte>)>* consume) {
    link_io io;
    if (want == 0) return io;
    poll();
    const auto available = [&] {
      const std::size_t a = std::min(want, ring_.ready());
      return consume ? a - a % std::max<std::size_t>(align, 1) : a;
    };
    std::size_t avail = available();
    if (avail == 0 && arm_if_idle()) avail = available();
    if (avail == 0) {
      if (!why_.empty()) return lost(io);
      return io;
    }
    if (!consume) ring_.copy_out(dst, avail);
    else ring_.consume(avail, align, *consume);
    io.bytes = avail;
    return io;
  }
  /// Ends a frame: skips to the next 64-byte boundary and tells the peer what it freed when due.
  void end_read() {
    ring_.end_frame();
    notice_if_due();
  }
  /// Copies the next frame's header when it has arrived whole, without taking it.
  bool peek_header(frame_header& h) const {
    auto& self = *const_cast<verbs_link*>(this);  // taking completions changes no frame
    self.poll();
    if (ring_.ready() < sizeof h && (!self.arm_if_idle() || ring_.ready() < sizeof h)) return false;
    ring_.copy_at(ring_.read(), reinterpret_cast<std::byte*>(&h), sizeof h);
    return true;
  }
  /// True once the queue pair failed (a completion in error, a fatal event).
  bool peer_gone() const noexcept { return !why_.empty(); }
  /// Starts closing: posts the write whose completion says the peer has every write before it,
  /// and starts the 2 s that `close` waits for it at most; with `peer_left`, waits for nothing.
  void close_begin(bool peer_left) noexcept {
    if (closing_) return;
    closing_ = true;
    close_by_ = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    if (peer_left) mark_failed("the peer has left");
    else fence();
  }
  /// Waits, at most a few seconds, until the peer has acknowledged every write posted (so that
  /// what was handed over arrives, as a closed socket still delivers its data), then destroys the
  /// queue pair and frees the rings.
  void close() noexcept {
    close_begin(false);
    drain();
    closing_ = false;
    qp_ = verbs::queue_pair{};
    written_.clear();  // the user buffers' registrations end after the queue pair that read them
    cur_region_.reset();
    ring_ = verbs::ring_reader{};
    mirror_ = verbs::registered{};
    peer_ring_ = 0;
    dev_.reset();
  }

  /// Sends and receives counted so far (tests and reports): writes of frames (those that read a
  /// registered user buffer among them), notices, ring bytes.
  struct counts {
    std::uint64_t data_writes = 0, notices = 0, ring_bytes = 0, zero_copy_writes = 0;
  };
  counts sent() const noexcept { return {data_writes_, notices_, sent_, zero_copy_writes_}; }

 private:
  static constexpr std::uint32_t notice_bit = 0x80000000u;
  // A notice's immediate: the bit, ring bytes freed (24 bits: a read may end anywhere in a frame,
  // and the writer may be waiting for a few bytes), receives posted again (7 bits).
  static constexpr std::uint32_t repost_bits = 7;
  static std::uint64_t align64(std::uint64_t v) noexcept { return (v + 63) & ~std::uint64_t{63}; }
  static std::size_t frame_bytes(std::size_t n) noexcept { return static_cast<std::size_t>(align64(sizeof(frame_header) + n)); }

  // Free bytes of the peer's ring, as its last notice says.
  std::size_t room() const noexcept { return ring_.size() - static_cast<std::size_t>(sent_ - freed_); }
  // True when `k` more writes with immediate keep within the receive requests the peer has posted.
  bool imm_budget(std::uint64_t k) const noexcept { return imm_posted_ + k - peer_reposted_ <= peer_depth_; }
  // True when `k` more send requests fit in the send queue.
  bool send_budget(std::uint64_t k) const noexcept {
    return send_posted_ + k - send_done_ <= static_cast<std::uint64_t>(qp_.settings().send_depth);
  }

  // The registration of a payload worth writing without a copy, or null.
  std::shared_ptr<const verbs::user_region> user_region_for(const std::byte* p, std::size_t n) const {
    return dev_ && p && n >= zero_copy_min ? dev_->regions().find(p, n) : nullptr;
  }
  // Pops the frames wholly written from the front of the queue, up to the first zero-copy one
  // whose last write has not completed.
  void retire(std::size_t& completed) {
    while (!written_.empty() && !q.empty() && (written_.front().last_write == 0 || send_done_ >= written_.front().last_write)) {
      written_.pop_front();
      q.pop_front();
      ++completed;
    }
  }

  // Writes what the peer's ring has room for of `op` (from op.done on), at most up to the ring's
  // end per write. The last write of a frame also counts the padding to the next 64-byte boundary.
  // Payload bytes come from `user` (registered) where given, else through the mirror.
  // False when nothing could be written.
  bool write_some(send_op& op, const verbs::user_region* user) {
    const std::size_t total = sizeof(frame_header) + op.n;
    bool any = false;
    while (op.done < total) {
      if (!imm_budget(2) || !send_budget(2)) break;  // room for a notice of our own after it
      const std::size_t at = static_cast<std::size_t>(sent_ % ring_.size());
      const std::size_t last = total - op.done;
      const std::size_t pad = static_cast<std::size_t>(align64(sent_ + last) - (sent_ + last));
      std::size_t len = std::min(last, ring_.size() - at);
      std::size_t fits = room();
      if (len == last && fits < len + pad) len = std::min(len, fits >= pad ? fits - pad : 0);  // the pad must fit with the end
      len = std::min(len, fits);
      if (len == 0) break;
      // Into the mirror: header bytes, then payload bytes.
      std::size_t k = 0;
      if (op.done < sizeof(frame_header)) {
        const std::size_t hk = std::min(len, sizeof(frame_header) - op.done);
        std::memcpy(mirror_.data() + at, reinterpret_cast<const std::byte*>(&op.h) + op.done, hk);
        k = hk;
      }
      const bool ends = op.done + len == total;
      const std::uint32_t adv = static_cast<std::uint32_t>(len + (ends ? pad : 0));
      if (user && k < len) {  // header bytes (if any) from the mirror, the payload from where it lies
        const std::byte* from = op.p + (op.done + k - sizeof(frame_header));
        last_user_write_ = post_write(mirror_.data() + at, k, peer_ring_ + at, adv, /*signal=*/ends, from, len - k, user->lkey());
        ++zero_copy_writes_;
        user->zero_copy_writes.fetch_add(1, std::memory_order_relaxed);
      } else {
        if (k < len) std::memcpy(mirror_.data() + at + k, op.p + (op.done + k - sizeof(frame_header)), len - k);
        post_write(mirror_.data() + at, len, peer_ring_ + at, adv);
      }
      op.done += len;
      sent_ += adv;
      ++data_writes_;
      any = true;
    }
    return any;
  }

  // One RDMA write with immediate `imm` (host order here, network order on the wire) of `len`
  // bytes from the mirror at `src`, then `ulen` bytes from `usrc` (a user registration, `ukey`), to
  // the peer's ring at `dst`; signaled when `signal` says so, or as the quarter rule below does.
  // Returns the request's number.
  std::uint64_t post_write(const std::byte* src, std::size_t len, std::uint64_t dst, std::uint32_t imm, bool signal = false,
                           const std::byte* usrc = nullptr, std::size_t ulen = 0, std::uint32_t ukey = 0) {
    ibv_sge sge[2]{};
    int n = 0;
    if (len) sge[n++] = ibv_sge{reinterpret_cast<std::uintptr_t>(src), static_cast<std::uint32_t>(len), mirror_.lkey()};
    if (ulen) sge[n++] = ibv_sge{reinterpret_cast<std::uintptr_t>(usrc), static_cast<std::uint32_t>(ulen), ukey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    const std::uint64_t seq = ++send_posted_;
    wr.wr_id = seq;
    wr.sg_list = n ? sge : nullptr;
    wr.num_sge = n;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = dst;
    wr.wr.rdma.rkey = peer_rkey_;
    // Signal one request in a quarter of the send queue: its completion frees those before it.
    const int every = std::max(1, qp_.settings().send_depth / 4);
    if (signal || seq % static_cast<std::uint64_t>(every) == 0) wr.send_flags |= IBV_SEND_SIGNALED;
    if (len + ulen && len + ulen <= static_cast<std::size_t>(qp_.settings().max_inline)) wr.send_flags |= IBV_SEND_INLINE;
    ++imm_posted_;
    if (const int e = ibv_post_send(qp_.qp(), &wr, &bad)) fail("ibv_post_send: " + std::string(std::strerror(e)));
    return seq;
  }

  // A signaled zero-length write (no immediate: it takes no receive) completes after every write
  // before it (`fence`); `drain` polls for that until `close_by_`.
  void fence() noexcept {
    fence_seq_ = 0;
    if (!connected() || !why_.empty() || !qp_.cq() || send_done_ == send_posted_) return;
    try {
      while (!send_budget(1) && why_.empty() && std::chrono::steady_clock::now() < close_by_) poll();
      if (!why_.empty() || !send_budget(1)) return;
      ibv_send_wr wr{};
      ibv_send_wr* bad = nullptr;
      const std::uint64_t seq = ++send_posted_;
      wr.wr_id = seq;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = peer_ring_;
      wr.wr.rdma.rkey = peer_rkey_;
      if (ibv_post_send(qp_.qp(), &wr, &bad) == 0) fence_seq_ = seq;
    } catch (...) {  // poll's messages allocate; closing goes on regardless
    }
  }
  void drain() noexcept {
    try {
      while (fence_seq_ && send_done_ < fence_seq_ && why_.empty() && std::chrono::steady_clock::now() < close_by_) poll();
    } catch (...) {
    }
  }

  // A notice to the peer: ring bytes freed and receive requests posted again since the last one.
  void notice_if_due() {
    if (!why_.empty() || !connected()) return;
    for (;;) {  // more than one notice holds, when more was freed than one says
      const std::uint64_t freed = ring_.read() - noticed_read_, reposts = reposted_ - noticed_reposts_;
      const bool due = freed >= ring_.size() / 4 || (ring_.ready() == 0 && freed > 0) ||
                       reposts >= static_cast<std::uint64_t>(qp_.settings().recv_depth) / 4;
      if (!due || !imm_budget(1) || !send_budget(1)) return;
      const std::uint64_t bytes = std::min<std::uint64_t>(freed, (std::uint64_t{1} << (31 - repost_bits)) - 1);
      const std::uint64_t r = std::min<std::uint64_t>(reposts, (std::uint64_t{1} << repost_bits) - 1);
      post_write_zero(notice_bit | static_cast<std::uint32_t>(bytes << repost_bits) | static_cast<std::uint32_t>(r));
      noticed_read_ += bytes;
      noticed_reposts_ += r;
      ++notices_;
    }
  }
  void post_write_zero(std::uint32_t imm) { post_write(mirror_.data(), 0, peer_ring_, imm); }

  void post_recv() {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = 0;
    wr.num_sge = 0;  // writes with immediate land in the ring; the request only takes the immediate
    if (const int e = ibv_post_recv(qp_.qp(), &wr, &bad)) fail("ibv_post_recv: " + std::string(std::strerror(e)));
    ++reposted_;
  }

  // Takes every completion there is: arrivals (data: ring bytes; notices: room and receives the
  // peer freed), and the send queue's signaled completions.
  void poll() {
    if (!qp_.cq()) return;
    if ((++polls_ & 255) == 0) watch_device();
    if (armed_ && qp_.take_events()) armed_ = false;
    ibv_wc wc[16];
    for (;;) {
      const int n = ibv_poll_cq(qp_.cq(), 16, wc);
      if (n < 0) {
        fail("ibv_poll_cq failed");
        return;
      }
      for (int i = 0; i < n; ++i) take(wc[i]);
      if (n < 16) break;
    }
    notice_if_due();
  }
  void take(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS) {
      if (why_.empty())
        fail("a " + std::string(wc.wr_id == 0 ? "receive from" : "write to") + " rank " + std::to_string(peer_rank_) + " failed: " +
             verbs::wc_status_text(*lib_, wc.status) + " (vendor error 0x" + hex(wc.vendor_err) + ") on " + port_);
      return;
    }
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      const std::uint32_t imm = ntohl(wc.imm_data);
      if (imm & notice_bit) {
        freed_ += (imm & ~notice_bit) >> repost_bits;
        peer_reposted_ += imm & ((1u << repost_bits) - 1);
      } else {
        ring_.arrived(imm);
      }
      post_recv();
    } else if (wc.opcode == IBV_WC_RDMA_WRITE) {
      send_done_ = std::max<std::uint64_t>(send_done_, wc.wr_id);
    }
  }

  // Before the mesh sleeps on the descriptor: asks for an event on the next completion, then looks
  // once more (a completion that came before the request raises no event). True when that look
  // took completions: the caller goes on with them instead of sleeping.
  bool arm_if_idle() {
    if (armed_ || !qp_.cq() || !why_.empty()) return false;  // (the device's events wake the sleep itself: event_fd)
    if (ibv_req_notify_cq(qp_.cq(), 0) != 0) {
      fail("ibv_req_notify_cq failed");
      return false;
    }
    armed_ = true;
    ibv_wc wc[16];
    int took = 0;
    for (;;) {
      const int n = ibv_poll_cq(qp_.cq(), 16, wc);
      for (int i = 0; i < n; ++i) take(wc[i]);
      took += n > 0 ? n : 0;
      if (n < 16) break;
    }
    if (took) notice_if_due();
    return took > 0;
  }

  // The device's asynchronous events: a fatal one for the device, its port or this queue pair
  // loses the link (a completion in error usually says so first).
  void watch_device() {
    if (!dev_ || !why_.empty()) return;
    dev_->watch();
    if (std::string t = dev_->failed(qp_.qpn()); !t.empty()) fail(t + " (link to rank " + std::to_string(peer_rank_) + ")");
  }

  void fail(std::string why) {
    if (why_.empty()) why_ = "verbs: " + std::move(why);
  }
  link_io lost(link_io io) const {
    io.err = EIO;
    io.why = why_.c_str();
    return io;
  }
  static std::string hex(std::uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
  }

  std::shared_ptr<const verbs::device> dev_;
  const verbs::library* lib_ = nullptr;
  std::string port_;           // "mlx5_0:1", for messages
  verbs::queue_pair qp_;
  verbs::ring_reader ring_;    // the peer writes here
  verbs::registered mirror_;   // what this side writes into the peer's ring, staged
  std::uint64_t peer_ring_ = 0;
  std::uint32_t peer_rkey_ = 0;
  std::uint64_t peer_depth_ = 0;
  int peer_rank_ = -1;
  // Sending: ring bytes written (`sent_`) and freed by the peer; writes with immediate posted and
  // receives the peer has posted again; send requests posted and completed.
  std::uint64_t sent_ = 0, freed_ = 0, imm_posted_ = 0, peer_reposted_ = 0, send_posted_ = 0, send_done_ = 0;
  // Receiving: receives posted again; what the last notice covered.
  std::uint64_t reposted_ = 0, noticed_read_ = 0, noticed_reposts_ = 0;
  std::uint64_t data_writes_ = 0, notices_ = 0, zero_copy_writes_ = 0;
  // Frames at the front of `q` wholly written; a zero-copy one is popped once its last write (a
  // signaled request) has completed, and keeps its buffer's registration until then.
  struct in_flight {
    std::shared_ptr<const verbs::user_region> region;
    std::uint64_t last_write = 0;  // 0: written through the mirror, done
  };
  std::deque<in_flight> written_;
  std::shared_ptr<const verbs::user_region> cur_region_;  // the frame being written: its payload's registration
  std::uint64_t last_user_write_ = 0;
  bool armed_ = false;
  bool closing_ = false;
  std::uint64_t fence_seq_ = 0;  // the closing write's request, 0 when none is awaited
  std::chrono::steady_clock::time_point close_by_{};
  std::uint32_t polls_ = 0;  // the device's events are looked at every 256 polls
  std::string why_;  // why the link is lost ("" while it works)
};

}  // namespace gsync::transport

#endif  // GSYNC_HAVE_VERBS
