#!/usr/bin/env bash
# 8 fake hosts, sizes at the link bound: gsync default vs Open MPI default and Rabenseifner, interleaved.
set -u
cd /work/main
out=${1:-/tmp/bound}
id=$(benchmarks/netcluster.sh up 8 1000 1)
trap 'benchmarks/netcluster.sh down $id >/dev/null 2>&1' EXIT
ompi() {
  /usr/bin/mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include 198.18.$id.0/24 --mca oob_tcp_if_include lo --mca btl_base_warn_component_unused 0 "$@"
}
for n in 50 300; do
  w=$((n / 10))
  for r in 1 2 3 4; do
    benchmarks/netcluster.sh run $id --timeout-s 300 --no-tag-output -- build-bench/tools/gsync-perf -d float32 -o sum -b 32K -e 256K -f 2 -n $n -w $w -c 1 > $out/gsync_n${n}_r$r.txt 2>&1
    ompi python3 benchmarks/netns_rank.py --cluster $id --ranks-per-host 1 -- build-bench/benchmarks/ompi_allreduce -d float32 -o sum -b 32768 -e 262144 -f 2 -n $n -w $w -c 1 --label ompi-tcp-netns --label-algo ompi-default > $out/ompi_n${n}_r$r.txt 2>&1
    ompi --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 6 python3 benchmarks/netns_rank.py --cluster $id --ranks-per-host 1 -- build-bench/benchmarks/ompi_allreduce -d float32 -o sum -b 32768 -e 262144 -f 2 -n $n -w $w -c 1 --label ompi-tcp-netns --label-algo ompi-rabenseifner > $out/ompi-rabenseifner_n${n}_r$r.txt 2>&1
  done
done
