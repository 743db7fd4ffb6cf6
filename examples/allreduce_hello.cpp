// The README's example: average a "gradient" across ranks.
//   gsyncrun -n 4 -- ./allreduce_hello
#include <gsync/allreduce.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto comm = gsync::tcp_communicator::from_env();  // rank, size, rendezvous from the launcher
  std::vector<float> grad(1 << 20, static_cast<float>(comm.rank()));
  gsync::allreduce(comm, std::span<float>{grad}, gsync::op::avg{});  // in place, automatic algorithm
  std::printf("rank %d of %d: grad[0] = %g (expected %g)\n", comm.rank(), comm.size(), grad[0],
              (comm.size() - 1) / 2.0);
  return grad[0] == (comm.size() - 1) / 2.0f ? 0 : 1;
}
