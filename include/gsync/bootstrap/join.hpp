#pragma once
/// \file
/// Joining a job: the definitions of `communicator::from_env`, `from_mpi` and `join` (declared in
/// core/communicator.hpp), which describe the job (bootstrap/launch_env.hpp), make room for its
/// descriptors (bootstrap/fd_limit.hpp), construct the transport and time its links (measure_links,
/// where the transport has it), turning what its set-up throws
/// into `gsync::error`. Set-up code, above core/: a file that only runs collectives on a
/// communicator it was given does not need it.

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/host_options.hpp"
#include "gsync/detail/mpi_launch.hpp"

namespace gsync {

template <transport_policy X>
communicator<X> communicator<X>::from_env()
  requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>
{
  return join(bootstrap::launch_info::from_env(), config::from_env());
}

template <transport_policy X>
template <class MpiComm>
communicator<X> communicator<X>::from_mpi(MpiComm mpi_comm, config cfg)
  requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>
{
  return join(detail::mpi_launch<MpiComm>::info(mpi_comm), std::move(cfg));
}

template <transport_policy X>
communicator<X> communicator<X>::join(const bootstrap::launch_info& li, config cfg)
  requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>
{
  if (cfg.deterministic) cfg.transport.net_probe = false;  // nothing measured can steer the choices
  if (auto raised = bootstrap::ensure_fd_room(bootstrap::fd_needed(li.size))) logger(li.rank).info(*raised);
  std::unique_ptr<X> x;
  try {
    if constexpr (std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger, const transport::host_options&>)
      x = std::make_unique<X>(li, cfg.timeout, logger(li.rank), cfg.transport);
    else
      x = std::make_unique<X>(li, cfg.timeout, logger(li.rank));
    if constexpr (requires(X& t) { t.measure_links(cfg.timeout); }) x->measure_links(cfg.timeout);  // collective, before any operation
  } catch (const error& e) {
    if (bootstrap::mentions_out_of_descriptors(e)) throw bootstrap::fd_exhausted(e.what(), li.size);
    throw;
  } catch (const std::system_error& e) {  // from the socket layer (Asio): one error type leaves the API
    if (bootstrap::out_of_descriptors(e.code())) throw bootstrap::fd_exhausted("rank " + std::to_string(li.rank) + ": set-up", li.size);
    throw error(errc::system, "rank " + std::to_string(li.rank) + ": set-up: " + e.what());
  } catch (const std::bad_alloc&) {
    throw error(errc::system, "rank " + std::to_string(li.rank) + ": set-up: out of memory");
  }
  return communicator(std::move(x), std::move(cfg), li.local_rank);
}

}  // namespace gsync
