"""Runs a function on N ranks (torch.multiprocessing, env:// rendezvous on a
free port) and returns each rank's result, or raises naming the rank that
failed and its traceback."""
import faulthandler
import os
import queue as queue_module
import random
import socket
import sys
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


def _end_as_a_spawned_process_does():
    """A fork server's child ends in os._exit() (multiprocessing.forkserver.main),
    which skips what a program's end runs: atexit handlers (axonml_torch's
    tells the peers this rank's program ended, not that it was killed), the
    interpreter's finalization, C++ static destructors. Turn that one call
    into a SystemExit, which unwinds out of the server's main() and ends this
    process as a spawned rank's program ends. Any other os._exit() (a test's
    own abrupt end) stays what it is."""
    import multiprocessing.forkserver
    os_exit = os._exit
    server_main = multiprocessing.forkserver.main.__code__

    def _exit(code):
        if sys._getframe(1).f_code is server_main:
            raise SystemExit(code)
        os_exit(code)
    os._exit = _exit


def _start_as_a_spawned_process_does(start_method, environment, cwd, target, args):
    """A fork server's child has the server's environment and working folder,
    as they were when the server started; a spawned one has the parent's as
    they are now (a test may set AXON_* variables between its cases;
    PyTorch's suite sets TEMP_DIR for each test). Take the parent's, then
    run target(*args)."""
    if start_method == "forkserver":
        os.environ.clear()
        os.environ.update(environment)
        os.chdir(cwd)
        _end_as_a_spawned_process_does()
    target(*args)


def process(target, args, name=None):
    """A process of context() that runs target(*args) with this process's
    environment and working folder, as a spawned one would."""
    ctx = context()
    return ctx.Process(target=_start_as_a_spawned_process_does, name=name,
                       args=(ctx.get_start_method(), dict(os.environ), os.getcwd(), target, args))


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


_context = None


def start_method():
    """"forkserver" or "spawn" (AXON_TEST_START_METHOD; see context())."""
    method = os.environ.get("AXON_TEST_START_METHOD", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"AXON_TEST_START_METHOD={method!r}: expected forkserver or spawn")
    return method


def context(preload=("torch", "torch.distributed")):
    """How the ranks start: from a fork server that has imported torch once
    ("forkserver", torch and torch.distributed preloaded), so that a rank
    starts in ~0.1 s instead of importing torch again (~1.4 s of CPU each,
    most of what a short case cost on 2 cores: test_errors.py's ~45 cases
    took 250 s, now 112 s). The server is a fresh interpreter that has done nothing
    but import: a rank starts as clean as under "spawn", and axonml_torch is
    imported in the rank, never before the fork.
    AXON_TEST_START_METHOD=spawn starts each rank as torch.multiprocessing.spawn
    does (some tests are registered that way too, tests/torch.cmake).
    `preload`: the modules the server imports, on the first call."""
    global _context
    if _context is None:
        method = start_method()
        _context = mp.get_context(method)
        if method == "forkserver":
            _context.set_forkserver_preload(list(preload))
    return _context


def run_ranks(n, fn, *args, timeout=300, dead=()):
    """fn(rank, n, *args) on n processes; returns [result of rank 0, ...].
    Ranks in `dead` are expected to die without a result (None for them)."""
    ctx = context()
    queue = ctx.Queue()
    port = free_port()
    procs = [process(_entry, (r, n, port, fn, args, queue)) for r in range(n)]
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
