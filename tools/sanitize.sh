#!/usr/bin/env bash
# Sanitizer stage of the test suite: builds a chosen part of the doctest suite twice, with
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan) and with ThreadSanitizer (build-tsan),
# each in its own folder under OUT_DIR, runs both, and fails on any sanitizer report.
#
#   tools/sanitize.sh [OUT_DIR=build/sanitize] [OPENSSL=auto|0|1]
#
# No CMake is involved: the test sources are compiled directly (-g1 -fno-omit-frame-pointer; -O0,
# which compiles these template-heavy files much faster than -O1 under both ASan+UBSan and TSan:
# benchmarks/results/from_code_comments.md; GSYNC_SANITIZE_TSAN_OPT=-O1 compiles the TSan build
# optimised, for faster runs),
# at most GSYNC_SANITIZE_JOBS (default 2) compilers at a time, longest first; objects are reused
# while their sources, headers and flags are unchanged. OPENSSL says whether the main build uses
# libcrypto (GSYNC_HAVE_OPENSSL, -lcrypto); auto: when <openssl/hmac.h> is there.
#
# Which tests go where:
#   ASan+UBSan: the whole doctest suite (every tests/test_*.cpp but the TCP allreduce sweep and
#               three device-path files, see `asan_skip` below), each file in its own process. The
#               sweeps and the soak test run with smaller sizes (GSYNC_TEST_MEDIUM, GSYNC_TEST_LARGE,
#               GSYNC_SOAK_OPS below): the same schedules, segment splits and code paths, fewer
#               elements. The plain build runs them at full size.
#   TSan:       the threaded parts: the async progress engine, in-process, TCP and shared-memory
#               worlds of threads, the store, failures and abort() from another thread, mismatch
#               notices, stall records, counters and trace files written from several threads,
#               the heartbeat's thread reporting into a mesh.
# GSYNC_SANITIZE_FULL=1 adds the sweeps and the soak test to TSan and the TCP allreduce sweep and
# the device-path files to ASan+UBSan (much longer: benchmarks/results/from_code_comments.md).
#
# Compiler: GSYNC_SANITIZE_CXX, else the first of clang++, g++ that builds and runs a probe with
# the sanitizer's runtime (clang first: it compiles these files with ASan+UBSan faster than g++,
# benchmarks/results/from_code_comments.md).
# A sanitizer whose probe fails everywhere is skipped with the reason; if both are, the script
# exits 77. GSYNC_SANITIZE_ONLY=asan|tsan runs one of them.
#
# Exit: 0 clean; 1 a sanitizer report, a failing test or a build error (the report is printed;
# whole logs in OUT_DIR/build-*/TEST.run.log); 77 no compiler here builds and runs a sanitized
# program (no sanitizer runtime).
# Suppressions: tests/sanitize_suppressions/{asan,lsan,ubsan,tsan}.supp when present (none today).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
out=${1:-build/sanitize}
openssl=${2:-auto}
mkdir -p "$out"
out=$(cd "$out" && pwd)
jobs=${GSYNC_SANITIZE_JOBS:-2}
ncpu=$(nproc 2>/dev/null || echo 1)
[ "$jobs" -gt "$ncpu" ] && jobs=$ncpu
[ "$jobs" -lt 1 ] && jobs=1
run_limit=${GSYNC_SANITIZE_RUN_TIMEOUT:-300}  # seconds per test file's run; a hang is a failure

# --- what each build compiles (tests/test_main.cpp, doctest's main, is added to both) ------------
# Order: most expensive first (measured), so that two parallel compilers finish close together.
heavy=(test_soak test_allreduce_sweep test_collectives_sweep test_grad test_async)
# Left out of ASan+UBSan unless GSYNC_SANITIZE_FULL=1 (CI time): the TCP allreduce sweep runs the
# schedules test_allreduce_sweep already runs there, over a transport that test_shm, test_failures,
# test_bootstrap, test_mismatch, test_collectives, test_compression and test_hierarchical exercise
# there (its compile and run time: benchmarks/results/from_code_comments.md). The device-path
# tests against the CPU stand-in of CUDA (IPC, IPC hierarchical, host staging) are the costliest
# files to compile under ASan; they are left out of ASan+UBSan, and of TSan too (below), for the
# CI time limit: GSYNC_SANITIZE_FULL=1 runs them under both.
# The outside link's file (test_outside_link) is the TCP sweep again over a mesh whose same-host
# pairs use a link defined in tests/; that link's calls run under ASan+UBSan in test_links.
asan_skip=(test_allreduce_sweep_tcp test_outside_link test_cuda_ipc test_cuda_ipc_hierarchical test_device_staged)
[ "${GSYNC_SANITIZE_FULL:-0}" = 1 ] && { heavy=(test_allreduce_sweep_tcp "${heavy[@]}"); asan_skip=(); }
asan_tests=("${heavy[@]}")
# The stand-in libibverbs' own tests link the stand-in, and the verbs link's load it: both need the
# library CMake builds (tests/CMakeLists.txt), not a test file compiled alone. The stand-in's
# conformance tests were run under ASan+UBSan and TSan by hand when it was written (2026-12-07).
needs_cmake=(test_ibv_emu test_verbs_link test_verbs_memory)
for f in tests/test_*.cpp; do
  t=$(basename "$f" .cpp)
  [ "$t" = test_main ] && continue
  [[ " ${needs_cmake[*]} " == *" $t "* ]] && continue
  [[ " ${heavy[*]} ${asan_skip[*]} " == *" $t "* ]] || asan_tests+=("$t")
done
tsan_tests=(test_async test_mismatch test_collectives test_bootstrap test_shm test_failures test_observability test_auth test_device_synchronizer
            test_stall test_link_probe test_split test_shrink test_heartbeat)
# The device-path files against the CPU stand-in of CUDA (IPC, IPC hierarchical, host staging)
# run under TSan only with GSYNC_SANITIZE_FULL=1: about 75 s of the CI's 40 minutes (their
# TSan compile and run, benchmarks/results/from_code_comments.md); they were clean under it
# from 2026-12-04 on, and the plain build runs them in CI.
if [ "${GSYNC_SANITIZE_FULL:-0}" = 1 ]; then
  tsan_tests=(test_soak test_allreduce_sweep_tcp test_outside_link test_collectives_sweep test_device_staged test_cuda_ipc test_cuda_ipc_hierarchical "${tsan_tests[@]}")
fi
# Smaller sizes for the sweeps and the soak test under the sanitizers (see the file comment).
export GSYNC_TEST_MEDIUM=${GSYNC_TEST_MEDIUM:-4099} GSYNC_TEST_LARGE=${GSYNC_TEST_LARGE:-32768}
export GSYNC_SOAK_OPS=${GSYNC_SOAK_OPS:-150}
# doctest filters (-tce = exclude test cases by name; commas separate patterns), each with its
# reason. ASan+UBSan runs every case of its files.
asan_filter=()
# TSan: the shared-memory rings live in memory that each rank maps at its own address, so TSan
# cannot relate one rank's ring accesses to another's; the all-shared-memory sweep (large counts,
# 2..8 ranks, slow under TSan: benchmarks/results/from_code_comments.md) checks nothing it could
# see. Its shm setup, teardown and failure paths still run under TSan in the other test_shm cases;
# ASan+UBSan runs the sweep in full.
# The CUDA IPC abort test: after a failure, release() forces a rank's stream past waits that will
# never be met (cuda/ipc_group.hpp), so its kernels may read a peer's buffer while the aborted
# peer's stream still writes it. The result is discarded, and on a GPU such a read only returns
# garbage; with tests/support/fake_cuda.hpp the kernels are host threads, where TSan reports it
# (when the aborted copy outlasts the 200 ms grace, as on a loaded machine). ASan+UBSan runs it.
tsan_filter=("-tce=shm: same-host ranks use shared memory*,device collectives over CUDA IPC: abort() fails the running operation at once*")

# --- sanitizer flags and run-time options ----------------------------------------------------------
# -g1: line tables and function names, all that sanitizer stacks use (inlined frames included);
# full -g makes these compiles markedly slower (benchmarks/results/from_code_comments.md;
# GSYNC_SANITIZE_DEBUG=-g to have it anyway).
debug=${GSYNC_SANITIZE_DEBUG:--g1}
common=(-std=c++20 "$debug" -fno-omit-frame-pointer -DGSYNC_TEST_SANITIZE -DASIO_STANDALONE -DASIO_NO_DEPRECATED -Iinclude -Itests)
# Separate compilation, as CMake's gsync_tests: the set-up code (src/gsync.cpp) is compiled once
# per build, with the same sanitizer, instead of in every test file (most of a file's compile at
# -O0: benchmarks/results/from_code_comments.md). GSYNC_SANITIZE_HEADER_ONLY=1 compiles it in each.
[ "${GSYNC_SANITIZE_HEADER_ONLY:-0}" = 1 ] || common+=(-DGSYNC_SEPARATE_COMPILATION=1)
asan_flags=(-fsanitize=address,undefined -fno-sanitize-recover=all)
tsan_flags=(-fsanitize=thread)
supp=tests/sanitize_suppressions
asan_env="detect_leaks=1:abort_on_error=0"
ubsan_env="print_stacktrace=1:halt_on_error=1"
tsan_env="halt_on_error=1:second_deadlock_stack=1"
[ -f "$supp/asan.supp" ] && asan_env+=":suppressions=$root/$supp/asan.supp"
[ -f "$supp/ubsan.supp" ] && ubsan_env+=":suppressions=$root/$supp/ubsan.supp"
[ -f "$supp/tsan.supp" ] && tsan_env+=":suppressions=$root/$supp/tsan.supp"
lsan_env=""
[ -f "$supp/lsan.supp" ] && lsan_env="suppressions=$root/$supp/lsan.supp"

# Asio from /usr/include needs no flag (and -isystem /usr/include would break libstdc++'s include_next).
inc=()
if [ ! -f /usr/include/asio.hpp ]; then
  a=$(find /usr/local/include -maxdepth 1 -name asio.hpp 2>/dev/null | head -1)
  [ -n "$a" ] && inc=(-isystem "$(dirname "$a")")
fi
libs=(-lpthread)
case $openssl in
  auto) [ -f /usr/include/openssl/hmac.h ] && openssl=1 || openssl=0 ;;
  0|1|ON|OFF|TRUE|FALSE|on|off|true|false) [[ $openssl =~ ^(1|ON|TRUE|on|true)$ ]] && openssl=1 || openssl=0 ;;
  *) echo "sanitize: OPENSSL must be auto, 0 or 1, not '$openssl'" >&2; exit 1 ;;
esac
if [ "$openssl" = 1 ]; then common+=(-DGSYNC_HAVE_OPENSSL=1); libs=(-lcrypto "${libs[@]}"); fi

# --- choose a compiler per sanitizer: one that builds and runs the probe ---------------------------
probe_dir="$out/probe"
mkdir -p "$probe_dir"
cat > "$probe_dir/probe.cpp" <<'EOF'
// Sanitizer runtime present and working.
#include <thread>
#include <utility>
int main() {
  int sum = 0;
  for (auto p : {std::pair{1, 2}, std::pair{3, 4}}) {
    std::thread t([&] { sum += p.first * p.second; });
    t.join();
  }
  return sum == 14 ? 0 : 1;
}
EOF
# pick SAN: sets cxx_SAN, or why_SAN when no compiler works.
pick() {
  local san=$1 flags c cands
  if [ "$san" = asan ]; then flags=("${asan_flags[@]}"); else flags=("${tsan_flags[@]}"); fi
  if [ -n "${GSYNC_SANITIZE_CXX:-}" ]; then cands=("$GSYNC_SANITIZE_CXX"); else cands=(clang++ g++); fi
  local why=""
  for c in "${cands[@]}"; do
    if ! command -v "$c" >/dev/null; then why+=" $c: not found;"; continue; fi
    if ! "$c" -std=c++20 -g "${flags[@]}" "$probe_dir/probe.cpp" -o "$probe_dir/$san-$c" -lpthread >"$probe_dir/$san-$c.log" 2>&1; then
      why+=" $c: $(grep -m1 -E 'error|cannot find|undefined' "$probe_dir/$san-$c.log" | cut -c1-160);"
      continue
    fi
    if ! ASAN_OPTIONS=$asan_env UBSAN_OPTIONS=$ubsan_env TSAN_OPTIONS=$tsan_env "$probe_dir/$san-$c" >>"$probe_dir/$san-$c.log" 2>&1; then
      why+=" $c: the probe built but did not run: $(grep -m1 -E 'FATAL|ERROR|error' "$probe_dir/$san-$c.log" | cut -c1-160);"
      continue
    fi
    printf -v "cxx_$san" '%s' "$c"
    return 0
  done
  printf -v "why_$san" '%s' "$why"
}
cxx_asan="" cxx_tsan="" why_asan="" why_tsan=""
want=(asan tsan)
case ${GSYNC_SANITIZE_ONLY:-} in
  "") ;;
  asan|tsan) want=("$GSYNC_SANITIZE_ONLY") ;;
  *) echo "sanitize: GSYNC_SANITIZE_ONLY must be asan or tsan" >&2; exit 1 ;;
esac
sans=()
for s in "${want[@]}"; do
  pick "$s"
  c=cxx_$s
  w=why_$s
  if [ -n "${!c}" ]; then
    sans+=("$s")
    echo "sanitize: $s with ${!c} ($("${!c}" --version | head -1))"
  else
    echo "sanitize: $s skipped, no compiler can build and run it:${!w}"
  fi
done
if [ ${#sans[@]} -eq 0 ]; then
  echo "sanitize: skipped: no compiler here builds and runs a sanitized C++20 program (reasons above; Debian: clang"
  echo "          with libclang-rt-14-dev, or g++ with libasan8 libubsan1 libtsan2)"
  exit 77
fi
# LeakSanitizer stops the world with ptrace at exit, which some containers forbid: then ASan runs
# without leak checks and says so, rather than failing on the environment.
if [[ " ${sans[*]} " == *" asan "* ]]; then
  if ! ASAN_OPTIONS=$asan_env "$probe_dir/asan-$cxx_asan" >"$probe_dir/lsan.log" 2>&1; then
    echo "sanitize: LeakSanitizer cannot run here ($(grep -m1 -i leak "$probe_dir/lsan.log" | cut -c1-120)); ASan runs with detect_leaks=0"
    asan_env=${asan_env/detect_leaks=1/detect_leaks=0}
  fi
fi

# --- compile ----------------------------------------------------------------------------------------
# Objects are rebuilt when the source, any header it includes (from the -MMD list) or the
# command line changed.
stale() {  # stale OBJ DEPFILE CMDFILE CMDLINE
  local o=$1 d=$2 cf=$3 cmd=$4 f
  [ -f "$o" ] && [ -f "$d" ] && [ -f "$cf" ] || return 0
  [ "$(cat "$cf")" = "$cmd" ] || return 0
  for f in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$d"); do
    [ "$f" -nt "$o" ] && return 0
  done
  return 1
}
declare -a queue=()  # "san test"
for s in "${sans[@]}"; do
  mkdir -p "$out/build-$s"
done
# Interleave the two lists (both longest first) so that both builds finish about together.
n=$(( ${#asan_tests[@]} > ${#tsan_tests[@]} ? ${#asan_tests[@]} : ${#tsan_tests[@]} ))
for ((i = 0; i < n; i++)); do
  for s in "${sans[@]}"; do
    if [ "$s" = asan ]; then list=("${asan_tests[@]}"); else list=("${tsan_tests[@]}"); fi
    [ $i -lt ${#list[@]} ] && queue+=("$s ${list[$i]}")
  done
done
for s in "${sans[@]}"; do queue+=("$s test_main"); done
# The set-up code first: one of the longest compiles.
[ "${GSYNC_SANITIZE_HEADER_ONLY:-0}" = 1 ] || for s in "${sans[@]}"; do queue=("$s gsync_src" "${queue[@]}"); done

compile_failed=0
t_build=$(date +%s)
san_setup() {  # san_setup SAN: sets c, flags, b and opt for that build
  if [ "$1" = asan ]; then c=$cxx_asan; flags=("${asan_flags[@]}"); opt=-O0; else c=$cxx_tsan; flags=("${tsan_flags[@]}"); opt=${GSYNC_SANITIZE_TSAN_OPT:--O0}; fi
  b="$out/build-$1"
}

# A precompiled header per build (doctest, Asio and gsync, which every test file parses: much of
# each compile, benchmarks/results/from_code_comments.md), made first; test_main.cpp goes without
# (it defines doctest's main before including it). GSYNC_SANITIZE_PCH=0 compiles without one; a
# header that fails to precompile is reported and the build goes on without it.
declare -A pch_use=() pch_file=()  # per build: the compiler flags that use it, the file they read
pch_make() {  # pch_make SAN: (re)builds that build's header when stale; prints what happened
  local s=$1 c flags b opt cmd hdr pchf
  san_setup "$s"
  hdr="$b/pch/gsync_tests_pch.hpp"
  mkdir -p "$b/pch"
  printf '#include "%s/tests/support/pch.hpp"\n' "$root" >"$hdr.new"  # the list CMake's gsync_tests uses
  cmp -s "$hdr.new" "$hdr" && rm -f "$hdr.new" || mv "$hdr.new" "$hdr"
  if "$c" --version 2>/dev/null | grep -qi clang; then pchf="$hdr.pch"; else pchf="$hdr.gch"; fi
  cmd="$c ${common[*]} $opt ${inc[*]} ${flags[*]} -x c++-header $hdr"
  if stale "$pchf" "$b/pch/pch.d" "$b/pch/pch.cmd" "$cmd"; then
    rm -f "$pchf" "$b/pch/pch.cmd"
    local s0=$(date +%s)
    if "$c" "${common[@]}" "$opt" "${inc[@]}" "${flags[@]}" -MMD -MF "$b/pch/pch.d" -x c++-header "$hdr" -o "$pchf" >"$b/pch/pch.log" 2>&1; then
      printf '%s\n' "$cmd" >"$b/pch/pch.cmd"
      echo "sanitize: $s precompiled header ($(( $(date +%s) - s0 )) s)"
    else
      echo "sanitize: $s: the precompiled header failed, compiling without it:"; head -10 "$b/pch/pch.log"
      rm -f "$pchf"
    fi
  fi
}
if [ "${GSYNC_SANITIZE_PCH:-1}" = 1 ]; then
  for s in "${sans[@]}"; do pch_make "$s" & done
  wait
  for s in "${sans[@]}"; do
    san_setup "$s"
    hdr="$b/pch/gsync_tests_pch.hpp"
    if [ -f "$hdr.pch" ] && [ -f "$b/pch/pch.cmd" ]; then pch_use[$s]="-include-pch $hdr.pch" pch_file[$s]=$hdr.pch
    elif [ -f "$hdr.gch" ] && [ -f "$b/pch/pch.cmd" ]; then pch_use[$s]="-include $hdr" pch_file[$s]=$hdr.gch
    fi
  done
fi

start_compile() {  # start_compile SAN TEST: compiles in the background unless the object is fresh
  local s=$1 t=$2 c flags b cmd opt pch=() src="tests/$2.cpp"
  san_setup "$s"
  [ "$t" = gsync_src ] && src=src/gsync.cpp  # the set-up code (separate compilation)
  [ "$t" != test_main ] && [ "$t" != gsync_src ] && [ -n "${pch_use[$s]:-}" ] && read -r -a pch <<<"${pch_use[$s]}"
  cmd="$c ${common[*]} $opt ${inc[*]} ${flags[*]} ${pch[*]} -c $src"
  # An object older than the header it was compiled with is stale too.
  [ ${#pch[@]} -gt 0 ] && [ "${pch_file[$s]}" -nt "$b/$t.o" ] && rm -f "$b/$t.cmd"
  stale "$b/$t.o" "$b/$t.d" "$b/$t.cmd" "$cmd" || return 0
  rm -f "$b/$t.o" "$b/$t.cmd"
  (
    s0=$(date +%s)
    if "$c" "${common[@]}" "$opt" "${inc[@]}" "${flags[@]}" "${pch[@]}" -MMD -MF "$b/$t.d" -c "$src" -o "$b/$t.o" >"$b/$t.log" 2>&1; then
      printf '%s\n' "$cmd" >"$b/$t.cmd"  # written only on success: marks the object as good
      echo "sanitize: $s $t.o ($(( $(date +%s) - s0 )) s)"
    else
      echo "sanitize: $s: $src does not compile with $c:"
      head -30 "$b/$t.log"
    fi
  ) &
}
for job in "${queue[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  start_compile $job
done
wait
for job in "${queue[@]}"; do
  read -r s t <<<"$job"
  [ -f "$out/build-$s/$t.cmd" ] && [ -f "$out/build-$s/$t.o" ] || compile_failed=1
done
if [ "$compile_failed" != 0 ]; then echo "sanitize: FAILED (build error)"; exit 1; fi

for s in "${sans[@]}"; do
  if [ "$s" = asan ]; then c=$cxx_asan; flags=("${asan_flags[@]}"); list=("${asan_tests[@]}"); else c=$cxx_tsan; flags=("${tsan_flags[@]}"); list=("${tsan_tests[@]}"); fi
  b="$out/build-$s"
  objs=("$b/test_main.o")
  [ "${GSYNC_SANITIZE_HEADER_ONLY:-0}" = 1 ] || objs+=("$b/gsync_src.o")
  for t in "${list[@]}"; do objs+=("$b/$t.o"); done
  if ! "$c" "${flags[@]}" "${objs[@]}" -o "$b/gsync_${s}_tests" "${libs[@]}" >"$b/link.log" 2>&1; then
    echo "sanitize: $s: link failed:"; head -30 "$b/link.log"; exit 1
  fi
done
echo "sanitize: built in $(( $(date +%s) - t_build )) s"

# --- run ------------------------------------------------------------------------------------------
# Each test file runs in its own process (as ctest runs the main suite one case per process), so
# that state one file leaves behind (a flag set once per process, a warm cache) cannot hide a race
# or a leak from the next; up to $jobs processes at a time.
run_one() {  # run_one SAN TEST: writes $b/TEST.run.log and $b/TEST.rc
  local s=$1 t=$2 b="$out/build-$1" filter rc=0
  if [ "$s" = asan ]; then filter=("${asan_filter[@]}"); else filter=("${tsan_filter[@]}"); fi
  (
    cd "$b"
    ASAN_OPTIONS=$asan_env UBSAN_OPTIONS=$ubsan_env TSAN_OPTIONS=$tsan_env LSAN_OPTIONS=$lsan_env \
      timeout -k 10 "$run_limit" "./gsync_${s}_tests" --duration=true "-sf=*tests/$t.cpp" "${filter[@]}" >"$t.run.log" 2>&1
  ) || rc=$?
  echo "$rc" >"$b/$t.rc"
}
runs=()
for s in "${sans[@]}"; do
  if [ "$s" = asan ]; then list=("${asan_tests[@]}"); else list=("${tsan_tests[@]}"); fi
  for t in "${list[@]}"; do
    rm -f "$out/build-$s/$t.rc" "$out/build-$s/$t.run.log"
    runs+=("$s $t")
  done
done
t_run=$(date +%s)
for r in "${runs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one $r &
done
wait
echo "sanitize: ran in $(( $(date +%s) - t_run )) s"

# The sanitizer runtimes of g++ print "<null>" for some frames of large binaries that addr2line
# resolves: add the source lines (with inlined frames) under such frames.
symbolize() {  # symbolize BINARY < report
  local bin=$1 line off
  while IFS= read -r line; do
    printf '%s\n' "$line"
    if [[ $line =~ \<null\>\ \(${bin##*/}\+(0x[0-9a-f]+)\) ]] && command -v addr2line >/dev/null; then
      off=${BASH_REMATCH[1]}
      addr2line -e "$bin" -i -f -C "$off" 2>/dev/null | paste -d' ' - - | sed 's/^/          at /'
    fi
  done
}
status=0
for s in "${sans[@]}"; do
  b="$out/build-$s"
  if [ "$s" = asan ]; then list=("${asan_tests[@]}"); else list=("${tsan_tests[@]}"); fi
  for t in "${list[@]}"; do
    log="$b/$t.run.log"
    rc=$(cat "$b/$t.rc" 2>/dev/null || echo missing)
    # A report counts even if the process exited 0; the markers are the runtimes' own headers.
    reports=$(grep -cE '^(==[0-9]+==ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|.*: runtime error: )' "$log" || true)
    summary=$(grep -E '^\[doctest\] test cases' "$log" | tr -s ' ' | sed 's/^\[doctest\] //' || true)
    if [ "$rc" = 0 ] && [ "$reports" = 0 ]; then
      if [[ $summary =~ test\ cases:\ *0\ \| ]]; then
        echo "sanitize: $s $t FAILED: no test case ran (filter -sf=*tests/$t.cpp matched nothing?)"
        status=1
        continue
      fi
      echo "sanitize: $s $t clean ($summary)"
      continue
    fi
    status=1
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      echo "sanitize: $s $t FAILED: still running after ${run_limit} s (a hang?); last lines:"
      tail -40 "$log"
      continue
    fi
    echo "sanitize: $s $t FAILED (exit $rc, $reports sanitizer report(s); ${summary:-no doctest summary})"
    if [ "$reports" != 0 ]; then
      # Each report from its header to its SUMMARY line.
      awk '/^(==[0-9]+==ERROR: |WARNING: ThreadSanitizer|.*: runtime error: )/ {p = 1}
           p {print}
           /^SUMMARY: / {p = 0}' "$log" | head -150 | symbolize "$b/gsync_${s}_tests"
    fi
    # Failed test cases (doctest prints "file:line: ERROR:" or "FATAL ERROR:" under the case's name).
    grep -E -B6 -A6 ': (FATAL )?ERROR: ' "$log" | head -60 || true
    echo "(whole log: $log)"
  done
done
[ $status = 0 ] && echo "sanitize: all clean" || echo "sanitize: FAILED"
exit $status
