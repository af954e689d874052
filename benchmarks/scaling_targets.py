#!/usr/bin/env python3
"""The targets of a scaling run (docs/scaling.md), checked on axon-bench JSON.

    scaling_targets.py DIR        # reads DIR/axon_n<N>.json

Prints one line per target, PASS / FAIL / n/a (that run is missing), then the
outliers found, and exits 1 when any target failed:
  - barrier <= 5 us and a 4-byte all_reduce <= 5 us at n=16;
  - no size of any collective more than 2x what its two neighbours predict
    (their geometric mean: the sizes grow geometrically) at any n;
  - busbw at the largest size (256 MiB) at n=16 not below that at n=8.
"""
import glob
import json
import os
import re
import sys


def load(directory):
    runs = {}
    for path in glob.glob(os.path.join(directory, "axon_n*.json")):
        n = int(re.search(r"axon_n(\d+)\.json$", path).group(1))
        with open(path) as f:
            runs[n] = json.load(f)["rows"]
    return runs


def rows_of(rows, collective):
    return sorted((r for r in rows if r["collective"] == collective), key=lambda r: r["bytes"])


def main(directory):
    runs = load(directory)
    failed = False

    def report(ok, text):
        nonlocal failed
        status = "n/a " if ok is None else ("PASS" if ok else "FAIL")
        failed |= ok is False
        print(f"{status}  {text}")

    r16 = runs.get(16)
    if r16 is None:
        report(None, "barrier <= 5 us at n=16 (no n=16 run)")
        report(None, "4 B all_reduce <= 5 us at n=16 (no n=16 run)")
    else:
        b = rows_of(r16, "barrier")
        report(bool(b) and b[0]["time_us"] <= 5.0, f"barrier <= 5 us at n=16: {b[0]['time_us']:.2f} us" if b else "barrier at n=16: no row")
        a = [r for r in rows_of(r16, "all_reduce") if r["bytes"] == 4]
        report(bool(a) and a[0]["time_us"] <= 5.0, f"4 B all_reduce <= 5 us at n=16: {a[0]['time_us']:.2f} us" if a else "4 B all_reduce at n=16: no row")

    outliers = []
    for n, rows in sorted(runs.items()):
        for collective in sorted({r["collective"] for r in rows} - {"barrier"}):
            series = rows_of(rows, collective)
            for i in range(1, len(series) - 1):
                before, r, after = series[i - 1], series[i], series[i + 1]
                # The sizes grow geometrically, so the middle of the two
                # neighbours in log-log is their geometric mean.
                expected = (before["time_us"] * after["time_us"]) ** 0.5
                if r["time_us"] > 2.0 * expected:
                    outliers.append(f"n={n} {collective} {r['bytes']} B: {r['time_us']:.1f} us, "
                                    f"neighbours {before['time_us']:.1f} / {after['time_us']:.1f} us")
    report(not outliers, f"no size more than 2x its neighbours' geometric mean ({len(outliers)} outliers)")
    for o in outliers:
        print("      " + o)

    if 8 in runs and 16 in runs:
        for collective in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
            s8, s16 = rows_of(runs[8], collective), rows_of(runs[16], collective)
            if not s8 or not s16 or s8[-1]["bytes"] != s16[-1]["bytes"]:
                report(None, f"{collective} busbw n=16 >= n=8 at the largest size (sizes differ or missing)")
                continue
            b8, b16 = s8[-1]["busbw_GBps"], s16[-1]["busbw_GBps"]
            report(b16 >= b8, f"{collective} busbw at {s16[-1]['bytes'] >> 20} MiB: n=16 {b16:.2f} GB/s >= n=8 {b8:.2f} GB/s")
    else:
        report(None, "busbw at 256 MiB n=16 >= n=8 (needs both runs)")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) == 2 and not os.path.isdir(sys.argv[1]):
        sys.exit(f"scaling_targets: {sys.argv[1]} is not a folder (see --help)")
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
