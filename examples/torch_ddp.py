"""PyTorch DistributedDataParallel over the axon backend.

    cd build/release
    PYTHONPATH=python ./launcher/axon-launch -n 8 /usr/bin/python3 ../../examples/torch_ddp.py

axon-launch sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so the default
env:// rendezvous needs nothing more; torch.multiprocessing.spawn or any
other env:// launcher works the same way. Without RANK (no launcher) it runs
as a world of one. Trains a small MLP on a synthetic
regression task, the global batch split across ranks; rank 0 prints the loss
per epoch and a checksum of the parameters, which is the same at any rank
count (up to float rounding).
"""
import argparse
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import axonml_torch  # registers the backend "axon"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    parser.add_argument("--no-zero-copy", action="store_true",
                        help="DDP's default all-reduce, without moving its buckets into shared memory")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 1))

    # Room in the group's shared memory for every rank's gradient buckets,
    # twice over (DDP rebuilds its buckets after the first step).
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gradient_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    options = None if args.no_zero_copy else axonml_torch.Options(shared_mb=math.ceil(2 * world * gradient_mb) + 1)
    if "RANK" in os.environ:
        dist.init_process_group("axon", pg_options=options)
    else:  # no launcher: a world of one, as the C++ train example runs alone
        dist.init_process_group("axon", store=dist.HashStore(), rank=0, world_size=1, pg_options=options)
    rank, n = dist.get_rank(), dist.get_world_size()
    if args.batch % n:
        raise SystemExit(f"--batch {args.batch} does not split over {n} ranks")

    # The gradients as views into DDP's buckets: DDP then copies none of them
    # into or out of the buckets, which halves axon's communication time here
    # (docs/benchmarks.md, "DDP with gradient_as_bucket_view=True"). The hook
    # moves the buckets into the group's shared memory, where the all-reduce
    # reads every rank's bucket in place instead of copying it through the
    # shared slots (docs/benchmarks.md, "Zero copy for PyTorch tensors").
    ddp = DDP(model, gradient_as_bucket_view=True)
    if not args.no_zero_copy:
        ddp.register_comm_hook(None, axonml_torch.zero_copy_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    teacher = torch.randn(64, 1, generator=torch.Generator().manual_seed(7))
    per_rank = args.batch // n

    for epoch in range(args.epochs):
        start = time.perf_counter()
        total = torch.zeros(1)
        for step in range(args.steps):
            g = torch.Generator().manual_seed(epoch * 100003 + step)
            x = torch.randn(args.batch, 64, generator=g)[rank * per_rank:(rank + 1) * per_rank]
            y = torch.tanh(x @ teacher)
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch}: loss {total.item() / args.steps:.5f}, "
                  f"{args.steps * args.batch / (time.perf_counter() - start):.0f} samples/s on {n} rank{'s' if n != 1 else ''}",
                  flush=True)
    checksum = sum(p.double().sum().item() for p in ddp.module.parameters())
    if rank == 0:
        print(f"parameter checksum {checksum:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
