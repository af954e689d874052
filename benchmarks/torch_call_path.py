#!/usr/bin/python3
"""Where a small torch.distributed all_reduce's time goes before any peer is met.

    PYTHONPATH=build/release/python /usr/bin/python3 benchmarks/torch_call_path.py [--quick]

One process, a one-rank axon group (no peer to wait for), 4-byte float32
tensor. Times, best and median of 9 runs of --calls calls each:

  dist.all_reduce(t, group=axon)     what a training script calls
  axon.allreduce([t], opts).wait()   the same without torch.distributed's
                                     Python wrapper (its checks and options)
  axon.allreduce([t], opts)          the call into the backend alone: pybind,
                                     this backend's checks, its Work and future
  x.add_(0)                          one in-place ATen op (on another
                                     tensor) through PyTorch's Python
                                     binding, for scale
  a Python call of an empty lambda   the loop's own cost

The differences show what PyTorch's layers cost and what this backend adds;
benchmarks/torch_compare.py's "call path alone" is the first row. A smoke
check follows: after every call has run, the tensor must be unchanged (a
one-rank SUM leaves it as it was).
"""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist


_held_port = socket.socket()


def free_port():
    """A port held for this process (bound, never listening, SO_REUSEADDR
    set after the bind), so that nothing takes it before the store, which
    sets SO_REUSEADDR too, binds it (examples/torch_spawn.py)."""
    _held_port.bind(("", 0))
    _held_port.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return _held_port.getsockname()[1]


def timed(fn, calls, runs):
    for _ in range(max(calls // 10, 10)):
        fn()
    per_call = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
    return min(per_call), statistics.median(per_call)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=20000, help="calls per run (default 20000)")
    p.add_argument("--quick", action="store_true", help="smoke test: 200 calls a run")
    a = p.parse_args()
    calls, runs = (200, 3) if a.quick else (a.calls, 9)

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    # The default inline limit: a 4-byte op on a one-rank group then completes
    # in the call, so the row without wait() times calls, not a growing queue.
    os.environ.pop("AXON_TORCH_INLINE_BYTES", None)
    import axonml_torch  # noqa: F401  (registers "axon")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)
    axon = dist.new_group([0], backend="axon")
    t = torch.full((1,), 3.0)
    scratch = torch.zeros(1)
    opts = dist.AllreduceOptions()

    cases = [
        ("dist.all_reduce(t, group=axon)", lambda: dist.all_reduce(t, group=axon)),
        ("axon.allreduce([t], opts).wait()", lambda: axon.allreduce([t], opts).wait()),
        ("axon.allreduce([t], opts)", lambda: axon.allreduce([t], opts)),
        ("x.add_(0)", lambda: scratch.add_(0)),
        ("an empty lambda", lambda: None),
    ]
    print(f"4-byte float32 all_reduce on a one-rank axon group, µs a call ({runs} runs of {calls} calls)")
    print(f"{'call':<36} {'best':>7} {'median':>7}")
    for name, fn in cases:
        best, median = timed(fn, calls, runs)
        print(f"{name:<36} {best:>7.2f} {median:>7.2f}")
    axon.allreduce([t], opts).wait()
    if t.item() != 3.0:
        raise SystemExit(f"torch_call_path: a one-rank all_reduce changed the tensor to {t.item()}")
    dist.destroy_process_group()
    print("torch_call_path: the tensor is unchanged after every call")


if __name__ == "__main__":
    main()
