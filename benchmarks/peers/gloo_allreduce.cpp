// gloo_allreduce: Gloo allreduce bandwidth benchmark, the Gloo peer of gsync-perf.
//
//   gsyncrun -n 4 -- gloo_allreduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 -a ring_chunked --json gloo.json
//   benchmarks/netcluster.sh run -- gloo_allreduce ...
//
// Rank, world size and the rendezvous address come from the same variables gsync reads, so any
// launcher that starts gsync programs starts this one: GSYNC_RANK, GSYNC_WORLD_SIZE,
// GSYNC_MASTER_ADDR (default 127.0.0.1), GSYNC_MASTER_PORT (default 29500), GSYNC_SOCKET_IFNAME (the
// interface Gloo's TCP device binds to; default: the address that routes to the master) and
// GSYNC_TIMEOUT_S (Gloo's operation timeout, default 300).
//
// Rendezvous. Debian 12's Gloo (0.5.0, 2022) has no TCP store, only FileStore, HashStore (one
// process) and RedisStore. So the ranks meet in a FileStore directory on a file system they share
// (one machine, or the namespaces of netcluster.sh, which share /tmp). To make that directory
// unique to the job, and never a stale one from an earlier run with the same port, rank 0 creates
// it with mkdtemp (under --store-dir, default $TMPDIR or /tmp), then serves its path once to every
// other rank over TCP on GSYNC_MASTER_ADDR:GSYNC_MASTER_PORT; the others connect, retrying until
// rank 0 listens. Rank 0 removes the directory as soon as all ranks are connected.
//
// Methodology, as gsync-perf (and nccl-tests): sizes from -b to -e (geometric with -f), rounded
// down to whole float32 elements; per size an optional check of one allreduce (-c 1), -w untimed
// warmups, a barrier, -n timed iterations; each rank's mean per iteration, the largest over ranks
// reported. algbw = bytes / time, busbw = algbw * 2(N-1)/N, GB/s = 1e9 bytes per second.
// Gloo's classic algorithms reduce in place, so this is gsync-perf's `--inplace 1`: the check runs
// on fresh input (small integers times rank + 1, so float32 sums are exact and compared for
// equality), the timed iterations on zeros (stable values, as gsync-perf does in place).
//
// Algorithms (-a): ring_chunked (gloo::AllreduceRingChunked, what Gloo users typically get for
// large buffers), halving_doubling (gloo::AllreduceHalvingDoubling), ring (gloo::AllreduceRing).
//
// Exit status: 0 when every check passed, 1 when an element was wrong, 2 for usage errors, 3 for
// run-time failures.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

constexpr int exit_ok = 0;
constexpr int exit_wrong = 1;
constexpr int exit_usage = 2;
constexpr int exit_runtime = 3;

/// A command-line error (printed by rank 0, exit status 2).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Gloo allreduce algorithms this driver can run.
enum class algorithm { ring_chunked, halving_doubling, ring };

std::string_view algo_name(algorithm a) {
  switch (a) {
    case algorithm::ring_chunked: return "ring_chunked";
    case algorithm::halving_doubling: return "halving_doubling";
    case algorithm::ring: return "ring";
  }
  return "?";
}

/// Command-line options.
struct options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2.0;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  algorithm algo = algorithm::ring_chunked;
  std::string json_path;
  std::string label = "gloo-tcp";   ///< "transport" in the JSON
  std::string label_algo;           ///< "algo" in the table and JSON (default: gloo-<algorithm>)
  std::string store_dir;            ///< where rank 0 creates the FileStore directory
  bool help = false;
};

void print_usage(std::FILE* f) {
  std::fprintf(f,
               "usage: gloo_allreduce [options]   (start with gsyncrun or netcluster.sh run)\n"
               "  -b, --minbytes SIZE     smallest message in bytes, K/M/G suffixes (default 8)\n"
               "  -e, --maxbytes SIZE     largest message in bytes (default 64M)\n"
               "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
               "  -d, --datatype float32  element type (only float32)\n"
               "  -o, --op sum            reduction (only sum)\n"
               "  -a, --algo NAME         ring_chunked (default), halving_doubling or ring\n"
               "  -n, --iters N           timed iterations per size (default 20)\n"
               "  -w, --warmup_iters N    untimed iterations before timing (default 5)\n"
               "  -c, --check 0|1         check one result per size (default 1)\n"
               "      --json FILE         rank 0 also writes the results to FILE as JSON (gsync-perf's schema)\n"
               "      --label NAME        \"transport\" written to the JSON (default gloo-tcp)\n"
               "      --label-algo NAME   \"algo\" in the table and JSON (default gloo-ALGO)\n"
               "      --store-dir DIR     rank 0 creates the rendezvous FileStore directory under DIR\n"
               "                          (default $TMPDIR or /tmp; must be shared by all ranks)\n"
               "  -h, --help              this text\n"
               "environment: GSYNC_RANK, GSYNC_WORLD_SIZE, GSYNC_MASTER_ADDR, GSYNC_MASTER_PORT,\n"
               "             GSYNC_SOCKET_IFNAME, GSYNC_TIMEOUT_S\n"
               "exit status: 0 all correct, 1 wrong results, 2 usage error, 3 run-time failure\n");
}

/// Parses "8", "64K", "1M", "2G" (1024-based; a trailing "B" or "iB" is accepted).
std::optional<std::size_t> parse_size(std::string_view s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
  std::size_t pos = 0;
  unsigned long long v = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
    if (v > (~0ull - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<unsigned>(s[pos++] - '0');
  }
  unsigned long long mult = 1;
  if (pos < s.size()) {
    switch (std::toupper(static_cast<unsigned char>(s[pos]))) {
      case 'K': mult = 1ull << 10; ++pos; break;
      case 'M': mult = 1ull << 20; ++pos; break;
      case 'G': mult = 1ull << 30; ++pos; break;
      default: break;
    }
  }
  if (mult != 1 && pos < s.size() && (s[pos] == 'i' || s[pos] == 'I')) ++pos;
  if (pos < s.size() && (s[pos] == 'B' || s[pos] == 'b')) ++pos;
  if (pos != s.size() || v > ~0ull / mult) return std::nullopt;
  return static_cast<std::size_t>(v * mult);
}

/// Parses an integer in [lo, hi].
std::optional<long long> parse_int(std::string_view s, long long lo, long long hi) {
  if (s.empty()) return std::nullopt;
  std::string str(s);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(str.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::optional<std::string> inline_value;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      inline_value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
    }
    auto next = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      return argv[++i];
    };
    auto size_arg = [&](const std::string& v) {
      auto s = parse_size(v);
      if (!s) throw usage_error(a + " '" + v + "' is not a size such as 8, 64K or 1M");
      return *s;
    };
    auto int_arg = [&](const std::string& v, long long lo, long long hi) {
      auto n = parse_int(v, lo, hi);
      if (!n) throw usage_error(a + " '" + v + "' is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
      return *n;
    };
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "-b" || a == "--minbytes") {
      o.min_bytes = size_arg(next());
    } else if (a == "-e" || a == "--maxbytes") {
      o.max_bytes = size_arg(next());
    } else if (a == "-f" || a == "--stepfactor") {
      const std::string v = next();
      char* end = nullptr;
      o.factor = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.factor > 1.0) || !std::isfinite(o.factor))
        throw usage_error(a + " '" + v + "' is not a number greater than 1");
    } else if (a == "-d" || a == "--datatype") {
      const std::string v = next();
      if (v != "float32" && v != "float") throw usage_error(a + " '" + v + "': only float32 is supported");
    } else if (a == "-o" || a == "--op") {
      const std::string v = next();
      if (v != "sum") throw usage_error(a + " '" + v + "': only sum is supported");
    } else if (a == "-a" || a == "--algo") {
      const std::string v = next();
      if (v == "ring_chunked") o.algo = algorithm::ring_chunked;
      else if (v == "halving_doubling") o.algo = algorithm::halving_doubling;
      else if (v == "ring") o.algo = algorithm::ring;
      else throw usage_error(a + " '" + v + "': use ring_chunked, halving_doubling or ring");
    } else if (a == "-n" || a == "--iters") {
      o.iters = static_cast<int>(int_arg(next(), 1, 1 << 30));
    } else if (a == "-w" || a == "--warmup_iters") {
      o.warmup = static_cast<int>(int_arg(next(), 0, 1 << 30));
    } else if (a == "-c" || a == "--check") {
      o.check = int_arg(next(), 0, 1) != 0;
    } else if (a == "--json") {
      o.json_path = next();
      if (o.json_path.empty()) throw usage_error("--json needs a file name");
    } else if (a == "--label") {
      o.label = next();
    } else if (a == "--label-algo") {
      o.label_algo = next();
    } else if (a == "--store-dir") {
      o.store_dir = next();
    } else {
      throw usage_error("unknown option '" + std::string(argv[i]) + "' (see -h)");
    }
  }
  if (o.min_bytes == 0) throw usage_error("-b must be at least 1 byte");
  if (o.max_bytes < o.min_bytes) throw usage_error("-e must not be smaller than -b");
  if (o.max_bytes / sizeof(float) > static_cast<std::size_t>(INT32_MAX))
    throw usage_error("-e: Gloo counts elements in an int; at most 8 GiB of float32");
  if (o.label_algo.empty()) o.label_algo = "gloo-" + std::string(algo_name(o.algo));
  return o;
}

/// The sizes of the sweep (same rule as gsync-perf: geometric, at least +1 byte per step).
std::vector<std::size_t> message_sizes(const options& o) {
  std::vector<std::size_t> v;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
    v.push_back(s);
    const double d = static_cast<double>(s) * o.factor;
    if (!(d <= static_cast<double>(o.max_bytes))) break;
    s = std::max(s + 1, static_cast<std::size_t>(d));
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Launch environment and rendezvous.

/// What the launcher told this process (the GSYNC_* variables).
struct launch {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;
  std::string ifname;  ///< GSYNC_SOCKET_IFNAME, may be empty
  std::chrono::seconds timeout{300};
};

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

/// Reads the GSYNC_* variables; throws std::runtime_error when they are missing or bad.
launch launch_from_env() {
  launch l;
  auto size = env("GSYNC_WORLD_SIZE");
  auto rank = env("GSYNC_RANK");
  if (!size || !rank)
    throw std::runtime_error("GSYNC_RANK and GSYNC_WORLD_SIZE are not set: start this program with gsyncrun or netcluster.sh run");
  auto s = parse_int(*size, 1, 1 << 20);
  if (!s) throw std::runtime_error("GSYNC_WORLD_SIZE='" + *size + "' is not a positive integer");
  l.size = static_cast<int>(*s);
  auto r = parse_int(*rank, 0, l.size - 1);
  if (!r) throw std::runtime_error("GSYNC_RANK='" + *rank + "' is not in 0.." + std::to_string(l.size - 1));
  l.rank = static_cast<int>(*r);
  if (auto a = env("GSYNC_MASTER_ADDR")) l.master_addr = *a;
  if (auto p = env("GSYNC_MASTER_PORT")) {
    auto v = parse_int(*p, 1, 65535);
    if (!v) throw std::runtime_error("GSYNC_MASTER_PORT='" + *p + "' is not a port number");
    l.master_port = static_cast<std::uint16_t>(*v);
  }
  if (auto i = env("GSYNC_SOCKET_IFNAME")) l.ifname = *i;
  if (auto t = env("GSYNC_TIMEOUT_S")) {
    auto v = parse_int(*t, 1, 1 << 30);
    if (!v) throw std::runtime_error("GSYNC_TIMEOUT_S='" + *t + "' is not a positive integer");
    l.timeout = std::chrono::seconds(*v);
  }
  return l;
}

/// A file descriptor closed on scope exit.
struct fd_guard {
  int fd = -1;
  explicit fd_guard(int f) : fd(f) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

/// The master's socket address (IPv4 or IPv6 literal or host name).
sockaddr_storage master_sockaddr(const launch& l, socklen_t& len) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(l.master_port);
  if (int rc = ::getaddrinfo(l.master_addr.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw std::runtime_error("cannot resolve GSYNC_MASTER_ADDR '" + l.master_addr + "': " + ::gai_strerror(rc));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return ss;
}

std::string errno_text() { return std::strerror(errno); }

/// Writes all of `s` (a short message) to `fd`.
void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("rendezvous: send failed: " + errno_text());
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

/// Rank 0: serves `path` once to each of the other size-1 ranks on the master address.
void serve_store_path(const launch& l, const std::string& path) {
  socklen_t len = 0;
  sockaddr_storage ss = master_sockaddr(l, len);
  fd_guard lfd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (lfd.fd < 0) throw std::runtime_error("rendezvous: socket: " + errno_text());
  int one = 1;
  ::setsockopt(lfd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(lfd.fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(lfd.fd, 128) != 0)
    throw std::runtime_error("rendezvous: cannot listen on " + l.master_addr + ":" + std::to_string(l.master_port) + ": " +
                             errno_text());
  const auto deadline = std::chrono::steady_clock::now() + l.timeout;
  const std::string msg = path + "\n";
  for (int served = 1; served < l.size;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw std::runtime_error("rendezvous: only " + std::to_string(served - 1) + " of " + std::to_string(l.size - 1) +
                               " ranks connected before the timeout");
    pollfd p{lfd.fd, POLLIN, 0};
    const int pr = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) throw std::runtime_error("rendezvous: poll: " + errno_text());
    if (pr <= 0) continue;
    fd_guard c(::accept4(lfd.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.fd < 0) continue;
    write_all(c.fd, msg);
    ++served;
  }
}

/// Ranks other than 0: fetch the store path from rank 0, retrying until it listens.
std::string fetch_store_path(const launch& l) {
  socklen_t len = 0;
  sockaddr_storage ss = master_sockaddr(l, len);
  const auto deadline = std::chrono::steady_clock::now() + l.timeout;
  std::string last_error;
  while (std::chrono::steady_clock::now() < deadline) {
    fd_guard fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.fd < 0) throw std::runtime_error("rendezvous: socket: " + errno_text());
    if (::connect(fd.fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      std::string path;
      char buf[512];
      for (;;) {
        const ssize_t n = ::recv(fd.fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        path.append(buf, static_cast<std::size_t>(n));
        if (path.find('\n') != std::string::npos) break;
      }
      if (auto nl = path.find('\n'); nl != std::string::npos) return path.substr(0, nl);
      last_error = "connection closed before the store path arrived";
    } else {
      last_error = errno_text();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("rendezvous: cannot reach rank 0 at " + l.master_addr + ":" + std::to_string(l.master_port) +
                           " (" + last_error + ")");
}

/// The local address that routes to the master (kernel routing decision; no packet is sent).
std::string route_address(const launch& l) {
  socklen_t len = 0;
  sockaddr_storage ss = master_sockaddr(l, len);
  fd_guard fd(::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.fd < 0 || ::connect(fd.fd, reinterpret_cast<sockaddr*>(&ss), len) != 0)
    throw std::runtime_error("no route to the master " + l.master_addr + ": " + errno_text());
  sockaddr_storage local{};
  socklen_t llen = sizeof local;
  ::getsockname(fd.fd, reinterpret_cast<sockaddr*>(&local), &llen);
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&local), llen, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    throw std::runtime_error("getnameinfo failed for the local address");
  return host;
}

/// Removes the store directory when rank 0 leaves early (an exception during the rendezvous).
struct store_dir_guard {
  std::string path;
  ~store_dir_guard() {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// ---------------------------------------------------------------------------------------------
// The benchmark.

/// One table row.
struct row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  long long wrong = -1;  ///< -1 = not checked
};

/// A barrier over the whole job.
void barrier(const std::shared_ptr<gloo::Context>& ctx) { gloo::BarrierAllToOne(ctx).run(); }

/// Reduces one value over the job with `fn` (for the max time and the wrong-element count).
template <class T>
T reduce_one(const std::shared_ptr<gloo::Context>& ctx, T v, const gloo::ReductionFunction<T>* fn) {
  if (ctx->size == 1) return v;
  gloo::AllreduceRing<T> a(ctx, {&v}, 1, fn);
  a.run();
  return v;
}

/// The algorithm object for `count` elements at `data` (Gloo binds buffers at construction).
std::unique_ptr<gloo::Algorithm> make_allreduce(algorithm a, const std::shared_ptr<gloo::Context>& ctx, float* data,
                                                int count) {
  switch (a) {
    case algorithm::ring_chunked: return std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, std::vector<float*>{data}, count);
    case algorithm::halving_doubling:
      return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, std::vector<float*>{data}, count);
    case algorithm::ring: return std::make_unique<gloo::AllreduceRing<float>>(ctx, std::vector<float*>{data}, count);
  }
  throw std::logic_error("unknown algorithm");
}

/// Input of rank r at element i: a small integer times (r + 1), so every partial sum is exact.
float input_value(int r, std::size_t i) { return static_cast<float>((r + 1) * static_cast<int>(1 + (i * 7 + 3) % 13)); }

void json_string(std::FILE* f, std::string_view s) {
  std::fputc('"', f);
  for (char c : s) {
    if (c == '"' || c == '\\') std::fprintf(f, "\\%c", c);
    else if (static_cast<unsigned char>(c) < 0x20) std::fprintf(f, "\\u%04x", static_cast<unsigned>(c));
    else std::fputc(c, f);
  }
  std::fputc('"', f);
}

/// Writes the rows in gsync-perf's JSON schema and closes `f`; false on a write error.
bool write_json(std::FILE* f, int world, const options& o, const std::vector<row>& rows) {
  std::fprintf(f, "{\"world_size\": %d, \"transport\": ", world);
  json_string(f, o.label);
  std::fprintf(f, ", \"rows\": [");
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const row& r = rows[k];
    std::fprintf(f, "%s\n  {\"op\": \"allreduce\", \"bytes\": %zu, \"count\": %zu, \"dtype\": \"float32\", \"redop\": \"sum\", \"algo\": ",
                 k ? "," : "", r.bytes, r.count);
    json_string(f, o.label_algo);
    std::fprintf(f, ", \"time_us\": %.6g, \"algbw_gbs\": %.6g, \"busbw_gbs\": %.6g, \"wrong\": ", r.time_us, r.algbw, r.busbw);
    if (r.wrong >= 0) std::fprintf(f, "%lld}", r.wrong);
    else std::fprintf(f, "null}");
  }
  std::fprintf(f, "%s]}\n", rows.empty() ? "" : "\n");
  bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0) ok = false;
  return ok;
}

int g_rank = -1;

/// The tool proper; returns the exit status.
int run(int argc, char** argv) {
  options opt;
  const char* rank_env = std::getenv("GSYNC_RANK");
  const bool speaker = rank_env == nullptr || std::string_view(rank_env) == "0";
  try {
    opt = parse_args(argc, argv);
  } catch (const usage_error& e) {
    if (speaker) std::fprintf(stderr, "gloo_allreduce: %s\n", e.what());
    return exit_usage;
  }
  if (opt.help) {
    if (speaker) print_usage(stdout);
    return exit_ok;
  }

  const launch l = launch_from_env();
  g_rank = l.rank;

  // Rendezvous: a fresh FileStore directory, its path handed out by rank 0 over TCP.
  store_dir_guard guard;
  std::string store_path;
  if (l.rank == 0) {
    std::string base = opt.store_dir;
    if (base.empty()) base = env("TMPDIR").value_or("/tmp");
    std::string templ = base + "/gloo-allreduce-rdv.XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error("cannot create the store directory under '" + base + "': " + errno_text());
    store_path = guard.path = templ;
    serve_store_path(l, store_path);
  } else {
    store_path = fetch_store_path(l);
  }
  gloo::rendezvous::FileStore store(store_path);

  // Gloo's TCP device binds to GSYNC_SOCKET_IFNAME's address, else to the one routing to the master.
  gloo::transport::tcp::attr attr;
  if (!l.ifname.empty()) attr.iface = l.ifname;
  else attr.hostname = route_address(l);
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(l.rank, l.size);
  context->setTimeout(std::chrono::duration_cast<std::chrono::milliseconds>(l.timeout));
  context->connectFullMesh(store, device);
  std::shared_ptr<gloo::Context> ctx = context;
  const int world = l.size;
  // Once every rank is connected the store is not needed any more: rank 0 removes it now, so that
  // a job torn down later (a failing rank, a launcher's SIGTERM) leaves nothing behind in /tmp.
  barrier(ctx);
  if (l.rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(guard.path, ec);
    guard.path.clear();
  }

  // Rank 0 opens the JSON file first, so that a bad path stops every rank before the benchmark.
  std::FILE* json = nullptr;
  int json_failed = 0;
  if (l.rank == 0 && !opt.json_path.empty()) {
    json = std::fopen(opt.json_path.c_str(), "w");
    if (json == nullptr) {
      std::fprintf(stderr, "gloo_allreduce: cannot open --json file '%s': %s\n", opt.json_path.c_str(), errno_text().c_str());
      json_failed = 1;
    }
  }
  if (reduce_one<int>(ctx, json_failed, gloo::ReductionFunction<int>::max) != 0) return exit_usage;

  if (l.rank == 0) {
    std::printf("# gloo_allreduce: %d ranks, transport %s (Gloo %d.%d.%d, device %s), dtype float32, op sum, algo %s, iters %d, "
                "warmup %d, check %d, in place\n",
                world, opt.label.c_str(), GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, device->str().c_str(),
                opt.label_algo.c_str(), opt.iters, opt.warmup, opt.check ? 1 : 0);
    std::printf("# time = max over ranks of the mean per iteration\n#\n");
    std::printf("# %11s %13s %9s %6s %18s %11s %10s %10s %7s\n", "size", "count", "type", "redop", "algo", "time", "algbw",
                "busbw", "#wrong");
    std::printf("# %11s %13s %9s %6s %18s %11s %10s %10s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)",
                "");
    std::fflush(stdout);
  }

  const std::size_t max_count = opt.max_bytes / sizeof(float);
  std::vector<float> data(std::max<std::size_t>(max_count, 1));
  // Expected sum at element i: base(i) * N(N+1)/2 (exact in float32 for the sizes here).
  const long long ranks_sum = static_cast<long long>(world) * (world + 1) / 2;
  std::vector<row> rows;
  std::size_t last_count = 0;
  for (const std::size_t size : message_sizes(opt)) {
    const std::size_t count = size / sizeof(float);
    if (count == 0 || count == last_count) continue;
    last_count = count;
    row r;
    r.bytes = count * sizeof(float);
    r.count = count;
    auto algo = make_allreduce(opt.algo, ctx, data.data(), static_cast<int>(count));

    if (opt.check) {
      for (std::size_t i = 0; i < count; ++i) data[i] = input_value(l.rank, i);
      algo->run();
      long long wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const float expect = static_cast<float>(static_cast<long long>(1 + (i * 7 + 3) % 13) * ranks_sum);
        wrong += data[i] != expect;
      }
      r.wrong = static_cast<long long>(reduce_one<double>(ctx, static_cast<double>(wrong), gloo::ReductionFunction<double>::sum));
    }
    std::fill(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(count), 0.0f);

    for (int w = 0; w < opt.warmup; ++w) algo->run();
    barrier(ctx);
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < opt.iters; ++it) algo->run();
    const auto t1 = std::chrono::steady_clock::now();
    const double mine = std::chrono::duration<double, std::micro>(t1 - t0).count() / opt.iters;
    r.time_us = reduce_one<double>(ctx, mine, gloo::ReductionFunction<double>::max);
    r.algbw = r.time_us > 0 ? static_cast<double>(r.bytes) / r.time_us / 1e3 : 0.0;
    r.busbw = r.algbw * 2.0 * (world - 1) / world;
    if (l.rank == 0) {
      char wrong[32];
      if (r.wrong >= 0) std::snprintf(wrong, sizeof wrong, "%lld", r.wrong);
      else std::snprintf(wrong, sizeof wrong, "N/A");
      std::printf("%13zu %13zu %9s %6s %18s %11.2f %10.3f %10.3f %7s\n", r.bytes, r.count, "float32", "sum",
                  opt.label_algo.c_str(), r.time_us, r.algbw, r.busbw, wrong);
      std::fflush(stdout);
    }
    rows.push_back(r);
  }

  long long wrong_total = 0;
  double busbw_sum = 0;
  for (const row& r : rows) {
    wrong_total += std::max(r.wrong, 0LL);
    busbw_sum += r.busbw;
  }
  if (l.rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "ERROR" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n", rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
    std::printf("#\n");
    std::fflush(stdout);
  }
  // Rank 0 writes the JSON before any rank exits (a launcher tears the job down when one rank
  // exits non-zero).
  int write_failed = 0;
  if (json != nullptr && !write_json(json, world, opt, rows)) {
    std::fprintf(stderr, "gloo_allreduce: rank 0: writing '%s' failed\n", opt.json_path.c_str());
    write_failed = 1;
  }
  write_failed = reduce_one<int>(ctx, write_failed, gloo::ReductionFunction<int>::max);
  if (write_failed) return exit_runtime;
  return wrong_total ? exit_wrong : exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: rank %s: %s\n", g_rank < 0 ? "?" : std::to_string(g_rank).c_str(), e.what());
    return exit_runtime;
  }
}
