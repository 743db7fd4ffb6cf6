// The allreduce sweep over TCP on loopback, each rank a thread joining through the store
// (support/allreduce_sweep.hpp says what it covers). A file of its own so that two compilers share
// the sweep's instantiations.

#include "support/allreduce_sweep.hpp"

#define GSYNC_SWEEP_TCP(N) \
  TEST_CASE("allreduce sweep tcp world " #N) { run_sweep<true>(N); }

GSYNC_SWEEP_TCP(1)
GSYNC_SWEEP_TCP(2)
GSYNC_SWEEP_TCP(3)
GSYNC_SWEEP_TCP(4)
GSYNC_SWEEP_TCP(5)
GSYNC_SWEEP_TCP(6)
GSYNC_SWEEP_TCP(7)
GSYNC_SWEEP_TCP(8)
