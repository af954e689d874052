"""Collectives under "axon" run in call order, whether a short one runs on the
caller's thread (the group idle, its peers there) or waits behind a long one
on the group's communication thread; and a short one whose peers are already
waiting is complete when the call returns.

Order is checked through data: a long async all_reduce of x, then a short
all_reduce of x[:k] (a view of the same memory). Only the call order gives
x[:k] == n*n (summed twice) and x[k:] == n; a short op that overtook the long
one, or ran during it, leaves other values. Ranks sleep a random moment
before each round, so the long op is sometimes still queued, sometimes
running, sometimes done when the short one is called.

    test_order.py N [INLINE_BYTES]   (INLINE_BYTES sets AXON_TORCH_INLINE_BYTES)
"""
import datetime
import os
import random
import sys
import time

import torch
import torch.distributed as dist

from harness import run_ranks

LONG = 1 << 20   # floats: 4 MiB, above the default inline limit
SHORT = 1 << 10  # floats: 4 KiB, below it


def body(rank, n, inline_bytes):
    if inline_bytes is not None:
        os.environ["AXON_TORCH_INLINE_BYTES"] = str(inline_bytes)
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=120))
    rng = random.Random(rank)

    # A short collective whose peers are already waiting in it runs on the
    # caller's thread and is done when the call returns, even when asked for
    # async_op (unless every op goes to the thread). The ranks call one after
    # the other, 0.5 s apart (a margin for a starved CI machine): the last
    # finds every other one waiting.
    dist.barrier()
    time.sleep(0.5 * rank)
    x = torch.ones(SHORT)
    work = dist.all_reduce(x, async_op=True)
    done_on_return = work.is_completed()
    work.wait()
    assert torch.equal(x, torch.full((SHORT,), float(n))), x[:4]
    if rank == n - 1 and inline_bytes != 0:
        assert done_on_return, "a 4 KiB all_reduce whose peer was waiting was not done on return"

    for round_ in range(40):
        x = torch.ones(LONG)
        long_work = dist.all_reduce(x, async_op=True)
        time.sleep(rng.random() * 0.004)
        head = x[:SHORT]  # a view: the same memory as x's first elements
        short_work = dist.all_reduce(head, async_op=True)
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=round_ % n)  # synchronous, behind both
        assert torch.equal(b, torch.full((3,), float(round_ % n))), (round_, b)
        assert short_work.is_completed() and long_work.is_completed(), round_
        short_work.wait()
        long_work.wait()
        want_head, want_tail = float(n * n), float(n)
        bad_head = int(torch.count_nonzero(x[:SHORT] != want_head))
        bad_tail = int(torch.count_nonzero(x[SHORT:] != want_tail))
        assert bad_head == 0 and bad_tail == 0, (
            f"round {round_}: {bad_head} head elements not {want_head}, {bad_tail} tail elements not "
            f"{want_tail}: the short all_reduce did not run after the long one")

    # An error from an op run on the caller's thread surfaces from wait(),
    # like one from the communication thread: ranks that disagree on size.
    y = torch.ones(8 if rank == 0 else 16)
    work = dist.all_reduce(y, async_op=True)
    try:
        work.wait()
    except RuntimeError as e:
        message = str(e)
    else:
        message = ""
    assert "all_reduce" in message or "allreduce" in message, f"no mismatch error from wait(): {message!r}"
    dist.destroy_process_group()
    return "ok"


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    inline_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else None
    results = run_ranks(n, body, inline_bytes, timeout=300)
    assert results == ["ok"] * n, results
    print(f"collectives ran in call order on {n} ranks (AXON_TORCH_INLINE_BYTES={inline_bytes})")
