#!/bin/bash
# modes: base off decline scratch
cd /work/main
out=/tmp/ab_$1; mkdir -p $out
for rep in 1 2 3; do
 for np in 2 4; do
  for mode in base off decline scratch; do
   B=build; env=(GSYNC_SHM_SINGLE_COPY=256K GSYNC_EXP_REDUCE_CMA=0)
   case $mode in base) B=/tmp/base/build;; off) env=(GSYNC_SHM_SINGLE_COPY=0);; scratch) env=(GSYNC_SHM_SINGLE_COPY=256K GSYNC_EXP_REDUCE_CMA=1);; esac
   env "${env[@]}" timeout 300 $B/tools/gsyncrun -n $np -- $B/tools/gsync-perf -b 256K -e 64M -f 4 -c 1 -n 20 -w 10 2>&1 | grep "^\[0\] " | grep -v "#" | awk -v m=$mode -v np=$np '{print np, m, $2, $9}' >> $out/all.txt
  done
 done
done
python3 - $out/all.txt <<'PY'
import sys, statistics, collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    np_,m,s,b=l.split(); d[(int(np_),int(s),m)].append(float(b))
for np_ in (2,4):
    print(f"N={np_}: size | base | off | decline | scratch  (median busbw GB/s)")
    for s in sorted({k[1] for k in d if k[0]==np_}):
        row=[f"{statistics.median(d[(np_,s,m)]):.2f}" if d[(np_,s,m)] else '-' for m in ('base','off','decline','scratch')]
        print(f"  {s>>10} KiB | " + " | ".join(row))
PY
