#!/usr/bin/env python3
"""Both phases of this machine's vCPUs, ours against Open MPI: short runs of
axon-bench (under axon-launch) and axon-bench-mpi (under mpirun), alternated
for --seconds, every row kept with the floor its own run measured just before
it; the rows are then split by that floor's cache-line round trip into the
fast phase (round trip below --fast-ns) and the slow one (above --slow-ns),
and per size it prints, for each phase, the median time of each side, the
median of time / round trip, time / hand-off and time / copy (axon-bench's
floor columns), and ours/MPI.

    benchmarks/phase_split.py [--seconds 480] [--max 1M] [--factor 16]
                              [--shared-buffers] [--fresh-inputs]
                              [--build build/release] [--json out.json]

--shared-buffers: ours with its buffers in the arena (zero copy, as
compare.sh's OURS_ARGS=--shared-buffers); --fresh-inputs: both sides write
their inputs before each call and read the result after it (BOTH_ARGS).

Why not compare.sh: the fast phase lasts seconds at most here, shorter than
one compare.sh run, so a run's rows mix phases; each row's own floor says
which phase it saw. Every row is checked by axon-bench (a wrong element
fails this script). Needs mpirun and the benchmarks built.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd, path):
    done = subprocess.run(cmd + ["--json", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"phase_split: {' '.join(cmd)} failed (status {done.returncode}):\n{done.stdout}")
    with open(path) as f:
        rows = json.load(f)["rows"]
    for r in rows:
        if r["wrong"]:
            sys.exit(f"phase_split: {cmd[0]} got {r['wrong']} wrong elements at {r['bytes']} bytes")
    return rows


def summary(rows, lo, hi):
    xs = [r for r in rows if lo <= r["floor_round_trip_ns"] < hi]
    if not xs:
        return None
    return {
        "rows": len(xs),
        "rt_ns": statistics.median(r["floor_round_trip_ns"] for r in xs),
        "time_us": statistics.median(r["time_us"] for r in xs),
        "x_rt": statistics.median(r["time_us"] * 1000 / r["floor_round_trip_ns"] for r in xs),
        "x_handoff": statistics.median(r["time_us"] / r["floor_handoff_us"] for r in xs if r["floor_handoff_us"] > 0)
        if any(r["floor_handoff_us"] > 0 for r in xs) else None,
        "x_copy": statistics.median(r["time_us"] / r["floor_copy_us"] for r in xs if r.get("floor_copy_us", 0) > 0)
        if any(r.get("floor_copy_us", 0) > 0 for r in xs) else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--seconds", type=float, default=480)
    parser.add_argument("--max", default="1M", help="largest size (axon-bench -e)")
    parser.add_argument("--factor", default="16", help="size multiplier (axon-bench -f)")
    parser.add_argument("--build", default=os.path.join(here, "..", "build", "release"))
    parser.add_argument("--fast-ns", type=float, default=100)
    parser.add_argument("--slow-ns", type=float, default=200)
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--shared-buffers", action="store_true", help="ours: buffers in the arena (zero copy)")
    parser.add_argument("--fresh-inputs", action="store_true",
                        help="both: inputs written before each call, the result read after it")
    args = parser.parse_args()
    sweep = ["-b", "4", "-e", args.max, "-f", args.factor, "-n", "50", "--seconds-per-size", "0.2"]
    if args.fresh_inputs:
        sweep.append("--fresh-inputs")
    # Room for two ranks' buffers of --max bytes, input and output, beside the slots.
    arena = ["--arena-mb", "512"] if args.shared_buffers else []
    sides = {
        "ours": [os.path.join(args.build, "launcher", "axon-launch"), "-n", "2"] + arena +
                [os.path.join(args.build, "benchmarks", "axon-bench")] + sweep +
                (["--shared-buffers"] if args.shared_buffers else []),
        "mpi": ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                os.path.join(args.build, "benchmarks", "axon-bench-mpi")] + sweep,
    }
    rows = {"ours": [], "mpi": []}
    runs = 0
    end = time.monotonic() + args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        while runs == 0 or time.monotonic() < end:
            for side, cmd in sides.items():
                rows[side] += run(cmd, os.path.join(tmp, side + ".json"))
                runs += 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    how = ", ours zero copy (--shared-buffers)" if args.shared_buffers else ""
    how += ", fresh inputs on both sides" if args.fresh_inputs else ""
    print(f"# {runs} runs of n=2 all_reduce f32 sum{how}, alternated, in {args.seconds:g} s; rows split by the round "
          f"trip their own run measured just before them")
    for name, lo, hi in (("fast", 0, args.fast_ns), ("slow", args.slow_ns, float("inf"))):
        print(f"# {name} phase (round trip {lo:g}-{hi:g} ns)")
        print(f"# {'bytes':>9} {'rows':>5} {'rt(ns)':>7} {'ours(us)':>9} {'mpi(us)':>9} {'ours/mpi':>8} "
              f"{'ours x_rt':>9} {'mpi x_rt':>8} {'ours x_ho':>9} {'mpi x_ho':>8} {'ours x_co':>9} {'mpi x_co':>8}")
        for size in sorted({r["bytes"] for r in rows["ours"]}):
            o = summary([r for r in rows["ours"] if r["bytes"] == size], lo, hi)
            m = summary([r for r in rows["mpi"] if r["bytes"] == size], lo, hi)
            if not o or not m:
                print(f"  {size:>9}  (not seen in both)")
                continue
            ho = lambda s: f"{s['x_handoff']:.2f}" if s["x_handoff"] is not None else "-"
            co = lambda s: f"{s['x_copy']:.2f}" if s["x_copy"] is not None else "-"
            print(f"  {size:>9} {min(o['rows'], m['rows']):>5} {o['rt_ns']:>7.0f} {o['time_us']:>9.2f} {m['time_us']:>9.2f} "
                  f"{o['time_us'] / m['time_us']:>8.2f} {o['x_rt']:>9.1f} {m['x_rt']:>8.1f} {ho(o):>9} {ho(m):>8} "
                  f"{co(o):>9} {co(m):>8}")


if __name__ == "__main__":
    main()
