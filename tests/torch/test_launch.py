"""examples/torch_ddp.py under axon-launch (whose MASTER_ADDR/MASTER_PORT make
the default env:// rendezvous work) ends with the parameter checksum of the
same script run as one process.

    test_launch.py AXON_LAUNCH EXAMPLE N
"""
import os
import re
import subprocess
import sys


def checksum(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    found = re.findall(r"parameter checksum (\S+)", out.stdout)
    if not found:
        raise SystemExit(f"no checksum in the output of {' '.join(cmd)}:\n{out.stdout}")
    return float(found[-1])


def main():
    launcher, example, n = sys.argv[1], sys.argv[2], sys.argv[3]
    args = ["--epochs", "2", "--steps", "4"]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    launched = checksum([launcher, "-n", n, sys.executable, example] + args, env)
    alone = checksum([sys.executable, example] + args,
                     dict(env, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())))
    if abs(launched - alone) > 1e-4 * max(1.0, abs(alone)):
        raise SystemExit(f"checksum under axon-launch -n {n}: {launched}, alone: {alone}")
    print(f"test_launch: axon-launch -n {n} and one process both end with checksum {alone:.6f}")


def free_port():
    from harness import free_port as port
    return port()


if __name__ == "__main__":
    main()
