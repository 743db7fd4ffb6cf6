#pragma once
/// \file
/// `link_port`: a peer's data link as the mesh drives it (transport/mesh/), whatever its type: the
/// `link` concept's calls behind one small virtual interface, with the type's traits as values.
/// The mesh is written once against it and compiled once (set-up, waits, failures); only
/// `link_port_of<L>` is a template: the link's calls, and the two loops that take a frame's
/// header and payload, which call the link directly and the mesh (`link_waiter`) only when the
/// link has nothing yet, so a message that has arrived costs no indirect call per piece
/// (benchmarks/results/issue52/link_port.md).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "gsync/core/concepts.hpp"
#include "gsync/core/memory_registration.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync::transport {

class link_port;

/// What a port's receive loops call when the link has nothing yet, or something unexpected: the
/// mesh, for the peer and operation being read.
class link_waiter {
 public:
  /// Waits until the link may have more (`expect`: payload bytes still to come, when known).
  virtual void wait(std::size_t expect) = 0;
  /// The link failed (`link_io::err`, and its account `why` when it gave one): throws.
  [[noreturn]] virtual void lost(int err, const char* why) = 0;
  /// `h`, read whole off `l` with `got` payload bytes at `have`, belongs to another communicator
  /// than the reader's: sets it aside for its owner.
  virtual void aside(link_port& l, const frame_header& h, const std::byte* have, std::size_t got) = 0;

 protected:
  ~link_waiter() = default;
};

/// Whether link type L's descriptor reports room for queued frames by turning readable rather than
/// writable (`link_traits<L>::room_by_read`, false where the traits do not say): an RDMA
/// completion channel, where the peer's notice of freed room arrives as a completion.
template <class L>
inline constexpr bool link_room_by_read = [] {
  if constexpr (requires { link_traits<L>::room_by_read; }) return bool(link_traits<L>::room_by_read);
  else return false;
}();

/// Whether link type L reports events from outside its data path (`event_fd`, `take_events`: the
/// `link` concept, core/concepts.hpp).
template <class L>
inline constexpr bool link_has_events = requires(L& l, const L& cl) {
  { cl.event_fd() } -> std::convertible_to<int>;
  { l.take_events() } -> std::same_as<link_io>;
};

/// Identity of a link type, without RTTI: `&link_key<L>` differs for every L.
template <class L>
inline constexpr char link_key = 0;

/// A peer's data link, type-erased (see the file comment). Each call is the `link` concept's
/// call of the same name (core/concepts.hpp); the link's traits are the constant members.
class link_port {
 public:
  const std::size_t type;           ///< position of the link's type in the mesh's list
  const std::string_view name;      ///< the medium, for logs ("tcp", "shm")
  const link_costs costs;           ///< `link_traits<L>::costs`
  const link_wait wait;             ///< `link_traits<L>::wait`
  const bool reads_in_place;        ///< `link_traits<L>::reads_in_place`
  const std::size_t payload_align;  ///< `link_traits<L>::payload_align`
  const bool room_by_read;          ///< `link_room_by_read<L>`: its descriptor turns readable, not writable, when queued frames can move
  std::deque<send_op>& q;           ///< the link's queue of frames not yet handed over

  virtual ~link_port() = default;
  link_port(const link_port&) = delete;
  link_port& operator=(const link_port&) = delete;

  virtual void post(const frame_header& h, const std::byte* p, std::size_t n) = 0;
  virtual bool post_direct(const frame_header& h, const std::byte* p, std::size_t n) = 0;
  virtual link_io pump(std::size_t& done) = 0;
  virtual link_io try_header(frame_header& h, std::byte* dst, std::size_t n) = 0;
  virtual link_io try_payload(std::byte* dst, std::size_t want, std::size_t align,
                              detail::function_ref<void(std::span<const std::byte>)>* consume) = 0;
  virtual void end_read() = 0;
  virtual bool peek_header(frame_header& h) const = 0;
  virtual bool peer_gone() const = 0;
  /// Ends the link (the `link` concept's `close`).
  virtual void close() = 0;
  /// Starts ending it (`l.close_begin`, where the link has one; else nothing).
  virtual void close_begin(bool peer_left) = 0;
  /// Descriptor links: the descriptor poll(2) watches; -1 for doorbell links.
  virtual int fd() const = 0;
  /// Where the link runs, when it says (`l.where()`: an adapter and port), else "".
  virtual std::string_view where() const = 0;
  /// The descriptor of events from outside the data path (an RDMA device's), or -1.
  virtual int event_fd() const = 0;
  /// Reads those events without blocking; `err` once they say the link is lost.
  virtual link_io take_events() = 0;
  /// Registers a user buffer with the link's device (`l.register_memory(bytes)`, where the link has
  /// one): what keeps the registration, or null.
  virtual std::shared_ptr<const registration_hold> register_memory(std::span<const std::byte> bytes) = 0;
  /// Frames of `q` not yet wholly handed over (`cl.unsent()` where the link has it, else all of
  /// `q`: the rest wait for the peer to confirm them).
  virtual std::size_t unsent() const = 0;
  /// Drops the frames not yet wholly handed over (`l.drop_unsent()`, else all of `q`); how many.
  virtual std::size_t drop_unsent() = 0;
  /// Doorbell links: whether the pending read can go on (false for descriptor links).
  virtual bool ready() const = 0;
  /// Doorbell links: the peer's `failed` word (0 for descriptor links).
  virtual std::uint32_t peer_failed() const = 0;

  /// Takes the next frame's header, waiting through `w` until it is there; returns the payload
  /// bytes that came with it (up to `n`, into dst). A frame of a communicator other than `comm`
  /// goes to `w.aside`, and the next one is taken.
  virtual std::size_t take_header(link_waiter& w, frame_header& h, std::byte* dst, std::size_t n, std::uint64_t comm) = 0;
  /// Takes `n` payload bytes, waiting through `w`: copied to dst, or (a link that reads in place)
  /// handed to `*consume` in pieces that are multiples of `align`; then ends the frame.
  virtual void take_payload(link_waiter& w, std::byte* dst, std::size_t n, std::size_t align,
                            detail::function_ref<void(std::span<const std::byte>)>* consume) = 0;

  /// The link itself when it is of type L, else null (for what only that type offers).
  template <class L>
  L* as() noexcept {
    return static_cast<L*>(typed(&link_key<L>));
  }
  template <class L>
  const L* as() const noexcept {
    return static_cast<const L*>(const_cast<link_port*>(this)->typed(&link_key<L>));
  }
  bool by_doorbell() const noexcept { return wait == link_wait::doorbell; }

 protected:
  link_port(std::size_t type_, std::string_view name_, link_costs costs_, link_wait wait_, bool in_place, std::size_t align,
            bool by_read, std::deque<send_op>& q_)
      : type(type_), name(name_), costs(costs_), wait(wait_), reads_in_place(in_place), payload_align(align), room_by_read(by_read), q(q_) {}
  virtual void* typed(const void* key) noexcept = 0;
};

/// `link_port` over a link of type L: owns it, or drives one the mesh owns (its own TCP
/// connection to the peer, when that carries the data).
template <link L>
class link_port_of final : public link_port {
 public:
  using traits = link_traits<L>;
  /// A port owning a link (connected by its endpoint afterwards, through `link()`).
  explicit link_port_of(std::size_t type) : link_port_of(type, std::make_unique<L>()) {}
  /// A port driving `l`, which the caller owns and keeps at its address while the port lives.
  link_port_of(std::size_t type, L& l) : link_port(type, L::name, traits::costs, traits::wait, traits::reads_in_place, traits::payload_align, link_room_by_read<L>, l.q), l_(&l) {}

  L& link() noexcept { return *l_; }

  void post(const frame_header& h, const std::byte* p, std::size_t n) override { l_->post(h, p, n); }
  bool post_direct(const frame_header& h, const std::byte* p, std::size_t n) override { return l_->post_direct(h, p, n); }
  link_io pump(std::size_t& done) override { return l_->pump(done); }
  link_io try_header(frame_header& h, std::byte* dst, std::size_t n) override { return l_->try_header(h, dst, n); }
  link_io try_payload(std::byte* dst, std::size_t want, std::size_t align,
                      detail::function_ref<void(std::span<const std::byte>)>* consume) override {
    return l_->try_payload(dst, want, align, consume);
  }
  void end_read() override { l_->end_read(); }
  bool peek_header(frame_header& h) const override { return l_->peek_header(h); }
  bool peer_gone() const override { return l_->peer_gone(); }
  void close() override { l_->close(); }
  void close_begin(bool peer_left) override {
    if constexpr (requires(L& l) { l.close_begin(true); }) l_->close_begin(peer_left);
  }
  int fd() const override {
    if constexpr (traits::wait == link_wait::descriptor) return l_->fd();
    else return -1;
  }
  std::string_view where() const override {
    if constexpr (requires(const L& cl) { { cl.where() } -> std::convertible_to<std::string_view>; }) return l_->where();
    else return {};
  }
  int event_fd() const override {
    if constexpr (link_has_events<L>) return l_->event_fd();
    else return -1;
  }
  link_io take_events() override {
    if constexpr (link_has_events<L>) return l_->take_events();
    else return {};
  }
  std::size_t unsent() const override {
    if constexpr (requires(const L& cl) { { cl.unsent() } -> std::convertible_to<std::size_t>; }) return l_->unsent();
    else return l_->q.size();
  }
  std::size_t drop_unsent() override {
    if constexpr (requires(L& l) { { l.drop_unsent() } -> std::convertible_to<std::size_t>; }) {
      return l_->drop_unsent();
    } else {
      const std::size_t n = l_->q.size();
      l_->q.clear();
      return n;
    }
  }
  std::shared_ptr<const registration_hold> register_memory(std::span<const std::byte> bytes) override {
    if constexpr (requires(L& l) { { l.register_memory(bytes) } -> std::convertible_to<std::shared_ptr<const registration_hold>>; })
      return l_->register_memory(bytes);
    else return nullptr;
  }
  bool ready() const override {
    if constexpr (traits::wait == link_wait::doorbell) return l_->ready();
    else return false;
  }
  std::uint32_t peer_failed() const override {
    if constexpr (traits::wait == link_wait::doorbell) return l_->peer_failed();
    else return 0;
  }

  std::size_t take_header(link_waiter& w, frame_header& h, std::byte* dst, std::size_t n, std::uint64_t comm) override {
    for (;;) {
      const link_io io = l_->try_header(h, dst, n);
      if (io.done) {
        if (h.magic == frame_magic && h.fp.comm != comm) [[unlikely]] {
          w.aside(*this, h, dst, io.bytes);
          continue;
        }
        return io.bytes;
      }
      if (io.err) w.lost(io.err, io.why);
      w.wait(n);
    }
  }
  void take_payload(link_waiter& w, std::byte* dst, std::size_t n, std::size_t align,
                    detail::function_ref<void(std::span<const std::byte>)>* consume) override {
    std::size_t got = 0;
    while (got < n) {
      const link_io io = l_->try_payload(consume ? nullptr : dst + got, n - got, align, consume);
      if (io.bytes) {
        got += io.bytes;
        continue;
      }
      if (io.err) w.lost(io.err, io.why);
      w.wait(n - got);
    }
    l_->end_read();
  }

 private:
  link_port_of(std::size_t type, std::unique_ptr<L> own)
      : link_port(type, L::name, traits::costs, traits::wait, traits::reads_in_place, traits::payload_align, link_room_by_read<L>, own->q), own_(std::move(own)), l_(own_.get()) {}
  void* typed(const void* key) noexcept override { return key == &link_key<L> ? l_ : nullptr; }

  std::unique_ptr<L> own_;  // the link, when the port owns it
  L* l_;
};

}  // namespace gsync::transport
