#pragma once
/// \file
/// Reading configuration from the environment: the one place the process's environment is read
/// (with the definitions in core/config.ipp).
/// The GSYNC_* variables of the communicator and of the transport are parsed into `config` and
/// `transport::host_options`, with errors that name the variable and the value; the process-wide
/// switches (logging, tracing, clock, CPU paths), the identity and the launchers' variables are
/// read by the `env_*` functions below, which the files that use them call. What a program passes
/// explicitly (a `config` it fills, `transport::host_options`, a `bootstrap::launch_info`) is used
/// as given: the environment is read only by the `from_env` functions.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "gsync/core/error.hpp"
#include "gsync/detail/build_mode.hpp"
#include "gsync/core/host_options.hpp"

namespace gsync {

namespace detail {

/// The value of environment variable `name`, or nothing when unset or empty.
GSYNC_DECL std::optional<std::string> env(const char* name);

/// Parses a size with an optional K/M/G suffix (powers of 1024): "64K" -> 65536.
GSYNC_DECL std::optional<std::size_t> parse_size(const std::string& s);

/// Reads an integer variable, throwing invalid_argument when it is set but not an integer in range.
GSYNC_DECL std::optional<long long> env_int(const char* name, long long lo, long long hi);

/// The whole of `v` as a number in (0, 1e9), else nullopt.
GSYNC_DECL std::optional<double> parse_positive(const std::string& v);

/// Reads a seconds value (may be fractional), throwing invalid_argument on garbage.
GSYNC_DECL std::optional<std::chrono::milliseconds> env_seconds(const char* name);

/// A positive number of variable `name`, or 0 when unset; throws invalid_argument otherwise.
GSYNC_DECL double env_positive(const char* name);

/// GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US (0 where unset; invalid_argument on garbage): the
/// links between hosts as the user describes them (core/links.hpp).
inline std::pair<double, double> env_net_rates() { return {env_positive("GSYNC_NET_GBPS"), env_positive("GSYNC_NET_LATENCY_US")}; }

/// GSYNC_DEBUG (log verbosity, parsed in core/log.hpp, once per process).
inline std::optional<std::string> env_debug_level() { return env("GSYNC_DEBUG"); }
/// GSYNC_DEBUG_FILE (per-rank log file template, core/log.hpp).
inline std::optional<std::string> env_debug_file() { return env("GSYNC_DEBUG_FILE"); }
/// GSYNC_TRACE (per-rank trace file template, core/trace.hpp).
inline std::optional<std::string> env_trace() { return env("GSYNC_TRACE"); }
/// Where the job's shared secret may come from (bootstrap/auth.hpp resolves them, in this order):
/// GSYNC_JOB_KEY (the secret itself), GSYNC_JOB_KEY_FILE (a file holding it, readable by its owner
/// only), GSYNC_JOB_KEY_FD (a descriptor gsyncrun passes, so the secret is in no environment);
/// and GSYNC_ALLOW_UNAUTHENTICATED=1, the explicit consent to run without one beyond loopback.
struct job_key_env {
  std::optional<std::string> key;   ///< GSYNC_JOB_KEY
  std::optional<std::string> file;  ///< GSYNC_JOB_KEY_FILE
  std::optional<int> fd;            ///< GSYNC_JOB_KEY_FD
  bool allow_unauthenticated = false;  ///< GSYNC_ALLOW_UNAUTHENTICATED=1
};
/// Reads the job-key variables; invalid_argument for a malformed descriptor or switch.
GSYNC_DECL job_key_env env_job_key();
/// GSYNC_HOST_ID (this process's host identity, bootstrap/host_id.hpp).
inline std::optional<std::string> env_host_id() { return env("GSYNC_HOST_ID"); }

/// True when `name` is set to something other than "" or "0". Allocation-free.
inline bool env_set_nonzero(const char* name) noexcept {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
/// GSYNC_TICK_CLOCK=0: time with the steady clock, not the time-stamp counter (core/tick_clock.hpp).
inline bool env_tick_clock_off() noexcept {
  const char* v = std::getenv("GSYNC_TICK_CLOCK");
  return v && std::strcmp(v, "0") == 0;
}
/// GSYNC_NO_AVX2: the reduction loops leave their 256-bit paths off (core/cpu_features.hpp).
inline bool env_no_avx2() noexcept { return env_set_nonzero("GSYNC_NO_AVX2"); }
/// GSYNC_NO_F16C: half-precision conversions leave F16C off (core/half_simd.hpp).
inline bool env_no_f16c() noexcept { return env_set_nonzero("GSYNC_NO_F16C"); }

/// What the launcher told this process (bootstrap::launch_info::from_env copies it).
struct launch_env {
  int rank = 0, size = 1, local_rank = 0, local_size = 0;
  std::string source;       // which launcher's variables were found; empty: none
  std::string host_id;      // GSYNC_HOST_ID
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;
};

/// Reads rank, world size, local rank and the store's address from whichever launcher started the
/// process, in this order: gsync (GSYNC_RANK, GSYNC_WORLD_SIZE, GSYNC_LOCAL_RANK,
/// GSYNC_LOCAL_WORLD_SIZE), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), Open MPI
/// (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); the store at
/// GSYNC_MASTER_ADDR / GSYNC_MASTER_PORT, else MASTER_ADDR / MASTER_PORT, else 127.0.0.1 and
/// 29500, or under Open MPI a port derived from the job id. `source` stays empty when no
/// launcher's variables are there; invalid_argument when they are inconsistent.
GSYNC_DECL launch_env read_launch_env();

/// The transport settings of the GSYNC_* variables, over `o` where a variable is unset. Every
/// value is checked here, before any connection, so that a bad one fails every rank the same way.
GSYNC_DECL transport::host_options host_options_from_env(transport::host_options o = {});

}  // namespace detail

/// Settings of device collectives between GPUs of one machine through CUDA IPC (cuda/ipc_group.hpp).
struct cuda_ipc_settings {
  /// Use CUDA IPC where every rank of a communicator can map the others' GPU memory
  /// (GSYNC_CUDA_IPC_DISABLE=1 clears it: device collectives then use host staging).
  bool enabled = true;
  /// Bytes of each of the two slots of the device arena every rank exports (GSYNC_CUDA_IPC_BUFFER,
  /// default 8M, at least 64K); messages larger than a slot move in chunks.
  std::size_t slot_bytes = std::size_t{8} << 20;
  /// Allreduce schedule forced where the automatic choice runs over CUDA IPC (GSYNC_CUDA_IPC_ALGO:
  /// auto, oneshot, twoshot; the older spelling of GSYNC_ALGO=one_shot / two_shot).
  std::string algo;
};

/// Per-communicator settings. `from_env()` reads the GSYNC_* variables; setters on the communicator
/// change them later.
struct config {
  /// Deadline of every blocking wait (GSYNC_TIMEOUT_S, default 300 s).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Pipelining unit of the ring and other segmented schedules (GSYNC_SEGMENT_BYTES, default 512K).
  std::size_t segment_bytes = 512 * 1024;
  /// Algorithm forced for every allreduce (GSYNC_ALGO), empty = automatic: a host algorithm
  /// (host memory, and device memory through host staging) or a device one (algo/cuda_ipc.hpp:
  /// device memory over CUDA IPC; host allreduces then choose automatically).
  std::string algo;
  /// Algorithm forced for every broadcast (GSYNC_ALGO_BROADCAST), empty = automatic.
  std::string algo_broadcast;
  /// Algorithm forced for every reduce (GSYNC_ALGO_REDUCE), empty = automatic.
  std::string algo_reduce;
  /// Algorithm forced for every allgather (GSYNC_ALGO_ALLGATHER), empty = automatic.
  std::string algo_allgather;
  /// Algorithm forced for every reduce-scatter (GSYNC_ALGO_REDUCE_SCATTER), empty = automatic.
  std::string algo_reduce_scatter;
  /// Algorithm forced for every alltoall (GSYNC_ALGO_ALLTOALL), empty = automatic.
  std::string algo_alltoall;
  /// Algorithm forced for every gather (GSYNC_ALGO_GATHER), empty = automatic.
  std::string algo_gather;
  /// Algorithm forced for every scatter (GSYNC_ALGO_SCATTER), empty = automatic.
  std::string algo_scatter;
  /// Algorithm forced for every allgatherv (GSYNC_ALGO_ALLGATHERV), empty = automatic.
  std::string algo_allgatherv;
  /// Algorithm forced for every reduce_scatterv (GSYNC_ALGO_REDUCE_SCATTERV), empty = automatic.
  std::string algo_reduce_scatterv;
  /// Algorithm forced for every alltoallv (GSYNC_ALGO_ALLTOALLV), empty = automatic.
  std::string algo_alltoallv;
  /// Deterministic mode (GSYNC_DETERMINISTIC=1): every result is bitwise equal from run to run for
  /// the same world size and placement. The automatic choices then read only the placement, the
  /// sizes and these settings, never what the start-up probe measured (`join` skips the probe;
  /// the links count as assumed, or as given by GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US).
  bool deterministic = false;
  /// Device buffers moved through host staging (cuda/staging.hpp): the most bytes of pinned host
  /// memory one operation's mirror holds (GSYNC_CUDA_STAGING_BYTES, default 64M, at least 64K).
  /// A message whose mirror would be larger runs as consecutive windows. Every rank must use the
  /// same value (a difference is reported as a mismatch).
  std::size_t cuda_staging_bytes = std::size_t{64} << 20;
  /// Device collectives through CUDA IPC (GSYNC_CUDA_IPC_DISABLE, GSYNC_CUDA_IPC_BUFFER,
  /// GSYNC_CUDA_IPC_ALGO).
  cuda_ipc_settings cuda_ipc;
  /// Settings of the TCP / shared-memory transport, for communicators that `join` a job
  /// (core/host_options.hpp; GSYNC_SHM_*, GSYNC_SOCKET_*, GSYNC_SPIN_US, GSYNC_NET_*, ...).
  transport::host_options transport;

  /// Settings from the environment, defaults where unset.
  GSYNC_DECL static config from_env();
};

}  // namespace gsync

#if !defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/core/config.ipp"
#endif
