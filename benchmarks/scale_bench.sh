#!/usr/bin/env bash
# The scale benchmark: set-up time, sockets per rank and allreduce correctness at N = 8 .. 256 ranks
# on this machine, shared memory off (every pair over TCP), one gsync-scale-probe job per N.
#
#   bash benchmarks/scale_bench.sh [BUILD_DIR] [OUT_DIR]     (default: build, benchmarks/results/scale/raw)
#
# Needs `ulimit -n` room for N * (sockets per rank) descriptors in all (gsync raises each rank's soft
# limit towards the hard one). Writes OUT_DIR/scale_N.json and prints one line per N.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-benchmarks/results/scale/raw}
cmake --build "$build" --target gsync-scale-probe gsyncrun >/dev/null
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in ${GSYNC_SCALE_SIZES:-8 16 32 64 128 256}; do
  # The launch floor: the same binary started by the same launcher, each rank writing when it
  # reached main and exiting at once (no gsync set-up): how far apart N processes start here.
  rm -f "$tmp"/t.*
  "$build/tools/gsyncrun" -n "$n" --no-tag-output -- "$build/benchmarks/gsync-scale-probe" --launch-only "$tmp/t"
  floor=$(cat "$tmp"/t.* | sort -n | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.3f", b - a }')
  GSYNC_SHM_DISABLE=1 GSYNC_NET_PROBE=0 "$build/tools/gsyncrun" -n "$n" --timeout-s 600 --no-tag-output -- \
    "$build/benchmarks/gsync-scale-probe" --json "$out/scale_$n.json" --launch-floor "$floor"
done
