#!/usr/bin/env bash
# gsync across fake hosts: benchmarks/netcluster.sh builds network namespaces joined by a bridge,
# links shaped to 1 Gbit/s, and the multi-process check program runs across them.
#
#   netcluster_test.sh NETCLUSTER_SH GSYNC_MP_CHECK
#
#  1. 2 hosts x 2 ranks: every rank sees its own host's interface and GSYNC_* variables, and
#     gsync_mp_check (all dtypes/ops/sizes, checked against a reference) passes;
#  2. 3 hosts x 1 rank: gsync_mp_check passes; a rank that dies mid-collective makes `run` fail
#     promptly with that rank's status (3) instead of hanging;
#  3. liveness without a FIN (GSYNC_LIVENESS_S=2): rank 2 stopped (SIGSTOP) and host 2's link cut,
#     each in the middle of a stream of collectives and while every rank is between operations
#     (polling comm.health()): both survivors fail with peer_lost naming rank 2 within the 2 s;
#  4. after every `down` (also when a step fails: EXIT trap) no namespace of the cluster is left.
# Exit 77 (skipped, reason printed) when not root or the machine cannot create namespaces, veths
# or tbf qdiscs (netcluster.sh itself reports those as 77).
set -euo pipefail

nc=${1:?usage: netcluster_test.sh NETCLUSTER_SH GSYNC_MP_CHECK}
check=${2:?usage: netcluster_test.sh NETCLUSTER_SH GSYNC_MP_CHECK}
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
[[ -x $check ]] || { echo "FAIL: $check is not an executable"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gsync-netcluster-test.XXXXXX")
# Each cluster's id goes to this file (netcluster.sh up writes it; down removes it), so the trap
# can remove a cluster even when a step failed between `up` and `down`.
export NETCLUSTER_STATE=$work/cluster
ids=()

fail() {
  echo "FAIL: $*"
  exit 1
}

# The namespaces of cluster $1 that exist (netcluster.sh names them gsnc<ID>-...).
leftovers() { ip netns list 2>/dev/null | awk -v p="gsnc$1-" 'index($1, p) == 1 { print $1 }'; }

cleanup() {
  local rc=$? id
  if [[ -f $NETCLUSTER_STATE ]]; then bash "$nc" down >/dev/null 2>&1 || true; fi
  for id in "${ids[@]}"; do
    if [[ -n $(leftovers "$id") ]]; then
      bash "$nc" down "$id" >/dev/null 2>&1 || true
      echo "FAIL: cluster $id left namespaces behind: $(leftovers "$id" | tr '\n' ' ')"
      rc=1
    fi
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Brings a cluster up (H RATE L); skips the test when netcluster.sh says the machine cannot.
up() {
  local rc=0 id
  id=$(bash "$nc" up "$@") || rc=$?
  ((rc != 77)) || { echo "SKIP: netcluster.sh up reported that this machine cannot build the cluster"; exit 77; }
  ((rc == 0)) || fail "netcluster.sh up $* exited with $rc"
  ids+=("$id")
  echo "$id"
}

down() {
  local id=$1
  bash "$nc" down "$id" || fail "netcluster.sh down $id failed"
  bash "$nc" down "$id" || fail "a second netcluster.sh down $id failed (must be idempotent)"
  [[ -z $(leftovers "$id") ]] || fail "namespaces left after down: $(leftovers "$id" | tr '\n' ' ')"
  [[ ! -e ${NETCLUSTER_DIR:-/tmp}/gsync-netcluster-$id ]] || fail "state directory of cluster $id left after down"
}

start=$SECONDS
export GSYNC_TIMEOUT_S=30

echo "== 2 hosts x 2 ranks, 1000 Mbit/s"
id=$(up 2 1000 2)
bash "$nc" list
# Placement: rank r runs in host r/2, with that host's interface, address and host id.
out=$(bash "$nc" run "$id" --timeout-s 20 -- sh -c \
  'echo "$GSYNC_RANK/$GSYNC_WORLD_SIZE local $GSYNC_LOCAL_RANK/$GSYNC_LOCAL_WORLD_SIZE if $GSYNC_SOCKET_IFNAME host $GSYNC_HOST_ID master $GSYNC_MASTER_ADDR addr $(ip -o -4 addr show dev "$GSYNC_SOCKET_IFNAME" | awk "{print \$4}")"') ||
  fail "run of sh -c failed"
echo "$out"
for r in 0 1 2 3; do
  h=$((r / 2))
  want="[$r] $r/4 local $((r % 2))/2 if gsnc${id}h$h host nc$id-host$h master 198.18.$id.1 addr 198.18.$id.$((h + 1))/24"
  grep -qxF "$want" <<<"$out" || fail "rank $r: expected the line '$want'"
done
out=$(bash "$nc" run "$id" --timeout-s 40 -- "$check" 2>&1) || { echo "$out"; fail "gsync_mp_check failed on 2 hosts x 2 ranks"; }
echo "$out"
[[ $(grep -c "all results correct" <<<"$out") == 4 ]] || fail "expected 4 ranks reporting correct results"
# The hierarchical allreduce, forced: shared memory inside each fake host, TCP across.
out=$(GSYNC_ALGO=hierarchical bash "$nc" run "$id" --timeout-s 40 -- "$check" 2>&1) ||
  { echo "$out"; fail "gsync_mp_check with GSYNC_ALGO=hierarchical failed on 2 hosts x 2 ranks"; }
[[ $(grep -c "all results correct" <<<"$out") == 4 ]] || fail "hierarchical: expected 4 ranks reporting correct results"
down "$id"

echo "== 2 hosts x 3 ranks, 1000 Mbit/s, hierarchical"
id=$(up 2 1000 3)
out=$(GSYNC_ALGO=hierarchical GSYNC_DEBUG=INFO bash "$nc" run "$id" --timeout-s 40 -- "$check" 2>&1) ||
  { echo "$out"; fail "gsync_mp_check with GSYNC_ALGO=hierarchical failed on 2 hosts x 3 ranks"; }
grep "peers: " <<<"$out" || true
[[ $(grep -c "all results correct" <<<"$out") == 6 ]] || { echo "$out"; fail "hierarchical 2x3: expected 6 ranks reporting correct results"; }
grep -q "peers: 2 over shm, 3 over tcp" <<<"$out" || { echo "$out"; fail "2x3: expected each rank to reach 2 peers by shared memory and 3 by TCP"; }
down "$id"

echo "== 3 hosts x 1 rank, 1000 Mbit/s"
id=$(up 3 1000)
out=$(bash "$nc" run "$id" --timeout-s 40 -- "$check" 2>&1) || { echo "$out"; fail "gsync_mp_check failed on 3 hosts x 1 rank"; }
echo "$out"
[[ $(grep -c "all results correct" <<<"$out") == 3 ]] || fail "expected 3 ranks reporting correct results"
# Rank 1 exits (status 3) 300 ms into a stream of 16 MiB allreduces: the survivors raise peer_lost
# and `run` returns the first failure's status within seconds (grace 2 s at most).
t0=$SECONDS
rc=0
out=$(bash "$nc" run "$id" --timeout-s 30 -- "$check" --die-rank 1 --die-after-ms 300 2>&1) || rc=$?
echo "$out"
# The status is the first failure's: 3 from the dying rank. A survivor's 42 (peer_lost) can come
# out first only if, on a heavily loaded machine, the dead rank's parent shell is scheduled later
# than a survivor's detect-report-exit path; accepted, but noted.
case $rc in
  3) ;;
  42) echo "note: run reported a survivor's status (42) before the dead rank's (3); machine overloaded?" ;;
  *) fail "run with a dying rank exited with $rc, expected 3 (rank 1's status)" ;;
esac
((SECONDS - t0 <= 10)) || fail "run with a dying rank took $((SECONDS - t0)) s"
down "$id"

# Liveness without a FIN (issue 31): rank 2 is stopped (SIGSTOP) or host 2's link goes down, in
# the middle of a stream of 16 MiB allreduces (`loop`) or while every rank is between operations
# and polls comm.health() (`idle`); with GSYNC_LIVENESS_S=2 both survivors must fail naming rank 2
# within those 2 s (a stopped process's kernel still answers keepalives, and a cut link sends no
# FIN: the heartbeat of transport/mesh/heartbeat.hpp finds both). Each row: how long after the
# stop or cut both survivors had failed.
liveness_case() {
  local what=$1 how=$2 id=$3 out=$work/$1-$2.out pid rc=0 t0 ready=0 i idle=() victim
  [[ $how == idle ]] && idle=(--idle)
  # Rank 0 serves the store: after failing it keeps serving a while (bounded) so that the others
  # can read why, hence the long grace before `run` terminates it.
  GSYNC_LIVENESS_S=2 bash "$nc" run "$id" --timeout-s 60 --grace-s 20 -- "$check" --loop "${idle[@]}" >"$out" 2>&1 &
  pid=$!
  for ((i = 0; i < 400 && ready < 3; i++)); do
    ready=$(grep -c 'READY rank' "$out" || true)
    sleep 0.05
  done
  ((ready == 3)) || { cat "$out"; fail "$what/$how: the ranks did not all start"; }
  [[ $how == idle ]] && sleep 0.5  # every rank past its last allreduce
  t0=$(date +%s%N)
  if [[ $what == cut ]]; then
    bash "$nc" exec "$id" 2 -- ip link set "gsnc${id}h2" down
  else
    victim=$(sed -n 's/^\[2\] READY rank 2 pid \([0-9]*\)$/\1/p' "$out" | head -1)
    kill -STOP "$victim"
  fi
  # When both survivors have failed (each prints the error it caught).
  for ((i = 0; i < 600; i++)); do
    [[ $(grep -cE '^\[(0|1)\] rank (0|1): caught gsync::error' "$out" || true) -ge 2 ]] && break
    sleep 0.02
  done
  local ms=$((($(date +%s%N) - t0) / 1000000))
  [[ $what == stop ]] && { kill -KILL "$victim" || true; }
  wait "$pid" || rc=$?
  [[ $what == cut ]] && bash "$nc" exec "$id" 2 -- ip link set "gsnc${id}h2" up
  echo "$what/$how: both survivors failed $ms ms after it (run exit $rc)"
  grep -E '^\[(0|1)\] rank' "$out" || true
  ((rc != 0)) || fail "$what/$how: the job went on"
  for r in 0 1; do
    grep -qE "^\[$r\] rank $r: caught gsync::error \(peer lost\):.*rank 2" "$out" ||
      { cat "$out"; fail "$what/$how: rank $r did not fail with peer_lost naming rank 2"; }
  done
  ((ms < 2000)) || fail "$what/$how: the survivors took $ms ms (GSYNC_LIVENESS_S=2)"
}
echo "== 3 hosts x 1 rank: rank 2 stopped, host 2's link cut; mid-collective and between operations"
id=$(up 3 1000)
liveness_case stop loop "$id"
liveness_case stop idle "$id"
liveness_case cut idle "$id"
liveness_case cut loop "$id"
down "$id"

echo "PASS ($((SECONDS - start)) s)"
