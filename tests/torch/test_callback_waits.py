"""A future's callback that waits on an op queued after the one it belongs
to: the callback runs on the group's thread, and the op it waits for was
queued behind it on that same thread, so every rank hung, with no timeout
to end it (a review; Gloo completes). Now the wait runs the ops queued up
to it, in call order, there and then.

    test_callback_waits.py   (3 ranks; large ops, and small ones with every
                              collective on the group's thread)
"""
import datetime
import os

import torch
import torch.distributed as dist

from harness import run_ranks


def body(rank, n, elements, inline_bytes):
    if inline_bytes is not None:
        os.environ["AXON_TORCH_INLINE_BYTES"] = str(inline_bytes)
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=20))
    total = n * (n + 1) / 2
    for _ in range(5):
        a, b, c = (torch.full((elements,), float(rank + 1)) for _ in range(3))
        w1 = dist.all_reduce(a, async_op=True)
        w2 = dist.all_reduce(b, async_op=True)
        w3 = dist.all_reduce(c, async_op=True)

        def callback(fut):
            w3.wait()  # runs w2, then w3, on this thread, in call order
            assert w2.is_completed(), "w3 ran before w2"
            return c

        w1.get_future().then(callback).wait()
        for name, t in (("a", a), ("b", b), ("c", c)):
            assert torch.equal(t, torch.full((elements,), total)), f"{name}: {t[:4]}"
        w2.wait()
    dist.destroy_process_group()
    return "ok"


if __name__ == "__main__":
    for elements, inline_bytes in ((1 << 20, None), (10, 0), (10, None)):
        results = run_ranks(3, body, elements, inline_bytes, timeout=120)
        assert results == ["ok"] * 3, results
        print(f"a callback of all_reduce #1 that waits on #3 completes on 3 ranks ({elements} floats, "
              f"AXON_TORCH_INLINE_BYTES={inline_bytes})")
