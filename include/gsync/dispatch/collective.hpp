#pragma once
/// \file
/// Small helpers every collective's API layer shares: wire tags, operator names for logs, argument
/// checks (sizes, overlaps, ranks, tags), logging an automatic choice once per shape, and building
/// the primitives object of one operation from its buffers' memory space. Non-templated where
/// nothing touches elements.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/dtype.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/primitives.hpp"
#include "gsync/core/tick_clock.hpp"

namespace gsync::detail {

/// Wire tags: one per collective kind, so a frame of one kind can never pass for another.
inline constexpr std::uint32_t tag_allreduce = 1;       ///< allreduce messages
inline constexpr std::uint32_t tag_reduce_scatter = 2;  ///< reduce_scatter messages
inline constexpr std::uint32_t tag_allgather = 3;       ///< allgather messages
inline constexpr std::uint32_t tag_broadcast = 4;       ///< broadcast messages
inline constexpr std::uint32_t tag_reduce = 5;          ///< reduce messages
inline constexpr std::uint32_t tag_alltoall = 6;        ///< alltoall messages
inline constexpr std::uint32_t tag_barrier = 7;         ///< barrier messages
// 8: the TCP transport's start-up network probe (transport/link_probe.hpp, probe_tag).
/// The int8 compressed allreduce's messages (grad/int8_exchange.hpp).
inline constexpr std::uint32_t tag_compressed_allreduce = 9;
inline constexpr std::uint32_t tag_gather = 10;           ///< gather messages
inline constexpr std::uint32_t tag_scatter = 11;          ///< scatter messages
inline constexpr std::uint32_t tag_allgatherv = 12;       ///< allgatherv messages
inline constexpr std::uint32_t tag_reduce_scatterv = 13;  ///< reduce_scatterv messages
inline constexpr std::uint32_t tag_alltoallv = 14;        ///< alltoallv messages
// Point-to-point messages carry `tag_p2p | user_tag` (core/concepts.hpp).

/// Name of an operator for logs: its `name` member if any, else "user".
template <class Op>
constexpr std::string_view op_name() {
  if constexpr (requires { Op::name; }) return Op::name;
  else return "user";
}

/// True when the byte ranges [a, a+na) and [b, b+nb) share a byte.
inline bool overlaps(const void* a, std::size_t na, const void* b, std::size_t nb) noexcept {
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  return na != 0 && nb != 0 && x < y + nb && y < x + na;
}

/// Throws invalid_argument "`what`: `msg`".
[[noreturn]] inline void invalid(std::string_view what, const std::string& msg) {
  throw error(errc::invalid_argument, std::string(what) + ": " + msg);
}

/// Checks that a buffer has `want` elements.
/// \param what the collective; \param buffer the argument's name; \param got its size.
inline void check_size(std::string_view what, std::string_view buffer, std::size_t got, std::size_t want,
                       std::string_view rule) {
  if (got != want)
    invalid(what, std::string(buffer) + " has " + std::to_string(got) + " elements but must have " + std::to_string(want) +
                      " (" + std::string(rule) + ")");
}

/// Checks that `count` elements of `elem_size` bytes can exist: at most PTRDIFF_MAX bytes. A span
/// that claims more (the caller's error) would wrap the size arithmetic into a silent no-op, a
/// crash or unbounded queueing, so it is refused on every path.
inline void check_extent(std::string_view what, std::string_view buffer, std::size_t count, std::size_t elem_size) {
  if (count > static_cast<std::size_t>(PTRDIFF_MAX) / elem_size)
    invalid(what, std::string(buffer) + " has " + std::to_string(count) + " elements of " + std::to_string(elem_size) +
                      " bytes: more bytes than any object can hold (PTRDIFF_MAX)");
}

/// Checks that a buffer of `got` elements is `blocks` blocks of `block` elements, without the
/// product wrapping around. \param rule the size rule, for the message.
inline void check_blocks(std::string_view what, std::string_view buffer, std::size_t got, std::size_t blocks, std::size_t block,
                         std::string_view rule) {
  const bool ok = block == 0 ? got == 0 : got % blocks == 0 && got / blocks == block;
  if (!ok)
    invalid(what, std::string(buffer) + " has " + std::to_string(got) + " elements but must have " + std::to_string(blocks) + " x " +
                      std::to_string(block) + " (" + std::string(rule) + ")");
}

/// Checks a root or peer rank argument: 0 <= rank < world.
inline void check_rank(std::string_view what, std::string_view role, int rank, int world) {
  if (rank < 0 || rank >= world)
    invalid(what, "invalid " + std::string(role) + " rank " + std::to_string(rank) + " (world has ranks 0.." +
                      std::to_string(world - 1) + ")");
}

/// Checks a point-to-point peer (a valid rank other than this one) and user tag (0..2^31-1).
inline void check_p2p(std::string_view what, int peer, int tag, int self, int world) {
  check_rank(what, "peer", peer, world);
  if (peer == self) invalid(what, "peer " + std::to_string(peer) + " is this rank (a rank cannot message itself)");
  if (tag < 0) invalid(what, "tag " + std::to_string(tag) + " is negative (tags are 0..2147483647)");
}

/// Logs an automatic algorithm choice once per collective shape at GSYNC_DEBUG=INFO. The shape and
/// the reason are only formatted when INFO is enabled (no strings on the hot path).
/// \tparam X transport. \tparam C a choice type with `id`, `reason()`; \tparam N a function
/// mapping the id to its name.
template <class X, class C, class N>
void log_choice(communicator<X>& comm, std::string_view coll, dtype dt, std::size_t count, std::string_view op,
                const C& ch, N&& name_of) {
  if (!comm.log().enabled(log_level::info)) return;
  std::string shape = std::string(coll) + "(" + std::string(name(dt)) + ", " + std::to_string(count);
  if (!op.empty()) shape += ", " + std::string(op);
  shape += ")";
  if (comm.first_time(shape)) comm.log().info(shape + " -> " + std::string(name_of(ch.id)) + ": " + ch.reason());
}

/// The scope of one running operation: applies the timeout it was issued with (so its deadline
/// is its own, see communicator::with_timeout), and when it ends restores the previous timeout,
/// counts the operation (kind, bytes, time, failed or not) and, when tracing, writes its span.
/// Its two clock readings come from detail::tick_clock (steady time, at half the cost).
/// \tparam X transport of the communicator.
template <class X>
class op_scope {
 public:
  /// Operation `kind` (a collective's name, a string literal) with ticket `t` and messages `id`;
  /// `completes` false for a part of an operation that is not its last (it is not counted as a
  /// completed operation, which ranks compare when they shrink).
  op_scope(communicator<X>& comm, const char* kind, const op_ticket& t, const message_id& id, bool completes = true)
      : comm_(comm), kind_(kind), id_(id), prev_(comm.running_timeout()), prev_since_(comm.running_since()),
        unwinding_(std::uncaught_exceptions()), start_(tick_clock::now()), completes_(completes) {
    comm.set_running_timeout(t.timeout);
    comm.set_running_since(start_);  // the operation's deadline counts from here (make_deadline)
  }
  op_scope(const op_scope&) = delete;
  op_scope& operator=(const op_scope&) = delete;
  ~op_scope() {
    comm_.set_running_timeout(prev_);
    comm_.set_running_since(prev_since_);
    if constexpr (op_aware_transport<X>) comm_.transport().op_finished();
    const auto end = tick_clock::now();  // never before start_ (same thread, see tick_clock)
    const bool failed = std::uncaught_exceptions() > unwinding_;
    if (!failed && completes_ && !(id_.tag & tag_p2p)) comm_.count_completed();
    const std::uint64_t bytes = payload_bytes(id_.fp);
    try {
      comm_.counters().record_static(kind_, bytes, std::chrono::duration<double>(end - start_).count(), failed);
      if (trace_writer* w = comm_.trace()) {
        std::string args = "{\"op\":" + std::to_string(id_.seq & ~(std::uint64_t{1} << 63)) + ",\"bytes\":" + std::to_string(bytes);
        if (id_.fp.dtype) args += ",\"dtype\":\"" + std::string(name(static_cast<dtype>(id_.fp.dtype - 1))) + "\",\"count\":" + std::to_string(id_.fp.count);
        if (id_.fp.root >= 0) args += ",\"root\":" + std::to_string(id_.fp.root);
        if (failed) args += ",\"failed\":true";
        w->complete(kind_, "gsync", start_, end, args + "}");
      }
    } catch (...) {
      // counting and tracing never turn a result into an error
    }
  }

 private:
  communicator<X>& comm_;
  const char* kind_;
  message_id id_;
  std::chrono::milliseconds prev_;
  std::chrono::steady_clock::time_point prev_since_;
  int unwinding_;
  std::chrono::steady_clock::time_point start_;
  bool completes_;
};

/// The one launcher of every collective: numbers the operation at issue (on the issuing thread,
/// so that issue order is wire order on every rank) and runs `run(comm, ticket)`: inline when no
/// asynchronous work is pending (the common case: no closure, no thread hop), otherwise queued
/// behind the pending operations and waited for. `run` is copied when queued: it must capture the
/// caller's arguments by value. \param kind the operation's name, for messages.
template <class X, class F>
void launch(communicator<X>& comm, const char* kind, F run) {
  const op_ticket tk = comm.next_op();
  if (comm.runs_inline()) run(comm, tk);
  else comm.run_queued(kind, [=](communicator<X>& c) mutable { run(c, tk); });
}

/// The asynchronous form of `launch`: numbers the operation now and queues `run(comm, ticket)` on
/// the communicator's progress engine; the request tells when it has finished.
template <class X, class F>
request launch_async(communicator<X>& comm, const char* kind, F run) {
  const op_ticket tk = comm.next_op();
  return comm.issue(kind, [=](communicator<X>& c) mutable { run(c, tk); });
}

/// Segment length in elements of type T for the communicator's pipelining unit (at least 1).
template <class X>
std::size_t segment_elems(const communicator<X>& comm, std::size_t elem_size) {
  return std::max<std::size_t>(1, comm.segment_bytes() / elem_size);
}

/// The primitives of one operation over `comm`: messages `id`, input `in`, output `out`, `count`
/// elements as the schedule understands it, the communicator's segment size, scratch and a
/// deadline counted from the running operation's start (now when none runs). The buffers are in
/// memory space `Space`, whose primitives type (`primitives_for`, core/memory_space.hpp) is built;
/// a transport that cannot move that space is a compile error naming `moves` (core/concepts.hpp).
/// \tparam Space memory space of `in` and `out` (host by default). \tparam T element type.
/// \tparam Op reduction operator. \tparam X transport.
template <class Space = host_memory, class T, class Op, class X>
auto make_primitives(communicator<X>& comm, message_id id, const T* in, T* out, std::size_t count, const Op& op) {
  static_assert(memory_space<Space>, "gsync: Space is not a memory space (see memory_space in core/concepts.hpp)");
  static_assert(moves<X, Space>,
                "gsync: this transport cannot move buffers of this memory space: moves<X, Space> is false "
                "(Space::moved_by<X> reads transport_traits<X>, core/concepts.hpp)");
  static_assert(requires { typename primitives_for<Space, T, Op, X>::type; },
                "gsync: this memory space has no primitives (specialise primitives_for, core/memory_space.hpp)");
  using P = primitives_t<Space, T, Op, X>;
  return P(comm.transport(), id, in, out, count, segment_elems(comm, sizeof(T)), op, comm.make_deadline(), comm.scratch());
}

}  // namespace gsync::detail
