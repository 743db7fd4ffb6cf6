// Conan's test of the package: a 3-rank in-process world (threads) allreduces and checks the sum.
#include <gsync/gsync.hpp>

#include <cstdio>
#include <span>
#include <thread>
#include <vector>

int main() {
  auto world = gsync::make_inproc_world(3);
  std::vector<std::vector<float>> data(3, std::vector<float>(1000));
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] {
      for (std::size_t i = 0; i < data[r].size(); ++i) data[r][i] = static_cast<float>(r + i);
      gsync::allreduce(world[static_cast<std::size_t>(r)], std::span<float>(data[r]), gsync::op::sum{});
    });
  for (auto& t : ts) t.join();
  int bad = 0;
  for (int r = 0; r < 3; ++r)
    for (std::size_t i = 0; i < data[r].size(); ++i) bad += data[r][i] != static_cast<float>(3 + 3 * i);
  std::printf("gsync %s: %s\n", GSYNC_VERSION_STRING, bad == 0 ? "allreduce OK" : "allreduce WRONG");
  return bad == 0 ? 0 : 1;
}
