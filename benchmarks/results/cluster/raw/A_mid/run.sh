#!/usr/bin/env bash
# forced rd / hd / auto at 2K..64K on H hosts, R interleaved runs
set -u
cd /work/main
H=$1; R=${2:-3}
id=$(benchmarks/netcluster.sh up $H 1000 1)
trap 'benchmarks/netcluster.sh down $id >/dev/null 2>&1' EXIT
for r in $(seq 1 $R); do
  for a in recursive_doubling halving_doubling auto; do
    benchmarks/netcluster.sh run $id --timeout-s 300 -- build-bench/tools/gsync-perf -b 2K -e 64K -f 2 -a $a -n 300 -w 30 > /tmp/mid/h${H}_${a}_r$r.txt 2>&1
  done
done
