#!/usr/bin/env bash
# The cost of GSYNC_CHECKSUM=1 (a CRC32C over every payload, checked on receipt): gsync-perf's
# allreduce bus bandwidth with the checksum off and on, side by side in one run (the two
# alternate, size by size, so that drift of the machine hits both), over shared memory and over
# loopback TCP; and the CRC32C's own speed on one core (hardware instruction, three streams; the
# table-driven fallback), as the bound the checksum can cost at most per byte and side.
#
#   benchmarks/checksum_bench.sh BUILD_DIR [RANKS=2] [REPS=3] > table.md
#
# Prints a markdown table: size, transport, busbw off / on (GB/s, best of REPS), ratio on/off.
set -euo pipefail
build=${1:?usage: checksum_bench.sh BUILD_DIR [RANKS] [REPS]}
n=${2:-2}
reps=${3:-3}
perf=$build/tools/gsync-perf
run=$build/tools/gsyncrun
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The CRC32C alone: GB/s over a 64 MiB buffer (in memory) and over 256 KiB (in cache), per path.
cat >"$tmp/crc.cpp" <<'CPP'
#include <chrono>
#include <cstdio>
#include <vector>
#include <gsync/detail/crc32c.hpp>
int main() {
  for (std::size_t n : {std::size_t{256} << 10, std::size_t{64} << 20}) {
    std::vector<unsigned char> b(n, 3);
    for (int path = 0; path < 2; ++path) {
      double best = 1e9;
      std::uint32_t c = 0;
      for (int r = 0; r < 5; ++r) {
        const int iters = static_cast<int>((std::size_t{512} << 20) / n);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i)
          c ^= path == 0 ? gsync::detail::crc32c(c, b.data(), n) : ~gsync::detail::crc32c_impl::software(~c, b.data(), n);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
      }
      std::printf("| %s | %s | %.2f |\n", n < (1u << 20) ? "256 KiB (cache)" : "64 MiB (memory)",
                  path == 0 ? (gsync::detail::crc32c_hardware() ? "hardware, 3 streams" : "portable") : "table (slicing-by-8)", n / best / 1e9);
      if (c == 42) std::puts("");
    }
  }
}
CPP
g++ -std=c++20 -O2 -I"$here/include" "$tmp/crc.cpp" -o "$tmp/crc"
echo "CRC32C on one core (GB/s):"
echo
echo "| buffer | path | GB/s |"
echo "|---|---|---|"
"$tmp/crc"
echo
echo "allreduce float32 sum, $n ranks, busbw GB/s (best of $reps), checksum off / on:"
echo
echo "| size | transport | off | on | on/off |"
echo "|---|---|---|---|---|"
for tr in shm tcp; do
  for size in 64K 1M 16M 64M; do
    best_off=0 best_on=0
    for ((r = 0; r < reps; r++)); do
      for ck in 0 1; do
        env=(-x GSYNC_CHECKSUM=$ck)
        [ "$tr" = tcp ] && env+=(-x GSYNC_SHM_DISABLE=1)
        bw=$("$run" -n "$n" "${env[@]}" -- "$perf" -b "$size" -e "$size" -d float32 -o sum -n 20 -w 5 -c 0 2>/dev/null |
             awk '{ sub(/^\[[0-9]+\] /, "") } /^ *[0-9]/ && NF >= 9 { v = $(NF-1) } END { print v + 0 }')
        if [ "$ck" = 0 ]; then best_off=$(awk -v a="$best_off" -v b="$bw" 'BEGIN { print (b > a ? b : a) }')
        else best_on=$(awk -v a="$best_on" -v b="$bw" 'BEGIN { print (b > a ? b : a) }'); fi
      done
    done
    awk -v s="$size" -v t="$tr" -v a="$best_off" -v b="$best_on" 'BEGIN { printf "| %s | %s | %.2f | %.2f | %.2f |\n", s, t, a, b, (a > 0 ? b / a : 0) }'
  done
done
