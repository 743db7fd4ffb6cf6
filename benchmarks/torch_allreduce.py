"""torch.distributed.all_reduce on float32 CPU tensors, gsync against gloo, side by side.

    PYTHONPATH=<gsync build>/python /usr/bin/python3 benchmarks/torch_allreduce.py \\
        [--worlds 2 4] [--min 64K] [--max 64M] [--repeat 3] [--out benchmarks/results/issue53/torch_allreduce]

For each world size, runs alternate between the backends (gloo, gsync, gloo, ... `--repeat` times
each); every run spawns the ranks, warms up, and times `iters` all_reduce calls per size (SUM, in
place, waited each), sizes doubling from --min to --max. Rank 0's mean time per call gives algbw =
bytes / time and busbw = algbw x 2(N-1)/N (nccl-tests' definition). The report keeps, per backend
and size, the median over the runs, and the ratio gsync / gloo. Writes OUT/results.json and
OUT/results.md.
"""
import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def size_of(s):
    s = s.upper()
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def store_server():
    # The parent serves the store on a port the kernel picks; a port found free and bound later by a child races
    # with every other program on the machine.
    return dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=120), wait_for_workers=False)


def iters_for(nbytes):
    return max(5, min(200, (64 << 20) // max(nbytes, 1) * 2))


def worker(rank, world, backend, port, sizes, q):
    try:
        if backend == "gsync":
            import gsync_torch  # noqa: F401
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=120))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=120))
        times = {}
        for nbytes in sizes:
            t = torch.ones(nbytes // 4)
            it = iters_for(nbytes)
            for _ in range(max(2, it // 10)):
                dist.all_reduce(t)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(it):
                dist.all_reduce(t)
            times[nbytes] = (time.perf_counter() - t0) / it
        dist.barrier()
        dist.destroy_process_group()
        q.put((rank, times))
    except Exception as e:  # noqa: BLE001
        q.put((rank, repr(e)))


def run(backend, world, sizes):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    server = store_server()
    port = server.port
    procs = [ctx.Process(target=worker, args=(r, world, backend, port, sizes, q)) for r in range(world)]
    for p in procs:
        p.start()
    out = dict(q.get() for _ in procs)
    for p in procs:
        p.join()
    for r, v in out.items():
        if isinstance(v, str):
            raise RuntimeError(f"{backend} world {world} rank {r}: {v}")
    return out[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--min", default="64K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", nargs="+", default=["gloo", "gsync"])
    ap.add_argument("--out", default="benchmarks/results/issue53/torch_allreduce")
    a = ap.parse_args()
    sizes = []
    s = size_of(a.min)
    while s <= size_of(a.max):
        sizes.append(s)
        s *= 2
    os.makedirs(a.out, exist_ok=True)
    raw = {}
    for n in a.worlds:
        for rep in range(a.repeat):
            for b in a.backends:
                raw.setdefault((b, n), []).append(run(b, n, sizes))
                print(f"world {n} run {rep + 1}/{a.repeat} {b} done", flush=True)
    rows = []
    for n in a.worlds:
        for nbytes in sizes:
            row = {"world": n, "bytes": nbytes}
            for b in a.backends:
                t = statistics.median(r[nbytes] for r in raw[(b, n)])
                row[b + "_us"] = 1e6 * t
                row[b + "_busbw_gbs"] = nbytes / t * 2 * (n - 1) / n / 1e9
            if "gloo" in a.backends and "gsync" in a.backends:
                row["ratio"] = row["gsync_busbw_gbs"] / row["gloo_busbw_gbs"] if row["gloo_busbw_gbs"] else 0
            rows.append(row)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"args": vars(a), "cores": os.cpu_count(), "rows": rows,
                   "raw": {f"{b}_np{n}": v for (b, n), v in raw.items()}}, f, indent=1)
    lines = ["| ranks | size | gloo busbw (GB/s) | gsync busbw (GB/s) | gsync / gloo |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        size = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KiB"
        lines.append(f"| {r['world']} | {size} | {r.get('gloo_busbw_gbs', 0):.2f} | {r.get('gsync_busbw_gbs', 0):.2f} | {r.get('ratio', 0):.2f} |")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
