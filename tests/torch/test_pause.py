"""Ctrl-Z stops a PyTorch job with axon-launch, and the time stopped counts
towards no timeout: neither an op's (AXON_TIMEOUT, --timeout) nor a group's
set-up (init_process_group's timeout, which new_group inherits). Found by
reviews: the set-up's wait counted the pause, and a 6 s pause failed a
new_group(timeout=4 s) at resume.

    test_pause.py AXON_LAUNCH   (runs itself under axon-launch -n 2)
"""
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time


def rank_body(go):
    import torch
    import torch.distributed as dist
    import axonml_torch  # noqa: F401

    dist.init_process_group("axon", timeout=datetime.timedelta(seconds=4))
    rank = dist.get_rank()
    dist.barrier()
    print(f"ready pid={os.getpid()}", flush=True)
    if rank == 1:
        while not os.path.exists(go):  # rank 0 waits meanwhile, in the set-up
            time.sleep(0.01)
    pair = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=4))
    if rank == 0:
        while not os.path.exists(go + ".2"):  # rank 1 waits meanwhile, in the all_reduce
            time.sleep(0.01)
    t = torch.ones(4)
    dist.all_reduce(t, group=pair)
    assert t.tolist() == [2.0] * 4, t
    print(f"met rank={rank}", flush=True)
    dist.destroy_process_group()


def pause(launcher_pid, seconds):
    os.kill(launcher_pid, signal.SIGTSTP)
    time.sleep(seconds)
    os.kill(launcher_pid, signal.SIGCONT)


def main():
    launcher = sys.argv[1]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    with tempfile.TemporaryDirectory() as work:
        go = os.path.join(work, "go")
        out_path = os.path.join(work, "out")
        with open(out_path, "w") as out:
            job = subprocess.Popen([launcher, "-n", "2", "--timeout", "4", sys.executable, __file__, "--rank", go],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 120
            while open(out_path).read().count("ready pid=") < 2:
                assert job.poll() is None and time.monotonic() < deadline, open(out_path).read()
                time.sleep(0.05)
            time.sleep(1)  # rank 0 is in new_group's set-up, waiting for rank 1
            pause(job.pid, 6)  # longer than the set-up's 4 s
            time.sleep(0.5)
            open(go, "w").close()
            time.sleep(1)  # rank 1 is in the all_reduce, waiting for rank 0
            pause(job.pid, 6)  # longer than AXON_TIMEOUT's 4 s
            time.sleep(0.5)
            open(go + ".2", "w").close()
            status = job.wait(timeout=120)
        text = open(out_path).read()
    if status != 0 or text.count("met rank=") != 2:
        raise SystemExit(f"a job paused twice for 6 s exited {status}:\n{text}")
    print("test_pause: a PyTorch job stopped twice for 6 s (in a group's set-up, then in an all_reduce) "
          "under 4 s timeouts ended 0")


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        rank_body(sys.argv[2])
    else:
        main()
