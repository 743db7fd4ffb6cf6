"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py,
shipped with python3-torch) against a backend: "gsync", or "gloo" as the reference on the same
harness.

    BACKEND=gsync WORLD_SIZE=3 TEMP_DIR=$(mktemp -d) PYTHONPATH=<build>/python \\
        /usr/bin/python3 torch_suite.py [unittest options, e.g. -k all_reduce]

The suite is written for PyTorch's own backends; a third-party one declares what it has through
common_distributed.DistTestCases (as torch_ucc's harness does). Two gaps of Debian 12's packages are
bridged here: `expecttest` is not packaged (a stand-in module), and torch 1.13's ReplicatedTensor
switch imports torch.distributed._shard, which Python 3.11 refuses (the switch is made a no-op).
"""
import os
import sys
import types
import unittest

try:
    import expecttest  # noqa: F401
except ImportError:  # Debian 12 does not package it; common_utils only needs these names
    stub = types.ModuleType("expecttest")

    class TestCase(unittest.TestCase):
        longMessage = True

        def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802
            self.assertEqual(str(actual).strip(), str(expect).strip())

    stub.TestCase = TestCase
    stub.ACCEPT = False
    sys.modules["expecttest"] = stub

import torch  # noqa: E402
import torch.nn.parallel._replicated_tensor_ddp_utils as _rt  # noqa: E402

_rt._set_ddp_with_replicated_tensor = lambda value: None  # torch.distributed._shard fails to import on Python 3.11

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

BACKEND = os.environ["BACKEND"]
if BACKEND == "gsync":
    import gsync_torch  # noqa: F401,E402  registers "gsync"

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("gsync")

# GSYNC_UNDER=gloo (with BACKEND=gloo): the suite gates and names tests as for gloo, but every group
# it makes is gsync's. For the tests the suite closes to other backends by name: which of them pass
# on gsync (a test of gloo's own API, such as monitored_barrier, cannot).
if os.environ.get("GSYNC_UNDER") == BACKEND:
    import gsync_torch  # noqa: F401,E402

    import torch.distributed as _dist  # noqa: E402
    import torch.distributed.distributed_c10d as _c10d  # noqa: E402

    _real_new_group = _c10d._new_process_group_helper

    def _as_gsync(world_size, rank, group_ranks, backend, store, *args, **kwargs):
        return _real_new_group(world_size, rank, group_ranks, "gsync" if backend == BACKEND else backend, store, *args, **kwargs)

    _c10d._new_process_group_helper = _as_gsync

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
