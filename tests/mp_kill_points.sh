#!/usr/bin/env bash
# SIGKILL one rank at a chosen point of a gsync job and check how the others fail (issue 5: "a
# rank killed at any point of any collective: every surviving rank raises gsync::error peer_lost,
# naming the lost rank, within 5 s with default settings").
#
#   mp_kill_points.sh MP_FAULTS GSYNCRUN [IBV_EMU_LIB]
#
# With IBV_EMU_LIB (the stand-in libibverbs, tests/support/ibv_emu/), the verbs plan instead of the
# one below: the same points with the ranks on two hosts (tests/support/verbs_env.sh: verbs across
# them, shared memory inside each), keyed, GSYNC_NET_PROBE=0 (the start-up probe is the sweep's,
# tests/mp_verbs.sh), each job on a fabric of its own. Its rows also check that the set-up logged
# verbs on every pair across the hosts and TCP on none, and time the failure apart from the exit:
# every survivor's "CAUGHT" line (mp_faults notes the error as it leaves the mode, before the
# communicator's teardown) must come within the limit (5 s; 2 s for SIGSTOP); the exit may take
# 2 s longer per verbs peer of the larger host, plus 1 s, and the watchdog as much: the verbs
# link's close() waits up to 2 s per peer for its queue pair to acknowledge a last zero-length
# write, which a peer already gone never does (transport/links/verbs_link.hpp). The gsyncrun row
# at the end runs its ranks through verbs_env.sh's wrapper and checks the set-up's log as well.
#
# For each row of the plan below: start N ranks of tests/mp_faults.cpp at point MODE (over shared
# memory, or over TCP with GSYNC_SHM_DISABLE=1), wait until every rank printed READY, SIGKILL the
# victim (rank 0 included: it serves the store), and assert that
#   - the victim died of the SIGKILL (137), so the kill really happened at that point;
#   - every survivor exited 42 (gsync::error peer_lost; 43 timeout, 44 mismatch, 45 another kind,
#     46 another exception, 47 still blocked 8 s after READY, i.e. a hang);
#   - the survivor's error message names the killed rank ("rank K");
#   - the last survivor exited less than 5 s after the kill (measured with date +%s%N);
#   - no /dev/shm/gsync-PID-* segment of any of the job's processes is left.
# GSYNC_TIMEOUT_S is unset: detection must not rely on a short deadline. The TCP rows run with a
# job key, the shared-memory rows without. The rows after `sig=STOP` stop the victim (SIGSTOP)
# instead, with GSYNC_LIVENESS_S=2: a stopped process's kernel keeps its connections open, so only
# gsync's heartbeat can find it, and the last survivor must have failed within those 2 s; then
# the victim is killed. Then once through
# gsyncrun: kill a rank it started; gsyncrun must exit with that rank's status (137) and name it.
# Ports are random in 10000..29999, retried when the store's port is taken. Every row runs (a
# failing row does not stop the others); the table at the end shows each one, and the script
# exits 1 if any row failed.
set -u
prog=${1:?usage: mp_kill_points.sh MP_FAULTS GSYNCRUN [IBV_EMU_LIB]}
gsyncrun=${2:?usage: mp_kill_points.sh MP_FAULTS GSYNCRUN [IBV_EMU_LIB]}
ibv_lib=${3:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_kill_points.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -n "$ibv_lib" ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/support/verbs_env.sh"
  verbs_setup "$ibv_lib" || { echo "SKIP: no stand-in libibverbs at $ibv_lib"; exit 77; }
  trap 'rm -rf "$tmp"; verbs_cleanup' EXIT
fi
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_SHM_DISABLE GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT
unset GSYNC_ALGO_BROADCAST GSYNC_ALGO_ALLGATHER GSYNC_HOST_ID GSYNC_SEGMENT_BYTES
limit_ms=5000
watchdog_s=8
sig=KILL  # what the rows below do to the victim (KILL, or STOP: see above)
now_ns() { date +%s%N; }

rows=()
failed=0
# add_row POINT TRANSPORT N VICTIM SURVIVORS MS_LAST ROW_START_NS VERDICT [MS_CAUGHT]
add_row() {
  rows+=("$(printf '%-10s %-5s %2s %6s  %-12s %8s %9s %7s  %s' "$1" "$2" "$3" "$4" "$5" "$6" "${9:--}" $((($(now_ns) - $7) / 1000000)) "$8")")
}
script_start=$(now_ns)

# run_point MODE TRANSPORT N VICTIM [extra mp_faults args...]
#   TRANSPORT: shm (one host, shared memory), tcp (GSYNC_SHM_DISABLE=1) or verbs (two hosts)
run_point() {
  local mode=$1 transport=$2 n=$3 victim=$4
  shift 4
  local extra=("$@")
  local row_start live=() lim=$limit_ms wd=$watchdog_s exit_lim
  row_start=$(now_ns)
  if [ "$sig" = STOP ]; then live=(GSYNC_LIVENESS_S=2); lim=2000; fi
  exit_lim=$lim
  if [ "$transport" = verbs ]; then
    # The exit may take 2 s longer per verbs peer of the larger host (see the file comment), and
    # a second more for the load of two cores.
    exit_lim=$((lim + 2000 * ((n + 1) / 2) + 1000))
    wd=$((watchdog_s + 2 * ((n + 1) / 2)))
  fi
  local attempt pids codes start ms taken r why="" caught_ms=-
  for attempt in 1 2 3; do
    rm -f "$tmp"/out.* "$tmp"/err.*
    [ "$transport" = verbs ] && verbs_fabric
    local port=$((10000 + RANDOM % 20000))
    pids=()
    # The TCP rows run authenticated (a key per run), the shared-memory rows without: the failure
    # protocol must hold either way.
    local key=""
    [ "$transport" != shm ] && key=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
    for ((r = 0; r < n; r++)); do
      if [ "$transport" = tcp ]; then
        env "${live[@]}" GSYNC_JOB_KEY=$key GSYNC_SHM_DISABLE=1 GSYNC_RANK=$r GSYNC_WORLD_SIZE=$n GSYNC_MASTER_PORT=$port GSYNC_ALGO=ring \
          "$prog" --mode "$mode" --victim "$victim" --watchdog-s $wd "${extra[@]}" >"$tmp/out.$r" 2>"$tmp/err.$r" &
      elif [ "$transport" = verbs ]; then
        env "${live[@]}" GSYNC_JOB_KEY=$key GSYNC_HOST_ID="$(verbs_host $r "$n")" GSYNC_DEBUG=INFO GSYNC_NET_PROBE=0 \
          GSYNC_RANK=$r GSYNC_WORLD_SIZE=$n GSYNC_MASTER_PORT=$port GSYNC_ALGO=ring \
          "$prog" --mode "$mode" --victim "$victim" --watchdog-s $wd "${extra[@]}" >"$tmp/out.$r" 2>"$tmp/err.$r" &
      else
        env "${live[@]}" GSYNC_RANK=$r GSYNC_WORLD_SIZE=$n GSYNC_MASTER_PORT=$port GSYNC_ALGO=ring \
          "$prog" --mode "$mode" --victim "$victim" --watchdog-s $wd "${extra[@]}" >"$tmp/out.$r" 2>"$tmp/err.$r" &
      fi
      pids+=($!)
    done
    # Wait (at most 20 s) until every rank is at its point, or one has already exited.
    local ready=0 gone=0 i
    for ((i = 0; i < 1000; i++)); do
      ready=$(cat "$tmp"/out.* 2>/dev/null | grep -c '^READY')
      [ "$ready" -ge "$n" ] && break
      gone=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || gone=1; done
      [ "$gone" = 1 ] && break
      sleep 0.02
    done
    taken=0
    grep -q "cannot listen" "$tmp"/err.* 2>/dev/null && taken=1
    if [ "$ready" -lt "$n" ]; then
      for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
      for p in "${pids[@]}"; do { wait "$p"; } 2>/dev/null; done
      if [ "$taken" = 1 ]; then echo "port $port taken; retrying"; why="the store's port was taken 3 times"; continue; fi
      why="only $ready of $n ranks reached the point"
      codes=(); ms=-1
      break
    fi
    # Setup and store points: the survivors printed READY just before entering the constructor;
    # give them time to block inside it. Loops: kill at a random moment of the stream.
    case $mode in
      setup|store) sleep 0.4 ;;
      *) sleep "0.$(printf '%03d' $((RANDOM % 300)))" ;;
    esac
    start=$(now_ns)
    kill -"$sig" "${pids[$victim]}"
    codes=()
    for ((r = 0; r < n; r++)); do
      [ "$r" = "$victim" ] && continue
      { wait "${pids[$r]}"; } 2>/dev/null
      codes[$r]=$?
    done
    ms=$((($(now_ns) - start) / 1000000))
    [ "$sig" = STOP ] && kill -9 "${pids[$victim]}"
    { wait "${pids[$victim]}"; } 2>/dev/null
    codes[$victim]=$?
    [ "$transport" = verbs ] && rm -f "/dev/shm/$GSYNC_IBV_EMU"
    # The last survivor's failure, as mp_faults noted it before its teardown.
    local c last=""
    for ((r = 0; r < n; r++)); do
      [ "$r" = "$victim" ] && continue
      c=$(sed -n "s/^CAUGHT rank $r at \([0-9]*\)\$/\1/p" "$tmp/out.$r" | head -1)
      if [ -z "$c" ]; then last=""; break; fi
      [ -z "$last" ] || [ "$c" -gt "$last" ] && last=$c
    done
    if [ -n "$last" ]; then caught_ms=$(((last - start) / 1000000)); else caught_ms=-; fi
    # At the setup points the survivors said READY before the store was up: a taken port shows here.
    if grep -q "cannot listen" "$tmp"/err.* 2>/dev/null; then echo "port $port taken; retrying"; why="the store's port was taken 3 times"; continue; fi
    why=""
    break
  done
  # Checks.
  if [ -z "$why" ]; then
    [ "${codes[$victim]}" = 137 ] || why="the victim exited ${codes[$victim]} before the kill"
  fi
  if [ -z "$why" ]; then
    for ((r = 0; r < n; r++)); do
      [ "$r" = "$victim" ] && continue
      if [ "${codes[$r]}" != 42 ]; then why="rank $r exited ${codes[$r]}, not 42 (peer_lost)"; break; fi
      local line
      line=$(grep -m1 "^rank $r: " "$tmp/err.$r")
      if ! printf '%s\n' "$line" | sed "s/^rank $r: //" | grep -Eq "rank $victim([^0-9]|\$)"; then
        why="rank $r does not name rank $victim: ${line:-<no error line>}"
        break
      fi
    done
  fi
  if [ -z "$why" ] && [ "$transport" = verbs ]; then
    if [ "$caught_ms" = - ]; then why="a survivor did not note its failure (CAUGHT)"
    elif [ "$caught_ms" -ge "$lim" ]; then why="the last survivor failed ${caught_ms} ms after the $sig"
    fi
  fi
  if [ -z "$why" ] && [ "$ms" -ge "$exit_lim" ]; then why="the last survivor exited ${ms} ms after the $sig"; fi
  # Verbs on every pair across the hosts (the set-up of modes setup and store never finishes).
  if [ -z "$why" ] && [ "$transport" = verbs ] && [ "$mode" != setup ] && [ "$mode" != store ]; then
    why=$(verbs_links_check "$n" "$tmp"/err.*)
  fi
  if [ -z "$why" ]; then
    local p left
    for p in "${pids[@]}"; do
      left=$(ls /dev/shm 2>/dev/null | grep "^gsync-$p-" || true)
      if [ -n "$left" ]; then
        why="left in /dev/shm: $left"
        rm -f /dev/shm/gsync-"$p"-*
        break
      fi
    done
  fi
  local surv=""
  for ((r = 0; r < n; r++)); do [ "$r" = "$victim" ] || surv+="${surv:+,}${codes[$r]:-?}"; done
  local verdict=ok
  if [ -n "$why" ]; then
    verdict="FAIL: $why"
    failed=1
    echo "---- $mode/$transport N=$n victim $victim failed: $why"
    for ((r = 0; r < n; r++)); do sed "s/^/  [$r] /" "$tmp/err.$r" 2>/dev/null | grep -v 'GSYNC_JOB_KEY is not set'; done
  fi
  add_row "$mode$([ "$sig" = STOP ] && echo /STOP)" "$transport" "$n" "$victim" "$surv" "$ms" "$row_start" "$verdict" "$caught_ms"
}

if [ -z "$ibv_lib" ]; then
# point      transport N victim (extra)
run_point setup     shm 4 2
run_point setup     shm 3 0
run_point store     shm 4 1
run_point store     shm 4 3
run_point store     shm 3 0
run_point ring      shm 4 1
run_point ring      tcp 4 2 --mib 16
run_point ring      shm 3 0
run_point ring      tcp 3 0 --mib 16
run_point barrier   shm 3 2
run_point barrier   tcp 4 1
run_point idle      shm 3 1
run_point idle      tcp 4 0
run_point bcast     shm 4 2 --root 0
run_point bcast     tcp 4 0 --root 0
run_point allgather shm 3 1
run_point allgather tcp 4 3
run_point p2p       shm 3 1
run_point p2p       tcp 4 2
run_point async     shm 3 1
run_point async     tcp 4 2
# Several communicators open (world, rows, columns), one thread each: every thread of every
# survivor fails naming the victim, also those whose communicator does not hold it.
run_point split     shm 4 1
run_point split     tcp 4 2
run_point split     tcp 6 0
# Stopped, not killed (SIGSTOP): found by the heartbeat alone, within GSYNC_LIVENESS_S=2.
sig=STOP
run_point ring      shm 4 1
run_point ring      tcp 4 0 --mib 16
run_point barrier   tcp 3 2
run_point idle      shm 3 0
run_point idle      tcp 4 3
run_point p2p       tcp 3 1
run_point async     shm 3 2
run_point split     tcp 4 1
sig=KILL
else
# The verbs plan: each point where a verbs peer waits in a way of its own (the set-up's store
# waits for the verbs records, a ring across the hosts with frames larger than the verbs ring,
# rank 0 that serves the store, a broadcast and an allgather, a sender across hosts, the async
# engine, three communicators sharing the links), then stopped ranks found by the heartbeat.
run_point setup     verbs 4 2
run_point ring      verbs 4 1 --mib 16
run_point ring      verbs 3 0 --mib 16
run_point bcast     verbs 4 3 --root 0
run_point allgather verbs 3 2
run_point p2p       verbs 3 2
run_point async     verbs 3 1
run_point split     verbs 4 1
sig=STOP
run_point ring      verbs 3 2 --mib 16
run_point idle      verbs 3 0
sig=KILL
fi

# Through gsyncrun: kill rank 2 of 4 mid-ring; gsyncrun must exit 137 (the first failure, a
# SIGKILL) and name rank 2 in its output.
gr_why=""
gr_start=$(now_ns)
gr_via=shm gr_wrap=() gr_wd=$watchdog_s gr_x=()
if [ -n "$ibv_lib" ]; then  # the ranks on two hosts, verbs between them
  gr_via=verbs gr_wrap=("${verbs_rank[@]}") gr_wd=$((watchdog_s + 4)) gr_x=(-x GSYNC_DEBUG=INFO -x GSYNC_NET_PROBE=0)
  verbs_fabric
fi
"$gsyncrun" -n 4 -x GSYNC_ALGO=ring "${gr_x[@]}" -- "${gr_wrap[@]}" "$prog" --mode ring --victim 2 --mib 16 --watchdog-s $gr_wd >"$tmp/gsyncrun.out" 2>&1 &
gr=$!
vpid=""
for ((i = 0; i < 1000; i++)); do
  [ "$(grep -c 'READY ring' "$tmp/gsyncrun.out")" -ge 4 ] && break
  kill -0 "$gr" 2>/dev/null || break
  sleep 0.02
done
vpid=$(sed -n 's/^\[2\] READY ring rank 2 pid \([0-9]*\).*/\1/p' "$tmp/gsyncrun.out" | head -1)
if [ -z "$vpid" ]; then
  gr_why="rank 2 of gsyncrun's job never reached the ring"
  kill "$gr" 2>/dev/null
  wait "$gr"
  gr_rc=$?
  gr_ms=-1
else
  sleep 0.1
  start=$(now_ns)
  kill -9 "$vpid"
  wait "$gr"
  gr_rc=$?
  gr_ms=$((($(now_ns) - start) / 1000000))
  if [ "$gr_rc" != 137 ]; then gr_why="gsyncrun exited $gr_rc, not 137 (rank 2's SIGKILL)"
  elif ! grep -Eq "rank 2 \(pid $vpid\) killed by signal" "$tmp/gsyncrun.out"; then gr_why="gsyncrun's output does not name rank 2 as killed"
  elif [ "$gr_ms" -ge 10000 ]; then gr_why="gsyncrun took ${gr_ms} ms after the kill"
  elif [ -n "$ibv_lib" ]; then gr_why=$(verbs_links_check 4 "$tmp/gsyncrun.out")
  fi
fi
[ -n "$ibv_lib" ] && rm -f "/dev/shm/$GSYNC_IBV_EMU"
if [ -n "$gr_why" ]; then
  failed=1
  echo "---- gsyncrun failed: $gr_why"
  sed 's/^/  /' "$tmp/gsyncrun.out" | grep -v 'GSYNC_JOB_KEY is not set'
  add_row gsyncrun $gr_via 4 2 "rc=$gr_rc" "$gr_ms" "$gr_start" "FAIL: $gr_why"
else
  add_row gsyncrun $gr_via 4 2 "rc=$gr_rc" "$gr_ms" "$gr_start" "ok ($(grep -m1 -o 'rank 2 (pid [0-9]*) killed by signal [A-Z0-9]*' "$tmp/gsyncrun.out"))"
fi

echo
printf '%-10s %-5s %2s %6s  %-12s %8s %9s %7s  %s\n' point trans N victim survivors ms_last ms_caught row_ms verdict
for row in "${rows[@]}"; do echo "$row"; done
echo "(survivor codes: 42 peer_lost, 43 timeout, 44 mismatch, 45 other gsync::error, 46 other exception, 47 hang;"
echo " ms_last: the last survivor's exit after the kill; ms_caught: its error, before its teardown)"
echo "total $((($(now_ns) - script_start) / 1000000)) ms"
if [ "$failed" = 1 ]; then echo FAIL; exit 1; fi
echo PASS
