"""A rank stopped (SIGSTOP) in the middle of zero-copy all_reduces, and
continued once its peer's call has timed out and raised, fails too: it never
returns success holding what its peer wrote into its tensor after failing,
and it writes at most the one 32 KiB piece it was in into its peer's tensor.
Before the fix, the resumed rank finished the op it had been stopped in,
returned success with (-5 + 1.5) / 2 in its tensor, and overwrote up to half
of its peer's tensor after the peer's call had raised (found by a review:
5 of 8 runs, 5 of 5 under axon-launch).

    PYTHONPATH=<build>/python:tests/torch /usr/bin/python3 tests/torch/test_zero_copy_stopped.py [TRIALS]
"""
import datetime
import os
import random
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import axonml_torch
from harness import run_ranks

COUNT = 1 << 24          # 64 MiB of f32: a rank's slice takes many 32 KiB pieces
PIECE_ELEMENTS = 8192    # 32 KiB of f32: what a late rank may still write
SENTINEL = -5.0


def stopped_and_continued(rank, n, seed):
    # The default timeout for the set-up (a 2 s one fails the store's connect
    # on a loaded machine); the ops run in a group that times out after 2 s.
    dist.init_process_group("axon")
    pids = [None] * n
    dist.all_gather_object(pids, os.getpid())
    group = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=2),
                           pg_options=axonml_torch.Options(shared_mb=COUNT * 8 // 2**20 + 32))
    t = torch.full((COUNT,), float(rank + 1))
    if not axonml_torch.place_in_arena(t, group):
        raise AssertionError("the tensor was not placed")
    dist.barrier(group=group)
    if rank == 1:
        delay = random.Random(seed).uniform(0.1, 0.5)
        threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
    ops, wrong_success, error = 0, None, None
    try:
        for _ in range(100000):
            dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)  # 1.5 everywhere, every time
            ops += 1
            # Sampled, so that rank 1 spends its time in the op, where the
            # stop is meant to land: two samples in every 32 KiB piece.
            if rank == 1 and not bool((t[::PIECE_ELEMENTS // 2] == 1.5).all()):
                wrong_success = sorted(set(t.unique()[:4].tolist()))
                break
    except RuntimeError as e:
        error = str(e)
    if rank == 0:
        changed = 0
        try:
            t.fill_(SENTINEL)  # reused at once, as a program may after an error
        finally:
            os.kill(pids[1], signal.SIGCONT)
        # Continued again and again: on a loaded machine rank 0 may time out
        # before rank 1's timer has stopped it (at most 0.5 s after the
        # barrier, well inside this watch), and a rank left stopped would
        # hold the test until its timeout.
        watch_until = time.monotonic() + 1.5
        while time.monotonic() < watch_until:
            changed = max(changed, int((t != SENTINEL).sum()))
            try:
                os.kill(pids[1], signal.SIGCONT)
            except ProcessLookupError:
                pass
            time.sleep(0.01)
        return {"ops": ops, "error": error, "changed": changed}
    return {"ops": ops, "error": error, "wrong_success": wrong_success}


if __name__ == "__main__":
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for trial in range(trials):
        r0, r1 = run_ranks(2, stopped_and_continued, trial, timeout=300)
        print(f"trial {trial}: rank 0 raised after {r0['ops']} ops ({(r0['error'] or '')[:90]}); "
              f"{r0['changed']} of its elements changed after; rank 1 after {r1['ops']} ops: "
              f"{'returned success holding ' + str(r1['wrong_success']) if r1['wrong_success'] else (r1['error'] or '')[:90]}",
              flush=True)
        assert r0["error"], "rank 0's call never failed: rank 1 was not stopped?"
        assert r1["wrong_success"] is None, f"rank 1 returned success holding {r1['wrong_success']} after rank 0 had failed"
        assert r1["error"], "rank 1 never failed after it was continued"
        assert r0["changed"] <= PIECE_ELEMENTS, (
            f"rank 1 wrote {r0['changed']} elements into rank 0's tensor after rank 0's call had failed "
            f"(at most one piece, {PIECE_ELEMENTS}, may still land)")
    print(f"test_zero_copy_stopped: {trials} trials, the continued rank failed every time and wrote at most one piece")
