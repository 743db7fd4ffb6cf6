// Job-key authentication (bootstrap/auth.hpp): the handshake itself over loopback connections, the store
// rejecting strangers while serving the job, and whole jobs with a key, with a wrong key and with
// a stranger knocking during set-up.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "support/env.hpp"
#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/interface.hpp"
#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/bootstrap/store.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;
namespace auth = gsync::bootstrap::auth;

namespace {
gsync::deadline in(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

// A connected pair of loopback sockets, each on its own io_context: the two sides of a handshake
// run on two threads, and the socket helpers run the io_context of the socket they wait on.
struct sock_pair {
  asio::io_context io_client, io_server;
  gsync::detail::net::tcp_socket client{io_client}, server{io_server};
  sock_pair() {
    gsync::detail::net::tcp_acceptor acc(io_server, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client.connect(acc.local_endpoint());
    acc.accept(server);
  }
};

// Runs the client side on this thread and the server side on another; returns the server's
// verdict and rethrows the client's error, if any.
struct outcome {
  bool server_ok = false;
  std::string server_why;
  bool client_ok = false;
  gsync::errc client_err{};
  std::string client_msg;
};
outcome handshake(const auth::job_key& client_key, const auth::job_key& server_key) {
  sock_pair p;
  outcome o;
  std::thread srv([&] {
    o.server_ok = auth::accept_handshake(p.server, server_key, in(2000ms), "test client", o.server_why);
    asio::error_code ig;
    p.server.shutdown(asio::socket_base::shutdown_both, ig);  // a server that rejects closes the connection
  });
  try {
    auth::client_handshake(p.client, client_key, in(2000ms), "test server");
    o.client_ok = true;
  } catch (const gsync::error& e) {
    o.client_err = e.kind();
    o.client_msg = e.what();
  }
  srv.join();
  return o;
}
}  // namespace

TEST_CASE("auth handshake: same key passes, another key, or a key against none, fails on both sides") {
#if !defined(GSYNC_HAVE_OPENSSL)
  return gsync_test::skip("built without OpenSSL: no keyed handshake");
#else
  const auth::job_key k1("secret-one-of-the-job"), k2("secret-two-of-the-job"), none;
  auto ok = handshake(k1, k1);
  CHECK(ok.server_ok);
  CHECK(ok.client_ok);

  for (auto [c, s] : {std::pair{&k1, &k2}, std::pair{&k1, &none}, std::pair{&none, &k1}}) {
    auto o = handshake(*c, *s);
    CHECK_FALSE(o.client_ok);
    CHECK(o.client_err == gsync::errc::auth_failed);
    CHECK_FALSE(o.server_ok);
  }
  // A client that skips checking the server's proof still cannot get past the server: a
  // well-formed hello followed by a forged proof is refused.
  auth::server_handshake hs(k1);
  std::string in_bytes(auth::magic.data(), auth::magic.size());
  in_bytes.append(auth::nonce_bytes, '\x01');
  std::string out;
  CHECK(hs.feed(in_bytes, out) == auth::server_handshake::state::need_more);
  CHECK(out.size() == auth::challenge_bytes);
  in_bytes.assign(auth::mac_bytes, '\x00');
  CHECK(hs.feed(in_bytes, out) == auth::server_handshake::state::failed);
  CHECK(hs.why().find("authentication") != std::string::npos);
#endif
}

TEST_CASE("auth handshake: MACs differ by role and by nonce (no reflection, no replay)") {
#if !defined(GSYNC_HAVE_OPENSSL)
  return gsync_test::skip("built without OpenSSL: no keyed handshake");
#else
  const auth::job_key k("sixteen-byte-key");
  auth::nonce a{}, b{};
  a[0] = 1;
  b[0] = 2;
  CHECK_FALSE(auth::job_key::equal(k.sign(auth::server_label, a, b), k.sign(auth::client_label, a, b)));
  CHECK_FALSE(auth::job_key::equal(k.sign(auth::server_label, a, b), k.sign(auth::server_label, b, a)));
  CHECK(auth::job_key::equal(k.sign(auth::server_label, a, b), k.sign(auth::server_label, a, b)));
  CHECK(auth::fresh_nonce() != auth::fresh_nonce());
#endif
}

TEST_CASE("random bytes for set-up come from the kernel and differ between calls") {
  namespace rnd = gsync::detail::random;
  std::array<unsigned char, 4096> a{}, b{};
  REQUIRE(rnd::os_bytes(a.data(), a.size()));  // more than getrandom promises in one call (256 B): it loops
  REQUIRE(rnd::os_bytes(b.data(), b.size()));
  CHECK(a != b);
  // In 4096 random bytes about 256 * (255/256)^4096 ~ 3e-5 byte values are expected to be missing,
  // so more than 15 missing means the bytes are not random (a buffer left zero, a repeated word).
  std::array<int, 256> seen{};
  for (unsigned char c : a) seen[c] = 1;
  int distinct = 0;
  for (int v : seen) distinct += v;
  CHECK(distinct > 240);
  CHECK(rnd::os_bytes(a.data(), 0));
  const auto x = rnd::u64(), y = rnd::u64();
  CHECK(x != y);
  CHECK(rnd::mix(0) != rnd::mix(1));
}

TEST_CASE("auth handshake: garbage instead of a hello is rejected at once") {
  const auth::job_key none;
  auth::server_handshake hs(none);
  std::string in_bytes = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string out;
  CHECK(hs.feed(in_bytes, out) == auth::server_handshake::state::failed);
  CHECK(hs.why().find("magic") != std::string::npos);
  CHECK(out.empty());
}

TEST_CASE("store: strangers (random bytes, wrong key, silent) are dropped while the job's clients are served") {
#if defined(GSYNC_HAVE_OPENSSL)
  const auth::job_key key("store-test-key-long-enough");
  const auth::job_key wrong("not-the-key-of-the-store");
#else
  const auth::job_key key, wrong;
#endif
  gsync::bootstrap::store_server srv("127.0.0.1", 0, gsync::logger(0), key);
  const auto port = srv.port();
  gsync::bootstrap::store_client good("127.0.0.1", port, in(2000ms), key);
  good.set("a", "1", in(2000ms));

  // Random bytes from a raw connection.
  {
    asio::io_context io;
    auto s = gsync::detail::connect_retry(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), in(2000ms), "store");
    std::mt19937 rng(7);
    std::string junk(4096, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    gsync::detail::write_all(s, junk.data(), junk.size(), in(2000ms), "store");
    char c;
    // The server closes it: a read returns EOF (peer_lost) rather than data.
    CHECK_THROWS_AS(gsync::detail::read_all(s, &c, 1, in(3000ms), "store"), gsync::error);
  }
#if defined(GSYNC_HAVE_OPENSSL)
  // A client with another key: refused, with auth_failed.
  try {
    gsync::bootstrap::store_client bad("127.0.0.1", port, in(2000ms), wrong);
    FAIL("a client with the wrong key got in");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::auth_failed);
  }
#endif
  // A silent connection does not block the others.
  asio::io_context io2;
  auto silent = gsync::detail::connect_retry(io2, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), in(2000ms), "store");
  CHECK(good.get("a", in(2000ms)) == "1");
  gsync::bootstrap::store_client good2("127.0.0.1", port, in(2000ms), key);
  CHECK(good2.add("n", 5, in(2000ms)) == 5);
}

TEST_CASE("job key: a job with a key works, a rank with another key is refused and the others time out naming it") {
#if !defined(GSYNC_HAVE_OPENSSL)
  return gsync_test::skip("built without OpenSSL: no keyed job");
#else
  // All ranks with the same key.
  {
    const auto port = gsync_test::free_port();
    gsync_test::run_threads<gsync::tcp_communicator>(
        3,
        [&](int r) {
          gsync::bootstrap::launch_info li;
          li.rank = r;
          li.size = 3;
          li.master_port = port;
          li.host_id = "auth-host-" + std::to_string(r);
          li.job_key = "shared secret of the job";
          return gsync::tcp_communicator::join(li, gsync::config{});
        },
        [](auto& comm, auto&) {
          std::vector<float> v(100, 1.0f);
          gsync::allreduce(comm, std::span<float>{v});
          CHECK(v[99] == 3.0f);
        });
  }
  // Rank 2 with a different key.
  const auto port = gsync_test::free_port();
  std::vector<std::thread> th;
  std::vector<gsync::errc> err(3, gsync::errc{});
  std::vector<std::string> msg(3);
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      gsync::bootstrap::launch_info li;
      li.rank = r;
      li.size = 3;
      li.master_port = port;
      li.host_id = "auth-host-" + std::to_string(r);
      li.job_key = r == 2 ? "intruder with its own key" : "shared secret of the job";
      gsync::config cfg;
      cfg.timeout = 1500ms;
      try {
        auto c = gsync::tcp_communicator::join(li, cfg);
      } catch (const gsync::error& e) {
        err[r] = e.kind();
        msg[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  CHECK(err[2] == gsync::errc::auth_failed);
  // Ranks 0 and 1 reach their deadlines at about the same moment. The first to time out tells the store,
  // and the other may hear that (peer_lost, carrying the first one's reason) before its own deadline.
  // Either way each must fail, and its message must name rank 2 as the one that never came.
  for (int r = 0; r < 2; ++r) {
    INFO("rank ", r, ": ", msg[r]);
    CHECK((err[r] == gsync::errc::timeout || err[r] == gsync::errc::peer_lost));
    CHECK(msg[r].find("ranks 2 ") != std::string::npos);
  }
#endif
}

namespace {
// Joins rank 0 of a 2-rank job whose store is at `addr`, with the environment as it is; returns
// the error it failed with (errc{} and "" when it did not fail at set-up: it cannot, alone).
std::pair<gsync::errc, std::string> join_alone(const std::string& addr, std::optional<std::string> key = std::nullopt,
                                               std::optional<bool> allow = std::nullopt) {
  gsync::bootstrap::launch_info li;
  li.rank = 0;
  li.size = 2;
  li.master_addr = addr;
  li.master_port = gsync_test::free_port();
  li.job_key = std::move(key);
  li.allow_unauthenticated = allow;
  gsync::config cfg;
  cfg.timeout = 300ms;
  try {
    auto c = gsync::tcp_communicator::join(li, cfg);
  } catch (const gsync::error& e) {
    return {e.kind(), e.what()};
  }
  return {};
}
}  // namespace

TEST_CASE("closed by default: a job reachable beyond loopback refuses to start without a key, and says how to give one") {
  gsync_test::scoped_env k("GSYNC_JOB_KEY", nullptr), f("GSYNC_JOB_KEY_FILE", nullptr), d("GSYNC_JOB_KEY_FD", nullptr),
      a("GSYNC_ALLOW_UNAUTHENTICATED", nullptr);
  // 198.18.0.0/15 is for tests: no address of this host, and the refusal comes before any bind.
  auto [kind, msg] = join_alone("198.18.255.1");
  CHECK(kind == gsync::errc::invalid_argument);
  CHECK(msg.find("GSYNC_JOB_KEY=") != std::string::npos);
  CHECK(msg.find("GSYNC_JOB_KEY_FILE") != std::string::npos);
  CHECK(msg.find("GSYNC_ALLOW_UNAUTHENTICATED=1") != std::string::npos);
  // Explicit consent, in the program or the environment: it gets past the key and fails where the
  // store binds, which is that address only (not an address of this host), never every interface.
  for (int how = 0; how < 2; ++how) {
    CAPTURE(how);
    gsync_test::scoped_env allow("GSYNC_ALLOW_UNAUTHENTICATED", how == 1 ? "1" : nullptr);
    auto [kind2, msg2] = join_alone("198.18.255.1", std::nullopt, how == 0 ? std::optional<bool>(true) : std::nullopt);
    CHECK(kind2 == gsync::errc::invalid_argument);
    CHECK(msg2.find("not an address of this host") != std::string::npos);
  }
  // The program's explicit refusal wins over the environment's consent.
  gsync_test::scoped_env allow("GSYNC_ALLOW_UNAUTHENTICATED", "1");
  CHECK(join_alone("198.18.255.1", std::nullopt, false).second.find("no job key") != std::string::npos);
  {
    gsync_test::scoped_env bad("GSYNC_ALLOW_UNAUTHENTICATED", "yes");
    CHECK(join_alone("198.18.255.1").first == gsync::errc::invalid_argument);
  }
#if defined(GSYNC_HAVE_OPENSSL)
  // With a key it gets past the check too (and fails at the bind).
  CHECK(join_alone("198.18.255.1", std::string(32, 'k'), false).second.find("not an address of this host") != std::string::npos);
#endif
  // On loopback no key is needed: the lone rank gets to waiting for rank 1 (a timeout).
  CHECK(join_alone("127.0.0.1", std::nullopt, false).first == gsync::errc::timeout);
}

TEST_CASE("job key: too short is refused, a key file must be the user's alone, a key descriptor is read once") {
  CHECK_THROWS_AS(auth::job_key("fifteen bytes!!"), gsync::error);
  try {
    auth::job_key("short");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::invalid_argument);
    CHECK(std::string(e.what()).find("at least 16") != std::string::npos);
  }
#if !defined(GSYNC_HAVE_OPENSSL)
  return gsync_test::skip("built without OpenSSL: keys are refused");
#else
  gsync_test::scoped_env k("GSYNC_JOB_KEY", nullptr), d("GSYNC_JOB_KEY_FD", nullptr);
  const auth::job_key want("a key kept in a file, 0600");
  auth::nonce a{}, b{};
  a[0] = 7;
  const auto sig = [&](const auth::job_key& key) { return key.sign(auth::server_label, a, b); };
  const auto path = std::filesystem::temp_directory_path() / ("gsync-key-" + std::to_string(::getpid()));
  {
    std::ofstream(path) << "a key kept in a file, 0600\n";  // echo adds the newline: not part of the key
  }
  gsync_test::scoped_env f("GSYNC_JOB_KEY_FILE", path.c_str());
  ::chmod(path.c_str(), 0644);
  try {
    auth::job_key::from_env();
    FAIL("a key file readable by others was accepted");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::invalid_argument);
    CHECK(std::string(e.what()).find("chmod 600") != std::string::npos);
  }
  ::chmod(path.c_str(), 0600);
  CHECK(auth::job_key::equal(sig(auth::job_key::from_env()), sig(want)));
  std::filesystem::remove(path);
  CHECK_THROWS_AS(auth::job_key::from_env(), gsync::error);  // named but missing: an error, not "no key"

  // GSYNC_JOB_KEY_FD (gsyncrun's): a descriptor that is not the key's memory file is refused.
  gsync_test::scoped_env nof("GSYNC_JOB_KEY_FILE", nullptr);
  const int other = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(other >= 0);
  {
    gsync_test::scoped_env fd("GSYNC_JOB_KEY_FD", std::to_string(other).c_str());
    CHECK_THROWS_AS(auth::job_key::from_env(), gsync::error);
  }
  ::close(other);
  const int mfd = ::memfd_create("gsync-job-key", MFD_CLOEXEC);
  REQUIRE(mfd >= 0);
  const std::string key = "the key gsyncrun passes";
  REQUIRE(::write(mfd, key.data(), key.size()) == static_cast<ssize_t>(key.size()));
  gsync_test::scoped_env fd("GSYNC_JOB_KEY_FD", std::to_string(mfd).c_str());
  CHECK(auth::job_key::equal(sig(auth::job_key::from_env()), sig(auth::job_key(key))));
  CHECK(::fcntl(mfd, F_GETFD) == -1);  // closed once read: children of the rank do not inherit it (nothing opened since)
  CHECK(auth::job_key::equal(sig(auth::job_key::from_env()), sig(auth::job_key(key))));  // the process keeps it
#endif
}

TEST_CASE("strangers on the ranks' data ports during training (silent, junk, a half handshake) cost the job nothing") {
  // Four ranks, each its own host, connecting pairs on first use: in a ring, ranks 1 and 3 never
  // connect to each other, so their listeners stay open all along. A stranger holding a connection
  // open must not hold up a rank admitting it: with a 4 s deadline on every operation, a rank that
  // waited out a 5 s admission limit would make its peers time out.
  gsync::config cfg = gsync_test::with_timeout(4000ms);
  cfg.transport.shm = false;
  cfg.transport.lazy_connect = true;
  cfg.algo = "ring";
  std::vector<int> strangers;
  gsync_test::run_tcp(
      4,
      [&](auto& comm, gsync_test::world_sync& sync) {
        if (comm.rank() == 0) {
          for (int victim : {1, 3}) {
            const auto rec = gsync::bootstrap::rank_record::parse(
                comm.transport().store().get(gsync::bootstrap::rank_record_key(victim), in(2000ms)), victim);
            sockaddr_in sa{};
            sa.sin_family = AF_INET;
            sa.sin_port = htons(rec.port);
            ::inet_pton(AF_INET, rec.address.c_str(), &sa.sin_addr);
            for (int kind = 0; kind < 3; ++kind) {
              const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
              if (kind == 1) {
                const std::string junk(3000, '\x5a');
                CHECK(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) > 0);
              } else if (kind == 2) {  // a correct hello of the handshake, then silence
                std::string hello(auth::magic.data(), auth::magic.size());
                hello.append(auth::nonce_bytes, '\x03');
                CHECK(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) > 0);
              }
              strangers.push_back(fd);
            }
          }
        }
        sync.bar.arrive_and_wait();  // the strangers are connected before any data moves
        for (int step = 0; step < 20; ++step) {
          std::vector<float> v(1000, static_cast<float>(comm.rank() + step));
          gsync::allreduce(comm, std::span<float>{v});
          CHECK(v[999] == static_cast<float>(6 + 4 * step));
        }
      },
      cfg);
  for (int fd : strangers) ::close(fd);
}
