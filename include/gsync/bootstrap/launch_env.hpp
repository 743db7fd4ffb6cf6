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
  /// The job key every connection must prove (bootstrap/auth.hpp). Unset: GSYNC_JOB_KEY, read
  /// when the transport starts; set to "": no authentication.
  std::optional<std::string> job_key;

  /// Reads the environment; throws invalid_argument when no launcher's variables are present or
  /// they are inconsistent.
  static launch_info from_env() {
    struct scheme { const char* name; const char* rank; const char* size; const char* local; const char* local_size; };
    static constexpr scheme schemes[] = {
        {"gsync", "GSYNC_RANK", "GSYNC_WORLD_SIZE", "GSYNC_LOCAL_RANK", "GSYNC_LOCAL_WORLD_SIZE"},
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
        {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
    };
    launch_info li;
    bool found = false;
    for (const auto& s : schemes) {
      if (!detail::env(s.rank) || !detail::env(s.size)) continue;
      li.size = static_cast<int>(*detail::env_int(s.size, 1, 1 << 24));
      li.rank = static_cast<int>(*detail::env_int(s.rank, 0, li.size - 1));
      auto lr = detail::env_int(s.local, 0, li.size - 1);
      li.local_rank = lr ? static_cast<int>(*lr) : li.rank;
      if (s.local_size)
        if (auto ls = detail::env_int(s.local_size, 1, li.size)) li.local_size = static_cast<int>(*ls);
      li.source = s.name;
      found = true;
      break;
    }
    if (!found)
      throw error(errc::invalid_argument,
                  "cannot tell this process's rank: set GSYNC_RANK and GSYNC_WORLD_SIZE, or start it with gsyncrun, "
                  "torchrun, mpirun or srun");
    if (auto h = detail::env("GSYNC_HOST_ID")) li.host_id = *h;
    if (auto a = detail::env("GSYNC_MASTER_ADDR")) li.master_addr = *a;
    else if (auto m = detail::env("MASTER_ADDR")) li.master_addr = *m;
    if (auto p = detail::env_int("GSYNC_MASTER_PORT", 1, 65535)) li.master_port = static_cast<std::uint16_t>(*p);
    else if (auto q = detail::env_int("MASTER_PORT", 1, 65535)) li.master_port = static_cast<std::uint16_t>(*q);
    else if (li.source == "Open MPI") li.master_port = derived_port();
    return li;
  }

 private:
  // A port in [20000, 32768) from the Open MPI job identity (same on every rank of the job): below
  // Linux's default range of ephemeral ports (32768-60999), so that a connection another program
  // happens to have open on this host does not hold the store's port.
  static std::uint16_t derived_port() {
    std::string id;
    for (const char* v : {"OMPI_MCA_orte_precondition_transports", "OMPI_MCA_orte_hnp_uri", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})
      if (auto x = detail::env(v)) { id = *x; break; }
    if (id.empty()) return 29500;
    std::uint32_t h = 2166136261u;  // FNV-1a
    for (unsigned char ch : id) h = (h ^ ch) * 16777619u;
    return static_cast<std::uint16_t>(20000 + h % 12768);
  }
};

}  // namespace gsync::bootstrap
