#!/usr/bin/env python3
"""PNG plots of allreduce results: busbw against message size (log x), one line per implementation.

    python3 benchmarks/plot.py all                       # every results table in benchmarks/results (also
                                                         #   any RESULTS/<name>/raw/ -> RESULTS/<name>/<name>_np<N>.png)
    python3 benchmarks/plot.py compare [--results DIR]   # compare_ompi.sh: DIR/raw -> DIR/compare_ompi_np<N>.png,
                                                         #   DIR/raw_shm -> DIR/compare_ompi_shm_np<N>.png
    python3 benchmarks/plot.py cluster --dir DIR/cluster/raw/A_4x1 [--out DIR/cluster/A_4x1.png]
    python3 benchmarks/plot.py series --dir RAW --np N --out FILE.png [--title T] [--bound-mbs X]

Input: the JSON files of gsync-perf, ompi_allreduce and gloo_allreduce named `<series>_np<N>_<part>.json`
(as compare_ompi.sh and cluster_bench.sh write them); parts and repetitions are merged and the
fastest run per size is kept (benchlib.py). Cluster directories also have meta.txt, which gives
the title and the bound (iperf3 one-stream rate), drawn as a dashed line.

Each PNG has two panels: busbw on a log scale over all sizes, and on a linear scale for the large
sizes (from 1/256 of the largest), where the differences between implementations and the distance
to the bound are visible.

Backends: gnuplot (Debian gnuplot-nox; pngcairo, else png terminal) if installed, else matplotlib;
with neither, prints a message and exits 0 (plotting is optional). Exit status 1 when a plot failed
or there was nothing to plot, 2 for usage errors.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ORDER, human, load_results, read_meta, series_key  # noqa: E402

COLORS = {
    "gsync": "#c0001a", "gsync-ring": "#ff8c00", "gsync-hier": "#8b00b0",
    "gloo-ring-chunked": "#2e8b57", "gloo-halving-doubling": "#7cb342", "gloo-ring": "#00897b",
    "ompi": "#1f4fbf", "ompi-ring": "#42a5f5", "ompi-rabenseifner": "#5c6bc0", "ompi-nommap": "#7e57c2",
}
EXTRA_COLORS = ["#795548", "#607d8b", "#e91e63", "#009688", "#9e9d24"]


def backend():
    """'gnuplot', 'matplotlib' or None."""
    if shutil.which("gnuplot"):
        return "gnuplot"
    try:
        import matplotlib  # noqa: F401
        return "matplotlib"
    except ImportError:
        return None


def size_label(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return str(b)


def plot(curves, out, title, bound=None, bound_label=None):
    """curves: {name: [(bytes, busbw_GBs)]}. bound: busbw in GB/s or None. Returns True on success."""
    curves = {k: sorted(v) for k, v in curves.items() if v}
    if not curves:
        print(f"plot.py: nothing to plot for {out}", file=sys.stderr)
        return False
    peak = max(max(b for _, b in v) for v in curves.values())
    if bound:
        peak = max(peak, bound)
    # MB/s for slow networks, GB/s otherwise.
    scale, unit = (1000.0, "MB/s") if peak < 1.0 else (1.0, "GB/s")
    sizes = sorted({s for v in curves.values() for s, _ in v})
    big_from = max(sizes[0], sizes[-1] // 256)
    names = sorted(curves, key=series_key)
    colors = {}
    extra = iter(EXTRA_COLORS * 10)
    for n in names:
        colors[n] = COLORS.get(n) or next(extra)
    os.makedirs(os.path.dirname(os.path.abspath(out)) or ".", exist_ok=True)
    kind = backend()
    if kind is None:
        print("plot.py: skipped: neither gnuplot nor python3 matplotlib is installed"
              " (apt-get install gnuplot-nox)", file=sys.stderr)
        return True
    if kind == "gnuplot":
        return plot_gnuplot(curves, names, colors, out, title, bound, bound_label, scale, unit, sizes, big_from)
    return plot_matplotlib(curves, names, colors, out, title, bound, bound_label, scale, unit, sizes, big_from)


def tics(sizes, lo=None):
    lo = lo or sizes[0]
    ts, s = [], 1
    while s <= sizes[-1]:
        if s >= lo:
            ts.append(s)
        s *= 2
    while len(ts) > 9:  # at most ~9 labels per panel
        ts = ts[::2]
    return ts


def gp_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plot_gnuplot(curves, names, colors, out, title, bound, bound_label, scale, unit, sizes, big_from):
    with tempfile.TemporaryDirectory(prefix="gsync-plot-") as tmp:
        files = {}
        for i, n in enumerate(names):
            path = os.path.join(tmp, f"s{i}.dat")
            with open(path, "w") as f:
                for s, b in curves[n]:
                    f.write(f"{s} {b * scale:.6g}\n")
            files[n] = path
        terms = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True).stdout + \
            subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True).stderr
        term = "pngcairo size 1500,600 font 'Sans,10'" if "pngcairo" in terms else "png size 1500,600"
        g = []
        g.append(f"set terminal {term}")
        g.append("set termoption noenhanced")  # no subscripts from the underscores in A_4x1, ring_chunked
        g.append(f"set output {gp_quote(out)}")
        g.append("set multiplot layout 1,2 title " + gp_quote(title))
        g.append("set logscale x 2")
        g.append("set grid xtics ytics mytics lc rgb '#dddddd'")
        g.append("set xlabel 'message size (bytes)'")
        g.append(f"set ylabel 'busbw ({unit})'")
        g.append("set key inside top left box opaque font ',9'")
        g.append("set format y '%g'")

        def plots(lo):
            items = []
            for n in names:
                items.append(f"{gp_quote(files[n])} using 1:($1>={lo}?$2:1/0) with linespoints lw {3 if n == 'gsync' else 2}"
                             f" pt 7 ps 0.6 lc rgb '{colors[n]}' title {gp_quote(n)}")
            if bound:
                items.append(f"{bound * scale:.6g} with lines dt 2 lw 2 lc rgb 'black' title {gp_quote(bound_label or 'bound')}")
            return "plot " + ", \\\n  ".join(items)

        t_all = tics(sizes)
        g.append("set xtics (" + ", ".join(f"'{size_label(t)}' {t}" for t in t_all) + ")")
        g.append("set logscale y")
        g.append(f"set xrange [{sizes[0] / 1.3}:{sizes[-1] * 1.3}]")
        g.append("set title 'all sizes (log scale)'")
        g.append(plots(0))
        g.append("unset logscale y")
        g.append("unset key")
        g.append("set yrange [0:*]")
        t_big = tics(sizes, big_from)
        g.append("set xtics (" + ", ".join(f"'{size_label(t)}' {t}" for t in t_big) + ")")
        g.append(f"set xrange [{big_from / 1.3}:{sizes[-1] * 1.3}]")
        g.append(f"set title 'from {human(big_from)} (linear scale)'")
        g.append(plots(big_from))
        g.append("unset multiplot")
        script = os.path.join(tmp, "plot.gp")
        with open(script, "w") as f:
            f.write("\n".join(g) + "\n")
        r = subprocess.run(["gnuplot", script], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"plot.py: gnuplot failed for {out}:\n{r.stderr}", file=sys.stderr)
            return False
    print(f"plot.py: wrote {out}")
    return True


def plot_matplotlib(curves, names, colors, out, title, bound, bound_label, scale, unit, sizes, big_from):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(15, 6))
    for ax, lo, log in ((axes[0], 0, True), (axes[1], big_from, False)):
        for n in names:
            pts = [(s, b * scale) for s, b in curves[n] if s >= lo]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=3 if n == "gsync" else 2,
                        color=colors[n], label=n)
        if bound:
            ax.axhline(bound * scale, ls="--", lw=2, color="black", label=bound_label or "bound")
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        t = tics(sizes, lo or None)
        ax.set_xticks(t)
        ax.set_xticklabels([size_label(x) for x in t])
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(f"busbw ({unit})")
        ax.set_title("all sizes (log scale)" if log else f"from {human(big_from)} (linear scale)")
        ax.grid(True, which="both", color="#dddddd")
        if log:
            ax.legend(loc="upper left", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"plot.py: wrote {out}")
    return True


def curves_of(directory, np_):
    results, _ = load_results(directory)
    return {t: [(s, r["busbw"]) for s, r in rows.items()] for (t, n), rows in results.items() if n == np_}


def nps_of(directory):
    results, _ = load_results(directory)
    return sorted({n for (_, n) in results})


def cmd_cluster(directory, out):
    meta = read_meta(directory)
    scen = meta.get("scenario", os.path.basename(os.path.normpath(directory)))
    if out is None:
        out = os.path.join(os.path.dirname(os.path.dirname(os.path.normpath(directory))), scen + ".png")
    world = int(meta.get("world", 0) or 0)
    if not world:
        nps = nps_of(directory)
        if len(nps) != 1:
            print(f"plot.py: {directory}: no meta.txt and {len(nps)} rank counts", file=sys.stderr)
            return False
        world = nps[0]
    bound = label = None
    try:
        one = float(meta.get("iperf_one_stream_mbit") or 0)
    except ValueError:
        one = 0
    if one > 0:
        bound, label = one / 8000.0, f"bound: iperf3 {one:.0f} Mbit/s"
    elif meta.get("rate_mbit"):
        bound, label = float(meta["rate_mbit"]) * 0.956 / 8000.0, "bound: nominal rate x 0.956"
    title = (f"{scen}: allreduce float32 sum, {meta.get('hosts', '?')} hosts x {meta.get('ranks_per_host', '?')}"
             f" ranks, {meta.get('rate_mbit', '?')} Mbit/s tbf links ({meta.get('date', '')})")
    return plot(curves_of(directory, world), out, title, bound, label)


def cmd_compare(results_dir):
    ok, any_ = True, False
    for sub, stem, what in (("raw", "compare_ompi", "loopback TCP"), ("raw_shm", "compare_ompi_shm", "one host, shared memory")):
        d = os.path.join(results_dir, sub)
        if not glob.glob(os.path.join(d, "*.json")):
            continue
        for np_ in nps_of(d):
            any_ = True
            out = os.path.join(results_dir, f"{stem}_np{np_}.png")
            ok &= plot(curves_of(d, np_), out, f"{stem}: allreduce float32 sum, {np_} ranks, {what}")
    if not any_:
        print(f"plot.py: no compare_ompi.sh results under {results_dir}/raw or {results_dir}/raw_shm", file=sys.stderr)
    return ok and any_


def cmd_all(results_dir):
    ok = True
    if glob.glob(os.path.join(results_dir, "raw", "*.json")) or glob.glob(os.path.join(results_dir, "raw_shm", "*.json")):
        ok &= cmd_compare(results_dir)
    for d in sorted(glob.glob(os.path.join(results_dir, "cluster", "raw", "*"))):
        if os.path.isdir(d) and glob.glob(os.path.join(d, "*.json")):
            ok &= cmd_cluster(d, None)
    # Any other results set laid out as RESULTS/<name>/raw/<series>_np<N>_<part>.json: one PNG per N.
    for d in sorted(glob.glob(os.path.join(results_dir, "*", "raw"))):
        name = os.path.basename(os.path.dirname(d))
        if name == "cluster" or not glob.glob(os.path.join(d, "*.json")):
            continue
        for np_ in nps_of(d):
            ok &= plot(curves_of(d, np_), os.path.join(results_dir, name, f"{name}_np{np_}.png"),
                       f"{name}: allreduce float32 sum, {np_} ranks")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="every results table under --results")
    a.add_argument("--results", default="benchmarks/results")
    c = sub.add_parser("compare", help="compare_ompi.sh results (raw/ and raw_shm/)")
    c.add_argument("--results", default="benchmarks/results")
    k = sub.add_parser("cluster", help="one cluster_bench.sh scenario")
    k.add_argument("--dir", required=True)
    k.add_argument("--out", default=None)
    s = sub.add_parser("series", help="any directory of <series>_np<N>_<part>.json files")
    s.add_argument("--dir", required=True)
    s.add_argument("--np", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--title", default=None)
    s.add_argument("--bound-mbs", type=float, default=None, help="horizontal bound line, busbw in MB/s")
    args = ap.parse_args()
    if backend() is None:
        print("plot.py: skipped: neither gnuplot nor python3 matplotlib is installed (apt-get install gnuplot-nox)",
              file=sys.stderr)
        return 0
    if args.cmd == "all":
        ok = cmd_all(args.results)
    elif args.cmd == "compare":
        ok = cmd_compare(args.results)
    elif args.cmd == "cluster":
        ok = cmd_cluster(args.dir, args.out)
    else:
        b = args.bound_mbs / 1000.0 if args.bound_mbs else None
        ok = plot(curves_of(args.dir, args.np), args.out, args.title or f"allreduce, {args.np} ranks", b,
                  f"bound {args.bound_mbs:g} MB/s" if b else None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
