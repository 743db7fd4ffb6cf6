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

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
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

}  // namespace

int main(int argc, char** argv) {
  int die_rank = -1, die_after_ms = 0, delay_ms = 0;
  bool loop = false, idle = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--loop")) loop = true;
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
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, std::size_t{1000}, std::size_t{999983}}) {
      wrong += check<float, gsync::op::sum>(comm, count, false);
      wrong += check<double, gsync::op::max>(comm, count, true);
      wrong += check<gsync::bfloat16, gsync::op::avg>(comm, count, false);
      wrong += check<gsync::half, gsync::op::sum>(comm, count, true);
      wrong += check<std::int32_t, gsync::op::prod>(comm, count, false);
      wrong += check<std::uint8_t, gsync::op::min>(comm, count, true);
      wrong += check<std::int64_t, gsync::op::avg>(comm, count, true);
    }
    std::printf("rank %d/%d: %s\n", comm.rank(), comm.size(), wrong ? "FAILED" : "all results correct");
    return wrong ? 1 : 0;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "rank %d: caught gsync::error (%s): %s\n", rank, e.code().message().c_str(), e.what());
    return e.kind() == gsync::errc::peer_lost ? 42 : 43;
  }
}
