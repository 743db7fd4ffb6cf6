#!/usr/bin/env python3
"""Report of one cluster_bench.sh scenario: the side-by-side table and the verdicts, as markdown.

    python3 benchmarks/cluster_report.py --dir benchmarks/results/cluster/raw/A_4x1 --md benchmarks/results/cluster/A_4x1.md

--dir holds what cluster_bench.sh wrote for one scenario: `<series>_np<N>_<part>.json` (gsync-perf,
gloo_allreduce or ompi_allreduce JSON; several parts and repetitions are merged, the fastest run per
size kept, as in compare.py), meta.txt (key=value: hosts, ranks_per_host, rate_mbit, iperf figures,
command, date, load, versions), iperf.txt, traffic.txt (series part veth_tx_bytes payload_bytes),
failures.txt and commands.txt.

busbw = algbw * 2(N-1)/N (nccl-tests), in MB/s (1e6 B/s). The bound is the one-stream TCP rate that
`netcluster.sh iperf` measured on the same links (busbw of a bandwidth-optimal flat allreduce cannot
exceed the per-direction link rate); without iperf3, the nominal rate x 0.956 (TCP payload at MTU 1500).
Exit status: 0 ok; 1 when gsync's results are missing, a run failed or reported wrong elements.
Standard library only (with benchlib.py).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import human, load_results, read_meta, series_key  # noqa: E402

MIB = 1024 * 1024
TARGET_FRACTION = 0.97  # gsync busbw / bound from 1 MiB
TARGET_HIER = 1.5  # gsync hierarchical / flat ring at 64 MiB (scenario B)

def is_gsync(name):
    return name == "gsync" or name.startswith("gsync-")


def read_lines(directory, name):
    try:
        with open(os.path.join(directory, name)) as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def bound_mbs(meta):
    """(bound in MB/s of busbw, description)."""
    try:
        one = float(meta.get("iperf_one_stream_mbit") or 0)
    except ValueError:
        one = 0
    rate = float(meta.get("rate_mbit") or 0)
    if one > 0:
        return one / 8.0, f"iperf3 one stream {one:.0f} Mbit/s"
    return rate * 0.956 / 8.0, f"nominal {rate:.0f} Mbit/s x 0.956 (no iperf3 measurement)"


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def ranges(sizes_algo):
    """'ring: 256 KiB..64 MiB; recursive_doubling: 8 B..128 KiB' from [(size, algo)] in size order."""
    out, cur, lo, hi = [], None, None, None
    for s, a in sizes_algo:
        if a != cur:
            if cur is not None:
                out.append((cur, lo, hi))
            cur, lo = a, s
        hi = s
    if cur is not None:
        out.append((cur, lo, hi))
    return "; ".join(f"{a} ({human(lo)}{'' if lo == hi else '..' + human(hi)})" for a, lo, hi in out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="raw directory of one scenario")
    ap.add_argument("--md", default=None, help="write the markdown report to this file")
    args = ap.parse_args()

    meta = read_meta(args.dir)
    results, problems = load_results(args.dir)
    scen = meta.get("scenario", os.path.basename(os.path.normpath(args.dir)))
    hosts = int(meta.get("hosts", 0) or 0)
    rpn = int(meta.get("ranks_per_host", 1) or 1)
    world = int(meta.get("world", hosts * rpn) or 0)
    if not world and results:
        world = next(iter(results))[1]
    series = sorted({t for (t, np_) in results if np_ == world}, key=series_key)
    data = {t: results[(t, world)] for t in series}
    peers = [t for t in series if not is_gsync(t)]
    bnd, bnd_desc = bound_mbs(meta)
    failures = read_lines(args.dir, "failures.txt")
    problems += [f"run failed: {f}" for f in failures]

    out = []
    w = out.append
    w(f"# {scen}: {hosts} host(s) x {rpn} rank(s) per host, {meta.get('rate_mbit', '?')} Mbit/s links")
    w("")
    w("Allreduce, float32 sum, on a shaped virtual cluster (`benchmarks/netcluster.sh`: one network namespace per"
      " host, `tc tbf` on both ends of every veth, no added latency). busbw = algbw x 2(N-1)/N in MB/s (1e6 B/s);"
      " time = per-iteration mean, max over ranks. gsync = gsync-perf with no flags (automatic algorithm, out of"
      " place); Gloo runs in place (its algorithms are in-place only); Open MPI with `--mca pml ob1 --mca btl"
      " tcp,self` over the cluster subnet (shared memory excluded: Open MPI sees one node and would bypass the"
      " links). Where a size was measured more than once, the fastest run is kept. Small messages: the token bucket"
      " holds 2 ms of line rate (250 kB at 1 Gbit/s), so an allreduce that sends less than that per link between"
      " pauses can pass faster than the rate (busbw / bound > 1 there); all ranks share this machine's"
      f" {meta.get('nproc', '?')} cores, so small-message latencies are not those of separate hosts.")
    w("")
    if meta.get("command"):
        w(f"- command: `{meta['command']}`")
    for k, label in (("date", "date"), ("nproc", "nproc")):
        if meta.get(k):
            w(f"- {label}: {meta[k]}")
    for k, label in (("load_before", "load before"), ("load_after", "load after")):
        if meta.get(k):
            w(f"- {label}: `{meta[k].strip()}`")
    if meta.get("git"):
        w(f"- gsync revision: {meta['git']}")
    if meta.get("mpi_version"):
        w(f"- Open MPI: {meta['mpi_version']}; Gloo (libgloo-dev): {meta.get('gloo_version', '?')}")
    if meta.get("gsync_env", "").strip():
        w(f"- GSYNC_* variables set for every run: `{meta['gsync_env'].strip()}`")
    if meta.get("parts"):
        ps = []
        for p in meta["parts"].split():
            tag, lo, hi, n, wu = p.split(":")
            hi_s = human(int(hi)) if int(hi) % 1024 == 0 or int(hi) < 1024 else f"< {human(int(hi) + 1)}"
            ps.append(f"{human(int(lo))}..{hi_s}: {n} timed + {wu} warmup")
        w(f"- sizes (factor {meta.get('factor', '?')}): " + "; ".join(ps))
    if meta.get("runs"):
        runs, tiny = meta["runs"], meta.get("tiny_runs", meta["runs"])
        w(f"- runs per series: {tiny} below 64 KiB, {runs} from 64 KiB (interleaved; the fastest run per size is kept)")
    bidir = meta.get("iperf_bidir_total_mbit")
    w(f"- bound: {bnd:.1f} MB/s busbw = {bnd_desc}"
      + (f"; both directions at once {bidir} Mbit/s total ({float(bidir) / 2:.0f} per direction)" if bidir else ""))
    if meta.get("hierarchical"):
        mode = {"flag": "`gsync-perf -a hierarchical`", "env": "`GSYNC_ALGO=hierarchical gsync-perf`",
                "none": "not available in this gsync (skipped)"}.get(meta["hierarchical"], meta["hierarchical"])
        w(f"- gsync hierarchical: {mode}")
    w("")

    g = data.get("gsync", {})
    if not g:
        problems.append("gsync results missing")
    sizes = sorted(set().union(*[set(d) for d in data.values()])) if data else []

    w("## busbw (MB/s)")
    w("")
    hdr = ["size", "gsync algo", "gsync time (us)"] + [f"{t}" for t in series]
    if peers:
        hdr += ["best peer", "gsync / best peer"]
    hdr += ["gsync / bound"]
    has_hier = "gsync-hier" in data and "gsync-ring" in data
    if has_hier:
        hdr += ["hier / ring"]
    w("| " + " | ".join(hdr) + " |")
    w("|" + "|".join("---" if h in ("gsync algo", "best peer") else "---:" for h in hdr) + "|")
    for s in sizes:
        gr = g.get(s)
        gb = gr["busbw"] * 1000 if gr else None
        cells = [human(s), gr["algo"] if gr else "-", fmt(gr["time_us"] if gr else None)]
        for t in series:
            r = data[t].get(s)
            cells.append(fmt(r["busbw"] * 1000 if r else None, 2 if r and r["busbw"] * 1000 < 10 else 1))
            if r and r.get("wrong"):
                problems.append(f"{t} {human(s)}: {r['wrong']} wrong elements")
        if peers:
            best = max(((data[t][s]["busbw"] * 1000, t) for t in peers if s in data[t]), default=None)
            cells.append(best[1] if best else "-")
            cells.append(fmt(gb / best[0], 2) if best and gb is not None and best[0] > 0 else "-")
        cells.append(fmt(gb / bnd, 3) if gb is not None else "-")
        if has_hier:
            h, r = data["gsync-hier"].get(s), data["gsync-ring"].get(s)
            cells.append(fmt(h["busbw"] / r["busbw"], 2) if h and r and r["busbw"] > 0 else "-")
        w("| " + " | ".join(cells) + " |")
    w("")

    w("## Summary")
    w("")
    big = [s for s in sizes if s >= MIB and s in g]
    if big:
        fr = [(s, g[s]["busbw"] * 1000 / bnd) for s in big]
        smin, fmin = min(fr, key=lambda p: p[1])
        smax = max(big)
        ok = fmin >= TARGET_FRACTION
        w(f"- gsync busbw / bound from 1 MiB: min {fmin:.3f} at {human(smin)}, {fr[-1][1]:.3f} at {human(smax)}"
          f" (target >= {TARGET_FRACTION}: {'met' if ok else 'NOT met'})")
        for t in series:
            if t == "gsync" or smax not in data[t]:
                continue
            w(f"  - {t} at {human(smax)}: {data[t][smax]['busbw'] * 1000 / bnd:.3f} of the bound")
    else:
        w("- gsync busbw / bound from 1 MiB: n/a (no sizes >= 1 MiB measured)")
    if g:
        w(f"- algorithm gsync's default chose: {ranges([(s, g[s]['algo']) for s in sorted(g)])}")
    if peers and g:
        rs = []
        for s in sorted(g):
            best = max((data[t][s]["busbw"] for t in peers if s in data[t]), default=None)
            if best:
                rs.append((s, g[s]["busbw"] / best))
        if rs:
            lo = min(rs, key=lambda p: p[1])
            hi = max(rs, key=lambda p: p[1])
            slower = [f"{human(s)} ({r:.2f})" for s, r in rs if r < 1.0]
            w(f"- gsync / best peer: {lo[1]:.2f} (at {human(lo[0])}) .. {hi[1]:.2f} (at {human(hi[0])}); "
              + (f"gsync slower at {len(slower)} of {len(rs)} sizes: {', '.join(slower)}" if slower
                 else "gsync is not slower than the best peer at any size"))
    if has_hier:
        common = sorted(set(data["gsync-hier"]) & set(data["gsync-ring"]))
        if common:
            s = max(common)
            r = data["gsync-hier"][s]["busbw"] / data["gsync-ring"][s]["busbw"]
            th = ((world - 1) / world) * hosts / (hosts - 1) if hosts > 1 else None
            w(f"- gsync hierarchical / flat ring at {human(s)}: {r:.2f}x (target >= {TARGET_HIER}x"
              + (f" at 64 MiB" if s == 64 * MIB else f"; measured only up to {human(s)}, the target is at 64 MiB")
              + f": {'met' if r >= TARGET_HIER else 'NOT met'}"
              + (f"; link-bound ideal {th:.2f}x: a flat ring sends 2(N-1)/N of the buffer over each host link,"
                 f" the hierarchical one 2(H-1)/H" if th else "") + ")")
            if "gsync" in data and s in data["gsync"]:
                w(f"- gsync default at {human(s)}: algorithm `{data['gsync'][s]['algo']}`,"
                  f" {data['gsync'][s]['busbw'] / data['gsync-ring'][s]['busbw']:.2f}x the flat ring")
    elif meta.get("hierarchical") == "none":
        w("- gsync hierarchical: not run (gsync rejects it; see probe_hierarchical.log)")
    w("")

    traffic = read_lines(args.dir, "traffic.txt")
    if traffic:
        agg = {}
        for line in traffic:
            f = line.split()
            if len(f) != 4:
                continue
            a = agg.setdefault(f[0], [0, 0])
            a[0] += int(f[2])
            a[1] += int(f[3])
        w("## Traffic on the veths")
        w("")
        text = ("Bytes all hosts sent on their veths during each series' runs (start-up and barriers included), divided"
                " by the allreduce payload (sum over sizes of size x calls, calls = timed + warmup + 1 check): this shows"
                " that the data really crossed the shaped links. Reference values (the counters see GSO super-packets, so"
                " headers add well under 1% for large messages):")
        if rpn == 1:
            text += (f" a ring or halving-doubling allreduce sends 2(N-1)/N of the buffer from every rank,"
                     f" {2 * (world - 1)} in all (N = {world}); recursive doubling the whole buffer per rank and step,"
                     f" N log2(N) = {world * (world.bit_length() - 1)} in all (N a power of two).")
        else:
            text += (f" a flat ring whose ranks 0..{rpn - 1} share host 0 etc. crosses every host link once:"
                     f" 2(N-1)/N x H = {2 * (world - 1) / world * hosts:.2f} (N = {world}, H = {hosts});"
                     f" a hierarchical allreduce moves 2(H-1)/H per host over the links: {2 * (hosts - 1):.2f} in all."
                     " Traffic between ranks of one host does not touch the veths.")
        w(text)
        w("")
        w("| series | veth bytes sent | payload bytes | per payload byte |")
        w("|---|---:|---:|---:|")
        for t in sorted(agg, key=series_key):
            vb, pb = agg[t]
            w(f"| {t} | {vb:,} | {pb:,} | {vb / pb:.2f} |" if pb else f"| {t} | {vb:,} | 0 | - |")
        w("")

    iperf = read_lines(args.dir, "iperf.txt")
    if iperf:
        w("## iperf3 on the same links")
        w("")
        w("```")
        out.extend(iperf)
        w("```")
        w("")

    if problems:
        w("## Problems")
        w("")
        for p in problems:
            w(f"- {p}")
        w("")

    cmds = read_lines(args.dir, "commands.txt")
    if cmds:
        w("## Benchmark commands")
        w("")
        w(f"netcluster id of this run: {meta.get('cluster_id', '?')} (namespaces gsnc<id>-h<K>, subnet 198.18.<id>.0/24).")
        w("")
        w("```")
        out.extend(cmds)
        w("```")
        w("")

    text = "\n".join(out)
    print(text)
    if args.md:
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
