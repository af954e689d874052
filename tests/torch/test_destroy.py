"""Destroying an "axon" process group while one of its ops is still running
(or queued) returns once the op has ended, and the op's result is right.

The group's communication thread drops the op's tensors when the op ends;
the last reference to a tensor Python has seen takes the GIL to go away.
Python destroys a group holding the GIL, so a destructor that joined the
thread with the GIL held waited forever (seen in PyTorch's own suite).
Here rank 0 destroys the group while its all_reduce waits for rank 1,
with only the communication thread still holding the tensor.

A receive still waiting for a message when its group is destroyed is
cancelled: its wait() raises, and so do the peers' ops on that group (each
group has its own shared memory, which the destroy marks failed), instead
of every rank waiting out the group's timeout."""
import datetime
import sys
import time

import torch
import torch.distributed as dist

from harness import run_ranks

COUNT = 1 << 20  # 4 MiB: above the inline limit, so it runs on the group's thread


def body(rank, n, rounds):
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    for round_ in range(rounds):
        group = dist.new_group(backend="axon")
        t = torch.full((COUNT,), float(rank + 1))
        view = t[:5].clone()  # kept: the check below must not hold `t` itself
        work = dist.all_reduce(t, group=group, async_op=True)
        if rank != 0:
            time.sleep(0.3)  # rank 0's op is still waiting while it destroys
        result = t  # the one reference Python keeps for the check
        del t
        if rank == 0:
            del work
            del result  # now only the communication thread holds the tensor
            dist.destroy_process_group(group)
            del group
        else:
            work.wait()
            want = float(n * (n + 1) // 2)
            assert torch.equal(result[:5], torch.full((5,), want)), (round_, result[:5], view)
            dist.destroy_process_group(group)
            del group
    # Receives that no send will ever match, on every rank: destroying the
    # group cancels them (their wait() raises) instead of waiting for the
    # group's 60 s timeout.
    group = dist.new_group(backend="axon")
    peer = (rank + 1) % n
    pending = dist.irecv(torch.zeros(3), src=peer, group=group, tag=77)
    start = time.monotonic()
    dist.destroy_process_group(group)
    del group  # the last reference: the group's destructor runs here
    took = time.monotonic() - start
    assert took < 10, f"destroying a group with a pending receive took {took:.1f} s"
    try:
        pending.wait()
        raise AssertionError("a receive cancelled by destroy completed")
    except RuntimeError as e:
        assert "destroyed" in str(e) and "receive" in str(e), str(e)
    dist.barrier()
    dist.destroy_process_group()
    return "ok"


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    results = run_ranks(n, body, 3, timeout=120)
    assert results == ["ok"] * n, results
    print(f"groups destroyed with ops in flight on {n} ranks end cleanly")
