#!/bin/bash
# alternated runs of several builds; prints median and min time per size
out=$1; shift; : > $out
for rep in $(seq 1 ${REPS:-9}); do
  for B in "$@"; do
    $B/tools/gsyncrun -n 2 -- $B/tools/gsync-perf -b ${MIN:-1K} -e ${MAX:-4K} -f 2 -c 1 -n ${ITERS:-20000} -w 1000 2>&1 | grep "^\[0\] " | grep -v "#" | awk -v b=$B '{print b, $2, $7}' >> $out
  done
done
python3 - $out <<'PY'
import sys, collections, statistics
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    b,s,t=l.split(); d[(int(s),b)].append(float(t))
for k in sorted(d): print(k[0], k[1], "median %.3f min %.3f" % (statistics.median(d[k]), min(d[k])))
PY
