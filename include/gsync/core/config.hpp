#pragma once
/// \file
/// Reading configuration from the environment: the one place the process's environment is read.
/// The GSYNC_* variables of the communicator and of the transport are parsed into `config` and
/// `transport::tcp_options`, with errors that name the variable and the value; the process-wide
/// switches (logging, tracing, clock, CPU paths), the identity and the launchers' variables are
/// read by the `env_*` functions below, which the files that use them call. What a program passes
/// explicitly (a `config` it fills, `transport::tcp_options`, a `bootstrap::launch_info`) is used
/// as given: the environment is read only by the `from_env` functions.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "gsync/core/error.hpp"
#include "gsync/transport/tcp_options.hpp"

namespace gsync {

namespace detail {

/// The value of environment variable `name`, or nothing when unset or empty.
inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

/// Parses a size with an optional K/M/G suffix (powers of 1024): "64K" -> 65536.
inline std::optional<std::size_t> parse_size(const std::string& s) {
  if (s.empty()) return std::nullopt;
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos, 10);
  } catch (...) {
    return std::nullopt;
  }
  std::string suffix = s.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.empty()) return v;
  if (suffix.size() != 1) return std::nullopt;
  switch (suffix[0]) {
    case 'k': case 'K': return v << 10;
    case 'm': case 'M': return v << 20;
    case 'g': case 'G': return v << 30;
    default: return std::nullopt;
  }
}

/// Reads an integer variable, throwing invalid_argument when it is set but not an integer in range.
inline std::optional<long long> env_int(const char* name, long long lo, long long hi) {
  auto v = env(name);
  if (!v) return std::nullopt;
  try {
    std::size_t pos = 0;
    long long x = std::stoll(*v, &pos, 10);
    if (pos == v->size() && x >= lo && x <= hi) return x;
  } catch (...) {
  }
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not an integer in [" +
                                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

/// The whole of `v` as a number in (0, 1e9), else nullopt.
inline std::optional<double> parse_positive(const std::string& v) {
  try {
    std::size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos == v.size() && x > 0 && x < 1e9) return x;
  } catch (...) {
  }
  return std::nullopt;
}

/// Reads a seconds value (may be fractional), throwing invalid_argument on garbage.
inline std::optional<std::chrono::milliseconds> env_seconds(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  if (auto x = parse_positive(*v)) return std::chrono::milliseconds(static_cast<long long>(*x * 1000.0));
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not a positive number of seconds");
}

/// A positive number of variable `name`, or 0 when unset; throws invalid_argument otherwise.
inline double env_positive(const char* name) {
  auto v = env(name);
  if (!v) return 0;
  if (auto x = parse_positive(*v)) return *x;
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not a positive number");
}

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
inline job_key_env env_job_key() {
  job_key_env e;
  e.key = env("GSYNC_JOB_KEY");
  e.file = env("GSYNC_JOB_KEY_FILE");
  if (auto f = env_int("GSYNC_JOB_KEY_FD", 0, 1 << 24)) e.fd = static_cast<int>(*f);
  if (auto a = env("GSYNC_ALLOW_UNAUTHENTICATED")) {
    if (*a != "0" && *a != "1")
      throw error(errc::invalid_argument, "GSYNC_ALLOW_UNAUTHENTICATED='" + *a + "' must be 0 or 1");
    e.allow_unauthenticated = *a == "1";
  }
  return e;
}
/// GSYNC_HOST_ID (this process's host identity, bootstrap/host_id.hpp).
inline std::optional<std::string> env_host_id() { return env("GSYNC_HOST_ID"); }

/// True when `name` is set to something other than "" or "0". Allocation-free.
inline bool env_set_nonzero(const char* name) noexcept {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
/// GSYNC_TICK_CLOCK=0: time with the steady clock, not the time-stamp counter (detail/tick_clock.hpp).
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
inline launch_env read_launch_env() {
  struct scheme { const char* name; const char* rank; const char* size; const char* local; const char* local_size; };
  static constexpr scheme schemes[] = {
      {"gsync", "GSYNC_RANK", "GSYNC_WORLD_SIZE", "GSYNC_LOCAL_RANK", "GSYNC_LOCAL_WORLD_SIZE"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
  };
  launch_env li;
  for (const auto& s : schemes) {
    if (!env(s.rank) || !env(s.size)) continue;
    li.size = static_cast<int>(*env_int(s.size, 1, 1 << 24));
    li.rank = static_cast<int>(*env_int(s.rank, 0, li.size - 1));
    auto lr = env_int(s.local, 0, li.size - 1);
    li.local_rank = lr ? static_cast<int>(*lr) : li.rank;
    if (s.local_size)
      if (auto ls = env_int(s.local_size, 1, li.size)) li.local_size = static_cast<int>(*ls);
    li.source = s.name;
    break;
  }
  if (li.source.empty()) return li;
  if (auto h = env_host_id()) li.host_id = *h;
  if (auto a = env("GSYNC_MASTER_ADDR")) li.master_addr = *a;
  else if (auto m = env("MASTER_ADDR")) li.master_addr = *m;
  if (auto p = env_int("GSYNC_MASTER_PORT", 1, 65535)) li.master_port = static_cast<std::uint16_t>(*p);
  else if (auto q = env_int("MASTER_PORT", 1, 65535)) li.master_port = static_cast<std::uint16_t>(*q);
  else if (li.source == "Open MPI") {
    // A port in [20000, 32768) from the Open MPI job identity (same on every rank of the job):
    // below Linux's default range of ephemeral ports (32768-60999), so that a connection another
    // program happens to have open on this host does not hold the store's port.
    std::string id;
    for (const char* v : {"OMPI_MCA_orte_precondition_transports", "OMPI_MCA_orte_hnp_uri", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})
      if (auto x = env(v)) {
        id = *x;
        break;
      }
    if (!id.empty()) {
      std::uint32_t h = 2166136261u;  // FNV-1a
      for (unsigned char ch : id) h = (h ^ ch) * 16777619u;
      li.master_port = static_cast<std::uint16_t>(20000 + h % 12768);
    }
  }
  return li;
}

/// The transport settings of the GSYNC_* variables, over `o` where a variable is unset. Every
/// value is checked here, before any connection, so that a bad one fails every rank the same way.
inline transport::tcp_options tcp_options_from_env(transport::tcp_options o = {}) {
  if (auto v = env("GSYNC_SHM_DISABLE"); v && *v != "0") o.shm = false;
  if (auto v = env("GSYNC_SHM_MEMBARRIER"); v && *v == "0") o.shm_light = false;
  if (auto b = env("GSYNC_SHM_BYTES")) {
    auto v = parse_size(*b);
    if (!v || !transport::tcp_options::valid_ring_bytes(*v))
      throw error(errc::invalid_argument, "GSYNC_SHM_BYTES='" + *b + "' is not a size between 4K and 1G, multiple of 64");
    o.shm_ring_bytes = *v;
  }
  if (auto b = env("GSYNC_SOCKET_BUFFER")) {
    auto v = parse_size(*b);
    if (!v || !transport::tcp_options::valid_socket_buffer(static_cast<long long>(*v))) throw error(errc::invalid_argument, "GSYNC_SOCKET_BUFFER='" + *b + "' is not a size such as 4M");
    o.socket_buffer_bytes = static_cast<int>(*v);  // 0: leave the kernel's autotuning alone
  }
  if (auto w = env_int("GSYNC_STALL_WARN_S", 0, 1000000)) o.stall_warn_s = static_cast<int>(*w);
  if (auto c = env("GSYNC_TCP_CONGESTION")) o.congestion = (*c == "default") ? std::string{} : *c;
  if (auto sp = env_int("GSYNC_SPIN_US", 0, 1000000)) o.spin_us = static_cast<int>(*sp);
  if (auto y = env_int("GSYNC_YIELD_US", 0, 10000000)) o.yield_us = static_cast<int>(*y);
  if (auto y = env_int("GSYNC_TCP_YIELD_US", 0, 10000000)) o.tcp_yield_us = static_cast<int>(*y);
  if (auto v = env("GSYNC_NET_PROBE")) {
    if (*v != "0" && *v != "1") throw error(errc::invalid_argument, "GSYNC_NET_PROBE='" + *v + "' must be 0 (off) or 1 (on, the default)");
    o.net_probe = *v == "1";
  }
  if (auto v = env("GSYNC_LAZY_CONNECT")) {
    if (*v != "0" && *v != "1") throw error(errc::invalid_argument, "GSYNC_LAZY_CONNECT='" + *v + "' must be 0 (connect every pair at start-up) or 1 (on first use, the default)");
    o.lazy_connect = *v == "1";
  }
  if (const double g = env_positive("GSYNC_NET_GBPS")) o.net_gbps = g;
  if (const double l = env_positive("GSYNC_NET_LATENCY_US")) o.net_latency_us = l;
  if (auto i = env("GSYNC_SOCKET_IFNAME")) o.socket_ifname = *i;
  if (auto v = env("GSYNC_CHECKSUM")) {
    if (*v != "0" && *v != "1") throw error(errc::invalid_argument, "GSYNC_CHECKSUM='" + *v + "' must be 0 (off, the default) or 1 (a CRC32C over every payload)");
    o.checksum = *v == "1";
  }
  if (auto l = env("GSYNC_LIVENESS_S")) {
    if (*l == "0") o.liveness_ms = 0;
    else if (auto x = parse_positive(*l); x && *x >= 1 && *x <= 86400) o.liveness_ms = static_cast<int>(*x * 1000);
    else throw error(errc::invalid_argument, "GSYNC_LIVENESS_S='" + *l + "' is not a number of seconds between 1 and 86400 (or 0: the kernel's)");
  }
  return o;
}

}  // namespace detail

/// Settings of device collectives between GPUs of one machine through CUDA IPC (cuda/ipc_group.hpp).
struct cuda_ipc_settings {
  /// Use CUDA IPC where every rank of a communicator can map the others' GPU memory
  /// (GSYNC_CUDA_IPC_DISABLE=1 clears it: device collectives then use host staging).
  bool enabled = true;
  /// Bytes of each of the two slots of the device arena every rank exports (GSYNC_CUDA_IPC_BUFFER,
  /// default 8M, at least 64K); messages larger than a slot move in chunks.
  std::size_t slot_bytes = std::size_t{8} << 20;
  /// Allreduce schedule forced over CUDA IPC (GSYNC_CUDA_IPC_ALGO: auto, oneshot, twoshot).
  std::string algo;
};

/// Per-communicator settings. `from_env()` reads the GSYNC_* variables; setters on the communicator
/// change them later.
struct config {
  /// Deadline of every blocking wait (GSYNC_TIMEOUT_S, default 300 s).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Pipelining unit of the ring and other segmented schedules (GSYNC_SEGMENT_BYTES, default 512K).
  std::size_t segment_bytes = 512 * 1024;
  /// Algorithm forced for every allreduce (GSYNC_ALGO), empty = automatic.
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
  /// (transport/tcp_options.hpp; GSYNC_SHM_*, GSYNC_SOCKET_*, GSYNC_SPIN_US, GSYNC_NET_*, ...).
  transport::tcp_options transport;

  /// Settings from the environment, defaults where unset.
  static config from_env() {
    config c;
    if (auto t = detail::env_seconds("GSYNC_TIMEOUT_S")) c.timeout = *t;
    if (auto s = detail::env("GSYNC_SEGMENT_BYTES")) {
      auto b = detail::parse_size(*s);
      if (!b || *b == 0) throw error(errc::invalid_argument, "GSYNC_SEGMENT_BYTES='" + *s + "' is not a size such as 512K");
      c.segment_bytes = *b;
    }
    if (auto a = detail::env("GSYNC_ALGO")) c.algo = *a;
    // Names are checked where they are used (algo/select_collectives.hpp), which knows the valid ones.
    if (auto a = detail::env("GSYNC_ALGO_BROADCAST")) c.algo_broadcast = *a;
    if (auto a = detail::env("GSYNC_ALGO_REDUCE")) c.algo_reduce = *a;
    if (auto a = detail::env("GSYNC_ALGO_ALLGATHER")) c.algo_allgather = *a;
    if (auto a = detail::env("GSYNC_ALGO_REDUCE_SCATTER")) c.algo_reduce_scatter = *a;
    if (auto a = detail::env("GSYNC_ALGO_ALLTOALL")) c.algo_alltoall = *a;
    if (auto d = detail::env("GSYNC_DETERMINISTIC")) {
      if (*d != "0" && *d != "1") throw error(errc::invalid_argument, "GSYNC_DETERMINISTIC='" + *d + "' must be 0 or 1");
      c.deterministic = *d == "1";
    }
    if (auto s = detail::env("GSYNC_CUDA_STAGING_BYTES")) {
      auto b = detail::parse_size(*s);
      if (!b || *b < (std::size_t{64} << 10))
        throw error(errc::invalid_argument, "GSYNC_CUDA_STAGING_BYTES='" + *s + "' is not a size of at least 64K, such as 64M");
      c.cuda_staging_bytes = *b;
    }
    if (auto d = detail::env("GSYNC_CUDA_IPC_DISABLE")) {
      if (*d != "0" && *d != "1") throw error(errc::invalid_argument, "GSYNC_CUDA_IPC_DISABLE='" + *d + "' must be 0 or 1");
      c.cuda_ipc.enabled = *d == "0";
    }
    if (auto s = detail::env("GSYNC_CUDA_IPC_BUFFER")) {
      auto b = detail::parse_size(*s);
      if (!b || *b < (std::size_t{64} << 10))
        throw error(errc::invalid_argument, "GSYNC_CUDA_IPC_BUFFER='" + *s + "' is not a size of at least 64K, such as 8M");
      c.cuda_ipc.slot_bytes = *b;
    }
    if (auto a = detail::env("GSYNC_CUDA_IPC_ALGO")) {
      if (*a != "auto" && *a != "oneshot" && *a != "twoshot")
        throw error(errc::invalid_argument, "GSYNC_CUDA_IPC_ALGO='" + *a + "' is not one of auto, oneshot, twoshot");
      c.cuda_ipc.algo = *a;
    }
    c.transport = detail::tcp_options_from_env();
    return c;
  }
};

}  // namespace gsync
