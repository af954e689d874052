"""Callbacks that communicate, nested three deep, repeated: each round, an
irecv's callback runs an all_reduce, a send/recv pair and an async
all_reduce, whose callback in turn runs a ring of isend/irecv. Whichever
thread a callback lands on (the group's receiving thread, its collective
thread, or the caller's when the future had already completed), every round
completes with the right values on every rank.

The program is written so that it is correct under any of those threads:
each rank sends what its peers wait for before it registers a callback that
may block (then() on a completed future runs the callback at once, on the
caller's thread, so a callback registered before the send would wait for a
message its own rank has not sent yet, under any backend).

    test_callbacks.py RANKS ROUNDS [INLINE_BYTES]   (sets AXON_TORCH_INLINE_BYTES)
"""
import datetime
import os
import sys
import threading

import torch
import torch.distributed as dist

from harness import run_ranks


def body(rank, n, rounds, inline_bytes):
    if inline_bytes is not None:
        os.environ["AXON_TORCH_INLINE_BYTES"] = str(inline_bytes)
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    right, left = (rank + 1) % n, (rank - 1) % n
    for i in range(rounds):
        done = threading.Event()
        errors = []

        def ring(fut, i=i):
            try:
                assert torch.equal(fut.value()[0], torch.full((5,), float(n))), fut.value()
                got = torch.zeros(3)
                sent = dist.isend(torch.full((3,), float(rank + 100 * i)), right, tag=3)
                dist.irecv(got, left, tag=3).wait()
                sent.wait()
                assert torch.equal(got, torch.full((3,), float(left + 100 * i))), got
            except BaseException as e:  # reported by the main thread
                errors.append(repr(e))
            done.set()

        def on_received(fut, i=i):
            try:
                assert torch.equal(fut.value()[0], torch.full((4,), float(left + 100 * i))), fut.value()
                x = torch.ones(2)
                dist.all_reduce(x)
                assert torch.equal(x, torch.full((2,), float(n))), x
                got = torch.zeros(2)
                dist.send(torch.full((2,), float(rank)), right, tag=2)
                dist.recv(got, left, tag=2)
                assert torch.equal(got, torch.full((2,), float(left))), got
                dist.all_reduce(torch.ones(5), async_op=True).get_future().then(ring)
            except BaseException as e:
                errors.append(repr(e))
                done.set()

        first = torch.zeros(4)
        work = dist.irecv(first, left, tag=1)
        dist.send(torch.full((4,), float(rank + 100 * i)), right, tag=1)
        work.get_future().then(on_received)
        if not done.wait(60):
            raise RuntimeError(f"rank {rank}, round {i}: the callbacks did not finish within 60 s")
        if errors:
            raise RuntimeError(f"rank {rank}, round {i}: {errors}")
    dist.barrier()
    dist.destroy_process_group()
    return "ok"


if __name__ == "__main__":
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    inline_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else None
    results = run_ranks(n, body, rounds, inline_bytes, timeout=300)
    assert results == ["ok"] * n, results
    print(f"{rounds} rounds of nested communicating callbacks complete on {n} ranks "
          f"(AXON_TORCH_INLINE_BYTES={inline_bytes})")
