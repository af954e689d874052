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
group, so the op completes, and its callback runs, after the drop. In a
fourth case a second send and an all_reduce are queued behind the send whose
callback drops the group, and rank 1 all_reduces only after receiving both:
the destructor waited for the collective thread before running the sends
queued behind its own, and both ranks waited out the group's timeout (the
review of the change).

    test_drop_in_callback.py N ROUNDS
    axon-launch -n 2 python3 test_drop_in_callback.py exit-race

exit-race: rank 0's program ends while the op whose callback drops the group
still waits for rank 1 (late by 2 s); the end of the program waited for the
group's thread holding the lock the destructor on that thread needed, and
rank 0 never exited (the review of the change). The launcher's exit status
says whether every rank ended cleanly.
"""
import datetime
import sys
import time

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
        dropped_in_callback += queued_behind_the_callback(rank, n, round_)
    dist.barrier()
    dist.destroy_process_group()
    return dropped_in_callback


def queued_behind_the_callback(rank, n, round_):
    group = dist.new_group(list(range(n)), backend="axon", timeout=datetime.timedelta(seconds=60))
    first, second, z = torch.ones(COUNT), torch.full((COUNT,), 2.0), torch.ones(4)
    started = time.monotonic()
    if rank == 0:
        sent = group.send([first], 1, 0)
        group.send([second], 1, 1)
        reduced = dist.all_reduce(z, group=group, async_op=True)
        box = [group]

        def drop(future, box=box):
            alive = len(box)
            box.clear()
            return alive

        done = sent.get_future().then(drop)
        dist.destroy_process_group(group)
        del group
        dist.barrier()
        assert done.wait() == 1, round_
        reduced.wait()
    else:
        dist.barrier()
        if rank == 1:
            group.recv([first], 0, 0).wait()
            group.recv([second], 0, 1).wait()
            assert second[0].item() == 2.0, second[:4]
        dist.all_reduce(z, group=group)
        dist.destroy_process_group(group)
        del group
    assert torch.equal(z, torch.full((4,), float(n))), (round_, z)
    took = time.monotonic() - started
    assert took < 30, f"round {round_}: the ops queued behind the callback took {took:.1f} s"
    return 1 if rank == 0 else 0


def exit_race():
    import axonml_torch  # noqa: F401  (under axon-launch: registers "axon")
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    group = dist.new_group([0, 1], backend="axon")
    t = torch.ones(COUNT)
    if rank == 0:
        work = dist.all_reduce(t, group=group, async_op=True)
        box = [group]
        work.get_future().then(lambda future: box.clear())
        dist.destroy_process_group(group)
        del group
        print("exit-race: rank 0's program ends with its op still waiting", flush=True)
    else:
        time.sleep(2)
        dist.all_reduce(t, group=group)
        assert t[0].item() == 2.0, t[:4]
        dist.destroy_process_group(group)
        del group


if __name__ == "__main__" and sys.argv[1:] == ["exit-race"]:
    exit_race()
elif __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    results = run_ranks(n, body, rounds, timeout=240)
    assert results[0] == 4 * rounds and results[1:] == [0] * (n - 1), results
    print(f"test_drop_in_callback: {rounds} rounds on {n} ranks, rank 0's groups dropped in their ops' callbacks")
