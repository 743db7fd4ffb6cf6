#!/usr/bin/env bash
set -u
cd /work/main
H=$1; R=${2:-2}
id=$(benchmarks/netcluster.sh up $H 1000 1)
trap 'benchmarks/netcluster.sh down $id >/dev/null 2>&1' EXIT
for r in $(seq 1 $R); do
  for a in halving_doubling ring; do
    benchmarks/netcluster.sh run $id --timeout-s 300 -- build-bench/tools/gsync-perf -b 256K -e 8M -f 2 -a $a -n 20 -w 3 > /tmp/mid/c_h${H}_${a}_r$r.txt 2>&1
  done
done
