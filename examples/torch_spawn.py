"""The axon backend under torch.multiprocessing.spawn (no axon-launch).

    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_spawn.py [--ranks N]

Each spawned process joins the default env:// rendezvous (MASTER_ADDR and
MASTER_PORT set here, RANK and WORLD_SIZE given to init_process_group), and
the axon backend builds its shared memory through the store that rendezvous
made. Every rank all-reduces a tensor, checks the sum, and exits 0 only when
it is right.
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, n):
    import axonml_torch  # noqa: F401  (registers "axon" in the spawned process)
    dist.init_process_group("axon", rank=rank, world_size=n)
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)  # SUM
    expected = n * (n + 1) / 2
    if not torch.all(t == expected):
        raise SystemExit(f"rank {rank}: all_reduce gave {t[:4].tolist()}…, expected {expected}")
    # One write of the whole line: print() writes the text and its newline
    # apart, and the ranks share the parent's stdout, so two ranks' lines
    # could join ("... okrank 0 of 2: ...").
    sys.stdout.write(f"rank {rank} of {n}: all_reduce sum = {t[0].item():g} (expected {expected:g}) ok\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    if args.ranks < 1:
        parser.error(f"--ranks {args.ranks}: at least one rank is needed")
    # A free port for the rendezvous, held until the ranks are done: rank 0's
    # store binds it seconds later, once torch is imported, and a port merely
    # free now may be taken meanwhile (by any outgoing connection, in the
    # kernel's range). Bound and never listening, with SO_REUSEADDR set after
    # the bind, it stays ours while the store, which sets SO_REUSEADDR too,
    # binds and listens there.
    with socket.socket() as held:
        held.bind(("", 0))
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(held.getsockname()[1]))
        mp.spawn(run, args=(args.ranks,), nprocs=args.ranks)  # raises if any rank failed


if __name__ == "__main__":
    main()
