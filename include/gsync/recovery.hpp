#pragma once
/// \file
/// Recovery: `communicator::health()`, what this rank knows of failures without blocking, and
/// `communicator::shrink()`, going on without the ranks that failed (both declared in
/// core/communicator.hpp; the transport's liveness: transport/mesh/heartbeat.hpp; its agreement on
/// the survivors: transport/mesh/shrink.ipp).
///
/// \code
///   try {
///     gsync::allreduce(comm, grad);
///   } catch (const gsync::error& e) {
///     if (e.kind() != gsync::errc::peer_lost && e.kind() != gsync::errc::aborted) throw;
///     comm = comm.shrink();  // every survivor calls it; ranks keep their old order
///   }
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
communicator<X> communicator<X>::shrink()
  requires shrinkable_transport<X>
{
  if (!x_) null_use();
  std::unique_ptr<X> next;
  try {
    next = x_->shrink(cfg_.timeout);
  } catch (const error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw error(errc::system, "shrink: out of memory");
  } catch (const std::exception& e) {
    throw error(errc::system, std::string("shrink: ") + e.what());
  }
  return communicator(std::move(next), cfg_, -1);
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
