#!/bin/bash
out=$1; B0=$2; B1=$3; MINS=$4; : > $out
for rep in $(seq 1 8); do for B in $B0 $B1; do
  $B/tools/gsyncrun -n 2 -- $B/tools/gsync-perf -b $MINS -e 2M -f 2 -c 1 -n 20 -w 10 2>&1 | grep "^\[0\] " | grep -v "#" | awk -v b=$B '{print b, $2, $9}' >> $out
done; done
python3 - $out <<'PY'
import sys, collections, statistics
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    b,s,t=l.split(); d[(int(s),b)].append(float(t))
for k in sorted(d): print(k[0], k[1], "busbw median %.2f min %.2f max %.2f" % (statistics.median(d[k]), min(d[k]), max(d[k])))
PY
