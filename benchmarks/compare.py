#!/usr/bin/env python3
"""Side-by-side report of gsync-perf and ompi_allreduce results (written by compare_ompi.sh).

    python3 benchmarks/compare.py --dir benchmarks/results/raw --np "2 4" --md benchmarks/results/compare_ompi.md

Reads every `<tool>_np<N>_<part>.json` in --dir (gsync-perf / ompi_allreduce JSON: {"world_size",
"transport", "rows": [{"bytes", "time_us", "busbw_gbs", "algo", "wrong", ...}]}). <tool> is `gsync`,
`ompi` (Open MPI's default algorithm selection) or `ompi-<variant>` (a forced coll_tuned algorithm).
Several files for the same tool and N (size ranges, repetitions) are merged; for a size measured more
than once the fastest run is kept. `membw.json` (gsync-membw) adds the memory-bandwidth figures.

For each N it prints a table (size, busbw, ratio gsync/ompi, time) and the verdict on the targets:
  * busbw ratio gsync/ompi >= 1.3 for every size in 64 KiB .. 16 MiB,
  * ratio >= 1.0 for every size above 16 MiB,
  * 8 B latency: gsync time <= ompi time.
With variants, the targets are also checked against the best Open MPI configuration per size.
Standard library only.
"""

import argparse
import glob
import json
import os
import re
import sys

KIB = 1024
MIB = 1024 * 1024

MID_LO, MID_HI, MID_RATIO = 64 * KIB, 16 * MIB, 1.3
LARGE_RATIO = 1.0
LATENCY_BYTES = 8


def human(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def fmt_bw(x):
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 100 else f"{x:.1f}"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}"


def fmt_time(x):
    return "-" if x is None else f"{x:.1f}"


FILE_RE = re.compile(r"^(?P<tool>[A-Za-z0-9.-]+)_np(?P<np>\d+)_(?P<part>[^/]*)\.json$")


def load_results(directory, stat="best"):
    """{(tool, np): {bytes: {"time_us", "busbw", "algo", "wrong", "runs"}}} and the list of problems.
    Several runs of a size (--repeat) give one entry: the fastest (stat "best") or the median run."""
    results = {}
    problems = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        m = FILE_RE.match(os.path.basename(path))
        if not m:
            continue
        tool, np_ = m.group("tool"), int(m.group("np"))
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{path}: unreadable ({e})")
            continue
        if doc.get("world_size") != np_:
            problems.append(f"{path}: world_size {doc.get('world_size')} but the file name says {np_}")
        table = results.setdefault((tool, np_), {})
        for r in doc.get("rows", []):
            if r.get("op", "allreduce") != "allreduce" or r.get("dtype") != "float32" or r.get("redop") != "sum":
                continue
            b = int(r["bytes"])
            wrong = r.get("wrong")
            cur = table.get(b)
            entry = {
                "time_us": float(r["time_us"]),
                "busbw": float(r["busbw_gbs"]),
                "algo": r.get("algo", "?"),
                "wrong": wrong,
                "runs": 1,
                "transport": doc.get("transport", "?"),
            }
            if cur is None:
                table[b] = entry
            else:
                runs = cur["runs"] + 1
                wr = None
                if cur["wrong"] is not None or wrong is not None:
                    wr = (cur["wrong"] or 0) + (wrong or 0)
                cur.setdefault("all", [dict(cur)]).append(entry)
                if entry["time_us"] < cur["time_us"]:
                    cur.update({k: v for k, v in entry.items() if k != "all"})
                cur["runs"] = runs
                cur["wrong"] = wr
    if stat == "median":
        # The median run by time (the lower middle one for an even count), as measured.
        for table in results.values():
            for cur in table.values():
                runs_ = sorted(cur.pop("all", [dict(cur)]), key=lambda e: e["time_us"])
                mid = dict(runs_[(len(runs_) - 1) // 2])
                mid["runs"], mid["wrong"] = cur["runs"], cur["wrong"]
                cur.clear()
                cur.update(mid)
    else:
        for table in results.values():
            for cur in table.values():
                cur.pop("all", None)
    return results, problems


def load_membw(directory):
    path = os.path.join(directory, "membw.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def check_range(sizes, ratios, lo, hi, need):
    """Verdict for the sizes accepted by predicates lo and hi: every ratio >= need? (text, bool or None)."""
    pts = [(s, r) for s, r in zip(sizes, ratios) if lo(s) and hi(s) and r is not None]
    if not pts:
        return "n/a (no sizes measured in this range)", None
    s_min, r_min = min(pts, key=lambda p: p[1])
    ok = all(r >= need for _, r in pts)
    return f"{'yes' if ok else 'no'} (min ratio {r_min:.2f} at {human(s_min)})", ok


def main():
    global MID_RATIO, MID_HI
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="directory with the raw JSON files")
    ap.add_argument("--np", default=None, help='rank counts to report, e.g. "2 4" (default: all found)')
    ap.add_argument("--md", default=None, help="write the markdown report to this file")
    ap.add_argument("--command", default=None, help="command line that produced the results")
    ap.add_argument("--date", default=None)
    ap.add_argument("--nproc", default=None)
    ap.add_argument("--load-before", default=None, help="uptime before the runs")
    ap.add_argument("--load-after", default=None, help="uptime after the runs")
    ap.add_argument("--mpi-version", default=None)
    ap.add_argument("--git", default=None, help="gsync revision")
    ap.add_argument("--commands-file", default=None, help="file listing the exact benchmark commands")
    ap.add_argument("--notes", default=None, help="extra text for the report")
    ap.add_argument("--mid-ratio", type=float, default=None, help=f"target busbw ratio in the middle range (default {MID_RATIO})")
    ap.add_argument("--stat", choices=["best", "median"], default="best",
                    help="of several runs of a size (--repeat), keep the fastest (default) or the median")
    ap.add_argument("--transport", choices=["tcp", "shm"], default="tcp", help="what both ran over, for the title (default tcp)")
    ap.add_argument("--mid-hi", type=int, default=None, help="upper end of the middle range in bytes (default 16 MiB)")
    args = ap.parse_args()
    if args.mid_ratio is not None:
        MID_RATIO = args.mid_ratio
    if args.mid_hi is not None:
        MID_HI = args.mid_hi

    results, problems = load_results(args.dir, args.stat)
    membw = load_membw(args.dir)
    nps = sorted({np_ for (_, np_) in results})
    if args.np:
        nps = [int(x) for x in args.np.split()]
    nproc = int(args.nproc) if args.nproc else len(os.sched_getaffinity(0))
    variants = sorted({t for (t, _) in results if t.startswith("ompi-")})

    out = []
    w = out.append
    w("# gsync vs Open MPI: allreduce over " + ("shared memory (one host)" if args.transport == "shm" else "TCP loopback"))
    w("")
    w("float32 sum, out of place. busbw = algbw * 2(N-1)/N in GB/s (1e9 B/s); time = per-iteration mean, max over"
      " ranks; ratio = gsync busbw / Open MPI busbw (> 1: gsync faster). Where a size was measured more than once"
      " (--repeat), " + ("the median run" if args.stat == "median" else "the fastest run") + " of each tool is kept.")
    w("")
    if args.command:
        w(f"- command: `{args.command}`")
    if args.date:
        w(f"- date: {args.date}")
    w(f"- host: nproc = {nproc}, CPU: {cpu_model()}")
    if args.load_before:
        w(f"- load before: `{args.load_before.strip()}`")
    if args.load_after:
        w(f"- load after: `{args.load_after.strip()}`")
    if args.mpi_version:
        w(f"- Open MPI: {args.mpi_version.strip()}")
    if args.git:
        w(f"- gsync revision: {args.git.strip()}")
    if args.notes:
        w(f"- notes: {args.notes.strip()}")
    w("")

    if membw:
        w("## Memory bandwidth (gsync-membw, single thread)")
        w("")
        mb = membw.get("bytes", 0)
        w(f"Buffer {human(mb)}, best of {membw.get('reps')}. rate = buffer bytes / time; traffic = bytes read + written"
          " / time.")
        w("")
        w("| kernel | time (us) | rate (GB/s) | traffic (GB/s) |")
        w("|---|---:|---:|---:|")
        for k, name in (("copy", "memcpy"), ("reduce", "c = a + b (float32)")):
            d = membw.get(k, {})
            w(f"| {name} | {d.get('time_us', 0):.0f} | {d.get('rate_gbs', 0):.2f} | {d.get('traffic_gbs', 0):.2f} |")
        w("")
        copy_r = membw.get("copy", {}).get("rate_gbs")
        red_r = membw.get("reduce", {}).get("rate_gbs")
        if copy_r and red_r:
            w("Estimated busbw bound on loopback: per busbw byte a ring allreduce moves one byte through the kernel"
              " (two copies: into and out of the socket buffer) and, for half of the bytes (reduce-scatter),"
              " reduces one byte; N ranks share min(N, nproc) cores:"
              " bound = min(N, nproc)/N / (2/copy + 0.5/reduce).")
            w("")
            per_core = 1.0 / (2.0 / copy_r + 0.5 / red_r)
            for np_ in nps:
                w(f"- N = {np_}: about {per_core * min(np_, nproc) / np_:.2f} GB/s busbw")
            w("")

    summary = []
    for np_ in nps:
        g = results.get(("gsync", np_), {})
        o = results.get(("ompi", np_), {})
        vs = {v: results.get((v, np_), {}) for v in variants}
        sizes = sorted(set(g) | set(o))
        w(f"## N = {np_} ranks")
        w("")
        if not g or not o:
            w(f"Missing results: gsync {'ok' if g else 'MISSING'}, ompi {'ok' if o else 'MISSING'}.")
            w("")
            problems.append(f"N={np_}: missing gsync or ompi results")
            continue
        base = results.get(("gsyncbase", np_), {})  # --baseline: an earlier gsync build, run alternately
        hdr = ["size", "gsync algo", "gsync busbw", "ompi busbw", "ratio", "gsync time (us)", "ompi time (us)"]
        if base:
            hdr += ["baseline busbw", "gsync / baseline"]
        for v in variants:
            hdr.append(f"{v} busbw")
        if variants:
            hdr += ["best ompi busbw", "ratio vs best"]
        w("| " + " | ".join(hdr) + " |")
        w("|" + "|".join(["---:" if i != 1 else "---" for i in range(len(hdr))]) + "|")
        ratios, ratios_best = [], []
        for s in sizes:
            gr, orow = g.get(s), o.get(s)
            gb = gr["busbw"] if gr else None
            ob = orow["busbw"] if orow else None
            r = ratio(gb, ob)
            ratios.append(r)
            cells = [human(s), gr["algo"] if gr else "-", fmt_bw(gb), fmt_bw(ob), fmt_ratio(r),
                     fmt_time(gr["time_us"] if gr else None), fmt_time(orow["time_us"] if orow else None)]
            if base:
                br = base.get(s)
                bb = br["busbw"] if br else None
                cells += [fmt_bw(bb), fmt_ratio(ratio(gb, bb))]
            best = ob
            for v in variants:
                vr = vs[v].get(s)
                vb = vr["busbw"] if vr else None
                cells.append(fmt_bw(vb))
                if vb is not None and (best is None or vb > best):
                    best = vb
            if variants:
                rb = ratio(gb, best)
                ratios_best.append(rb)
                cells += [fmt_bw(best), fmt_ratio(rb)]
            w("| " + " | ".join(cells) + " |")
            for tool, row in (("gsync", gr), ("ompi", orow)):
                if row and row["wrong"]:
                    problems.append(f"N={np_} {human(s)}: {tool} reported {row['wrong']} wrong elements")
        w("")

        def verdicts(rs, label):
            mid, _ = check_range(sizes, rs, lambda s: s >= MID_LO, lambda s: s <= MID_HI, MID_RATIO)
            big, _ = check_range(sizes, rs, lambda s: s > MID_HI, lambda s: True, LARGE_RATIO)
            lines = [f"- ratio >= {MID_RATIO} for 64 KiB..{human(MID_HI)}{label}: {mid}",
                     f"- ratio >= {LARGE_RATIO} above {human(MID_HI)}{label}: {big}"]
            return lines

        lines = verdicts(ratios, "")
        gl, ol = g.get(LATENCY_BYTES), o.get(LATENCY_BYTES)
        if gl and ol:
            ok = gl["time_us"] <= ol["time_us"]
            lines.append(f"- 8 B latency gsync <= ompi: {'yes' if ok else 'no'} "
                         f"(gsync {gl['time_us']:.1f} us, ompi {ol['time_us']:.1f} us)")
        else:
            lines.append("- 8 B latency gsync <= ompi: n/a (8 B not measured)")
        if variants:
            lines += verdicts(ratios_best, " (vs best Open MPI configuration)")
            best_lat = min([ol["time_us"]] + [vs[v][LATENCY_BYTES]["time_us"] for v in variants
                                              if LATENCY_BYTES in vs[v]]) if ol else None
            if gl and best_lat is not None:
                lines.append(f"- 8 B latency gsync <= best ompi: {'yes' if gl['time_us'] <= best_lat else 'no'} "
                             f"(gsync {gl['time_us']:.1f} us, best ompi {best_lat:.1f} us)")
        slower = [(s, r) for s, r in zip(sizes, ratios) if r is not None and r < 1.0]
        if slower:
            worst = min(slower, key=lambda p: p[1])
            lines.append(f"- gsync slower than ompi (ratio < 1) at {len(slower)} of {len(sizes)} sizes: "
                         + ", ".join(f"{human(s)} ({r:.2f})" for s, r in slower)
                         + f"; worst {human(worst[0])} at {worst[1]:.2f}")
        else:
            lines.append("- gsync is not slower than ompi at any size")
        runs = sorted({row["runs"] for row in list(g.values()) + list(o.values())})
        lines.append(f"- runs per size kept as {'median' if args.stat == 'median' else 'best'} of: {', '.join(map(str, runs))}")
        w("Targets:")
        w("")
        out.extend(lines)
        w("")
        summary.append((np_, lines))

    if problems:
        w("## Problems")
        w("")
        for p in problems:
            w(f"- {p}")
        w("")

    if args.commands_file and os.path.exists(args.commands_file):
        w("## Benchmark commands")
        w("")
        w("```")
        with open(args.commands_file) as f:
            out.extend(line.rstrip("\n") for line in f)
        w("```")
        w("")

    text = "\n".join(out)
    print(text)
    if args.md:
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text + "\n")
    wrong = any("wrong elements" in p for p in problems)
    missing = any("missing" in p for p in problems)
    return 1 if (wrong or missing) else 0


if __name__ == "__main__":
    sys.exit(main())
