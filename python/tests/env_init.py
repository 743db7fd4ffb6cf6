"""init_process_group("gsync") from torchrun's variables (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK: env://), as under torchrun. Run WORLD copies with those set; each checks
one all_reduce and exits 0 when right."""
import sys

import torch
import torch.distributed as dist

import gsync_torch  # noqa: F401

dist.init_process_group("gsync")
n, r = dist.get_world_size(), dist.get_rank()
t = torch.full((5,), float(r + 1))
dist.all_reduce(t)
ok = torch.equal(t, torch.full((5,), float(n * (n + 1) // 2)))
dist.destroy_process_group()
sys.exit(0 if ok else 1)
