#!/usr/bin/env bash
# netcluster.sh: a shaped virtual cluster on one Linux machine, for running gsync (or any TCP
# collective library) across "hosts" whose links have a fixed bandwidth.
#
#   netcluster.sh up H RATE_MBIT [L]          create H hosts, links shaped to RATE_MBIT, L ranks per host;
#                                             prints the cluster id on stdout
#   netcluster.sh run [ID] [opts] -- PROG ARGS   start H*L ranks of PROG across the hosts
#   netcluster.sh exec [ID] H -- CMD ARGS     run CMD in host H's network namespace
#   netcluster.sh iperf [ID] [SECONDS]        measure the shaped links with iperf3 (when installed)
#   netcluster.sh list                        clusters on this machine
#   netcluster.sh down [ID|--all]             remove the cluster (idempotent)
#
# Topology. Every fake host is a network namespace gsnc<ID>-h<K> with loopback up and one veth
# interface gsnc<ID>h<K> carrying 198.18.<ID>.<K+1>/24. The other end of each veth, port<K>, is a
# port of the bridge gsnc<ID>br, which lives in a namespace of its own (gsnc<ID>-br), so nothing is
# added to the root namespace: no interface, address, route or firewall rule. 198.18.0.0/15 is
# reserved for benchmarking (RFC 2544), so the addresses cannot clash with a real network, and each
# cluster uses its own /24 and its own bridge, so concurrent clusters (parallel ctest runs) are
# isolated from one another.
#
# Shaping. Both ends of every veth get a root `tc tbf` qdisc at RATE_MBIT: the host end shapes what
# the host sends, the bridge end what it receives, so each host has a full-duplex link of that rate
# to a non-blocking switch (two hosts sending to a third share that host's downlink, as on a real
# switch). Only the rate is shaped: no netem here, so no added delay, jitter or loss; the round trip
# is that of veth and the bridge (tens of microseconds).
#
# Ranks. `run` starts rank h*L + l in host h with GSYNC_RANK, GSYNC_WORLD_SIZE, GSYNC_LOCAL_RANK=l,
# GSYNC_LOCAL_WORLD_SIZE=L, GSYNC_MASTER_ADDR (host 0), GSYNC_MASTER_PORT (a free port),
# GSYNC_SOCKET_IFNAME (the host's veth) and GSYNC_HOST_ID (nc<ID>-host<h>, the same for ranks of one
# fake host: all namespaces share one kernel, so a library cannot tell the hosts apart by itself),
# and GSYNC_JOB_KEY (a random secret per run unless set).
# Every output line is prefixed with "[rank] " as gsyncrun does. When a rank fails, the others get
# --grace-s seconds to notice on their own (gsync raises peer_lost), then SIGTERM, then SIGKILL;
# the exit status is that of the first rank that failed.
#
# State lives in /tmp/gsync-netcluster-<ID>/state (or under $NETCLUSTER_DIR). The ID is the lowest
# free number 1..254, claimed with an atomic mkdir. Commands that take an optional ID use, in order:
# the argument, $NETCLUSTER_ID, the id written to the file $NETCLUSTER_STATE by `up` (when that
# variable is set), else the only cluster that exists.
#
# Exit status: 0 success; 77 skipped (not root, ip/tc missing, namespaces or tbf unavailable:
# the reason is printed); 2 usage errors; 1 other failures; for `run`, the first failing rank's status.
#
# Limits: all hosts share this machine's CPU cores and memory bandwidth, so results that are bound
# by CPU (small messages, reduction speed, many ranks) are not representative of real hosts.

set -euo pipefail

prog=netcluster.sh
base_dir=${NETCLUSTER_DIR:-/tmp}
prefix=gsnc

die() {
  echo "$prog: error: $*" >&2
  exit 1
}
skip() {
  echo "$prog: SKIP: $*" >&2
  exit 77
}
usage_error() {
  echo "$prog: $*" >&2
  echo "run '$prog help' for usage" >&2
  exit 2
}
note() { echo "$prog: $*" >&2; }

usage() {
  cat <<'EOF'
usage: netcluster.sh COMMAND ...   (as root)
  up H RATE_MBIT [L]        H hosts (1..250) in network namespaces on one bridge, every link shaped
                            with tc tbf to RATE_MBIT Mbit/s in both directions; L ranks per host
                            (default 1). Prints the cluster id on stdout.
  run [ID] [--port P] [--grace-s S] [--timeout-s S] [--no-tag-output] -- PROGRAM ARGS...
                            start H*L ranks (rank h*L+l on host h) with the GSYNC_* variables set
  exec [ID] H -- CMD ARGS   run CMD in host H's namespace (e.g. iperf3, ss, ip addr)
  iperf [ID] [SECONDS]      iperf3 throughput between hosts (default 3 s per measurement)
  list                      clusters on this machine (id, hosts, rate, ranks per host)
  down [ID | --all]         remove the cluster and its state; safe to repeat. --all removes every
                            netcluster on this machine, including other users' ones.
  help                      this text
ID: argument, else $NETCLUSTER_ID, else the id in the file $NETCLUSTER_STATE, else the only cluster.
Environment: NETCLUSTER_STATE=FILE (up writes the id there, down removes it), NETCLUSTER_DIR (state
directory root, default /tmp).
Exit status: 0 ok, 77 skipped (reason printed), 2 usage, 1 failure; run: the first failing rank's status.
EOF
}

# ---------------------------------------------------------------------------------------------
# Prerequisites and names.

# Everything here needs root and iproute2; a missing prerequisite is a skip (77), not a failure,
# so that test suites run as an ordinary user or in a restricted container report it as such.
require_tools() {
  [[ $(id -u) == 0 ]] || skip "must run as root (network namespaces, veth and tc need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
  command -v ip >/dev/null || skip "'ip' not found (install iproute2)"
  command -v tc >/dev/null || skip "'tc' not found (install iproute2)"
}

ns_host() { echo "${prefix}$1-h$2"; }  # namespace of host K of cluster ID
ns_bridge() { echo "${prefix}$1-br"; } # namespace of the bridge
if_host() { echo "${prefix}$1h$2"; }   # the host's veth (<= 15 characters: gsnc254h249)
if_bridge() { echo "${prefix}$1br"; }  # the bridge device
state_dir() { echo "$base_dir/gsync-netcluster-$1"; }
host_addr() { echo "198.18.$1.$(($2 + 1))"; }

# Namespaces of cluster ID that exist now (also those of a half-built or stale cluster).
cluster_namespaces() {
  ip netns list 2>/dev/null | awk -v p="${prefix}$1-" 'index($1, p) == 1 { print $1 }'
}

# Reads the state of cluster $1 into H, RATE, L (fails when the cluster does not exist).
load_state() {
  local id=$1 file key value
  file=$(state_dir "$id")/state
  [[ -f $file ]] || die "no cluster $id (no $file; see '$prog list')"
  H='' RATE='' L=''
  while IFS='=' read -r key value; do
    case $key in
      hosts) H=$value ;;
      rate_mbit) RATE=$value ;;
      ranks_per_host) L=$value ;;
    esac
  done <"$file"
  [[ $H =~ ^[0-9]+$ && $L =~ ^[0-9]+$ && $RATE =~ ^[0-9]+$ ]] || die "state file $file is damaged"
  [[ $'\n'$(cluster_namespaces "$id")$'\n' == *$'\n'"$(ns_host "$id" 0)"$'\n'* ]] ||
    die "cluster $id has a state file but no namespaces (run '$prog down $id')"
}

# Ids of the clusters that have a state directory.
cluster_ids() {
  local d
  for d in "$base_dir"/gsync-netcluster-*; do
    [[ -d $d && ${d##*-} =~ ^[0-9]+$ ]] && echo "${d##*-}"
  done
  return 0
}

# The cluster id from an explicit argument ($1, may be empty) or the fallbacks listed in usage.
resolve_id() {
  local id=${1:-}
  if [[ -z $id && -n ${NETCLUSTER_ID:-} ]]; then id=$NETCLUSTER_ID; fi
  if [[ -z $id && -n ${NETCLUSTER_STATE:-} && -f ${NETCLUSTER_STATE:-} ]]; then id=$(<"$NETCLUSTER_STATE"); fi
  if [[ -z $id ]]; then
    local ids
    mapfile -t ids < <(cluster_ids)
    ((${#ids[@]} == 1)) || die "${#ids[@]} clusters exist; give the id (see '$prog list')"
    id=${ids[0]}
  fi
  id=${id#"$prefix"}
  if ! { [[ $id =~ ^[0-9]+$ ]] && ((id >= 1 && id <= 254)); }; then usage_error "'$id' is not a cluster id (1..254)"; fi
  echo "$id"
}

# ---------------------------------------------------------------------------------------------
# down

# Removes every trace of cluster ID: processes still running in its namespaces (started by `run`
# or `exec`; a namespace with processes in it outlives `ip netns del`, and so would its veths),
# the namespaces (deleting a namespace deletes the veths and the bridge in it) and the state.
teardown() {
  local id=$1 ns pids=() p
  local nss
  mapfile -t nss < <(cluster_namespaces "$id")
  for ns in "${nss[@]}"; do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null || true)
  done
  if ((${#pids[@]})); then
    note "cluster $id: stopping ${#pids[@]} process(es) still running in its namespaces"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      local alive=0
      for p in "${pids[@]}"; do [[ -e /proc/$p ]] && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  # Hosts first, then the bridge: the veth pairs go with the host namespaces.
  for ns in "${nss[@]}"; do
    [[ $ns == "$(ns_bridge "$id")" ]] && continue
    ip netns del "$ns" 2>/dev/null || true
  done
  ip netns del "$(ns_bridge "$id")" 2>/dev/null || true
  rm -rf "$(state_dir "$id")"
  if [[ -n $(cluster_namespaces "$id") ]]; then
    echo "$prog: error: cluster $id: namespaces left: $(cluster_namespaces "$id" | tr '\n' ' ')" >&2
    return 1
  fi
  return 0
}

cmd_down() {
  require_tools
  if [[ ${1:-} == --all ]]; then
    local ids
    mapfile -t ids < <({ cluster_ids; ip netns list | awk -v p="$prefix" 'index($1, p) == 1 { s = substr($1, length(p) + 1); sub(/-.*/, "", s); print s }'; } | sort -un)
    local id rc=0
    for id in "${ids[@]}"; do
      [[ $id =~ ^[0-9]+$ ]] || continue
      teardown "$id" || rc=1
      note "cluster $id removed"
    done
    return $rc
  fi
  local id
  if [[ -z ${1:-} && -z ${NETCLUSTER_ID:-} && -n ${NETCLUSTER_STATE:-} && ! -f ${NETCLUSTER_STATE:-} ]]; then
    note "no cluster recorded in $NETCLUSTER_STATE; nothing to do"
    return 0
  fi
  id=$(resolve_id "${1:-}")
  if [[ ! -d $(state_dir "$id") && -z $(cluster_namespaces "$id") ]]; then
    note "cluster $id does not exist; nothing to do"
  else
    teardown "$id"
    note "cluster $id removed"
  fi
  if [[ -n ${NETCLUSTER_STATE:-} && -f $NETCLUSTER_STATE && $(<"$NETCLUSTER_STATE") == "$id" ]]; then
    rm -f "$NETCLUSTER_STATE"
  fi
}

# ---------------------------------------------------------------------------------------------
# up

# Token bucket parameters for RATE_MBIT (see the file comment for what is shaped).
#  - burst: the bucket must hold at least one maximal packet, and with TSO/GSO a veth hands tbf
#    super-packets of up to 64 KiB (tbf splits a GSO packet larger than the bucket into segments,
#    which is correct but costs CPU). It must also cover the time between two dequeue attempts:
#    tbf's watchdog is an hrtimer, but on a loaded 2-core VM the softirq that runs it can be late by
#    a millisecond or more, and tokens that would overflow the bucket in the meantime are lost, which
#    shows up as throughput below the rate (at 10 Gbit/s a 1 ms gap is 1.25 MB). So: 2 ms worth of
#    bytes at the rate, but at least 128 KiB (two GSO packets). At 100 Mbit/s that is 128 KiB
#    (10 ms of line rate as the largest burst after idle), at 1 Gbit/s 250 kB, at 10 Gbit/s 2.5 MB;
#    an idle link therefore sends its first ~2 ms of data unshaped, which changes the time of a
#    multi-megabyte allreduce by at most that amount once.
#  - latency: how long a packet may wait in the queue, which sets the queue limit
#    (rate * latency + burst). 20 ms is a deep switch buffer (2.5 MB at 1 Gbit/s), so TCP on one
#    uplink sees back-pressure rather than drops; when several senders converge on one host's
#    downlink the queue fills and drops, as in a real incast.
# No offloads are disabled: tbf charges every packet, GSO ones included, for its full length
# (qdisc_pkt_len), so the long-run rate is exact with them on (checked with iperf3, see
# benchmarks/README.md); ethtool is not needed.
tbf_args() {
  local rate=$1
  local burst=$((rate * 1000000 / 8 / 500)) # 2 ms of bytes
  ((burst >= 131072)) || burst=131072
  echo "rate ${rate}mbit burst ${burst} latency 20ms"
}

up_id=''
up_done=0
# EXIT trap of `up`: a cluster that is not complete is removed again, whatever stopped it.
up_cleanup() {
  local rc=$?
  if [[ -n $up_id && $up_done == 0 ]]; then
    note "up failed; removing the half-built cluster $up_id"
    teardown "$up_id" >/dev/null 2>&1 || true
  fi
  exit "$rc"
}

cmd_up() {
  (($# >= 2 && $# <= 3)) || usage_error "usage: $prog up H RATE_MBIT [L]"
  local hosts=$1 rate=$2 local_size=${3:-1}
  if ! { [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 250)); }; then usage_error "H '$hosts' must be 1..250"; fi
  if ! { [[ $rate =~ ^[0-9]+$ ]] && ((rate >= 1 && rate <= 100000)); }; then usage_error "RATE_MBIT '$rate' must be 1..100000"; fi
  if ! { [[ $local_size =~ ^[0-9]+$ ]] && ((local_size >= 1 && local_size <= 256)); }; then usage_error "L '$local_size' must be 1..256"; fi
  require_tools
  mkdir -p "$base_dir"

  # Claim the lowest free id: mkdir is atomic, so two concurrent `up`s never get the same one. An
  # id whose namespaces exist without a state directory (a crash during down) is skipped too.
  local id
  for ((id = 1; id <= 254; id++)); do
    [[ -n $(cluster_namespaces "$id") ]] && continue
    if mkdir "$(state_dir "$id")" 2>/dev/null; then
      up_id=$id
      break
    fi
  done
  [[ -n $up_id ]] || die "no free cluster id (254 clusters exist? see '$prog list'; '$prog down --all' removes them)"
  id=$up_id
  trap up_cleanup EXIT
  trap 'exit 130' INT TERM

  # A namespace that cannot be created means this kernel or container does not allow it: skip.
  local brns err
  brns=$(ns_bridge "$id")
  if ! err=$(ip netns add "$brns" 2>&1); then
    skip "cannot create a network namespace ($err)"
  fi
  ip -n "$brns" link set lo up
  ip -n "$brns" link add "$(if_bridge "$id")" type bridge
  ip -n "$brns" link set "$(if_bridge "$id")" up

  local tbf k ns ifh
  read -r -a tbf <<<"$(tbf_args "$rate")"
  for ((k = 0; k < hosts; k++)); do
    ns=$(ns_host "$id" "$k")
    ifh=$(if_host "$id" "$k")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Both ends are created directly inside their namespaces; the root namespace never sees them.
    ip link add "$ifh" netns "$ns" type veth peer name "port$k" netns "$brns"
    ip -n "$ns" addr add "$(host_addr "$id" "$k")/24" dev "$ifh"
    ip -n "$ns" link set "$ifh" up
    ip -n "$brns" link set "port$k" master "$(if_bridge "$id")"
    ip -n "$brns" link set "port$k" up
    if ! err=$(tc -n "$ns" qdisc add dev "$ifh" root tbf "${tbf[@]}" 2>&1); then
      [[ $k == 0 && $err == *nknown* ]] && skip "tc cannot create a tbf qdisc ($err): kernel without sch_tbf?"
      die "tc qdisc add ... tbf failed: $err"
    fi
    tc -n "$brns" qdisc add dev "port$k" root tbf "${tbf[@]}"
  done

  cat >"$(state_dir "$id")/state" <<EOF
id=$id
hosts=$hosts
rate_mbit=$rate
ranks_per_host=$local_size
subnet=198.18.$id.0/24
tbf=${tbf[*]}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
EOF
  if [[ -n ${NETCLUSTER_STATE:-} ]]; then echo "$id" >"$NETCLUSTER_STATE"; fi
  up_done=1
  note "cluster $id: $hosts host(s) $(ns_host "$id" 0)..$(ns_host "$id" $((hosts - 1))), $(host_addr "$id" 0)..$(host_addr "$id" $((hosts - 1)))/24, ${rate} Mbit/s each way (tbf ${tbf[*]}), $local_size rank(s) per host"
  echo "$id"
}

# ---------------------------------------------------------------------------------------------
# list

cmd_list() {
  local id any=0
  printf '%-4s %-6s %-10s %-6s %s\n' id hosts rate_mbit ranks namespaces
  for id in $(cluster_ids | sort -n); do
    local H='' RATE='' L='' key value
    while IFS='=' read -r key value; do
      case $key in hosts) H=$value ;; rate_mbit) RATE=$value ;; ranks_per_host) L=$value ;; esac
    done <"$(state_dir "$id")/state" 2>/dev/null || true
    printf '%-4s %-6s %-10s %-6s %s\n' "$id" "${H:-?}" "${RATE:-?}" "${L:-?}" "$(cluster_namespaces "$id" | wc -l)"
    any=1
  done
  ((any)) || note "no clusters"
}

# ---------------------------------------------------------------------------------------------
# exec

cmd_exec() {
  local args=() id host
  while (($#)) && [[ $1 != -- ]]; do args+=("$1"); shift; done
  [[ ${1:-} == -- ]] || usage_error "usage: $prog exec [ID] H -- CMD ARGS..."
  shift
  (($#)) || usage_error "exec: no command after --"
  case ${#args[@]} in
    1) id=$(resolve_id "") host=${args[0]} ;;
    2) id=$(resolve_id "${args[0]}") host=${args[1]} ;;
    *) usage_error "usage: $prog exec [ID] H -- CMD ARGS..." ;;
  esac
  require_tools
  load_state "$id"
  if ! { [[ $host =~ ^[0-9]+$ ]] && ((host < H)); }; then usage_error "host '$host' must be 0..$((H - 1))"; fi
  exec ip netns exec "$(ns_host "$id" "$host")" "$@"
}

# ---------------------------------------------------------------------------------------------
# run

# Copies lines from stdin to stdout with the rank in front, line by line as they come (as gsyncrun
# does; a final line without a newline gets one, so the next rank's line starts on a line of its own).
tag_lines() {
  local line
  trap '' INT # a Ctrl-C stops the ranks (see cmd_run); their last lines must still come through
  while IFS= read -r line || [[ -n $line ]]; do printf '[%s] %s\n' "$1" "$line"; done
}

# True when process $1 has ended (gone, or a zombie waiting for `wait`).
ended() {
  local stat
  [[ -r /proc/$1/stat ]] || return 0
  read -r stat 2>/dev/null </proc/"$1"/stat || return 0
  stat=${stat##*) }
  [[ ${stat%% *} == Z ]]
}

cmd_run() {
  local args=() port='' grace=2 limit=0 tag=1
  while (($#)) && [[ $1 != -- ]]; do
    case $1 in
      --port) (($# >= 2)) || usage_error "--port needs a value"; port=$2; shift 2 ;;
      --grace-s) (($# >= 2)) || usage_error "--grace-s needs a value"; grace=$2; shift 2 ;;
      --timeout-s) (($# >= 2)) || usage_error "--timeout-s needs a value"; limit=$2; shift 2 ;;
      --no-tag-output) tag=0; shift ;;
      --tag-output) tag=1; shift ;;
      -*) usage_error "run: unknown option '$1'" ;;
      *) args+=("$1"); shift ;;
    esac
  done
  [[ ${1:-} == -- ]] || usage_error "usage: $prog run [ID] [options] -- PROGRAM ARGS..."
  shift
  (($#)) || usage_error "run: no program after --"
  ((${#args[@]} <= 1)) || usage_error "run: unexpected '${args[1]}' before --"
  [[ $grace =~ ^[0-9]+$ ]] || usage_error "--grace-s '$grace' must be a whole number of seconds"
  [[ $limit =~ ^[0-9]+$ ]] || usage_error "--timeout-s '$limit' must be a whole number of seconds"
  local id
  id=$(resolve_id "${args[0]:-}")
  require_tools
  local H RATE L
  load_state "$id"
  local world=$((H * L)) master
  master=$(host_addr "$id" 0)

  # A free port in host 0's namespace (the namespaces are fresh, so only another `run` on this
  # cluster can hold one). Below the ephemeral range, so no outgoing connection takes it meanwhile.
  if [[ -z $port ]]; then
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      port=$((20000 + RANDOM % 12000))
      command -v ss >/dev/null || break
      [[ -z $(ip netns exec "$(ns_host "$id" 0)" ss -Hltn "sport = :$port" 2>/dev/null) ]] && break
    done
  fi
  if ! { [[ $port =~ ^[0-9]+$ ]] && ((port >= 1 && port <= 65535)); }; then usage_error "--port '$port' must be 1..65535"; fi

  # Every rank: a subshell that runs the program with tagged stdout/stderr and exits with the
  # program's status. The program's own pid is written to $pid_dir/R (by the subshell that then
  # execs it), so that failures and timeouts signal the program itself, not the shells around it,
  # and the taggers live on to print what the program wrote last.
  local pid_dir
  pid_dir=$(mktemp -d "${TMPDIR:-/tmp}/gsync-netcluster-run.XXXXXX")
  local -a subs=() status=() gone_at=()
  local r h l
  # Variables other launchers use for rank detection are removed, as gsyncrun does.
  local -a clean=(-u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u GROUP_RANK
    -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_RANK -u OMPI_COMM_WORLD_LOCAL_SIZE
    -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID)
  # Each rank gets a process group of its own (perl's setpgrp, then exec: the pid stays the one
  # recorded), so that helpers a rank starts are signalled with it, and so that helpers left
  # behind holding the output pipes are found and stopped when the rank itself has exited. Not a
  # session of its own (setsid): with the kernel's autogroup scheduling (sched_autogroup_enabled,
  # on by default) every session is a scheduling group, which makes sched_yield(2) a no-op for a
  # rank alone in its group and gives every rank an equal share however little it has to do, so
  # ranks that share cores would be scheduled unlike those of one job started by gsyncrun or
  # mpirun (one session): measured on 8 fake hosts sharing 2 cores, the rank that gathers a
  # reduction got 25% of a core instead of 56%.
  local -a session=()
  if command -v perl >/dev/null; then
    session=(perl -e 'setpgrp(0, 0) or die "setpgrp: $!\n"; exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\n"' --)
  elif command -v setsid >/dev/null; then
    session=(setsid)
  fi
  # A secret per job, as gsyncrun does (gsync authenticates every connection with it); one already
  # in the environment is kept.
  local key=${GSYNC_JOB_KEY:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
  for ((r = 0; r < world; r++)); do
    h=$((r / L)) l=$((r % L))
    local -a rank_cmd=("${session[@]}" ip netns exec "$(ns_host "$id" "$h")" env "${clean[@]}"
      "GSYNC_RANK=$r" "GSYNC_WORLD_SIZE=$world" "GSYNC_LOCAL_RANK=$l" "GSYNC_LOCAL_WORLD_SIZE=$L"
      GSYNC_MASTER_ADDR="$master" GSYNC_MASTER_PORT="$port" GSYNC_SOCKET_IFNAME="$(if_host "$id" "$h")"
      GSYNC_HOST_ID="nc$id-host$h" GSYNC_JOB_KEY="$key" NETCLUSTER_ID="$id" NETCLUSTER_HOST="$h" "$@")
    (
      set +e
      # On Ctrl-C (SIGINT to the whole foreground group) the main shell stops the programs; this
      # subshell and the pipeline element below must live on to report their status, so they
      # catch SIGINT with a no-op (a caught signal, unlike an ignored one, is reset by exec, so
      # the program itself still gets the default SIGINT).
      trap - TERM
      trap : INT
      if ((tag)); then
        # The end time is taken by the program's own parent, not after the pipeline: a tagger
        # that is scheduled late must not make this rank look as if it had ended later.
        {
          {
            trap : INT
            (
              echo "$BASHPID" >"$pid_dir/$r"
              exec "${rank_cmd[@]}"
            )
            rc=$?
            echo "${EPOCHREALTIME/./}" >"$pid_dir/$r.end"
            exit "$rc"
          } | tag_lines "$r"
        } 2> >(tag_lines "$r" >&2)
        rc=${PIPESTATUS[0]}
        wait $! 2>/dev/null # the stderr tagger (the last process substitution), so no line is lost
      else
        (
          echo "$BASHPID" >"$pid_dir/$r"
          exec "${rank_cmd[@]}"
        )
        rc=$?
        echo "${EPOCHREALTIME/./}" >"$pid_dir/$r.end"
      fi
      exit "$rc"
    ) &
    subs[r]=$!
  done

  # Signals the programs of the ranks still running.
  signal_ranks() {
    local sig=$1 r p
    for ((r = 0; r < world; r++)); do
      [[ -n ${status[r]:-} ]] && continue
      read -r p 2>/dev/null <"$pid_dir/$r" || continue
      kill "-$sig" -- "-$p" 2>/dev/null || kill "-$sig" "$p" 2>/dev/null || true
    done
  }
  trap 'note "interrupted; stopping the ranks"; signal_ranks TERM; sleep 1; signal_ranks KILL; rm -rf "$pid_dir"; exit 130' INT TERM HUP

  # Poll (a blocking `wait -n` could not enforce the grace period and the time limit). Each rank's
  # subshell notes when its program ended (microseconds, in $pid_dir/R.end), so that the job's
  # status is that of the rank that really failed first, even when the survivors' exits are seen
  # in the same round or the dead rank's output is still draining.
  # The loop shares the cores with the ranks (on the fake hosts, all of them), so it starts no
  # process: files are read with `read`, the pause is a `read -t` on a pipe nobody writes
  # (instead of sleep(1)), and the pause grows from 20 ms to 200 ms after the first second. With
  # a `cat` per rank and a `sleep` every 50 ms, the launcher took 15% of the CPU time of an 8-rank
  # small-message benchmark on 2 cores.
  local running=$world fail_at='' start=$SECONDS termed=0 killed=0 timeout_us='' tick pause=0.02
  local -a ended_us=() prog_pid=()
  exec {tick}<> <(:)
  while ((running > 0)); do
    for ((r = 0; r < world; r++)); do
      [[ -n ${status[r]:-} ]] && continue
      ended "${subs[r]}" || continue
      local rc=0
      wait "${subs[r]}" || rc=$?
      status[r]=$rc
      read -r "ended_us[r]" 2>/dev/null <"$pid_dir/$r.end" || ended_us[r]=${EPOCHREALTIME/./}
      running=$((running - 1))
      if ((rc != 0)); then
        note "rank $r (host $((r / L))) exited with status $rc"
        [[ -n $fail_at ]] || fail_at=$SECONDS
      fi
    done
    ((running > 0)) || break
    # A rank whose program has exited while processes of its group live on (keeping the output
    # pipe open, so the rank's subshell cannot finish): TERM them after 1 s, KILL after 3 s.
    for ((r = 0; r < world; r++)); do
      [[ -n ${status[r]:-} ]] && continue
      local p=${prog_pid[r]:-}
      if [[ -z $p ]]; then
        read -r p 2>/dev/null <"$pid_dir/$r" || continue
        [[ -n $p ]] || continue
        prog_pid[r]=$p
      fi
      [[ -e /proc/$p ]] && continue
      [[ -n ${gone_at[r]:-} ]] || gone_at[r]=$SECONDS
      if ((SECONDS - gone_at[r] >= 3)); then
        kill -KILL -- "-$p" 2>/dev/null || true
      elif ((SECONDS - gone_at[r] >= 1)); then
        kill -TERM -- "-$p" 2>/dev/null || true
      fi
    done
    if ((limit > 0 && SECONDS - start >= limit)) && [[ -z $timeout_us ]]; then
      note "time limit of ${limit}s reached; stopping the ranks"
      timeout_us=${EPOCHREALTIME/./}
      [[ -n $fail_at ]] || fail_at=$((SECONDS - grace))
    fi
    if [[ -n $fail_at ]]; then
      if ((!termed && SECONDS - fail_at >= grace)); then
        note "terminating $running rank(s) still running"
        signal_ranks TERM
        termed=1 fail_at=$SECONDS
      elif ((termed && !killed && SECONDS - fail_at >= 2)); then
        signal_ranks KILL
        killed=1
      fi
    fi
    ((SECONDS - start >= 1)) && pause=0.2
    read -rt "$pause" -u "$tick" _ || true
  done
  exec {tick}<&-
  # The first failure: the failed rank that ended earliest. Failures after the time limit fired
  # are its consequence, and the job's status is then 124 (as timeout(1)).
  local first_rc=0 first_rank=-1
  for ((r = 0; r < world; r++)); do
    ((status[r] != 0)) || continue
    if ((first_rank < 0 || ended_us[r] < ended_us[first_rank])); then first_rank=$r; fi
  done
  if ((first_rank >= 0)); then first_rc=${status[first_rank]}; fi
  if [[ -n $timeout_us ]] && ((first_rank < 0 || ended_us[first_rank] >= timeout_us)); then
    first_rc=124 first_rank=-2
  fi
  trap - INT TERM HUP
  rm -rf "$pid_dir"
  if ((first_rc != 0)); then
    if ((first_rank >= 0)); then
      note "job failed: first failure rank $first_rank, status $first_rc"
    else
      note "job failed: status $first_rc"
    fi
  fi
  return "$first_rc"
}

# ---------------------------------------------------------------------------------------------
# iperf

# Mbit/s received, from iperf3's plain-text report (the "receiver" summary line(s), summed).
iperf_mbits() {
  awk '/receiver/ { for (i = 1; i < NF; ++i) if ($(i + 1) ~ /^[KMG]bits\/sec$/) {
         v = $i; u = $(i + 1); if (u ~ /^K/) v /= 1000; if (u ~ /^G/) v *= 1000; s += v } }
       END { printf "%.0f", s }'
}

cmd_iperf() {
  local id secs=3
  id=$(resolve_id "${1:-}")
  [[ -n ${2:-} ]] && secs=$2
  if ! { [[ $secs =~ ^[0-9]+$ ]] && ((secs >= 1)); }; then usage_error "SECONDS '$secs' must be a positive integer"; fi
  require_tools
  local H RATE L
  load_state "$id"
  if ! command -v iperf3 >/dev/null; then
    note "iperf3 is not installed (apt-get install iperf3); no measurement"
    return 0
  fi
  ((H >= 2)) || die "iperf needs at least 2 hosts (cluster $id has $H)"
  local port=5201 servers=()
  # One server per receiving host, each answering one client then exiting (-1).
  start_server() {
    ip netns exec "$(ns_host "$id" "$1")" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    servers+=($!)
    sleep 0.3
  }
  stop_servers() {
    local p
    for p in "${servers[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${servers[@]}"; do wait "$p" 2>/dev/null || true; done
    servers=()
  }
  client() { # FROM TO [extra iperf3 options]
    local from=$1 to=$2
    shift 2
    ip netns exec "$(ns_host "$id" "$from")" iperf3 -c "$(host_addr "$id" "$to")" -p "$port" -t "$secs" -f m "$@" 2>&1
  }
  echo "cluster $id: $H hosts, tbf rate $RATE Mbit/s per direction; TCP, ${secs} s per measurement"

  start_server 1
  local out
  out=$(client 0 1) || { stop_servers; die "iperf3 failed: $out"; }
  stop_servers
  echo "  host0 -> host1, one stream:            $(iperf_mbits <<<"$out") Mbit/s"

  start_server 1
  if out=$(client 0 1 --bidir); then
    local both
    both=$(awk '/receiver/' <<<"$out" | iperf_mbits)
    echo "  host0 <-> host1, both directions:       $both Mbit/s total (2 x $RATE shaped)"
  else
    echo "  host0 <-> host1: iperf3 has no --bidir"
  fi
  stop_servers

  if ((H >= 3)); then
    # Two senders into one receiver: they share host 2's shaped downlink.
    start_server 2
    local o1 o2 p1 p2 port_b=$((port + 1))
    ip netns exec "$(ns_host "$id" 2)" iperf3 -s -1 -p "$port_b" >/dev/null 2>&1 &
    servers+=($!)
    sleep 0.3
    client 0 2 >"${TMPDIR:-/tmp}/gsnc-iperf-$$.1" &
    p1=$!
    ip netns exec "$(ns_host "$id" 1)" iperf3 -c "$(host_addr "$id" 2)" -p "$port_b" -t "$secs" -f m \
      >"${TMPDIR:-/tmp}/gsnc-iperf-$$.2" 2>&1 &
    p2=$!
    wait "$p1" || true
    wait "$p2" || true
    o1=$(iperf_mbits <"${TMPDIR:-/tmp}/gsnc-iperf-$$.1")
    o2=$(iperf_mbits <"${TMPDIR:-/tmp}/gsnc-iperf-$$.2")
    rm -f "${TMPDIR:-/tmp}/gsnc-iperf-$$".*
    stop_servers
    echo "  host0 + host1 -> host2 (shared link):  $o1 + $o2 = $((o1 + o2)) Mbit/s"
  fi
  if ((H >= 4)); then
    # Two disjoint pairs at once: the links are independent, each pair should get the full rate.
    start_server 1
    start_server 3
    client 0 1 >"${TMPDIR:-/tmp}/gsnc-iperf-$$.1" &
    p1=$!
    client 2 3 >"${TMPDIR:-/tmp}/gsnc-iperf-$$.2" &
    p2=$!
    wait "$p1" || true
    wait "$p2" || true
    o1=$(iperf_mbits <"${TMPDIR:-/tmp}/gsnc-iperf-$$.1")
    o2=$(iperf_mbits <"${TMPDIR:-/tmp}/gsnc-iperf-$$.2")
    rm -f "${TMPDIR:-/tmp}/gsnc-iperf-$$".*
    stop_servers
    echo "  host0 -> host1 and host2 -> host3:     $o1 and $o2 Mbit/s"
  fi
}

# ---------------------------------------------------------------------------------------------

main() {
  (($#)) || { usage >&2; exit 2; }
  local cmd=$1
  shift
  case $cmd in
    up) cmd_up "$@" ;;
    down) (($# <= 1)) || usage_error "usage: $prog down [ID|--all]"; cmd_down "$@" ;;
    run) cmd_run "$@" ;;
    exec) cmd_exec "$@" ;;
    iperf) (($# <= 2)) || usage_error "usage: $prog iperf [ID] [SECONDS]"; cmd_iperf "$@" ;;
    list) cmd_list ;;
    help | -h | --help) usage ;;
    *) usage_error "unknown command '$cmd'" ;;
  esac
}

main "$@"
