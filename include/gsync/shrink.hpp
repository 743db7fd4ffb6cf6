#pragma once
/// \file
/// `communicator::shrink()`: going on without the ranks that failed (declared in
/// core/communicator.hpp; the transport's agreement on the survivors: transport/mesh/shrink.ipp).
///
/// \code
///   try {
///     gsync::allreduce(comm, grad);
///   } catch (const gsync::error& e) {
///     if (e.kind() != gsync::errc::peer_lost && e.kind() != gsync::errc::aborted) throw;
///     comm = comm.shrink();  // every survivor calls it; ranks keep their old order
///   }
/// \endcode

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"

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

}  // namespace gsync
