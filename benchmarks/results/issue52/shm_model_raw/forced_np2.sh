#!/bin/bash
cd .
out=benchmarks/results/issue52/shm_model_raw/forced_np2.txt
for rep in 1 2 3; do
  for a in recursive_doubling halving_doubling ring direct tree star; do
   for rng in "8 32K 1000" "64K 512K 200" "1M 64M 20"; do
    set -- $rng
    timeout 300 build/tools/gsyncrun -n 2 -- build/tools/gsync-perf -a $a -b $1 -e $2 -n $3 -w 10 -c 0 2>&1 | grep "^\[0\] " | grep -v "#" | awk -v a=$a '{print 2, a, $2, $9, $7}' >> $out
   done
  done
done
