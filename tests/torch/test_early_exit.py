"""A rank that takes no part may end its program at any time: the others'
point-to-point traffic and subgroup collectives, which do not need it, go on.
Found by a review: rank 2 of 3 ending its program (sys.exit(0), the group
left to the program's end) made a 4 MB send between ranks 0 and 1 fail on
both, "rank 2 exited or was killed while its peers still needed it".

    test_early_exit.py AXON_LAUNCH   (runs itself under axon-launch -n 3)
"""
import os
import subprocess
import sys
import time


def rank_body():
    import torch
    import torch.distributed as dist
    import axonml_torch  # noqa: F401

    dist.init_process_group("axon")
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    if rank == 2:
        sys.exit(0)  # atexit ends the groups; nothing of the others needs this rank
    time.sleep(0.5)  # rank 2 has ended by now: its watchers see its process gone
    numel = 1 << 20  # 4 MB: the send waits for the receiver, watching every peer
    if rank == 0:
        dist.send(torch.ones(numel), 1)
        works = [dist.isend(torch.full((20_000,), float(i)), 1, tag=i) for i in range(40)]
        for w in works:
            w.wait()
    else:
        time.sleep(1.0)
        got = torch.zeros(numel)
        dist.recv(got, 0)
        assert got.sum().item() == numel, got.sum().item()
        for i in range(40):
            part = torch.zeros(20_000)
            dist.recv(part, 0, tag=i)
            assert part.eq(i).all().item(), (i, part[:4])
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=pair)
    assert t.eq(3.0).all().item(), t[:4]
    print(f"rank {rank}: send, 40 isends and a subgroup all_reduce completed after rank 2 ended", flush=True)


def main():
    launcher = sys.argv[1]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    for attempt in range(3):
        out = subprocess.run([launcher, "-n", "3", "--timeout", "60", sys.executable, __file__, "--rank"],
                             env=env, capture_output=True, text=True, timeout=300)
        completed = out.stdout.count("completed after rank 2 ended")
        if out.returncode != 0 or completed != 2:
            raise SystemExit(f"run {attempt + 1}: axon-launch exited {out.returncode}, {completed} of 2 ranks "
                             f"completed:\n{out.stdout}\n{out.stderr}")
    print("test_early_exit: ranks 0 and 1 completed a 4 MB send, 40 isends and a subgroup all_reduce after "
          "rank 2 ended its program (3 runs)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--rank"]:
        rank_body()
    else:
        main()
