#!/usr/bin/env bash
# compare_ompi.sh: gsync-perf against Open MPI's MPI_Allreduce over TCP loopback, side by side.
#
#   benchmarks/compare_ompi.sh [--transport tcp|shm] [--build DIR] [--np "2 4"] [--max 64M] [--out DIR] ...
#
# --transport tcp (default): both over loopback TCP: gsync with GSYNC_SHM_DISABLE=1, Open MPI with
#   --mca btl tcp,self; targets of the foundation issue (>= 1.3x from 64 KiB to 16 MiB, >= 1.0x above).
# --transport shm: both with their one-host defaults: gsync's shared-memory transport, Open MPI's
#   default BTLs (vader shared memory); target >= 1.2x from 64 KiB up. The report goes to
#   OUT/compare_ompi_shm.md instead of OUT/compare_ompi.md.
#
# Run from the repository root after building the tools and the benchmark targets:
#   cmake -S . -B build && cmake --build build -j2
#   (targets gsyncrun, gsync-perf, ompi_allreduce, gsync-membw)
#
# For every N in --np it runs, alternately,
#   gsyncrun -n N -- gsync-perf -d float32 -o sum -b 8 -e MAX -f 2 -c 1 ...    (gsync, default algorithm)
#   mpirun --allow-run-as-root --oversubscribe -np N --mca btl tcp,self --mca btl_tcp_if_include lo \
#       ompi_allreduce -b 8 -e MAX -f 2 -c 1 ...                                (Open MPI, default algorithm)
# and, with --ompi-variants, Open MPI with coll_tuned's allreduce algorithm forced to 4 (ring) and 6
# (rabenseifner), and Open MPI's default with glibc malloc never using mmap ("nommap": Open MPI 4.1 apparently
# allocates a message-sized temporary per MPI_Allreduce; from 32 MiB, glibc's largest dynamic mmap
# threshold, every call then maps and faults in fresh pages, which costs it ~7x at 32-64 MiB);
# plus gsync-membw once. Sizes below 1 MiB run --small-iters timed iterations, the
# others --iters. Each run writes JSON under OUT/raw/; benchmarks/compare.py then prints the tables
# and the verdicts and writes OUT/compare_ompi.md.
#
# Exit status: 0 on success; 1 when a binary is missing, a benchmark fails (including wrong results)
# or the report cannot be made; 2 for usage errors.

set -euo pipefail

prog=compare_ompi.sh
die() {
  echo "$prog: error: $*" >&2
  exit 1
}
usage() {
  cat <<EOF
usage: benchmarks/compare_ompi.sh [options]     (run from the repository root)
  --transport T       tcp (both over loopback TCP, default) or shm (both with shared memory)
  --build DIR         build directory with tools/ and benchmarks/ (default ./build)
  --np "LIST"         rank counts (default "2 4")
  --max SIZE          largest message, K/M/G suffixes (default 64M)
  --iters N           timed iterations per size from 1 MiB up (default 20)
  --small-iters N     timed iterations per size below 1 MiB (default 200; 0 = same as --iters)
  --warmup N          warmup iterations per size (default 5)
  --repeat R          run every benchmark R times, interleaved; the fastest run per size is kept (default 1)
  --min SIZE          smallest message (default 8)
  --baseline DIR      also run the gsync of another build directory (an earlier revision), alternately,
                      reported as a baseline column
  --median            keep the median of the R runs per size instead of the fastest
  --out DIR           output directory (default benchmarks/results)
  --ompi-variants     also run Open MPI with coll_tuned allreduce algorithm 4 (ring), 6 (rabenseifner),
                      and default with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_=4G (nommap)
  --timeout S         per-benchmark time limit in seconds (default 1800)
  -h, --help          this text
EOF
}

build=./build
nps="2 4"
max=64M
iters=20
small_iters=200
warmup=5
repeat=1
out=benchmarks/results
variants=0
stat=best
min=8
baseline=
limit=1800
transport=tcp

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

# The exact command line, for the report.
cmdline=$(quote_words benchmarks/compare_ompi.sh "$@")

need_value() {
  [[ $# -ge 2 ]] || {
    echo "$prog: $1 needs a value" >&2
    exit 2
  }
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --transport) need_value "$@"; transport=$2; shift 2 ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --np) need_value "$@"; nps=$2; shift 2 ;;
    --max) need_value "$@"; max=$2; shift 2 ;;
    --iters) need_value "$@"; iters=$2; shift 2 ;;
    --small-iters) need_value "$@"; small_iters=$2; shift 2 ;;
    --warmup) need_value "$@"; warmup=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --timeout) need_value "$@"; limit=$2; shift 2 ;;
    --ompi-variants) variants=1; shift ;;
    --median) stat=median; shift ;;
    --min) need_value "$@"; min=$2; shift 2 ;;
    --baseline) need_value "$@"; baseline=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

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

[[ $transport == tcp || $transport == shm ]] || { echo "$prog: --transport must be tcp or shm" >&2; exit 2; }
min_bytes=$(to_bytes "$min") || { echo "$prog: --min '$min' is not a size such as 64K" >&2; exit 2; }
max_bytes=$(to_bytes "$max") || { echo "$prog: --max '$max' is not a size such as 1M or 64M" >&2; exit 2; }
((max_bytes >= 8)) || { echo "$prog: --max must be at least 8" >&2; exit 2; }
for v in iters small_iters warmup repeat limit; do
  is_uint "${!v}" || { echo "$prog: --${v//_/-} '${!v}' is not a non-negative integer" >&2; exit 2; }
done
((iters >= 1 && repeat >= 1 && limit >= 1)) || { echo "$prog: --iters, --repeat and --timeout must be >= 1" >&2; exit 2; }
((small_iters == 0)) && small_iters=$iters
[[ -n ${nps// /} ]] || { echo "$prog: --np is empty" >&2; exit 2; }
for np in $nps; do
  [[ $np =~ ^[1-9][0-9]*$ ]] || { echo "$prog: --np entry '$np' is not a positive integer" >&2; exit 2; }
done

# Must run from the repository root.
[[ -f CMakeLists.txt && -d include/gsync && -f benchmarks/compare.py ]] ||
  die "run this script from the gsync repository root (no include/gsync or benchmarks/compare.py in $(pwd))"

gsyncrun=$build/tools/gsyncrun
perf=$build/tools/gsync-perf
ompi=$build/benchmarks/ompi_allreduce
membw=$build/benchmarks/gsync-membw
missing=()
for b in "$gsyncrun" "$perf" "$ompi" "$membw"; do
  [[ -x $b ]] || missing+=("$b")
done
if ((${#missing[@]})); then
  echo "$prog: error: missing binaries: ${missing[*]}" >&2
  echo "$prog: build them with: cmake -S . -B $build && cmake --build $build --target gsyncrun gsync-perf ompi_allreduce gsync-membw" >&2
  [[ -d $build/benchmarks ]] ||
    echo "$prog: note: $build/benchmarks does not exist: CMake found no MPI C bindings (MPI_C_FOUND), so benchmarks/ was not configured" >&2
  exit 1
fi
mpirun=$(command -v mpirun) || die "mpirun not found in PATH (install openmpi-bin)"
command -v python3 >/dev/null || die "python3 not found"
command -v timeout >/dev/null || die "timeout (coreutils) not found"

if [[ $transport == shm ]]; then
  raw=$out/raw_shm
  report=$out/compare_ompi_shm.md
  mpi_common=(--allow-run-as-root --oversubscribe)
  gsync_env=()
  ompi_label=ompi-vader
  ratio_args=(--mid-ratio 1.2 --mid-hi "$max_bytes")
else
  raw=$out/raw
  report=$out/compare_ompi.md
  mpi_common=(--allow-run-as-root --oversubscribe --mca btl "tcp,self" --mca btl_tcp_if_include lo)
  gsync_env=(env GSYNC_SHM_DISABLE=1)
  ompi_label=ompi-tcp
  ratio_args=()
fi
mkdir -p "$raw" || die "cannot create $raw"
rm -f "$raw"/*.json "$raw"/*.log "$raw"/commands.txt
commands=$raw/commands.txt

# Runs one benchmark: run NAME CMD...; output goes to the terminal and to RAW/NAME.log.
run() {
  local name=$1
  shift
  local log=$raw/$name.log
  quote_words "$@" >>"$commands"
  echo "==> $name: $*"
  local rc=0
  timeout --kill-after=30 "$limit" "$@" >"$log" 2>&1 || rc=$?
  cat "$log"
  if ((rc != 0)); then
    if ((rc == 124 || rc == 137)); then
      die "$name timed out after ${limit}s (log: $log)"
    fi
    die "$name failed with exit status $rc (log: $log)"
  fi
}

# Size ranges: below 1 MiB with small_iters, from 1 MiB with iters (from --min, factor 2).
split=$((1024 * 1024))
parts=()
if ((min_bytes >= split)); then
  parts+=("l:$min_bytes:$max_bytes:$iters")
elif ((small_iters != iters && max_bytes >= split)); then
  parts+=("s:$min_bytes:$((split / 2)):$small_iters" "l:$split:$max_bytes:$iters")
elif ((max_bytes < split)); then
  parts+=("a:$min_bytes:$max_bytes:$small_iters")
else
  parts+=("a:$min_bytes:$max_bytes:$iters")
fi

load_before=$(uptime)
date_start=$(date '+%Y-%m-%d %H:%M:%S %Z')
echo "# $cmdline"
echo "# $date_start; nproc $(nproc); load: $load_before"


run membw "$membw" --json "$raw/membw.json"

for ((rep = 1; rep <= repeat; rep++)); do
  for np in $nps; do
    for p in "${parts[@]}"; do
      IFS=: read -r tag lo hi n <<<"$p"
      suffix="np${np}_${tag}_r${rep}"
      run "gsync_$suffix" "${gsync_env[@]}" "$gsyncrun" -n "$np" --no-tag-output -- "$perf" -d float32 -o sum \
        -b "$lo" -e "$hi" -f 2 -n "$n" -w "$warmup" -c 1 --json "$raw/gsync_$suffix.json"
      if [[ -n $baseline ]]; then
        run "gsyncbase_$suffix" "${gsync_env[@]}" "$baseline/tools/gsyncrun" -n "$np" --no-tag-output -- "$baseline/tools/gsync-perf" \
          -d float32 -o sum -b "$lo" -e "$hi" -f 2 -n "$n" -w "$warmup" -c 1 --json "$raw/gsyncbase_$suffix.json"
      fi
      run "ompi_$suffix" "$mpirun" "${mpi_common[@]}" -np "$np" "$ompi" -d float32 -o sum \
        -b "$lo" -e "$hi" -f 2 -n "$n" -w "$warmup" -c 1 --label "$ompi_label" --label-algo ompi-default \
        --json "$raw/ompi_$suffix.json"
      if ((variants)); then
        for vname in ring rabenseifner nommap; do
          case $vname in
            ring) extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4) ;;
            rabenseifner) extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 6) ;;
            nommap) extra=(-x MALLOC_MMAP_THRESHOLD_=4294967296 -x MALLOC_TRIM_THRESHOLD_=4294967296) ;;
          esac
          run "ompi-${vname}_$suffix" "$mpirun" "${mpi_common[@]}" "${extra[@]}" \
            -np "$np" "$ompi" -d float32 -o sum -b "$lo" -e "$hi" -f 2 -n "$n" -w "$warmup" -c 1 \
            --label "$ompi_label" --label-algo "ompi-$vname" --json "$raw/ompi-${vname}_$suffix.json"
        done
      fi
    done
  done
done

load_after=$(uptime)
git_rev=unknown
if git rev-parse --short HEAD >/dev/null 2>&1; then
  git_rev=$(git rev-parse --short HEAD)
  [[ -z $(git status --porcelain 2>/dev/null) ]] || git_rev+=" (working tree modified)"
fi
mpi_version=$("$mpirun" --version 2>/dev/null | head -n 1)

echo
python3 benchmarks/compare.py --dir "$raw" --np "$nps" --md "$report" --stat "$stat" --transport "$transport" "${ratio_args[@]}" \
  --command "$cmdline" --date "$date_start" --nproc "$(nproc)" \
  --load-before "$load_before" --load-after "$load_after" --mpi-version "$mpi_version" --git "$git_rev" \
  --commands-file "$commands" ||
  die "compare.py reported problems (see $report)"
echo
echo "$prog: report written to $report"
