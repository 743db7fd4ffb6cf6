#pragma once
/// \file
/// Every policy contract of gsync on one page.
///
/// gsync composes a collective at compile time from an element type, a reduction operator, an
/// algorithm and a transport. Each is a type checked by a concept declared here; a combination that
/// cannot work fails to compile with the concept's name in the diagnostic.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/core/cost_model.hpp"
#include "gsync/core/dtype.hpp"
#include "gsync/core/fingerprint.hpp"
#include "gsync/core/shrink_terms.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/detail/function_ref.hpp"

namespace gsync {

/// An element type gsync can move and reduce: float, double, int8..int64, uint8..uint64,
/// gsync::half, gsync::bfloat16.
template <class T>
concept element = is_element_v<T> && std::is_trivially_copyable_v<T>;

/// A reduction operator for elements of type T: a copyable function object that combines two
/// values of `accum_t<T>` into one. Optionally `op.finalize(value, world_size)` (see `finalizing_op`).
template <class Op, class T>
concept reduction_op = element<T> && std::copy_constructible<Op> &&
    requires(const Op& op, accum_t<T> a) {
      { op(a, a) } -> std::convertible_to<accum_t<T>>;
    };

/// An operator with a last-step transform applied once to each fully reduced element (e.g. avg).
template <class Op, class T>
concept finalizing_op = reduction_op<Op, T> && requires(const Op& op, accum_t<T> a, int n) {
  { op.finalize(a, n) } -> std::convertible_to<accum_t<T>>;
};

/// True when neither `op(a, b)` nor its finalize may throw (declared noexcept). The element loops
/// are noexcept exactly then; for an operator that may throw, the host loops catch what it throws
/// and the operation fails on every rank (core/elem_kernels.hpp, core/primitives.hpp).
template <class Op, class T>
inline constexpr bool nothrow_op = [] {
  if constexpr (!std::is_nothrow_invocable_v<const Op&, accum_t<T>, accum_t<T>>) return false;
  else if constexpr (finalizing_op<Op, T>) return noexcept(std::declval<const Op&>().finalize(std::declval<accum_t<T>>(), 1));
  else return true;
}();

/// Identifies one message on the wire: the receiver states what it expects and the transport checks
/// the frame it gets against it, so out-of-order or wrong-size traffic is an error, never mixed data.
/// The fingerprint (core/fingerprint.hpp) is what the issuing rank passed to the call; a receiver
/// whose own differs raises `errc::mismatch` naming both calls.
struct message_id {
  std::uint32_t tag = 0;  ///< collective kind or user tag
  std::uint64_t seq = 0;  ///< the communicator's operation sequence number
  fingerprint fp{};       ///< the call's element type, count, operator, root and algorithm
};
/// Point-to-point messages carry `tag_p2p | user_tag` (user tags are 0..2^31-1), a tag space of
/// their own that no collective uses.
inline constexpr std::uint32_t tag_p2p = 0x80000000u;
/// True for the tag of a point-to-point message (send/recv), false for a collective's.
constexpr bool is_p2p_tag(std::uint32_t tag) noexcept { return (tag & tag_p2p) != 0; }

/// Absolute deadline of a blocking wait.
using deadline = std::chrono::steady_clock::time_point;

/// A transport moves bytes between ranks. It knows nothing of elements or algorithms.
///
/// - `post_send` queues a message and returns at once; the bytes must stay valid and unchanged until
///   `flush_sends` returns (a transport may read them directly, e.g. zero-copy between threads).
/// - `recv` blocks (progressing queued sends meanwhile) until the whole message is in `dst`.
/// - `recv_stream` blocks the same way but hands the payload to `consume(piece)` in order, in pieces
///   whose sizes are multiples of `align` bytes (the element size); this is how a reduction consumes
///   incoming data straight from a staging buffer (or from the sender's memory) without a full copy.
/// - `flush_sends` blocks until every queued send no longer needs its source bytes.
/// - `topo` tells which rank runs on which host (core/topology.hpp).
/// Every blocking call throws `gsync::error` (timeout at `dl`, peer_lost, mismatch, aborted).
/// Capabilities that only some transports have are traits (`transport_traits`), not virtual calls.
template <class X>
concept transport_policy = requires(X& x, int peer, message_id id, const std::byte* src, std::byte* dst,
                             std::size_t n, deadline dl,
                             detail::function_ref<void(std::span<const std::byte>)> consume) {
  { x.rank() } -> std::convertible_to<int>;
  { x.size() } -> std::convertible_to<int>;
  { x.name() } -> std::convertible_to<std::string_view>;
  x.post_send(peer, id, src, n);
  x.recv(peer, id, dst, n, dl);
  x.recv_stream(peer, id, n, n, consume, dl);
  x.flush_sends(dl);
  { x.topo() } -> std::convertible_to<const topology&>;  // placement of the ranks on hosts
};

/// A transport whose queued sends can be pushed forward without blocking: `x.progress_sends()`
/// writes what the links take now and returns. Sends otherwise move only inside the blocking calls,
/// so a schedule that computes between messages (grad/int8_exchange.hpp) calls it now and then to
/// keep the links busy. The in-process transport needs none (its receivers read the sender's
/// memory directly).
template <class X>
concept send_progress_transport = transport_policy<X> && requires(X& x) { x.progress_sends(); };

/// A transport that makes views of itself over a subset of its ranks, sharing its connections
/// (`communicator::split`): `x.split(members, id)` returns an endpoint whose rank i is
/// `members[i]` of `x` (this rank among them) and which stamps `id` (not 0, agreed by the
/// members, unique in the job) on its frames as `fingerprint::comm`; `x.comm_id()` is the
/// view's own (0 for the job's world). Views may be used at the same time from different threads.
template <class X>
concept splittable_transport = transport_policy<X> && requires(const X& x, const std::vector<int>& members, std::uint64_t id) {
  { x.split(members, id) } -> std::same_as<std::unique_ptr<X>>;
  { x.comm_id() } -> std::convertible_to<std::uint64_t>;
};

/// A transport that can go on without its failed ranks: `x.shrink(timeout, terms, report)`,
/// collective over the ranks still alive, returns a new endpoint over them, numbered in their old
/// order, when they satisfy `terms` (core/shrink_terms.hpp: a majority, or the caller's minimum),
/// else fails with `errc::excluded`; it fills `report` with what they agreed (see
/// transport/mesh/shrink.ipp for the TCP / shared-memory transport's agreement).
template <class X>
concept shrinkable_transport = transport_policy<X> && requires(const X& x, std::chrono::milliseconds t, const shrink_terms& terms, shrink_report& r) {
  { x.shrink(t, terms, r) } -> std::same_as<std::unique_ptr<X>>;
};

/// A transport that receives from whichever peer sends first (`gsync::recv_any`):
/// `x.probe_any(ids, dl)`, given one entry per rank of the endpoint, waits until for some peer p
/// with `ids[p].tag != 0` the next message of this endpoint's communicator from p carries
/// `ids[p]`'s tag and number, and returns that p without taking the message (a `recv` from p
/// then takes it). It fails as `recv` does: on a failure, a lost candidate, or at `dl`.
template <class X>
concept any_source_transport = transport_policy<X> && requires(X& x, std::span<const message_id> ids, deadline dl) {
  { x.probe_any(ids, dl) } -> std::convertible_to<int>;
};

/// A transport that counts the payload bytes it was handed to send (`x.payload_bytes_posted()`,
/// monotonic, frame headers excluded; read on the thread that runs the operations), so that
/// reports can say what was sent rather than what a schedule's formula predicts.
template <class X>
concept counting_transport = transport_policy<X> && requires(const X& x) {
  { x.payload_bytes_posted() } -> std::convertible_to<std::uint64_t>;
};

/// A transport that says what its links between ranks of one host cost (`x.local_costs()`, a
/// `link_costs`, core/cost_model.hpp), as its link types declare it (`link_traits<L>::costs`):
/// the automatic choice of algorithms prices the schedules with it. It must be the same on every
/// rank of a job (ranks that price differently choose different schedules and fail with
/// errc::mismatch). The TCP / shared-memory transport reports its shared-memory link's costs where
/// shared memory carries the same-host pairs, its TCP link's otherwise; the in-process transport
/// its own. A transport may instead declare
/// `transport_traits<X>::local_costs`; one that does neither is priced as loopback TCP, and says so
/// (`local_costs_of`).
template <class X>
concept costed_transport = transport_policy<X> && requires(const X& x) {
  { x.local_costs() } -> std::convertible_to<link_costs>;
};

/// What one non-blocking operation of a link did (the `link` concept below).
struct link_io {
  std::size_t bytes = 0;  ///< payload bytes taken (receiving) or bytes handed over (`pump`)
  bool done = false;      ///< `try_header`: the frame header is complete
  int err = 0;            ///< 0, `link_io::closed` (the peer closed its end), or an errno: the link is lost
  const char* why = nullptr;  ///< with `err`: the link's own account of the loss, when it has one (kept by the link)
  static constexpr int closed = -1;  ///< `err` when the peer closed its end of the link
};

/// How a mesh waits for a link (`link_traits<L>::wait`).
/// - `descriptor`: the link has a file descriptor, `l.fd()`, that poll(2) reports readable when
///   data or a close arrives and writable when queued frames can move (TCP), or readable for both
///   when `link_traits<L>::room_by_read` says so (an RDMA completion channel: the peer's notice
///   of freed room arrives as a completion).
/// - `doorbell`: the link lives in memory both ranks map; `l.ready()` says, without a system
///   call, whether the pending read can go on, the peer rings this rank's doorbell (its futex word,
///   transport/shm.hpp) when it writes or frees room, `l.peer_failed()` reads the peer's `failed`
///   word and `l.wake_peer_strong()` rings the peer's doorbell (shared memory).
enum class link_wait : std::uint8_t { descriptor, doorbell };

/// Compile-time facts of link type `L` (one ordered pair of ranks over one medium: TCP, shared
/// memory; transport/links/). Every link type specializes it with
/// - `costs`: its `link_costs` (the cost model of a message over it, and whether the two ranks
///   share memory);
/// - `moves_host_memory`, `moves_device_memory`: the memory spaces it can move without staging
///   (what a mesh of such links states in its `transport_traits`; both links today move host
///   memory only, the default);
/// - `wait`: how the mesh waits for it (`link_wait`);
/// - `reads_in_place`: whether a reduction can read its payloads where they lie (`try_payload`
///   with `consume`), and `payload_align`, the alignment they then start at; a link without it
///   is read through the mesh's staging buffer.
/// \tparam L a link type.
template <class L>
struct link_traits;

/// A link: the data path between this rank and one peer over one medium (TCP, shared memory;
/// transport/links/), as a mesh composes them (transport/mesh/: one link per peer carries its
/// data, picked at set-up as the first type in the mesh's list that connects the pair). Every
/// operation returns at once; the mesh does the waiting (spin, yield, poll or a doorbell, as
/// `link_traits<L>::wait` says) and the failure protocol.
/// - `L::name`: the medium's name in logs ("tcp", "shm");
/// - `l.post(frame, bytes, n)` queues a frame (`L::frame`: header with the message's identity
///   and size); the bytes stay the caller's until the link has handed them over;
///   `l.post_direct(frame, bytes, n)` hands it over at once when the medium takes it whole and
///   nothing is queued, else returns false without doing anything;
/// - `l.pump(done)` makes progress: hands queued frames over as far as the medium takes them now,
///   adding the frames completed to `done`; `l.q` holds those not yet handed over;
/// - receiving, one frame at a time: `l.try_header(h, dst, n)` takes the next frame's header
///   (partial progress is kept; `done` once whole), and may take up to `n` payload bytes into
///   `dst` with it (`bytes`); `l.try_payload(dst, want, align, consume)` takes what is there of
///   the payload, copied to `dst`, or, when `link_traits<L>::reads_in_place`, handed to
///   `*consume` where it lies in pieces that are multiples of `align`; `l.end_read()` ends the
///   frame; `l.peek_header(h)` copies the next header without taking it, when it has arrived;
/// - `l.peer_gone()` is liveness, looked at without waiting; `l.close()` ends the link;
/// - what the mesh's waits need, by `link_traits<L>::wait`: a `descriptor` link names the
///   descriptor poll(2) watches (`cl.fd()`, readable when a read can go on, writable when a
///   queued frame can); a `doorbell` link lives in memory both ranks map and says without a
///   system call whether the read the mesh waits for can go on (`cl.ready()`) and whether the peer
///   raised its failed word (`cl.peer_failed()`: 0 while it runs), the peer ringing this rank's
///   doorbell whenever it writes or frees room;
/// - `link_traits<L>` gives its `costs`, `wait`, `reads_in_place` and `payload_align`;
/// - optionally, events from outside its data path (an RDMA device's asynchronous events: a port
///   or the device failed): `cl.event_fd()`, a descriptor poll(2) reports readable when one is
///   queued (links may share it), and `l.take_events()`, which reads them without blocking and
///   returns a `link_io` with `err` once they say the link is lost (`link_has_events`);
/// - optionally, `cl.where()`: where it runs, for tools and logs (an adapter and port);
/// - optionally, `l.register_memory(bytes)`: registers a caller's buffer with its device, for
///   sends from it without a copy (an RDMA adapter), returning a `std::shared_ptr<const registration_hold>`
///   that keeps the registration (null: nothing to register); such a link completes a frame from
///   that buffer only once the peer has its bytes, keeping it in `q` until then, and says how many
///   frames of `q` are not yet wholly handed over (`cl.unsent()`) and drops those
///   (`l.drop_unsent()`, for a failing rank);
/// - optionally, `l.close_begin(peer_left)`: a link whose `close` waits for the peer (to deliver
///   what was handed over) starts that here, so that a mesh closing many links waits once, not
///   once per link; with `peer_left` (its control connection closed) it waits for nothing.
/// \tparam L a link type.
template <class L>
concept link = std::movable<L> &&
               requires {
                 { link_traits<L>::costs } -> std::convertible_to<link_costs>;
                 { link_traits<L>::wait } -> std::convertible_to<link_wait>;
                 { link_traits<L>::reads_in_place } -> std::convertible_to<bool>;
                 { link_traits<L>::payload_align } -> std::convertible_to<std::size_t>;
               } &&
               (link_traits<L>::wait != link_wait::descriptor || requires(const L& cl) {
                 { cl.fd() } -> std::convertible_to<int>;
               }) &&
               (link_traits<L>::wait != link_wait::doorbell || requires(const L& cl) {
                 { cl.ready() } -> std::convertible_to<bool>;
                 { cl.peer_failed() } -> std::convertible_to<std::uint32_t>;
               }) &&
               requires(L& l, const L& cl, const typename L::frame& f, typename L::frame& h, const std::byte* p,
                        std::byte* d, std::size_t n, std::size_t& done,
                        detail::function_ref<void(std::span<const std::byte>)>* consume) {
  { L::name } -> std::convertible_to<std::string_view>;
  l.post(f, p, n);
  { l.post_direct(f, p, n) } -> std::same_as<bool>;
  { l.pump(done) } -> std::same_as<link_io>;
  { cl.q.empty() } -> std::convertible_to<bool>;
  { l.try_header(h, d, n) } -> std::same_as<link_io>;
  { l.try_payload(d, n, n, consume) } -> std::same_as<link_io>;
  l.end_read();
  { cl.peek_header(h) } -> std::same_as<bool>;
  { cl.peer_gone() } -> std::convertible_to<bool>;
  l.close();
};

/// Compile-time capabilities of a transport. Specialize for a transport that has more (or less);
/// deriving the specialization from `transport_traits<void>` keeps the defaults of what it does
/// not say.
/// The memory spaces read them (`moves` below): a space names the capability it needs.
/// \tparam X a transport type.
template <class X>
struct transport_traits {
  static constexpr bool supports_host_memory = true;     ///< can move pageable host memory
  static constexpr bool supports_device_memory = false;  ///< can move CUDA device memory
  static constexpr bool supports_registered_memory = false;  ///< needs/accepts RDMA-registered memory
};

/// A memory space: an empty tag type that says where a buffer's elements live
/// (core/memory_space.hpp: `host_memory`; device memory arrives as another tag with issue 27).
/// - `S::name` names it in messages.
/// - `S::template moved_by<X>` (a bool) says whether transport X can move its buffers, read from
///   `transport_traits<X>` (host memory needs `supports_host_memory`, device memory
///   `supports_device_memory`), so a new space states its own requirement without editing this file.
/// The primitives that run schedules over its buffers are `primitives_for<S, T, Op, X>::type`.
/// \tparam S a memory space tag.
template <class S>
concept memory_space = std::is_empty_v<S> && std::is_trivially_copyable_v<S> && requires {
  { S::name } -> std::convertible_to<std::string_view>;
};

/// Transport X can move buffers of memory space S. Checked at compile time where an operation's
/// primitives are made (detail::make_primitives), so a collective over a space the transport cannot
/// move fails to compile naming this concept, instead of handing it pointers it cannot read.
/// \tparam X a transport. \tparam S a memory space.
template <class X, class S>
concept moves = transport_policy<X> && memory_space<S> && requires { requires bool(S::template moved_by<X>); };

/// An allreduce algorithm: a type whose static `allreduce(prims)` runs the schedule over a
/// primitives object (send / recv / recv_reduce / recv_reduce_send / recv_copy_send, see
/// core/primitives.hpp) and never touches sockets or raw memory.
template <class A>
concept algorithm = requires {
  { A::name } -> std::convertible_to<std::string_view>;
};

/// An algorithm with a reduce-scatter schedule over primitives `P`: `A::reduce_scatter(p)`.
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept reduce_scatter_algorithm = algorithm<A> && requires(P& p) { A::reduce_scatter(p); };

/// An algorithm with an allgather schedule over primitives `P`: `A::allgather(p)`.
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept allgather_algorithm = algorithm<A> && requires(P& p) { A::allgather(p); };

/// An algorithm with a broadcast schedule over primitives `P`: `A::broadcast(p, root)`.
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept broadcast_algorithm = algorithm<A> && requires(P& p, int root) { A::broadcast(p, root); };

/// An algorithm with a reduce (to one root) schedule over primitives `P`: `A::reduce(p, root)`.
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept rooted_reduce_algorithm = algorithm<A> && requires(P& p, int root) { A::reduce(p, root); };

/// An algorithm with an alltoall schedule over primitives `P`: `A::alltoall(p)`.
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept alltoall_algorithm = algorithm<A> && requires(P& p) { A::alltoall(p); };

/// An algorithm with a gather schedule over primitives `P`: `A::gather(p, root)` (`p.count()`
/// elements per rank; the root's output holds N blocks in rank order).
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept gather_algorithm = algorithm<A> && requires(P& p, int root) { A::gather(p, root); };

/// An algorithm with a scatter schedule over primitives `P`: `A::scatter(p, root)` (`p.count()`
/// elements per rank; the root's input holds N blocks in rank order).
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept scatter_algorithm = algorithm<A> && requires(P& p, int root) { A::scatter(p, root); };

/// An algorithm with an allgatherv schedule over primitives `P`: `A::allgatherv(p, counts)`
/// (`counts[b]` elements from rank b, packed in rank order in the output).
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept allgatherv_algorithm = algorithm<A> && requires(P& p, std::span<const std::size_t> counts) { A::allgatherv(p, counts); };

/// An algorithm with a reduce_scatterv schedule over primitives `P`: `A::reduce_scatterv(p, counts)`
/// (the input packs N blocks of `counts[b]` elements; rank r ends with block r reduced).
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept reduce_scatterv_algorithm = algorithm<A> && requires(P& p, std::span<const std::size_t> counts) {
  A::reduce_scatterv(p, counts);
};

/// An algorithm with an alltoallv schedule over primitives `P`: `A::alltoallv(p, send_counts,
/// recv_counts)` (input block j, of send_counts[j] elements, goes to rank j; output block j, of
/// recv_counts[j], comes from rank j; both packed in rank order).
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept alltoallv_algorithm = algorithm<A> && requires(P& p, std::span<const std::size_t> sc, std::span<const std::size_t> rc) {
  A::alltoallv(p, sc, rc);
};

/// An algorithm with a barrier schedule over primitives `P`: `A::barrier(p)`.
/// \tparam A an algorithm policy. \tparam P a primitives type.
template <class A, class P>
concept barrier_algorithm = algorithm<A> && requires(P& p) { A::barrier(p); };

/// What transport `x`'s links between ranks of one host cost: `x.local_costs()`, else
/// `transport_traits<X>::local_costs`, else loopback TCP's model marked `declared = false`.
/// \tparam X a transport.
template <class X>
link_costs local_costs_of(const X& x) noexcept {
  if constexpr (costed_transport<X>) {
    return x.local_costs();
  } else if constexpr (requires { transport_traits<X>::local_costs; }) {
    return transport_traits<X>::local_costs;
  } else {
    link_costs c;
    using N = decltype(x.name());  // keep a view only of a name that outlives the call
    if constexpr (std::is_lvalue_reference_v<N> || std::is_pointer_v<N> || std::is_same_v<std::remove_cv_t<N>, std::string_view>)
      c.name = x.name();
    else
      c.name = "transport";
    c.declared = false;
    return c;
  }
}

}  // namespace gsync
