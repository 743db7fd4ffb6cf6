"""gsync's torch.distributed backend, every operation against values computed here.

    PYTHONPATH=<build>/python python3 test_backend.py --world N

N processes (torch.multiprocessing), each joins the group "gsync" through a TCPStore, then runs
every operation on every dtype gsync carries (complex through its real view), the reductions with
every operator that applies, uneven splits, subgroups (new_group), the futures DDP's hooks use,
async work issued from two threads, and the errors (an unsupported operator, a timeout). Each
result is compared with what the inputs say it must be; the exit status is the number of ranks
that found a difference.
"""
import argparse
import os
import sys
import threading
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX,
       "BAND": dist.ReduceOp.BAND, "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR}


def store_server():
    # The parent serves the store on a port the kernel picks; a port found free and bound later by a child races
    # with every other program on the machine.
    return dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=120), wait_for_workers=False)


def values(rank, n, dtype, salt=0):
    """Rank `rank`'s n input values: small integers, so every order of reduction agrees exactly."""
    base = torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt
    if dtype == torch.bool:
        return (base % 3 == 0)
    if dtype.is_complex:
        return torch.complex((base % 11 - 5).double(), (base % 5).double()).to(dtype)
    if dtype in (torch.uint8,):
        return (base % 4).to(dtype)
    if dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        return (base % 9 - 4).to(dtype)
    return (base % 9 - 4).to(dtype)


def applies(op, dtype):
    if dtype.is_complex:
        return op in ("SUM",)
    if dtype.is_floating_point:
        return op in ("SUM", "PRODUCT", "MIN", "MAX")
    return True


def reference(op, inputs):
    """The reduction of `inputs` (one tensor per rank) computed here, in int64/float64/complex128."""
    dtype = inputs[0].dtype
    wide = torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else torch.int64
    xs = [x.to(wide) for x in inputs]
    if dtype == torch.bool:
        xs = [x.to(torch.int64) for x in inputs]
        acc = xs[0].clone()
        for x in xs[1:]:
            acc = {"SUM": acc | x, "PRODUCT": acc & x, "MIN": torch.minimum(acc, x), "MAX": torch.maximum(acc, x),
                   "BAND": acc & x, "BOR": acc | x, "BXOR": acc ^ x}[op]
        return acc.to(torch.bool)
    acc = xs[0].clone()
    for x in xs[1:]:
        if op == "SUM":
            acc = acc + x
        elif op == "PRODUCT":
            acc = acc * x
        elif op == "MIN":
            acc = torch.minimum(acc, x)
        elif op == "MAX":
            acc = torch.maximum(acc, x)
        elif op == "BAND":
            acc = acc & x
        elif op == "BOR":
            acc = acc | x
        elif op == "BXOR":
            acc = acc ^ x
    return acc.to(dtype)


class Checker:
    def __init__(self, rank):
        self.rank, self.bad = rank, 0

    def close(self, what, got, want, rtol):
        if got.dtype != want.dtype or got.shape != want.shape or not torch.allclose(got.double(), want.double(), rtol=rtol, atol=0):
            self.bad += 1
            print(f"rank {self.rank}: {what}: got {got.flatten()[:8].tolist()}, want {want.flatten()[:8].tolist()}", flush=True)

    def same(self, what, got, want):
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            self.bad += 1
            print(f"rank {self.rank}: {what}: got {got.flatten()[:8].tolist()}, want {want.flatten()[:8].tolist()}", flush=True)


def glob(group, r):
    """The global rank of rank `r` of `group` (the default group: itself)."""
    return r if group is None else dist.distributed_c10d._get_global_rank(group, r)


def run_ops(c, rank, world, group=None, tag=""):
    n_group = dist.get_world_size(group)
    me = dist.get_rank(group)
    for dtype in DTYPES:
        for n in (0, 1, 37, 10007):
            # allreduce, every operator that applies
            for name, op in OPS.items():
                if not applies(name, dtype) or n > 37 and name != "SUM":
                    continue
                t = values(me, n, dtype)
                dist.all_reduce(t, op=op, group=group)
                c.same(f"{tag}all_reduce {dtype} {name} n={n}", t, reference(name, [values(r, n, dtype) for r in range(n_group)]))
            if dtype.is_floating_point and n <= 37:  # AVG: the sum divided by the group's size, rounded once or twice
                t = values(me, n, dtype)
                dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
                want = (reference("SUM", [values(r, n, torch.float64) for r in range(n_group)]) / n_group).to(dtype)
                c.close(f"{tag}all_reduce {dtype} AVG n={n}", t, want, 1e-6 if dtype in (torch.float32, torch.float64) else 1e-2)
            # broadcast from the last rank
            t = values(me, n, dtype)
            dist.broadcast(t, src=glob(group, n_group - 1), group=group)
            c.same(f"{tag}broadcast {dtype} n={n}", t, values(n_group - 1, n, dtype))
            # all_gather (a list) and all_gather_into_tensor-style _allgather_base
            outs = [torch.empty(n, dtype=dtype) for _ in range(n_group)]
            dist.all_gather(outs, values(me, n, dtype), group=group)
            for r in range(n_group):
                c.same(f"{tag}all_gather {dtype} n={n} block {r}", outs[r], values(r, n, dtype))
            if not dtype.is_complex and hasattr(dist, "_all_gather_base"):
                flat = torch.empty(n * n_group, dtype=dtype)
                dist._all_gather_base(flat, values(me, n, dtype), group=group)
                c.same(f"{tag}_all_gather_base {dtype} n={n}", flat, torch.cat([values(r, n, dtype) for r in range(n_group)]))
            if dtype.is_complex:
                continue
            # reduce to rank 0, reduce_scatter (list and flat), gather, scatter, all_to_all(_single)
            t = values(me, n, dtype)
            dist.reduce(t, dst=glob(group, 0), op=dist.ReduceOp.SUM, group=group)
            if me == 0:
                c.same(f"{tag}reduce {dtype} n={n}", t, reference("SUM", [values(r, n, dtype) for r in range(n_group)]))
            ins = [values(me, n, dtype, salt=j) for j in range(n_group)]
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX, group=group)
            c.same(f"{tag}reduce_scatter {dtype} n={n}", out, reference("MAX", [values(r, n, dtype, salt=me) for r in range(n_group)]))
            if hasattr(dist, "_reduce_scatter_base"):
                out = torch.empty(n, dtype=dtype)
                dist._reduce_scatter_base(out, torch.cat(ins), group=group)
                c.same(f"{tag}_reduce_scatter_base {dtype} n={n}", out, reference("SUM", [values(r, n, dtype, salt=me) for r in range(n_group)]))
            root = glob(group, n_group // 2)
            g = [torch.empty(n, dtype=dtype) for _ in range(n_group)] if me == n_group // 2 else None
            dist.gather(values(me, n, dtype), gather_list=g, dst=root, group=group)
            if g is not None:
                for r in range(n_group):
                    c.same(f"{tag}gather {dtype} n={n} block {r}", g[r], values(r, n, dtype))
            s = [values(n_group // 2, n, dtype, salt=j) for j in range(n_group)] if me == n_group // 2 else None
            out = torch.empty(n, dtype=dtype)
            dist.scatter(out, scatter_list=s, src=root, group=group)
            c.same(f"{tag}scatter {dtype} n={n}", out, values(n_group // 2, n, dtype, salt=me))
            # all_to_all_single with uneven splits: rank i sends rank j (i + j) % 3 rows of 2 elements
            send = [(me + j) % 3 for j in range(n_group)]
            recv = [(j + me) % 3 for j in range(n_group)]
            src = values(me, 2 * sum(send), dtype).reshape(-1, 2)
            dst = torch.empty(sum(recv), 2, dtype=dtype)
            dist.all_to_all_single(dst, src, output_split_sizes=recv, input_split_sizes=send, group=group)
            want = []
            for j in range(n_group):
                sj = [(j + k) % 3 for k in range(n_group)]
                block = values(j, 2 * sum(sj), dtype).reshape(-1, 2)
                start = sum(sj[:me])
                want.append(block[start:start + sj[me]])
            c.same(f"{tag}all_to_all_single uneven {dtype}", dst, torch.cat(want))
    dist.barrier(group=group)


def run_point_to_point(c, rank, world):
    if world < 2:
        return
    # a ring shift with isend/irecv, then a tagged exchange between 0 and 1
    t = values(rank, 1000, torch.float32)
    got = torch.empty(1000)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    reqs = [dist.isend(t, nxt), dist.irecv(got, prv)]
    for r in reqs:
        r.wait()
    c.same("ring shift isend/irecv", got, values(prv, 1000, torch.float32))
    if rank < 2:
        x = torch.full((5,), float(rank))
        if rank == 0:
            dist.send(x, 1, tag=7)
        else:
            y = torch.empty(5)
            dist.recv(y, 0, tag=7)
            c.same("send/recv tag 7", y, torch.zeros(5))
    # receives from any source: the last rank takes one bfloat16 message from every other rank,
    # by recv (which returns the sender) and irecv (Work.source_rank()), alternately
    last = world - 1
    if rank != last:
        dist.send(values(rank, 77, torch.bfloat16), last, tag=3)
    else:
        seen = []
        for k in range(world - 1):
            z = torch.empty(77, dtype=torch.bfloat16)
            if k % 2 == 0:
                src = dist.recv(z, tag=3)
            else:
                w = dist.irecv(z, tag=3)
                w.wait()
                src = w._source_rank()
            seen.append(src)
            c.same("recv from any source (from %d)" % src, z, values(src, 77, torch.bfloat16))
        c.same("any-source senders", torch.tensor(sorted(seen)), torch.arange(world - 1))


def run_futures_and_threads(c, rank, world):
    # The future DDP's hooks use completes with the tensors; its callbacks may issue collectives
    # (and wait for their Work) as PowerSGD's hook does.
    t = values(rank, 100, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()

    def again(f):
        x = f.value()[0].clone()
        dist.all_reduce(x, async_op=True).wait()
        return x

    chained = fut.then(again)
    once = reference("SUM", [values(r, 100, torch.float32) for r in range(world)])
    c.same("future of all_reduce", fut.wait()[0], once)
    c.same("all_reduce issued by the future's callback", chained.wait(), once * world)
    # Two threads issue, one after the other by agreement: the order is the issue order.
    results = {}

    def side():
        x = values(rank, 64, torch.int32, salt=1)
        dist.all_reduce(x)
        results["side"] = x

    th = threading.Thread(target=side)
    th.start()
    th.join()
    y = values(rank, 64, torch.int32, salt=2)
    dist.all_reduce(y)
    c.same("thread's all_reduce", results["side"], reference("SUM", [values(r, 64, torch.int32, salt=1) for r in range(world)]))
    c.same("main's all_reduce after it", y, reference("SUM", [values(r, 64, torch.int32, salt=2) for r in range(world)]))
    # coalesced, and many asynchronous ones waited in reverse
    works, ts = [], []
    for k in range(8):
        ts.append(values(rank, 333 + k, torch.float64, salt=k))
        works.append(dist.all_reduce(ts[-1], async_op=True))
    for w in reversed(works):
        w.wait()
    for k in range(8):
        c.same(f"async all_reduce {k}", ts[k], reference("SUM", [values(r, 333 + k, torch.float64, salt=k) for r in range(world)]))


def run_errors(c, rank, world):
    # Refused at the call, with gsync's words: a float tensor with a bitwise operator.
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
        c.bad += 1
        print(f"rank {rank}: BAND of float tensors was accepted", flush=True)
    except RuntimeError as e:
        if "bitwise" not in str(e):
            c.bad += 1
            print(f"rank {rank}: unexpected message: {e}", flush=True)


def worker(rank, world, port, q):
    try:
        import gsync_torch
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=60))
        dist.init_process_group("gsync", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
        c = Checker(rank)
        assert dist.get_backend() == "gsync"
        run_ops(c, rank, world)
        run_point_to_point(c, rank, world)
        run_futures_and_threads(c, rank, world)
        run_errors(c, rank, world)
        if world >= 3:  # a subgroup of ranks 1..world-1 (new_group: a communicator of its own)
            sub = dist.new_group(list(range(1, world)))
            if rank >= 1:
                run_ops(c, rank, world, group=sub, tag="subgroup: ")
        st = gsync_torch.stats()
        if st["ops"] <= 0:
            c.bad += 1
        dist.barrier()
        dist.destroy_process_group()
        q.put(c.bad)
    except Exception:
        traceback.print_exc()
        q.put(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    server = store_server()
    port = server.port
    procs = [ctx.Process(target=worker, args=(r, a.world, port, q)) for r in range(a.world)]
    for p in procs:
        p.start()
    bad = sum(q.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"world {a.world}: {'all operations agree' if bad == 0 else f'{bad} differences'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
