"""DDP on gsync gives the parameters DDP on gloo gives.

    PYTHONPATH=<build>/python /usr/bin/python3 ddp_parity.py --world N [--steps S]

Trains the same small model (a few buckets per step) with DistributedDataParallel, every rank on
its own data, once with "gloo" and once with "gsync", and compares rank 0's final parameters:
bit for bit at 2 ranks (both sum two values, in either order the same), beyond within 1e-6 of the
largest parameter's magnitude (the backends add in different orders). Exit 0 when they agree.
"""
import argparse
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def store_server():
    # The parent serves the store on a port the kernel picks; a port found free and bound later by a child races
    # with every other program on the machine.
    return dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=120), wait_for_workers=False)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


def train(rank, world, backend, port, steps, q):
    try:
        if backend == "gsync":
            import gsync_torch  # noqa: F401
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=60))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
        torch.set_num_threads(1)
        m = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=0.05)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(1000 + rank)
        for _ in range(steps):
            x = torch.randn(32, 64, generator=g)
            y = torch.randint(0, 10, (32,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in m.parameters()])
        dist.barrier()
        dist.destroy_process_group()
        q.put(flat.tolist() if rank == 0 else None)  # a list: a tensor would not outlive this process
    except Exception as e:  # noqa: BLE001
        q.put(f"rank {rank}: {e!r}")


def run(backend, world, steps):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    server = store_server()
    port = server.port
    procs = [ctx.Process(target=train, args=(r, world, backend, port, steps, q)) for r in range(world)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        raise RuntimeError("; ".join(errors))
    return torch.tensor(next(r for r in results if r is not None), dtype=torch.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    ref = run("gloo", a.world, a.steps)
    got = run("gsync", a.world, a.steps)
    diff = (got - ref).abs().max().item()
    rel = diff / ref.abs().max().item()  # against the parameters' scale: near-zero ones have no relative error of their own
    exact = torch.equal(got, ref)
    ok = exact if a.world <= 2 else rel <= 1e-6
    print(f"world {a.world}, {a.steps} steps, {ref.numel()} parameters: max |gsync - gloo| = {diff:.3e}, "
          f"relative to max |parameter| {rel:.3e}, bitwise {'equal' if exact else 'different'}: {'PASS' if ok else 'FAIL'}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
