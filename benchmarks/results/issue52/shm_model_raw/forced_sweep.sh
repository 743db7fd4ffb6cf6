#!/bin/bash
# forced-algorithm sweep, alternated reps; out: forced_np2_np4_before.txt  lines: np algo size busbw
cd .
out=benchmarks/results/issue52/shm_model_raw/forced_np2_np4_before.txt
for rep in 1 2 3; do
 for np in 4 2; do
  algos="auto ring halving_doubling recursive_doubling direct"
  [ $np = 4 ] && algos="$algos star"
  for a in $algos ompi ompi-rab; do
   for rng in "64K 512K 200" "1M 64M 20"; do
    set -- $rng
    if [ $a = ompi ] || [ $a = ompi-rab ]; then
      extra=(); [ $a = ompi-rab ] && extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 6)
      timeout 300 mpirun --allow-run-as-root --oversubscribe "${extra[@]}" -np $np build/benchmarks/ompi_allreduce -d float32 -o sum -b $1 -e $2 -f 2 -n $3 -w 10 -c 0 2>&1 | grep -v "#" | awk -v a=$a -v np=$np 'NF>8 {print np, a, $1, $8}' >> $out
    else
      timeout 300 build/tools/gsyncrun -n $np -- build/tools/gsync-perf -a $a -b $1 -e $2 -n $3 -w 10 -c 0 2>&1 | grep "^\[0\] " | grep -v "#" | awk -v a=$a -v np=$np '{print np, a, $2, $9}' >> $out
    fi
   done
  done
 done
done
