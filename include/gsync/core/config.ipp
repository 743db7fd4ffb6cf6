#pragma once
/// \file
/// Definitions of core/config.hpp's functions that read the environment: included by that header in
/// the header-only mode, by gsync/impl/src.hpp with GSYNC_SEPARATE_COMPILATION (detail/build_mode.hpp).

#include "gsync/core/config.hpp"

namespace gsync {

namespace detail {

GSYNC_DECL std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

GSYNC_DECL std::optional<std::size_t> parse_size(const std::string& s) {
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

GSYNC_DECL std::optional<long long> env_int(const char* name, long long lo, long long hi) {
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

GSYNC_DECL std::optional<double> parse_positive(const std::string& v) {
  try {
    std::size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos == v.size() && x > 0 && x < 1e9) return x;
  } catch (...) {
  }
  return std::nullopt;
}

GSYNC_DECL std::optional<std::chrono::milliseconds> env_seconds(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  if (auto x = parse_positive(*v)) return std::chrono::milliseconds(static_cast<long long>(*x * 1000.0));
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not a positive number of seconds");
}

GSYNC_DECL double env_positive(const char* name) {
  auto v = env(name);
  if (!v) return 0;
  if (auto x = parse_positive(*v)) return *x;
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not a positive number");
}

GSYNC_DECL job_key_env env_job_key() {
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

GSYNC_DECL launch_env read_launch_env() {
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

GSYNC_DECL transport::host_options host_options_from_env(transport::host_options o) {
  if (auto v = env("GSYNC_SHM_DISABLE"); v && *v != "0") o.shm = false;
  if (auto v = env("GSYNC_SHM_MEMBARRIER"); v && *v == "0") o.shm_light = false;
  if (auto b = env("GSYNC_SHM_BYTES")) {
    auto v = parse_size(*b);
    if (!v || !transport::host_options::valid_ring_bytes(*v))
      throw error(errc::invalid_argument, "GSYNC_SHM_BYTES='" + *b + "' is not a size between 4K and 1G, multiple of 64");
    o.shm_ring_bytes = *v;
  }
  if (auto b = env("GSYNC_SHM_SINGLE_COPY")) {
    auto v = parse_size(*b);
    if (!v) throw error(errc::invalid_argument, "GSYNC_SHM_SINGLE_COPY='" + *b + "' is not a size such as 256K (0 turns single copy off)");
    o.shm_single_copy_bytes = *v;
  }
  if (auto b = env("GSYNC_SOCKET_BUFFER")) {
    auto v = parse_size(*b);
    if (!v || !transport::host_options::valid_socket_buffer(static_cast<long long>(*v))) throw error(errc::invalid_argument, "GSYNC_SOCKET_BUFFER='" + *b + "' is not a size such as 4M");
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
  if (auto v = env("GSYNC_IB_DISABLE")) {
    if (*v != "0" && *v != "1") throw error(errc::invalid_argument, "GSYNC_IB_DISABLE='" + *v + "' must be 0 (verbs where a port can reach the peer, the default) or 1 (TCP between hosts)");
    o.ib.enabled = *v == "0";
  }
  if (auto v = env("GSYNC_IB_HCA")) o.ib.hca = *v;  // its grammar is checked where it is used (verbs/hca_filter.hpp)
  if (auto g = env_int("GSYNC_IB_GID_INDEX", 0, 255)) o.ib.gid_index = static_cast<int>(*g);
  if (auto t = env_int("GSYNC_IB_TIMEOUT", 1, 31)) o.ib.timeout = static_cast<int>(*t);  // 4.096 us * 2^t per try
  if (auto r = env_int("GSYNC_IB_RETRY_CNT", 0, 7)) o.ib.retry_cnt = static_cast<int>(*r);
  if (auto b = env("GSYNC_IB_RING_BYTES")) {
    auto v = parse_size(*b);
    if (!v || !transport::ib_options::valid_ring_bytes(*v))
      throw error(errc::invalid_argument, "GSYNC_IB_RING_BYTES='" + *b + "' is not a size between 64K and 1G, multiple of 64");
    o.ib.ring_bytes = *v;
  }
  if (auto l = env("GSYNC_IBVERBS_LIB"); l && !l->empty()) o.ib.library = *l;
  if (auto v = env("GSYNC_IB_INTRA")) {
    if (*v != "0" && *v != "1") throw error(errc::invalid_argument, "GSYNC_IB_INTRA='" + *v + "' must be 0 (verbs only between hosts, the default) or 1");
    o.ib.intra = *v == "1";
  }
  if (auto l = env("GSYNC_LIVENESS_S")) {
    if (*l == "0") o.liveness_ms = 0;
    else if (auto x = parse_positive(*l); x && *x >= 1 && *x <= 86400) o.liveness_ms = static_cast<int>(*x * 1000);
    else throw error(errc::invalid_argument, "GSYNC_LIVENESS_S='" + *l + "' is not a number of seconds between 1 and 86400 (or 0: the kernel's)");
  }
  return o;
}

}  // namespace detail

GSYNC_DECL config config::from_env() {
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
  if (auto a = detail::env("GSYNC_ALGO_GATHER")) c.algo_gather = *a;
  if (auto a = detail::env("GSYNC_ALGO_SCATTER")) c.algo_scatter = *a;
  if (auto a = detail::env("GSYNC_ALGO_ALLGATHERV")) c.algo_allgatherv = *a;
  if (auto a = detail::env("GSYNC_ALGO_REDUCE_SCATTERV")) c.algo_reduce_scatterv = *a;
  if (auto a = detail::env("GSYNC_ALGO_ALLTOALLV")) c.algo_alltoallv = *a;
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
    if (!b || *b < (std::size_t{64} << 10) || *b % 256 != 0)  // slots stay aligned for the kernels' 16-byte packs and 256-byte slices
      throw error(errc::invalid_argument, "GSYNC_CUDA_IPC_BUFFER='" + *s + "' is not a size of at least 64K in whole 256-byte units, such as 8M");
    c.cuda_ipc.slot_bytes = *b;
  }
  if (auto a = detail::env("GSYNC_CUDA_IPC_ALGO")) {
    if (*a != "auto" && *a != "oneshot" && *a != "twoshot")
      throw error(errc::invalid_argument, "GSYNC_CUDA_IPC_ALGO='" + *a + "' is not one of auto, oneshot, twoshot");
    c.cuda_ipc.algo = *a;
  }
  c.transport = detail::host_options_from_env();
  return c;
}

}  // namespace gsync
