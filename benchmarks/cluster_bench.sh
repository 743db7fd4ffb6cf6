#!/usr/bin/env bash
# cluster_bench.sh: gsync vs Gloo vs Open MPI allreduce on a shaped virtual cluster (netcluster.sh),
# side-by-side tables, raw JSON and PNG plots.
#
#   benchmarks/cluster_bench.sh [--scenario A|B|all] [--rate 1000] [--max 64M] [--build DIR] ...
#   benchmarks/cluster_bench.sh --quick           # smoke test: tiny sizes, a few seconds per run
#
# Scenarios (float32 sum, sizes 8 B .. --max):
#   A  4 hosts x 1 rank and 8 hosts x 1 rank (--hosts-a): gsync default (no flags) vs Gloo
#      (ring_chunked, halving_doubling) vs Open MPI (default; coll_tuned allreduce algorithm 4 = ring
#      and 6 = rabenseifner). Bound: the link rate measured with iperf3 on the same links.
#   B  2 hosts x 4 ranks: gsync default vs gsync -a ring (flat ring) vs gsync hierarchical (-a
#      hierarchical, else GSYNC_ALGO=hierarchical, else skipped), Gloo ring_chunked, Open MPI default.
# Each scenario gets its own cluster (netcluster.sh up H RATE L), measured with `netcluster.sh iperf`,
# every benchmark run on it, then the cluster is removed (also on errors and Ctrl-C: EXIT trap).
#
# gsync and Gloo ranks are started with `netcluster.sh run`. Open MPI: mpirun runs in the root
# network namespace and starts every rank through benchmarks/netns_rank.py, which runs it in its fake
# host's namespace (`ip netns exec`) and relays PMIx's loopback TCP connection to mpirun; data over
# `--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 198.18.<id>.0/24` (the cluster subnet).
# Shared memory (vader) is excluded on purpose: Open MPI sees all ranks on one node and would
# otherwise bypass the shaped links.
#
# Output (OUT = --out, default benchmarks/results/cluster):
#   OUT/<scenario>.md        report: command, date, nproc, load, iperf bound, the table, verdicts
#   OUT/<scenario>.png       busbw vs size, one line per implementation (gnuplot or matplotlib; skipped
#                            with a message when neither is installed)
#   OUT/raw/<scenario>/      JSON (<series>_np<N>_<part>_r<rep>.json), logs, commands.txt, iperf.txt,
#                            meta.txt, traffic.txt (bytes sent on the veths per run), failures.txt
# Scenario names: A_4x1, A_8x1, B_2x4 (hosts x ranks per host).
#
# Exit status: 0 all runs succeeded and every check passed; 1 a run failed, a check found wrong
# elements, or the report could not be made (the other runs still happen; see failures.txt);
# 2 usage errors; 77 netcluster.sh cannot run here (not root, no namespaces/tbf).

# shellcheck disable=SC2015  # `test && test || die` is meant: die unless both hold
set -euo pipefail

prog=cluster_bench.sh
die() {
  echo "$prog: error: $*" >&2
  exit 1
}
note() { echo "$prog: $*" >&2; }
usage() {
  cat <<EOF
usage: benchmarks/cluster_bench.sh [options]     (as root, from the repository root)
  --scenario S        A, B or all (default all). A = 4x1 and 8x1 hosts x ranks, B = 2x4
  --hosts-a "LIST"    host counts of scenario A (default "4 8")
  --rate MBIT         link rate in Mbit/s, tc tbf (default 1000)
  --max SIZE          largest message, K/M/G suffixes (default 64M)
  --factor F          size step factor, 2 or 4 (default 2)
  --iters N           timed iterations for sizes 1 MiB .. 8 MiB (default 10)
  --tiny-iters N      timed iterations below 64 KiB (default 500: a call takes 0.1-1 ms on the fake
                      hosts, and their timings swing +-30% run to run with fewer calls)
  --small-iters N     timed iterations from 64 KiB to below 1 MiB (default 50)
  --large-iters N     timed iterations from 16 MiB (default 3; at 1 Gbit/s 64 MiB over 8 ranks is ~1 s each)
  --repeat R          run every benchmark R times (interleaved); the fastest run per size is kept (default 1)
  --tiny-repeat R     run the sizes below 64 KiB R times (default 5, at least --repeat): their runs take
                      seconds, and on ranks that share cores one run's mean moves +-25% with where the
                      scheduler puts the ranks (medians of 102-134 us for one 8-host 8 B allreduce)
  --build DIR         build directory with tools/gsync-perf, benchmarks/ompi_allreduce and
                      benchmarks/gloo_allreduce (default ./build)
  --out DIR           output directory (default benchmarks/results/cluster)
  --iperf-seconds S   iperf3 duration per measurement (default 3)
  --timeout S         time limit per benchmark run (default 900)
  --no-ompi           leave Open MPI out          --no-gloo    leave Gloo out
  --no-plot           no PNG plots
  --quick             smoke test: sizes 8 B .. 256 KiB (factor 4), 3 iterations, 1 s iperf
  -h, --help          this text
Needs root, iproute2 (ip, tc), python3; iperf3 for the bound (else the nominal rate x 0.956, the TCP
payload ceiling at MTU 1500, is used and the report says so); mpirun for Open MPI; gnuplot-nox or
python3-matplotlib for the plots.
EOF
}

# Words joined into a shell command line, quoting only those that need it.
quote_words() {
  local w line=""
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then
      line+=" $w"
    else
      line+=" '${w//\'/\'\\\'\'}'"
    fi
  done
  echo "${line# }"
}
cmdline=$(quote_words benchmarks/cluster_bench.sh "$@")

scenario=all
hosts_a="4 8"
rate=1000
max='' factor='' iters='' tiny_iters='' small_iters='' large_iters='' iperf_secs='' # defaults depend on --quick
repeat=1
tiny_repeat=''
build=./build
out=benchmarks/results/cluster
limit=900
use_ompi=1
use_gloo=1
use_plot=1
quick=0

need_value() {
  [[ $# -ge 2 ]] || {
    echo "$prog: $1 needs a value" >&2
    exit 2
  }
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --scenario) need_value "$@"; scenario=$2; shift 2 ;;
    --hosts-a) need_value "$@"; hosts_a=$2; shift 2 ;;
    --rate) need_value "$@"; rate=$2; shift 2 ;;
    --max) need_value "$@"; max=$2; shift 2 ;;
    --factor) need_value "$@"; factor=$2; shift 2 ;;
    --iters) need_value "$@"; iters=$2; shift 2 ;;
    --small-iters) need_value "$@"; small_iters=$2; shift 2 ;;
    --tiny-iters) need_value "$@"; tiny_iters=$2; shift 2 ;;
    --large-iters) need_value "$@"; large_iters=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    --tiny-repeat) need_value "$@"; tiny_repeat=$2; shift 2 ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --iperf-seconds) need_value "$@"; iperf_secs=$2; shift 2 ;;
    --timeout) need_value "$@"; limit=$2; shift 2 ;;
    --no-ompi) use_ompi=0; shift ;;
    --no-gloo) use_gloo=0; shift ;;
    --no-plot) use_plot=0; shift ;;
    --quick) quick=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

usage_die() {
  echo "$prog: $*" >&2
  exit 2
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
# Bytes of a size such as 8, 64K, 1M, 2G (1024-based).
to_bytes() {
  local s=$1 n mult=1
  [[ $s =~ ^([0-9]+)([KkMmGg]?)$ ]] || return 1
  n=${BASH_REMATCH[1]}
  case "${BASH_REMATCH[2]}" in
    K | k) mult=1024 ;;
    M | m) mult=$((1024 * 1024)) ;;
    G | g) mult=$((1024 * 1024 * 1024)) ;;
  esac
  echo $((n * mult))
}

# Defaults for what the command line left unset (--quick: tiny sizes, few iterations).
if ((quick)); then
  : "${max:=256K}" "${factor:=4}" "${iters:=3}" "${tiny_iters:=3}" "${small_iters:=3}" "${large_iters:=2}" "${iperf_secs:=1}"
  : "${tiny_repeat:=1}"
else
  : "${max:=64M}" "${factor:=2}" "${iters:=10}" "${tiny_iters:=500}" "${small_iters:=50}" "${large_iters:=3}" "${iperf_secs:=3}"
  : "${tiny_repeat:=5}"
fi

case $scenario in
  A | a) scenario=A ;;
  B | b) scenario=B ;;
  all | ALL) scenario=all ;;
  *) usage_die "--scenario must be A, B or all (got '$scenario')" ;;
esac
is_uint "$rate" && ((rate >= 1 && rate <= 100000)) || usage_die "--rate '$rate' must be 1..100000 (Mbit/s)"
max_bytes=$(to_bytes "$max") || usage_die "--max '$max' is not a size such as 1M or 64M"
((max_bytes >= 8)) || usage_die "--max must be at least 8"
[[ $factor == 2 || $factor == 4 ]] || usage_die "--factor must be 2 or 4"
for v in iters tiny_iters small_iters large_iters repeat tiny_repeat iperf_secs limit; do
  is_uint "${!v}" && ((${!v} >= 1)) || usage_die "--${v//_/-} '${!v}' must be a positive integer"
done
((tiny_repeat >= repeat)) || tiny_repeat=$repeat
reps=$tiny_repeat
for h in $hosts_a; do
  [[ $h =~ ^[0-9]+$ ]] && ((h >= 2 && h <= 250)) || usage_die "--hosts-a entry '$h' must be 2..250"
done

[[ -f CMakeLists.txt && -d include/gsync && -f benchmarks/netcluster.sh ]] ||
  die "run this script from the gsync repository root (no include/gsync or benchmarks/netcluster.sh in $(pwd))"
netcluster=benchmarks/netcluster.sh
command -v python3 >/dev/null || die "python3 not found"
command -v timeout >/dev/null || die "timeout (coreutils) not found"
[[ $(id -u) == 0 ]] || { note "SKIP: must run as root (netcluster.sh needs network namespaces and tc)"; exit 77; }

perf=$build/tools/gsync-perf
ompi=$build/benchmarks/ompi_allreduce
gloo=$build/benchmarks/gloo_allreduce
[[ -x $perf ]] || die "missing $perf; build it with: cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release && cmake --build $build --target gsync-perf gsyncrun ompi_allreduce gloo_allreduce"
if ((use_gloo)) && [[ ! -x $gloo ]]; then
  note "warning: $gloo missing (libgloo-dev not installed, or target gloo_allreduce not built): Gloo is left out"
  use_gloo=0
fi
mpirun=''
if ((use_ompi)); then
  if ! mpirun=$(command -v mpirun); then
    note "warning: mpirun not found (openmpi-bin): Open MPI is left out"
    use_ompi=0
  elif [[ ! -x $ompi ]]; then
    note "warning: $ompi missing (target ompi_allreduce; benchmarks/ is configured only when CMake finds MPI): Open MPI is left out"
    use_ompi=0
  fi
fi
have_iperf=1
command -v iperf3 >/dev/null || { have_iperf=0; note "warning: iperf3 not installed (apt-get install iperf3): the bound will be the nominal rate x 0.956"; }

# Size parts: below 64 KiB, 64 KiB .. < 1 MiB, 1 MiB .. 8 MiB, from 16 MiB; each with its iteration and warmup count.
# part = tag:lo:hi:iters:warmup
MiB=$((1024 * 1024))
parts=()
add_part() { # tag lo hi iters warmup (clipped to max_bytes; empty ranges dropped)
  local hi=$3
  ((hi > max_bytes)) && hi=$max_bytes
  ((hi >= $2)) && parts+=("$1:$2:$hi:$4:$5")
  return 0
}
add_part t 8 $((64 * 1024 - 1)) "$tiny_iters" $((quick ? 1 : tiny_iters / 10))
add_part s $((64 * 1024)) $((MiB - 1)) "$small_iters" $((quick ? 1 : 5))
add_part m "$MiB" $((16 * MiB - 1)) "$iters" $((quick ? 1 : 2))
add_part l $((16 * MiB)) "$max_bytes" "$large_iters" 1

# Scenarios: name:hosts:ranks_per_host:kind
scenarios=()
if [[ $scenario == A || $scenario == all ]]; then
  for h in $hosts_a; do scenarios+=("A_${h}x1:$h:1:A"); done
fi
if [[ $scenario == B || $scenario == all ]]; then scenarios+=("B_2x4:2:4:B"); fi

# "gsync default" means no algorithm forced: a GSYNC_ALGO from the caller's environment would change it.
if [[ -n ${GSYNC_ALGO:-} ]]; then
  note "note: ignoring GSYNC_ALGO=$GSYNC_ALGO from the environment (the series choose their algorithm themselves)"
  unset GSYNC_ALGO
fi
gsync_env=$(env | grep -E '^GSYNC_' | sort | tr '\n' ' ' || true)
[[ -n $gsync_env ]] && note "note: passing on from the environment: $gsync_env"

mkdir -p "$out/raw" || die "cannot create $out/raw"
git_rev=unknown
if git rev-parse --short HEAD >/dev/null 2>&1; then
  git_rev=$(git rev-parse --short HEAD)
  [[ -z $(git status --porcelain -- include tools 2>/dev/null) ]] || git_rev+=" (include/ or tools/ modified)"
fi
mpi_version=''
[[ -n $mpirun ]] && mpi_version=$("$mpirun" --version 2>/dev/null | head -n 1)
gloo_version=$(dpkg-query -W -f '${Version}' libgloo-dev 2>/dev/null || echo unknown)

# The cluster of the scenario being run; removed by the EXIT trap whatever happens.
cluster_id=''
teardown() {
  if [[ -n $cluster_id ]]; then
    "$netcluster" down "$cluster_id" >/dev/null 2>&1 || note "warning: '$netcluster down $cluster_id' failed; check 'ip netns list'"
    cluster_id=''
  fi
}
# The benchmark (or iperf) command running now: `timeout` makes itself a process group leader, so a
# Ctrl-C on the terminal does not reach it; the script runs it in the background, waits (a trapped
# signal interrupts `wait`), and on exit stops it (timeout passes SIGTERM on to the command; mpirun and
# netcluster.sh run then stop their ranks), then removes the cluster.
child=''
# shellcheck disable=SC2317  # called from the EXIT trap
stop_child() {
  [[ -n $child ]] || return 0
  kill -TERM "$child" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$child" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$child" 2>/dev/null || true
  wait "$child" 2>/dev/null || true
  child=''
}
# run_limited SECONDS OUTFILE CMD...: CMD with a time limit, output to OUTFILE; returns its status.
run_limited() {
  local lim=$1 outf=$2 rc=0
  shift 2
  timeout --kill-after=30 "$lim" "$@" >"$outf" 2>&1 &
  child=$!
  wait "$child" || rc=$?
  child=''
  return "$rc"
}
# shellcheck disable=SC2317  # the EXIT trap
on_exit() {
  local rc=$?
  stop_child
  teardown
  exit "$rc"
}
trap on_exit EXIT
trap 'note "interrupted"; exit 130' INT TERM HUP

failed=0

# Sum of the bytes sent on all host veths of the current cluster (host side: what the hosts sent).
veth_tx_total() {
  local k sum=0 b
  for ((k = 0; k < hosts; k++)); do
    b=$(ip netns exec "gsnc$cluster_id-h$k" cat "/sys/class/net/gsnc${cluster_id}h$k/statistics/tx_bytes" 2>/dev/null || echo 0)
    sum=$((sum + b))
  done
  echo "$sum"
}

# Allreduce payload bytes one part makes (each size: iters + warmup + 1 check), for traffic.txt.
part_payload() { # lo hi iters warmup
  python3 - "$@" "$factor" <<'EOF'
import sys
lo, hi, it, w, f = (int(x) for x in sys.argv[1:6])
s, tot = lo, 0
while s <= hi:
    tot += (s // 4 * 4) * (it + w + 1)
    s *= f
print(tot)
EOF
}

# run_bench SERIES PART_SUFFIX PAYLOAD CMD...: one benchmark, logged; failures are recorded, not fatal.
run_bench() {
  local series=$1 suffix=$2 payload=$3
  shift 3
  local name="${series}_np${world}_${suffix}"
  local log=$raw/$name.log
  quote_words "$@" >>"$raw/commands.txt"
  echo "==> $scen: $name"
  local before after rc=0
  before=$(veth_tx_total)
  run_limited $((limit + 10)) "$log" "$@" || rc=$?
  after=$(veth_tx_total)
  echo "$series $suffix $((after - before)) $payload" >>"$raw/traffic.txt"
  grep -v -E '^\s*(\[[0-9]+\] )?#' "$log" | grep -E '^\s*(\[[0-9]+\] )?[0-9]' | sed 's/^/    /' || true
  if ((rc != 0)); then
    failed=1
    rm -f "$raw/$name.json"
    local why="exit status $rc"
    ((rc == 124 || rc == 137)) && why="timed out after ${limit}s"
    ((rc == 1)) && grep -q -i wrong "$log" && why="wrong results (exit status 1)"
    echo "$name: $why (log: $log)" >>"$raw/failures.txt"
    note "FAILED: $name: $why; last lines of $log:"
    tail -n 15 "$log" | sed 's/^/    /' >&2
  fi
  return 0
}

# Whether gsync accepts the hierarchical algorithm: sets hier_mode to flag, env or none.
probe_hierarchical() {
  local log=$raw/probe_hierarchical.log
  hier_mode='none'
  if run_limited 120 "$log.1" "$netcluster" run "$cluster_id" --timeout-s 60 --no-tag-output -- \
    "$perf" -a hierarchical -b 1K -e 1K -n 1 -w 0 -c 1; then
    hier_mode='flag'
  elif run_limited 120 "$log.2" "$netcluster" run "$cluster_id" --timeout-s 60 --no-tag-output -- \
    env GSYNC_ALGO=hierarchical "$perf" -b 1K -e 1K -n 1 -w 0 -c 1; then
    hier_mode='env'
  fi
  { echo "--- gsync-perf -a hierarchical:"; cat "$log.1"; [[ -f $log.2 ]] && { echo "--- GSYNC_ALGO=hierarchical gsync-perf:"; cat "$log.2"; }; } >"$log" 2>/dev/null
  rm -f "$log.1" "$log.2"
  return 0
}

for sc in "${scenarios[@]}"; do
  IFS=: read -r scen hosts ranks kind <<<"$sc"
  world=$((hosts * ranks))
  raw=$out/raw/$scen
  mkdir -p "$raw" || die "cannot create $raw"
  rm -f "$raw"/*.json "$raw"/*.log "$raw"/commands.txt "$raw"/traffic.txt "$raw"/failures.txt "$raw"/iperf.txt "$raw"/meta.txt
  echo
  echo "=== scenario $scen: $hosts host(s) x $ranks rank(s), $rate Mbit/s"
  load_before=$(uptime)
  date_start=$(date -u '+%Y-%m-%d %H:%M:%S UTC')

  rc=0
  cluster_id=$("$netcluster" up "$hosts" "$rate" "$ranks") || rc=$?
  if ((rc == 77)); then
    cluster_id=''
    note "SKIP: netcluster.sh cannot build a cluster here (see the message above)"
    exit 77
  fi
  ((rc == 0)) && [[ $cluster_id =~ ^[0-9]+$ ]] || { cluster_id=''; die "netcluster.sh up $hosts $rate $ranks failed (status $rc)"; }
  subnet="198.18.$cluster_id.0/24"

  # The bound: iperf3 on the same links.
  one_stream='' bidir=''
  if ((have_iperf)); then
    if run_limited $((iperf_secs * 4 + 60)) "$raw/iperf.txt" "$netcluster" iperf "$cluster_id" "$iperf_secs"; then
      sed 's/^/    /' "$raw/iperf.txt"
      one_stream=$(sed -n 's/.*one stream: *\([0-9]*\) Mbit.*/\1/p' "$raw/iperf.txt" | head -n 1)
      bidir=$(sed -n 's/.*both directions: *\([0-9]*\) Mbit.*/\1/p' "$raw/iperf.txt" | head -n 1)
    else
      note "warning: netcluster.sh iperf failed (see $raw/iperf.txt); using the nominal rate"
    fi
  fi

  {
    echo "scenario=$scen"
    echo "hosts=$hosts"
    echo "ranks_per_host=$ranks"
    echo "world=$world"
    echo "rate_mbit=$rate"
    echo "iperf_one_stream_mbit=$one_stream"
    echo "iperf_bidir_total_mbit=$bidir"
    echo "iperf_seconds=$iperf_secs"
    echo "cluster_id=$cluster_id"
    echo "subnet=$subnet"
    echo "command=$cmdline"
    echo "date=$date_start"
    echo "nproc=$(nproc)"
    echo "load_before=$load_before"
    echo "git=$git_rev"
    echo "mpi_version=$mpi_version"
    echo "gloo_version=$gloo_version"
    echo "gsync_env=$gsync_env"
    echo "factor=$factor"
    echo "parts=${parts[*]}"
    echo "runs=$repeat"
    echo "tiny_runs=$tiny_repeat"
  } >"$raw/meta.txt"

  hier_mode=none
  if [[ $kind == B ]]; then
    probe_hierarchical
    case $hier_mode in
      flag) note "gsync-perf accepts -a hierarchical" ;;
      env) note "gsync-perf rejects -a hierarchical, but runs with GSYNC_ALGO=hierarchical: using that" ;;
      none) note "warning: gsync has no hierarchical algorithm yet (neither -a hierarchical nor GSYNC_ALGO=hierarchical runs; see $raw/probe_hierarchical.log): skipped" ;;
    esac
    echo "hierarchical=$hier_mode" >>"$raw/meta.txt"
  fi

  gsync_run=("$netcluster" run "$cluster_id" --timeout-s "$limit" --no-tag-output --)
  ompi_run=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$world"
    --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include lo
    --mca btl_base_warn_component_unused 0)
  wrapper=(python3 benchmarks/netns_rank.py --cluster "$cluster_id" --ranks-per-host "$ranks" --)

  for ((rep = 1; rep <= reps; rep++)); do
    for p in "${parts[@]}"; do
      IFS=: read -r tag lo hi n w <<<"$p"
      if [[ $tag == t ]]; then ((rep <= tiny_repeat)) || continue; else ((rep <= repeat)) || continue; fi
      suffix="${tag}_r$rep"
      payload=$(part_payload "$lo" "$hi" "$n" "$w")
      common=(-d float32 -o sum -b "$lo" -e "$hi" -f "$factor" -n "$n" -w "$w" -c 1)
      run_bench gsync "$suffix" "$payload" "${gsync_run[@]}" "$perf" "${common[@]}" --json "$raw/gsync_np${world}_$suffix.json"
      if [[ $kind == B ]]; then
        run_bench gsync-ring "$suffix" "$payload" "${gsync_run[@]}" "$perf" -a ring "${common[@]}" \
          --json "$raw/gsync-ring_np${world}_$suffix.json"
        case $hier_mode in
          flag) run_bench gsync-hier "$suffix" "$payload" "${gsync_run[@]}" "$perf" -a hierarchical "${common[@]}" \
            --json "$raw/gsync-hier_np${world}_$suffix.json" ;;
          env) run_bench gsync-hier "$suffix" "$payload" "${gsync_run[@]}" env GSYNC_ALGO=hierarchical "$perf" "${common[@]}" \
            --json "$raw/gsync-hier_np${world}_$suffix.json" ;;
        esac
      fi
      if ((use_gloo)); then
        galgos=(ring_chunked)
        [[ $kind == A ]] && galgos+=(halving_doubling)
        for ga in "${galgos[@]}"; do
          run_bench "gloo-${ga//_/-}" "$suffix" "$payload" "${gsync_run[@]}" "$gloo" -a "$ga" "${common[@]}" \
            --json "$raw/gloo-${ga//_/-}_np${world}_$suffix.json"
        done
      fi
      if ((use_ompi)); then
        variants=(default)
        [[ $kind == A ]] && variants+=(ring rabenseifner)
        for v in "${variants[@]}"; do
          case $v in
            default) extra=() series=ompi ;;
            ring) extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4) series=ompi-ring ;;
            rabenseifner) extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 6) series=ompi-rabenseifner ;;
          esac
          run_bench "$series" "$suffix" "$payload" "${ompi_run[@]}" "${extra[@]}" "${wrapper[@]}" "$ompi" "${common[@]}" \
            --label ompi-tcp-netns --label-algo "ompi-$v" --json "$raw/${series}_np${world}_$suffix.json"
        done
      fi
    done
  done

  echo "load_after=$(uptime)" >>"$raw/meta.txt"
  teardown

  echo
  if ! python3 benchmarks/cluster_report.py --dir "$raw" --md "$out/$scen.md"; then
    failed=1
    note "cluster_report.py reported problems for $scen (see $out/$scen.md)"
  fi
  if ((use_plot)); then
    python3 benchmarks/plot.py cluster --dir "$raw" --out "$out/$scen.png" || note "warning: plotting $scen failed"
  fi
done

ip netns list 2>/dev/null | grep -q '^gsnc' && note "note: other netclusters exist on this machine: $(ip netns list | grep -c '^gsnc') namespace(s) (see '$netcluster list')"
echo
echo "$prog: reports in $out/ ($(printf '%s ' "${scenarios[@]%%:*}"))"
if ((failed)); then
  note "some runs failed; see $out/raw/*/failures.txt"
  exit 1
fi
exit 0
