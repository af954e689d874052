"""DistributedDataParallel under axon ends with the same parameters as under
Gloo (1e-5 relative), on the whole world and on a subgroup, with and without
no_sync (gradient accumulation), and with gradient_as_bucket_view=True (the
gradients are views into the buckets the backend all-reduces in place).

    PYTHONPATH=<build>/python:tests/torch /usr/bin/python3 tests/torch/test_ddp.py N
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import run_ranks


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 4))


def train(group, rank, steps, accumulate, view=False, hook=None, after_step=None):
    """SGD steps on this rank's batches; with accumulate, every other step's
    backward runs under no_sync and only the next one synchronizes. `hook`:
    a DDP communication hook (its state: the group); after_step(ddp, step)
    runs after every optimizer step."""
    ddp = DDP(model(), process_group=group, bucket_cap_mb=0.01,  # many buckets: overlap with backward
              gradient_as_bucket_view=view)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    for step in range(steps):
        x = torch.randn(8, 32, generator=g)
        y = torch.randn(8, 4, generator=g)
        if accumulate and step % 2 == 0:
            with ddp.no_sync():
                torch.nn.functional.mse_loss(ddp(x), y).backward()
            continue
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        if after_step is not None:
            after_step(ddp, step)
        opt.zero_grad()
    return [p.detach().clone() for p in ddp.module.parameters()]


def check(rank, n):
    dist.init_process_group("axon")
    gloo_world = dist.new_group(backend="gloo")
    members = [0, 1] if n > 2 else list(range(n))
    axon_sub = dist.new_group(members)              # default backend: axon
    gloo_sub = dist.new_group(members, backend="gloo")
    compared = 0
    for accumulate in (False, True):
        cases = [("world", None, gloo_world, False), ("world, gradient_as_bucket_view", None, gloo_world, True)]
        if rank in members:
            cases.append((f"subgroup {members}", axon_sub, gloo_sub, False))
        for name, axon_group, gloo_group, view in cases:
            got = train(axon_group, rank, 6, accumulate, view)
            want = train(gloo_group, rank, 6, accumulate, view)
            for i, (a, b) in enumerate(zip(got, want)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7,
                                           msg=lambda m: f"{name} no_sync={accumulate} parameter {i}: {m}")
            start = train(gloo_group, rank, 0, False)
            assert any(not torch.equal(a, s) for a, s in zip(got, start)), "training changed nothing"
            compared += 1
    dist.barrier()
    dist.destroy_process_group()
    return compared


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    import axonml_torch  # noqa: F401
    counts = run_ranks(n, check, timeout=900)
    print(f"test_ddp: DDP under axon equals Gloo on {n} ranks ({sum(counts)} rank-runs compared)")
