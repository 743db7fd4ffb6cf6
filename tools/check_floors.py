#!/usr/bin/env python3
"""Checks that include/gsync is built in floors: each folder includes only folders below it.

A folder (a "room": include/gsync/<folder>/, or one top-level public header)
includes another when one of its files includes one of the other's. The rooms must form a
directed acyclic graph (so every room has a floor and no arrow runs back up), and:
  - detail/ holds leaf utilities: its files include nothing of gsync but detail/;
  - core/ includes nothing from transport/ or bootstrap/ (set-up and media sit above it);
  - a forwarding header (an old path kept for programs that include it: "Forwarding header" in
    its first lines, one include) draws no arrow;
  - no header includes a gsync header after its code (an include at the end closes a cycle),
    except the .ipp halves of the separately compiled files and GSYNC_SEPARATE_COMPILATION blocks.
Prints the floors (lowest first) and exits 1 with every violation named by file and line.

usage: tools/check_floors.py [ROOT]     (ROOT: the repository, default: this script's parent)
"""

import os
import re
import sys
from collections import defaultdict

INCLUDE = re.compile(r'^\s*#\s*include\s+"gsync/([^"]+)"')
IPP = re.compile(r'\.ipp"?$')


def room(path):
    """The room of a path relative to include/gsync: its folder, or a top-level header itself."""
    return path.split("/", 1)[0] + "/" if "/" in path else path


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(root, "include", "gsync")
    edges = defaultdict(set)  # room -> rooms it includes
    where = {}                # (from room, to room) -> first "file:line" of such an include
    problems = []
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if not name.endswith((".hpp", ".cuh", ".ipp", ".h")):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, base)
            me = room(rel)
            seen_code = False
            in_compiled_block = 0
            with open(full, encoding="utf-8") as f:
                text = f.read().splitlines()
            if any("Forwarding header" in l for l in text[:4]):
                if sum(1 for l in text if INCLUDE.match(l)) != 1:
                    problems.append(f"include/gsync/{rel}: a forwarding header includes exactly one gsync header")
                continue
            for lineno, line in enumerate(text, 1):
                s = line.strip()
                if s.startswith("#if") and "GSYNC_SEPARATE_COMPILATION" in s:
                    in_compiled_block += 1
                elif s.startswith("#endif") and in_compiled_block:
                    in_compiled_block -= 1
                if s.startswith("namespace ") or s.startswith("template") or s.startswith("inline "):
                    seen_code = True
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                there = room(target)
                at = f"include/gsync/{rel}:{lineno}"
                if seen_code and not IPP.search(target) and not in_compiled_block:
                    problems.append(f"{at}: includes gsync/{target} after its code (an include at the end closes a cycle)")
                if there == me:
                    continue
                edges[me].add(there)
                where.setdefault((me, there), at)
                if me == "detail/":
                    problems.append(f"{at}: detail/ holds leaf utilities, but this includes gsync/{target}")
                if me == "core/" and there in ("transport/", "bootstrap/"):
                    problems.append(f"{at}: core/ includes gsync/{target} ({there} sits above core/)")
    # Floors: a room's floor is one above the highest floor it includes; a cycle has none.
    rooms = set(edges) | {t for ts in edges.values() for t in ts}
    floor, state = {}, {}

    def visit(r, stack):
        if state.get(r) == "done":
            return floor[r]
        if state.get(r) == "open":
            cyc = stack[stack.index(r):] + [r]
            arrows = [f"{a} -> {b} ({where[(a, b)]})" for a, b in zip(cyc, cyc[1:])]
            problems.append("rooms include each other in a circle: " + "; ".join(arrows))
            return 0
        state[r] = "open"
        stack.append(r)
        f = 0
        for t in sorted(edges.get(r, ())):
            f = max(f, visit(t, stack) + 1)
        stack.pop()
        state[r] = "done"
        floor[r] = f
        return f

    for r in sorted(rooms):
        visit(r, [])
    by_floor = defaultdict(list)
    for r, f in floor.items():
        by_floor[f].append(r)
    for f in sorted(by_floor):
        print(f"floor {f}: {', '.join(sorted(by_floor[f]))}")
    for p in problems:
        print("check_floors: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
