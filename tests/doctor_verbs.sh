#!/usr/bin/env bash
# gsync-doctor over the verbs link (issue: "the link doctor measures verbs pairs too, naming device
# and port"): 4 ranks as processes on two hosts (tests/support/verbs_env.sh: shared memory inside a
# host, verbs across, through the stand-in libibverbs). Checks that every rank's row names its
# adapter and port, that each rank lists its two cross-host peers under verbs and its host mate
# under shm, that the report has a verbs median, and that the JSON names every direction's medium.
# Bandwidth is not judged (--threshold 0.01): the stand-in's copies say nothing of a real link.
#
#   doctor_verbs.sh GSYNC_DOCTOR GSYNCRUN IBV_EMU_LIB
set -u
doctor=${1:?usage: doctor_verbs.sh GSYNC_DOCTOR GSYNCRUN IBV_EMU_LIB}
gsyncrun=${2:?usage}
lib=${3:?usage}
source "$(dirname "${BASH_SOURCE[0]}")/support/verbs_env.sh"
verbs_setup "$lib" || { echo "SKIP: no stand-in libibverbs at $lib"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_doctor_verbs.XXXXXX")
trap 'rm -rf "$tmp"; verbs_cleanup' EXIT
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_SHM_DISABLE GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT GSYNC_HOST_ID
verbs_fabric
timeout 120 "$gsyncrun" -n 4 -- "${verbs_rank[@]}" "$doctor" --bytes 256K --iters 2 --repeat 1 --lat-iters 10 \
  --threshold 0.01 --json "$tmp/d.json" >"$tmp/out" 2>&1
rc=$?
sed 's/^/    /' "$tmp/out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc = 0 ] || fail "gsync-doctor exited $rc"
# Rank rows: "rank host interface address rdma peers"; ranks 0,1 on ib-a, 2,3 on ib-b.
for r in 0 1 2 3; do
  line=$(grep -E "^\[0\] +$r  " "$tmp/out" | head -1)
  [ -n "$line" ] || fail "no row for rank $r"
  echo "$line" | grep -qE ' emu[0-9]+:[0-9]+ ' || fail "rank $r's row names no adapter and port: $line"
  if [ $r -lt 2 ]; then want_v="verbs 2 3" mate=$((1 - r)); else want_v="verbs 0 1" mate=$((5 - r)); fi
  echo "$line" | grep -q "shm $mate; $want_v" || fail "rank $r's peers are not 'shm $mate; $want_v': $line"
done
grep -q 'median verbs bandwidth (one pair at a time)' "$tmp/out" || fail "no verbs median"
grep -q 'median shm bandwidth (one pair at a time)' "$tmp/out" || fail "no shm median"
grep -q '"media": \["", "shm", "verbs", "verbs", "shm", "", "verbs", "verbs", "verbs", "verbs", "", "shm", "verbs", "verbs", "shm", ""\]' \
  "$tmp/d.json" || fail "the JSON's media are not shm inside a host and verbs across: $(grep media "$tmp/d.json")"
echo "doctor_verbs: ok"
