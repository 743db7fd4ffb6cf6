#!/usr/bin/env bash
# Measures every allreduce algorithm with gsync-perf at N = 2, 3, 4, 8 ranks over loopback TCP and
# writes one JSON file per (algorithm, N, size range, repeat) under raw/. Used to fit the cost model
# constants of include/gsync/algo/select.hpp (see fit.py and README.md next to this script).
# usage: benchmarks/results/algorithms/run.sh BUILD_DIR [REPEATS [FIRST_REPEAT_NUMBER]]
set -euo pipefail
build=${1:?build dir}
reps=${2:-2}
first=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/raw"
for rep in $(seq "$first" $((first + reps - 1))); do
  for n in 2 3 4 8; do
    for a in ring recursive_doubling halving_doubling tree direct; do
      "$build/tools/gsyncrun" -n "$n" --no-tag-output -- "$build/tools/gsync-perf" -a "$a" -b 8 -e 512K -f 4 -n 40 -w 5 -c 0 \
        --json "$here/raw/${a}_np${n}_s_r${rep}.json" > "$here/raw/${a}_np${n}_s_r${rep}.log"
      "$build/tools/gsyncrun" -n "$n" --no-tag-output -- "$build/tools/gsync-perf" -a "$a" -b 1M -e 64M -f 4 -n 3 -w 1 -c 0 \
        --json "$here/raw/${a}_np${n}_l_r${rep}.json" > "$here/raw/${a}_np${n}_l_r${rep}.log"
    done
  done
done
