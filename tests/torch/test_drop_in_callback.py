"""An "axon" group whose last reference a future's callback drops (a group
already removed from torch.distributed's maps, held only by a closure the
callback clears) is destroyed there, on the group's own thread, in the middle
of its op, and the program goes on and ends cleanly. The destructor waited
for that thread to go idle, that is for itself, and every rank hung with no
message (found by a review); with the thread then left running, it could
still be dropping the op's Python objects as the interpreter ended, which
ended the process ("terminate called").

On rank 0, each round starts an op that must wait for rank 1 (an all_reduce
of 4 MiB, a send of 4 MiB, a recv), hangs the callback on it, destroys the
group and drops it; rank 1 takes part only after a barrier on the default
group, so the op completes, and its callback runs, after the drop.

    test_drop_in_callback.py N ROUNDS
"""
import datetime
import sys

import torch
import torch.distributed as dist

from harness import run_ranks

COUNT = 1 << 20  # 4 MiB: more than a mailbox holds, and above the inline limit


def body(rank, n, rounds):
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    dropped_in_callback = 0
    for round_ in range(rounds):
        for what in ("all_reduce", "send", "recv"):
            group = dist.new_group(list(range(n)), backend="axon")
            t = torch.ones(COUNT)
            if rank == 0:
                if what == "all_reduce":
                    work = dist.all_reduce(t, group=group, async_op=True)
                elif what == "send":
                    work = group.send([t], 1, 0)
                else:
                    work = group.recv([t], 1, 0)
                box = [group]

                def drop(future, box=box):
                    alive = len(box)
                    box.clear()  # the last reference to the group
                    return alive

                done = work.get_future().then(drop)
                dist.destroy_process_group(group)
                del group
                dist.barrier()
                assert done.wait() == 1, (round_, what)
                dropped_in_callback += 1
            else:
                dist.barrier()
                if what == "all_reduce":
                    dist.all_reduce(t, group=group)
                elif rank == 1 and what == "send":
                    group.recv([t], 0, 0).wait()
                elif rank == 1:
                    group.send([t], 0, 0).wait()
                dist.destroy_process_group(group)
                del group
            if what == "all_reduce" or (what == "send" and rank == 1) or (what == "recv" and rank == 0):
                want = float(n) if what == "all_reduce" else 1.0
                assert torch.equal(t[:4], torch.full((4,), want)), (round_, what, t[:4])
    dist.barrier()
    dist.destroy_process_group()
    return dropped_in_callback


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    results = run_ranks(n, body, rounds, timeout=240)
    assert results[0] == 3 * rounds and results[1:] == [0] * (n - 1), results
    print(f"test_drop_in_callback: {rounds} rounds on {n} ranks, rank 0's groups dropped in their ops' callbacks")
