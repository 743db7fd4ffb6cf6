// Multi-process fault program: every rank goes to one named point of a gsync job and stays there,
// so that a script (tests/mp_kill_points.sh) can SIGKILL one rank at that point and check how the
// others fail.
//
//   mp_faults --mode MODE --victim K [--watchdog-s S] [--mib M] [--root R]
//
// Rank, world size and store address come from the environment, as for any gsync program
// (GSYNC_RANK, GSYNC_WORLD_SIZE, GSYNC_MASTER_PORT, or gsyncrun). Rank K is the one the script
// kills; the others are survivors. When a rank has reached its point it prints
// "READY <mode> rank R pid P" on stdout (flushed), then loops or blocks there. Modes:
//
//   setup    connection setup. The victim does what a rank does at the start of its own setup,
//            by hand, and stops there: it says hello to the store (serving the store itself when
//            it is rank 0), publishes the nonce (rank 0) and its set-up record naming a listening
//            socket it never accepts on. The survivors sit in the communicator's constructor: lower ranks
//            waiting for the victim to connect, higher ranks in the authentication handshake
//            with the victim's socket.
//   store    waiting in the store. The victim says hello to the store (serving it when it is rank
//            0) and never publishes its set-up record (or, as rank 0, the nonce): the survivors wait
//            in the store for a key only the victim could set, or for the victim to connect.
//   ring     mid-ring: a stream of in-place allreduces of M MiB of float32 (default 64; the
//            script forces the ring with GSYNC_ALGO=ring). Every rank, the victim included, loops.
//   barrier  a stream of barriers, every rank (the victim included) looping.
//   idle     idle in a barrier: after one common barrier the survivors enter another one that the
//            victim never calls (it sleeps).
//   bcast    a stream of broadcasts of M MiB (default 16) from root R (default 0).
//   allgather a stream of allgathers of M MiB (default 4) blocks.
//   p2p      point-to-point: the victim sends M MiB (default 1) to each survivor in turn, forever;
//            each survivor receives from the victim in a loop.
//   async    a stream of allreduce_async of M MiB (default 16), each waited for (survivors block
//            in request::wait while the progress engine runs the operation).
//   split    several communicators open at once: the world is split into rows of two ranks
//            (color rank / 2) and columns (color rank % 2); one thread per communicator loops
//            allreduces of M MiB (default 1) on the world, its row and its column. Each thread's
//            error is collected: the rank reports the first and exits with its kind only when
//            every thread failed with peer_lost naming the victim (else 45, with each thread's
//            error), so a thread whose communicator does not hold the victim must fail too
//            (the communicators share the dead peer's process-wide endpoint), naming it.
//   shrink   recovery, not a kill point (tests/mp_shrink.sh runs it under `gsyncrun --elastic`):
//            the victim SIGKILLs itself after one allreduce; the survivors catch peer_lost and
//            shrink (with --split, first their half of the world, colour rank % 2, then the
//            world); rank --shrink-victim J SIGKILLs itself at stage --stage (slot, joined, agreed)
//            of its first shrink. Each survivor then allreduces its old rank + 1 over every new
//            communicator, checks the sum and the size against the ranks still alive, prints
//            "SHRUNK rank R: world r of n in T ms, links: verbs V shm S tcp T" (the new world's
//            peers by the link that reaches them) and exits 0. --pause-ms M: every rank waits M ms
//            after READY before the victim dies.
//   resume   recovery from a stop (tests/mp_stop_resume.sh runs it under `gsyncrun --elastic` and
//            stops, then resumes, one rank): every rank loops allreduces of its first rank + 1,
//            each result checked. On peer_lost, aborted or timeout it shrinks, resumes from the
//            collectives every survivor completed (last_shrink().agreed_ops, checked alike on
//            every survivor), prints "SHRUNK rank R: world r of n, agreed A, mine M", and
//            --post-s S seconds later (a collective decision) prints "DONE rank R: ... steps"
//            and exits 0. Excluded by the shrink, it prints "EXCLUDED rank R: ..." and exits 75.
//
// A gsync::error that ends the mode (or the set-up) is noted on stdout as it leaves it, before the
// communicator is torn down: "CAUGHT rank R at NS" (NS: the wall clock in ns since the epoch, as
// `date +%s%N`), so that a script can time how soon the failure was raised apart from how long the
// teardown took. On a gsync::error a rank then prints "rank R: <kind> after T ms in <mode>:
// <message>" on stderr and exits with a code per kind: 42 peer_lost, 43 timeout, 44 mismatch, 45
// another gsync::error kind, 46 another exception. A rank still at its point --watchdog-s seconds
// (default 30) after READY prints "WATCHDOG" and exits 47, so that a hang fails the script instead
// of stalling it.

#include <unistd.h>

#include <asio.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <optional>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gsync/gsync.hpp>
#include <gsync/transport/mesh/shrink_state.hpp>
#include <csignal>

namespace {

using clock_type = std::chrono::steady_clock;

/// Command-line settings.
struct options {
  std::string mode;
  int victim = -1;
  int watchdog_s = 30;
  double mib = -1;  // per mode default when negative
  int root = 0;
  int shrink_victim = -1;         // mode shrink: the rank that dies in its shrink
  std::string stage = "agreed";   // and where
  bool split = false;             // mode shrink: shrink the halves too
  double post_s = 3;              // mode resume: seconds to go on after a shrink
  int pause_ms = 0;               // mode shrink: every rank waits this long after READY (a test's stranger fills the listeners)
};
options opts;                // for the shrink stage hook
std::atomic<int> my_rank{-1};  // this rank in the job, for the same

std::atomic<long long> ready_ns{0};  // steady-clock time of READY (0: not yet)

void say_ready(const options& o, int rank) {
  ready_ns = clock_type::now().time_since_epoch().count();
  std::printf("READY %s rank %d pid %ld\n", o.mode.c_str(), rank, static_cast<long>(::getpid()));
  std::fflush(stdout);
}

/// Exits 47 when this rank is still running `s` seconds after it said READY.
void start_watchdog(int s) {
  std::thread([s] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const long long r = ready_ns.load();
      if (r == 0) continue;
      if (clock_type::now().time_since_epoch().count() - r > std::chrono::nanoseconds(std::chrono::seconds(s)).count()) {
        std::fprintf(stderr, "WATCHDOG: still blocked %d s after READY\n", s);
        std::fflush(stderr);
        std::_Exit(47);
      }
    }
  }).detach();
}

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

std::size_t elements(const options& o, double default_mib, std::size_t elem_bytes) {
  const double mib = o.mib >= 0 ? o.mib : default_mib;
  return static_cast<std::size_t>(mib * 1024 * 1024) / elem_bytes;
}

/// The victim of modes setup and store: the first steps of a rank's setup, done by hand (the
/// communicator's constructor cannot be stopped half-way), then nothing. Never returns.
[[noreturn]] void partial_setup_victim(const options& o, const gsync::bootstrap::launch_info& li) {
  namespace bs = gsync::bootstrap;
  const bs::auth::job_key key = li.job_key ? bs::auth::job_key(*li.job_key) : bs::auth::job_key::from_env();
  const gsync::deadline dl = clock_type::now() + std::chrono::seconds(60);
  std::unique_ptr<bs::store_server> server;
  if (li.rank == 0) server = std::make_unique<bs::store_server>("127.0.0.1", li.master_port, gsync::logger(li.rank), key);
  bs::store_client store(li.master_addr, li.master_port, dl, key);
  store.hello(li.rank, dl);  // from here on the store knows this rank: its death is a loss
  asio::io_context io;
  gsync::detail::net::tcp_acceptor acc(io);
  if (o.mode == "setup") {
    if (li.rank == 0) store.set("gsync/nonce", "12345", dl);
    // A listening socket whose connections are never accepted: peers that connect complete the
    // TCP handshake in the kernel and then wait for the authentication reply forever.
    asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
    acc.open(ep.protocol());
    acc.bind(ep);
    acc.listen(64);
    const auto me = acc.local_endpoint();
    const bs::rank_record rec{me.address().to_string(), me.port(), bs::kernel_id(), bs::host_id(li.host_id)};
    store.set(bs::rank_record_key(li.rank), rec.encode(), dl);
  }
  say_ready(o, li.rank);
  sleep_forever();
}

/// Mode split (see the file comment). Throws the first thread's error when every thread failed
/// alike (peer_lost naming the victim), else a gsync::error (kind system, exit 45) listing them all.
void run_split(const options& o, gsync::tcp_communicator& world) {
  const int r = world.rank();
  auto row = world.split(r / 2, r);
  auto col = world.split(r % 2, r);
  gsync::tcp_communicator* comms[3] = {&world, &row, &col};
  const char* names[3] = {"world", "row", "column"};
  const std::size_t count = elements(o, 1, sizeof(float));
  // One common round on each communicator first, so that every rank is in the loops at READY.
  std::vector<std::vector<float>> bufs(3, std::vector<float>(count, static_cast<float>(r)));
  for (int i = 0; i < 3; ++i) gsync::allreduce(*comms[i], std::span<float>{bufs[i]}, gsync::op::max{});
  std::vector<std::optional<gsync::error>> errs(3);
  std::vector<std::string> other(3);
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      try {
        ++started;
        for (;;) gsync::allreduce(*comms[i], std::span<float>{bufs[i]}, gsync::op::max{});
      } catch (const gsync::error& e) {
        errs[i] = e;
      } catch (const std::exception& e) {
        other[i] = e.what();
      }
    });
  while (started.load() < 3) std::this_thread::yield();
  say_ready(o, r);
  for (auto& t : threads) t.join();
  const std::string victim = "rank " + std::to_string(o.victim);
  std::string all;
  bool alike = true;
  for (int i = 0; i < 3; ++i) {
    const std::string what = errs[i] ? errs[i]->what() : "non-gsync exception: " + other[i];
    all += std::string(all.empty() ? "" : "; ") + names[i] + ": " + what;
    std::size_t at = what.find(victim);
    const bool names_victim = at != std::string::npos && (at + victim.size() == what.size() || !std::isdigit(static_cast<unsigned char>(what[at + victim.size()])));
    alike = alike && errs[i] && errs[i]->kind() == gsync::errc::peer_lost && names_victim;
  }
  if (!alike) throw gsync::error(gsync::errc::system, "the communicators' threads did not all fail with peer_lost naming " + victim + ": " + all);
  throw *errs[0];
}

/// Mode shrink (see the file comment).
void run_shrink(const options& o, gsync::tcp_communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  std::optional<gsync::tcp_communicator> half;
  if (o.split) half.emplace(comm.split(r % 2, r));
  std::vector<float> v(1000, 1.0f);
  gsync::allreduce(comm, std::span<float>{v});
  if (half) gsync::allreduce(*half, std::span<float>{v});
  // The victim dies once every rank is through the above (else a survivor could lose it inside
  // the split, and have no half to shrink): the last rank here says so in the store.
  auto& store = comm.transport().store();
  const gsync::deadline sdl = clock_type::now() + std::chrono::seconds(30);
  if (store.add("mp_faults/through", 1, sdl) == n) store.set("mp_faults/all_through", "1", sdl);
  say_ready(o, r);
  std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
  if (r == o.victim) {
    store.wait({"mp_faults/all_through"}, sdl);
    ::raise(SIGKILL);
  }
  my_rank = r;
  try {
    for (;;) gsync::allreduce(comm, std::span<float>{v});
  } catch (const gsync::error& e) {
    if (e.kind() != gsync::errc::peer_lost) throw;
  }
  const auto t0 = clock_type::now();
  gsync::transport::testing::shrink_stage_hook = [](int rank_in_comm, const char* stage) {
    (void)rank_in_comm;
    if (my_rank.load() == opts.shrink_victim && opts.stage == stage) ::raise(SIGKILL);
  };
  const auto alive = [&](int x) { return x != o.victim && x != o.shrink_victim; };
  const auto check = [&](gsync::tcp_communicator& c, const std::vector<int>& old, const char* what) {
    std::vector<int> live;
    for (int x : old)
      if (alive(x)) live.push_back(x);
    const int want_rank = static_cast<int>(std::find(live.begin(), live.end(), r) - live.begin());
    if (c.size() != static_cast<int>(live.size()) || c.rank() != want_rank)
      throw gsync::error(gsync::errc::system, std::string(what) + ": rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) +
                                                  ", expected " + std::to_string(want_rank) + " of " + std::to_string(live.size()));
    double want = 0;
    for (int x : live) want += x + 1;
    std::vector<float> w(4099, static_cast<float>(r + 1));
    gsync::allreduce(c, std::span<float>{w});
    if (w.front() != want || w.back() != want)
      throw gsync::error(gsync::errc::system, std::string(what) + ": sum " + std::to_string(w.back()) + ", expected " + std::to_string(want));
  };
  std::vector<int> world_ranks, half_ranks;
  for (int x = 0; x < n; ++x) {
    world_ranks.push_back(x);
    if (x % 2 == r % 2) half_ranks.push_back(x);
  }
  std::optional<gsync::tcp_communicator> half2;
  if (half) half2.emplace(half->shrink());
  auto world2 = comm.shrink();
  const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  if (half2) check(*half2, half_ranks, "half");
  check(world2, world_ranks, "world");
  int by_verbs = 0, by_shm = 0, by_tcp = 0;
  for (int p = 0; p < world2.size(); ++p)
    if (p != world2.rank()) {
      const std::string_view l = world2.transport().link_name(p);
      (l == "verbs" ? by_verbs : l == "shm" ? by_shm : by_tcp) += 1;
    }
  std::printf("SHRUNK rank %d: world %d of %d in %.1f ms, links: verbs %d shm %d tcp %d\n", r, world2.rank(), world2.size(), ms,
              by_verbs, by_shm, by_tcp);
  std::fflush(stdout);
}

/// Mode resume (see the file comment).
void run_resume(const options& o, gsync::tcp_communicator& comm) {
  const int r0 = comm.rank();
  std::vector<int> first(static_cast<std::size_t>(comm.size()));  // members' first ranks, in the current order
  for (int x = 0; x < comm.size(); ++x) first[static_cast<std::size_t>(x)] = x;
  std::uint64_t step = 0;  // collectives completed: one per step
  std::optional<clock_type::time_point> shrunk_at;
  std::vector<float> v(4096);
  say_ready(o, r0);
  for (;;) {
    try {
      const bool stop = shrunk_at && clock_type::now() - *shrunk_at > std::chrono::duration<double>(o.post_s);
      std::fill(v.begin(), v.end(), static_cast<float>(r0 + 1));
      v.back() = stop ? 1.0f : 0.0f;
      gsync::allreduce(comm, std::span<float>{v});
      ++step;
      float want = 0;
      for (int x : first) want += static_cast<float>(x + 1);
      if (v.front() != want || v[v.size() - 2] != want)
        throw gsync::error(gsync::errc::system, "step " + std::to_string(step) + ": sum " + std::to_string(v.front()) + ", expected " + std::to_string(want));
      if (v.back() > 0) break;
    } catch (const gsync::error& e) {
      if (e.kind() != gsync::errc::peer_lost && e.kind() != gsync::errc::aborted && e.kind() != gsync::errc::timeout) throw;
      if (shrunk_at) throw;  // one recovery per run
      try {
        comm = comm.shrink();
      } catch (const gsync::error& x) {
        if (x.kind() != gsync::errc::excluded) throw;
        std::printf("EXCLUDED rank %d: %s\n", r0, x.what());
        std::fflush(stdout);
        std::exit(gsync::excluded_exit_status);
      }
      const auto& rep = comm.last_shrink();
      if (rep.my_ops != step || rep.agreed_ops > step || step - rep.agreed_ops > 1)
        throw gsync::error(gsync::errc::system, "last_shrink: agreed " + std::to_string(rep.agreed_ops) + ", mine " + std::to_string(rep.my_ops) +
                                                    ", steps here " + std::to_string(step));
      std::vector<int> next;
      for (int old : rep.old_ranks) next.push_back(first[static_cast<std::size_t>(old)]);
      first = next;
      step = rep.agreed_ops;  // redo what not every survivor completed
      std::uint64_t lo = step, hi = step;
      gsync::allreduce(comm, std::span<std::uint64_t>{&lo, 1}, gsync::op::min{});
      gsync::allreduce(comm, std::span<std::uint64_t>{&hi, 1}, gsync::op::max{});
      if (lo != hi) throw gsync::error(gsync::errc::system, "survivors resume from different steps " + std::to_string(lo) + " and " + std::to_string(hi));
      std::printf("SHRUNK rank %d: world %d of %d, agreed %llu, mine %llu\n", r0, comm.rank(), comm.size(),
                  static_cast<unsigned long long>(rep.agreed_ops), static_cast<unsigned long long>(rep.my_ops));
      std::fflush(stdout);
      shrunk_at = clock_type::now();
    }
  }
  std::printf("DONE rank %d: world %d of %d, %llu steps\n", r0, comm.rank(), comm.size(), static_cast<unsigned long long>(step));
  std::fflush(stdout);
}

void run_mode(const options& o, gsync::tcp_communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  const bool victim = r == o.victim;
  if (o.mode == "ring") {
    std::vector<float> v(elements(o, 64, sizeof(float)), static_cast<float>(r));
    gsync::allreduce(comm, std::span<float>{v}, gsync::op::max{});
    say_ready(o, r);
    for (;;) gsync::allreduce(comm, std::span<float>{v}, gsync::op::max{});
  } else if (o.mode == "barrier") {
    gsync::barrier(comm);
    say_ready(o, r);
    for (;;) gsync::barrier(comm);
  } else if (o.mode == "idle") {
    gsync::barrier(comm);
    say_ready(o, r);
    if (victim) sleep_forever();
    gsync::barrier(comm);
    throw std::runtime_error("a barrier without the victim returned");
  } else if (o.mode == "bcast") {
    std::vector<float> v(elements(o, 16, sizeof(float)), static_cast<float>(r));
    gsync::broadcast(comm, std::span<float>{v}, o.root);
    say_ready(o, r);
    for (;;) gsync::broadcast(comm, std::span<float>{v}, o.root);
  } else if (o.mode == "allgather") {
    const std::size_t c = elements(o, 4, sizeof(float));
    std::vector<float> in(c, static_cast<float>(r)), out(c * static_cast<std::size_t>(n));
    gsync::allgather(comm, std::span<const float>{in}, std::span<float>{out});
    say_ready(o, r);
    for (;;) gsync::allgather(comm, std::span<const float>{in}, std::span<float>{out});
  } else if (o.mode == "p2p") {
    std::vector<float> v(elements(o, 1, sizeof(float)), static_cast<float>(r));
    if (victim) {
      for (int p = 0; p < n; ++p)
        if (p != r) gsync::send(comm, std::span<const float>{v}, p, 7);
      say_ready(o, r);
      for (;;)
        for (int p = 0; p < n; ++p)
          if (p != r) gsync::send(comm, std::span<const float>{v}, p, 7);
    }
    gsync::recv(comm, std::span<float>{v}, o.victim, 7);
    say_ready(o, r);
    for (;;) gsync::recv(comm, std::span<float>{v}, o.victim, 7);
  } else if (o.mode == "async") {
    std::vector<float> v(elements(o, 16, sizeof(float)), static_cast<float>(r));
    gsync::allreduce_async(comm, std::span<float>{v}, gsync::op::max{}).wait();
    say_ready(o, r);
    for (;;) gsync::allreduce_async(comm, std::span<float>{v}, gsync::op::max{}).wait();
  } else if (o.mode == "split") {
    run_split(o, comm);
  } else if (o.mode == "shrink") {
    run_shrink(o, comm);
  } else if (o.mode == "resume") {
    run_resume(o, comm);
  } else {
    throw gsync::error(gsync::errc::invalid_argument, "unknown --mode '" + o.mode + "'");
  }
}

int exit_code(gsync::errc k) {
  switch (k) {
    case gsync::errc::peer_lost: return 42;
    case gsync::errc::timeout: return 43;
    case gsync::errc::mismatch: return 44;
    default: return 45;
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--mode" && has) o.mode = argv[++i];
    else if (a == "--victim" && has) o.victim = std::atoi(argv[++i]);
    else if (a == "--watchdog-s" && has) o.watchdog_s = std::atoi(argv[++i]);
    else if (a == "--mib" && has) o.mib = std::atof(argv[++i]);
    else if (a == "--root" && has) o.root = std::atoi(argv[++i]);
    else if (a == "--shrink-victim" && has) o.shrink_victim = std::atoi(argv[++i]);
    else if (a == "--stage" && has) o.stage = argv[++i];
    else if (a == "--split") o.split = true;
    else if (a == "--post-s" && has) o.post_s = std::atof(argv[++i]);
    else if (a == "--pause-ms" && has) o.pause_ms = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: mp_faults --mode setup|store|ring|barrier|idle|bcast|allgather|p2p|async|split|shrink|resume --victim K "
                           "[--watchdog-s S] [--mib M] [--root R] [--shrink-victim J] [--stage slot|joined|agreed] [--split] [--post-s S] [--pause-ms M]\n");
      return 2;
    }
  }
  if (o.mode.empty() || o.victim < 0) {
    std::fprintf(stderr, "mp_faults: --mode and --victim are required\n");
    return 2;
  }
  opts = o;
  start_watchdog(o.watchdog_s);
  int rank = -1;
  const auto t0 = clock_type::now();
  try {
    const auto li = gsync::bootstrap::launch_info::from_env();
    rank = li.rank;
    if (o.victim >= li.size) throw gsync::error(gsync::errc::invalid_argument, "--victim is not a rank of this job");
    const bool early = o.mode == "setup" || o.mode == "store";
    if (early && rank == o.victim) partial_setup_victim(o, li);
    if (early) say_ready(o, rank);  // about to block in the constructor
    const auto caught = [rank] {
      const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::printf("CAUGHT rank %d at %lld\n", rank, ns);
      std::fflush(stdout);
    };
    auto comm = [&] {
      try {
        return gsync::tcp_communicator::from_env();
      } catch (const gsync::error&) {
        caught();
        throw;
      }
    }();
    if (early) throw std::runtime_error("the communicator was constructed without the victim");
    try {
      run_mode(o, comm);
    } catch (const gsync::error&) {
      caught();  // before comm's destructor
      throw;
    }
  } catch (const gsync::error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
    std::fprintf(stderr, "rank %d: %s after %lld ms in %s: %s\n", rank, e.code().message().c_str(), static_cast<long long>(ms),
                 o.mode.c_str(), e.what());
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception in %s: %s\n", rank, o.mode.c_str(), e.what());
    return 46;
  }
  return 0;
}
