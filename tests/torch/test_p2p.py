"""Point-to-point under "axon" completes where Gloo's does: an irecv posted
before the matching send (a ring), batch_isend_irecv, and an irecv posted
before a collective whose peer sends only after it. Each pattern deadlocked
while receives shared the collectives' thread. A receive's Work gives its
source rank."""
import datetime
import sys

import torch
import torch.distributed as dist

from harness import run_ranks


def body(rank, n):
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    right, left = (rank + 1) % n, (rank - 1) % n
    # A ring, receive first: every rank posts irecv from its left, then sends right.
    got = torch.zeros(1000)
    rq = dist.irecv(got, left, tag=1)
    sq = dist.isend(torch.full((1000,), float(rank)), right, tag=1)
    rq.wait()
    sq.wait()
    assert torch.equal(got, torch.full((1000,), float(left))), got[:4]
    # The receive's Work names its source, as Gloo's does (deprecated in
    # PyTorch, still called); a send's has none, and says so.
    assert rq.source_rank() == left, rq.source_rank()
    try:
        sq.source_rank()
    except RuntimeError as e:
        assert "recv" in str(e), e
    else:
        raise AssertionError("a send's Work gave a source rank")
    # batch_isend_irecv with the receive listed first.
    got = torch.zeros(7, dtype=torch.int64)
    ops = [dist.P2POp(dist.irecv, got, left), dist.P2POp(dist.isend, torch.arange(7) + rank, right)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert torch.equal(got, torch.arange(7) + left), got
    # irecv before a collective; its sender sends only after the collective.
    got = torch.zeros(3)
    if rank == 0:
        rq = dist.irecv(got, 1, tag=9)
    x = torch.ones(5)
    dist.all_reduce(x)
    if rank == 1:
        dist.send(torch.tensor([1.0, 2.0, 3.0]), 0, tag=9)
    if rank == 0:
        rq.wait()
        assert torch.equal(got, torch.tensor([1.0, 2.0, 3.0])), got
    assert torch.equal(x, torch.full((5,), float(n)))
    dist.barrier()
    dist.destroy_process_group()
    return "ok"


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results = run_ranks(n, body, timeout=240)
    assert results == ["ok"] * n, results
    print(f"p2p patterns complete on {n} ranks")
