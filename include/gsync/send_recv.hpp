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
///
/// Exchanges. Operations on one communicator run one at a time in issue order (asynchronous ones
/// too, see async.hpp), so the MPI idiom "post a receive, then send" does not work here: ranks
/// that each issue a recv (or recv_async) before their send to the next rank wait for each other
/// in a cycle, and large sends in a cycle wait the same way. `gsync::sendrecv` sends one message
/// and receives another at the same time, as MPI_Sendrecv does:
/// \code
///   // ring shift: every rank sends to the next and receives from the previous
///   gsync::sendrecv(comm, std::span<const float>{mine}, (r + 1) % n, 0, std::span<float>{theirs}, (r + n - 1) % n, 0);
/// \endcode

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/device_span.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync {

namespace detail {

/// Sends the p2p message of ticket `tk` (numbered at issue) with user tag `tag` to `peer`, from a
/// buffer in memory space `Space`.
template <class Space = host_memory, class X, class T>
void send_run(communicator<X>& comm, op_ticket tk, const T* data, std::size_t n, int peer, int tag) {
  const message_id id{tag_p2p | static_cast<std::uint32_t>(tag), tk.seq, make_fingerprint<T>(n)};
  op_scope scope(comm, "send", tk, id);
  auto p = make_primitives<Space>(comm, id, data, static_cast<T*>(nullptr), n, op::sum{});
  p.send(peer, p.in({0, n}));
  p.finish();
}

/// Receives the p2p message of ticket `tk` (numbered at issue, shifted by the receives from any
/// source that ran since: recv_any.hpp) with user tag `tag` from `peer`, into a buffer in memory
/// space `Space`.
template <class Space = host_memory, class X, class T>
void recv_run(communicator<X>& comm, op_ticket tk, T* data, std::size_t n, int peer, int tag) {
  const message_id id{tag_p2p | static_cast<std::uint32_t>(tag), tk.seq + comm.any_source().of(peer, tk.seq), make_fingerprint<T>(n)};
  op_scope scope(comm, "recv", tk, id);
  auto p = make_primitives<Space>(comm, id, static_cast<const T*>(data), data, n, op::sum{});
  p.recv(peer, p.out({0, n}));  // a send of another tag, type or size: mismatch naming both calls
}

/// Sends ticket `ts`'s message to `dst` and receives ticket `tr`'s from `src` at once: the send is
/// posted first, so the transport moves it while this rank waits for its own data. The send buffer
/// is in memory space `SendSpace`, the receive buffer in `RecvSpace`.
template <class SendSpace = host_memory, class RecvSpace = SendSpace, class X, class S, class R>
void sendrecv_run(communicator<X>& comm, op_ticket ts, const S* sd, std::size_t sn, int dst, int stag, op_ticket tr, R* rd,
                  std::size_t rn, int src, int rtag) {
  const message_id sid{tag_p2p | static_cast<std::uint32_t>(stag), ts.seq, make_fingerprint<S>(sn)};
  const message_id rid{tag_p2p | static_cast<std::uint32_t>(rtag), tr.seq + comm.any_source().of(src, tr.seq), make_fingerprint<R>(rn)};
  op_scope scope(comm, "sendrecv", tr, rid);
  auto ps = make_primitives<SendSpace>(comm, sid, sd, static_cast<S*>(nullptr), sn, op::sum{});
  auto pr = make_primitives<RecvSpace>(comm, rid, static_cast<const R*>(rd), rd, rn, op::sum{});
  ps.send(dst, ps.in({0, sn}));
  pr.recv(src, pr.out({0, rn}));
  ps.finish();
}

/// A sendrecv of a rank with itself: the message is copied locally, and must match the receive
/// as one from a peer would (tag, element type and count), else `errc::mismatch`.
template <class S, class R>
void sendrecv_self(const S* sd, std::size_t sn, int stag, R* rd, std::size_t rn, int rtag, int self) {
  const fingerprint fs = make_fingerprint<S>(sn), fr = make_fingerprint<R>(rn);
  if (stag != rtag || !(fs == fr)) {
    throw error(errc::mismatch, "sendrecv: rank " + std::to_string(self) + " sends itself " +
                                    transport::describe_message(tag_p2p | static_cast<std::uint32_t>(stag), 1, fs, "send") +
                                    " but receives " + transport::describe_message(tag_p2p | static_cast<std::uint32_t>(rtag), 1, fr, "recv"));
  }
  if (sn) std::memmove(rd, sd, sn * sizeof(S));
}

/// Checks sendrecv's arguments: valid peers (both this rank, or neither), tags, and buffers that
/// do not overlap.
inline void check_sendrecv(int dst, int stag, const void* sd, std::size_t sbytes, int src, int rtag, const void* rd,
                           std::size_t rbytes, int self, int world) {
  const bool to_self = dst == self, from_self = src == self;
  if (to_self != from_self) {
    check_rank("sendrecv", "destination", dst, world);
    check_rank("sendrecv", "source", src, world);
    invalid("sendrecv", "destination " + std::to_string(dst) + " and source " + std::to_string(src) +
                            ": a message to this rank itself pairs only with a receive from itself in the same call");
  }
  if (to_self) {
    if (stag < 0 || rtag < 0) invalid("sendrecv", "negative tag (tags are 0..2147483647)");
  } else {
    check_p2p("sendrecv", dst, stag, self, world);
    check_p2p("sendrecv", src, rtag, self, world);
  }
  if (overlaps(sd, sbytes, rd, rbytes)) invalid("sendrecv", "the send and receive buffers overlap");
}

/// Checks a sendrecv's arguments, numbers its messages (none with itself) and returns the job
/// that runs it, for `execute` or `issue`.
template <class X, class S, class R>
auto sendrecv_job(communicator<X>& comm, std::span<const S> s, int dst, int stag, std::span<R> r, int src, int rtag) {
  check_sendrecv(dst, stag, s.data(), s.size_bytes(), src, rtag, r.data(), r.size_bytes(), comm.rank(), comm.size());
  const bool self = dst == comm.rank();
  const op_ticket ts = self ? op_ticket{} : comm.next_send_op(dst), tr = self ? op_ticket{} : comm.next_recv_op(src);
  using send_space = memory_space_of_t<decltype(s)>;  // std::span: host memory
  using recv_space = memory_space_of_t<decltype(r)>;
  return [=, sd = s.data(), sn = s.size(), rd = r.data(), rn = r.size()](communicator<X>& c) {
    if (self) sendrecv_self(sd, sn, stag, rd, rn, rtag, dst);  // host memory: a local memmove
    else sendrecv_run<send_space, recv_space>(c, ts, sd, sn, dst, stag, tr, rd, rn, src, rtag);
  };
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
  detail::check_extent("send", "data", data.size(), sizeof(data[0]));
  using space = memory_space_of_t<decltype(data)>;  // std::span: host memory
  const op_ticket tk = comm.next_send_op(peer);
  comm.execute("send", [tk, d = static_cast<const T*>(data.data()), n = data.size(), peer, tag](communicator<X>& c) {
    detail::send_run<space>(c, tk, d, n, peer, tag);
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
  detail::check_extent("send", "data", data.size(), sizeof(data[0]));
  using space = memory_space_of_t<decltype(data)>;  // std::span: host memory
  const op_ticket tk = comm.next_send_op(peer);
  return comm.issue("send", [tk, d = static_cast<const T*>(data.data()), n = data.size(), peer, tag](communicator<X>& c) {
    detail::send_run<space>(c, tk, d, n, peer, tag);
  });
}

/// Receives the next message from rank `peer` into `data`, which must be exactly that message's
/// size, and whose tag must be `tag` (otherwise `errc::mismatch`, naming both tags).
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
void recv(communicator<X>& comm, std::span<T> data, int peer, int tag) {
  detail::check_p2p("recv", peer, tag, comm.rank(), comm.size());
  detail::check_extent("recv", "data", data.size(), sizeof(data[0]));
  using space = memory_space_of_t<decltype(data)>;  // std::span: host memory
  const op_ticket tk = comm.next_recv_op(peer);
  comm.execute("recv", [tk, d = data.data(), n = data.size(), peer, tag](communicator<X>& c) {
    detail::recv_run<space>(c, tk, d, n, peer, tag);
  });
}

/// Asynchronous recv: same arguments and checks (thrown here), queued on the progress engine;
/// `data` must stay alive and untouched until the request finished.
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
request recv_async(communicator<X>& comm, std::span<T> data, int peer, int tag) {
  detail::check_p2p("recv", peer, tag, comm.rank(), comm.size());
  detail::check_extent("recv", "data", data.size(), sizeof(data[0]));
  using space = memory_space_of_t<decltype(data)>;  // std::span: host memory
  const op_ticket tk = comm.next_recv_op(peer);
  return comm.issue("recv", [tk, d = data.data(), n = data.size(), peer, tag](communicator<X>& c) {
    detail::recv_run<space>(c, tk, d, n, peer, tag);
  });
}

/// Sends `send_data` to rank `dst` with `send_tag` and receives the next message from rank `src`
/// into `recv_data` (its tag must be `recv_tag` and its size exactly `recv_data.size()`), both at
/// once, as MPI_Sendrecv: for exchanges and shifts in which every rank sends and receives (a ring
/// shift, pipeline stages passing activations one way and gradients the other), which separate
/// send and recv calls would serialize into a cycle of waits. Returns when both are done. The send
/// is this rank's next message to `dst` and the receive its next from `src`, in the same per-pair
/// order as `send` and `recv` (a peer may pair it with a plain `recv`/`send`). `dst` and `src` may
/// be the same rank; both may be this rank, which copies the message locally. The two buffers
/// must not overlap.
/// \tparam X transport of the communicator. \tparam U element type sent, possibly const-qualified.
/// \tparam T element type received (the message received may have another element type than the one
/// sent; each size is in elements of its own type).
template <transport_policy X, class U, element T>
  requires element<std::remove_const_t<U>>
void sendrecv(communicator<X>& comm, std::span<U> send_data, int dst, int send_tag, std::span<T> recv_data, int src,
              int recv_tag) {
  comm.execute("sendrecv", detail::sendrecv_job(comm, std::span<const std::remove_const_t<U>>{send_data}, dst, send_tag, recv_data, src, recv_tag));
}

/// Asynchronous sendrecv: same arguments and checks (thrown here), queued on the progress engine;
/// both buffers must stay alive (and `send_data` unchanged, `recv_data` unread) until the request
/// finished.
/// \tparam X transport of the communicator. \tparam U element type sent, possibly const-qualified.
/// \tparam T element type received.
template <transport_policy X, class U, element T>
  requires element<std::remove_const_t<U>>
request sendrecv_async(communicator<X>& comm, std::span<U> send_data, int dst, int send_tag, std::span<T> recv_data,
                       int src, int recv_tag) {
  return comm.issue("sendrecv", detail::sendrecv_job(comm, std::span<const std::remove_const_t<U>>{send_data}, dst, send_tag, recv_data, src, recv_tag));
}

namespace detail {
/// Tickets of `msgs` consecutive point-to-point messages (at least one) made by `next`.
template <class Next>
std::vector<op_ticket> message_tickets(std::size_t msgs, Next next) {
  std::vector<op_ticket> t;
  for (std::size_t i = 0; i < std::max<std::size_t>(msgs, 1); ++i) t.push_back(next());
  return t;
}

/// Launches a send (`sd`, `sn` elements to `dst`), a receive (`rd`, `rn` from `src`) or both, of
/// device buffers on `s`. Each message is cut into windows of half the staging size (one message
/// per window, every window numbered: both sides cut alike whichever call they use); window w
/// sends and receives at once where both have a window w.
template <class X, class S, class R>
request p2p_device(communicator<X>& comm, const char* kind, const S* sd, std::size_t sn, int dst, int stag, R* rd,
                   std::size_t rn, int src, int rtag, bool sending, bool receiving, cuda_stream s) {
  cuda::detail::staged_plan plan{staged(sd, sending ? 1 : 0, sn, true, false), staged(rd, receiving ? 1 : 0, rn, false, true), false};
  plan.cut_messages(comm.settings().cuda_staging_bytes);
  const std::size_t smsgs = sending ? std::max<std::size_t>(plan.in.windows(), 1) : 0;
  const std::size_t rmsgs = receiving ? std::max<std::size_t>(plan.out.windows(), 1) : 0;
  plan.windows = std::max(smsgs, rmsgs);
  const bool self = sending && receiving && dst == comm.rank();
  return staged_launch(comm, kind, s, plan, [&] {
    std::vector<op_ticket> ts, tr;
    if (!self) {
      if (sending) ts = message_tickets(smsgs, [&] { return comm.next_send_op(dst); });
      if (receiving) tr = message_tickets(rmsgs, [&] { return comm.next_recv_op(src); });
    }
    return [plan, ts, tr, dst, stag, src, rtag, self](communicator<X>& c, std::size_t w, std::byte* im, std::byte* om) {
      const S* sm = mirror_as<const S>(im);
      R* rm = mirror_as<R>(om);
      const std::size_t ns = plan.in.elems_of(w), nr = plan.out.elems_of(w);
      if (self) {
        mirror_ready();  // a local copy, not through the staged primitives
        sendrecv_self(sm, ns, stag, rm, nr, rtag, dst);
      }
      else if (w < ts.size() && w < tr.size()) sendrecv_run<staged_memory>(c, ts[w], sm, ns, dst, stag, tr[w], rm, nr, src, rtag);
      else if (w < ts.size()) send_run<staged_memory>(c, ts[w], sm, ns, dst, stag);
      else recv_run<staged_memory>(c, tr[w], rm, nr, src, rtag);
    };
  }, /*collective=*/false);
}
}  // namespace detail

/// Sends device memory to `peer` with `tag`, ordered on CUDA stream `stream`: returns once queued;
/// the send reads `data` after the work queued before it on `stream`, and later work on `stream`
/// runs after the data has left `data` (it may then be reused). A peer may receive it with a host
/// or a device recv alike. Staged through host memory (cuda/staging.hpp).
/// \tparam X transport of the communicator. \tparam U element type, possibly const.
template <transport_policy X, class U>
  requires element<std::remove_const_t<U>>
void send(communicator<X>& comm, device_span<U> data, int peer, int tag, cuda_stream stream) {
  using T = std::remove_const_t<U>;
  detail::check_p2p("send", peer, tag, comm.rank(), comm.size());
  (void)detail::p2p_device(comm, "send", static_cast<const T*>(data.data()), data.size(), peer, tag, static_cast<T*>(nullptr), 0, 0, 0, true, false, stream);
}
/// The device send with a request that finishes once the data has left `data`.
/// \tparam X transport of the communicator. \tparam U element type, possibly const.
template <transport_policy X, class U>
  requires element<std::remove_const_t<U>>
request send_async(communicator<X>& comm, device_span<U> data, int peer, int tag, cuda_stream stream) {
  using T = std::remove_const_t<U>;
  detail::check_p2p("send", peer, tag, comm.rank(), comm.size());
  return detail::p2p_device(comm, "send", static_cast<const T*>(data.data()), data.size(), peer, tag, static_cast<T*>(nullptr), 0, 0, 0, true, false, stream);
}

/// Receives the next message from `peer` into device memory, ordered on `stream`: later work on
/// `stream` sees it. Sizes and tags as the host recv.
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
void recv(communicator<X>& comm, device_span<T> data, int peer, int tag, cuda_stream stream) {
  detail::check_p2p("recv", peer, tag, comm.rank(), comm.size());
  (void)detail::p2p_device(comm, "recv", static_cast<const T*>(nullptr), 0, 0, 0, data.data(), data.size(), peer, tag, false, true, stream);
}
/// The device recv with a request that finishes once the data is in device memory.
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
request recv_async(communicator<X>& comm, device_span<T> data, int peer, int tag, cuda_stream stream) {
  detail::check_p2p("recv", peer, tag, comm.rank(), comm.size());
  return detail::p2p_device(comm, "recv", static_cast<const T*>(nullptr), 0, 0, 0, data.data(), data.size(), peer, tag, false, true, stream);
}

/// sendrecv of device memory (see the host sendrecv), ordered on `stream`.
/// \tparam X transport. \tparam U element type sent, possibly const. \tparam R element type received.
template <transport_policy X, class U, element R>
  requires element<std::remove_const_t<U>>
void sendrecv(communicator<X>& comm, device_span<U> send_data, int dst, int send_tag, device_span<R> recv_data, int src,
              int recv_tag, cuda_stream stream) {
  using S = std::remove_const_t<U>;
  detail::check_sendrecv(dst, send_tag, send_data.data(), send_data.size_bytes(), src, recv_tag, recv_data.data(),
                         recv_data.size_bytes(), comm.rank(), comm.size());
  (void)detail::p2p_device(comm, "sendrecv", static_cast<const S*>(send_data.data()), send_data.size(), dst, send_tag, recv_data.data(), recv_data.size(),
                           src, recv_tag, true, true, stream);
}
/// The device sendrecv with a request that finishes once both are done.
/// \tparam X transport. \tparam U element type sent, possibly const. \tparam R element type received.
template <transport_policy X, class U, element R>
  requires element<std::remove_const_t<U>>
request sendrecv_async(communicator<X>& comm, device_span<U> send_data, int dst, int send_tag, device_span<R> recv_data,
                       int src, int recv_tag, cuda_stream stream) {
  using S = std::remove_const_t<U>;
  detail::check_sendrecv(dst, send_tag, send_data.data(), send_data.size_bytes(), src, recv_tag, recv_data.data(),
                         recv_data.size_bytes(), comm.rank(), comm.size());
  return detail::p2p_device(comm, "sendrecv", static_cast<const S*>(send_data.data()), send_data.size(), dst, send_tag, recv_data.data(),
                            recv_data.size(), src, recv_tag, true, true, stream);
}

}  // namespace gsync
