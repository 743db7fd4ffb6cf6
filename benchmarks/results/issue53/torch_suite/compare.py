#!/usr/bin/env python3
"""Per-test outcomes of two verbose runs of torch_suite.py (run_suite.sh's logs), and the tests one
backend passed where the other did not, with the other's reason.

    compare.py gloo_3.log gsync_3.log
"""
import re
import sys
from collections import Counter

PAT = re.compile(r"^(test_\w+) \(__main__\.\w+\.\1\)(?: \.\.\. )?(.*)$")


def outcomes(path):
    res, pending = {}, None
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = PAT.match(line)
        if m:
            pending = m.group(1)
            rest = m.group(2)
        elif pending:
            rest = line
        else:
            continue
        for word, kind in (("ok", "passed"), ("skipped", "skipped"), ("FAIL", "failed"), ("ERROR", "error")):
            if rest == word or rest.startswith(word + " ") or (word == "ok" and rest.endswith(" ok")):
                reason = rest[len(word):].strip().strip("'") if kind == "skipped" else ""
                res[pending] = (kind, reason)
                pending = None
                break
    return res


def main():
    a_path, b_path = sys.argv[1], sys.argv[2]
    a, b = outcomes(a_path), outcomes(b_path)
    for name, r in ((a_path, a), (b_path, b)):
        print(name, dict(Counter(k for k, _ in r.values())))
    only_a = sorted(t for t, (k, _) in a.items() if k == "passed" and b.get(t, ("?", ""))[0] != "passed")
    print(f"\npassed in {a_path} only: {len(only_a)}")
    reasons = Counter()
    for t in only_a:
        kind, why = b.get(t, ("missing", ""))
        reasons[f"{kind}: {why}"] += 1
        print(f"  {t}: {kind} {why}")
    print("\nby reason:")
    for r, n in reasons.most_common():
        print(f"  {n:3d}  {r}")
    only_b = sorted(t for t, (k, _) in b.items() if k == "passed" and a.get(t, ("?", ""))[0] != "passed")
    print(f"\npassed in {b_path} only: {len(only_b)}: {', '.join(only_b)}")


if __name__ == "__main__":
    main()
