#!/usr/bin/env bash
# The shaped-cluster comparison of issue 52's no-regression rule: gsync's default allreduce (float32
# sum, 8 B .. 64 MiB) on the 2 hosts x 4 ranks cluster of benchmarks/cluster_bench.sh (scenario B:
# 1 Gbit/s tbf links, shared memory inside a host, TCP across), this revision against the revision
# before issue 52 (497a85e), on one cluster, runs alternated so that drift hits both builds alike.
#
#   bash benchmarks/results/issue52/cluster_ab.sh BASE_BUILD NEW_BUILD [RUNS]   (default RUNS 3; as root)
#
# Each build needs tools/gsync-perf. Writes cluster_raw/{base,new}_<part>_<i>.json beside this
# script and prints a table: per size the median and the fastest time of each build's runs and their
# ratios (benchmarks/cluster_bench.sh keeps the fastest run: 8 ranks share 2 cores here).
set -euo pipefail
base=$1 new=$2 runs=${3:-3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
out=$here/cluster_raw
mkdir -p "$out"
cd "$repo"
id=$(benchmarks/netcluster.sh up 2 1000 4)
trap 'benchmarks/netcluster.sh down "$id" >/dev/null 2>&1 || true' EXIT
# part: first last iterations warm-up (as cluster_bench.sh's parts)
parts=("t 8 65535 500 50" "s 65536 1048575 50 5" "m 1048576 16777215 10 2" "l 16777216 67108864 3 1")
for i in $(seq "$runs"); do
  for p in "${parts[@]}"; do
    read -r tag lo hi n w <<< "$p"
    for who in base new; do
      b=$base
      [ "$who" = new ] && b=$new
      benchmarks/netcluster.sh run "$id" --timeout-s 900 --no-tag-output -- "$b/tools/gsync-perf" -d float32 -o sum \
        -b "$lo" -e "$hi" -f 2 -n "$n" -w "$w" -c 1 --json "$out/${who}_${tag}_$i.json" > /dev/null 2>&1 ||
        echo "run failed: $who $tag $i" >&2
    done
  done
done
python3 - "$out" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
t = {}
algo = {}
wrong = 0
for f in sorted(os.listdir(d)):
    if not f.endswith('.json'): continue
    who = f.split('_')[0]
    for r in json.load(open(os.path.join(d, f)))['rows']:
        t.setdefault((r['bytes'], who), []).append(r['time_us'])
        algo.setdefault((r['bytes'], who), set()).add(r['algo'])
        wrong += r['wrong']
def size(b):
    for u, s in ((1 << 20, 'MiB'), (1 << 10, 'KiB')):
        if b >= u: return f'{b // u} {s}'
    return f'{b} B'
print('| size | algo 497a85e | algo this | median us 497a85e | median us this | ratio (median) | fastest us 497a85e | fastest us this | ratio (fastest) |')
print('|---:|---|---|---:|---:|---:|---:|---:|---:|')
for b in sorted({k[0] for k in t}):
    if (b, 'base') not in t or (b, 'new') not in t: continue
    mb, mn = statistics.median(t[(b, 'base')]), statistics.median(t[(b, 'new')])
    fb, fn = min(t[(b, 'base')]), min(t[(b, 'new')])
    print(f"| {size(b)} | {'/'.join(sorted(algo[(b, 'base')]))} | {'/'.join(sorted(algo[(b, 'new')]))} | {mb:.1f} | {mn:.1f} | {mn / mb:.2f} | {fb:.1f} | {fn:.1f} | {fn / fb:.2f} |")
print(f'\nruns per build and size: {len(t[(8, "base")])}; wrong elements, all runs: {wrong}')
PY
