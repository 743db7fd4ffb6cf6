"""gsync as a torch.distributed backend.

    import gsync_torch                      # registers the backend "gsync"
    torch.distributed.init_process_group("gsync")   # under torchrun, or with store/rank/world_size

Every process group of backend "gsync" (the default group and each new_group) is a gsync
communicator bootstrapped through the store torch.distributed hands it.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["stats", "step", "reset_stats"]

dist.Backend.register_backend("gsync", _C.create)


def _pg(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def step(group=None):
    """Marks the end of a training step (call it once per step, after optimizer.step()): the
    efficiency figures of stats() are made of the steps marked."""
    _C.step(_pg(group))


def reset_stats(group=None):
    """The figures count from now (after warm-up steps, say); a step starts now."""
    _C.reset_stats(_pg(group))


def stats(group=None):
    """Counters and efficiency figures of a gsync process group (the default group when None):
      ops, busy_seconds    operations issued and the seconds they ran, since the group began;
      over the steps marked with step() since reset_stats():
      steps, mean_step_ms, step_seconds,
      comm_seconds         the steps' operations' run time,
      exposed_seconds      the part the program waited for: time in Work.wait(), and when a step's
                           last operation was waited for through its future (DDP does), the time
                           from its issue to the end of the operations in flight,
      comm_share           exposed_seconds / step_seconds,
      overlap              1 - exposed_seconds / comm_seconds,
      speedup              world size x (1 - comm_share): the speedup over one worker these imply.
    At GSYNC_DEBUG=INFO the group logs them as it goes."""
    return _C.stats(_pg(group))
