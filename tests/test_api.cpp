// API surface: user operators (inlined, no type erasure), argument checks, aliases, avg semantics.

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <type_traits>
#include <vector>

#include "support/world.hpp"

namespace {

/// A user operator: max of absolute values.
struct absmax {
  template <class A> constexpr A operator()(A a, A b) const noexcept {
    const A x = a < 0 ? -a : a, y = b < 0 ? -b : b;
    return x < y ? y : x;
  }
};

/// A user operator with state and a finalize: sum, then scale.
struct scaled_sum {
  float scale = 1;
  template <class A> constexpr A operator()(A a, A b) const noexcept { return a + b; }
  template <class A> constexpr A finalize(A v, int) const noexcept { return static_cast<A>(v * scale); }
};

// The element loop evaluated at compile time with a user functor: only possible when the operator
// is called directly (inlined into the template), never through std::function or a virtual call.
constexpr bool user_op_is_static() {
  float a[4] = {1, -5, 3, 0}, b[4] = {-2, 4, -7, 0}, d[4] = {};
  gsync::detail::reduce_to<false>(d, a, b, 4, absmax{}, 2);
  return d[0] == 2 && d[1] == 5 && d[2] == 7 && d[3] == 0;
}
static_assert(user_op_is_static());
static_assert(gsync::reduction_op<absmax, float>);
static_assert(gsync::reduction_op<absmax, gsync::bfloat16>);
static_assert(gsync::finalizing_op<scaled_sum, double>);
static_assert(!gsync::finalizing_op<gsync::op::sum, float>);
static_assert(gsync::finalizing_op<gsync::op::avg, std::int32_t>);
static_assert(!gsync::reduction_op<int, float>);  // not callable: rejected by the concept
static_assert(std::is_same_v<gsync::tcp_communicator, gsync::communicator<gsync::transport::tcp>>);
static_assert(std::is_same_v<gsync::transport::tcp_options, gsync::transport::host_options>);  // the old name still works
static_assert(std::is_move_constructible_v<gsync::tcp_communicator> && !std::is_copy_constructible_v<gsync::tcp_communicator>);
static_assert(gsync::transport_policy<gsync::transport::tcp> && gsync::transport_policy<gsync::transport::inproc>);

}  // namespace

TEST_CASE("user functors work through allreduce, stateful ones and finalize included") {
  gsync_test::run_inproc(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<float> v = {static_cast<float>(r) - 5, static_cast<float>(r * r), -7.5f};
    gsync::allreduce(comm, std::span<float>{v}, absmax{});
    REQUIRE(v == std::vector<float>{5, 4, 7.5f});
    std::vector<double> w(100, 1.0);
    gsync::allreduce(comm, std::span<double>{w}, scaled_sum{0.5f});
    for (double x : w) REQUIRE(x == 1.5);
  });
}

TEST_CASE("avg: floats divide, integers truncate toward zero") {
  gsync_test::run_inproc(4, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<int> i = {r, -r, 1};  // sums 6, -6, 4 -> 1, -1, 1
    gsync::allreduce(comm, std::span<int>{i}, gsync::op::avg{});
    REQUIRE(i == std::vector<int>{1, -1, 1});
    std::vector<float> f = {static_cast<float>(r)};
    gsync::allreduce(comm, std::span<float>{f}, gsync::op::avg{});
    REQUIRE(f[0] == 1.5f);
    std::vector<std::uint8_t> u = {static_cast<std::uint8_t>(60)};  // 240 / 4, in uint8 range
    gsync::allreduce(comm, std::span<std::uint8_t>{u}, gsync::op::avg{});
    REQUIRE(u[0] == 60);
  });
}

TEST_CASE("argument errors are invalid_argument") {
  gsync_test::run_inproc(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> a(10), b(9);
    try {
      gsync::allreduce(comm, std::span<const float>{a}, std::span<float>{b});
      FAIL("size mismatch accepted");
    } catch (const gsync::error& e) {
      REQUIRE(e.code() == gsync::errc::invalid_argument);
    }
    try {
      gsync::allreduce(comm, std::span<const float>{a.data(), 5}, std::span<float>{a.data() + 2, 5});
      FAIL("partial overlap accepted");
    } catch (const gsync::error& e) {
      REQUIRE(e.kind() == gsync::errc::invalid_argument);
    }
    REQUIRE_THROWS_AS(comm.set_timeout(std::chrono::milliseconds(0)), gsync::error);
    REQUIRE_THROWS_AS(comm.set_segment_bytes(0), gsync::error);
  });
}

TEST_CASE("counts whose byte size cannot exist are invalid_argument on every collective, never a silent no-op") {
  // Spans that lie about their size (2^62 floats is 2^64 bytes): nothing may be read or queued.
  gsync_test::run_inproc(4, [](auto& comm, gsync_test::world_sync&) {
    float x[4] = {};
    const std::size_t huge = std::size_t{1} << 62;
    const std::span<float> big(x, huge), bigger(x, 4 * huge);
    const std::span<const float> cbig(x, huge), cbigger(x, 4 * huge);
    auto invalid = [](auto&& f) {
      try {
        f();
        return false;
      } catch (const gsync::error& e) {
        return e.kind() == gsync::errc::invalid_argument;
      }
    };
    CHECK(invalid([&] { gsync::allreduce(comm, big); }));
    CHECK(invalid([&] { gsync::allreduce(comm, cbig, big); }));
    CHECK(invalid([&] { gsync::allgather(comm, cbig, bigger); }));  // 4 x 2^62 wraps to 0 == 0
    CHECK(invalid([&] { gsync::reduce_scatter(comm, cbigger, big, gsync::op::sum{}); }));
    CHECK(invalid([&] { gsync::alltoall(comm, std::span<const float>(x, 2 * huge), std::span<float>(x + 2, 2 * huge)); }));
    CHECK(invalid([&] { gsync::broadcast(comm, big, 0); }));
    CHECK(invalid([&] { gsync::reduce(comm, cbig, big, gsync::op::sum{}, 0); }));
    CHECK(invalid([&] { gsync::send(comm, cbig, (comm.rank() + 1) % 4, 0); }));
    CHECK(invalid([&] { gsync::recv(comm, big, (comm.rank() + 1) % 4, 0); }));
    std::vector<float> v(8, 1.0f);  // the communicator is still usable
    gsync::allreduce(comm, std::span<float>{v});
    CHECK(v[7] == 4.0f);
  });
}

TEST_CASE("forced ring by template argument and by GSYNC_ALGO, unknown names are rejected") {
  gsync::config cfg;
  cfg.algo = "ring";
  gsync_test::run_inproc(3, [](auto& comm, gsync_test::world_sync&) {
    std::vector<double> w(33, comm.rank());
    gsync::allreduce<gsync::algo::ring>(comm, std::span<double>{w}, gsync::op::max{});
    for (double x : w) REQUIRE(x == 2);
    gsync::allreduce(comm, std::span<double>{w});
    for (double x : w) REQUIRE(x == 6);
  }, cfg);
  cfg.algo = "bogus";
  gsync_test::run_inproc(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(4);
    try {
      gsync::allreduce(comm, std::span<float>{v});
      FAIL("unknown algorithm accepted");
    } catch (const gsync::error& e) {
      REQUIRE(e.kind() == gsync::errc::invalid_argument);
      REQUIRE(std::string(e.what()).find("ring") != std::string::npos);
    }
  }, cfg);
}

TEST_CASE("error codes compare with gsync::errc and carry a readable category") {
  gsync::error e(gsync::errc::peer_lost, "rank 3 vanished");
  CHECK(e.code() == gsync::errc::peer_lost);
  CHECK(e.code() != gsync::errc::timeout);
  CHECK(std::string(e.code().category().name()) == "gsync");
  CHECK(std::string(e.what()).find("rank 3 vanished") != std::string::npos);
  const std::system_error& base = e;
  CHECK(base.code().message() == "peer lost");
  // every code has its own message
  std::set<std::string> messages;
  for (int c = 1; c <= 8; ++c) messages.insert(std::error_code(c, gsync::error_category()).message());
  CHECK(messages.size() == 8);
  CHECK(messages.count("unknown gsync error") == 0);
  CHECK(gsync::error(gsync::errc::non_finite, "x").code().message() == "non-finite values");
}

TEST_CASE("automatic allreduce: a remembered choice is per size and per segment size") {
  gsync::detail::choice_memo m;
  CHECK_FALSE(m.find(8, 1024).has_value());
  m.put(8, 1024, 3);
  REQUIRE(m.find(8, 1024).has_value());
  CHECK(*m.find(8, 1024) == 3);
  CHECK_FALSE(m.find(8, 2048).has_value());  // another pipelining unit: worked out again
  CHECK_FALSE(m.find(16, 1024).has_value());
  for (std::size_t b = 100; b < 108; ++b) m.put(b, 1024, static_cast<std::uint8_t>(b % 7));  // 8 more: the oldest goes
  CHECK_FALSE(m.find(8, 1024).has_value());
  for (std::size_t b = 100; b < 108; ++b) CHECK(m.find(b, 1024) == std::optional<std::uint8_t>(static_cast<std::uint8_t>(b % 7)));
}

namespace {
struct constant_name_algo { static constexpr std::string_view name = "halving_doubling"; };
struct runtime_name_algo { static inline std::string name = "tree"; };  // not a constant: found at run time
struct unknown_algo { static constexpr const char* name = "my_schedule"; };
struct named_op { static constexpr std::string_view name = "min"; };
struct unnamed_op {};
}  // namespace

TEST_CASE("fingerprint codes of policies: compile-time where the name is a constant, same codes either way") {
  CHECK(gsync::algo_code_of<constant_name_algo>() == gsync::algo_code("halving_doubling"));
  CHECK(gsync::algo_code_of<runtime_name_algo>() == gsync::algo_code("tree"));
  CHECK(gsync::algo_code_name(gsync::algo_code_of<unknown_algo>()) == "custom");
  CHECK(gsync::algo_code_of<gsync::algo::ring>() == gsync::algo_code("ring"));
  CHECK(gsync::op_code_name(gsync::op_code_of<named_op>()) == "min");
  CHECK(gsync::op_code_name(gsync::op_code_of<unnamed_op>()) == "user");
  CHECK(gsync::op_code_of<gsync::op::avg>() == gsync::op_code("avg"));
}
