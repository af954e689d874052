"""Every rendezvous PyTorch offers sets an axon group up, without axon-launch:
init_method="file://...", init_method="tcp://...", and a FileStore passed as
store=. Each makes the default group and a subgroup, checks an all_reduce on
both, and destroys the group, well inside the group's timeout.

A FileStore creates its file at its first write, and its check() waits for
the file to appear; the set-up's first call was a check(), so file:// init
waited out the whole timeout and failed with "open(...): No such file or
directory" on every rank (found by a review; Gloo worked).

    test_init_methods.py N
"""
import datetime
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

from harness import free_port, run_ranks

TIMEOUT_S = 60


def body(rank, n, method, where):
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    start = time.monotonic()
    if method == "store":
        store = dist.FileStore(where, n)
        dist.init_process_group("axon", store=store, rank=rank, world_size=n, timeout=timeout)
    else:
        dist.init_process_group("axon", init_method=where, rank=rank, world_size=n, timeout=timeout)
    took = time.monotonic() - start
    assert took < TIMEOUT_S / 4, f"{method}: init took {took:.1f} s of the {TIMEOUT_S} s timeout"
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [n * (n + 1) / 2] * 5, (method, t)
    pair = dist.new_group([0, 1])
    if rank < 2:
        one = torch.full((3,), float(rank + 1))
        dist.all_reduce(one, group=pair)
        assert one.tolist() == [3.0] * 3, (method, one)
    dist.barrier()
    dist.destroy_process_group()
    return method


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="axon-init-") as directory:
        for method, where in (("file", "file://" + os.path.join(directory, "rendezvous")),
                              ("tcp", f"tcp://127.0.0.1:{free_port()}"),
                              ("store", os.path.join(directory, "store"))):
            assert run_ranks(n, body, method, where, timeout=3 * TIMEOUT_S) == [method] * n
            print(f"init_method {method}: {n} ranks set up, all_reduce on the group and a subgroup, destroy")


if __name__ == "__main__":
    main()
