"""Ctrl-C reaches a PyTorch rank that waits for its peers: Python's signal
handlers run while an op's wait() or a group's set-up waits, and what one
raises ends the wait. Before, the handler ran only once the wait ended: with
Ctrl-C to axon-launch, when a peer exited on its own KeyboardInterrupt, and
then while CPython printed the wait's error, so each waiting rank printed a
bare object dump and "lost sys.stderr" instead of a traceback.

    test_interrupt.py AXON_LAUNCH
"""
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import run_ranks


def signal_self_after(seconds, signum):
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


def interrupted_op_goes_on(rank, n):
    """An interrupted wait() raises what the handler raised, within a
    moment; the op goes on, and a second wait() returns its result. A
    handler that raises nothing does not end the wait."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("axon")
    dist.barrier()
    t = torch.full((1000,), float(rank + 1))
    if rank == 1:
        time.sleep(4)  # rank 0 waits meanwhile
        dist.all_reduce(t)
        assert t[0].item() == 3.0
        time.sleep(2)  # rank 0 waits in a receive meanwhile
        dist.send(torch.full((8,), 7.0), 0)
        dist.destroy_process_group()
        return "ok"
    handled = []
    signal.signal(signal.SIGUSR1, lambda *_: handled.append(time.monotonic()))
    work = dist.all_reduce(t, async_op=True)
    started = time.monotonic()
    signal_self_after(0.3, signal.SIGUSR1)
    signal_self_after(1.0, signal.SIGINT)
    try:
        work.wait()
        raise AssertionError("wait() returned although rank 1 had not called its all_reduce")
    except KeyboardInterrupt:
        interrupted_after = time.monotonic() - started
    assert len(handled) == 1 and handled[0] - started < 1.0, (handled, started)
    assert interrupted_after < 2.5, f"KeyboardInterrupt came {interrupted_after:.2f} s after the wait began"
    assert not work.is_completed()
    work.wait()  # the op went on: rank 1 arrives
    assert t[0].item() == 3.0, t[0].item()

    def handler_that_raises(*_):
        raise ValueError("the handler's own error")

    received = torch.zeros(8)
    work = dist.irecv(received, 1)
    signal.signal(signal.SIGUSR2, handler_that_raises)
    signal_self_after(0.2, signal.SIGUSR2)
    try:
        work.wait()
        raise AssertionError("a receive's wait() returned although rank 1 had not sent")
    except ValueError as e:
        assert "the handler's own error" in str(e), str(e)
    work.wait()
    assert received[0].item() == 7.0
    dist.destroy_process_group()
    return f"interrupted after {interrupted_after:.2f} s"


def waits_from_cpp_are_left_alone(rank, n):
    """Only Python's own Work.wait() runs the handlers: the same wait made
    through libtorch's C++ (here torch's base binding, as DDP's reducer
    waits for its bucket broadcast) returns when the op ends, and the
    KeyboardInterrupt comes after it, in Python."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("axon")
    dist.barrier()
    t = torch.full((16,), float(rank + 1))
    if rank == 1:
        time.sleep(2)  # rank 0 waits meanwhile
        dist.all_reduce(t)
        dist.destroy_process_group()
        return "ok"
    work = dist.all_reduce(t, async_op=True)
    started = time.monotonic()
    signal_self_after(0.3, signal.SIGINT)
    try:
        dist.Work.wait(work)  # c10d::Work::wait, bound by torch: no handler runs inside it
        time.sleep(1)  # the KeyboardInterrupt comes here, once back in Python
        raise AssertionError("no KeyboardInterrupt")
    except KeyboardInterrupt:
        waited = time.monotonic() - started
        assert work.is_completed() and t[0].item() == 3.0, (work.is_completed(), t[0].item())
    assert waited > 1.2, f"the C++ wait ended after {waited:.2f} s, before its op (rank 1 came after 2 s)"
    dist.destroy_process_group()
    return f"interrupted after the op, {waited:.2f} s"


def program_end_names_it_to_the_peer(rank, n):
    """A program that ends with its interrupted op still pending aborts the
    op's group: the peer's op raises naming why."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("axon")
    dist.barrier()
    if rank == 1:
        time.sleep(4)  # rank 0 is interrupted, and its program ends, meanwhile
        try:
            dist.all_reduce(torch.ones(4))
            raise AssertionError("the all_reduce completed without rank 0")
        except RuntimeError as e:
            assert "rank 0 aborted: its program ended after a Python signal handler" in str(e), str(e)
            return str(e)
    work = dist.all_reduce(torch.ones(4), async_op=True)
    signal_self_after(0.5, signal.SIGINT)
    try:
        work.wait()
    except KeyboardInterrupt:
        return "interrupted; the program ends with the op pending"
    raise AssertionError("no KeyboardInterrupt")


def interrupted_setup_is_named_to_peers(rank, n):
    """A rank interrupted in new_group()'s set-up raises KeyboardInterrupt;
    its peer's new_group() raises naming it as interrupted."""
    import torch.distributed as dist
    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=60))
    dist.barrier()
    if rank == 1:
        time.sleep(3)  # rank 0 waits for it in the set-up meanwhile
        try:
            dist.new_group([0, 1])
            raise AssertionError("new_group() succeeded with an interrupted peer")
        except RuntimeError as e:
            assert "rank 0: interrupted (a Python signal handler raised" in str(e), str(e)
            assert "rank 0: rank 0" not in str(e), str(e)
            return str(e)
    started = time.monotonic()
    signal_self_after(0.5, signal.SIGINT)
    try:
        dist.new_group([0, 1])
        raise AssertionError("new_group() returned although rank 1 had not called it")
    except KeyboardInterrupt:
        waited = time.monotonic() - started
    assert waited < 2.5, f"KeyboardInterrupt came {waited:.2f} s after new_group() began"
    return f"interrupted after {waited:.2f} s"


def rank_body(stage):
    import torch
    import torch.distributed as dist
    import axonml_torch  # noqa: F401

    dist.init_process_group("axon")
    rank = dist.get_rank()
    dist.barrier()
    if stage == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(torch.nn.Linear(64, 8))
        for _ in range(2):  # two steps together: the second's forward rebuilds the buckets (a broadcast)
            model(torch.randn(4, 64)).sum().backward()
    print(f"ready {rank}", flush=True)
    if rank == 2:
        time.sleep(120)  # ranks 0 and 1 wait for it, until Ctrl-C
    if stage == "left-alone":  # Ctrl-C to rank 0 alone, waiting for rank 1, which is busy for long
        if rank == 0:
            signal_self_after(1.0, signal.SIGINT)
        else:
            time.sleep(60)
        dist.all_reduce(torch.ones(1000))
    elif stage == "all_reduce":
        dist.all_reduce(torch.ones(1000))
    elif stage == "ddp":
        model(torch.randn(4, 64)).sum().backward()  # waits for rank 2's gradients in DDP's C++: not interrupted
    else:
        dist.new_group([0, 1, 2])
    raise AssertionError(f"rank {rank}: the {stage} returned")


def hook_case_body(case):
    """Rank 0 waits in a C++ wait (torch's own Work.wait binding: no handler
    runs inside it) for rank 1, which never comes; a signal comes meanwhile;
    the wait times out (axon-launch --timeout 2) and the error is uncaught,
    with the signal's handler still due."""
    import torch
    import torch.distributed as dist
    import axonml_torch  # noqa: F401

    dist.init_process_group("axon")
    rank = dist.get_rank()
    dist.barrier()
    if case == "interactive-print":
        # An error printed by code.InteractiveInterpreter (through
        # sys.excepthook, sys.last_value set) is not what the program ends
        # on: it ends normally, while rank 1 waits for it.
        import code
        code.InteractiveInterpreter().runsource("undefined_name")
        if rank == 0:
            time.sleep(1)  # rank 1 is in its all_reduce by now
            return
        try:
            dist.all_reduce(torch.ones(4))
        except RuntimeError as e:
            print(f"peer told: {e}", flush=True)
        return
    if rank == 1:
        time.sleep(30)
        return

    def exits_5(*_):
        raise SystemExit(5)  # as sys.exit(5) in a SIGTERM handler, to end on preemption

    def raises_while_handling(*_):
        try:
            raise OSError("the handler's checkpoint failed")
        except OSError:
            raise KeyboardInterrupt

    signal.signal(signal.SIGUSR1, exits_5 if case == "system-exit" else raises_while_handling)
    signal_self_after(0.5, signal.SIGUSR1)
    dist.Work.wait(dist.all_reduce(torch.ones(4), async_op=True))


def hook_case(launcher, case):
    """axon-launch -n 2 --timeout 2 running hook_case_body(case): its exit
    status and output."""
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    job = subprocess.run([launcher, "-n", "2", "--timeout", "2", sys.executable, __file__, "--hook-case", case],
                         env=env, capture_output=True, text=True, timeout=120)
    return job.returncode, job.stdout + job.stderr


def excepthook_cases(launcher):
    """What the excepthook does with a handler due as an uncaught error is
    printed (the diff review's cases)."""
    status, text = hook_case(launcher, "system-exit")
    if "rank 0 exited with code 5" not in text or "[rank 0] Traceback" in text or "SystemExit" in text:
        raise SystemExit(f"a handler's SystemExit(5), due as the timeout's error was printed, did not end rank 0 "
                         f"quietly with status 5 (job status {status}):\n{text}")
    status, text = hook_case(launcher, "chained")
    own = "\n".join(line[len("[rank 0] "):] for line in text.splitlines() if line.startswith("[rank 0] "))
    for words in ("timed out after 2.0 s", "the handler's checkpoint failed", "KeyboardInterrupt"):
        if words not in own:
            raise SystemExit(f"a handler that raised while handling its own error: rank 0 did not print "
                             f"'{words}' (the uncaught error goes at the end of the chain):\n{text}")
    if own.index("timed out after 2.0 s") > own.index("the handler's checkpoint failed"):
        raise SystemExit(f"the uncaught error was not printed first, as the chain's start:\n{text}")
    status, text = hook_case(launcher, "interactive-print")
    told = [line for line in text.splitlines() if "peer told:" in line]
    if "NameError" not in text or len(told) != 1 or "uncaught" in told[0] or "rank 0" not in told[0]:
        raise SystemExit(f"an error code.InteractiveInterpreter printed was given to the peer as what rank 0's "
                         f"program ended on (it ended normally):\n{text}")
    return "a handler's SystemExit ends quietly with its status; the uncaught error ends a handler's chain; an " \
           "error printed by code.InteractiveInterpreter is not named to the peers"


def started_job(launcher, n, stage, out_path):
    """axon-launch -n N running this file's rank_body(stage), its output in
    out_path, once every rank has said it is ready."""
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    with open(out_path, "w") as out:
        job = subprocess.Popen([launcher, "-n", str(n), sys.executable, __file__, "--rank", stage],
                               env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while open(out_path).read().count("ready ") < n:
        assert job.poll() is None and time.monotonic() < deadline, open(out_path).read()
        time.sleep(0.05)
    return job


def ctrl_c_to_the_launcher(launcher, stage):
    with tempfile.TemporaryDirectory() as work:
        out_path = os.path.join(work, "out")
        job = started_job(launcher, 3, stage, out_path)
        time.sleep(2)  # ranks 0 and 1 wait in the stage
        job.send_signal(signal.SIGINT)
        status = job.wait(timeout=60)
        text = open(out_path).read()
    for rank in (0, 1):
        lines = [line[len(f"[rank {rank}] "):] for line in text.splitlines() if line.startswith(f"[rank {rank}] ")]
        own = "\n".join(lines)
        where = {"all_reduce": "work.wait()", "new_group": "create_process_group(", "ddp": "run_backward("}[stage]
        if ("lost sys.stderr" in own or "object repr" in own or not lines or lines[-1] != "KeyboardInterrupt"
                or where not in own):
            raise SystemExit(f"Ctrl-C to axon-launch while ranks 0 and 1 waited in {stage}: rank {rank} did not "
                             f"end with a KeyboardInterrupt traceback through {where}:\n{text}")
        # DDP's wait is not interrupted: it ends when rank 2, in Python,
        # exits on its KeyboardInterrupt; the error it raises is printed
        # whole, then the KeyboardInterrupt that came meanwhile (the
        # excepthook runs the handler first: before, CPython ran it halfway
        # through printing the error and gave up, "lost sys.stderr").
        if stage == "ddp" and ("rank 2 aborted: it left the group of global ranks [0, 1, 2] (its program ended on an "
                               "uncaught KeyboardInterrupt)" not in own or
                               "During handling of the above exception, another exception occurred" not in own):
            raise SystemExit(f"Ctrl-C to axon-launch during DDP training: rank {rank} did not print the error that "
                             f"named rank 2's KeyboardInterrupt, then its own:\n{text}")
    if status == 0:
        raise SystemExit(f"the job interrupted in {stage} exited 0:\n{text}")


def ends_without_its_pending_op(launcher):
    """A rank whose program ends on the KeyboardInterrupt does not first wait
    for the interrupted op (for a peer that comes after 60 s): its groups
    with ops pending are aborted (before, it stayed until the peer came)."""
    with tempfile.TemporaryDirectory() as work:
        out_path = os.path.join(work, "out")
        job = started_job(launcher, 2, "left-alone", out_path)
        ready = time.monotonic()
        try:
            status = job.wait(timeout=40)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            raise SystemExit(f"rank 0, interrupted in an all_reduce, had not ended 40 s later:\n"
                             f"{open(out_path).read()}")
        text = open(out_path).read()
    ended = time.monotonic() - ready
    if "[rank 0] KeyboardInterrupt" not in text or "rank 0 was killed by signal 2 (SIGINT)" not in text:
        raise SystemExit(f"the job of an interrupted rank 0 ended {status} without its KeyboardInterrupt:\n{text}")
    return f"the job ended {ended:.1f} s after its ranks were ready (rank 1 would have come after 60 s)"


def users_excepthook_still_prints():
    """import axonml_torch wraps sys.excepthook: a program's own hook, set
    before the import, still gets the uncaught exception, once. (That a
    due handler runs first, the DDP case below shows.)"""
    program = (
        "import sys\n"
        "sys.excepthook = lambda t, v, tb: print('own hook:', t.__name__, v, flush=True)\n"
        "import axonml_torch\n"
        "raise ValueError('uncaught on purpose')\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    if out.stdout.count("own hook: ValueError uncaught on purpose") != 1 or out.returncode != 1:
        raise SystemExit(f"the program's own excepthook did not print the uncaught exception once "
                         f"(exit {out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout.strip()


def main():
    launcher = sys.argv[1]
    print("excepthook:", users_excepthook_still_prints())
    print("excepthook:", excepthook_cases(launcher))
    print("in-process:", run_ranks(2, interrupted_op_goes_on))
    print("in-process:", run_ranks(2, waits_from_cpp_are_left_alone))
    print("axon-launch:", ends_without_its_pending_op(launcher))
    print("in-process:", run_ranks(2, program_end_names_it_to_the_peer))
    print("in-process:", run_ranks(2, interrupted_setup_is_named_to_peers))
    for stage in ("all_reduce", "new_group", "ddp"):
        ctrl_c_to_the_launcher(launcher, stage)
    print("test_interrupt: a signal handler's exception ends a rank's wait in an op and in a group's set-up; the op "
          "goes on; the set-up's peers are told; Ctrl-C to axon-launch gives each waiting rank a KeyboardInterrupt "
          "traceback, in DDP's backward after the error that ended its wait")


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        rank_body(sys.argv[2])
    elif sys.argv[1] == "--hook-case":
        hook_case_body(sys.argv[2])
    else:
        main()
