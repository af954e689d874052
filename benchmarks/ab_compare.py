#!/usr/bin/env python3
"""Two builds of axon-bench, A and B, run alternately under axon-launch: the
host moves its vCPUs between fast and slow every few seconds, so only
interleaved, repeated runs compare fairly. Per world size and message size
it prints the median time of each side, the median of the per-run ratios
B/A (each ratio between the A and B runs of one round, which run back to
back, A first in even rounds and B first in odd ones), and
each side's median time as a multiple of the hand-off floor its own run
measured (axon-bench's handoff column).

    benchmarks/ab_compare.py --a OLD/axon-bench --b NEW/axon-bench \\
        [--launcher build/release/launcher/axon-launch] [--launcher-b NEW/axon-launch] \\
        [--ranks 2 8] [--rounds 7] [--env-b NAME=VALUE] [--launch-arg=--arena-mb=800] [--split-phases] \\
        [-- extra axon-bench options, e.g. -b 4 -e 4M -f 4 -n 200]

Every axon-bench run checks its results (a wrong element fails the run), so
a B that is fast and wrong does not pass. Exits non-zero when a run fails.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_once(launcher, bench, ranks, extra, env, launch_args=()):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        cmd = [launcher, *launch_args, "-n", str(ranks), bench, "--json", path] + extra
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if done.returncode != 0:
            sys.exit(f"ab_compare: {' '.join(cmd)} failed (status {done.returncode}):\n{done.stdout}")
        with open(path) as f:
            rows = json.load(f)["rows"]
    finally:
        os.unlink(path)
    for row in rows:
        if row["wrong"]:
            sys.exit(f"ab_compare: {bench} got {row['wrong']} wrong elements at {row['bytes']} bytes")
    return {(row["collective"], row["bytes"]): row for row in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="axon-bench of the baseline build")
    parser.add_argument("--b", required=True, help="axon-bench of the build under test")
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--launcher", default=os.path.join(here, "..", "build", "release", "launcher", "axon-launch"),
                        help="axon-launch for A (and for B unless --launcher-b)")
    parser.add_argument("--launcher-b", help="axon-launch of B's build, when its arena layout differs from A's")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--rounds", type=int, default=7, help="A/B pairs per world size")
    parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE",
                        help="set only in B's environment (compare one build with two settings)")
    parser.add_argument("--launch-arg", action="append", default=[], metavar="ARG",
                        help="an axon-launch option for both sides, e.g. --launch-arg=--arena-mb=800")
    parser.add_argument("--split-phases", action="store_true",
                        help="also print each side's medians over the rows whose own run measured a round trip "
                             "below --fast-ns (the host's fast phase) and above --slow-ns (the slow one)")
    parser.add_argument("--fast-ns", type=float, default=100)
    parser.add_argument("--slow-ns", type=float, default=200)
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="-- then axon-bench options for both sides")
    args = parser.parse_args()
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    env_a = dict(os.environ)
    env_b = dict(os.environ)
    for item in args.env_b:
        name, _, value = item.partition("=")
        env_b[name] = value
    for ranks in args.ranks:
        runs = {"a": [], "b": []}
        for r in range(args.rounds):
            # Alternate which side goes first, so neither always meets the
            # same phase of the host.
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for side in order:
                bench, env = (args.a, env_a) if side == "a" else (args.b, env_b)
                launcher = args.launcher_b if side == "b" and args.launcher_b else args.launcher
                runs[side].append(run_once(launcher, bench, ranks, extra, env, args.launch_arg))
        print(f"# n={ranks}: {args.rounds} interleaved rounds; A={args.a}; B={args.b} {' '.join(args.env_b)}")
        print(f"# {'collective':<14} {'bytes':>10} {'A us':>10} {'B us':>10} {'B/A':>6} "
              f"{'B/A min':>7} {'B/A max':>7} {'A x_hand':>8} {'B x_hand':>8}")
        for key in runs["a"][0]:
            a = [run[key]["time_us"] for run in runs["a"]]
            b = [run[key]["time_us"] for run in runs["b"]]
            ratios = [y / x for x, y in zip(a, b) if x > 0]

            def x_handoff(side):
                xs = [run[key]["time_us"] / run[key]["floor_handoff_us"]
                      for run in runs[side] if run[key].get("floor_handoff_us", 0) > 0]
                return f"{statistics.median(xs):8.2f}" if xs else f"{'-':>8}"

            print(f"  {key[0]:<14} {key[1]:>10} {statistics.median(a):10.2f} {statistics.median(b):10.2f} "
                  f"{statistics.median(ratios):6.2f} {min(ratios):7.2f} {max(ratios):7.2f} "
                  f"{x_handoff('a')} {x_handoff('b')}")
        if args.split_phases:
            print_phases(runs, args.fast_ns, args.slow_ns)
        sys.stdout.flush()


def print_phases(runs, fast_ns, slow_ns):
    """Per phase of the host, each side's median over the rows its runs saw in
    that phase (a row's phase: the round trip its own run measured just before
    it), and x_rt = time / that round trip. The fast phase may come in spells
    of a second or two: a side can see it in a few rounds only, hence the row
    counts."""
    for name, lo, hi in (("fast", 0.0, fast_ns), ("slow", slow_ns, float("inf"))):
        print(f"# {name} phase (round trip {lo:g}-{hi:g} ns)")
        print(f"# {'collective':<14} {'bytes':>10} {'A rows':>6} {'B rows':>6} {'rt ns':>6} {'A us':>10} {'B us':>10} "
              f"{'B/A':>6} {'A x_rt':>7} {'B x_rt':>7}")
        for key in runs["a"][0]:
            rows = {side: [run[key] for run in runs[side] if lo <= run[key].get("floor_round_trip_ns", -1) < hi]
                    for side in ("a", "b")}
            if not rows["a"] or not rows["b"]:
                print(f"  {key[0]:<14} {key[1]:>10} {len(rows['a']):>6} {len(rows['b']):>6}   (not seen by both)")
                continue
            med = {side: statistics.median(r["time_us"] for r in rows[side]) for side in rows}
            rt = statistics.median(r["floor_round_trip_ns"] for r in rows["a"] + rows["b"])
            x_rt = {side: statistics.median(r["time_us"] * 1000 / r["floor_round_trip_ns"] for r in rows[side])
                    for side in rows}
            print(f"  {key[0]:<14} {key[1]:>10} {len(rows['a']):>6} {len(rows['b']):>6} {rt:6.0f} {med['a']:10.3f} "
                  f"{med['b']:10.3f} {med['b'] / med['a']:6.2f} {x_rt['a']:7.1f} {x_rt['b']:7.1f}")


if __name__ == "__main__":
    main()
