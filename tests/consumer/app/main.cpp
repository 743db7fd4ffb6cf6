// A program that uses an installed or vendored gsync as a user's would: one 2-rank (or N-rank)
// allreduce of doubles and of int32, each checked exactly. Exit 0 when both are right.
#include <gsync/allreduce.hpp>
#include <gsync/communicator.hpp>
#include <gsync/version.hpp>

#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

int main() {
  try {
    auto comm = gsync::tcp_communicator::from_env();
    const int n = comm.size(), r = comm.rank();
    std::vector<double> d(1001);
    std::vector<std::int32_t> k(77);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = r * 1000.0 + static_cast<double>(i);
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = r + static_cast<std::int32_t>(i);
    gsync::allreduce(comm, std::span<double>(d), gsync::op::sum{});
    gsync::allreduce(comm, std::span<std::int32_t>(k), gsync::op::max{});
    int bad = 0;
    for (std::size_t i = 0; i < d.size(); ++i) bad += d[i] != 1000.0 * n * (n - 1) / 2 + n * static_cast<double>(i);
    for (std::size_t i = 0; i < k.size(); ++i) bad += k[i] != n - 1 + static_cast<std::int32_t>(i);
    std::printf("rank %d of %d: gsync %s, %d wrong elements\n", r, n, GSYNC_VERSION_STRING, bad);
    return bad == 0 ? 0 : 1;
  } catch (const gsync::error& e) {
    std::printf("gsync error: %s\n", e.what());
    return 1;
  }
}
