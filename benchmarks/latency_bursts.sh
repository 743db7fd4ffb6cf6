#!/usr/bin/env bash
# latency_bursts.sh: gsync against Open MPI at small sizes on one host, timed in bursts (see
# latency_bursts.cpp), R interleaved runs of each; prints every run and, per series, the best and
# the median over runs of each run's fastest burst.
#
#   benchmarks/latency_bursts.sh [--build DIR] [--np N] [--sizes "8 64 256"] [--runs R] [--pingpong]
#
# gsync runs with its defaults (shared memory between the ranks), Open MPI with its defaults
# (vader shared memory), both under their launchers (gsyncrun, mpirun).
set -euo pipefail
build=./build np=2 sizes="8 64 256" runs=8 mode=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --pingpong) mode=(--pingpong); shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "latency_bursts.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for b in "$build/tools/gsyncrun" "$build/benchmarks/gsync-latency" "$build/benchmarks/ompi_latency"; do
  [ -x "$b" ] || { echo "latency_bursts.sh: $b is missing (cmake --build '$build' --target gsync-latency ompi_latency)" >&2; exit 1; }
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$runs"); do
  for s in $sizes; do
    "$build/tools/gsyncrun" -n "$np" -- "$build/benchmarks/gsync-latency" --bytes "$s" --bursts 100 --per 1000 "${mode[@]}" 2>/dev/null | sed 's/^\[0\] //' | tee -a "$out"
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$build/benchmarks/ompi_latency" --bytes "$s" --bursts 100 --per 1000 "${mode[@]}" | tee -a "$out"
  done
done
echo
echo "per series: best and median over $runs runs of the fastest burst (us)"
python3 - "$out" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) (\w+) (\d+) B np (\d+): min ([\d.]+)", line)
    if m:
        runs.setdefault((int(m[3]), m[2], m[1], m[4]), []).append(float(m[5]))
for (size, kind, lib, np_), v in sorted(runs.items()):
    print(f"{lib:6} {kind} {size:>6} B np {np_}: best {min(v):.3f} median {statistics.median(v):.3f} ({len(v)} runs)")
PY
