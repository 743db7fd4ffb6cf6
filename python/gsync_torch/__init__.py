"""gsync as a torch.distributed backend.

    import gsync_torch                      # registers the backend "gsync"
    torch.distributed.init_process_group("gsync")   # under torchrun, or with store/rank/world_size

Every process group of backend "gsync" (the default group and each new_group) is a gsync
communicator bootstrapped through the store torch.distributed hands it.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["stats"]

dist.Backend.register_backend("gsync", _C.create)


def stats(group=None):
    """Counters of a gsync process group (the default group when None): operations issued and
    the seconds they ran."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C.stats(pg)
