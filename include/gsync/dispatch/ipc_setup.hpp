#pragma once
/// \file
/// The collective set-up of a communicator's CUDA IPC group (cuda/ipc_group.hpp says its steps),
/// run at the communicator's first device collective that may use it. The records travel by an
/// allgather over the communicator itself, ordered and checked like any of its operations, so the
/// set-up works for every communicator (also those that have no rendezvous store of their own).
/// Every rank reaches the same decision; the reason for host staging, or the group formed, is
/// logged at GSYNC_DEBUG=INFO. A rank whose settings (GSYNC_CUDA_IPC_DISABLE) or program (no IPC
/// kernels) rule CUDA IPC out skips the exchange: those are alike on every rank of a job.
/// When the ranks span several hosts, each host's ranks form their own group (group rank = local
/// index) for the hierarchical device allreduce (dispatch/ipc_hierarchical.hpp); every host must
/// form its group, or every rank keeps to staging.
///
/// Included at the end of each collective header that has a device overload (it needs the host
/// allgather, which itself has one).

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gsync/algo/select.hpp"
#include "gsync/dispatch/host_allgather.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/core/log.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/dispatch/ipc_collective.hpp"

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
  const topology& t = comm.placement();
  const bool across = t.hosts() > 1;
  // Properties of the program, its settings or the placement, alike on every rank of a job (a
  // rank that differs runs a staged collective against the others' set-up exchange: a mismatch,
  // reported as such).
  const char* local = !comm.settings().cuda_ipc.enabled ? "GSYNC_CUDA_IPC_DISABLE=1"
                      : !cuda::installed_ipc_kernels()  ? "no CUDA IPC kernels in this program (no file that includes gsync's "
                                                          "collectives was compiled with nvcc)"
                      : across && !t.uniform()          ? "the hosts run different numbers of ranks (the hierarchical device "
                                                          "allreduce needs the same number on every host)"
                      : across && t.ranks_per_host() == 1 ? "one rank per host: no other GPU of the host to map"
                                                          : nullptr;
  if (local) {
    comm.log().info(std::string("device collectives through host staging, not CUDA IPC: ") + local);
    st->refusal = local;
    slot = st;
    return st;
  }
  // Across hosts the group is the ranks of this rank's host, numbered by local index.
  const int me = across ? t.local_index(comm.rank()) : comm.rank();
  const int members = across ? t.ranks_per_host() : comm.size();
  auto g = std::make_unique<cuda::ipc::group>(cuda::current_runtime_api(), me, members, comm.settings().cuda_ipc,
                                              cuda::installed_ipc_kernels() != nullptr, comm.log(), comm.issue_timeout());
  if (across) g->name_members(t.ranks_on(t.host_of(comm.rank())));  // messages name communicator ranks
  const std::vector<cuda::ipc::peer_record> all = ipc_exchange(comm, g->record());
  std::vector<cuda::ipc::peer_record> mates;
  if (across)
    for (int r : t.ranks_on(t.host_of(comm.rank()))) mates.push_back(all[static_cast<std::size_t>(r)]);
  const std::span<const cuda::ipc::peer_record> group_records = across ? std::span<const cuda::ipc::peer_record>(mates) : all;
  // The verdict of this rank's group, then everyone's: one host that cannot form its group keeps
  // every rank on staging (the hierarchical allreduce needs every host).
  std::string why = cuda::ipc::group_refusal(group_records);
  const bool tried = why.empty();
  if (tried) why = g->connect(group_records);
  struct status {
    char why[200];
  } mine{};
  if (!why.empty()) cuda::ipc::set_field(mine.why, across ? "host " + std::to_string(t.host_of(comm.rank())) + ": " + why : why);
  why.clear();
  for (const auto& s : ipc_exchange(comm, mine))
    if (s.why[0]) {
      why = cuda::ipc::field(s.why);
      break;
    }
  if (!why.empty()) {
    if (tried) g->disconnect();
    (void)ipc_exchange(comm, std::uint8_t{0});  // every rank closed the peers' arenas before any frees its own
  } else {
    g->finish();
  }
  if (why.empty()) {
    int others = 0;
    for (const auto& r : group_records) others += r.pid != g->record().pid;
    const std::string among = std::to_string(members) + " ranks" + (across ? " of each host" : "") + " (" + std::to_string(others) +
                              " in other processes; arena slots of " + std::to_string(g->layout().slot_bytes >> 10) +
                              " KiB; slowest cudaIpcOpenMemHandle " + detail::fixed(g->open_us(), 0) + " us)";
    if (across) {
      st->across_hosts = true;
      st->cross = t.cross(me);
      st->host = t.host_of(comm.rank());
      st->network = algo::network_of(t);
      comm.log().info("device allreduce hierarchical over " + std::to_string(t.hosts()) + " hosts: CUDA IPC among the " + among +
                      ", host staging across hosts; other device collectives through host staging");
    } else {
      comm.log().info("device collectives over CUDA IPC among " + among);
    }
    st->group = std::move(g);
  } else {
    comm.log().info("device collectives through host staging, not CUDA IPC: " + why);
    st->refusal = std::move(why);
  }
  slot = st;
  return st;
}

}  // namespace gsync::detail

namespace gsync {

/// Makes `comm`'s device resources now, on the calling thread's current device: its CUDA IPC
/// group where its ranks can form one, the pinned staging mirrors (twice GSYNC_CUDA_STAGING_BYTES)
/// and the gate of its streams. Collective: every rank calls it. Optional for a process that
/// drives one rank: the first device collective does the same. A process that drives several
/// ranks on one device (threads) calls it on each communicator before any device operation of
/// any of them: allocating device or pinned memory synchronises the device, so a rank must not
/// allocate while a stream of another waits for it (gsync then fails with errc::timeout rather
/// than risk a device-level deadlock).
/// \tparam X transport of the communicator.
template <class X>
void prepare_device(communicator<X>& comm) {
  if (comm.broken()) comm.engine().throw_broken();
  (void)detail::ipc_state_of(comm);
  (void)detail::prepared_device_state(comm);
}

}  // namespace gsync
