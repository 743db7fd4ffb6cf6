#pragma once
/// \file
/// Asynchronous collectives: start an operation, compute, then wait for it.
///
/// \code
///   #include <gsync/async.hpp>
///   std::vector<gsync::request> pending;
///   for (auto& bucket : buckets)                               // e.g. during backward
///     pending.push_back(gsync::allreduce_async(comm, std::span<float>{bucket}, gsync::op::avg{}));
///   compute_something_else();
///   for (auto& r : pending) r.wait();                          // errors surface here
///
///   // several collectives as one queued job (they run back to back, in issue order)
///   auto r = gsync::submit(comm, [&](auto& c) {
///     gsync::alltoall(c, std::span<const int>{a}, std::span<int>{b});
///     gsync::allgather(c, std::span<const int>{x}, std::span<int>{y});
///   });
///   r.wait();
/// \endcode
///
/// Every collective has an `_async` form with the same template parameters, arguments and
/// checks (`allreduce_async`, `reduce_scatter_async`, `allgather_async`, `broadcast_async`,
/// `reduce_async`, `alltoall_async`, `barrier_async`, `send_async`, `recv_async`, `sendrecv_async`; each is
/// declared next to its synchronous form). It checks the arguments and numbers the operation on
/// the calling thread (invalid_argument is thrown by the call itself, nothing is queued), queues
/// the operation on the communicator's progress engine (core/progress_engine.hpp: one thread per
/// communicator, started on the first asynchronous call, running operations one at a time in
/// issue order) and returns a `gsync::request` (core/request.hpp) with `test()` and `wait()`.
///
/// Rules (as MPI's nonblocking operations):
/// - Buffers must stay alive and untouched (inputs unchanged, outputs unread) until the request
///   reports that the operation finished.
/// - Every rank issues the same sequence of collectives, asynchronous or not, as for synchronous
///   calls. A synchronous call made while asynchronous work is pending is queued behind it (it
///   waits for it); when nothing is pending it runs inline on the calling thread, as before.
/// - Unlike MPI, a pending operation holds back the ones issued after it: a recv_async waits for
///   its message before a later send starts, so ranks that each post a receive and then send to
///   the next rank wait in a cycle. Exchanges use `sendrecv`/`sendrecv_async` (send_recv.hpp).
/// - One user thread issues operations on a communicator (MPI_THREAD_FUNNELED, as NCCL);
///   requests may be tested and waited on from any thread.
/// - A failed operation's exception is stored in its request and rethrown by `test()`/`wait()`.
///   The transport's state is unknown after a failure, so the communicator is then broken: every
///   operation queued after it and every later call fails with the same error code and the
///   message "communicator broken by an earlier failure: <original message>".
/// - Every wait is bounded: each operation ends by the communicator's timeout, and `wait()`
///   throws `errc::timeout` when the engine made no progress for longer than the timeout.
/// - Moving a communicator waits until its pending work is done; destroying it lets queued work
///   finish (for at most the timeout; what is still queued then fails with `errc::aborted`).

#include <concepts>
#include <type_traits>
#include <utility>

#include "gsync/allgather.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/alltoall.hpp"
#include "gsync/barrier.hpp"
#include "gsync/broadcast.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/request.hpp"
#include "gsync/reduce.hpp"
#include "gsync/reduce_scatter.hpp"
#include "gsync/send_recv.hpp"

namespace gsync {

/// Queues a compound job: `f(comm)` runs on the progress engine, in issue order with the other
/// operations. Inside `f`, use the ordinary synchronous collectives (they run inline on the engine
/// thread, one after another, and are numbered at that point); an `_async` call inside `f` runs
/// at once and returns a finished request. Anything `f` throws is stored in the request, surfaces
/// at `wait()`, and breaks the communicator. Collectives inside jobs are numbered separately
/// (core/communicator.hpp), so a collective that one rank runs inside a job must run inside a job
/// on every rank. `f` must not wait on requests of the same communicator issued after the job
/// (that would deadlock; `wait()` refuses it), and should keep to the communicator's deadlines.
/// \tparam X transport of the communicator.
/// \tparam F a callable `void(communicator<X>&)`; moved (or copied) into the queue, so it must
/// keep alive whatever it references until the request finished.
template <transport_policy X, class F>
  requires std::invocable<std::decay_t<F>&, communicator<X>&>
request submit(communicator<X>& comm, F&& f) {
  return comm.issue("submit() job", [g = std::forward<F>(f)](communicator<X>& c) mutable { g(c); });
}

}  // namespace gsync
