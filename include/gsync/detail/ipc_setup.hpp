#pragma once
/// \file
/// The collective set-up of a communicator's CUDA IPC group (cuda/ipc_group.hpp says its steps),
/// run at the communicator's first device collective that may use it. The records travel by an
/// allgather over the communicator itself, ordered and checked like any of its operations, so the
/// set-up works for every communicator (also those that have no rendezvous store of their own).
/// Every rank reaches the same decision; the reason for host staging, or the group formed, is
/// logged at GSYNC_DEBUG=INFO. A rank whose settings (GSYNC_CUDA_IPC_DISABLE) or program (no IPC
/// kernels) rule CUDA IPC out skips the exchange: those are alike on every rank of a job.
///
/// Included at the end of each collective header that has a device overload (it needs the host
/// allgather, which itself has one).

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gsync/allgather.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/ipc_collective.hpp"

namespace gsync::detail {

/// Allgather of one fixed-size record per rank, as bytes.
template <class X, class R>
std::vector<R> ipc_exchange(communicator<X>& comm, const R& mine) {
  std::vector<R> all(static_cast<std::size_t>(comm.size()));
  allgather_impl<algo::automatic>(comm, reinterpret_cast<const std::uint8_t*>(&mine), reinterpret_cast<std::uint8_t*>(all.data()),
                                  sizeof(R));
  return all;
}

template <class X>
std::shared_ptr<ipc_state> ipc_state_of(communicator<X>& comm) {
  auto& slot = comm.ipc_state_slot();
  if (slot) return std::static_pointer_cast<ipc_state>(slot);
  if (comm.broken()) return nullptr;
  auto st = std::make_shared<ipc_state>();
  // Properties of the program or its settings, alike on every rank of a job (a rank that differs
  // runs a staged collective against the others' set-up exchange: a mismatch, reported as such).
  const char* local = !comm.settings().cuda_ipc.enabled    ? "GSYNC_CUDA_IPC_DISABLE=1"
                      : !cuda::installed_ipc_kernels()     ? "no CUDA IPC kernels in this program (no file that includes gsync's "
                                                             "collectives was compiled with nvcc)"
                                                           : nullptr;
  if (local) {
    comm.log().info(std::string("device collectives through host staging, not CUDA IPC: ") + local);
    st->refusal = local;
    slot = st;
    return st;
  }
  auto g = std::make_unique<cuda::ipc::group>(cuda::current_runtime_api(), comm.rank(), comm.size(), comm.settings().cuda_ipc,
                                              cuda::installed_ipc_kernels() != nullptr, comm.log());
  const std::vector<cuda::ipc::peer_record> all = ipc_exchange(comm, g->record());
  std::string why = cuda::ipc::group_refusal(all);
  if (why.empty()) {
    struct status {
      char why[200];
    } mine{};
    cuda::ipc::set_field(mine.why, g->connect(all));
    const std::vector<status> st_all = ipc_exchange(comm, mine);
    for (const auto& s : st_all)
      if (s.why[0]) {
        why = cuda::ipc::field(s.why);
        break;
      }
    if (!why.empty()) {
      g->disconnect();
      (void)ipc_exchange(comm, std::uint8_t{0});  // every rank closed the peers' arenas before any frees its own
    } else {
      g->finish();
    }
  }
  if (why.empty()) {
    int others = 0;
    for (const auto& r : all) others += r.pid != g->record().pid;
    comm.log().info("device collectives over CUDA IPC among " + std::to_string(comm.size()) + " ranks (" + std::to_string(others) +
                    " in other processes; arena slots of " + std::to_string(g->layout().slot_bytes >> 10) +
                    " KiB; slowest cudaIpcOpenMemHandle " + detail::fixed(g->open_us(), 0) + " us)");
    st->group = std::move(g);
  } else {
    comm.log().info("device collectives through host staging, not CUDA IPC: " + why);
    st->refusal = std::move(why);
  }
  slot = st;
  return st;
}

}  // namespace gsync::detail
