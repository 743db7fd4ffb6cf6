#!/usr/bin/env bash
# The link doctor on the shaped namespace cluster (benchmarks/netcluster.sh):
#   1. 4 hosts x 1 rank, every link 400 Mbit/s: gsync-doctor exits 0 and flags nothing;
#   2. the same cluster with host 2's uplink (what it sends) throttled to 40 Mbit/s: the doctor exits
#      1, names the pairs 2 -> 0, 2 -> 1, 2 -> 3 as slow, and names host 2 (and no other) as slow.
#   doctor_netcluster.sh NETCLUSTER_SH GSYNC_DOCTOR
# Exit 77 (skipped) when not root or the machine cannot build the cluster.
set -euo pipefail
nc=${1:?usage: doctor_netcluster.sh NETCLUSTER_SH GSYNC_DOCTOR}
doctor=${2:?usage: doctor_netcluster.sh NETCLUSTER_SH GSYNC_DOCTOR}
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gsync-doctor-test.XXXXXX")
export NETCLUSTER_STATE=$work/cluster
cleanup() {
  local rc=$?
  [[ -f $NETCLUSTER_STATE ]] && bash "$nc" down >/dev/null 2>&1
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
export GSYNC_TIMEOUT_S=60

rc=0
id=$(bash "$nc" up 4 400) || rc=$?
((rc != 77)) || { echo "SKIP: netcluster.sh cannot build the cluster here"; exit 77; }
((rc == 0)) || fail "netcluster.sh up exited with $rc"
args=(--bytes 512K --iters 2 --repeat 2 --lat-iters 10 --threshold 0.5)

echo "== 4 hosts, every link 400 Mbit/s"
rc=0
out=$(bash "$nc" run "$id" --timeout-s 120 --no-tag-output -- "$doctor" "${args[@]}" 2>&1) || rc=$?
echo "$out"
((rc == 0)) || fail "the doctor exited with $rc on a healthy cluster"
grep -q "SLOW" <<<"$out" && fail "the doctor flagged something on a healthy cluster"
for r in 0 1 2 3; do
  grep -Eq "^ +$r +nc$id-host$r +gsnc${id}h$r +198\.18\.$id\.$((r + 1)) " <<<"$out" || fail "rank $r's host, interface and address are not reported"
done

echo "== host 2's uplink throttled to 40 Mbit/s"
bash "$nc" exec "$id" 2 -- tc qdisc replace dev "gsnc${id}h2" root tbf rate 40mbit burst 131072 latency 20ms
rc=0
out=$(bash "$nc" run "$id" --timeout-s 120 --no-tag-output -- "$doctor" "${args[@]}" 2>&1) || rc=$?
echo "$out"
((rc == 1)) || fail "the doctor exited with $rc, expected 1 (a slow pair)"
for p in 0 1 3; do
  grep -q "^SLOW pair 2 -> $p " <<<"$out" || fail "pair 2 -> $p is not flagged"
done
grep -q "^SLOW host nc$id-host2: " <<<"$out" || fail "host 2 is not named"
[[ $(grep -c "^SLOW host " <<<"$out") == 1 ]] || fail "a host other than host 2 was named"
[[ $(grep -c "^SLOW pair " <<<"$out") == 3 ]] || fail "expected exactly the 3 pairs from host 2 flagged"
echo "PASS"
