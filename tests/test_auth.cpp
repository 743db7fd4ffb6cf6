// Job-key authentication (bootstrap/auth.hpp): the handshake itself over socket pairs, the store
// rejecting strangers while serving the job, and whole jobs with a key, with a wrong key and with
// a stranger knocking during set-up.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "support/world.hpp"

using namespace std::chrono_literals;
namespace auth = gsync::bootstrap::auth;

namespace {
gsync::deadline in(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

struct sock_pair {
  int fd[2] = {-1, -1};
  sock_pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~sock_pair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
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
    o.server_ok = auth::accept_handshake(p.fd[1], server_key, in(2000ms), "test client", o.server_why);
    ::shutdown(p.fd[1], SHUT_RDWR);  // a server that rejects closes the connection
  });
  try {
    auth::client_handshake(p.fd[0], client_key, in(2000ms), "test server");
    o.client_ok = true;
  } catch (const gsync::error& e) {
    o.client_err = e.kind();
    o.client_msg = e.what();
  }
  srv.join();
  return o;
}
}  // namespace

#if defined(GSYNC_HAVE_OPENSSL)
TEST_CASE("auth handshake: same key passes, another key, or a key against none, fails on both sides") {
  const auth::job_key k1("secret-one"), k2("secret-two"), none;
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
}

TEST_CASE("auth handshake: MACs differ by role and by nonce (no reflection, no replay)") {
  const auth::job_key k("k");
  auth::nonce a{}, b{};
  a[0] = 1;
  b[0] = 2;
  CHECK_FALSE(auth::job_key::equal(k.sign(auth::server_label, a, b), k.sign(auth::client_label, a, b)));
  CHECK_FALSE(auth::job_key::equal(k.sign(auth::server_label, a, b), k.sign(auth::server_label, b, a)));
  CHECK(auth::job_key::equal(k.sign(auth::server_label, a, b), k.sign(auth::server_label, a, b)));
  CHECK(auth::fresh_nonce() != auth::fresh_nonce());
}
#endif

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
  const auth::job_key key("store-test-key");
  const auth::job_key wrong("not-the-key");
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
    gsync::detail::write_all(s.native_handle(), junk.data(), junk.size(), in(2000ms), "store");
    char c;
    // The server closes it: a read returns EOF (peer_lost) rather than data.
    CHECK_THROWS_AS(gsync::detail::read_all(s.native_handle(), &c, 1, in(3000ms), "store"), gsync::error);
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

#if defined(GSYNC_HAVE_OPENSSL)
TEST_CASE("job key: a job with a key works, a rank with another key is refused and the others time out naming it") {
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
          li.job_key = "shared secret";
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
      li.job_key = r == 2 ? "intruder" : "shared secret";
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
}
#endif
