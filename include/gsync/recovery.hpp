#pragma once
/// \file
/// Recovery: `communicator::health()`, what this rank knows of failures without blocking, and
/// `communicator::shrink()`, going on without the ranks that failed (both declared in
/// core/communicator.hpp; the transport's liveness: transport/mesh/heartbeat.hpp; its agreement on
/// the survivors: transport/mesh/shrink.ipp). Every communicator a rank belongs to (its world,
/// those made by `split`) is shrunk separately, in the same order on every rank, as any collective.
///
/// \code
///   try {
///     gsync::allreduce(comm, grad);
///   } catch (const gsync::error& e) {
///     if (e.kind() != gsync::errc::peer_lost && e.kind() != gsync::errc::aborted) throw;
///     comm = comm.shrink();  // every survivor calls it; ranks keep their old order
///   }                          // a rank the others went on without gets errc::excluded
///   if (comm.last_shrink().my_ops > comm.last_shrink().agreed_ops) { /* redo the last step */ }
///   if (!comm.health()) comm = comm.shrink();  // between steps: a peer stopped or vanished
/// \endcode

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/health.hpp"

namespace gsync {

template <transport_policy X>
communicator<X> communicator<X>::shrink(const shrink_options& opt)
  requires shrinkable_transport<X>
{
  if (!x_) null_use();
  if (opt.min_size < 0) throw error(errc::invalid_argument, "shrink: min_size " + std::to_string(opt.min_size) + " is negative");
  quiesce();  // what failed is over: the count of completed collectives is final
  shrink_report rep;
  std::unique_ptr<X> next;
  try {
    next = x_->shrink(cfg_.timeout, shrink_terms{opt.min_size, numbers_.completed_count()}, rep);
  } catch (const error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw error(errc::system, "shrink: out of memory");
  } catch (const std::exception& e) {
    throw error(errc::system, std::string("shrink: ") + e.what());
  }
  communicator c(std::move(next), cfg_, -1);
  c.shrunk_ = std::move(rep);
  return c;
}

template <transport_policy X>
health_report communicator<X>::health() const noexcept {
  health_report h;
  try {
    if (aborted()) {
      h.kind = errc::aborted;
      h.message = "communicator aborted";
    } else if (engine_ && engine_->broken()) {
      const error e = engine_->shared()->broken_error();
      h.kind = e.kind();
      h.message = e.what();
    }
    if constexpr (health_reporting_transport<X>) {
      if (x_ && (h.ok() || h.kind == errc::aborted)) {  // the transport knows the aborted rank's words and a lost rank's number
        health_report t = x_->health();
        if (!t.ok()) h = std::move(t);
      }
    }
  } catch (...) {  // out of memory for a message: the kind is what matters
    if (h.ok()) h.kind = errc::system;
  }
  return h;
}

}  // namespace gsync
