#!/usr/bin/env bash
# Compile time of a user's translation unit against gsync: the working tree against an earlier
# revision (default 185d716, before the header-only / separate-compilation split), in one run.
#
# Four cases (an empty main including <gsync/allreduce.hpp>, one calling tcp_communicator::from_env,
# one running an allreduce on a communicator it is given, and examples/allreduce_hello.cpp) are compiled with `-c` (no link) in each mode: header-only for
# both revisions, and GSYNC_SEPARATE_COMPILATION where the revision has it. Repetitions are
# interleaved (rep 1 of every configuration, then rep 2, ...) so machine noise hits both revisions
# alike. Reported per configuration: preprocessed lines, best and median wall seconds, peak memory
# (/usr/bin/time %M, of the fastest run), and the ratio to the base revision's header-only time.
#
# Usage: benchmarks/compile_time.sh [--base REV] [--reps N] [--out FILE] [--check-budget] [--floors]
#   --check-budget  exit 1 when a budget below fails (they are always printed, as information):
#                   separate-mode `empty` <= 100000 preprocessed lines; separate-mode `hello` best
#                   <= 0.3 x base header-only `hello` best; header-only `hello` best <= 0.6 x base.
#   --floors        also compile the working tree header-only at -O0 (`header-only -O0`) and with
#                   -fsyntax-only (`parse only`: GCC parses and checks the file, but skips most of
#                   the work on the inline functions it uses): floors under what any change to how
#                   the inline code is optimised could give the header-only mode.
# Environment: CXX (default g++).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
base_rev="185d716"
reps=3
out_file=""
check_budget=0
floors=0

usage() {
  sed -n '/^# Usage:/,/^# Environment:/s/^# \{0,1\}//p' "$0"
}

die() {
  echo "compile_time.sh: $*" >&2
  exit 1
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --base) [[ $# -ge 2 ]] || die "--base needs a revision"; base_rev="$2"; shift 2 ;;
    --reps) [[ $# -ge 2 ]] || die "--reps needs a number"; reps="$2"; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a file"; out_file="$2"; shift 2 ;;
    --check-budget) check_budget=1; shift ;;
    --floors) floors=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer, got '$reps'"

read -r -a cxx <<< "${CXX:-g++}"
command -v "${cxx[0]}" > /dev/null || die "compiler not found: ${cxx[0]}"
have_time=0
[[ -x /usr/bin/time ]] && have_time=1

git -C "$repo" rev-parse --verify --quiet "${base_rev}^{commit}" > /dev/null \
  || die "not a revision of $repo: $base_rev"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gsync-compile-time.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# The base revision's include tree, without touching the repository's worktree state.
mkdir -p "$tmp/base"
git -C "$repo" archive "$base_rev" include | tar -x -C "$tmp/base"
[[ -d "$tmp/base/include/gsync" ]] || die "$base_rev has no include/gsync"

# Flags the CMake target gsync::gsync gives its consumers (header-only mode).
common_flags=(-std=c++20 -O2 -DASIO_STANDALONE -DASIO_NO_DEPRECATED)
if [[ -f /usr/include/openssl/evp.h ]]; then
  common_flags+=(-DGSYNC_HAVE_OPENSSL=1)
fi

# The cases: two small files written here, and the working tree's example (public API only).
cat > "$tmp/empty.cpp" << 'EOF'
#include <gsync/allreduce.hpp>
int main() {}
EOF
cat > "$tmp/from_env.cpp" << 'EOF'
#include <gsync/allreduce.hpp>
int main() { auto c = gsync::tcp_communicator::from_env(); }
EOF
# A file of an engine that runs collectives on a communicator made elsewhere (issue 52: it must
# not cost more than before the set-up code moved out of the communicator).
cat > "$tmp/given.cpp" << 'EOF'
#include <gsync/allreduce.hpp>
#include <span>
void step(gsync::tcp_communicator& comm, std::span<float> grads) { gsync::allreduce(comm, grads, gsync::op::avg{}); }
EOF
cases=(empty from_env given hello)
declare -A case_file=(
  [empty]="$tmp/empty.cpp"
  [from_env]="$tmp/from_env.cpp"
  [given]="$tmp/given.cpp"
  [hello]="$repo/examples/allreduce_hello.cpp"
)
[[ -f "${case_file[hello]}" ]] || die "missing ${case_file[hello]}"

declare -A rev_include=([base]="$tmp/base/include" [work]="$repo/include")

# Modes a revision offers: separate compilation only where detail/build_mode.hpp exists.
modes_of() {
  local rev="$1"
  echo header-only
  if [[ -f "${rev_include[$rev]}/gsync/detail/build_mode.hpp" ]]; then
    echo separate
  fi
  if [[ "$rev" == work && $floors -eq 1 ]]; then
    echo "header-only -O0"
    echo "parse only"
  fi
}

# flags_for REV MODE: fills the array `flags`.
flags_for() {
  local rev="$1" mode="$2"
  flags=("${common_flags[@]}" "-I${rev_include[$rev]}")
  case "$mode" in
    separate) flags+=(-DGSYNC_SEPARATE_COMPILATION) ;;
    "header-only -O0") flags+=(-O0) ;;  # the last -O wins
    "parse only") flags+=(-fsyntax-only) ;;
  esac
}

# Configurations, in the order of the table: for each case, base header-only, then the working
# tree's modes.
configs=()
for c in "${cases[@]}"; do
  for rev in base work; do
    while read -r mode; do
      configs+=("$c|$mode|$rev")
    done < <(modes_of "$rev")
  done
done

compile_failed() {
  local what="$1" err="$2"
  echo "compile_time.sh: compile failed: $what" >&2
  echo "--- compiler stderr (last 30 lines) ---" >&2
  tail -n 30 "$err" >&2
  exit 1
}

# preprocessed_lines CASE REV MODE
preprocessed_lines() {
  local c="$1" rev="$2" mode="$3" flags
  flags_for "$rev" "$mode"
  if ! "${cxx[@]}" "${flags[@]}" -E "${case_file[$c]}" > "$tmp/pp.ii" 2> "$tmp/err"; then
    compile_failed "$c ($mode, $rev) preprocessing" "$tmp/err"
  fi
  wc -l < "$tmp/pp.ii" | tr -d ' '
}

# time_compile CASE REV MODE: prints "SECONDS PEAK_KB".
time_compile() {
  local c="$1" rev="$2" mode="$3" flags t0 t1 kb="-"
  flags_for "$rev" "$mode"
  local cmd=("${cxx[@]}" "${flags[@]}" -c "${case_file[$c]}" -o "$tmp/out.o")
  if [[ $have_time -eq 1 ]]; then
    cmd=(/usr/bin/time -f %M -o "$tmp/mem" "${cmd[@]}")
  fi
  t0=$(date +%s%N)
  if ! "${cmd[@]}" 2> "$tmp/err"; then
    compile_failed "$c ($mode, $rev)" "$tmp/err"
  fi
  t1=$(date +%s%N)
  if [[ $have_time -eq 1 ]]; then
    kb=$(tail -n 1 "$tmp/mem")
  fi
  awk -v a="$t0" -v b="$t1" -v kb="$kb" 'BEGIN { printf "%.3f %s\n", (b - a) / 1e9, kb }'
}

# min / median of a space-separated list of numbers.
stat_min() { tr ' ' '\n' <<< "$1" | sort -g | head -n 1; }
stat_median() {
  tr ' ' '\n' <<< "$1" | sort -g | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A lines times mem best median
for cfg in "${configs[@]}"; do
  IFS='|' read -r c mode rev <<< "$cfg"
  lines[$cfg]=$(preprocessed_lines "$c" "$rev" "$mode")
  times[$cfg]=""
done

for ((r = 1; r <= reps; r++)); do
  for cfg in "${configs[@]}"; do
    IFS='|' read -r c mode rev <<< "$cfg"
    echo "rep $r/$reps: $c, $mode, $rev" >&2
    result=$(time_compile "$c" "$rev" "$mode")
    read -r secs kb <<< "$result"
    times[$cfg]="${times[$cfg]:+${times[$cfg]} }$secs"
    # Peak memory of the fastest run so far.
    if [[ -z "${best[$cfg]:-}" ]] || awk -v a="$secs" -v b="${best[$cfg]}" 'BEGIN { exit !(a < b) }'; then
      best[$cfg]=$secs
      mem[$cfg]=$kb
    fi
  done
done

for cfg in "${configs[@]}"; do
  best[$cfg]=$(stat_min "${times[$cfg]}")
  median[$cfg]=$(stat_median "${times[$cfg]}")
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
to_mb() { if [[ "$1" == "-" ]]; then echo "-"; else awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; fi; }

base_short=$(git -C "$repo" rev-parse --short "${base_rev}^{commit}")
head_short=$(git -C "$repo" rev-parse --short HEAD)
work_label="$head_short"
if [[ -n "$(git -C "$repo" status --porcelain -- include examples)" ]]; then
  work_label="$head_short + working tree changes"
fi
declare -A rev_label=([base]="$base_short" [work]="$work_label")

# Budgets: one line each in the report; the failed ones are also collected for --check-budget.
budget_lines=()
budget_failed=()
budget() {
  local name="$1" value="$2" limit="$3"
  local verdict=ok
  if awk -v v="$value" -v l="$limit" 'BEGIN { exit !(v > l) }'; then
    verdict=FAILED
    budget_failed+=("$name")
  fi
  budget_lines+=("- budget $name: $value (limit $limit): $verdict")
}
sep_empty="empty|separate|work"
sep_hello="hello|separate|work"
ho_hello="hello|header-only|work"
base_hello="hello|header-only|base"
if [[ -n "${lines[$sep_empty]:-}" ]]; then
  budget "separate-mode empty preprocessed lines" "${lines[$sep_empty]}" 100000
  budget "separate-mode hello best s (0.3 x base ${best[$base_hello]} s)" "${best[$sep_hello]}" \
    "$(awk -v b="${best[$base_hello]}" 'BEGIN { printf "%.3f", 0.3 * b }')"
else
  budget_lines+=("- budget separate-mode: not measured (the working tree has no separate mode): FAILED")
  budget_failed+=("separate-mode (absent)")
fi
budget "header-only hello best s (0.6 x base ${best[$base_hello]} s)" "${best[$ho_hello]}" \
  "$(awk -v b="${best[$base_hello]}" 'BEGIN { printf "%.3f", 0.6 * b }')"

report() {
  echo "| case | mode | revision | lines | best s | median s | peak MB | ratio to base (best) |"
  echo "|---|---|---|---:|---:|---:|---:|---:|"
  local cfg c mode rev
  for cfg in "${configs[@]}"; do
    IFS='|' read -r c mode rev <<< "$cfg"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$mode" "${rev_label[$rev]}" \
      "${lines[$cfg]}" "${best[$cfg]}" "${median[$cfg]}" "$(to_mb "${mem[$cfg]}")" \
      "$(ratio "${best[$cfg]}" "${best[$c|header-only|base]}")"
  done
  echo
  echo "$(date -u +%F), $("${cxx[@]}" --version | head -n 1), nproc $(nproc), $reps rep(s)," \
    "base $base_short, working tree ${rev_label[work]}; flags: ${common_flags[*]} (-c, no link)"
  echo
  printf '%s\n' "${budget_lines[@]}"
}

report_text=$(report)
echo "$report_text"
if [[ -n "$out_file" ]]; then
  echo "$report_text" > "$out_file"
fi

if [[ ${#budget_failed[@]} -gt 0 ]]; then
  for b in "${budget_failed[@]}"; do
    echo "compile_time.sh: budget failed: $b" >&2
  done
  if [[ $check_budget -eq 1 ]]; then
    exit 1
  fi
fi
