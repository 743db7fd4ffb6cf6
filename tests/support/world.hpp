#pragma once
// Test worlds: N ranks as threads of this process, over the in-process transport or over real TCP
// on loopback (each thread joins through the store like a separate process would).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gsync/gsync.hpp>

namespace gsync_test {

/// A free TCP port on 127.0.0.1, chosen at random below the kernel's ephemeral range so that no
/// outgoing connection of a concurrently running test can take it before the store binds it.
inline std::uint16_t free_port() {
  static std::atomic<std::uint64_t> x{static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                                      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  for (;;) {
    const std::uint64_t v = x.fetch_add(0x9E3779B97F4A7C15ull) * 6364136223846793005ull;
    const auto port = static_cast<std::uint16_t>(10000 + (v >> 33) % 22000);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return port;
  }
}

/// Shared state of one test world's threads.
struct world_sync {
  explicit world_sync(int n) : bar(n), outputs(static_cast<std::size_t>(n)) {}
  std::barrier<> bar;                 // all ranks of the world
  std::vector<const void*> outputs;   // per rank, published between barriers
};

/// Runs f(comm, sync) on n threads, one per rank, and rethrows the first exception (with its rank).
template <class Comm, class Make, class F>
void run_threads(int n, Make make, F f) {
  world_sync sync(n);
  std::mutex m;
  std::string first_error;
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        Comm c = make(r);
        f(c, sync);
      } catch (const std::exception& e) {
        std::lock_guard lk(m);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
        sync.bar.arrive_and_drop();
      }
    });
  for (auto& t : th) t.join();
  if (!first_error.empty()) throw std::runtime_error(first_error);
}

/// Runs f(r) on n threads, one per rank, each returning what it found wrong ("" for nothing; an
/// exception counts as its message), and returns "rank R: ..." for every rank that found something:
/// for tests whose ranks build their transport themselves.
template <class F>
std::vector<std::string> rank_errors(int n, F f) {
  std::mutex m;
  std::vector<std::string> errs;
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      std::string e;
      try {
        e = f(r);
      } catch (const std::exception& ex) {
        e = ex.what();
      }
      std::lock_guard lk(m);
      if (!e.empty()) errs.push_back("rank " + std::to_string(r) + ": " + e);
    });
  for (auto& t : th) t.join();
  return errs;
}

/// n ranks over the in-process transport.
template <class F>
void run_inproc(int n, F f, gsync::config cfg = {}) {
  auto comms = gsync::make_inproc_world(n, cfg);
  run_threads<gsync::inproc_communicator>(n, [&](int r) { return std::move(comms[r]); }, f);
}

/// A configuration whose operations time out after `t`.
inline gsync::config with_timeout(std::chrono::milliseconds t) {
  gsync::config c;
  c.timeout = t;
  return c;
}

/// What a launcher would tell rank r of n whose store is on 127.0.0.1:port, on host `host`
/// (GSYNC_HOST_ID semantics; empty: computed).
inline gsync::bootstrap::launch_info test_launch_info(int r, int n, std::uint16_t port, std::string host = {}) {
  gsync::bootstrap::launch_info li;
  li.rank = r;
  li.size = n;
  li.local_rank = r;
  li.master_port = port;
  li.source = "test";
  li.host_id = std::move(host);
  return li;
}

/// n ranks over the host transport on loopback, bootstrapped through a store on a free port.
/// `host_of(r)` names rank r's host (GSYNC_HOST_ID semantics): ranks with equal names share memory,
/// the others talk over TCP. By default all ranks are on one host (shared memory, unless
/// GSYNC_SHM_DISABLE is set).
template <class F>
void run_host(int n, F f, gsync::config cfg, std::function<std::string(int)> host_of) {
  const auto port = free_port();
  run_threads<gsync::tcp_communicator>(
      n,
      [&](int r) { return gsync::tcp_communicator::join(test_launch_info(r, n, port, host_of ? host_of(r) : std::string{}), cfg); },
      f);
}

/// n ranks, each its own host: every pair talks over TCP on loopback.
template <class F>
void run_tcp(int n, F f, gsync::config cfg = {}) {
  run_host(n, f, cfg, [](int r) { return "test-host-" + std::to_string(r); });
}

/// n ranks on one host: every pair talks through shared memory.
template <class F>
void run_shm(int n, F f, gsync::config cfg = {}) {
  run_host(n, f, cfg, [](int) { return std::string("test-host"); });
}

/// n ranks on hosts of `per_host` ranks each (the last may have fewer): shared memory inside a
/// host, TCP across.
template <class F>
void run_mixed(int n, int per_host, F f, gsync::config cfg = {}) {
  run_host(n, f, cfg, [per_host](int r) { return "test-host-" + std::to_string(r / per_host); });
}

}  // namespace gsync_test
