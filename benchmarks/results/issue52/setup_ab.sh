#!/usr/bin/env bash
# Set-up at 64, 128 and 256 ranks on this machine (one host, shared memory off: every pair over
# loopback TCP, GSYNC_NET_PROBE=0, as benchmarks/scale_bench.sh), this revision against the
# revision before issue 52 (497a85e), runs alternated so that the machine's drift hits both alike.
#
#   bash benchmarks/results/issue52/setup_ab.sh BASE_BUILD NEW_BUILD [RUNS]   (default RUNS 3)
#
# Each build needs gsyncrun and gsync-scale-probe (make gsyncrun gsync-scale-probe). Writes
# setup_raw/{base,new}_N_i.json beside this script and prints a table (medians).
# AB_SHM=1: shared memory on (every pair of the one host then connects at start-up, the liveness
# connection beside the rings), raw files in setup_raw_shm/.
set -euo pipefail
base=$1 new=$2 runs=${3:-3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$here/setup_raw
shm_off=1
if [ "${AB_SHM:-0}" = 1 ]; then out=$here/setup_raw_shm shm_off=0; fi
mkdir -p "$out"
for n in ${GSYNC_SCALE_SIZES:-64 128 256}; do
  for i in $(seq "$runs"); do
    for who in base new; do
      b=$base
      [ "$who" = new ] && b=$new
      GSYNC_SHM_DISABLE=$shm_off GSYNC_NET_PROBE=0 "$b/tools/gsyncrun" -n "$n" --timeout-s 600 --no-tag-output -- \
        "$b/benchmarks/gsync-scale-probe" --json "$out/${who}_${n}_$i.json" >/dev/null 2>&1 || echo "run failed: $who n=$n i=$i" >&2
    done
  done
done
python3 - "$out" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(os.listdir(d)):
    if not f.endswith('.json'): continue
    who, n, _ = f[:-5].split('_')
    j = json.load(open(os.path.join(d, f)))
    rows.setdefault((int(n), who), []).append(j)
print('| ranks | set-up s, 497a85e | set-up s, this | ratio | rank 0 CPU in set-up ms, 497a85e | this | sockets per rank after set-up, 497a85e | this | wrong elements |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
for n in sorted({k[0] for k in rows}):
    b, t = rows.get((n, 'base'), []), rows.get((n, 'new'), [])
    if not b or not t: continue
    med = lambda L, k: statistics.median(x[k] for x in L)
    sb, st = med(b, 'setup_s'), med(t, 'setup_s')
    print(f"| {n} | {sb:.3f} | {st:.3f} | {st / sb:.2f} | {med(b, 'rank0_cpu_setup_ms'):.0f} | {med(t, 'rank0_cpu_setup_ms'):.0f} | "
          f"{med(b, 'sockets_setup_mean'):.1f} | {med(t, 'sockets_setup_mean'):.1f} | {max(x['wrong'] for x in b + t)} |")
PY
