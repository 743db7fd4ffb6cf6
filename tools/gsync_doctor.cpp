// gsync-doctor: the link doctor. Measures every pair of ranks of a job, the way the job's own
// collectives would use them (gsync's links: TCP, or shared memory inside a host), and names the
// pairs and hosts that are well below the others.
//
//   gsyncrun -n 8 -- gsync-doctor [--bytes 4M] [--iters 4] [--repeat 3] [--lat-iters 50]
//                                 [--threshold 0.5] [--no-concurrent] [--json FILE]
//   mpirun -np 16 gsync-doctor ...   (or torchrun --no-python, srun: any launcher from_env() reads)
//
// Every pair goes over the medium the job's collectives use: shared memory inside a host, verbs
// (InfiniBand / RoCE, naming each rank's adapter and port) or TCP between hosts.
// What it measures, each direction of each pair on its own:
//   - one pair at a time: rank a sends --iters messages of --bytes to rank b, which acknowledges
//     the last; a's clock from the first send to the acknowledgement gives a->b's bandwidth (the
//     best of --repeat such batches, as other work on a host only slows a pair down). Every
//     other rank waits at a barrier, so the pair has the network and the CPUs to itself;
//   - latency: a and b bounce 8 bytes --lat-iters times; half the mean round trip;
//   - concurrently: every rank at once, paired off in rounds (a round-robin tournament: each pair
//     meets once), both directions at the same time; each rank times its own sends.
// What it prints (rank 0): each rank's host, interface and address, its RDMA adapter and port,
// and which peers it reaches over which medium; the three matrices (row: sender, column:
// receiver); the median of each kind of link (TCP, shared memory, verbs); every direction whose one-at-a-time bandwidth is below
// --threshold times the median of its kind ("SLOW pair"), the same for the concurrent test (as
// warnings), and every host for which most of its directions to other hosts are slow ("SLOW host").
//
// Exit status: 0 when no pair is slow; 1 when a pair is below --threshold of its kind's median;
// 2 for usage errors; 3 when gsync (or anything else) failed.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gsync/allgather.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/barrier.hpp"
#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/bootstrap/store.hpp"
#include "gsync/communicator.hpp"
#include "gsync/send_recv.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::size_t bytes = 4u << 20;
  int iters = 4;
  int lat_iters = 50;
  int repeats = 3;  // the best of these is kept: other work on the hosts only ever slows a pair down
  double threshold = 0.5;
  bool concurrent = true;
  std::string json;
};

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::size_t mul = 1;
  if (end && *end) {
    switch (*end) {
      case 'K': case 'k': mul = std::size_t{1} << 10; break;
      case 'M': case 'm': mul = std::size_t{1} << 20; break;
      case 'G': case 'g': mul = std::size_t{1} << 30; break;
      default: throw std::invalid_argument("bad size '" + s + "'");
    }
  }
  if (!(v > 0)) throw std::invalid_argument("bad size '" + s + "'");
  return static_cast<std::size_t>(v * static_cast<double>(mul));
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--bytes") o.bytes = parse_size(value());
    else if (a == "--iters") o.iters = std::max(1, std::atoi(value().c_str()));
    else if (a == "--repeat") o.repeats = std::max(1, std::atoi(value().c_str()));
    else if (a == "--lat-iters") o.lat_iters = std::max(1, std::atoi(value().c_str()));
    else if (a == "--threshold") o.threshold = std::atof(value().c_str());
    else if (a == "--no-concurrent") o.concurrent = false;
    else if (a == "--json") o.json = value();
    else if (a == "-h" || a == "--help") throw std::invalid_argument("");
    else throw std::invalid_argument("unknown option " + a);
  }
  if (!(o.threshold > 0 && o.threshold < 1)) throw std::invalid_argument("--threshold must be between 0 and 1");
  return o;
}

/// The interface that carries `address` on this host ("?" when none does).
std::string interface_of(const std::string& address) {
  ifaddrs* list = nullptr;
  std::string name = "?";
  if (::getifaddrs(&list) != 0) return name;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !i->ifa_name) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (i->ifa_addr->sa_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    if (address == buf) {
      name = i->ifa_name;
      break;
    }
  }
  ::freeifaddrs(list);
  return name;
}

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// a -> b: bandwidth in bytes/s, measured by a (0 on other ranks).
double one_way(gsync::tcp_communicator& c, int a, int b, const options& o, std::vector<std::uint8_t>& buf) {
  std::uint8_t ack{};
  const std::span<std::uint8_t> msg(buf.data(), o.bytes);
  if (c.rank() == a) {
    gsync::send(c, msg, b, 1);  // warm-up (connection made on first use)
    gsync::recv(c, std::span<std::uint8_t>(&ack, 1), b, 2);
    double best = 0;
    for (int rep = 0; rep < o.repeats; ++rep) {
      const auto t0 = clock_type::now();
      for (int i = 0; i < o.iters; ++i) gsync::send(c, msg, b, 1);
      gsync::recv(c, std::span<std::uint8_t>(&ack, 1), b, 2);
      best = std::max(best, static_cast<double>(o.bytes) * o.iters / seconds_since(t0));
    }
    return best;
  }
  if (c.rank() == b) {
    for (int round = 0; round <= o.repeats; ++round) {
      for (int i = 0; i < (round == 0 ? 1 : o.iters); ++i) gsync::recv(c, msg, a, 1);
      gsync::send(c, std::span<std::uint8_t>(&ack, 1), a, 2);
    }
  }
  return 0;
}

/// Half the mean round trip of 8 bytes between a and b, in seconds (0 on other ranks).
double latency(gsync::tcp_communicator& c, int a, int b, int iters) {
  std::uint64_t x = 0;
  const std::span<std::uint64_t> m(&x, 1);
  if (c.rank() != a && c.rank() != b) return 0;
  const int peer = c.rank() == a ? b : a;
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    if (c.rank() == a) {
      gsync::send(c, m, peer, 3);
      gsync::recv(c, m, peer, 3);
    } else {
      gsync::recv(c, m, peer, 3);
      gsync::send(c, m, peer, 3);
    }
  }
  return seconds_since(t0) / (2.0 * iters);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

struct rank_info {
  std::string host, address, iface, rdma;  // rdma: the adapter and port of its verbs links ("" without)
};

// The media a direction can go over (mesh_view::link_name), as one byte each for the allgather.
constexpr const char* kind_name[] = {"tcp", "shm", "verbs", "other"};
constexpr std::uint8_t kind_verbs = 2, kind_count = 4;
std::uint8_t kind_code(std::string_view name) {
  for (std::uint8_t k = 0; k + 1 < kind_count; ++k)
    if (name == kind_name[k]) return k;
  return kind_count - 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    if (*e.what()) std::fprintf(stderr, "gsync-doctor: %s\n", e.what());
    std::fprintf(stderr, "usage: gsyncrun -n N -- gsync-doctor (or mpirun, torchrun --no-python, srun) [--bytes 4M] [--iters 4] [--repeat 3] [--lat-iters 50] [--threshold 0.5] [--no-concurrent] [--json FILE]\n");
    return 2;
  }
  try {
    auto c = gsync::tcp_communicator::from_env();
    const int n = c.size(), r = c.rank();
    const auto N = static_cast<std::size_t>(n);
    // Who is where: every rank's set-up record (address, host), its interface, its shm peers.
    const auto dl = clock_type::now() + std::chrono::seconds(60);
    std::vector<std::string> keys;
    for (int j = 0; j < n; ++j) keys.push_back(gsync::bootstrap::rank_record_key(j));
    const auto raw = c.transport().store().get_many(keys, dl);
    // Hosts are named by their identity's host-name part, or by the whole identity where two
    // hosts share a name (containers, namespaces).
    std::vector<rank_info> info(N);
    std::vector<std::string> full(N);
    std::map<std::string, std::set<std::string>> by_label;
    for (int j = 0; j < n; ++j) {
      const auto rec = gsync::bootstrap::rank_record::parse(raw[static_cast<std::size_t>(j)], j);
      full[static_cast<std::size_t>(j)] = rec.host;
      info[static_cast<std::size_t>(j)] = {rec.host.substr(0, rec.host.find('/')), rec.address, ""};
      by_label[info[static_cast<std::size_t>(j)].host].insert(rec.host);
    }
    for (std::size_t j = 0; j < N; ++j)
      if (by_label[info[j].host].size() > 1) info[j].host = full[j];
    std::array<char, 32> my_iface{};  // sent as bytes (uint8)
    std::snprintf(my_iface.data(), my_iface.size(), "%s", interface_of(info[static_cast<std::size_t>(r)].address).c_str());
    std::vector<std::uint8_t> ifaces(32 * N);
    gsync::allgather(c, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(my_iface.data()), 32), std::span<std::uint8_t>(ifaces));
    for (std::size_t j = 0; j < N; ++j) info[j].iface = std::string(reinterpret_cast<const char*>(ifaces.data()) + 32 * j);
    // The medium of every direction (as its sender sees it), and every rank's RDMA adapter.
    std::vector<std::uint8_t> my_kind(N), kinds(N * N);
    std::array<char, 32> my_rdma{};
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      my_kind[static_cast<std::size_t>(p)] = kind_code(c.transport().link_name(p));
      if (const auto w = c.transport().link_where(p); !w.empty() && !my_rdma[0]) std::snprintf(my_rdma.data(), my_rdma.size(), "%.*s", int(w.size()), w.data());
    }
    gsync::allgather(c, std::span<const std::uint8_t>(my_kind), std::span<std::uint8_t>(kinds));
    std::vector<std::uint8_t> rdmas(32 * N);
    gsync::allgather(c, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(my_rdma.data()), 32), std::span<std::uint8_t>(rdmas));
    for (std::size_t j = 0; j < N; ++j) info[j].rdma = std::string(reinterpret_cast<const char*>(rdmas.data()) + 32 * j);

    // One pair at a time, each direction, then the pair's latency.
    std::vector<std::uint8_t> buf(o.bytes);
    std::vector<double> bw(N * N, 0.0), conc(N * N, 0.0), lat(N * N, 0.0);
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        if (r == a || r == b) {
          const double ab = one_way(c, a, b, o, buf);
          const double ba = one_way(c, b, a, o, buf);
          const double l = latency(c, a, b, o.lat_iters);
          if (r == a) bw[static_cast<std::size_t>(a) * N + static_cast<std::size_t>(b)] = ab;
          if (r == b) bw[static_cast<std::size_t>(b) * N + static_cast<std::size_t>(a)] = ba;
          if (r == a) lat[static_cast<std::size_t>(a) * N + static_cast<std::size_t>(b)] = lat[static_cast<std::size_t>(b) * N + static_cast<std::size_t>(a)] = l;
        }
        gsync::barrier(c);
      }
    // Every rank at once: rounds of a round-robin tournament (circle method); both directions at once.
    if (o.concurrent && n > 1) {
      const int m = n % 2 ? n + 1 : n;  // with a bye when n is odd
      std::vector<std::uint8_t> in(o.bytes);
      for (int k = 0; k < m - 1; ++k) {
        int p;
        if (r == m - 1) p = k;
        else if (r == k) p = m - 1;
        else p = ((2 * k - r) % (m - 1) + (m - 1)) % (m - 1);
        if (p < n) {
          gsync::sendrecv(c, std::span<const std::uint8_t>(buf), p, 4, std::span<std::uint8_t>(in), p, 4);  // warm-up
          double best = 0;
          for (int rep = 0; rep < o.repeats; ++rep) {
            const auto t0 = clock_type::now();
            for (int i = 0; i < o.iters; ++i) gsync::sendrecv(c, std::span<const std::uint8_t>(buf), p, 4, std::span<std::uint8_t>(in), p, 4);
            best = std::max(best, static_cast<double>(o.bytes) * o.iters / seconds_since(t0));
          }
          conc[static_cast<std::size_t>(r) * N + static_cast<std::size_t>(p)] = best;
        }
        gsync::barrier(c);
      }
    }
    gsync::allreduce(c, std::span<double>(bw), gsync::op::sum{});
    gsync::allreduce(c, std::span<double>(conc), gsync::op::sum{});
    gsync::allreduce(c, std::span<double>(lat), gsync::op::sum{});
    if (r != 0) return 0;

    // Report.
    std::printf("gsync-doctor: %d ranks, %zu bytes x %d per direction, threshold %.2f of the median of each kind of link\n", n, o.bytes,
                o.iters, o.threshold);
    std::printf("%5s  %-24s %-12s %-40s %-14s %s\n", "rank", "host", "interface", "address", "rdma", "peers by medium");
    for (int j = 0; j < n; ++j) {
      std::string peers;
      for (std::uint8_t k = 0; k < kind_count; ++k) {
        std::string these;
        for (int p = 0; p < n; ++p)
          if (p != j && kinds[static_cast<std::size_t>(j) * N + static_cast<std::size_t>(p)] == k) these += " " + std::to_string(p);
        if (!these.empty()) peers += (peers.empty() ? "" : "; ") + std::string(kind_name[k]) + these;
      }
      const auto& ij = info[static_cast<std::size_t>(j)];
      std::printf("%5d  %-24s %-12s %-40s %-14s %s\n", j, ij.host.c_str(), ij.iface.c_str(), ij.address.c_str(), ij.rdma.empty() ? "-" : ij.rdma.c_str(),
                  peers.empty() ? "-" : peers.c_str());
    }
    const auto print_matrix = [&](const char* title, const std::vector<double>& v, double scale, const char* fmt) {
      std::printf("\n%s (row: sender, column: receiver)\n      ", title);
      for (int j = 0; j < n; ++j) std::printf("%8d", j);
      std::printf("\n");
      for (int i = 0; i < n; ++i) {
        std::printf("%5d ", i);
        for (int j = 0; j < n; ++j) {
          if (i == j) std::printf("%8s", "-");
          else std::printf(fmt, v[static_cast<std::size_t>(i) * N + static_cast<std::size_t>(j)] * scale);
        }
        std::printf("\n");
      }
    };
    print_matrix("bandwidth GB/s, one pair at a time", bw, 1e-9, "%8.3f");
    if (o.concurrent) print_matrix("bandwidth GB/s, all pairs at once (each direction, both at the same time)", conc, 1e-9, "%8.3f");
    print_matrix("latency us (half the round trip of 8 bytes)", lat, 1e6, "%8.1f");

    // Medians per kind of link, then the slow directions and hosts.
    const auto kind = [&](int i, int j) { return kinds[static_cast<std::size_t>(i) * N + static_cast<std::size_t>(j)]; };
    int slow = 0;
    std::vector<int> slow_out(N, 0), slow_in(N, 0), cross_out(N, 0), cross_in(N, 0);
    std::string json_flags;
    std::printf("\n");
    for (int which = 0; which < (o.concurrent ? 2 : 1); ++which) {
      const auto& v = which == 0 ? bw : conc;
      std::array<std::vector<double>, kind_count> by_kind;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (i != j) by_kind[static_cast<std::size_t>(kind(i, j))].push_back(v[static_cast<std::size_t>(i) * N + static_cast<std::size_t>(j)]);
      std::array<double, kind_count> med{};
      for (std::size_t k = 0; k < kind_count; ++k) med[k] = median(by_kind[k]);
      for (std::size_t k = 0; k < kind_count; ++k)
        if (!by_kind[static_cast<std::size_t>(k)].empty())
          std::printf("median %s bandwidth (%s): %.3f GB/s over %zu directions\n", kind_name[k], which == 0 ? "one pair at a time" : "all at once",
                      med[static_cast<std::size_t>(k)] * 1e-9, by_kind[static_cast<std::size_t>(k)].size());
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          if (i == j) continue;
          const double x = v[static_cast<std::size_t>(i) * N + static_cast<std::size_t>(j)], ref = med[static_cast<std::size_t>(kind(i, j))];
          const bool cross = info[static_cast<std::size_t>(i)].host != info[static_cast<std::size_t>(j)].host;
          if (which == 0 && cross) ++cross_out[static_cast<std::size_t>(i)], ++cross_in[static_cast<std::size_t>(j)];
          if (x >= o.threshold * ref) continue;
          const auto& ii = info[static_cast<std::size_t>(i)];
          const auto& ij = info[static_cast<std::size_t>(j)];
          const std::string via = kind(i, j) == kind_verbs ? " " + ii.rdma + " -> " + ij.rdma : std::string();
          std::printf("%s pair %d -> %d (%s%s, %s -> %s): %.3f GB/s, %.2fx the %s median\n", which == 0 ? "SLOW" : "WARN slow when all run at once:", i, j,
                      kind_name[kind(i, j)], via.c_str(), ii.host.c_str(), ij.host.c_str(), x * 1e-9, ref > 0 ? x / ref : 0.0, kind_name[kind(i, j)]);
          if (which == 0) {
            ++slow;
            if (cross) ++slow_out[static_cast<std::size_t>(i)], ++slow_in[static_cast<std::size_t>(j)];
            json_flags += (json_flags.empty() ? "" : ", ") + std::string("[") + std::to_string(i) + ", " + std::to_string(j) + "]";
          }
        }
    }
    // A host is slow when most of its ranks' directions to other hosts are: its link, not a peer's.
    std::map<std::string, std::array<int, 4>> hosts;  // slow out, cross out, slow in, cross in
    for (std::size_t j = 0; j < N; ++j) {
      auto& h = hosts[info[j].host];
      h[0] += slow_out[j], h[1] += cross_out[j], h[2] += slow_in[j], h[3] += cross_in[j];
    }
    std::string json_hosts;
    if (hosts.size() > 1)
      for (const auto& [name, h] : hosts) {
        const bool out = h[1] > 0 && 2 * h[0] > h[1], in = h[3] > 0 && 2 * h[2] > h[3];
        if (!out && !in) continue;
        std::printf("SLOW host %s: %d of %d directions to other hosts slow when it sends, %d of %d when it receives; check its link%s\n",
                    name.c_str(), h[0], h[1], h[2], h[3], out && !in ? " (sending)" : !out && in ? " (receiving)" : "");
        json_hosts += (json_hosts.empty() ? "\"" : ", \"") + name + "\"";
      }
    std::printf("gsync-doctor: %s\n", slow == 0 ? "OK, no pair below the threshold" : (std::to_string(slow) + " slow directions").c_str());
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      const auto arr = [&](const std::vector<double>& v) {
        std::string s = "[";
        for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
        return s + "]";
      };
      const auto media = [&] {
        std::string s = "[";
        for (std::size_t i = 0; i < kinds.size(); ++i) s += std::string(i ? ", \"" : "\"") + (i / N == i % N ? "" : kind_name[kinds[i]]) + "\"";
        return s + "]";
      };
      f << "{\"ranks\": " << n << ", \"bytes\": " << o.bytes << ", \"iters\": " << o.iters << ", \"threshold\": " << o.threshold
        << ",\n \"bandwidth_Bps\": " << arr(bw) << ",\n \"concurrent_Bps\": " << arr(conc) << ",\n \"latency_s\": " << arr(lat)
        << ",\n \"media\": " << media() << ",\n \"slow_pairs\": [" << json_flags << "], \"slow_hosts\": [" << json_hosts << "]}\n";
    }
    return slow == 0 ? 0 : 1;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "gsync-doctor: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gsync-doctor: %s\n", e.what());
    return 3;
  }
}
