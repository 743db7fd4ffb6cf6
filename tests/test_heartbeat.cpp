// Liveness without a FIN (transport/mesh/heartbeat.hpp): one rank's heartbeat against neighbours
// played by this file over raw sockets (a neighbour that stops beating, says goodbye, vanishes,
// lies about who it is, or passes on a loss), and whole worlds of TCP and shared-memory ranks
// that must not report anyone while they sit idle, and report through health() what they learn.
// Stopped processes (SIGSTOP) and cut links: tests/mp_kill_points.sh and tests/netcluster_test.sh.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <gsync/transport/mesh/heartbeat.hpp>

#include "support/world.hpp"

using namespace std::chrono_literals;
namespace auth = gsync::bootstrap::auth;
using gsync::transport::heartbeat;

namespace {

// A listener on loopback, played by a test as a heartbeat's successor: its descriptor and port.
std::pair<int, std::uint16_t> loopback_listener(int backlog) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, backlog) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &al) == 0);
  return {fd, ntohs(a.sin_port)};
}

// What a heartbeat reported, waited for with a bound.
struct news_box {
  std::mutex m;
  std::condition_variable cv;
  std::vector<heartbeat::news> got;
  std::vector<std::chrono::steady_clock::time_point> when;
  heartbeat::news_fn fn() {
    return [this](const heartbeat::news& n) {
      std::lock_guard lk(m);
      got.push_back(n);
      when.push_back(std::chrono::steady_clock::now());
      cv.notify_all();
    };
  }
  // True when at least `k` reports came within `t`.
  bool wait(std::size_t k, std::chrono::milliseconds t) {
    std::unique_lock lk(m);
    return cv.wait_for(lk, t, [&] { return got.size() >= k; });
  }
  std::size_t size() {
    std::lock_guard lk(m);
    return got.size();
  }
  heartbeat::news at(std::size_t i) {  // a copy: the heartbeat's thread may still add to the list
    std::lock_guard lk(m);
    return got.at(i);
  }
  std::chrono::steady_clock::time_point when_at(std::size_t i) {
    std::lock_guard lk(m);
    return when.at(i);
  }
};

// A neighbour played by hand: a connection to a heartbeat's listener (or accepted from it).
struct peer {
  asio::io_context io;  // the socket helpers run it while they wait on `s`
  gsync::detail::net::tcp_socket s{io};
  int fd = -1;  // s's descriptor, for the raw calls
  void dial(std::uint16_t port) {
    s.connect(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port));
    adopt(s.native_handle());
  }
  // Takes a connection accepted with accept4(2).
  void take(int accepted) {
    s.assign(asio::ip::tcp::v4(), accepted);
    adopt(accepted);
  }
  void adopt(int f) {
    fd = f;
    gsync::detail::set_cloexec(fd);
    gsync::detail::set_nonblocking(fd);
  }
  void handshake(const auth::job_key& k) { auth::client_handshake(s, k, std::chrono::steady_clock::now() + 5s, "heartbeat"); }
  // Dials, passes the (keyless) handshake and says hello as `rank` of `size` in job `nonce`.
  void join(std::uint16_t port, int rank, int size, std::uint64_t nonce);
  void hello(int rank, int size, std::uint64_t nonce) {
    heartbeat::hello h;
    h.rank = rank;
    h.size = size;
    h.nonce = nonce;
    write(&h, sizeof h);
  }
  void msg(std::uint32_t k, int rank = -1, const std::string& text = {}) {
    heartbeat::msg_header h;
    h.k = k;
    h.rank = rank;
    h.len = static_cast<std::uint32_t>(text.size());
    std::string b(reinterpret_cast<const char*>(&h), sizeof h);
    b += text;
    write(b.data(), b.size());
  }
  void write(const void* p, std::size_t n) { gsync::detail::write_all(s, p, n, std::chrono::steady_clock::now() + 5s, "heartbeat"); }
  // Reads messages until one of kind `k` comes (true) or the connection closes or 5 s pass.
  bool read_until(std::uint32_t k, int rank, std::string* text = nullptr) {
    std::string in;
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      if (!gsync::detail::wait_ready(s, asio::socket_base::wait_read, until)) return false;
      char b[4096];
      const ssize_t r = ::recv(fd, b, sizeof b, 0);
      if (r <= 0) return false;
      in.append(b, static_cast<std::size_t>(r));
      while (in.size() >= sizeof(heartbeat::msg_header)) {
        heartbeat::msg_header h;
        std::memcpy(&h, in.data(), sizeof h);
        if (in.size() < sizeof h + h.len) break;
        if (h.k == k && h.rank == rank) {
          if (text) *text = in.substr(sizeof h, h.len);
          return true;
        }
        in.erase(0, sizeof h + h.len);
      }
    }
    return false;
  }
  // True when the heartbeat closed this connection within 5 s (whatever it sent before).
  bool closed_by_other_side() {
    const auto until = std::chrono::steady_clock::now() + 5s;
    char b[4096];
    while (gsync::detail::wait_ready(s, asio::socket_base::wait_read, until)) {
      const ssize_t r = ::recv(fd, b, sizeof b, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return true;
    }
    return false;
  }
};

const asio::ip::address loopback = asio::ip::make_address("127.0.0.1");
const auth::job_key no_key;  // loopback: the handshake runs, keyed or not

void peer::join(std::uint16_t port, int rank, int size, std::uint64_t nonce) {
  dial(port);
  handshake(no_key);
  hello(rank, size, nonce);
}

}  // namespace

TEST_CASE("heartbeat: a neighbour that stops beating is reported silent, not before dead_after of silence") {
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  heartbeat hb(loopback, 0, 2, 1000ms, no_key, gsync::logger(0));
  hb.ring("127.0.0.1", 0, 77, box.fn());  // the successor is this file's: not dialed
  peer p;
  p.join(hb.port(), 1, 2, 77);
  std::chrono::steady_clock::time_point last{};
  for (int i = 0; i < 8; ++i) {  // beating as a live rank does, for longer than dead_after
    last = std::chrono::steady_clock::now();  // before the beat: the heartbeat can only hear it after this
    p.msg(heartbeat::beat);
    std::this_thread::sleep_for(hb.period());
  }
  CHECK(box.size() == 0);  // beating: not reported
  REQUIRE(box.wait(1, 10s));  // then silent, the connection still open
  CHECK(box.at(0).rank == 1);
  CHECK(box.at(0).silent);
  CHECK(box.at(0).why.find("rank 1 stopped answering") != std::string::npos);
  CHECK(box.when_at(0) - last >= hb.dead_after());
  CHECK(p.closed_by_other_side());  // and no longer watched
}

TEST_CASE("heartbeat: a goodbye is not a loss, a close without one is (not as silent), and both stop the watch") {
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  heartbeat hb(loopback, 0, 2, 1000ms, no_key, gsync::logger(0));
  hb.ring("127.0.0.1", 0, 5, box.fn());
  {
    peer p;
    p.join(hb.port(), 1, 2, 5);
    p.msg(heartbeat::beat);
    p.msg(heartbeat::bye);
    CHECK(p.closed_by_other_side());
  }
  CHECK_FALSE(box.wait(1, 3 * hb.dead_after()));  // gone with a goodbye: nothing to report, ever
  {
    peer p;
    p.join(hb.port(), 1, 2, 5);
    p.msg(heartbeat::beat);
    std::this_thread::sleep_for(hb.period());
  }  // closed without a goodbye (exited, or killed)
  REQUIRE(box.wait(1, 10s));
  CHECK(box.at(0).rank == 1);
  CHECK_FALSE(box.at(0).silent);
  CHECK(box.at(0).why.find("without a goodbye") != std::string::npos);
}

TEST_CASE("heartbeat: a hello from another job, another rank or of garbage is dropped unreported") {
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  heartbeat hb(loopback, 1, 3, 1000ms, no_key, gsync::logger(0));
  hb.ring("127.0.0.1", 0, 1234, box.fn());
  SUBCASE("another job's nonce") {
    peer p;
    p.join(hb.port(), 0, 3, 999);
    CHECK(p.closed_by_other_side());
  }
  SUBCASE("not the predecessor") {
    peer p;
    p.join(hb.port(), 2, 3, 1234);
    CHECK(p.closed_by_other_side());
  }
  SUBCASE("another world size") {
    peer p;
    p.join(hb.port(), 0, 4, 1234);
    CHECK(p.closed_by_other_side());
  }
  SUBCASE("garbage instead of the handshake") {
    peer p;
    p.dial(hb.port());
    const std::string junk(300, 'x');
    p.write(junk.data(), junk.size());
    CHECK(p.closed_by_other_side());
  }
  SUBCASE("garbage after a good hello") {
    peer p;
    p.join(hb.port(), 0, 3, 1234);
    const std::string junk(64, '\x7f');
    p.write(junk.data(), junk.size());
    CHECK(p.closed_by_other_side());
    // The predecessor's connection broke on garbage: a protocol error, not a loss to report.
  }
  SUBCASE("silent stranger") {
    peer p;
    p.dial(hb.port());  // says nothing: dropped after the handshake's limit
    CHECK(p.closed_by_other_side());
  }
  CHECK(box.size() == 0);
}

TEST_CASE("heartbeat: a loss heard from one neighbour is reported once and passed on to the other") {
  // This heartbeat is rank 1 of 4: rank 0 (played here) dials it; it dials rank 2 (played here).
  const auto listener = loopback_listener(4);
  const int lfd = listener.first;  // not a structured binding: clang 14 cannot capture one
  const std::uint16_t succ_port = listener.second;
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  heartbeat hb(loopback, 1, 4, 2000ms, no_key, gsync::logger(0));
  // ring() returns once its connection to the successor is up: the successor (played here)
  // answers from another thread meanwhile.
  peer succ;
  std::string why;
  bool shook = false;
  heartbeat::hello h;
  std::thread successor([&] {
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    succ.take(fd);
    shook = auth::accept_handshake(succ.s, no_key, std::chrono::steady_clock::now() + 5s, "heartbeat", why);
    if (shook) gsync::detail::read_all(succ.s, &h, sizeof h, std::chrono::steady_clock::now() + 5s, "heartbeat");
  });
  hb.ring("127.0.0.1", succ_port, 42, box.fn());
  successor.join();
  ::close(lfd);
  REQUIRE(succ.fd >= 0);
  REQUIRE_MESSAGE(shook, why);
  CHECK(h.rank == 1);
  CHECK(h.size == 4);
  CHECK(h.nonce == 42u);
  CHECK(succ.read_until(heartbeat::beat, -1));  // it beats to its successor

  peer pred;
  pred.join(hb.port(), 0, 4, 42);
  pred.msg(heartbeat::lost_silent, 3, "rank 3 stopped answering (seen by rank 0)");
  pred.msg(heartbeat::lost_silent, 3, "rank 3 stopped answering, again");  // heard twice: reported once
  std::string text;
  REQUIRE(succ.read_until(heartbeat::lost_silent, 3, &text));
  CHECK(text == "rank 3 stopped answering (seen by rank 0)");
  REQUIRE(box.wait(1, 5s));
  CHECK(box.at(0).rank == 3);
  CHECK(box.at(0).silent);
  pred.msg(heartbeat::lost_silent, 9, "no such rank");  // out of range: ignored
  pred.msg(heartbeat::beat);
  CHECK_FALSE(box.wait(2, hb.period() * 3));
}

TEST_CASE("heartbeat: a stranger that says nothing is dropped at the handshake's limit, while the neighbour's beats go on") {
  // Each connection has its own time limit (heartbeat_flow.ipp, arm_timer / on_timer): the
  // stranger's (2 s) runs beside the neighbour's silence deadline and the beat.
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  heartbeat hb(loopback, 0, 2, 1000ms, no_key, gsync::logger(0));
  hb.ring("127.0.0.1", 0, 7, box.fn());
  peer pred;
  pred.join(hb.port(), 1, 2, 7);
  peer stranger;
  stranger.dial(hb.port());
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point dropped{};
  std::string in;
  int beats = 0;
  while (dropped == std::chrono::steady_clock::time_point{} && std::chrono::steady_clock::now() - t0 < 5s) {
    pred.msg(heartbeat::beat);  // a live neighbour
    char b[4096];
    for (ssize_t r; (r = ::recv(pred.fd, b, sizeof b, MSG_DONTWAIT)) > 0;) in.append(b, static_cast<std::size_t>(r));
    heartbeat::msg_header h;
    std::string text;
    while (heartbeat::take_message(in, h, text) > 0) beats += h.k == heartbeat::beat;
    if (::recv(stranger.fd, b, sizeof b, MSG_DONTWAIT) == 0) dropped = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(hb.period() / 2);
  }
  REQUIRE(dropped != std::chrono::steady_clock::time_point{});
  CHECK(dropped - t0 >= 1900ms);  // not before the limit (a connect takes well under 100 ms here)
  CHECK(dropped - t0 < 3500ms);
  CHECK(beats >= 8);  // about 20 beats in 2 s: the heartbeat went on beating meanwhile
  CHECK(box.size() == 0);  // the neighbour was heard all along, and a stranger is nobody's loss
}

TEST_CASE("heartbeat: silence is reported soon after dead_after, not at the handshake's limit") {
  // A connection that passed its handshake moves its timer to the silence deadline
  // (heartbeat_flow.ipp, went_up): dead_after (600 ms here) is shorter than a stranger's 2 s.
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  heartbeat hb(loopback, 0, 2, 1000ms, no_key, gsync::logger(0));
  hb.ring("127.0.0.1", 0, 8, box.fn());
  peer p;
  p.join(hb.port(), 1, 2, 8);
  p.msg(heartbeat::beat);
  const auto last = std::chrono::steady_clock::now();
  REQUIRE(box.wait(1, 5s));
  CHECK(box.at(0).silent);
  CHECK(box.when_at(0) - last >= hb.dead_after());
  CHECK(box.when_at(0) - last < hb.dead_after() + 700ms);
}

TEST_CASE("heartbeat: destroyed while its dial to the successor is being retried") {
  // The successor's listener takes each connection and closes it at once: the dial fails in its
  // handshake and is tried again every period (heartbeat.ipp, retry_dial) until max(dead_after,
  // 2 s), while ring() has returned at the first failure; the heartbeat is destroyed meanwhile,
  // its retry timer or a connect pending, without reporting anyone and without waiting for them.
  const auto listener = loopback_listener(16);
  const int lfd = listener.first;  // not a structured binding: clang 14 cannot capture one
  const std::uint16_t succ_port = listener.second;
  std::atomic<int> dials{0};
  std::atomic<bool> done{false};
  std::thread successor([&] {
    while (!done.load()) {
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++dials;
      ::close(fd);  // gone during the handshake
    }
  });
  news_box box;  // before the heartbeat: its thread reports into it until it is destroyed
  std::chrono::steady_clock::duration destroying{};
  auto hb = std::make_unique<heartbeat>(loopback, 0, 3, 1000ms, no_key, gsync::logger(0));
  const auto rung = std::chrono::steady_clock::now();
  hb->ring("127.0.0.1", succ_port, 9, box.fn());  // returns at the first failure: the retries go on
  CHECK(std::chrono::steady_clock::now() - rung < 500ms);
  std::this_thread::sleep_for(1500ms);  // retrying, not given up yet (2 s)
  const auto t = std::chrono::steady_clock::now();
  hb.reset();
  destroying = std::chrono::steady_clock::now() - t;
  done = true;
  successor.join();
  ::close(lfd);
  CHECK(dials.load() >= 3);  // it did retry (every 100 ms)
  CHECK(destroying < 1s);
  CHECK(box.size() == 0);  // a refused successor is not a loss
}

TEST_CASE("heartbeat: ring() to a successor whose listener is gone returns at once, and the refusals are no loss") {
  // A successor that closed its communicator (count-0 jobs finish within milliseconds of set-up)
  // refuses the dial: set-up must not wait the retries out (it held such jobs up to 6 s).
  const auto listener = loopback_listener(1);
  const std::uint16_t gone_port = listener.second;
  ::close(listener.first);  // nothing listens there now: connections are refused
  news_box box;
  auto hb = std::make_unique<heartbeat>(loopback, 0, 3, 1000ms, no_key, gsync::logger(0));
  const auto t = std::chrono::steady_clock::now();
  hb->ring("127.0.0.1", gone_port, 9, box.fn());
  CHECK(std::chrono::steady_clock::now() - t < 500ms);
  CHECK_FALSE(box.wait(1, 800ms));  // retried in the background, never reported
  hb.reset();
  CHECK(box.size() == 0);
}

TEST_CASE("heartbeat: idle worlds report nobody, and health() stays ok, for several liveness periods") {
  gsync::config cfg;
  cfg.transport.liveness_ms = 1000;  // silence counts after 600 ms; a loaded machine still beats every 100 ms
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    auto body = [&](gsync::tcp_communicator& comm, gsync_test::world_sync&) {
      std::vector<float> v(100, 1.0f);
      gsync::allreduce(comm, std::span<float>{v});
      // Longer than dead_after three times over: the heartbeat must keep everyone alive.
      std::this_thread::sleep_for(1800ms);
      const gsync::health_report h = comm.health();
      CHECK_MESSAGE(h.ok(), h.message);
      gsync::allreduce(comm, std::span<float>{v});
      CHECK(v[0] == static_cast<float>(comm.size() * comm.size()));
    };
    if (shm) gsync_test::run_shm(3, body, cfg);
    else gsync_test::run_tcp(3, body, cfg);
  }
}

TEST_CASE("heartbeat: health() reports a rank that left without a goodbye, and the next operation that needs it fails") {
  gsync::config cfg;
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  const int n = 3, victim = 2;
  std::vector<std::string> err(n);
  std::vector<std::thread> th;
  struct died : std::exception {};
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, "host-" + std::to_string(r)), cfg);
        std::vector<float> v(100, 1.0f);
        gsync::allreduce(comm, std::span<float>{v});
        if (r == victim) {
          try {
            auto gone = std::move(comm);
            throw died{};  // dropped while this unwinds: no goodbye, as a killed process
          } catch (const died&) {
          }
          return;
        }
        gsync::health_report h;
        for (int i = 0; i < 500 && (h = comm.health()); ++i) std::this_thread::sleep_for(10ms);  // between operations
        CHECK(h.kind == gsync::errc::peer_lost);
        CHECK(h.lost_rank == victim);
        CHECK(h.message.find("rank 2") != std::string::npos);
        try {
          gsync::allreduce(comm, std::span<float>{v});
          err[r] = "an allreduce without rank 2 returned";
        } catch (const gsync::error& e) {
          if (e.kind() != gsync::errc::peer_lost) err[r] = e.what();
        }
        CHECK_FALSE(comm.health().ok());
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(err[r].empty(), "rank ", r, ": ", err[r]);
}
