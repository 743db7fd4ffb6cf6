#!/usr/bin/env bash
# Starts WORLD processes of env_init.py with torchrun's variables (a free MASTER_PORT); exit 0 when
# every one agrees. (Debian 12's torchrun itself fails on Python 3.11 before starting any worker,
# in its own agent: the variables are what a worker sees from it.)
#   env_init.sh PYTHON WORLD
set -u
py=$1 world=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# A free port below the kernel's ephemeral range (32768 up): a port the kernel handed out and released
# may be handed to another program's connection before rank 0 binds it (CI saw that).
port=$("$py" -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 32000)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p)); print(p); break
        except OSError:
            pass')
pids=()
for ((r = 0; r < world; r++)); do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r timeout 120 "$py" "$here/env_init.py" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo "env:// with $world ranks: $([ $rc = 0 ] && echo ok || echo FAILED)"
exit $rc
