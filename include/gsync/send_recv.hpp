#pragma once
/// \file
/// Point-to-point messages: `gsync::send` and `gsync::recv` between two ranks.
///
/// \code
///   if (comm.rank() == 0) gsync::send(comm, std::span<const float>{v}, /*peer=*/1, /*tag=*/7);
///   if (comm.rank() == 1) gsync::recv(comm, std::span<float>{v}, /*peer=*/0, /*tag=*/7);
/// \endcode
///
/// Rules. Messages from one rank to another are received in the order they were sent, whatever
/// their tags: the n-th recv from a peer takes that peer's n-th send to this rank. The receiver
/// states the tag (0..2^31-1) and size it expects; a message with another tag or size is an
/// `errc::mismatch` error naming both (never data mixed into the wrong buffer). Only the two ranks
/// take part: point-to-point messages have their own per-peer numbering and tag space, so they do
/// not disturb the collective operation numbers. They share each pair's ordered connection with
/// collectives, though, so both ranks must place a send/recv pair at the same point of their
/// sequences of collectives involving each other.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/detail/collective.hpp"

namespace gsync {

namespace detail {

/// Sends the p2p message of ticket `tk` (numbered at issue) with user tag `tag` to `peer`.
template <class X, class T>
void send_run(communicator<X>& comm, op_ticket tk, const T* data, std::size_t n, int peer, int tag) {
  const message_id id{tag_p2p | static_cast<std::uint32_t>(tag), tk.seq, make_fingerprint<T>(n)};
  op_scope scope(comm, "send", tk, id);
  auto p = make_primitives(comm, id, data, static_cast<T*>(nullptr), n, op::sum{});
  p.send(peer, p.in({0, n}));
  p.finish();
}

/// Receives the p2p message of ticket `tk` (numbered at issue) with user tag `tag` from `peer`.
template <class X, class T>
void recv_run(communicator<X>& comm, op_ticket tk, T* data, std::size_t n, int peer, int tag) {
  const message_id id{tag_p2p | static_cast<std::uint32_t>(tag), tk.seq, make_fingerprint<T>(n)};
  op_scope scope(comm, "recv", tk, id);
  auto p = make_primitives(comm, id, static_cast<const T*>(data), data, n, op::sum{});
  p.recv(peer, p.out({0, n}));  // a send of another tag, type or size: mismatch naming both calls
}

}  // namespace detail

/// Sends `data` to rank `peer` with `tag`; returns when `data` may be reused (the bytes have left
/// this rank's hands: in the kernel for TCP, taken by the receiver in process, so a send to a rank
/// that does not receive may block until the deadline). Zero elements is a valid message.
/// \tparam X transport of the communicator. \tparam U element type, possibly const-qualified
/// (`std::span<const T>` and `std::span<T>` are both accepted).
template <transport_policy X, class U>
  requires element<std::remove_const_t<U>>
void send(communicator<X>& comm, std::span<U> data, int peer, int tag) {
  using T = std::remove_const_t<U>;
  detail::check_p2p("send", peer, tag, comm.rank(), comm.size());
  const op_ticket tk = comm.next_send_op(peer);
  comm.execute("send", [tk, d = static_cast<const T*>(data.data()), n = data.size(), peer, tag](communicator<X>& c) {
    detail::send_run(c, tk, d, n, peer, tag);
  });
}

/// Asynchronous send: same arguments and checks (thrown here), queued on the progress engine;
/// the request finishes when `data` may be reused (see `send`). `data` must stay alive and
/// unchanged until then.
/// \tparam X transport of the communicator. \tparam U element type, possibly const-qualified.
template <transport_policy X, class U>
  requires element<std::remove_const_t<U>>
request send_async(communicator<X>& comm, std::span<U> data, int peer, int tag) {
  using T = std::remove_const_t<U>;
  detail::check_p2p("send", peer, tag, comm.rank(), comm.size());
  const op_ticket tk = comm.next_send_op(peer);
  return comm.issue("send", [tk, d = static_cast<const T*>(data.data()), n = data.size(), peer, tag](communicator<X>& c) {
    detail::send_run(c, tk, d, n, peer, tag);
  });
}

/// Receives the next message from rank `peer` into `data`, which must be exactly that message's
/// size, and whose tag must be `tag` (otherwise `errc::mismatch`, naming both tags).
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
void recv(communicator<X>& comm, std::span<T> data, int peer, int tag) {
  detail::check_p2p("recv", peer, tag, comm.rank(), comm.size());
  const op_ticket tk = comm.next_recv_op(peer);
  comm.execute("recv", [tk, d = data.data(), n = data.size(), peer, tag](communicator<X>& c) {
    detail::recv_run(c, tk, d, n, peer, tag);
  });
}

/// Asynchronous recv: same arguments and checks (thrown here), queued on the progress engine;
/// `data` must stay alive and untouched until the request finished.
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
request recv_async(communicator<X>& comm, std::span<T> data, int peer, int tag) {
  detail::check_p2p("recv", peer, tag, comm.rank(), comm.size());
  const op_ticket tk = comm.next_recv_op(peer);
  return comm.issue("recv", [tk, d = data.data(), n = data.size(), peer, tag](communicator<X>& c) {
    detail::recv_run(c, tk, d, n, peer, tag);
  });
}

}  // namespace gsync
