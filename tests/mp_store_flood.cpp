// Hostile connections flood the store (served by rank 0) while the job trains: the job must finish
// with correct results, and rank 0's peak memory must stay under a limit.
//
//   gsyncrun -n 4 -- gsync_mp_store_flood [--connections 200] [--mb 4] [--limit-mb 100]
//
// The last rank runs the attacker: `--connections` sockets to the store's port at once, each pushing
// junk until `--mb` MiB went into it (random bytes; a good hello followed by junk; or nothing at
// all, a third each), reconnecting whenever the store closes one. Meanwhile every rank runs
// allreduces, until the attacker is done. Rank 0 then reports its peak resident memory (VmHWM) and
// the run fails when it is over `--limit-mb`. --connections 0 gives the figure without the flood.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gsync/gsync.hpp"

namespace {

long peak_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

struct attacker {
  int conns = 200;
  std::size_t bytes_each = std::size_t{4} << 20;
  std::atomic<bool> done{false};
  std::uint64_t pushed = 0, connections = 0;

  int open_one(const sockaddr_in& sa) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    ++connections;
    return fd;
  }
  void run(const std::string& addr, int port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    std::mt19937 rng(1);
    std::string junk(64 << 10, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    std::string hello = "GSYNAUT1" + std::string(16, '\x07');  // a good hello, then junk as its proof and beyond
    struct slot {
      int fd = -1;
      int kind = 0;  // 0: random bytes, 1: hello then junk, 2: silent
      std::size_t sent = 0;
      bool started = false;
    };
    std::vector<slot> s(static_cast<std::size_t>(conns));
    for (std::size_t i = 0; i < s.size(); ++i) s[i].kind = static_cast<int>(i % 3);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      bool all = true;
      for (auto& x : s) {
        if (x.kind == 2) {  // silent: holds a connection; the store drops it after its handshake limit
          if (x.fd < 0) x.fd = open_one(sa);
          continue;
        }
        if (x.sent >= bytes_each) continue;
        all = false;
        if (x.fd < 0) {
          x.fd = open_one(sa);
          x.started = false;
          continue;
        }
        if (x.kind == 1 && !x.started) {
          const ssize_t w = ::send(x.fd, hello.data(), hello.size(), MSG_NOSIGNAL);
          if (w > 0) x.started = true;
          else if (errno != EAGAIN && errno != EINPROGRESS && errno != ENOTCONN) { ::close(x.fd); x.fd = -1; }
          continue;
        }
        const ssize_t w = ::send(x.fd, junk.data(), junk.size(), MSG_NOSIGNAL);
        if (w > 0) {
          x.sent += static_cast<std::size_t>(w);
          pushed += static_cast<std::uint64_t>(w);
        } else if (w < 0 && errno != EAGAIN && errno != EINPROGRESS && errno != ENOTCONN) {
          ::close(x.fd);  // the store closed it: connect again
          x.fd = -1;
        }
      }
      if (all || std::chrono::steady_clock::now() > until) break;
      ::usleep(200);
    }
    for (auto& x : s)
      if (x.fd >= 0) ::close(x.fd);
    done = true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  attacker a;
  long limit_mb = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--connections")) a.conns = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mb")) a.bytes_each = static_cast<std::size_t>(std::atof(argv[i + 1]) * (1 << 20));
    else if (!std::strcmp(argv[i], "--limit-mb")) limit_mb = std::atol(argv[i + 1]);
  }
  int rank = -1;
  try {
    auto comm = gsync::tcp_communicator::from_env();
    rank = comm.rank();
    const int n = comm.size();
    std::thread t;
    const char* addr = std::getenv("GSYNC_MASTER_ADDR");
    const char* port = std::getenv("GSYNC_MASTER_PORT");
    if (rank == n - 1 && a.conns > 0) {
      if (!addr || !port) throw std::runtime_error("GSYNC_MASTER_ADDR / GSYNC_MASTER_PORT unset: run under gsyncrun");
      t = std::thread([&] { a.run(addr, std::atoi(port)); });
    } else {
      a.done = true;
    }
    std::vector<float> v(1 << 18);
    int steps = 0, wrong = 0;
    for (;;) {
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank + 1) * (i % 7));
      gsync::allreduce(comm, std::span<float>{v});
      for (std::size_t i = 0; i < v.size(); ++i) wrong += v[i] != static_cast<float>(n * (n + 1) / 2 * (i % 7));
      ++steps;
      int more = a.done ? 0 : 1;
      gsync::allreduce(comm, std::span<int>{&more, 1}, gsync::op::max{});
      if (!more) break;
    }
    if (t.joinable()) t.join();
    long peak = rank == 0 ? peak_kib() : 0;
    gsync::allreduce(comm, std::span<long>{&peak, 1}, gsync::op::max{});
    gsync::allreduce(comm, std::span<int>{&wrong, 1});
    if (rank == n - 1)
      std::printf("attacker: %d connections at once, %llu opened, %.1f MiB of junk pushed\n", a.conns,
                  static_cast<unsigned long long>(a.connections), static_cast<double>(a.pushed) / (1 << 20));
    if (rank == 0) {
      std::printf("rank 0: peak resident memory %.1f MiB (limit %ld MiB), %d steps, %d wrong values\n", peak / 1024.0, limit_mb, steps, wrong);
      std::fflush(stdout);
    }
    if (wrong) return 1;
    return peak / 1024 > limit_mb ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 43;
  }
}
