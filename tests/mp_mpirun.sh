#!/usr/bin/env bash
# Runs the check program under Open MPI's mpirun with no GSYNC_* variable set: rank and size must
# come from OMPI_COMM_WORLD_*, the store port from the job id.
set -u
mpirun=$1 n=$2 prog=$3
for v in $(env | grep -o '^GSYNC_[A-Z_]*'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT SLURM_PROCID SLURM_NTASKS SLURM_LOCALID
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
exec timeout 120 "$mpirun" "${extra[@]}" --oversubscribe -np "$n" --mca btl self,tcp "$prog"
