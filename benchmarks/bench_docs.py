#!/usr/bin/env python3
"""make bench-docs: rerun the comparison against Open MPI and rewrite its tables in the docs.

  benchmarks/bench_docs.py [--preset release] [--from-outputs DIR]

Runs benchmarks/compare.sh twice from the build of the preset, with the
settings in RUNS below (private buffers; buffers in the arena, zero copy), then
replaces what lies between these markers with that run's figures, stating the
date, the machine, the commands and how long they took:

  docs/benchmarks.md  <!-- bench-docs:begin compare-private --> ... <!-- bench-docs:end compare-private -->
                      <!-- bench-docs:begin compare-shared -->  ... <!-- bench-docs:end compare-shared -->
  README.md           <!-- bench-docs:begin readme-summary -->  ... <!-- bench-docs:end readme-summary -->

and copies the plots to docs/benchmarks/. Everything else in the docs is left
as it is. The outputs (compare.sh's tables and JSON, machine.txt) stay in
build/<preset>/bench-docs/. --from-outputs DIR rewrites the docs from the
outputs of an earlier run in DIR without running anything.

Takes long (see benchmarks/compare.sh --help): run it on a quiet machine.
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (environment for compare.sh, what the figures are)
RUNS = {
    "private": ({"RANKS": "2 8", "REPEATS": "3", "SECONDS_PER_SIZE": "1"},
                "buffers in each rank's own memory (std::vector)"),
    "shared": ({"RANKS": "2 8", "REPEATS": "3", "SECONDS_PER_SIZE": "1",
                "LAUNCH_ARGS": "--arena-mb 3000", "OURS_ARGS": "--shared-buffers", "BOTH_ARGS": "--fresh-inputs"},
               "buffers in the arena (zero copy, ProcessGroup::alloc_shared); both sides with --fresh-inputs: "
               "every rank writes its input before each call (untimed) and loads every cache line of the "
               "result after it (timed), as a training step uses its gradients"),
}
SUMMARY_SIZES = [(4, "4 B"), (1024, "1 KiB"), (65536, "64 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"),
                 (256 << 20, "256 MiB")]


def sh(command):
    return subprocess.run(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout.strip()


def describe_machine():
    model = sh("lscpu | sed -n 's/^Model name: *//p' | head -1") or "unknown CPU"
    cpus = sh("nproc")
    mem = sh("awk '/MemTotal/ {printf \"%.0f GiB\", $2 / 1048576}' /proc/meminfo")
    mpi = sh("mpirun --version 2>/dev/null | head -1") or "no mpirun"
    return f"{model}, {cpus} CPUs, {mem}; {mpi}"


def command_of(env, preset):
    settings = " ".join(f'{k}="{v}"' if " " in v else f"{k}={v}" for k, v in env.items())
    return f"{settings} bash benchmarks/compare.sh {preset}"


def run(preset, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "machine.txt"), "w") as f:
        f.write(describe_machine() + "\n")
        f.write(datetime.date.today().isoformat() + "\n")
    for name, (env, _) in RUNS.items():
        run_dir = os.path.join(out_dir, name)
        os.makedirs(run_dir, exist_ok=True)
        print(f"bench-docs: {command_of(env, preset)}", flush=True)
        started = time.monotonic()
        done = subprocess.run(["bash", os.path.join(ROOT, "benchmarks/compare.sh"), preset], cwd=ROOT,
                              env=dict(os.environ, OUT=run_dir, **env), stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"bench-docs: compare.sh ({name}) failed with status {done.returncode}; docs left unchanged")
        with open(os.path.join(run_dir, "table.txt"), "w") as f:
            f.write(done.stdout)
        with open(os.path.join(run_dir, "seconds.txt"), "w") as f:
            f.write(f"{time.monotonic() - started:.0f}\n")


def parse_table(text):
    """{n: {bytes: (ours_us, mpi_us)}} from compare.sh's output: the columns
    named size(B), ours(us) and mpi(us) in its header, wherever they are."""
    rows, n, columns = {}, None, None
    for line in text.splitlines():
        m = re.match(r"^# n=(\d+)", line)
        if m:
            n = int(m.group(1))
            continue
        if line.startswith("# collective"):
            names = line[1:].split()
            columns = [names.index(c) for c in ("size(B)", "ours(us)", "mpi(us)")]
            continue
        fields = line.split()
        if n is None or columns is None or line.startswith("#") or not fields:
            continue
        size, ours, mpi = (fields[i] for i in columns)
        rows.setdefault(n, {})[int(size)] = (float(ours), float(mpi))
    return rows


def fmt(us):
    if us < 10:
        return f"{us:.2f}"
    if us < 100:
        return f"{us:.1f}"
    return f"{us:,.0f}".replace(",", " ")


def replace_block(path, name, body):
    text = open(path, encoding="utf-8").read()
    begin, end = f"<!-- bench-docs:begin {name} -->", f"<!-- bench-docs:end {name} -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        sys.exit(f"bench-docs: {path} must hold exactly one {begin} ... {end}")
    a, b = text.index(begin) + len(begin), text.index(end)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:a] + "\n" + body.rstrip("\n") + "\n" + text[b:])


def rewrite_docs(preset, out_dir):
    machine, date = open(os.path.join(out_dir, "machine.txt")).read().splitlines()[:2]
    tables = {}
    for name, (env, what) in RUNS.items():
        run_dir = os.path.join(out_dir, name)
        table = open(os.path.join(run_dir, "table.txt")).read().rstrip("\n")
        minutes = int(open(os.path.join(run_dir, "seconds.txt")).read()) / 60
        tables[name] = parse_table(table)
        plot = f"benchmarks/compare-{name}-buffers.png"
        image = ""
        if os.path.exists(os.path.join(run_dir, "compare.png")):
            shutil.copyfile(os.path.join(run_dir, "compare.png"), os.path.join(ROOT, "docs", plot))
            image = f"![busbw against size, {name} buffers]({plot})\n\n"
        # The plot line names a path of this machine; the reader's is $OUT.
        table = "\n".join(l for l in table.splitlines() if not l.startswith("# plot:"))
        replace_block(os.path.join(ROOT, "docs/benchmarks.md"), f"compare-{name}",
                      f"One run on {date}, {machine}; all_reduce f32 sum, {what}; "
                      f"{minutes:.0f} minutes, from the repository root after `make build`:\n\n"
                      f"```\n{command_of(env, preset)}\n```\n\n{image}```\n{table}\n```")
    private, shared = tables["private"], tables["shared"]
    lines = [f"From the two runs of {date} in docs/benchmarks.md (`make bench-docs`): {machine}.", "",
             "| size | n=2, private buffers | n=2, zero copy | n=8, private buffers | n=8, zero copy |",
             "|---|---|---|---|---|"]
    for size, label in SUMMARY_SIZES:
        cells = []
        for n in (2, 8):
            for table in (private, shared):
                if size not in table.get(n, {}):
                    sys.exit(f"bench-docs: no {label} row for n={n} in the runs' tables: see {out_dir}")
                ours, mpi = table[n][size]
                cells.append(f"{fmt(ours)} / {fmt(mpi)}")
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    replace_block(os.path.join(ROOT, "README.md"), "readme-summary", "\n".join(lines))
    print("bench-docs: rewrote README.md and docs/benchmarks.md from " + out_dir)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="release")
    p.add_argument("--from-outputs", metavar="DIR")
    a = p.parse_args()
    if a.from_outputs:
        rewrite_docs(a.preset, a.from_outputs)
        return
    out_dir = os.path.join(ROOT, "build", a.preset, "bench-docs")
    run(a.preset, out_dir)
    rewrite_docs(a.preset, out_dir)


if __name__ == "__main__":
    main()
