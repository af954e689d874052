#!/usr/bin/env bash
# One prepared scaling run of the collectives on a many-core machine: axon-bench
# at 4, 8 and 16 ranks (and 2 for reference), every collective, 4 B .. 256 MiB,
# plus the reduce kernels against memcpy. Expects the binaries and their
# shared libraries in $BUNDLE/bin and $BUNDLE/lib (see the lead's note);
# writes JSON and logs under $OUT.
set -uo pipefail
BUNDLE=${BUNDLE:-.devrun}
OUT=${OUT:-/tmp/axon-scaling}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$PWD/$BUNDLE/bin"
{
  echo "== machine"; nproc; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node|L2|L3"; free -g | head -2; df -h /dev/shm
  which mpirun || echo "no mpirun"
} 2>&1 | tee "$OUT/machine.txt"

"$bin/axon-bench" --memcpy 2>&1 | tee "$OUT/memcpy.txt"
timeout 90 "$bin/bench_kernels" --benchmark_filter='avx512.*(4096|1048576|16777216|268435456)' \
  --benchmark_min_time=0.05 --benchmark_counters_tabular=true 2>&1 | tail -20 | tee "$OUT/kernels.txt"

for n in 2 4 8 16; do
  echo "== n=$n all collectives"
  timeout 150 "$bin/axon-launch" -n "$n" --arena-mb 256 "$bin/axon-bench" -c all -b 4 -e 256M -f 4 \
    --seconds-per-size 0.4 --json "$OUT/axon_n$n.json" 2>&1 | grep -v '^\[rank [1-9]' | tee "$OUT/axon_n$n.txt"
done
for slot in 1048576 4194304; do
  for n in 8 16; do
    echo "== n=$n all_reduce slot $slot"
    AXON_SLOT_BYTES=$slot timeout 60 "$bin/axon-launch" -n "$n" --arena-mb 512 "$bin/axon-bench" -c all_reduce \
      -b 64K -e 256M -f 4 --seconds-per-size 0.4 2>&1 | grep '^\[rank 0\]' | tee "$OUT/slot${slot}_n$n.txt"
  done
done
ls /dev/shm
