#pragma once
/// \file
/// Who am I? Rank, world size, local rank and the rendezvous address, read from whichever launcher
/// started the process, in this order:
///   1. gsync:   GSYNC_RANK, GSYNC_WORLD_SIZE, GSYNC_LOCAL_RANK (gsyncrun sets these)
///   2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK (+ MASTER_ADDR, MASTER_PORT)
///   3. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
///   4. Slurm:   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
/// The store address: GSYNC_MASTER_ADDR / GSYNC_MASTER_PORT, else MASTER_ADDR / MASTER_PORT, else
/// 127.0.0.1 and 29500. Under Open MPI with no port given, the port is derived from the job id so
/// two concurrent `mpirun` jobs on one host do not collide.

#include <cstdint>
#include <optional>
#include <string>

#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/detail/function_ref.hpp"

namespace gsync::bootstrap {

/// What the launcher told this process.
struct launch_info {
  int rank = 0;                 ///< global rank
  int size = 1;                 ///< world size
  int local_rank = 0;           ///< rank among the processes of this host
  int local_size = 0;           ///< processes on this host (0 = the launcher did not say)
  std::string master_addr = "127.0.0.1";  ///< host of the store (rank 0)
  std::uint16_t master_port = 29500;      ///< port of the store
  std::string source;           ///< which launcher's variables were used ("gsync", "torchrun", ...)
  /// This process's host identity (GSYNC_HOST_ID); empty = computed (bootstrap/host_id.hpp).
  /// Ranks with equal identities share memory and form the intra-host level.
  std::string host_id;
  /// The job key every connection must prove (bootstrap/auth.hpp), at least 16 bytes. Unset:
  /// GSYNC_JOB_KEY, GSYNC_JOB_KEY_FILE or GSYNC_JOB_KEY_FD, read when the transport starts; "": none.
  std::optional<std::string> job_key;
  /// Whether a job without a key may run when its ports are reachable beyond loopback (closed by
  /// default, bootstrap/auth.hpp). Unset: GSYNC_ALLOW_UNAUTHENTICATED.
  std::optional<bool> allow_unauthenticated;
  /// Set by bootstraps that carry their own collectives (from_mpi, gsync/mpi.hpp): rank 0 serves
  /// the store on `master_addr` (empty: its own address, bootstrap/interface.hpp) at any free port
  /// and calls this with "ADDRESS PORT", or with "!" and why it could not; every other rank calls
  /// it with an empty string, which it must fill with rank 0's (a broadcast). `master_port` is
  /// then not read. Called once per rank, first thing in set-up, so that no rank is left waiting.
  detail::shared_function<void(std::string&)> share_store;

  /// Reads the environment; throws invalid_argument when no launcher's variables are present or
  /// they are inconsistent.
  static launch_info from_env() {
    const detail::launch_env e = detail::read_launch_env();  // core/config.hpp
    if (e.source.empty())
      throw error(errc::invalid_argument,
                  "cannot tell this process's rank: set GSYNC_RANK and GSYNC_WORLD_SIZE, or start it with gsyncrun, "
                  "torchrun, mpirun or srun");
    launch_info li;
    li.rank = e.rank, li.size = e.size, li.local_rank = e.local_rank, li.local_size = e.local_size;
    li.source = e.source, li.host_id = e.host_id, li.master_addr = e.master_addr, li.master_port = e.master_port;
    return li;
  }
};

}  // namespace gsync::bootstrap
