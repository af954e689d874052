"""Runs a function on N ranks (torch.multiprocessing, env:// rendezvous on a
free port) and returns each rank's result, or raises naming the rank that
failed and its traceback."""
import faulthandler
import os
import queue as queue_module
import random
import socket
import time
import traceback

import torch.multiprocessing as mp


# Every rank process run_ranks() has started in this process.
spawned_pids = set()

# The sockets that hold the ports free_port() gave, for this process's life.
_held_ports = []


def free_port():
    """A port below the kernel's ephemeral range, held for the rest of this
    process (as axon-launch holds its MASTER_PORT, launcher/reserved_port.hpp).
    Rank 0's store binds it a second or more later: a port from the ephemeral
    range can be taken in between by any outgoing connection, and one merely
    free when chosen by another test run beside this one (ctest -j) picking
    the same way, which then failed on EADDRINUSE or met this test's store.
    The socket binds without SO_REUSEADDR, so that taking the port is
    exclusive, and sets it afterwards, so that rank 0's store (which sets it
    too) still binds and listens there."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first, last = max(1024, low - 16384), low - 1
    for attempt in range(65):
        kernels_choice = attempt == 64 or last - first < 1024  # then, or for an unusual range
        s = socket.socket()
        try:
            s.bind(("", 0 if kernels_choice else random.randint(first, last)))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        except OSError:
            s.close()
            if kernels_choice:
                raise
            continue
        _held_ports.append(s)
        return s.getsockname()[1]


def _entry(rank, n, port, fn, args, queue):
    faulthandler.enable()  # a crash in C++ prints the Python stack
    import axonml_torch  # noqa: F401  (registers "axon" in the child)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(n), LOCAL_RANK=str(rank))
    import torch
    torch.set_num_threads(1)
    try:
        queue.put((rank, True, fn(rank, n, *args)))
    except BaseException:  # report every failure, with its traceback
        queue.put((rank, False, traceback.format_exc()))


def run_ranks(n, fn, *args, timeout=300, dead=()):
    """fn(rank, n, *args) on n processes; returns [result of rank 0, ...].
    Ranks in `dead` are expected to die without a result (None for them)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, n, port, fn, args, queue)) for r in range(n)]
    for p in procs:
        p.start()
        spawned_pids.add(p.pid)
    results = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < n - len(dead):
            try:
                rank, ok, value = queue.get(timeout=1)
            except queue_module.Empty:
                for r, p in enumerate(procs):
                    if r not in results and r not in dead and p.exitcode is not None and queue.empty():
                        time.sleep(1)  # a result put just before exit may still be in flight
                        if queue.empty():
                            raise AssertionError(f"rank {r} exited with status {p.exitcode} without a result")
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out after {timeout} s; results from ranks {sorted(results)}")
                continue
            if not ok:
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    return [results.get(r) for r in range(n)]
