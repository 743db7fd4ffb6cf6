// Multi-process check program: joins from the environment (gsyncrun, mpirun, torchrun, srun),
// runs allreduces over several dtypes, ops and sizes and verifies them against a double-precision
// reference. Exit 0 on success, 1 on a wrong result.
//
// --die-rank R --die-after-ms M: rank R exits abruptly (_exit(3)) M ms into a loop of large
// allreduces; every other rank must raise gsync::error and exits 42 for peer_lost, 43 for another
// kind (so a script can assert how survivors failed, and how fast). --die-rank -1 with
// --loop: every rank loops until killed from outside (printing READY after its first allreduce).
// --idle (with --loop): after READY, no more operations: every rank polls comm.health() every
// 20 ms and fails (exit 42 for peer_lost) when it reports a failure, as a rank between
// operations (computing, loading data) would learn of a lost peer.
// --delay-ms M: every rank waits M ms after set-up before its first collective (so that a test's
// stranger has found and filled every listener by the time pairs connect on first use).
// --orphan-shm: this rank creates /dev/shm/gsync-PID-orphan (as a rank killed during setup would
// leave it) and exits 3; the launcher must remove it.
// --counts C,C,...: the per-rank counts to check instead of 0, 1, N-1, 1000, 999983.
// --collectives: after the allreduces, every other collective at the same counts, each result
// against the inputs of tests/support/reference.hpp (reduced ones within its tolerance, moved ones
// bitwise): reduce_scatter (float sum, int32 max in place), allgather (out of place and in place),
// broadcast and reduce (int32 prod; in place on odd roots) from roots 0..N-1 (0, N/2, N-1 above 4
// ranks; one root at counts over 65536), alltoall, gather and scatter (in place on the root),
// allgatherv, reduce_scatterv (int64 min) and alltoallv with uneven and empty blocks, a ring shift
// with sendrecv, send/recv between pairs, and a barrier (tests/mp_verbs.sh runs it across hosts).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/reference.hpp"

namespace {

template <class T, class Op>
int check(gsync::tcp_communicator& comm, std::size_t count, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  if (in_place) {
    gsync::allreduce(comm, std::span<T>{in}, Op{});
    out = in;
  } else {
    gsync::allreduce(comm, std::span<const T>{in}, std::span<T>{out}, Op{});
  }
  int wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += !gsync_test::check_element<T, Op>(out[i], n, i);
  if (wrong)
    std::fprintf(stderr, "rank %d: %s %s count %zu: %d wrong\n", r, std::string(gsync::name(gsync::dtype_of<T>)).c_str(),
                 std::string(Op::name).c_str(), count, wrong);
  return wrong;
}

// ---- --collectives ---------------------------------------------------------------------------

using gsync_test::check_element;
using gsync_test::input;

int g_rank = 0;

/// Reports `wrong` elements of `what` at count c (nothing when 0); returns 1 when there are any.
int report(std::size_t wrong, const std::string& what, std::size_t c) {
  if (wrong) std::fprintf(stderr, "rank %d: %s count %zu: %zu wrong\n", g_rank, what.c_str(), c, wrong);
  return wrong ? 1 : 0;
}

template <class T> bool same(const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }

/// Moved (not reduced) data of rank `src`: sum's inputs, compared bitwise.
template <class T> T moved(int src, std::size_t i) { return input<T, gsync::op::sum>(src, i); }

/// Wrong elements of a reduced range: got[i] against the reference at index first + i.
template <class T, class Op> std::size_t wrong_reduced(const T* got, std::size_t c, int n, std::size_t first) {
  std::size_t w = 0;
  for (std::size_t i = 0; i < c; ++i) w += !check_element<T, Op>(got[i], n, first + i);
  return w;
}

/// Per-rank counts of the v-collectives: c/2, c, 0, c/2, c, 0, ... (uneven, with empty blocks).
std::size_t vcount(std::size_t c, int b) { return static_cast<std::size_t>((b + 1) % 3) * c / 2; }
/// alltoallv: what rank s sends to rank d (0, c/2 or c).
std::size_t a2av(std::size_t c, int s, int d) { return static_cast<std::size_t>((s + 2 * d) % 3) * c / 2; }

std::vector<int> roots(int n, std::size_t c) {
  if (c > 65536) return {n - 1};
  if (n <= 4) {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(i);
    return v;
  }
  return {0, n / 2, n - 1};
}

/// Every collective but allreduce at per-rank count c; returns the number of wrong results.
int collectives(gsync::tcp_communicator& comm, std::size_t c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t N = static_cast<std::size_t>(n), R = static_cast<std::size_t>(r), total = c * N;
  int bad = 0;
  {  // reduce_scatter: float sum out of place, int32 max in place
    std::vector<float> in(total), out(c, -1.0f);
    for (std::size_t i = 0; i < total; ++i) in[i] = input<float, gsync::op::sum>(r, i);
    gsync::reduce_scatter(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::sum{});
    bad += report(wrong_reduced<float, gsync::op::sum>(out.data(), c, n, R * c), "reduce_scatter float32 sum", c);
    std::vector<std::int32_t> b(total);
    for (std::size_t i = 0; i < total; ++i) b[i] = input<std::int32_t, gsync::op::max>(r, i);
    gsync::reduce_scatter(comm, std::span<const std::int32_t>{b}, std::span<std::int32_t>{b.data() + R * c, c}, gsync::op::max{});
    bad += report(wrong_reduced<std::int32_t, gsync::op::max>(b.data() + R * c, c, n, R * c), "reduce_scatter int32 max in place", c);
  }
  {  // allgather: out of place (float), in place (half)
    std::vector<float> in(c), out(total, -1.0f);
    for (std::size_t i = 0; i < c; ++i) in[i] = moved<float>(r, i);
    gsync::allgather(comm, std::span<const float>{in}, std::span<float>{out});
    std::size_t w = 0;
    for (std::size_t b = 0; b < N; ++b)
      for (std::size_t i = 0; i < c; ++i) w += !same(out[b * c + i], moved<float>(static_cast<int>(b), i));
    bad += report(w, "allgather float32", c);
    std::vector<gsync::half> h(total);
    for (std::size_t i = 0; i < c; ++i) h[R * c + i] = moved<gsync::half>(r, i);
    gsync::allgather(comm, std::span<const gsync::half>{h.data() + R * c, c}, std::span<gsync::half>{h});
    w = 0;
    for (std::size_t b = 0; b < N; ++b)
      for (std::size_t i = 0; i < c; ++i) w += !same(h[b * c + i], moved<gsync::half>(static_cast<int>(b), i));
    bad += report(w, "allgather float16 in place", c);
  }
  for (int root : roots(n, c)) {  // broadcast (uint8 and double), reduce (int32 prod)
    std::vector<std::uint8_t> u(c, 0xA5);
    std::vector<double> d(c, -1.0);
    if (r == root)
      for (std::size_t i = 0; i < c; ++i) u[i] = moved<std::uint8_t>(root, i), d[i] = moved<double>(root, i);
    gsync::broadcast(comm, std::span<std::uint8_t>{u}, root);
    gsync::broadcast(comm, std::span<double>{d}, root);
    std::size_t wu = 0, wd = 0;
    for (std::size_t i = 0; i < c; ++i) wu += u[i] != moved<std::uint8_t>(root, i), wd += !same(d[i], moved<double>(root, i));
    bad += report(wu, "broadcast uint8 from root " + std::to_string(root), c);
    bad += report(wd, "broadcast float64 from root " + std::to_string(root), c);
    std::vector<std::int32_t> in(c), out(c, -7);
    for (std::size_t i = 0; i < c; ++i) in[i] = input<std::int32_t, gsync::op::prod>(r, i);
    const bool in_place = root % 2 == 1;
    if (in_place) gsync::reduce(comm, std::span<const std::int32_t>{in}, std::span<std::int32_t>{in}, gsync::op::prod{}, root);
    else gsync::reduce(comm, std::span<const std::int32_t>{in}, std::span<std::int32_t>{out.data(), r == root ? c : 0}, gsync::op::prod{}, root);
    if (r == root)
      bad += report(wrong_reduced<std::int32_t, gsync::op::prod>(in_place ? in.data() : out.data(), c, n, 0),
                    "reduce int32 prod to root " + std::to_string(root) + (in_place ? " in place" : ""), c);
  }
  {  // alltoall (int16)
    std::vector<std::int16_t> in(total), out(total, -1);
    for (std::size_t i = 0; i < total; ++i) in[i] = moved<std::int16_t>(r, i);
    gsync::alltoall(comm, std::span<const std::int16_t>{in}, std::span<std::int16_t>{out});
    std::size_t w = 0;
    for (std::size_t j = 0; j < N; ++j)
      for (std::size_t i = 0; i < c; ++i) w += out[j * c + i] != moved<std::int16_t>(static_cast<int>(j), R * c + i);
    bad += report(w, "alltoall int16", c);
  }
  for (int root : roots(n, c)) {  // gather (float, in place on the root) and scatter (bfloat16)
    std::vector<float> g(r == root ? total : 0, -1.0f), in(c);
    for (std::size_t i = 0; i < c; ++i) in[i] = moved<float>(r, i);
    if (r == root) {
      std::copy(in.begin(), in.end(), g.begin() + static_cast<std::ptrdiff_t>(R * c));
      gsync::gather(comm, std::span<const float>{g.data() + R * c, c}, std::span<float>{g}, root);
      std::size_t w = 0;
      for (std::size_t b = 0; b < N; ++b)
        for (std::size_t i = 0; i < c; ++i) w += !same(g[b * c + i], moved<float>(static_cast<int>(b), i));
      bad += report(w, "gather float32 in place to root " + std::to_string(root), c);
    } else {
      gsync::gather(comm, std::span<const float>{in}, std::span<float>{}, root);
    }
    std::vector<gsync::bfloat16> s(r == root ? total : 0), out(c);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = moved<gsync::bfloat16>(root, i);
    gsync::scatter(comm, std::span<const gsync::bfloat16>{s}, std::span<gsync::bfloat16>{out}, root);
    std::size_t w = 0;
    for (std::size_t i = 0; i < c; ++i) w += !same(out[i], moved<gsync::bfloat16>(root, R * c + i));
    bad += report(w, "scatter bfloat16 from root " + std::to_string(root), c);
  }
  {  // allgatherv (uint32) and reduce_scatterv (int64 min), blocks c/2, c, 0, ...
    std::vector<std::size_t> counts(N), at(N + 1, 0);
    for (std::size_t b = 0; b < N; ++b) counts[b] = vcount(c, static_cast<int>(b)), at[b + 1] = at[b] + counts[b];
    std::vector<std::uint32_t> in(counts[R]), out(at[N], 0xdeadbeef);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = moved<std::uint32_t>(r, i);
    gsync::allgatherv(comm, std::span<const std::uint32_t>{in}, std::span<std::uint32_t>{out}, counts);
    std::size_t w = 0;
    for (std::size_t b = 0; b < N; ++b)
      for (std::size_t i = 0; i < counts[b]; ++i) w += out[at[b] + i] != moved<std::uint32_t>(static_cast<int>(b), i);
    bad += report(w, "allgatherv uint32", c);
    std::vector<std::int64_t> rin(at[N]), rout(counts[R], -1);
    for (std::size_t i = 0; i < rin.size(); ++i) rin[i] = input<std::int64_t, gsync::op::min>(r, i);
    gsync::reduce_scatterv(comm, std::span<const std::int64_t>{rin}, std::span<std::int64_t>{rout}, counts, gsync::op::min{});
    bad += report(wrong_reduced<std::int64_t, gsync::op::min>(rout.data(), rout.size(), n, at[R]), "reduce_scatterv int64 min", c);
  }
  {  // alltoallv (float): rank s sends a2av(c, s, d) elements to rank d
    std::vector<std::size_t> sc(N), rc(N), sat(N + 1, 0), rat(N + 1, 0);
    for (std::size_t j = 0; j < N; ++j) {
      sc[j] = a2av(c, r, static_cast<int>(j)), rc[j] = a2av(c, static_cast<int>(j), r);
      sat[j + 1] = sat[j] + sc[j], rat[j + 1] = rat[j] + rc[j];
    }
    std::vector<float> in(sat[N]), out(rat[N], -1.0f);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = moved<float>(r, i);
    gsync::alltoallv(comm, std::span<const float>{in}, sc, std::span<float>{out}, rc);
    std::size_t w = 0;
    for (std::size_t j = 0; j < N; ++j) {
      std::size_t from = 0;  // where rank j's block for this rank starts in its input
      for (int k = 0; k < r; ++k) from += a2av(c, static_cast<int>(j), k);
      for (std::size_t i = 0; i < rc[j]; ++i) w += !same(out[rat[j] + i], moved<float>(static_cast<int>(j), from + i));
    }
    bad += report(w, "alltoallv float32", c);
  }
  {  // point to point: a ring shift with sendrecv (double), then pairs (2k, 2k+1) with send/recv (int8)
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<double> s(c), got(c, -1.0);
    for (std::size_t i = 0; i < c; ++i) s[i] = moved<double>(r, i);
    gsync::sendrecv(comm, std::span<const double>{s}, next, 11, std::span<double>{got}, prev, 11);
    std::size_t w = 0;
    for (std::size_t i = 0; i < c; ++i) w += !same(got[i], moved<double>(prev, i));
    bad += report(w, "sendrecv float64 ring shift", c);
    const int partner = r ^ 1;
    if (partner < n) {
      std::vector<std::int8_t> m(c), mgot(c, 0);
      for (std::size_t i = 0; i < c; ++i) m[i] = moved<std::int8_t>(r, i);
      if (r % 2 == 0) {
        gsync::send(comm, std::span<const std::int8_t>{m}, partner, 12);
        gsync::recv(comm, std::span<std::int8_t>{mgot}, partner, 12);
      } else {
        gsync::recv(comm, std::span<std::int8_t>{mgot}, partner, 12);
        gsync::send(comm, std::span<const std::int8_t>{m}, partner, 12);
      }
      w = 0;
      for (std::size_t i = 0; i < c; ++i) w += mgot[i] != moved<std::int8_t>(partner, i);
      bad += report(w, "send/recv int8 with rank " + std::to_string(partner), c);
    }
  }
  gsync::barrier(comm);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  int die_rank = -1, die_after_ms = 0, delay_ms = 0;
  bool loop = false, idle = false, all_collectives = false;
  std::vector<std::size_t> counts;  // empty: 0, 1, N-1, 1000, 999983
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--loop")) loop = true;
    else if (!std::strcmp(argv[i], "--collectives")) all_collectives = true;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--counts")) {
      for (char* p = argv[++i]; *p;) {
        char* end = nullptr;
        counts.push_back(std::strtoull(p, &end, 10));
        if (end == p) {
          std::fprintf(stderr, "mp_check: --counts wants numbers separated by commas, not '%s'\n", argv[i]);
          return 2;
        }
        p = *end == ',' ? end + 1 : end;
      }
    }
    else if (!std::strcmp(argv[i], "--idle")) idle = true;
    else if (!std::strcmp(argv[i], "--orphan-shm")) {
      const std::string name = "/gsync-" + std::to_string(::getpid()) + "-orphan";
      int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
      std::printf("created %s (fd %d)\n", name.c_str(), fd);
      std::fflush(stdout);
      _exit(3);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--die-rank")) die_rank = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--die-after-ms")) die_after_ms = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--delay-ms")) delay_ms = std::atoi(argv[++i]);
  }
  int rank = -1;
  try {
    auto comm = gsync::tcp_communicator::from_env();
    rank = comm.rank();
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (die_rank >= 0 || loop) {
      if (rank == die_rank)
        std::thread([die_after_ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(die_after_ms));
          _exit(3);
        }).detach();
      std::vector<float> v(std::size_t{1} << 22, 1.0f);
      gsync::allreduce(comm, std::span<float>{v});
      if (loop) {  // set-up is over and data flows: a test may kill a rank from now on
        std::printf("READY rank %d pid %d\n", rank, static_cast<int>(::getpid()));
        std::fflush(stdout);
      }
      while (loop && idle) {
        if (const gsync::health_report h = comm.health(); !h) throw gsync::error(h.kind, h.message);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      for (;;) gsync::allreduce(comm, std::span<float>{v});
    }
    int wrong = 0;
    // Under gsyncrun the key comes through a memory file, read once and closed at set-up: none
    // of it is left in the environment or open for this rank's children.
    if (const char* kfd = std::getenv("GSYNC_JOB_KEY_FD")) {
      char link[256] = {};  // the number may be another descriptor's by now
      const std::string proc = std::string("/proc/self/fd/") + kfd;
      const bool open = ::readlink(proc.c_str(), link, sizeof link - 1) > 0 && std::strstr(link, "gsync-job-key");
      const bool in_env = std::getenv("GSYNC_JOB_KEY") != nullptr;
      if (in_env || open) {  // (the descriptor is closed once the key is read: bootstrap/auth.hpp)
        std::fprintf(stderr, "rank %d: job key: in the environment %d, descriptor still open %d\n", rank, in_env, open);
        ++wrong;
      }
    }
    const std::size_t n = static_cast<std::size_t>(comm.size());
    if (counts.empty()) counts = {std::size_t{0}, std::size_t{1}, n - 1, std::size_t{1000}, std::size_t{999983}};
    g_rank = rank;
    for (std::size_t count : counts) {
      wrong += check<float, gsync::op::sum>(comm, count, false);
      wrong += check<double, gsync::op::max>(comm, count, true);
      wrong += check<gsync::bfloat16, gsync::op::avg>(comm, count, false);
      wrong += check<gsync::half, gsync::op::sum>(comm, count, true);
      wrong += check<std::int32_t, gsync::op::prod>(comm, count, false);
      wrong += check<std::uint8_t, gsync::op::min>(comm, count, true);
      wrong += check<std::int64_t, gsync::op::avg>(comm, count, true);
    }
    if (all_collectives)
      for (std::size_t count : counts) wrong += collectives(comm, count);
    std::printf("rank %d/%d: %s\n", comm.rank(), comm.size(), wrong ? "FAILED" : "all results correct");
    return wrong ? 1 : 0;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "rank %d: caught gsync::error (%s): %s\n", rank, e.code().message().c_str(), e.what());
    return e.kind() == gsync::errc::peer_lost ? 42 : 43;
  }
}
