// Multi-process check of device collectives over CUDA IPC, on the host stand-in of the CUDA runtime
// (support/fake_cuda.hpp): its exportable "device memory" is POSIX shared memory, so ranks in other
// processes open each other's arenas by handle (cudaIpcOpenMemHandle's path), and the control pages,
// the stream memory operations, the watchdog and the teardown handshake run across processes as
// they would on one GPU machine. Joins from the environment (gsyncrun).
//
// Default: allreduce (one-shot and two-shot sizes, several dtypes and ops, in place and not),
// reduce_scatter, allgather, broadcast and reduce against the double-precision reference; checks
// that every peer's arena was opened through its handle and nothing went through host staging.
// Exit 0 on success, 1 on a wrong result.
// --no-open-rank R: rank R cannot open handles (as in another PID namespace): every rank must fall
// back to host staging and still get right results.
// --hosts H: the ranks claim H hosts (GSYNC_HOST_ID semantics, consecutive blocks): each host's
// ranks open each other's arenas, allreduce is hierarchical (host staging across hosts), the other
// collectives are staged.
// --die-rank R --die-after-ms M: rank R exits abruptly (_exit(3)) M ms into a loop of device
// allreduces; every other rank must raise gsync::error and exits 42 for peer_lost, 43 otherwise
// (tests/mp_rank_exit.sh asserts how and how fast).
// --survive (with --die-rank): each rank keeps 16 slow operations queued on its stream; once the
// death is reported, a survivor checks that no kernel or copy read the dead rank's memory after
// the failure was known (exit 44: it would have killed the CUDA context on a GPU), shrinks, and
// runs device allreduces over CUDA IPC on the survivors (exit 0 when right, 45 when wrong).
// tests/mp_ipc_survivors.sh runs it.
// --stop-rank R --die-after-ms M: rank R stops itself (SIGSTOP) M ms into the loop; every other
// rank must raise gsync::error peer_lost (exit 42) within GSYNC_LIVENESS_S, not the op timeout.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gsync/gsync.hpp>

#include "support/fake_cuda.hpp"
#include "support/reference.hpp"

namespace {

gsync_test::fake_cuda_scope* fk = nullptr;

template <class T, class Op>
int check_allreduce(gsync::tcp_communicator& comm, std::size_t count, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  gsync::cuda_stream s = fk->api.create_stream();
  if (in_place) gsync::allreduce(comm, gsync::device_span<T>{in.data(), count}, Op{}, s);
  else gsync::allreduce(comm, gsync::device_span<const T>{in.data(), count}, gsync::device_span<T>{out.data(), count}, Op{}, s);
  fk->api.synchronize(s);
  fk->api.destroy_stream(s);
  if (in_place) out = in;
  int wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += !gsync_test::check_element<T, Op>(out[i], n, i);
  if (wrong)
    std::fprintf(stderr, "rank %d: allreduce %s %s count %zu: %d wrong\n", r, std::string(gsync::name(gsync::dtype_of<T>)).c_str(),
                 std::string(Op::name).c_str(), count, wrong);
  return wrong;
}

int check_others(gsync::tcp_communicator& comm, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t N = static_cast<std::size_t>(n);
  std::vector<float> blocks(N * count), mine(count), gathered(N * count), data(count), red(count, -1.0f);
  for (std::size_t b = 0; b < N; ++b)
    for (std::size_t i = 0; i < count; ++i) blocks[b * count + i] = gsync_test::input<float, gsync::op::sum>(r, b * count + i);
  for (std::size_t i = 0; i < count; ++i) data[i] = r == n - 1 ? static_cast<float>(i) : 0.0f;
  std::vector<float> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<float, gsync::op::sum>(r, i);
  gsync::cuda_stream s = fk->api.create_stream();
  gsync::reduce_scatter(comm, gsync::device_span<const float>{blocks.data(), N * count}, gsync::device_span<float>{mine.data(), count},
                        gsync::op::sum{}, s);
  gsync::allgather(comm, gsync::device_span<const float>{mine.data(), count}, gsync::device_span<float>{gathered.data(), N * count}, s);
  gsync::broadcast(comm, gsync::device_span<float>{data.data(), count}, n - 1, s);
  gsync::reduce(comm, gsync::device_span<const float>{in.data(), count}, gsync::device_span<float>{red.data(), count}, gsync::op::sum{},
                0, s);
  std::vector<std::int32_t> sent(N * count), got(N * count);
  for (std::size_t p = 0; p < N; ++p)
    for (std::size_t i = 0; i < count; ++i) sent[p * count + i] = static_cast<std::int32_t>((r * 131 + static_cast<int>(p)) * 7 + static_cast<int>(i % 1000));
  gsync::alltoall(comm, gsync::device_span<const std::int32_t>{sent.data(), N * count}, gsync::device_span<std::int32_t>{got.data(), N * count}, s);
  fk->api.synchronize(s);
  fk->api.destroy_stream(s);
  int wrong = 0;
  for (std::size_t p = 0; p < N; ++p)
    for (std::size_t i = 0; i < count; ++i)
      wrong += got[p * count + i] != static_cast<std::int32_t>((static_cast<int>(p) * 131 + r) * 7 + static_cast<int>(i % 1000));
  for (std::size_t i = 0; i < count; ++i)
    wrong += !gsync_test::check_element<float, gsync::op::sum>(mine[i], n, static_cast<std::size_t>(r) * count + i);
  for (std::size_t i = 0; i < N * count; ++i) wrong += !gsync_test::check_element<float, gsync::op::sum>(gathered[i], n, i);
  for (std::size_t i = 0; i < count; ++i) wrong += data[i] != static_cast<float>(i);
  if (r == 0)
    for (std::size_t i = 0; i < count; ++i) wrong += !gsync_test::check_element<float, gsync::op::sum>(red[i], n, i);
  if (wrong) std::fprintf(stderr, "rank %d: reduce_scatter/allgather/broadcast/reduce/alltoall count %zu: %d wrong\n", r, count, wrong);
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  int stop_rank = -1;
  int die_rank = -1, die_after_ms = 0, no_open_rank = -1, hosts = 1;
  bool survive = false;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && !std::strcmp(argv[i], "--die-rank")) die_rank = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--die-after-ms")) die_after_ms = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--no-open-rank")) no_open_rank = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--hosts")) hosts = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--survive")) survive = true;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--stop-rank")) stop_rank = std::atoi(argv[++i]);
  }
  gsync_test::fake_cuda_scope scope(true);
  fk = &scope;
  int rank = -1;
  try {
    auto li = gsync::bootstrap::launch_info::from_env();
    const int per_host = std::max(1, li.size / std::max(1, hosts));
    if (hosts > 1) li.host_id = "mp-host-" + std::to_string(li.rank / per_host);
    auto comm = gsync::tcp_communicator::join(li, gsync::config::from_env());
    rank = comm.rank();
    if (rank == no_open_rank) scope.api.fail_ipc_open = true;
    const bool local_peers = per_host > 1;
    if (stop_rank >= 0) {
      die_rank = stop_rank;
      if (rank == stop_rank)
        std::thread([die_after_ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(die_after_ms));
          ::kill(::getpid(), SIGSTOP);
        }).detach();
      die_after_ms = 1 << 30;  // not _exit below
    }
    if (die_rank >= 0) {
      std::vector<float> v(std::size_t{1} << 20, 1.0f);
      gsync::cuda_stream s = scope.api.create_stream();
      gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
      scope.api.synchronize(s);
      if (rank == die_rank)
        std::thread([die_after_ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(die_after_ms));
          _exit(3);
        }).detach();
      if (stop_rank >= 0) {
        // A stopped peer never closes its mappings of this rank's arena: the communicator's
        // teardown would wait 30 s for it before leaking the arena. The test times the detection.
        try {
          for (;;) gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s).wait();
        } catch (const gsync::error& e) {
          std::fprintf(stderr, "rank %d: caught gsync::error (%s): %s\n", rank, e.code().message().c_str(), e.what());
          std::fflush(stderr);
          _exit(e.kind() == gsync::errc::peer_lost ? 42 : 43);
        }
      }
      if (!survive)
        for (;;) gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s).wait();
      gsync_test::slow_stream_us = 10000;  // each kernel and copy this thread queues takes 10 ms
      try {
        for (;;) {
          std::vector<gsync::request> q;
          for (int k = 0; k < 16; ++k) q.push_back(gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s));
          for (auto& r : q) r.wait();
        }
      } catch (const gsync::error& e) {
        std::fprintf(stderr, "rank %d: caught (%s): %s\n", rank, e.code().message().c_str(), e.what());
      }
      gsync_test::slow_stream_us = 0;
      scope.api.synchronize(s);  // the stream was let go past its waits: it drains
      if (scope.api.poisoned) {
        std::fprintf(stderr, "rank %d: a kernel read the dead rank's memory after the failure was known (%ld reads)\n", rank,
                     scope.api.dead_reads.load());
        return 44;
      }
      auto small = comm.shrink();
      const int n = small.size();
      int wrong = 0;
      for (std::size_t count : {std::size_t{1000}, std::size_t{300001}}) {
        std::vector<float> w(count);
        for (std::size_t i = 0; i < count; ++i) w[i] = static_cast<float>((small.rank() + 1) * (i % 7));
        gsync::allreduce(small, gsync::device_span<float>{w.data(), count}, gsync::op::sum{}, s);
        scope.api.synchronize(s);
        for (std::size_t i = 0; i < count; ++i) wrong += w[i] != static_cast<float>(n * (n + 1) / 2 * (i % 7));
      }
      const long skipped = scope.ipc.skipped.load();
      std::printf("rank %d: survived as rank %d/%d: %s (%ld kernels skipped after the failure, %ld dead reads within the grace)\n", rank,
                  small.rank(), n, wrong ? "WRONG results" : "device allreduce correct", skipped, scope.api.dead_reads.load());
      return wrong ? 45 : 0;
    }
    int wrong = 0;
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{200003}}) {
      wrong += check_allreduce<float, gsync::op::sum>(comm, count, false);
      wrong += check_allreduce<gsync::bfloat16, gsync::op::avg>(comm, count, true);
      wrong += check_allreduce<std::int32_t, gsync::op::max>(comm, count, false);
      wrong += check_allreduce<double, gsync::op::prod>(comm, count, true);
      wrong += check_others(comm, count);
    }
    const long opens = scope.api.ipc_opens.load(), staged = scope.api.d2h_bytes.load();
    if (no_open_rank >= 0) {
      if (staged == 0) {
        std::fprintf(stderr, "rank %d: expected host staging after a failed open, but nothing was staged\n", rank);
        ++wrong;
      }
    } else if (local_peers && (opens != per_host - 1 || (hosts > 1) != (staged != 0))) {
      std::fprintf(stderr, "rank %d: expected %d handle opens and %s staging, got %ld opens and %ld staged bytes\n", rank,
                   per_host - 1, hosts > 1 ? "some (across hosts)" : "no", opens, staged);
      ++wrong;
    }
    if (hosts > 1) {
      auto st = std::static_pointer_cast<gsync::detail::ipc_state>(comm.ipc_state_slot());
      if (!st || !st->across_hosts) {
        std::fprintf(stderr, "rank %d: expected the hierarchical device allreduce (%s)\n", rank, st ? st->refusal.c_str() : "no set-up");
        ++wrong;
      }
    }
    std::printf("rank %d/%d: %s (%ld handles opened, %ld bytes staged)\n", comm.rank(), comm.size(),
                wrong ? "FAILED" : "all results correct", opens, staged);
    return wrong ? 1 : 0;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "rank %d: caught gsync::error (%s): %s\n", rank, e.code().message().c_str(), e.what());
    return e.kind() == gsync::errc::peer_lost ? 42 : 43;
  }
}
