#!/usr/bin/python3
"""A DDP bucket's mean, two ways: what zero_copy_allreduce_hook does against
what PyTorch's default hook does, on the same placed bucket.

    build/release/launcher/axon-launch -n 2 /usr/bin/python3 benchmarks/torch_bucket_mean.py [--quick]
    (PYTHONPATH=build/release/python; OMP_NUM_THREADS=1 as DDP's ranks run here)

Each rank places a float32 bucket of --mb MB (default 25.2: the MLP of
benchmarks/torch_compare.py, 6.3M parameters) in an axon group's shared
memory, as the hook does, and times, alternating the two for --rounds
rounds:

  div_ + SUM   tensor.div_(size), then the in-arena SUM all-reduce:
               PyTorch's allreduce_hook, whose division is a pass of its own
  AVG          the in-arena AVG all-reduce, which scales in its own pass:
               zero_copy_allreduce_hook

Before every call each rank writes its gradient into the bucket (untimed);
after it, one element of every cache line is read (timed), as the optimizer
then reads the bucket. It prints the median of the slowest rank and its
quartiles. It checks its output: both ways give every element the mean of
the ranks' values within 1e-6 of their magnitudes, and the same bits when
the group's size is a power of two; it exits 1 otherwise.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import axonml_torch
from axonml_torch import _C


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=25.2, help="bucket size in MB (default 25.2)")
    p.add_argument("--rounds", type=int, default=40, help="alternated rounds (default 40)")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 MB, 3 rounds")
    args = p.parse_args()
    if args.quick:
        args.mb, args.rounds = 1.0, 3
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # the timings' own group; the axon group carries only the bucket
    rank, n = dist.get_rank(), dist.get_world_size()
    count = int(args.mb * 1e6) // 4
    room_mb = int(n * count * 4 / 2**20) + 16
    axon = dist.new_group(backend="axon", pg_options=axonml_torch.Options(shared_mb=room_mb))
    bucket = torch.zeros(count)
    if not axonml_torch.place_in_arena(bucket, axon):
        raise SystemExit(f"torch_bucket_mean: no room for {count * 4} bytes in the axon group")
    gradient = torch.randn(count, generator=torch.Generator().manual_seed(rank))
    lines = bucket[::16]

    def divide_then_sum():
        bucket.div_(n)
        _C.allreduce_in_arena(axon, bucket).wait()

    def average():
        _C.allreduce_in_arena(axon, bucket, average=True).wait()

    ways = {"div_ + SUM": divide_then_sum, "AVG": average}

    def timed(way):
        bucket.copy_(gradient)
        dist.barrier()
        start = time.perf_counter()
        ways[way]()
        lines.sum()
        slowest = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest) * 1e3

    times = {way: [] for way in ways}
    for i in range(args.rounds):
        for way in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
            times[way].append(timed(way))

    # The check: every rank's gradient gathered, the mean taken here in f64.
    everyone = [torch.empty(count) for _ in range(n)]
    dist.all_gather(everyone, gradient)
    stacked = torch.stack(everyone).double()
    mean = stacked.mean(0)
    # A float32 sum of n terms in any order is within (n-1) roundings of the
    # terms' magnitudes, and the scale adds one of the result's.
    tolerance = 1e-6 * stacked.abs().sum(0)
    results = {}
    for way, run in ways.items():
        bucket.copy_(gradient)
        run()
        results[way] = bucket.clone()
    wrong = 0
    for way, got in results.items():
        wrong += int((got.double() - mean).abs().gt(tolerance).sum())
    same_bits = torch.equal(results["div_ + SUM"].view(torch.int32), results["AVG"].view(torch.int32))
    must_be_same = n & (n - 1) == 0
    total = torch.tensor([wrong + (1 if must_be_same and not same_bits else 0)])
    dist.all_reduce(total)

    if rank == 0:
        print(f"a bucket's mean on {n} ranks, {count * 4 / 1e6:.1f} MB float32 placed in the arena, "
              f"{args.rounds} alternated rounds; ms, median of the slowest rank (q1..q3)")
        for way, values in times.items():
            q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
            print(f"  {way:>10}  {statistics.median(values):8.3f}  ({q[0]:.3f}..{q[2]:.3f})")
        print(f"  AVG / (div_ + SUM): {statistics.median(times['AVG']) / statistics.median(times['div_ + SUM']):.2f}")
        print(f"torch_bucket_mean: {'the same bits' if same_bits else 'not the same bits'} both ways"
              f"{' (a power of two: required)' if must_be_same else ''}; elements off the mean: {wrong} on rank 0")
    dist.destroy_process_group()
    if int(total):
        print(f"torch_bucket_mean: rank {rank}: {int(total)} wrong in all", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
