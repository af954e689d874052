"""A subgroup's waits know the whole job's processes, not only its members.

A PyTorch subgroup gets an arena of its own whose world is its members, and
whether ranks outnumber cores was judged by that world: new_group([0, 1]) of
a 3-process job on 2 CPUs counted 2 ranks on 2 CPUs and spun 64 polls and
yielded 2 ms before sleeping, taking the core from the third process, where
the default group's waits (3 ranks on 2 CPUs) yield at once (found by a
review). axon-launch hides it by setting AXON_OVERSUBSCRIBED; here the ranks
are spawned by torch.multiprocessing, with no such hint.

Each rank keeps to two CPUs (so that the answer is the same on any machine),
logs at debug level to a file of its own, makes the default group and
new_group([0, 1]), and checks the line each group's waits logged as they were
made: both oversubscribed, with no polls before the first yield.

Then the same with a Gloo default group, whose processes may span machines:
there the subgroup counts LOCAL_WORLD_SIZE where the launcher set it (here 2,
as if the third process ran elsewhere: a core per rank), else the whole job.

    test_oversubscribed_subgroup.py
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist

from harness import run_ranks

N = 3


def body(rank, n, log_directory, default_backend="axon", local_world_size=None):
    os.environ.pop("AXON_OVERSUBSCRIBED", None)
    os.environ.pop("AXON_SPIN_POLLS", None)
    os.environ.pop("LOCAL_WORLD_SIZE", None)
    if local_world_size is not None:
        os.environ["LOCAL_WORLD_SIZE"] = str(local_world_size)
    os.environ["AXON_LOG_LEVEL"] = "debug"
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    log_path = os.path.join(log_directory, f"rank{rank}.log")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 2)  # the runtime writes its lines to fd 2
    os.close(log)
    dist.init_process_group(default_backend)
    pair = dist.new_group([0, 1], backend="axon")
    if rank < 2:
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=pair)
        assert t.tolist() == [3.0] * 4, t
    dist.barrier()
    dist.destroy_process_group()
    with open(log_path) as f:
        lines = [line.rstrip("\n") for line in f if "waits of a world" in line]
    return lines


def main():
    if len(os.sched_getaffinity(0)) < 2:
        print("skipped: this process may use fewer than 2 CPUs, and the test needs a job that outnumbers 2")
        return 0
    with tempfile.TemporaryDirectory(prefix="axon-oversubscribed-") as directory:
        results = run_ranks(N, body, directory, timeout=240)
    world = f"waits of a world of {N} ranks: oversubscribed ({N} ranks, 2 CPUs this process may use): 0 polls, "
    pair = f"waits of a world of 2 ranks in a job of {N}: oversubscribed ({N} ranks, 2 CPUs this process may use): 0 polls, "
    # The arena's barrier follows the same count (rank 0 chose it for all).
    flat = "flat barrier"
    for rank, lines in enumerate(results):
        print(f"rank {rank}:", *lines, sep="\n  ")
        assert any(world in line for line in lines), f"rank {rank}: no line with {world!r} in {lines}"
        in_pair = [line for line in lines if "waits of a world of 2 ranks" in line]
        if rank < 2:
            assert len(in_pair) == 1 and pair in in_pair[0] and flat in in_pair[0], (
                f"rank {rank}: expected {pair!r} and {flat!r}, got {in_pair}")
        else:
            assert not in_pair, f"rank {rank} is no member of new_group([0, 1]), yet logged {in_pair}"
    print(f"the default group and new_group([0, 1]) of a {N}-process job on 2 CPUs both wait oversubscribed")

    cpus = "CPUs this process may use"
    for local, expected, barrier in (
            (None, f"waits of a world of 2 ranks in a job of {N}: oversubscribed ({N} ranks, 2 {cpus}): 0 polls, ",
             "flat barrier"),
            (2, f"waits of a world of 2 ranks: a core per rank (2 ranks, 2 {cpus}): 64 polls, ", "dissemination barrier")):
        with tempfile.TemporaryDirectory(prefix="axon-oversubscribed-") as directory:
            results = run_ranks(N, body, directory, "gloo", local, timeout=240)
        for rank, lines in enumerate(results[:2]):
            assert len(lines) == 1 and expected in lines[0] and barrier in lines[0], (
                f"gloo default, LOCAL_WORLD_SIZE={local}: rank {rank}: expected {expected!r} and {barrier!r}, got {lines}")
        assert not results[2], f"rank 2 is no member of new_group([0, 1]), yet logged {results[2]}"
        print(f"gloo default group, LOCAL_WORLD_SIZE={local}: new_group([0, 1]) logged {expected!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
