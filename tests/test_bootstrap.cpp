// Bootstrap: the store, environment parsing, interface selection.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "support/world.hpp"
#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/interface.hpp"
#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/bootstrap/store.hpp"

using namespace std::chrono_literals;
using gsync::bootstrap::launch_info;

namespace {
struct env_guard {
  std::vector<std::string> names;
  void set(const char* n, const char* v) {
    names.emplace_back(n);
    ::setenv(n, v, 1);
  }
  ~env_guard() {
    for (auto& n : names) ::unsetenv(n.c_str());
  }
};
gsync::deadline in(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }
}  // namespace

TEST_CASE("store: set/get/add/wait/check across clients, get waits for a later set") {
  gsync::bootstrap::store_server srv("127.0.0.1", 0);
  gsync::bootstrap::store_client a("127.0.0.1", srv.port(), in(5s)), b("127.0.0.1", srv.port(), in(5s));
  a.set("k", "v1", in(5s));
  CHECK(b.get("k", in(5s)) == "v1");
  CHECK(a.add("n", 2, in(5s)) == 2);
  CHECK(b.add("n", 3, in(5s)) == 5);
  CHECK(!a.check("later", in(5s)));
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    b.set("later", std::string(100000, 'x'), in(5s));
  });
  CHECK(a.get("later", in(5s)).size() == 100000);
  t.join();
  a.wait({"k", "later"}, in(5s));
  CHECK(a.check("later", in(5s)));
}

TEST_CASE("store: a wait that is never satisfied raises timeout at its deadline") {
  gsync::bootstrap::store_server srv("127.0.0.1", 0);
  gsync::bootstrap::store_client c("127.0.0.1", srv.port(), in(5s));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.get("never", in(300ms));
    FAIL("get returned");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::timeout);
    CHECK(std::string(e.what()).find("never") != std::string::npos);
  }
  const auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(dt >= 250ms);
  CHECK(dt < 3s);
  c.set("after", "ok", in(5s));  // the connection is still usable after a timed-out wait
  CHECK(c.get("after", in(5s)) == "ok");
}

TEST_CASE("store client: a store that stops answering fails the handshake, then a call, with timeout at the deadline") {
  const gsync::bootstrap::auth::job_key none;
  // Runs `call` (given a 300 ms deadline), which must fail with a read timeout at about that deadline.
  auto times_out = [](auto&& call, const char* unexpected) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      call(t0 + 300ms);
      FAIL(unexpected);
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::timeout);
      CHECK(std::string(e.what()).find("timed out reading from") != std::string::npos);
    }
    CHECK(std::chrono::steady_clock::now() - t0 >= 290ms);
    CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
  };
  {
    // A listener nobody accepts on: the kernel completes the connection, nothing answers the handshake.
    asio::io_context io;
    gsync::detail::net::tcp_acceptor acc(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    times_out([&](gsync::deadline dl) { gsync::bootstrap::store_client c("127.0.0.1", acc.local_endpoint().port(), dl, none); },
              "a store that never answered was joined");
  }
  // A store that passes the handshake, then stops: it reads nothing and answers nothing.
  asio::io_context sio;  // run by the store's thread only (the socket helpers run it while they wait)
  gsync::detail::net::tcp_acceptor acc(sio, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  gsync::detail::net::tcp_socket conn(sio);
  bool shook = false;
  std::string why;
  std::thread store([&] {
    acc.accept(conn);
    shook = gsync::bootstrap::auth::accept_handshake(conn, none, in(5s), "test client", why);
  });
  gsync::bootstrap::store_client c("127.0.0.1", acc.local_endpoint().port(), in(5s), none);
  store.join();
  REQUIRE_MESSAGE(shook, why);
  times_out([&](gsync::deadline dl) { c.set("k", "v", dl); }, "a store that stopped answered");
  // A reply may still come for the request that timed out: the connection is not used again.
  try {
    c.check("k", in(2s));
    FAIL("a connection was used after a call on it timed out");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::peer_lost);
    CHECK(std::string(e.what()).find("unusable") != std::string::npos);
  }
}

TEST_CASE("store: garbage from a stranger is dropped, other clients carry on") {
  gsync::bootstrap::store_server srv("127.0.0.1", 0);
  gsync::bootstrap::store_client good("127.0.0.1", srv.port(), in(5s));
  asio::io_context io;
  auto s = gsync::detail::connect_retry(io, {asio::ip::make_address("127.0.0.1"), srv.port()}, in(5s), "store");
  const char junk[] = "\xff\xff\xff\x7fGET / HTTP/1.1\r\n\r\n";
  gsync::detail::write_all(s, junk, sizeof junk, in(5s), "store");
  good.set("x", "1", in(5s));
  CHECK(good.get("x", in(5s)) == "1");
}

TEST_CASE("launch environment: gsync, torchrun, Open MPI and Slurm variables, in that order") {
  for (const char* v : {"GSYNC_RANK", "GSYNC_WORLD_SIZE", "GSYNC_LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
                        "SLURM_NTASKS", "SLURM_LOCALID", "GSYNC_MASTER_ADDR", "GSYNC_MASTER_PORT", "MASTER_ADDR",
                        "MASTER_PORT"})
    ::unsetenv(v);
  CHECK_THROWS_AS(launch_info::from_env(), gsync::error);
  {
    env_guard g;
    g.set("SLURM_PROCID", "3");
    g.set("SLURM_NTASKS", "8");
    g.set("SLURM_LOCALID", "1");
    auto li = launch_info::from_env();
    CHECK(li.rank == 3);
    CHECK(li.size == 8);
    CHECK(li.local_rank == 1);
    CHECK(li.source == "Slurm");
    CHECK(li.master_port == 29500);
    g.set("OMPI_COMM_WORLD_RANK", "2");
    g.set("OMPI_COMM_WORLD_SIZE", "4");
    g.set("OMPI_MCA_orte_hnp_uri", "123.0;tcp://x");
    li = launch_info::from_env();
    CHECK(li.source == "Open MPI");
    CHECK(li.rank == 2);
    // Derived from the job id, so concurrent jobs do not collide, and below the ephemeral ports.
    CHECK(li.master_port >= 20000);
    CHECK(li.master_port < 32768);
    g.set("RANK", "1");
    g.set("WORLD_SIZE", "2");
    g.set("MASTER_ADDR", "localhost");
    g.set("MASTER_PORT", "1234");
    li = launch_info::from_env();
    CHECK(li.source == "torchrun");
    CHECK(li.master_addr == "localhost");
    CHECK(li.master_port == 1234);
    g.set("GSYNC_RANK", "0");
    g.set("GSYNC_WORLD_SIZE", "1");
    g.set("GSYNC_MASTER_PORT", "4321");
    li = launch_info::from_env();
    CHECK(li.source == "gsync");
    CHECK(li.size == 1);
    CHECK(li.master_port == 4321);
    g.set("GSYNC_RANK", "5");  // out of range for world size 1
    CHECK_THROWS_AS(launch_info::from_env(), gsync::error);
  }
  ::unsetenv("OMPI_MCA_orte_hnp_uri");
}

TEST_CASE("GSYNC_SOCKET_IFNAME: an unknown interface is an error that lists the real ones") {
  try {
    gsync::bootstrap::interface_address("nosuchif0");
    FAIL("accepted");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::invalid_argument);
    CHECK(std::string(e.what()).find("lo") != std::string::npos);
    CHECK(std::string(e.what()).find("nosuchif0") != std::string::npos);
  }
  CHECK(gsync::bootstrap::interface_address("lo").is_loopback());
  // Through the communicator: joining with a bad interface fails on that rank with the same error.
  {
    env_guard g;
    g.set("GSYNC_SOCKET_IFNAME", "nosuchif0");
    CHECK(gsync::config::from_env().transport.socket_ifname == "nosuchif0");
  }
  launch_info li;
  li.master_port = gsync_test::free_port();
  gsync::config cfg;
  cfg.transport.socket_ifname = "nosuchif0";
  try {
    auto c = gsync::tcp_communicator::join(li, cfg);
    FAIL("joined");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::invalid_argument);
  }
}

TEST_CASE("TCP congestion control: set before connecting, a refused name leaves the default and the job works") {
  asio::io_context io;
  gsync::detail::net::tcp_acceptor acc(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto s = gsync::detail::connect_retry(io, acc.local_endpoint(), in(2000ms), "test acceptor", "cubic");
  char name[32] = {};
  socklen_t len = sizeof name;
  REQUIRE(::getsockopt(s.native_handle(), IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0);
  CHECK(std::string(name) == "cubic");
  CHECK_FALSE(gsync::detail::set_congestion(s.native_handle(), "no-such-cc"));
  len = sizeof name;
  REQUIRE(::getsockopt(s.native_handle(), IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0);
  CHECK(std::string(name) == "cubic");

  {
    env_guard g;
    g.set("GSYNC_TCP_CONGESTION", "no-such-cc");
    CHECK(gsync::config::from_env().transport.congestion == "no-such-cc");
  }
  gsync::config cfg;
  cfg.transport.congestion = "no-such-cc";
  gsync_test::run_tcp(3, [](auto& comm, auto&) {
    std::vector<float> v(1000, static_cast<float>(comm.rank() + 1));
    gsync::allreduce(comm, std::span<float>{v});
    CHECK(v[999] == 6.0f);
  }, cfg);
}

TEST_CASE("store: a rank that leaves normally is not lost, one that fails is, and waiters hear of it at once") {
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), gsync::bootstrap::auth::job_key{});
  const auto port = srv.port();
  const gsync::bootstrap::auth::job_key none;
  gsync::bootstrap::store_client a("127.0.0.1", port, in(2000ms), none);
  a.hello(1, in(2000ms));
  {
    gsync::bootstrap::store_client c("127.0.0.1", port, in(2000ms), none);
    c.hello(3, in(2000ms));
    c.set("from3", "x", in(2000ms));
  }  // normal goodbye
  try {
    a.get("never", in(300ms));
    FAIL("got a key nobody set");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::timeout);
  }
  gsync::bootstrap::store_client a2("127.0.0.1", port, in(2000ms), none);
  std::thread waiter([&] {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      a2.get("from2", in(20000ms));
      FAIL("got a key nobody set");
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::peer_lost);
      CHECK(std::string(e.what()).find("rank 2") != std::string::npos);
      CHECK(std::chrono::steady_clock::now() - t0 < 10000ms);
    }
  });
  std::this_thread::sleep_for(100ms);
  try {
    gsync::bootstrap::store_client b("127.0.0.1", port, in(2000ms), none);
    b.hello(2, in(2000ms));
    throw std::runtime_error("rank 2 fails");  // unwinding: no goodbye
  } catch (const std::runtime_error&) {
  }
  waiter.join();
  // Keys that exist are still served; later waits for missing keys fail at once.
  gsync::bootstrap::store_client d("127.0.0.1", port, in(2000ms), none);
  CHECK(d.get("from3", in(2000ms)) == "x");
  CHECK(d.check("gsync/lost", in(2000ms)));
  CHECK_THROWS_AS(d.get("missing", in(20000ms)), gsync::error);
}

TEST_CASE("store: a commit key set before any loss is seen by every waiter, after a loss it is refused") {
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), gsync::bootstrap::auth::job_key{});
  const auto port = srv.port();
  const gsync::bootstrap::auth::job_key none;
  gsync::bootstrap::store_client a("127.0.0.1", port, in(2000ms), none);
  a.hello(0, in(2000ms));
  a.set("gsync/commit/first", "1", in(2000ms));  // before any loss: done
  a.set("plain", "1", in(2000ms));
  try {
    gsync::bootstrap::store_client b("127.0.0.1", port, in(2000ms), none);
    b.hello(1, in(2000ms));
    throw std::runtime_error("rank 1 dies");  // unwinding: no goodbye
  } catch (const std::runtime_error&) {
  }
  gsync::bootstrap::store_client c("127.0.0.1", port, in(2000ms), none);
  // The loss reaches the store as its connection closes; a wait for a missing key ends with it.
  CHECK_THROWS_AS(c.wait({"never"}, in(20000ms)), gsync::error);  // (a loss leaves a connection unusable)
  gsync::bootstrap::store_client e2("127.0.0.1", port, in(2000ms), none);
  CHECK(e2.get("gsync/commit/first", in(2000ms)) == "1");  // committed before: still seen
  e2.set("other", "2", in(2000ms));                        // ordinary keys are still set
  try {
    e2.set("gsync/commit/second", "1", in(2000ms));
    FAIL("a commit after a loss was accepted");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::peer_lost);
    CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
  }
  gsync::bootstrap::store_client d("127.0.0.1", port, in(2000ms), none);
  CHECK_FALSE(d.check("gsync/commit/second", in(2000ms)));
}

TEST_CASE("setup: a rank that fails after reaching the store makes the others fail with peer_lost, not wait for the deadline") {
  const auto port = gsync_test::free_port();
  std::vector<gsync::errc> err(2, gsync::errc{});
  std::vector<std::string> msg(2);
  std::vector<std::chrono::steady_clock::duration> took(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      launch_info li;
      li.rank = r;
      li.size = 3;
      li.master_port = port;
      li.host_id = "lost-host-" + std::to_string(r);
      li.job_key = "";
      gsync::config cfg;
      cfg.timeout = 30000ms;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        auto c = gsync::tcp_communicator::join(li, cfg);
      } catch (const gsync::error& e) {
        err[r] = e.kind();
        msg[r] = e.what();
      }
      took[r] = std::chrono::steady_clock::now() - t0;
    });
  // "Rank 2": reaches the store, announces itself, then fails before connecting to anyone.
  try {
    gsync::bootstrap::store_client b("127.0.0.1", port, in(10000ms), gsync::bootstrap::auth::job_key{});
    b.hello(2, in(2000ms));
    // Fail only once rank 1 is attached to the store (it publishes its record after its hello):
    // a rank 1 that had not reached the store yet when rank 0 gave up would wait for its deadline.
    b.get(gsync::bootstrap::rank_record_key(1), in(10000ms));
    throw std::runtime_error("rank 2 fails during set-up");
  } catch (const std::runtime_error&) {
  }
  for (auto& t : th) t.join();
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CAPTURE(msg[r]);
    CHECK(err[r] == gsync::errc::peer_lost);
    // Rank 0 serves the store and always names rank 2. Rank 1 names rank 2 when it learns of it
    // from the store, or rank 0 when rank 0 (which gave up first, taking the store with it) is
    // what it saw vanish.
    if (r == 0) CHECK(msg[r].find("rank 2") != std::string::npos);
    else CHECK((msg[r].find("rank 2") != std::string::npos || msg[r].find("rank 0") != std::string::npos));
    CHECK(took[r] < 10000ms);
  }
}

TEST_CASE("setup: communicators joined one after another from the same variables each meet their own store") {
  // As an MPI code that makes a communicator, frees it and makes another from the same
  // environment: the second joins on the same store address, while rank 0's first store may still
  // wait for the slowest rank to leave. Rank 0 leaves last here, so the others reach the old store.
  const auto port = gsync_test::free_port();
  const int n = 3;
  std::vector<std::thread> th;
  std::vector<int> good(n, 0);
  std::vector<std::string> err(n);
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        const auto li = gsync_test::test_launch_info(r, n, port, "gen-host-" + std::to_string(r));
        for (int k = 0; k < 3; ++k) {
          auto c = gsync::tcp_communicator::join(li, gsync_test::with_timeout(std::chrono::seconds(20)));
          std::vector<double> v(64, static_cast<double>(r + k));
          gsync::allreduce(c, std::span<double>{v});
          good[static_cast<std::size_t>(r)] += v[63] == static_cast<double>(3 * k + 3);
          if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      } catch (const std::exception& e) {
        err[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(err[static_cast<std::size_t>(r)] == "");
    CHECK(good[static_cast<std::size_t>(r)] == 3);
  }
}

TEST_CASE("store limits: oversized keys and values are refused with invalid_argument and the connection goes on") {
  gsync::bootstrap::store_limits lim;
  lim.total_bytes = 3 << 20;  // three values of 1 MiB, about
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), gsync::bootstrap::auth::job_key{}, lim);
  gsync::bootstrap::store_client c("127.0.0.1", srv.port(), in(5s), gsync::bootstrap::auth::job_key{});
  const auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const gsync::error& e) {
      return e.kind();
    }
    return gsync::errc{};
  };
  // Refused on this side, nothing sent.
  CHECK(kind_of([&] { c.set("v", std::string((1 << 20) + 1, 'x'), in(5s)); }) == gsync::errc::invalid_argument);
  CHECK(kind_of([&] { c.set(std::string(5000, 'k'), "v", in(5s)); }) == gsync::errc::invalid_argument);
  // Refused by the store: a key too long for a get, and the store's total.
  CHECK(kind_of([&] { c.get(std::string(5000, 'k'), in(5s)); }) == gsync::errc::invalid_argument);
  const std::string mib(1 << 20, 'x');
  c.set("a", mib, in(5s));
  c.set("b", mib, in(5s));
  std::string why;
  try {
    c.set("c", mib, in(5s));
    c.set("d", mib, in(5s));
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::invalid_argument);
    why = e.what();
  }
  CHECK(why.find("limit") != std::string::npos);
  // Replacing a value frees its bytes; the connection still serves.
  c.set("a", "small", in(5s));
  c.set("d", mib, in(5s));
  CHECK(c.get("a", in(5s)) == "small");
  CHECK(c.add("n", 2, in(5s)) == 2);
}

TEST_CASE("store limits: beyond the per-address handshake slots the oldest silent connection makes room, a rank gets in, silent ones are dropped in time") {
  gsync::bootstrap::store_limits lim;
  lim.handshake_ms = 3000ms;
  lim.preauth_per_source = 4;
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), gsync::bootstrap::auth::job_key{}, lim);
  asio::io_context io;
  const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), srv.port());
  std::vector<gsync::detail::net::tcp_socket> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(gsync::detail::connect_retry(io, ep, in(2s), "store"));
  std::this_thread::sleep_for(50ms);  // the server has taken all four
  // A fifth from the same address pushes out the oldest at once (not at its 3 s handshake limit).
  auto fifth = gsync::detail::connect_retry(io, ep, in(2s), "store");
  char ch;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    gsync::detail::read_all(silent[0], &ch, 1, in(5s), "store");
    FAIL("a silent connection got a byte");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::peer_lost);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
  // With every slot held by strangers, a client of the job still gets in and is served at once.
  const auto t1 = std::chrono::steady_clock::now();
  gsync::bootstrap::store_client c("127.0.0.1", srv.port(), in(5s), gsync::bootstrap::auth::job_key{});
  c.set("k", "v", in(5s));
  CHECK(c.get("k", in(5s)) == "v");
  CHECK(std::chrono::steady_clock::now() - t1 < 1500ms);
  // The silent ones are dropped when their time is up: the reads end with the close (peer_lost),
  // not at their 5 s deadline (timeout).
  for (std::size_t i = 1; i < silent.size(); ++i) {
    try {
      gsync::detail::read_all(silent[i], &ch, 1, in(5s), "store");
      FAIL("a silent connection got a byte");
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::peer_lost);
    }
  }
}

TEST_CASE("store limits: a client that does not read its replies is dropped at out_bytes, the others are served meanwhile") {
  gsync::bootstrap::store_limits lim;
  lim.out_bytes = 4 << 20;
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), gsync::bootstrap::auth::job_key{}, lim);
  gsync::bootstrap::store_client c("127.0.0.1", srv.port(), in(5s), gsync::bootstrap::auth::job_key{});
  c.set("big", std::string(1 << 20, 'x'), in(5s));
  asio::io_context io;
  auto s = gsync::detail::connect_retry(io, {asio::ip::make_address("127.0.0.1"), srv.port()}, in(5s), "store");
  gsync::bootstrap::auth::client_handshake(s, gsync::bootstrap::auth::job_key{}, in(5s), "store");
  s.set_option(asio::ip::tcp::no_delay(true));  // each pair of requests on its own, not held back by Nagle
  namespace sp = gsync::bootstrap::store_proto;
  std::string frame(1, static_cast<char>(sp::cmd_get)), two;
  sp::put<std::uint32_t>(frame, 5000);
  sp::put_str(frame, "big");
  for (int i = 0; i < 2; ++i) {
    sp::put<std::uint32_t>(two, static_cast<std::uint32_t>(frame.size()));
    two += frame;
  }
  // Two replies at a time (under out_bytes), none read: the kernel's buffers fill, the store's
  // sends would block, and it goes on serving the others until this one holds out_bytes unsent.
  for (int i = 0; i < 32; ++i) {
    try {
      gsync::detail::write_all(s, two.data(), two.size(), in(2s), "store");
    } catch (const gsync::error&) {
      break;  // dropped already
    }
    std::this_thread::sleep_for(20ms);
  }
  CHECK(c.get("big", in(2s)).size() == std::size_t{1} << 20);
  std::vector<char> sink(64 << 20);
  try {  // what reached its socket, then the close: far less than the 64 MiB
    gsync::detail::read_all(s, sink.data(), sink.size(), in(5s), "store");
    FAIL("a client that did not read got every reply");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::peer_lost);
  }
}

TEST_CASE("store: out of descriptors, it answers the waiting ranks with the reason at once and turns connections away") {
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), gsync::bootstrap::auth::job_key{});
  gsync::bootstrap::store_client c("127.0.0.1", srv.port(), in(5s), gsync::bootstrap::auth::job_key{});
  const int late = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // opened while descriptors are left
  REQUIRE(late >= 0);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);  // c waits meanwhile
    const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(probe);  // no new descriptor from here on, in this whole process
    ::close(probe);
    ::setrlimit(RLIMIT_NOFILE, &low);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(srv.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    [[maybe_unused]] int r = ::connect(late, reinterpret_cast<sockaddr*>(&a), sizeof a);  // the store cannot accept it
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  try {
    c.get("never", in(10s));
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::peer_lost);
    why = e.what();
  }
  t.join();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  CHECK(why.find("the store cannot accept a rank's connection: out of file descriptors") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  CHECK(srv.out_of_descriptors());
  char ch;
  CHECK(::recv(late, &ch, 1, 0) <= 0);  // accepted with the spare descriptor and closed
  ::close(late);
}

TEST_CASE("rank records: every port they name parses back, older records with fewer ports too, malformed ones are a mismatch naming the rank") {
  using gsync::bootstrap::rank_record;
  rank_record r{"10.0.0.7", 40001, "kern", "host with spaces\nand a line", 40002, 40003};
  const rank_record b = rank_record::parse(r.encode(), 5);
  CHECK(b.address == "10.0.0.7");
  CHECK(b.port == 40001);
  CHECK(b.recovery_port == 40002);
  CHECK(b.heartbeat_port == 40003);
  CHECK(b.kernel == "kern");
  CHECK(b.host == "host with spaces\nand a line");
  const rank_record old2 = rank_record::parse("::1 5000\nk\nh", 1);  // before recovery and heartbeat listeners
  CHECK(old2.port == 5000);
  CHECK(old2.recovery_port == 0);
  CHECK(old2.heartbeat_port == 0);
  const rank_record old3 = rank_record::parse("::1 5000 6000\nk\nh", 1);
  CHECK(old3.recovery_port == 6000);
  CHECK(old3.heartbeat_port == 0);
  for (const char* bad : {"10.0.0.7 0 1 2\nk\nh", "10.0.0.7 1 2 3 4\nk\nh", "10.0.0.7 x\nk\nh", "10.0.0.7 1 99999\nk\nh",
                          "10.0.0.7 1 2 \nk\nh", "10.0.0.7\nk\nh", "10.0.0.7 1\n\nh", "10.0.0.7 1\nk", " 1\nk\nh"}) {
    const std::string text = bad;
    CAPTURE(text);
    try {
      (void)rank_record::parse(bad, 9);
      FAIL("parsed");
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::mismatch);
      CHECK(std::string(e.what()).find("rank 9") != std::string::npos);
    }
  }
}

TEST_CASE("start-up connections: with lazy_connect off every pair connects at start-up, all dials at once, and every pair carries data") {
  gsync::config cfg;
  cfg.transport.lazy_connect = false;
  cfg.timeout = std::chrono::seconds(30);
  auto body = [](auto& comm, auto&) {
    const int n = comm.size(), r = comm.rank();
    std::vector<int> in(static_cast<std::size_t>(n) * 3), out(in.size());
    for (int p = 0; p < n; ++p)
      for (int k = 0; k < 3; ++k) in[static_cast<std::size_t>(p * 3 + k)] = 1000 * r + 10 * p + k;
    gsync::alltoall(comm, std::span<const int>{in}, std::span<int>{out});
    for (int p = 0; p < n; ++p)
      for (int k = 0; k < 3; ++k) CHECK(out[static_cast<std::size_t>(p * 3 + k)] == 1000 * p + 10 * r + k);
  };
  SUBCASE("every rank its own host") { gsync_test::run_tcp(7, body, cfg); }
  SUBCASE("two hosts of four") { gsync_test::run_mixed(8, 4, body, cfg); }
}
