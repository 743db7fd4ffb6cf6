// Stall reports (GSYNC_STALL_WARN_S): a rank that waits too long logs what it waits for and which
// ranks have not reached its operation, learned through the store.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {
// Sends this process's stderr (fd 2) to a file while alive; text() reads what was written.
struct stderr_capture {
  std::string path = "/tmp/gsync_stall_test_" + std::to_string(::getpid()) + ".log";
  int saved = -1;
  stderr_capture() {
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    saved = ::dup(2);
    ::dup2(fd, 2);
    ::close(fd);
  }
  void stop() {
    if (saved >= 0) {
      ::dup2(saved, 2);
      ::close(saved);
      saved = -1;
    }
  }
  std::string text() {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  ~stderr_capture() {
    stop();
    ::unlink(path.c_str());
  }
};
}  // namespace

TEST_CASE("stall report: the waiting ranks name the rank that has not reached the operation") {
  gsync::config cfg;
  cfg.transport.stall_warn_s = 1;  // GSYNC_STALL_WARN_S=1
  std::string log;
  {
    stderr_capture cap;
    gsync_test::run_tcp(3, [&cap](auto& comm, auto&) {
      std::vector<float> v(64, 1.0f);
      gsync::allreduce(comm, std::span<float>{v});  // op #1: everyone
      if (comm.rank() == 2) {
        // "Hangs" outside gsync until both waiting ranks have reported (at most 30 s): a fixed
        // sleep could end before a slow machine (sanitizers) has written the reports.
        const auto until = std::chrono::steady_clock::now() + 30s;
        const auto reports = [&cap] {
          const std::string t = cap.text();
          int k = 0;
          for (auto at = t.find("ranks that have not reached op #2"); at != std::string::npos;
               at = t.find("ranks that have not reached op #2", at + 1))
            ++k;
          return k;
        };
        while (reports() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
      }
      gsync::allreduce(comm, std::span<float>{v});  // op #2: ranks 0 and 1 wait for rank 2
      CHECK(v[0] == 9.0f);
    }, cfg);
    cap.stop();
    log = cap.text();
  }
  CAPTURE(log);
  CHECK(log.find("allreduce(float32, 64, sum)") != std::string::npos);
  CHECK(log.find("as op #2 has waited") != std::string::npos);
  // Each waiting rank's report lists the ranks behind op #2: rank 2 must be named as having no
  // record (it finished op #1, so its record was withdrawn; it is not stuck in gsync). The other
  // waiting rank may be listed too when the machine is slow to publish its own record.
  bool named = false;
  for (std::size_t at = log.find("ranks that have not reached op #2: "); at != std::string::npos;
       at = log.find("ranks that have not reached op #2: ", at + 1)) {
    const std::string line = log.substr(at, log.find('\n', at) - at);
    if (line.find(" 2 (no record") != std::string::npos) named = true;
    CHECK(line.find("stuck at op #1") == std::string::npos);  // a finished op leaves no record behind
  }
  CHECK(named);
  CHECK(log.find("[gsync rank 2] WARN: rank 2: allreduce") == std::string::npos);  // the late rank itself did not stall
}

// Each communicator numbers its own operations: a rank stalled in a sub-communicator's op #2 is
// not in a mismatch with a rank waiting for it in the world's op #2. Rank 0 waits for rank 1 in
// the world's op #2 while rank 1 waits for rank 3 in its pair's op #2 (rank 3 is busy outside
// gsync): rank 0's report names rank 1 as waiting in the other communicator, and every call
// completes (rank 0 compares rank 1's stall record each second; it used to read it as another
// call under the same op number and fail with a mismatch).
TEST_CASE("stall report: a rank waiting in a sub-communicator's operation of the same number is no mismatch") {
  gsync::config cfg;
  cfg.transport.stall_warn_s = 2;  // records published after 1 s, compared every second, reported at 2 s
  cfg.timeout = 60s;
  std::string log;
  {
    stderr_capture cap;
    gsync_test::run_tcp(4, [&cap](auto& comm, auto&) {
      const int r = comm.rank();
      auto pair = comm.split(r % 2, r);  // world op #1; pairs {0, 2} and {1, 3}
      std::vector<float> p(8, 1.0f), w(16, 1.0f);
      gsync::allreduce(pair, std::span<float>{p});  // the pair's op #1
      CHECK(p[0] == 2.0f);
      if (r == 3) {
        // Busy outside gsync until rank 0 has reported its wait (at most 30 s), by which time
        // it has compared rank 1's record at least once.
        const auto until = std::chrono::steady_clock::now() + 30s;
        while (cap.text().find("[gsync rank 0] WARN: rank 0: allreduce(float32, 16, sum)") == std::string::npos &&
               std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(50ms);
      }
      if (r % 2 == 1) {
        gsync::allreduce(pair, std::span<float>{p});  // the pair's op #2: rank 1 waits for rank 3
        CHECK(p[0] == 4.0f);
      }
      // The world's op #2 (recursive doubling: rank 0 waits for rank 1 first, rank 2 for rank 3)
      gsync::allreduce<gsync::algo::recursive_doubling>(comm, std::span<float>{w});
      CHECK(w[0] == 4.0f);
    }, cfg);
    cap.stop();
    log = cap.text();
  }
  CAPTURE(log);
  CHECK(log.find("mismatch") == std::string::npos);
  const auto at = log.find("[gsync rank 0] WARN: rank 0: allreduce(float32, 16, sum)");
  REQUIRE(at != std::string::npos);
  const std::string line = log.substr(at, log.find('\n', at) - at);
  CHECK(line.find(" 1 (waiting in allreduce(float32, 8, sum)") != std::string::npos);
  CHECK(line.find(" 3 (no record") != std::string::npos);
}
