"""Shared helpers of cluster_report.py and plot.py: loading benchmark JSON, size names, series order.

Reads the JSON that gsync-perf, ompi_allreduce and gloo_allreduce write with --json
({"world_size", "transport", "rows": [{"op", "bytes", "dtype", "redop", "algo", "time_us", "busbw_gbs",
"wrong", ...}]}) from files named `<series>_np<N>_<part>.json` (compare_ompi.sh, cluster_bench.sh).
Standard library only.
"""

import glob
import json
import os
import re

FILE_RE = re.compile(r"^(?P<tool>[A-Za-z0-9.-]+)_np(?P<np>\d+)_(?P<part>[^/]*)\.json$")

# Display order of the series; unknown ones come after, alphabetically.
ORDER = ["gsync", "gsync-ring", "gsync-hier", "gloo-ring-chunked", "gloo-halving-doubling", "gloo-ring",
         "ompi", "ompi-ring", "ompi-rabenseifner", "ompi-nommap"]


def series_key(name):
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def human(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def load_results(directory):
    """{(series, np): {bytes: {"time_us", "busbw" (GB/s), "algo", "wrong", "runs", "transport"}}}, problems.

    Only float32 sum allreduce rows. Several files of one series and N (size ranges, repetitions) are
    merged; for a size measured more than once the fastest run is kept and the wrong counts are added."""
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
            entry = {"time_us": float(r["time_us"]), "busbw": float(r["busbw_gbs"]), "algo": r.get("algo", "?"),
                     "wrong": wrong, "runs": 1, "transport": doc.get("transport", "?")}
            cur = table.get(b)
            if cur is None:
                table[b] = entry
                continue
            wr = None
            if cur["wrong"] is not None or wrong is not None:
                wr = (cur["wrong"] or 0) + (wrong or 0)
            runs = cur["runs"] + 1
            if entry["time_us"] < cur["time_us"]:
                cur.update(entry)
            cur["runs"], cur["wrong"] = runs, wr
    return results, problems


def read_meta(directory):
    """key=value lines of DIR/meta.txt (cluster_bench.sh) as a dict; {} when absent."""
    meta = {}
    try:
        with open(os.path.join(directory, "meta.txt")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    meta[k] = v
    except OSError:
        pass
    return meta
