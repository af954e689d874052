#!/usr/bin/env bash
# axon-bench against Open MPI, side by side, on this machine.
#
#   benchmarks/compare.sh [preset]          (default preset: release)
#   benchmarks/compare.sh --help            (prints this header)
#
# For each world size in RANKS it runs axon-bench under axon-launch and
# axon-bench-mpi under mpirun, alternating the two REPEATS times (the host
# moves its vCPUs between fast and slow every few seconds, so only
# interleaved, repeated runs compare fairly). Per size it prints the median
# time of each side and the ratio ours/MPI; beside them the floor each run
# measured just before that size (a cache line's round trip between ranks 0
# and 1, and rank 1 reading what rank 0 has just written: axon-bench's
# rt and handoff columns, and the copy: the hand-off timed from the start
# of rank 0's write) and each side's time as a multiple of its own
# run's floor; and it draws busbw against size for
# both, with one core's memcpy bandwidth as the roof, into $OUT/compare.png
# (when gnuplot is installed). Needs the benchmarks of the preset built,
# mpirun and python3 (scripts/install-deps.sh installs them).
#
# Settings, from the environment (default in parentheses):
#   RANKS             world sizes to run ("2 8"); 1 runs our side without the launcher
#   REPEATS           interleaved repeats per world size (3)
#   COLLECTIVE        all_reduce, broadcast, all_gather, reduce_scatter (all_reduce)
#   DTYPE, OP         element type (f32), reduce op (sum)
#   MIN, MAX, FACTOR  sizes MIN, MIN*FACTOR, ... up to MAX (4, 256M, 4)
#   ITERS, WARMUP     timed iterations per size, at most (20), and untimed ones (5)
#   SECONDS_PER_SIZE  fewer timed iterations (never under 3) where ITERS would take longer (2)
#   LAUNCH_ARGS       extra axon-launch options, e.g. "--arena-mb 3000"
#   OURS_ARGS         extra axon-bench options for our side only, e.g. "--shared-buffers"
#                     (which needs LAUNCH_ARGS="--arena-mb" of at least N x MAX x FACTOR/(FACTOR-1)
#                     plus the default arena, in MiB, for the largest N of RANKS)
#   BOTH_ARGS         extra options for both sides, e.g. "--fresh-inputs" (each rank writes its input
#                     before every call, untimed, and loads every line of the result after it, timed)
#   OUT               where the JSON, the tables and the plot go (build/<preset>/compare)
#
# Run time: 2 x REPEATS runs per world size, each at most about
# sizes x SECONDS_PER_SIZE plus WARMUP iterations of every size; the largest
# sizes dominate (at n=8 on 2 cores one 256 MiB all-reduce takes ~0.3 s ours,
# ~0.8 s MPI's). Expect several minutes per world size; make bench-docs
# records how long its run took.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
preset=${1:-release}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/$preset
bench=$build/benchmarks/axon-bench
bench_mpi=$build/benchmarks/axon-bench-mpi
launcher=$build/launcher/axon-launch

RANKS=${RANKS:-"2 8"}
REPEATS=${REPEATS:-3}
COLLECTIVE=${COLLECTIVE:-all_reduce}
DTYPE=${DTYPE:-f32}
OP=${OP:-sum}
MIN=${MIN:-4}
MAX=${MAX:-256M}
FACTOR=${FACTOR:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SECONDS_PER_SIZE=${SECONDS_PER_SIZE:-2}
LAUNCH_ARGS=${LAUNCH_ARGS:-}
OURS_ARGS=${OURS_ARGS:-}
BOTH_ARGS=${BOTH_ARGS:-}
OUT=${OUT:-$build/compare}

for program in "$bench" "$bench_mpi"; do
  [[ -x $program ]] || { echo "compare.sh: $program is missing; build the benchmarks of preset $preset" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "compare.sh: mpirun not found (bash scripts/install-deps.sh installs openmpi-bin)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "compare.sh: python3 not found (bash scripts/install-deps.sh installs it)" >&2; exit 2; }
mkdir -p "$OUT"
rm -f "$OUT"/*.json

args=(-c "$COLLECTIVE" -d "$DTYPE" -o "$OP" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP"
      --seconds-per-size "$SECONDS_PER_SIZE")
# shellcheck disable=SC2206
args+=($BOTH_ARGS)

run_ours() {  # n repeat
  local n=$1 rep=$2 json=$OUT/axon-n$1-r$2.json
  if [[ $n == 1 ]]; then
    # shellcheck disable=SC2086
    "$bench" "${args[@]}" $OURS_ARGS --json "$json" >/dev/null
  else
    [[ -x $launcher ]] || { echo "compare.sh: $launcher is missing (needed for n=$n)" >&2; exit 2; }
    # shellcheck disable=SC2086
    "$launcher" -n "$n" $LAUNCH_ARGS "$bench" "${args[@]}" $OURS_ARGS --json "$json" >/dev/null
  fi
}

run_mpi() {  # n repeat
  mpirun --allow-run-as-root --oversubscribe -np "$1" "$bench_mpi" "${args[@]}" \
    --json "$OUT/mpi-n$1-r$2.json" >/dev/null
}

for n in $RANKS; do
  for rep in $(seq 1 "$REPEATS"); do
    echo "# n=$n repeat $rep/$REPEATS" >&2
    if (( rep % 2 )); then run_ours "$n" "$rep"; run_mpi "$n" "$rep"; else run_mpi "$n" "$rep"; run_ours "$n" "$rep"; fi
  done
done

roof=$("$bench" --memcpy -e "$MAX" | awk '{print $(NF-1)}')

python3 - "$OUT" "$roof" "$RANKS" "$COLLECTIVE" <<'PY'
import glob, json, statistics, sys
out, roof, ranks, collective = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), sys.argv[4]

def load(side, n):
    by_size = {}
    for path in sorted(glob.glob(f"{out}/{side}-n{n}-r*.json")):
        for row in json.load(open(path))["rows"]:
            by_size.setdefault((row["collective"], row["bytes"]), []).append(row)
    return by_size

def median_or_none(values):
    values = [v for v in values if v]
    return statistics.median(values) if values else None

def ratio_to_floor(rows, field, scale):
    """Median over runs of time / that run's own floor (measured just before the row)."""
    return median_or_none([r["time_us"] * scale / r[field] for r in rows if r.get(field)])

def cell(value, width, digits):
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"

print(f"# {collective}: medians over repeats; roof = one core's memcpy {roof:.2f} GB/s")
print("# floor, measured by each run just before each size, between ranks 0 and 1: rt = a cache line's round")
print("# trip, handoff = rank 1 reading size bytes rank 0 has just written, copy = the same from the start of")
print("# rank 0's write; x/rt, x/ho, x/co = time / that floor")
for n in ranks:
    ours, mpi = load("axon", n), load("mpi", n)
    print(f"#\n# n={n}\n# {'collective':<14} {'size(B)':>12} {'ours(us)':>10} {'mpi(us)':>10} {'ours/mpi':>9}"
          f" {'ours busbw':>11} {'mpi busbw':>10} {'#wrong':>7} {'rt(ns)':>7} {'handoff(us)':>11}"
          f" {'copy(us)':>9} {'ours x/rt':>9} {'mpi x/rt':>9} {'ours x/ho':>9} {'mpi x/ho':>9} {'ours x/co':>9}"
          f" {'mpi x/co':>9}")
    with open(f"{out}/busbw-n{n}.dat", "w") as dat:
        for key in sorted(set(ours) & set(mpi), key=lambda k: (k[0], k[1])):
            t_o = statistics.median(r["time_us"] for r in ours[key])
            t_m = statistics.median(r["time_us"] for r in mpi[key])
            b_o = statistics.median(r["busbw_GBps"] for r in ours[key])
            b_m = statistics.median(r["busbw_GBps"] for r in mpi[key])
            wrong = sum(r["wrong"] for r in ours[key] + mpi[key])
            ratio = t_o / t_m if t_m > 0 else float("nan")
            both = ours[key] + mpi[key]
            rt = median_or_none([r.get("floor_round_trip_ns") for r in both])
            ho = median_or_none([r.get("floor_handoff_us") for r in both])
            co = median_or_none([r.get("floor_copy_us") for r in both])
            print(f"  {key[0]:<14} {key[1]:>12} {t_o:>10.2f} {t_m:>10.2f} {ratio:>9.3f} {b_o:>11.3f} {b_m:>10.3f} {wrong:>7}"
                  f" {cell(rt, 7, 0)} {cell(ho, 11, 2)} {cell(co, 9, 2)}"
                  f" {cell(ratio_to_floor(ours[key], 'floor_round_trip_ns', 1e3), 9, 1)}"
                  f" {cell(ratio_to_floor(mpi[key], 'floor_round_trip_ns', 1e3), 9, 1)}"
                  f" {cell(ratio_to_floor(ours[key], 'floor_handoff_us', 1), 9, 2)}"
                  f" {cell(ratio_to_floor(mpi[key], 'floor_handoff_us', 1), 9, 2)}"
                  f" {cell(ratio_to_floor(ours[key], 'floor_copy_us', 1), 9, 2)}"
                  f" {cell(ratio_to_floor(mpi[key], 'floor_copy_us', 1), 9, 2)}")
            dat.write(f"{key[1]} {b_o} {b_m}\n")
PY

if command -v gnuplot >/dev/null; then
  plot=""
  for n in $RANKS; do
    plot+="'$OUT/busbw-n$n.dat' using 1:2 with linespoints title 'axon n=$n', "
    plot+="'$OUT/busbw-n$n.dat' using 1:3 with linespoints title 'Open MPI n=$n', "
  done
  plot+="$roof with lines dashtype 2 title 'memcpy (one core)'"
  gnuplot <<GP
set terminal pngcairo size 1000,600 noenhanced
set output '$OUT/compare.png'
set title '$COLLECTIVE $DTYPE $OP: bus bandwidth against size'
set logscale x 2
set logscale y 10
set format x '%.0b%B'
set xlabel 'size (bytes)'
set ylabel 'busbw (GB/s)'
set key left top
set grid
plot $plot
GP
  echo "# plot: $OUT/compare.png" >&2
else
  echo "# gnuplot not found: no plot" >&2
fi
