"""A job that makes a subgroup and then destroys its default group at once,
without a barrier, ends cleanly on every rank, and can init again.

PyTorch 1.13's new_group ends with a barrier in the store that every rank
polls every 10 ms; rank 0, which hosts the store, could leave it, destroy
the default group and take the store down while a rank outside the
subgroup had yet to see the barrier complete ("Broken pipe" there, 3 runs
of 3 at 4 ranks). The default axon group's destroy now waits, on rank 0,
until every rank has reached its own destroy (ProcessGroupAxon::
close_store_together).

With `late`, every round reuses one MASTER_PORT (as a program under
axon-launch does) and the last rank reaches destroy 0.5 s after the others.
Rank 0's store stays up meanwhile, and the others, returning at once, used
to init again against that old store and read the old group's keys ("cannot
open rank 0's arena", 4 of 4 runs at 3 ranks); now they wait until it is
down.

With `late0`, rank 0 is the late one: it counts itself in last and closes
its store at once, before the others look again, so their store broke
before they saw every rank in; they returned without waiting for rank 0's
listener to close, and their next init met it closing: "Connection reset by
peer" (3 runs in 15 of a review's spawn loop).

With `same-port`, every round reuses one MASTER_PORT and nobody is late:
rank 0 listens again at once, and the others' destroy must see that new
store as the old one gone. Its probe failed every time (PyTorch 1.13 counts
a client's connect timeout in whole seconds, and 500 ms became 0), so they
waited the whole 5 s of every destroy, logging thousands of c10d ERROR lines
(found by a review under torch.multiprocessing.spawn)."""
import datetime
import gc
import os
import sys
import time

import torch
import torch.distributed as dist

from harness import free_port, run_ranks


def body(rank, n, ports, late=False, quick_destroy=False, late_rank=None):
    for round_, port in enumerate(ports):
        os.environ["MASTER_PORT"] = str(port)  # a new store each time, unless `late`
        dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
        t = torch.tensor([float(rank + round_)])
        dist.all_reduce(t)
        assert t.item() == n * (n - 1) / 2 + n * round_, (round_, t)
        pair = dist.new_group([0, 1])
        if rank < 2:
            one = torch.ones(1)
            dist.all_reduce(one, group=pair)
            assert one.item() == 2.0, (round_, one)
        if late and rank == (n - 1 if late_rank is None else late_rank):
            time.sleep(0.5)
        started = time.monotonic()
        dist.destroy_process_group()  # no barrier first
        took = time.monotonic() - started
        assert not dist.is_initialized()
        # 0.3 s when rank 0's new store answers at once; 5 s was the fault.
        assert not quick_destroy or took < 3, f"rank {rank}: destroy #{round_} took {took:.1f} s"

    return "ok"


def held(rank, n):
    """init_process_group again while a DDP model still holds the old default
    group: PyTorch's env:// store is one server per port in a process, shared
    while any group made through it lives, so the new group met the old one's
    keys and hung (3 of 5 runs) or failed to open an arena long closed,
    blaming the user and the PID namespace (2 of 5; found by a review). Now
    every rank refuses at once, saying what holds the keys; once the model is
    dropped, init works."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    model = DDP(torch.nn.Linear(5, 5))
    model(torch.ones(2, 5)).sum().backward()
    dist.destroy_process_group()
    start = time.monotonic()
    try:
        dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
        raise AssertionError("init_process_group worked while a DDP model held the old group's store keys")
    except RuntimeError as e:
        text = str(e)
    waited = time.monotonic() - start
    for words in (f"rank {rank}: this store already holds rank {rank}'s entry", "still holds",
                  "a DDP model", "another MASTER_PORT"):
        assert words in text, f"error lacks {words!r}: {text}"
    assert waited < 10, f"refused only after {waited:.1f} s"
    del model
    gc.collect()
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == n * (n + 1) / 2, t
    dist.destroy_process_group()
    return "ok"


def old_world(rank, n, port):
    """A subgroup the program still holds from a world it destroyed numbers
    its members as that world did: a process of the old world that has
    ended since (here the last rank, which takes no part in the new world)
    is no reason for the new world's new_group barrier to raise. It did,
    naming the old world's rank (found by a review)."""
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    kept = dist.new_group(list(range(n)))
    dist.barrier(group=kept)
    dist.destroy_process_group()
    if rank == n - 1:
        return "ok"  # its process ends
    time.sleep(1.5)  # the old subgroup's watch has seen it end by now
    dist.init_process_group("axon", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n - 1,
                            timeout=datetime.timedelta(seconds=60))
    if rank == n - 2:
        time.sleep(1)  # the others poll the barrier meanwhile
    pair = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=30))
    if rank < 2:
        one = torch.ones(1)
        dist.all_reduce(one, group=pair)
        assert one.item() == 2.0, one
    dist.destroy_process_group()
    del kept
    return "ok"


if __name__ == "__main__":
    if sys.argv[1:2] == ["old-world"]:
        n = int(sys.argv[2])
        assert run_ranks(n, old_world, free_port(), timeout=300) == ["ok"] * n
        print(f"a subgroup held from a destroyed world of {n} ranks, one of which ended since, leaves the next "
              "world's new_group alone")
        sys.exit(0)
    if sys.argv[1:2] == ["held"]:
        n = int(sys.argv[2])
        assert run_ranks(n, held, timeout=300) == ["ok"] * n
        print(f"init again while a DDP model holds the old group is refused at once on {n} ranks, naming why; "
              "dropping the model lets it work")
        sys.exit(0)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    mode = sys.argv[3] if len(sys.argv) > 3 else ""
    late = mode in ("late", "late0")
    same_port = late or mode == "same-port"
    ports = [free_port()] * rounds if same_port else [free_port() for _ in range(rounds)]
    results = run_ranks(n, body, ports, late, same_port and not late, 0 if mode == "late0" else None, timeout=300)
    assert results == ["ok"] * n, results
    print(f"{rounds} rounds of init, new_group, destroy without a barrier end cleanly on {n} ranks"
          + (f", on one port with rank {0 if mode == 'late0' else n - 1} late to destroy" if late else "")
          + (", on one port, each destroy within 3 s" if same_port and not late else ""))
