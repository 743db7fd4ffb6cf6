// Transport conformance: a transport defined here in tests/, outside include/ (the mailbox
// transport of support/mailbox_transport.hpp, written against the transport_policy concept alone),
// runs the allreduce sweep over worlds 1..8: every algorithm, the covering (dtype, operator) pairs,
// awkward counts, in and out of place, against the double-precision reference. The collectives
// sweep runs over it too ("collectives sweep mailbox world N", test_collectives_sweep.cpp). A new
// transport or link type (CUDA IPC, RDMA) passes the same suite: a world runner beside
// run_mailbox, and the sweeps' macros.

#include "support/allreduce_sweep.hpp"
#include "support/mailbox_transport.hpp"

namespace {

void run_mailbox_sweep(int n) {
  failures fails;
  auto body = [&](auto& comm, world_sync& sync) { sweep_all<true>(comm, sync, fails, "mailbox"); };
  run_mailbox(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
}

}  // namespace

#define GSYNC_SWEEP_MAILBOX(N) \
  TEST_CASE("conformance: allreduce sweep over a transport defined outside the library, world " #N) { run_mailbox_sweep(N); }

GSYNC_SWEEP_MAILBOX(1)
GSYNC_SWEEP_MAILBOX(2)
GSYNC_SWEEP_MAILBOX(3)
GSYNC_SWEEP_MAILBOX(4)
GSYNC_SWEEP_MAILBOX(5)
GSYNC_SWEEP_MAILBOX(6)
GSYNC_SWEEP_MAILBOX(7)
GSYNC_SWEEP_MAILBOX(8)

TEST_CASE("conformance: the mailbox transport reports a mismatched call and a timeout as gsync errors") {
  // The suite's transport must itself fail loudly, or the sweeps could not fail: two ranks that
  // disagree on the count, and a rank whose peer never sends.
  std::atomic<int> timeouts{0};
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::milliseconds(300);
  CHECK(mismatch_reports([](int n, auto body, const gsync::config& c) { run_mailbox(n, body, c); }, cfg) >= 1);
  run_mailbox(2, [&](auto& comm, world_sync&) {
    if (comm.rank() == 1) return;
    std::vector<float> v(4, 1.0f);
    if (kind_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); }) == gsync::errc::timeout) timeouts++;
  }, cfg);
  CHECK(timeouts == 1);
}
