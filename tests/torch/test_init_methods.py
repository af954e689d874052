"""Every rendezvous PyTorch offers sets an axon group up, without axon-launch:
init_method="file://...", init_method="tcp://...", and a FileStore passed as
store=. Each makes the default group and a subgroup, checks an all_reduce on
both, and destroys the group, well inside the group's timeout.

A FileStore creates its file at its first write, and its check() waits for
the file to appear; the set-up's first call was a check(), so file:// init
waited out the whole timeout and failed with "open(...): No such file or
directory" on every rank (found by a review; Gloo worked).

Then a world of 3 whose rank 2 never comes, over a FileStore: rank 1 times
out and exits, and only then does rank 0 come. Rank 0 must give rank 1's
reason (waiting for rank 2), not blame rank 1 as a rank that died: it said
"rank 1 (pid ...) has already exited" (a review, 3 runs of 5 under env://).

    test_init_methods.py N
"""
import datetime
import multiprocessing as mp
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


def set_up_alone(rank, where, results):
    """Rank `rank` of 3 sets up over the file store `where` with a 2 s timeout;
    puts its error's text (or "set up") on `results`."""
    import axonml_torch  # noqa: F401  (registers "axon" in this process)
    try:
        dist.init_process_group("axon", init_method=where, rank=rank, world_size=3,
                                timeout=datetime.timedelta(seconds=2))
        results.put("set up")
    except Exception as e:  # noqa: BLE001  (the text is what is checked)
        results.put(str(e))


def check_the_reason_of_a_rank_that_timed_out_and_exited(directory):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    where = "file://" + os.path.join(directory, "rank-2-never-comes")
    said = {}
    for rank in (1, 0):  # one after the other: rank 1 has exited before rank 0 comes
        p = ctx.Process(target=set_up_alone, args=(rank, where, results))
        p.start()
        said[rank] = results.get(timeout=120)
        p.join(timeout=60)
    assert "timed out after 2.0 s" in said[1] and "ranks 0, 2" in said[1], said[1]
    assert "has already exited" not in said[0], said[0]
    assert "rank 0: gave up setting up the shared memory while it waited for rank 2's host" in said[0], said[0]
    assert "rank 1: timed out after 2.0 s" in said[0], said[0]
    print("a rank that timed out and exited: the next rank gives its reason:", said[0])


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="axon-init-") as directory:
        for method, where in (("file", "file://" + os.path.join(directory, "rendezvous")),
                              ("tcp", f"tcp://127.0.0.1:{free_port()}"),
                              ("store", os.path.join(directory, "store"))):
            assert run_ranks(n, body, method, where, timeout=3 * TIMEOUT_S) == [method] * n
            print(f"init_method {method}: {n} ranks set up, all_reduce on the group and a subgroup, destroy")
        check_the_reason_of_a_rank_that_timed_out_and_exited(directory)


if __name__ == "__main__":
    main()
