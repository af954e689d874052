"""Runs axon-bench (or axon-bench-mpi) on 2 ranks and checks that every row
carries the floor it measured just before it: a cache line's round trip, the
hand-off of the row's size and the copy (the hand-off from the start of the
write, so never less than it), all positive, and that rows above the probe's
largest hand-off carry neither of the last two.

    check_floor.py LAUNCH... -- BENCH   (LAUNCH: "axon-launch -n 2" or "mpirun ... -np 2")
"""
import json
import os
import subprocess
import sys
import tempfile

MAX_HANDOFF = 16 << 20  # FloorProbe::kMaxHandoffBytes

split = sys.argv.index("--")
launch, bench = sys.argv[1:split], sys.argv[split + 1]
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "rows.json")
    cmd = launch + [bench, "-b", "32", "-e", "32M", "-f", "32", "-n", "3", "-w", "1", "--seconds-per-size", "0.05",
                    "--json", out]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    print(done.stdout, done.stderr, sep="\n")
    if done.returncode != 0:
        sys.exit(f"check_floor: {' '.join(cmd)} exited {done.returncode}")
    rows = json.load(open(out))["rows"]

bad = []
for row in rows:
    if row["wrong"]:
        bad.append(f"{row['bytes']} B: {row['wrong']} wrong elements")
    if not row["floor_round_trip_ns"] > 0:
        bad.append(f"{row['bytes']} B: no round trip ({row['floor_round_trip_ns']})")
    if row["bytes"] <= MAX_HANDOFF and not row["floor_handoff_us"] > 0:
        bad.append(f"{row['bytes']} B: no hand-off ({row['floor_handoff_us']})")
    if row["bytes"] <= MAX_HANDOFF and not row["floor_handoff_us"] <= row["floor_copy_us"] < 10e6:
        # Never under its own hand-off (the same reads, timed from earlier);
        # seconds would mean a stamp never written or from another repeat.
        bad.append(f"{row['bytes']} B: a copy ({row['floor_copy_us']} us) under its own hand-off "
                   f"({row['floor_handoff_us']} us) or over 10 s")
    if row["bytes"] > MAX_HANDOFF and (row["floor_handoff_us"] != 0 or row["floor_copy_us"] != 0):
        bad.append(f"{row['bytes']} B: a hand-off or copy above the probe's largest ({row['floor_handoff_us']}, "
                   f"{row['floor_copy_us']})")
sizes = [row["bytes"] for row in rows]
if sizes != [32, 1024, 32768, 1 << 20, 32 << 20]:
    bad.append(f"unexpected rows: {sizes}")
if bad:
    sys.exit("check_floor: " + "; ".join(bad))
print(f"check_floor: every row of {len(rows)} carries its floor")
