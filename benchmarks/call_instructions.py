#!/usr/bin/env python3
"""Instructions per all_reduce call, the fixed cost that the host's fast phase
exposes (where a cache line's round trip is ~30 ns, every instruction of a
call shows): rank 0 runs axon-bench under valgrind's callgrind, the other
ranks run natively, so they are always ahead and rank 0 never polls; the
count is then the call's own path (ArenaBackend::do_all_reduce, inclusive)
and does not move between runs.

    benchmarks/call_instructions.py [--build build/release] [--ranks 2] [--bytes 4] [--op sum]

Needs valgrind (Debian: valgrind), which the project does not install.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(here, "..", "build", "release"))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--bytes", default="4", help="message size (axon-bench -b/-e)")
    parser.add_argument("--op", default="sum")
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"call_instructions: {tool} not found (Debian package valgrind)")
    launcher = os.path.join(args.build, "launcher", "axon-launch")
    bench = os.path.join(args.build, "benchmarks", "axon-bench")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        wrapper = os.path.join(tmp, "rank0_under_callgrind.sh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    f"if [ \"$RANK\" = 0 ]; then exec valgrind --tool=callgrind --callgrind-out-file={out} \"$@\"; fi\n"
                    "exec \"$@\"\n")
        os.chmod(wrapper, 0o755)
        cmd = [launcher, "-n", str(args.ranks), wrapper, bench, "-b", args.bytes, "-e", args.bytes, "-o", args.op,
               "-n", str(args.calls), "-w", "100", "--no-floor", "--seconds-per-size", "0"]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            sys.exit(f"call_instructions: {' '.join(cmd)} failed (status {done.returncode}):\n{done.stdout}")
        tree = subprocess.run(["callgrind_annotate", "--tree=calling", "--inclusive=yes", out],
                              stdout=subprocess.PIPE, text=True, check=True).stdout
    total = calls = None
    caller = None
    for line in tree.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+([*>])\s+(.*)", line)
        if not m:
            continue
        cost, kind, what = int(m.group(1).replace(",", "")), m.group(2), m.group(3)
        if kind == "*":
            caller = what
            if "ArenaBackend::do_all_reduce(" in what:
                total = cost
        elif "ArenaBackend::do_all_reduce(" in what and caller and (
                "AxonTransport::all_reduce" in caller or "Backend::all_reduce<" in caller):
            # Called from the typed entry point, inlined into the transport or
            # not (it is not once the entry's checks grew): every call counts.
            calls = (calls or 0) + int(re.search(r"\(([\d,]+)x\)", what).group(1).replace(",", ""))
    if not total or not calls:
        sys.exit("call_instructions: no ArenaBackend::do_all_reduce calls in the profile")
    print(f"all_reduce {args.bytes} B {args.op} at n={args.ranks}: {total / calls:.0f} instructions per call "
          f"(rank 0, {calls} calls, callgrind)")


if __name__ == "__main__":
    main()
