"""The torch backend's efficiency figures (gsync_torch.step / stats) on steps whose answers are known.

    PYTHONPATH=<build>/python python3 test_figures.py

Two ranks. In each case rank 1 joins the step's all_reduce after a set delay, so rank 0's wait,
and with it the step's exposed communication, is known; rank 0 checks its figures:
  blocking   all_reduce(t) while rank 1 is 0.3 s late:           exposed ~0.3 s of a ~0.3 s step
  hidden     async all_reduce, 0.3 s of work, then work.wait():   exposed ~0 (it ended meanwhile)
  partly     async all_reduce, 0.1 s of work, rank 1 0.4 s late:  exposed ~0.3 s of ~0.4 s (Work.wait)
  future     async all_reduce waited through its future (as DDP), rank 1 0.3 s late: ~0.3 s (the tail)
and, for each, the share and the speedup they imply (2 x (1 - exposed / step)). Exit status: 1
when a figure is outside its bounds.
"""
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TOL = 0.1  # seconds: scheduling on a loaded machine


def store_server():
    # The parent serves the store on a port the kernel picks; a port found free and bound later by a child races
    # with every other program on the machine.
    return dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=120), wait_for_workers=False)


def worker(rank, port, q):
    bad = 0
    try:
        import gsync_torch
        store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timedelta(seconds=60))
        dist.init_process_group("gsync", store=store, rank=rank, world_size=2, timeout=timedelta(seconds=60))
        t = torch.ones(1000)
        dist.all_reduce(t)  # connected and warm
        # (case, rank 1's delay, rank 0's work between issue and wait, how rank 0 waits)
        cases = [("blocking", 0.3, None, "blocking"), ("hidden", 0.0, 0.3, "work"),
                 ("partly", 0.4, 0.1, "work"), ("future", 0.3, None, "future")]
        want = {"blocking": (0.3, 0.3), "hidden": (0.0, 0.3), "partly": (0.3, 0.4), "future": (0.3, 0.3)}
        for name, delay, work_s, how in cases:
            dist.barrier()
            gsync_torch.reset_stats()  # one step per case: from here to step()
            if rank == 1:
                time.sleep(delay)
                dist.all_reduce(t)
            elif how == "blocking":
                dist.all_reduce(t)
            else:
                w = dist.all_reduce(t, async_op=True)
                if work_s:
                    time.sleep(work_s)
                if how == "work":
                    w.wait()
                else:
                    w.get_future().wait()
            gsync_torch.step()
            st = gsync_torch.stats()
            if rank == 0:
                exposed, step = st["exposed_seconds"], st["step_seconds"]
                ex_want, step_want = want[name]
                ok = abs(exposed - ex_want) <= TOL and step_want - 0.02 <= step <= step_want + TOL
                ok = ok and st["steps"] == 1 and abs(st["comm_share"] - exposed / step) < 1e-9 \
                    and abs(st["speedup"] - 2 * (1 - exposed / step)) < 1e-9
                print(f"{name:9s} exposed {exposed:.3f} s (want {ex_want:.1f}), step {step:.3f} s (want {step_want:.1f}), "
                      f"share {st['comm_share']:.2f}, speedup {st['speedup']:.2f} of 2{'' if ok else '  <- OUT OF BOUNDS'}", flush=True)
                bad += 0 if ok else 1
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
        bad += 1
    q.put(bad)


def main():
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    server = store_server()
    port = server.port
    procs = [ctx.Process(target=worker, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    bad = sum(q.get() for _ in procs)
    for p in procs:
        p.join()
    print("figures: " + ("as expected" if bad == 0 else f"{bad} out of bounds"), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
