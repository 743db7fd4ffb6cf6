// Asynchronous collectives and the per-communicator progress engine: results equal the
// synchronous calls (bitwise) and a double-precision reference, issue order is execution order,
// compound submit() jobs, errors surfacing at wait() and breaking the communicator, bounded waits,
// argument checks at issue, moving and destroying communicators with async history.

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gsync/async.hpp>

#include "support/reference.hpp"
#include "support/errors.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;
using gsync_test::world_sync;

namespace {

gsync::config test_config() {
  gsync::config c;
  c.timeout = 30s;
  c.segment_bytes = 8192;  // several segments for the large counts
  return c;
}

using gsync_test::kind_of;
using gsync_test::message_of;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T, class Op>
std::vector<T> inputs(int r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = gsync_test::input<T, Op>(r, i);
  return v;
}

template <class T, class Op>
std::size_t wrong_elements(const std::vector<T>& v, int n) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < v.size(); ++i) wrong += !gsync_test::check_element<T, Op>(v[i], n, i);
  return wrong;
}

// Several allreduce_async issued back to back (float sum in place, double avg out of place, for
// counts 0, 1, N-1 and a multi-segment count), waited in reverse order; then the same with the
// synchronous calls. Results: bitwise equal, and within the reference's tolerance.
template <class Comm>
void async_matches_sync(Comm& comm, world_sync&) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<std::size_t> counts = {0, 1, static_cast<std::size_t>(n - 1), 20011};
  const std::size_t k = counts.size();
  std::vector<std::vector<float>> fa(k), fs(k);
  std::vector<std::vector<double>> din(k), da(k), ds(k);
  std::vector<gsync::request> reqs;
  for (std::size_t j = 0; j < k; ++j) {
    fa[j] = inputs<float, gsync::op::sum>(r, counts[j]);
    fs[j] = fa[j];
    din[j] = inputs<double, gsync::op::avg>(r, counts[j]);
    da[j].assign(counts[j], -1.0);
    ds[j].assign(counts[j], -2.0);
    reqs.push_back(gsync::allreduce_async(comm, std::span<float>{fa[j]}));
    reqs.push_back(gsync::allreduce_async(comm, std::span<const double>{din[j]}, std::span<double>{da[j]}, gsync::op::avg{}));
  }
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) {
    REQUIRE(it->valid());
    it->wait();
    CHECK(it->test());
    CHECK(it->started_at() <= it->finished_at());
  }
  for (std::size_t j = 0; j < k; ++j) {
    gsync::allreduce(comm, std::span<float>{fs[j]});
    gsync::allreduce(comm, std::span<const double>{din[j]}, std::span<double>{ds[j]}, gsync::op::avg{});
  }
  for (std::size_t j = 0; j < k; ++j) {
    CHECK(same_bits(fa[j], fs[j]));
    CHECK(same_bits(da[j], ds[j]));
    CHECK(wrong_elements<float, gsync::op::sum>(fa[j], n) == 0);
    CHECK(wrong_elements<double, gsync::op::avg>(da[j], n) == 0);
  }
}

}  // namespace

TEST_CASE("async: allreduce_async back to back, waited in reverse, equals allreduce (in-process, 1..8 ranks)") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    gsync_test::run_inproc(n, [](auto& c, world_sync& s) { async_matches_sync(c, s); }, test_config());
  }
}

TEST_CASE("async: allreduce_async equals allreduce over TCP") {
  for (int n : {1, 2, 3, 5}) {
    CAPTURE(n);
    gsync_test::run_tcp(n, [](auto& c, world_sync& s) { async_matches_sync(c, s); }, test_config());
  }
}

TEST_CASE("async: allreduce_async equals allreduce over shared memory") {
  for (int n : {2, 3, 4, 7}) {
    CAPTURE(n);
    gsync_test::run_shm(n, [](auto& c, world_sync& s) { async_matches_sync(c, s); }, test_config());
  }
}

namespace {

// A synchronous call made while async work is pending runs after it: when it returns, the earlier
// requests are finished. Inline calls, queued calls and async calls interleave in issue order.
template <class Comm>
void interleaved(Comm& comm, world_sync&) {
  const int n = comm.size(), r = comm.rank();
  using S = gsync::op::sum;
  auto a = inputs<float, S>(r, 5003);
  auto b = inputs<std::int32_t, S>(r, 77);
  std::vector<double> c(129, r == n - 1 ? 3.25 : 0.0);
  auto r1 = gsync::allreduce_async(comm, std::span<float>{a});
  gsync::allreduce(comm, std::span<std::int32_t>{b});  // queued behind r1 (or inline once r1 is done)
  CHECK(r1.test());                                    // ordered after r1, so r1 has finished
  auto r2 = gsync::broadcast_async(comm, std::span<double>{c}, n - 1);
  gsync::barrier(comm);
  CHECK(r2.test());
  auto r3 = gsync::barrier_async(comm);
  r3.wait();
  r2.wait();
  r1.wait();
  CHECK(wrong_elements<float, S>(a, n) == 0);
  CHECK(wrong_elements<std::int32_t, S>(b, n) == 0);
  std::size_t bad = 0;
  for (double x : c) bad += x != 3.25;
  CHECK(bad == 0);
}

// A compound job (reduce_scatter then allgather, as a compressed-gradient synchronizer does)
// equals allreduce; collectives inside the job run inline on the engine; an _async call inside a
// job returns a finished request.
template <class Comm>
void compound_job(Comm& comm, world_sync&) {
  const int n = comm.size(), r = comm.rank();
  using S = gsync::op::sum;
  const std::size_t c = 1001;
  const std::size_t total = c * static_cast<std::size_t>(n);
  auto in = inputs<std::int64_t, S>(r, total);
  std::vector<std::int64_t> part(c), out(total, -1), ref = in;
  std::vector<std::int32_t> extra(3, 1);
  bool inner_finished = false;
  auto before = gsync::allreduce_async(comm, std::span<std::int64_t>{ref});
  auto job = gsync::submit(comm, [&](auto& x) {
    gsync::reduce_scatter(x, std::span<const std::int64_t>{in}, std::span<std::int64_t>{part});
    gsync::allgather(x, std::span<const std::int64_t>{part}, std::span<std::int64_t>{out});
    auto inner = gsync::allreduce_async(x, std::span<std::int32_t>{extra});
    inner_finished = inner.test();
  });
  std::vector<std::int32_t> after(9, 2);
  auto tail = gsync::allreduce_async(comm, std::span<std::int32_t>{after});
  tail.wait();
  CHECK(job.test());  // FIFO: the job ran before `tail`
  job.wait();
  before.wait();
  CHECK(inner_finished);
  CHECK(same_bits(out, ref));
  CHECK(wrong_elements<std::int64_t, S>(out, n) == 0);
  CHECK(extra[2] == n);
  CHECK(after[8] == 2 * n);
  // Numbering stays aligned: a collective issued outside any job afterwards still works.
  std::vector<float> z(4, 1.0f);
  gsync::allreduce(comm, std::span<float>{z});
  CHECK(z[3] == static_cast<float>(n));
}

// Every *_async collective once, checked against references.
template <class Comm>
void every_kind(Comm& comm, world_sync&) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t nn = static_cast<std::size_t>(n);
  using S = gsync::op::sum;
  const std::size_t c = 37;
  auto rs_in = inputs<double, S>(r, nn * c);
  std::vector<double> rs_out(c);
  std::vector<float> ag_in(c, static_cast<float>(r + 1)), ag_out(nn * c);
  std::vector<std::int16_t> bc(513, static_cast<std::int16_t>(r == 0 ? 1234 : 0));
  auto rd_in = inputs<float, gsync::op::max>(r, 300);
  std::vector<float> rd_out(r == n - 1 ? 300 : 0);
  std::vector<std::int32_t> a2a_in(nn * c), a2a_out(nn * c, -1);
  for (std::size_t j = 0; j < nn; ++j)
    for (std::size_t i = 0; i < c; ++i) a2a_in[j * c + i] = static_cast<std::int32_t>(r * 100000 + static_cast<int>(j) * 1000 + static_cast<int>(i));
  std::vector<float> p2p_out(1000, static_cast<float>(r)), p2p_in(1000, -1.0f);

  std::vector<gsync::request> q;
  q.push_back(gsync::reduce_scatter_async(comm, std::span<const double>{rs_in}, std::span<double>{rs_out}));
  q.push_back(gsync::allgather_async(comm, std::span<const float>{ag_in}, std::span<float>{ag_out}));
  q.push_back(gsync::broadcast_async(comm, std::span<std::int16_t>{bc}, 0));
  q.push_back(gsync::reduce_async(comm, std::span<const float>{rd_in}, std::span<float>{rd_out}, gsync::op::max{}, n - 1));
  q.push_back(gsync::alltoall_async(comm, std::span<const std::int32_t>{a2a_in}, std::span<std::int32_t>{a2a_out}));
  q.push_back(gsync::barrier_async(comm));
  if (n > 1) {  // a ring of messages to r+1 from r-1; odd ranks receive first, so no cycle of waits
    if (r % 2 == 0) q.push_back(gsync::send_async(comm, std::span<const float>{p2p_out}, (r + 1) % n, 11));
    q.push_back(gsync::recv_async(comm, std::span<float>{p2p_in}, (r + n - 1) % n, 11));
    if (r % 2 == 1) q.push_back(gsync::send_async(comm, std::span<const float>{p2p_out}, (r + 1) % n, 11));
  }
  for (auto& x : q) x.wait();

  std::size_t bad = 0;
  for (std::size_t i = 0; i < c; ++i) {
    double acc = 0;
    for (int s = 0; s < n; ++s) acc += gsync_test::input<double, S>(s, static_cast<std::size_t>(r) * c + i);
    bad += std::fabs(rs_out[i] - acc) > 1e-9 * (1 + std::fabs(acc));
  }
  CHECK(bad == 0);
  bad = 0;
  for (std::size_t j = 0; j < nn; ++j)
    for (std::size_t i = 0; i < c; ++i) bad += ag_out[j * c + i] != static_cast<float>(j + 1);
  CHECK(bad == 0);
  bad = 0;
  for (auto v : bc) bad += v != 1234;
  CHECK(bad == 0);
  if (r == n - 1) CHECK(wrong_elements<float, gsync::op::max>(rd_out, n) == 0);
  bad = 0;
  for (std::size_t j = 0; j < nn; ++j)
    for (std::size_t i = 0; i < c; ++i)
      bad += a2a_out[j * c + i] != static_cast<std::int32_t>(static_cast<int>(j) * 100000 + r * 1000 + static_cast<int>(i));
  CHECK(bad == 0);
  if (n > 1) {
    bad = 0;
    for (float v : p2p_in) bad += v != static_cast<float>((r + n - 1) % n);
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("async: sync calls after pending async ones are ordered after them") {
  for (int n : {1, 2, 3, 6}) {
    CAPTURE(n);
    gsync_test::run_inproc(n, [](auto& c, world_sync& s) { interleaved(c, s); }, test_config());
  }
  gsync_test::run_tcp(3, [](auto& c, world_sync& s) { interleaved(c, s); }, test_config());
}

TEST_CASE("async: submit() runs a compound job (reduce_scatter + allgather) in issue order, equal to allreduce") {
  for (int n : {1, 2, 3, 5, 8}) {
    CAPTURE(n);
    gsync_test::run_inproc(n, [](auto& c, world_sync& s) { compound_job(c, s); }, test_config());
  }
  gsync_test::run_tcp(4, [](auto& c, world_sync& s) { compound_job(c, s); }, test_config());
}

TEST_CASE("async: every collective has an _async form that gives the reference result") {
  for (int n : {1, 2, 3, 4, 7}) {
    CAPTURE(n);
    gsync_test::run_inproc(n, [](auto& c, world_sync& s) { every_kind(c, s); }, test_config());
  }
  gsync_test::run_tcp(3, [](auto& c, world_sync& s) { every_kind(c, s); }, test_config());
  gsync_test::run_shm(2, [](auto& c, world_sync& s) { every_kind(c, s); }, test_config());
}

TEST_CASE("async: test() turns true while the caller keeps working, started_at <= finished_at") {
  gsync_test::run_inproc(3, [](auto& comm, world_sync&) {
    std::vector<float> v(200003, 1.0f);
    auto req = gsync::allreduce_async(comm, std::span<float>{v});
    CHECK(req.started_at() <= req.finished_at());  // both default before the end, or both set
    double work = 0;
    std::size_t polls = 0;
    while (!req.test()) {
      for (int i = 0; i < 1000; ++i) work += 1e-3 * i;  // the caller's own computation
      ++polls;
    }
    CHECK(work >= 0);
    CHECK(req.test());  // stays true
    CHECK(req.finished_at() != std::chrono::steady_clock::time_point{});
    CHECK(req.started_at() <= req.finished_at());
    CHECK(v[200002] == 3.0f);
    MESSAGE("polls before completion: " << polls);
    // An empty request is finished and waits for nothing.
    gsync::request none;
    CHECK_FALSE(none.valid());
    CHECK(none.test());
    none.wait();
  }, test_config());
}

namespace {

// A job that throws on every rank: its exception (the original) surfaces at wait(); the operation
// queued after it and every later call fail with the same code, saying the communicator is broken.
template <class Comm>
void throwing_job(Comm& comm, world_sync&) {
  std::vector<float> v(100, 1.0f);
  auto ok = gsync::allreduce_async(comm, std::span<float>{v});
  auto bad = gsync::submit(comm, [](auto&) { throw gsync::error(gsync::errc::mismatch, "job failed on purpose"); });
  auto queued = gsync::allreduce_async(comm, std::span<float>{v});
  ok.wait();
  CHECK(v[0] == static_cast<float>(comm.size()));
  CHECK(message_of([&] { bad.wait(); }) == "job failed on purpose");
  CHECK(kind_of([&] { bad.test(); }) == gsync::errc::mismatch);  // every later call too
  CHECK(kind_of([&] { queued.wait(); }) == gsync::errc::mismatch);
  const std::string m = message_of([&] { queued.wait(); });
  CHECK(m.find("communicator broken by an earlier failure") != std::string::npos);
  CHECK(m.find("job failed on purpose") != std::string::npos);
  CHECK(comm.broken());
  // Later async and synchronous calls fail the same way, without touching the wire.
  auto later = gsync::barrier_async(comm);
  CHECK(kind_of([&] { later.wait(); }) == gsync::errc::mismatch);
  CHECK(kind_of([&] { gsync::allreduce(comm, std::span<float>{v}); }) == gsync::errc::mismatch);
  CHECK(message_of([&] { gsync::barrier(comm); }).find("broken") != std::string::npos);
}

}  // namespace

TEST_CASE("async: an exception from a job surfaces at wait() and breaks the communicator") {
  for (int n : {1, 2, 3}) gsync_test::run_inproc(n, [](auto& c, world_sync& s) { throwing_job(c, s); }, test_config());
  gsync_test::run_tcp(2, [](auto& c, world_sync& s) { throwing_job(c, s); }, test_config());
  // Any exception type: the original comes back from wait(); later operations fail as aborted.
  gsync_test::run_inproc(2, [](auto& comm, world_sync&) {
    auto job = gsync::submit(comm, [](auto&) { throw std::runtime_error("user code failed"); });
    bool caught = false;
    try {
      job.wait();
    } catch (const std::runtime_error& e) {
      caught = std::string(e.what()) == "user code failed";
    }
    CHECK(caught);
    std::vector<int> v(3, 1);
    CHECK(kind_of([&] { gsync::allreduce_async(comm, std::span<int>{v}).wait(); }) == gsync::errc::aborted);
    CHECK(message_of([&] { gsync::allreduce(comm, std::span<int>{v}); }).find("user code failed") != std::string::npos);
  }, test_config());
}

namespace {

// A queued job that counts its lives: every object made (constructed, copied or moved) must be
// destroyed exactly once, and the job runs or is told it was skipped exactly once.
struct job_tally {
  std::atomic<int> made{0}, destroyed{0}, runs{0}, skips{0}, torn{0};
};
template <std::size_t Pad>
struct counted_job {
  job_tally* t;
  std::array<unsigned char, Pad> pad{};
  explicit counted_job(job_tally* tally) : t(tally) {
    ++t->made;
    pad.fill(0x5a);
  }
  counted_job(const counted_job& o) : t(o.t), pad(o.pad) { ++t->made; }
  counted_job(counted_job&& o) noexcept : t(o.t), pad(o.pad) { ++t->made; }
  counted_job& operator=(const counted_job&) = delete;
  ~counted_job() { ++t->destroyed; }
  template <class C>
  void operator()(C&) {
    for (unsigned char b : pad) t->torn += b != 0x5a;  // the callable arrived whole
    ++t->runs;
  }
  void skipped() noexcept { ++t->skips; }
};

// Job sizes below and above the queued operation's inline room (core/progress_engine.hpp). The
// counts are read once the communicator is gone: the engine drops its reference to a finished
// operation just after finishing it, so only its shutdown orders the last destruction.
template <std::size_t Pad>
void counted_jobs() {
  job_tally ran, dropped;
  for (auto& comm : gsync::make_inproc_world(1, test_config())) {
    counted_job<Pad> lvalue(&ran);
    auto a = comm.issue("counted", lvalue);                  // copied in
    auto b = comm.issue("counted", counted_job<Pad>(&ran));  // moved in
    a.wait();
    b.wait();
  }
  CHECK(ran.runs == 2);
  CHECK(ran.torn == 0);
  CHECK(ran.skips == 0);
  CHECK(ran.made == ran.destroyed);
  // Queued behind a job that fails: not run, told so, and still destroyed once.
  for (auto& comm : gsync::make_inproc_world(1, test_config())) {
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    auto failing = gsync::submit(comm, [gate](auto&) {
      gate.wait();
      throw gsync::error(gsync::errc::mismatch, "failed on purpose");
    });
    auto behind = comm.issue("counted", counted_job<Pad>(&dropped));
    release.set_value();
    CHECK(kind_of([&] { failing.wait(); }) == gsync::errc::mismatch);
    CHECK(kind_of([&] { behind.wait(); }) == gsync::errc::mismatch);
  }
  CHECK(dropped.runs == 0);
  CHECK(dropped.skips == 1);
  CHECK(dropped.made == dropped.destroyed);
}

}  // namespace

TEST_CASE("async: a queued job is run or skipped once and destroyed once, small or large") {
  counted_jobs<8>();
  counted_jobs<4000>();
}

namespace {

// Rank `absent` never issues the matching operation: the others' wait() ends with timeout (or,
// for ranks whose partner failed first, peer_lost) at about the short deadline, never a hang.
template <class Runner>
void absent_peer(Runner run, int n, int absent) {
  std::atomic<int> timeouts{0}, lost{0}, other{0};
  gsync::config cfg = test_config();
  run(n, [&](auto& comm, world_sync& sync) {
    comm.set_timeout(300ms);
    if (comm.rank() != absent) {
      std::vector<float> v(1000, 1.0f);
      auto req = gsync::allreduce_async(comm, std::span<float>{v});
      const auto k = kind_of([&] { req.wait(); });
      if (k == gsync::errc::timeout) timeouts++;
      else if (k == gsync::errc::peer_lost) lost++;
      else other++;
      CHECK(comm.broken());
    }
    sync.bar.arrive_and_wait();  // the absent rank stays alive until the others have failed
  }, cfg);
  CHECK(timeouts >= 1);
  CHECK(timeouts + lost == n - 1);
  CHECK(other == 0);
}

}  // namespace

TEST_CASE("async: a peer that never issues its matching op makes wait() time out, not hang") {
  absent_peer([](int n, auto f, gsync::config c) { gsync_test::run_inproc(n, f, c); }, 2, 1);
  absent_peer([](int n, auto f, gsync::config c) { gsync_test::run_inproc(n, f, c); }, 3, 0);
  absent_peer([](int n, auto f, gsync::config c) { gsync_test::run_tcp(n, f, c); }, 2, 0);
}

TEST_CASE("async: invalid arguments throw at issue and queue nothing") {
  gsync_test::run_inproc(3, [](auto& comm, world_sync&) {
    using gsync::errc;
    const int r = comm.rank();
    std::vector<float> a(30, 1.0f), b(30);
    if (r == 0) {  // only rank 0 makes these calls: had any of them been numbered, later ops would mismatch
      CHECK(kind_of([&] { (void)gsync::allreduce_async(comm, std::span<const float>{a}, std::span<float>{b}.first(29)); }) ==
            errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::reduce_scatter_async(comm, std::span<const float>{a}.first(10), std::span<float>{b}.first(4)); }) ==
            errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::allgather_async(comm, std::span<const float>{a}.first(10), std::span<float>{b}.first(29)); }) ==
            errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::broadcast_async(comm, std::span<float>{a}, 3); }) == errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::reduce_async(comm, std::span<const float>{a}, std::span<float>{b}.first(3), gsync::op::sum{}, 0); }) ==
            errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::alltoall_async(comm, std::span<const float>{a}.first(29), std::span<float>{b}.first(29)); }) ==
            errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::send_async(comm, std::span<const float>{a}, 0, 1); }) == errc::invalid_argument);
      CHECK(kind_of([&] { (void)gsync::recv_async(comm, std::span<float>{a}, 1, -1); }) == errc::invalid_argument);
      CHECK_FALSE(comm.broken());
    }
    auto req = gsync::allreduce_async(comm, std::span<float>{a});
    req.wait();
    CHECK(a[29] == 3.0f);
  }, test_config());
}

TEST_CASE("async: a communicator moved after async work stays usable, destroying one with requests outstanding is clean") {
  gsync_test::run_inproc(3, [](auto& comm, world_sync&) {
    using Comm = std::remove_reference_t<decltype(comm)>;
    const int n = comm.size();
    std::vector<float> v(1000, 1.0f), w(1000, 2.0f);
    auto r1 = gsync::allreduce_async(comm, std::span<float>{v});
    r1.wait();
    Comm moved = std::move(comm);  // engine idle: moves at once
    auto r2 = gsync::allreduce_async(moved, std::span<float>{w});
    Comm again = std::move(moved);  // pending work: the move waits for it
    CHECK(r2.test());
    gsync::allreduce(again, std::span<float>{v});
    CHECK(v[999] == static_cast<float>(n * n));
    CHECK(w[999] == static_cast<float>(2 * n));
    comm = std::move(again);  // move assignment back into the original object
    auto r3 = gsync::submit(comm, [&](auto& c) { gsync::barrier(c); });
    r3.wait();

    // Requests that outlive their communicator: finished ones stay readable; ones left queued are
    // run by the destructor before it returns.
    std::vector<float> x(500, 1.0f), y(500, 1.0f);
    gsync::request done, left;
    {
      Comm scoped = std::move(comm);
      done = gsync::allreduce_async(scoped, std::span<float>{x});
      done.wait();
      left = gsync::allreduce_async(scoped, std::span<float>{y});
    }
    CHECK(done.test());
    CHECK(left.test());
    CHECK(y[0] == static_cast<float>(n));
    CHECK(left.started_at() <= left.finished_at());
  }, test_config());
}

TEST_CASE("async: inside a job, wait() on a later request of the same communicator is refused, not a deadlock") {
  gsync_test::run_inproc(2, [](auto& comm, world_sync&) {
    std::vector<float> v(10, 1.0f);
    gsync::request later;
    std::atomic<bool> issued{false};
    gsync::errc seen{};
    auto job = gsync::submit(comm, [&](auto&) {
      while (!issued.load()) std::this_thread::yield();  // until `later` is queued behind this job
      seen = kind_of([&] { later.wait(); });
    });
    later = gsync::allreduce_async(comm, std::span<float>{v});
    issued = true;
    job.wait();
    later.wait();
    CHECK(seen == gsync::errc::invalid_argument);
    CHECK(v[0] == 2.0f);
  }, test_config());
}

TEST_CASE("async: on_finish runs once when the operation ends, with its outcome, and at once when it already has") {
  gsync_test::run_inproc(2, [](auto& comm, world_sync& s) {
    // A success: the callback runs after the result is in place, on the engine thread or here.
    std::vector<float> v(1000, 1.0f);
    std::atomic<int> calls{0};
    std::atomic<float> seen{0.0f};
    std::exception_ptr err = std::make_exception_ptr(1);
    auto r = gsync::allreduce_async(comm, std::span<float>{v});
    r.on_finish([&](std::exception_ptr e) {
      err = e;
      seen = v[999];
      ++calls;
    });
    r.wait();
    for (int i = 0; i < 1000 && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(calls.load() == 1);
    CHECK(err == nullptr);
    CHECK(seen.load() == 2.0f);
    // Registered after the end: runs at once, on this thread.
    const auto me = std::this_thread::get_id();
    std::thread::id where{};
    r.on_finish([&](std::exception_ptr) { where = std::this_thread::get_id(); });
    CHECK(where == me);
    s.bar.arrive_and_wait();
    // A failure: the callback gets the operation's exception.
    std::exception_ptr got;
    std::atomic<bool> done{false};
    auto job = gsync::submit(comm, [](auto&) { throw std::runtime_error("job failed"); });
    job.on_finish([&](std::exception_ptr e) {
      got = e;
      done = true;
    });
    CHECK_THROWS(job.wait());
    for (int i = 0; i < 1000 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(done.load());
    if (!done.load()) return;
    bool right = false;
    try {
      std::rethrow_exception(got);
    } catch (const std::runtime_error& e) {
      right = std::string(e.what()) == "job failed";
    }
    CHECK(right);
  }, test_config());
}
