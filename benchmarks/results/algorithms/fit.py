#!/usr/bin/env python3
"""Fits the allreduce cost model of include/gsync/algo/select.hpp to gsync-perf measurements.

usage: fit.py RAW_DIR > tables.md
Reads RAW_DIR/{algo}_np{N}_{s,l}_r{R}.json (written by run.sh), keeps the best time over repeats
for each (algorithm, N, size), prints the measured tables, fits alpha (median over latency-bound
points) and beta/gamma (least squares on relative error over bandwidth-bound points; the model is
linear in the three constants) and shows, for every (N, size),
the measured best algorithm, the model's pick and the time lost by the pick.
The formulas below mirror estimate_us() in select.hpp; keep them in step.
"""
import glob, json, math, os, re, sys

ALGOS = ["ring", "recursive_doubling", "halving_doubling", "tree", "direct"]
SEG, SCR = 512 << 10, 256 << 10


def coeffs(algo, s, n):
    """(alpha, beta, gamma) coefficients of the estimate of `algo` on s bytes over n ranks."""
    if n <= 1:
        return (0.0, 0.0, 0.0)
    P = 1 << (n.bit_length() - 1)
    L = P.bit_length() - 1
    f = 0.0 if P == n else 1.0
    H = n.bit_length() - 1
    pieces = lambda total, unit: max(1.0, float(int((total + unit - 1) // unit)))
    if algo == "ring":
        Sr = pieces(s / n, SEG)
        return (2 * (n - 1) + Sr - 1, 2 * (n - 1) / n * s, (n - 1) / n * s)
    if algo == "recursive_doubling":
        return (pieces(s, SCR) * (L + 2 * f), (L + 2 * f) * s, (L + f) * s)
    if algo == "halving_doubling":
        return (2 * L + 2 * f, (2 * (P - 1) / P + 2 * f) * s, ((P - 1) / P + f) * s)
    if algo == "tree":
        St = pieces(s / 2, SEG)
        return (2 * (2 * H + St - 1), 2 * s + 2 * H * s / (2 * St), s)
    if algo == "direct":
        return (pieces(s, SCR) * (n - 1), (n - 1) * s, (n - 1) * s)
    raise ValueError(algo)


def solve(rows, ys, k):
    """Least squares with the first k of three unknowns (normal equations, Gaussian elimination)."""
    A = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    for i in range(k):
        p = max(range(i, k), key=lambda q: abs(A[q][i]))
        A[i], A[p], b[i], b[p] = A[p], A[i], b[p], b[i]
        for q in range(k):
            if q != i and A[i][i]:
                m = A[q][i] / A[i][i]
                A[q] = [x - m * y for x, y in zip(A[q], A[i])]
                b[q] -= m * b[i]
    return [b[i] / A[i][i] for i in range(k)]


def main():
    raw = sys.argv[1]
    best = {}
    for path in glob.glob(os.path.join(raw, "*.json")):
        m = re.match(r"(.+)_np(\d+)_[sl]_r\d+\.json$", os.path.basename(path))
        if not m:
            continue
        algo, n = m.group(1), int(m.group(2))
        try:
            with open(path) as fh:
                rows = json.load(fh)["rows"]
        except (OSError, ValueError, KeyError):
            continue  # a run still in progress or one that failed
        if True:
            for row in rows:
                key = (algo, n, row["bytes"])
                best[key] = min(best.get(key, math.inf), row["time_us"])
    worlds = sorted({k[1] for k in best})
    sizes = sorted({k[2] for k in best})
    print("## Measured time per allreduce (us), float32 sum, best over repeats\n")
    for n in worlds:
        print(f"### N = {n}\n")
        print("| bytes | " + " | ".join(ALGOS) + " | fastest |")
        print("|---:|" + "---:|" * len(ALGOS) + "---|")
        for s in sizes:
            ts = [best.get((a, n, s)) for a in ALGOS]
            if all(t is None for t in ts):
                continue
            fastest = min((t, a) for t, a in zip(ts, ALGOS) if t is not None)[1]
            print(f"| {s} | " + " | ".join("-" if t is None else f"{t:.1f}" for t in ts) + f" | {fastest} |")
        print()
    # Robust two-stage fit (the 2-core machine is shared and oversubscribed, so single points can be
    # off by 10x): alpha is the median of t / (alpha coefficient) over the latency-bound points
    # (<= 2 KiB); beta and gamma are then fitted by least squares on relative error over the
    # bandwidth-bound points (>= 1 MiB) with alpha fixed, gamma dropped if it comes out negative.
    small = sorted(t / coeffs(a, s, n)[0] for (a, n, s), t in best.items() if s <= 2048)
    alpha = small[len(small) // 2]
    large = [(coeffs(a, s, n), t) for (a, n, s), t in best.items() if s >= (1 << 20)]
    rows = [(cf[1] / t, cf[2] / t) for cf, t in large]
    ys = [1.0 - alpha * cf[0] / t for cf, t in large]
    x = solve(rows, ys, 2)
    if x[1] < 0:
        x = solve(rows, ys, 1) + [0.0]
    beta, gamma = x
    print(f"## Fit ({len(small)} latency-bound points, {len(large)} bandwidth-bound points)\n")
    print(f"alpha = {alpha:.2f} us, beta = {beta:.3e} us/B ({1 / beta / 1e3:.2f} GB/s), "
          f"gamma = {gamma:.3e} us/B" + (f" ({1 / gamma / 1e3:.2f} GB/s)" if gamma > 0 else "") + "\n")
    model = lambda a, s, n: sum(c * v for c, v in zip(coeffs(a, s, n), (alpha, beta, gamma)))
    print("## Model pick against the measured fastest\n")
    print("| N | bytes | measured fastest (us) | model pick | its measured time (us) | loss |")
    print("|---:|---:|---|---|---:|---:|")
    losses = []
    for n in worlds:
        for s in sizes:
            ms = {a: best[(a, n, s)] for a in ALGOS if (a, n, s) in best}
            if not ms:
                continue
            fa = min(ms, key=ms.get)
            pick = min(ALGOS, key=lambda a: model(a, s, n))
            tp = ms.get(pick)
            loss = tp / ms[fa] if tp else float("nan")
            losses.append(loss)
            print(f"| {n} | {s} | {fa} ({ms[fa]:.1f}) | {pick} | {'-' if tp is None else f'{tp:.1f}'} | {loss:.2f}x |")
    ok = [l for l in losses if l == l]
    print(f"\nGeometric mean loss {math.exp(sum(map(math.log, ok)) / len(ok)):.3f}x, worst {max(ok):.2f}x over {len(ok)} shapes.")


if __name__ == "__main__":
    main()
