#!/bin/sh
# Inside tools/rxe_guest.sh: puts this rank (GSYNC_RANK of GSYNC_WORLD_SIZE, as gsyncrun sets them)
# on one of two "hosts", the lower half on the first rxe device of RXE_GUEST_DEVICES, the upper
# half on the second (or the same one, with a single device), then runs the command. Pairs across
# the halves then go over verbs, pairs inside a half over shared memory.
set -eu
r=${GSYNC_RANK:?} n=${GSYNC_WORLD_SIZE:?}
set -- ${RXE_GUEST_DEVICES:?} "$@"
a=$1 b=$2
[ "$b" != "${b#rxe}" ] && shift 2 || { b=$a; shift; }
if [ "$r" -lt $(((n + 1) / 2)) ]; then
  export GSYNC_HOST_ID=rxe-host-a GSYNC_IB_HCA="=$a"
else
  export GSYNC_HOST_ID=rxe-host-b GSYNC_IB_HCA="=$b"
fi
exec "$@"
