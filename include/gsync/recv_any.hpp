#pragma once
/// \file
/// Receiving from any source: `gsync::recv_any` takes the next message with a given tag from
/// whichever rank has sent one, and says which rank that was (MPI_ANY_SOURCE, torch's
/// `recv(tensor)` without a source).
///
/// \code
///   std::vector<float> v(10);
///   const int from = gsync::recv_any(comm, std::span<float>{v}, /*tag=*/7);
/// \endcode
///
/// Rules (those of send_recv.hpp, with the source left open). The message taken is the next one
/// from its sender to this rank: a rank whose next message to this rank has another tag (or is
/// a collective's) is passed over, and its later messages with the tag wait behind it. Senders
/// use a plain `send`, unaware of how they are received; messages from one rank are still taken
/// in the order it sent them, by recv_any and recv alike. The size must be exactly the message's
/// (else `errc::mismatch`, as for recv). A rank that fails while this rank waits fails the
/// receive, as a recv from it would; one that left (done sending) is passed over, and the receive
/// fails with `errc::peer_lost` once every other rank has left. Host memory only.
/// Cost: a recv_any looks at each peer's next frame in turn while it waits, and over mixed
/// transports (same-host rings and sockets) it looks at the rings once a millisecond, so it is
/// for the few messages whose sender is not known, not for a data path.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/send_recv.hpp"

namespace gsync {

namespace detail {

/// Checks recv_any's arguments (a tag of 0..2^31-1, another rank to receive from).
inline void check_recv_any(int tag, int world) {
  if (tag < 0) invalid("recv_any", "negative tag (tags are 0..2147483647)");
  if (world < 2) invalid("recv_any", "a world of one rank has no other rank to receive from");
}

/// Runs a receive from any source issued at `base` (where it stood with each peer at issue):
/// waits for the first peer whose next message is the one it would take, receives it as
/// `recv_run` does, counts it in the communicator's shift and returns the peer.
template <class X, class T>
int recv_any_run(communicator<X>& comm, const any_source_base& base, std::chrono::milliseconds timeout, T* data, std::size_t n, int tag) {
  const int self = comm.rank(), size = comm.size();
  const std::uint64_t job_bit = base.in_job ? op_numbering::in_job_bit : 0;
  std::vector<message_id> ids(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p) {
    if (p == self) continue;
    const std::uint64_t seq = job_bit | (base.counts[static_cast<std::size_t>(p)] + 1);
    ids[static_cast<std::size_t>(p)] = message_id{tag_p2p | static_cast<std::uint32_t>(tag), seq + comm.any_source().of(p, seq), make_fingerprint<T>(n)};
  }
  op_scope scope(comm, "recv_any", op_ticket{0, timeout}, ids[self == 0 ? 1 : 0]);
  const int from = comm.transport().probe_any(std::span<const message_id>(ids), comm.make_deadline());
  if (from < 0 || from >= size || from == self)
    throw error(errc::system, "recv_any: the transport named rank " + std::to_string(from) + " as the sender");
  const message_id id = ids[static_cast<std::size_t>(from)];
  auto p = make_primitives<host_memory>(comm, id, static_cast<const T*>(data), data, n, op::sum{});
  p.recv(from, p.out({0, n}));  // a message of another size: mismatch naming both calls
  comm.any_source().took(from, size, base.in_job);
  return from;
}

}  // namespace detail

/// Receives into `data` the next message with `tag` that any other rank sends this rank, and
/// returns the rank that sent it (see the file comment). `data` must be exactly the message's
/// size. The transport must offer it (`any_source_transport`: TCP / shared memory and in-process
/// do).
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
  requires any_source_transport<X>
int recv_any(communicator<X>& comm, std::span<T> data, int tag) {
  detail::check_recv_any(tag, comm.size());
  detail::check_extent("recv_any", "data", data.size(), sizeof(data[0]));
  const detail::any_source_base base = comm.p2p_recv_counts();
  int from = -1;
  comm.execute("recv_any", [base, t = comm.issue_timeout(), d = data.data(), n = data.size(), tag, &from](communicator<X>& c) {
    from = detail::recv_any_run(c, base, t, d, n, tag);
  });
  return from;
}

/// Asynchronous recv_any: same arguments and checks (thrown here), queued on the progress
/// engine; `*source` is set to the sender's rank before the request finishes. `data` and
/// `source` must stay alive, and `data` untouched, until then.
/// \tparam X transport of the communicator. \tparam T element type.
template <transport_policy X, element T>
  requires any_source_transport<X>
request recv_any_async(communicator<X>& comm, std::span<T> data, int tag, int* source) {
  detail::check_recv_any(tag, comm.size());
  detail::check_extent("recv_any", "data", data.size(), sizeof(data[0]));
  if (!source) detail::invalid("recv_any_async", "source is null (it receives the sender's rank)");
  const detail::any_source_base base = comm.p2p_recv_counts();
  return comm.issue("recv_any", [base, t = comm.issue_timeout(), d = data.data(), n = data.size(), tag, source](communicator<X>& c) {
    *source = detail::recv_any_run(c, base, t, d, n, tag);
  });
}

}  // namespace gsync
