#!/usr/bin/env bash
# The verbs tests on the kernel's soft-RoCE, run inside tools/rxe_guest.sh (ctest label rxe):
#
#   rxe_guest.sh [--pair] -- tests/rxe/suite.sh tests VERBS_TESTS [CASE...]
#   rxe_guest.sh --pair -- tests/rxe/suite.sh perf GSYNCRUN GSYNC_PERF OUT_DIR
#
# tests: the named cases of gsync_verbs_tests (doctest names; a ',' in a name is written '\,'),
#   one process each, on the real libibverbs and the guest's rxe devices (RXE_GUEST_DEVICES):
#   the first "host" of each world on the first device, the second on the second (with one
#   device, both "hosts" on it: two ranks on one rxe device). Each case must pass or report a
#   skip (printed as SKIP); a case that matches nothing fails.
# perf: gsync-perf at 2 and 4 ranks across two devices (tests/rxe/two_hosts.sh), allreduce and the
#   other collectives, every result checked; each rank must log its cross-host peers over verbs.
#   The tables go to OUT_DIR (under the guest's working directory: the guest's /tmp is its own).
#   Functional only: TCG runs the ranks 5-20x slower than hardware.
set -u
mode=${1:?usage: suite.sh tests VERBS_TESTS [CASE...] | perf GSYNCRUN GSYNC_PERF OUT_DIR}
shift
[ -n "${RXE_GUEST_DEVICES:-}" ] || { echo "suite.sh: run me through tools/rxe_guest.sh (no RXE_GUEST_DEVICES)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
note() { printf '%-8s %6s s  %s\n' "$1" "$2" "$3"; }

case $mode in
  tests)
    prog=${1:?VERBS_TESTS}
    shift
    export GSYNC_TEST_VERBS_DEVICES="$RXE_GUEST_DEVICES"
    echo "# gsync_verbs_tests on $RXE_GUEST_DEVICES (real libibverbs, rdma_rxe)"
    for tc in "$@"; do
      s=$(date +%s%N)
      timeout 600 "$prog" -tc="$tc" >"$out" 2>&1
      rc=$?
      t=$(( ($(date +%s%N) - s) / 1000000 ))
      t=$(printf '%d.%d' $((t / 1000)) $((t % 1000 / 100)))
      if [ $rc != 0 ]; then
        note FAIL "$t" "$tc (exit $rc)"; cat "$out"; failed=1
      elif grep -q '^\[doctest\] test cases: *0 ' "$out"; then
        note FAIL "$t" "$tc (no such case)"; failed=1
      elif grep -q 'GSYNC-TEST-SKIPPED' "$out"; then
        note SKIP "$t" "$tc: $(grep -o 'GSYNC-TEST-SKIPPED: .*' "$out" | head -1 | cut -d' ' -f2-)"
      else
        note ok "$t" "$tc"
      fi
    done
    ;;
  perf)
    run=${1:?GSYNCRUN} perf=${2:?GSYNC_PERF} dir=${3:?OUT_DIR}
    mkdir -p "$dir"
    read -r dev_a dev_b _ <<<"$RXE_GUEST_DEVICES"
    [ -n "${dev_b:-}" ] || { echo "suite.sh perf: needs two devices (rxe_guest.sh --pair)" >&2; exit 2; }
    # row N COLL MAXBYTES
    row() {
      local n=$1 coll=$2 max=$3 f="$dir/perf_${1}ranks_$2.txt" s rc t verbs wrong
      s=$(date +%s%N)
      GSYNC_DEBUG=INFO timeout 600 "$run" -n "$n" -- "$here/two_hosts.sh" "$perf" --coll "$coll" -b 8 -e "$max" -f 8 \
        -n 3 -w 1 >"$out" 2>&1
      rc=$?
      t=$(( ($(date +%s%N) - s) / 1000 ))
      t=$(printf '%d.%d' $((t / 1000000)) $((t % 1000000 / 100000)))
      grep -v 'INFO' "$out" | sed 's/^\[0\] //' >"$f"
      # Each rank's start-up line names its verbs peers: ranks of one half reach the other half's.
      verbs=$(grep -c 'INFO: peers: .*verbs on rxe[0-9]*:1 to' "$out")
      wrong=$(awk '$1 ~ /^[0-9]+$/ && $NF != 0' "$f" | wc -l)
      if [ $rc != 0 ] || [ "$verbs" != "$n" ] || [ "$wrong" != 0 ] || ! grep -q '^ *[0-9]' "$f"; then
        note FAIL "$t" "gsync-perf $coll, $n ranks: exit $rc, $verbs of $n ranks on verbs, $wrong rows wrong"
        cat "$out"; failed=1
      else
        note ok "$t" "gsync-perf $coll, $n ranks across $dev_a and $dev_b, 8 B..$max, #wrong 0 ($f)"
      fi
    }
    echo "# gsync-perf across $RXE_GUEST_DEVICES (real libibverbs, rdma_rxe; functional, not timing)"
    row 2 allreduce 1M
    row 4 allreduce 1M
    for c in reduce_scatter allgather broadcast reduce alltoall; do row 4 "$c" 256K; done
    ;;
  *) echo "suite.sh: unknown mode $mode" >&2; exit 2 ;;
esac
exit $failed
