"""examples/torch_ddp.py under axon-launch (whose MASTER_ADDR/MASTER_PORT make
the default env:// rendezvous work) ends with the parameter checksum of the
same script run alone, without a launcher, and neither it nor a job that only sets up,
all-reduces and destroys its group at n=8 logs an ERROR: the others' wait for
rank 0's store to close logged PyTorch's "[c10d] The client socket has timed
out" in most such jobs (found by a review).

    test_launch.py AXON_LAUNCH EXAMPLE N
"""
import os
import re
import subprocess
import sys


# A glog-style ERROR line from PyTorch's c10d, as a rank prints it.
C10D_ERROR = re.compile(r"^(\[rank \d+\] )?E\d{8} .*\[c10d\]", re.M)

DESTROY_ONLY = """
import torch, torch.distributed as dist, axonml_torch
dist.init_process_group("axon")
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
dist.destroy_process_group()
"""


def run_clean(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    if C10D_ERROR.search(out.stderr):
        raise SystemExit(f"{' '.join(cmd)} logged a c10d ERROR:\n{out.stderr}")
    return out


def checksum(cmd, env):
    out = run_clean(cmd, env)
    found = re.findall(r"parameter checksum (\S+)", out.stdout)
    if not found:
        raise SystemExit(f"no checksum in the output of {' '.join(cmd)}:\n{out.stdout}")
    return float(found[-1])


def main():
    launcher, example, n = sys.argv[1], sys.argv[2], sys.argv[3]
    args = ["--epochs", "2", "--steps", "4"]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    launched = checksum([launcher, "-n", n, sys.executable, example] + args, env)
    # Alone: no launcher, no RANK, WORLD_SIZE or MASTER_* (a review found
    # it ending in PyTorch's "environment variable RANK expected").
    alone = checksum([sys.executable, example] + args, env)
    if abs(launched - alone) > 1e-4 * max(1.0, abs(alone)):
        raise SystemExit(f"checksum under axon-launch -n {n}: {launched}, alone: {alone}")
    print(f"test_launch: axon-launch -n {n} and one process both end with checksum {alone:.6f}")
    for _ in range(3):
        run_clean([launcher, "-n", "8", sys.executable, "-c", DESTROY_ONLY], env)
    print("test_launch: three jobs of 8 ranks that destroy their group logged no c10d ERROR")


if __name__ == "__main__":
    main()
