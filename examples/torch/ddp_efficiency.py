"""DDP on gsync and on gloo at 1, 2 and 4 ranks: the two figures training people read.

    PYTHONPATH=<gsync build>/python /usr/bin/python3 examples/torch/ddp_efficiency.py \\
        [--worlds 1 2 4] [--steps 40] [--out benchmarks/results/issue53/ddp_efficiency]

Every rank trains the same MLP on its own batches (weak scaling: the per-rank batch is fixed), with
DistributedDataParallel over each backend. Per run it measures, on every rank, the mean step time
with gradient synchronization and the mean step time of the same steps under `no_sync()` (the
compute alone), and reports rank 0's figures (for gsync also those the backend reports itself,
gsync_torch.stats() over the same synchronized steps, marked with gsync_torch.step()):
  - communication share of the step: (step - compute) / step, the exposed communication after
    DDP's overlap of bucket allreduces with backward;
  - speedup of N workers over one: N x step(1) / step(N) (samples per second against one worker),
    next to the estimate the share implies, N x (1 - share).
Writes OUT/results.json, OUT/results.md and OUT/efficiency.svg (both figures against N).
"""
import argparse
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def store_server():
    # The parent serves the store on a port the kernel picks; a port found free and bound later by a child races
    # with every other program on the machine.
    return dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=120), wait_for_workers=False)


def build_model(width):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, width), torch.nn.ReLU()]
    for _ in range(3):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def worker(rank, world, backend, port, a, q):
    try:
        if backend == "gsync":
            import gsync_torch  # noqa: F401  registers "gsync"
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=120))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=120))
        model = torch.nn.parallel.DistributedDataParallel(build_model(a.width), bucket_cap_mb=a.bucket_mb)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(1000 + rank)
        batches = [(torch.randn(a.batch, 256, generator=g), torch.randint(0, 10, (a.batch,), generator=g)) for _ in range(8)]

        def step(i):
            x, y = batches[i % len(batches)]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        gsync_torch = None
        if backend == "gsync":
            import gsync_torch

        def timed(steps, sync):
            dist.barrier()
            if gsync_torch and sync:
                gsync_torch.reset_stats()
            t0 = time.perf_counter()
            for i in range(steps):
                if sync:
                    step(i)
                    if gsync_torch:
                        gsync_torch.step()  # the backend's own figures, over the same steps
                else:
                    with model.no_sync():
                        step(i)
            return (time.perf_counter() - t0) / steps

        for i in range(a.warmup):
            step(i)
        # Alternate synchronized and compute-only rounds, so that drift of the machine hits both.
        with_sync, compute, own = [], [], []
        for _ in range(a.rounds):
            with_sync.append(timed(a.steps, True))
            if gsync_torch:
                own.append(gsync_torch.stats())  # the round's steps (reset_stats at its start)
            compute.append(timed(a.steps, False))
        figures = None
        if gsync_torch:  # the backend's figures of the fastest synchronized round
            st = own[with_sync.index(min(with_sync))]
            figures = {"busy_s": gsync_torch.stats()["busy_seconds"], "own_share_pct": 100.0 * st["comm_share"],
                       "own_speedup": st["speedup"]}
        dist.barrier()
        dist.destroy_process_group()
        q.put((rank, min(with_sync), min(compute), figures))
    except Exception as e:  # noqa: BLE001
        q.put((rank, repr(e), None, None))


def run(backend, world, a):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    server = store_server()
    port = server.port
    procs = [ctx.Process(target=worker, args=(r, world, backend, port, a, q)) for r in range(world)]
    for p in procs:
        p.start()
    out = [q.get() for _ in procs]
    for p in procs:
        p.join()
    bad = [o for o in out if isinstance(o[1], str)]
    if bad:
        raise RuntimeError(f"{backend} at {world}: {bad}")
    r0 = next(o for o in out if o[0] == 0)
    r = {"backend": backend, "world": world, "step_ms": 1e3 * r0[1], "compute_ms": 1e3 * r0[2]}
    r.update(r0[3] or {})
    return r


def svg(results, worlds, path):
    """Two panels: communication share (%) and speedup against ranks, one line per backend."""
    W, H, P = 360, 260, 50
    colors = {"gsync": "#c0001a", "gloo": "#2e8b57"}

    def panel(x0, title, key, ymax, ideal):
        s = [f'<g transform="translate({x0},0)"><text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
             f'<line x1="{P}" y1="{H - P}" x2="{W - 10}" y2="{H - P}" stroke="black"/>',
             f'<line x1="{P}" y1="{H - P}" x2="{P}" y2="30" stroke="black"/>']
        xs = {n: P + (W - 10 - P) * (i + 0.5) / len(worlds) for i, n in enumerate(worlds)}
        ys = lambda v: H - P - (H - P - 30) * v / ymax  # noqa: E731
        for n, x in xs.items():
            s.append(f'<text x="{x}" y="{H - P + 18}" text-anchor="middle" font-size="12">{n}</text>')
        for k in range(5):
            v = ymax * k / 4
            s.append(f'<text x="{P - 6}" y="{ys(v) + 4}" text-anchor="end" font-size="11">{v:g}</text>')
        s.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle" font-size="12">ranks</text>')
        if ideal:
            pts = " ".join(f"{xs[n]},{ys(n)}" for n in worlds)
            s.append(f'<polyline points="{pts}" fill="none" stroke="#888" stroke-dasharray="4 3"/>')
        for b, col in colors.items():
            rs = [r for r in results if r["backend"] == b]
            if not rs:
                continue
            pts = " ".join(f"{xs[r['world']]},{ys(r[key])}" for r in rs)
            s.append(f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="2"/>')
            for r in rs:
                s.append(f'<circle cx="{xs[r["world"]]}" cy="{ys(r[key])}" r="3" fill="{col}"/>')
        return "\n".join(s) + "</g>"

    share_max = max(10, 10 * (int(max(r["comm_share_pct"] for r in results) / 10) + 1))
    speed_max = max(worlds)
    legend = "".join(f'<text x="{2 * W - 120}" y="{45 + 16 * i}" font-size="12" fill="{c}">{b}</text>' for i, (b, c) in enumerate(colors.items()))
    body = panel(0, "communication share of the step (%)", "comm_share_pct", share_max, False) + panel(
        W, "speedup over one rank (dashed: ideal)", "speedup", speed_max, True)
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" font-family="sans-serif">'
                f'<rect width="100%" height="100%" fill="white"/>{body}{legend}</svg>\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--backends", nargs="+", default=["gloo", "gsync"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument("--out", default="benchmarks/results/issue53/ddp_efficiency")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = []
    for n in a.worlds:
        for b in a.backends:  # alternate backends at each size
            r = run(b, n, a)
            results.append(r)
            print(f"{b:6s} {n} ranks: step {r['step_ms']:.2f} ms, compute {r['compute_ms']:.2f} ms", flush=True)
    for r in results:
        one = next(x for x in results if x["backend"] == r["backend"] and x["world"] == min(a.worlds))
        r["comm_share_pct"] = max(0.0, 100.0 * (r["step_ms"] - r["compute_ms"]) / r["step_ms"])
        r["speedup"] = r["world"] * one["step_ms"] / r["step_ms"]
        r["speedup_from_share"] = r["world"] * (1 - r["comm_share_pct"] / 100)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"args": vars(a), "cores": os.cpu_count(), "results": results}, f, indent=1)
    lines = ["| backend | ranks | step (ms) | compute (ms) | communication share | speedup | N x (1 - share) "
             "| backend's own share | backend's own speedup |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        own = (f"{r['own_share_pct']:.1f}% | {r['own_speedup']:.2f}" if "own_share_pct" in r else "- | -")
        lines.append(f"| {r['backend']} | {r['world']} | {r['step_ms']:.2f} | {r['compute_ms']:.2f} | {r['comm_share_pct']:.1f}% | "
                     f"{r['speedup']:.2f} | {r['speedup_from_share']:.2f} | {own} |")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    svg(results, a.worlds, os.path.join(a.out, "efficiency.svg"))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
