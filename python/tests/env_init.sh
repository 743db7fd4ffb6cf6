#!/usr/bin/env bash
# Starts WORLD processes of env_init.py with torchrun's variables (a free MASTER_PORT); exit 0 when
# every one agrees. (Debian 12's torchrun itself fails on Python 3.11 before starting any worker,
# in its own agent: the variables are what a worker sees from it.)
#   env_init.sh PYTHON WORLD
set -u
py=$1 world=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < world; r++)); do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r timeout 120 "$py" "$here/env_init.py" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo "env:// with $world ranks: $([ $rc = 0 ] && echo ok || echo FAILED)"
exit $rc
