#!/usr/bin/env bash
# One prepared scaling run of the collectives on a many-core machine:
# axon-bench for every collective at n = 2, 4, 8, 16, 32, 64 ranks (those
# above the core count run oversubscribed, unbound), 4 B .. 256 MiB (64 MiB
# above 16 ranks, to fit the time), the reduce kernels against memcpy, the
# placement axon-launch chose, and at the end the targets check
# (benchmarks/scaling_targets.py). Writes JSON and logs under $OUT.
#
#   benchmarks/device_scaling.sh                  # binaries from build/release
#   BUILD=build/release benchmarks/device_scaling.sh
#   BUNDLE=.devrun benchmarks/device_scaling.sh   # $BUNDLE/bin, $BUNDLE/lib
#     (a bundle is a folder you assemble for a machine without a build
#     tree: bin/ with axon-launch, axon-bench and bench_kernels, lib/ with
#     the shared libraries they need; .devrun is just an example name)
#   benchmarks/device_scaling.sh --help           # prints this and exits
#   NS="8 16" SECONDS_PER_SIZE=0.2 MAX_BYTES=16M OUT=/tmp/s benchmarks/device_scaling.sh
#
# Every axon-launch run has a timeout; a run that times out or fails is
# recorded as such and the rest go on.
set -uo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "device_scaling: no arguments are taken (got '$1'); settings are variables, see --help" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/axon-scaling}
NS=${NS:-"2 4 8 16 32 64"}
SECONDS_PER_SIZE=${SECONDS_PER_SIZE:-0.3}
mkdir -p "$OUT"

if [ -n "${BUNDLE:-}" ]; then
  BUNDLE=$(cd "$BUNDLE" && pwd)
  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  launch=$BUNDLE/bin/axon-launch; bench=$BUNDLE/bin/axon-bench; kernels=$BUNDLE/bin/bench_kernels
else
  BUILD=$(cd "${BUILD:-$here/../build/release}" && pwd)
  launch=$BUILD/launcher/axon-launch; bench=$BUILD/benchmarks/axon-bench; kernels=$BUILD/benchmarks/bench_kernels
fi
for b in "$launch" "$bench"; do
  [ -x "$b" ] || { echo "device_scaling: $b is missing (set BUILD=<build dir> or BUNDLE=<bundle>)" >&2; exit 2; }
done

{
  echo "== machine"; nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|NUMA node|L2|L3"; free -g | head -2; df -h /dev/shm
  echo "== load"; uptime
} 2>&1 | tee "$OUT/machine.txt"

"$bench" --memcpy -e 256M 2>&1 | tee "$OUT/memcpy.txt"
if [ -x "$kernels" ]; then
  timeout 90 "$kernels" --benchmark_filter='(avx512|avx2).*(4096|1048576|16777216|268435456)' \
    --benchmark_min_time=0.05 --benchmark_counters_tabular=true 2>&1 | tail -20 | tee "$OUT/kernels.txt"
fi

cores=$(nproc)
for n in $NS; do
  max=${MAX_BYTES:-256M}; limit=240
  if [ "$n" -gt 16 ]; then max=${MAX_BYTES:-64M}; limit=300; fi
  echo "== n=$n ($([ "$n" -le "$cores" ] && echo "one core each" || echo "oversubscribed on $cores cpus")), every collective, 4 B .. $max"
  timeout "$limit" "$launch" -n "$n" --verbose --arena-mb 256 "$bench" -c all -b 4 -e "$max" -f 4 \
    --seconds-per-size "$SECONDS_PER_SIZE" --json "$OUT/axon_n$n.json" >"$OUT/axon_n$n.log" 2>&1
  status=$?
  grep -v '^\[rank [1-9]' "$OUT/axon_n$n.log" | grep -v '^axon-launch:   rank' | tee "$OUT/axon_n$n.txt"
  [ "$status" -eq 0 ] || echo "n=$n: axon-launch exited $status$([ "$status" -eq 124 ] && echo " (timed out after ${limit}s)")" | tee -a "$OUT/failures.txt"
done

echo "== targets"
/usr/bin/env python3 "$here/scaling_targets.py" "$OUT" | tee "$OUT/targets.txt"
ls /dev/shm | grep '^axon-' && echo "device_scaling: arenas left in /dev/shm" >&2
exit 0
