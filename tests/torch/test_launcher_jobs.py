"""PyTorch jobs with DataLoader workers under axon-launch, as a training
job runs them, when they fail or are signalled (a review found both):

- under the "file_system" sharing strategy (the usual cure for "too many
  open files"), a job whose rank raised, was SIGKILLed or was interrupted
  left the torch_* files of its batches in /dev/shm: the launcher stopped
  what the ranks left running, torch_shm_manager (a daemon in a session of
  its own) with the rest, before it had unlinked them;
- SIGTERM to axon-launch (a scheduler's preemption) reached each rank's
  whole process group, so its DataLoader workers died while the rank's
  SIGTERM handler saved a checkpoint, and the job failed.

    test_launcher_jobs.py AXON_LAUNCH
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

STEPS_BEFORE_FAILURE = 5


def rank_body(mode, work):
    import torch
    import torch.distributed as dist
    import torch.multiprocessing
    from torch.utils.data import DataLoader, Dataset
    import axonml_torch  # noqa: F401

    torch.multiprocessing.set_sharing_strategy("file_system")

    def note_pid(_worker_id):
        open(os.path.join(work, f"pid.{os.getpid()}"), "w").close()

    class Images(Dataset):
        def __len__(self):
            return 100000

        def __getitem__(self, i):
            return torch.randn(3, 64, 64)

    note_pid(None)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    dist.init_process_group("axon")
    rank = dist.get_rank()
    model = torch.nn.Linear(3 * 64 * 64, 1)
    for step, batch in enumerate(DataLoader(Images(), batch_size=64, num_workers=2, worker_init_fn=note_pid)):
        loss = model(batch.flatten(1)).sum()
        loss.backward()
        flag = torch.tensor([1.0 if stop else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:  # preempted: save, meet, leave
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(work, "checkpoint.pt"))
            dist.barrier()
            print(f"stopped at step {step}", flush=True)
            break
        if step == 1:
            print("training", flush=True)
        if step == STEPS_BEFORE_FAILURE and rank == 1:
            if mode == "raise":
                raise ValueError("rank 1 fails on purpose")
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()


def torch_files_of(work):
    """The /dev/shm files PyTorch made for the job's processes (named
    /torch_<pid>_...): the ranks' and their workers' pids are in `work`."""
    pids = {name.split(".")[1] for name in os.listdir(work) if name.startswith("pid.")}
    return sorted(name for name in os.listdir("/dev/shm")
                  if name.startswith("torch_") and name.split("_")[1] in pids)


def launch(launcher, mode, work):
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    return subprocess.Popen([launcher, "-n", "2", "--timeout", "60", sys.executable, __file__, "--rank", mode, work],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_job(launcher, mode, signal_when_training=None):
    """Runs the job; sends the launcher a signal once both ranks train.
    Returns (exit status, stdout, stderr, torch files left)."""
    with tempfile.TemporaryDirectory() as work:
        job = launch(launcher, mode, work)
        errors = []
        reader = threading.Thread(target=lambda: errors.append(job.stderr.read()))
        reader.start()
        out = []
        for line in job.stdout:
            out.append(line)
            if signal_when_training and sum("training" in l for l in out) == 2:
                job.send_signal(signal_when_training)
                signal_when_training = None
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            raise SystemExit(f"{mode}: axon-launch did not end:\n{''.join(out)}")
        reader.join()
        return job.returncode, "".join(out), errors[0], torch_files_of(work), os.path.exists(
            os.path.join(work, "checkpoint.pt"))


def main():
    launcher = sys.argv[1]
    for mode, sig, status in (("raise", None, 1), ("kill", None, 128 + signal.SIGKILL),
                              ("train", signal.SIGINT, None)):
        started = time.monotonic()
        returncode, out, err, left, _ = run_job(launcher, mode, sig)
        if (status is not None and returncode != status) or returncode == 0:
            raise SystemExit(f"{mode}: axon-launch exited {returncode}, not {status}:\n{out}{err}")
        if left:
            raise SystemExit(f"{mode}: the job left {len(left)} torch_* files in /dev/shm: {left[:4]}\n{err}")
        print(f"test_launcher_jobs: {mode}: exit status {returncode} after "
              f"{time.monotonic() - started:.1f} s, no torch_* file of the job left in /dev/shm")
    returncode, out, err, left, saved = run_job(launcher, "train", signal.SIGTERM)
    if returncode != 0 or out.count("stopped at step") != 2 or not saved or left:
        raise SystemExit(f"SIGTERM: a preempted job did not stop cleanly (exit status {returncode}, "
                         f"checkpoint saved: {saved}, files left: {left[:4]}):\n{out}{err}")
    print("test_launcher_jobs: SIGTERM to axon-launch: each rank's handler saved, met its peer and exited 0; "
          "its DataLoader workers lived on")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_body(sys.argv[2], sys.argv[3])
    else:
        main()
