"""A collective issued from a future's callback takes its place after the ops
the program had called when it took the future, on every rank, whichever
thread the callback runs on.

Each round: a small async all_reduce `a` (it may run on the caller's thread
and be complete at once), a large one `b` (queued on the communication
thread), then `a`'s future's then(cb), where cb all_reduces `x`, of b's
shape. On a rank where `a` was already complete, then() runs cb at once on
the caller's thread, after `b`; where it was not, cb runs on the group's
thread. The callback's op ran at once there, ahead of the queued `b`, and
the ranks paired b with x: wrong sums, no error (a review: 5-11 rounds of 20
wrong on 2 ranks, every run). Gloo gives the right sums.

Then the same with the callback waiting on its op's future (PowerSGD's hook
does), which must not hang. Last, PowerSGD's order: the callback's op must still come
before the ops the program calls after it took the future (`c` here).

    test_callback_order.py RANKS ROUNDS [INLINE_BYTES]   (sets AXON_TORCH_INLINE_BYTES)
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from harness import run_ranks

LARGE = 100_000  # 400 KB of f32: above the inline limit, so queued


def body(rank, n, rounds, inline_bytes):
    if inline_bytes is not None:
        os.environ["AXON_TORCH_INLINE_BYTES"] = str(inline_bytes)
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    wrong = []
    total = n * (n + 1) / 2  # the sum of rank + 1

    def check(what, tensor, expected, i):
        if not bool((tensor == expected).all()):
            wrong.append(f"round {i}: {what} = {tensor.flatten()[0].item()}, not {expected}")

    for i in range(rounds):
        # The callback's op comes after `b`, called before the future was taken.
        a = torch.full((10,), float(rank + 1))
        b = torch.full((LARGE,), 100.0 * (rank + 1))
        w1 = dist.all_reduce(a, async_op=True)
        w2 = dist.all_reduce(b, async_op=True)

        def after_b(fut):
            x = torch.full((LARGE,), 5.0)
            dist.all_reduce(x)  # waits on its Work: from the group's thread, that runs b first
            return x

        x = w1.get_future().then(after_b).wait()
        w2.wait()
        check("a", a, total, i)
        check("b", b, 100.0 * total, i)
        check("x", x, 5.0 * n, i)

        # The same with the callback waiting on the op's future, as PowerSGD's
        # hook does: placed behind the queued `b`, it must not wait for the
        # very thread it blocks.
        a = torch.full((10,), float(rank + 1))
        b = torch.full((LARGE,), 100.0 * (rank + 1))
        w1 = dist.all_reduce(a, async_op=True)
        w2 = dist.all_reduce(b, async_op=True)

        def after_b_on_its_future(fut):
            y = torch.full((LARGE,), 3.0)
            return dist.all_reduce(y, async_op=True).get_future().wait()[0]

        y = w1.get_future().then(after_b_on_its_future).wait()
        w2.wait()
        check("b (future)", b, 100.0 * total, i)
        check("y", y, 3.0 * n, i)

        # The callback's op comes before `c`, called after the future was taken
        # (the PowerSGD hook's order), and it need not be waited on in the callback.
        p = torch.full((LARGE,), float(rank + 1))
        wp = dist.all_reduce(p, async_op=True)
        q = torch.full((LARGE,), 7.0)
        chained = wp.get_future().then(lambda fut: dist.all_reduce(q, async_op=True).get_future())
        c = torch.full((LARGE,), 1000.0 * (rank + 1))
        wc = dist.all_reduce(c, async_op=True)
        chained.wait().wait()  # then()'s future holds the callback's future
        wc.wait()
        check("p", p, total, i)
        check("q", q, 7.0 * n, i)
        check("c", c, 1000.0 * total, i)
    # A receive's callback that receives again and waits on that receive's
    # future, its first receive's future taken after a second irecv was
    # posted: the new irecv goes behind that one, which runs first (left
    # queued, it hung the receiving thread the callback blocks; a review).
    if rank == 0:
        time.sleep(0.3)  # rank 1's receives are posted and waiting
        for k in range(3):
            dist.send(torch.full((4,), float(k)), dst=1)
    elif rank == 1:
        t1, t2, t3 = torch.zeros(4), torch.zeros(4), torch.zeros(4)
        w1 = dist.irecv(t1, src=0)
        w2 = dist.irecv(t2, src=0)
        w1.get_future().then(lambda fut: dist.irecv(t3, src=0).get_future().wait()).wait()
        w2.wait()
        if [t1[0].item(), t2[0].item(), t3[0].item()] != [0.0, 1.0, 2.0]:
            wrong.append(f"receives in call order: got {t1[0].item()}, {t2[0].item()}, {t3[0].item()}, not 0, 1, 2")
    dist.barrier()
    dist.destroy_process_group()
    return wrong or "ok"


if __name__ == "__main__":
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    inline_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else None
    results = run_ranks(n, body, rounds, inline_bytes, timeout=300)
    assert results == ["ok"] * n, results
    print(f"{rounds} rounds of collectives issued from callbacks pair in program order on {n} ranks "
          f"(AXON_TORCH_INLINE_BYTES={inline_bytes})")
