"""Runs an `mpi_promises exit-with-static-world` job and sums up its verdicts.

    count_static_world_verdicts.py COMMAND...

Each rank's detached thread prints "[rank R] the static World's thread's loop
ended with: ..." and its verdict as its process exits, after the job's last
tally could, so the verdicts are counted here. The job's output goes to
stderr; the last line on stdout is

    threads of a static World that ended as promised: N, job exit status S,
    groups kept under a call: G

(one line). N counts the threads whose verdict says "ended as promised", and
also each rank whose thread printed nothing because it was between calls as
its exit began: README promises such a thread nothing but its next call (its
process ends meanwhile, status 0), and its peers' errors name that exit
("rank R exited (status 0) while ..."). Such a rank counts only when a peer
thread's error names it so and it warned of no call in flight at its exit
(else the exit saw a call, and the thread had to say how it ended). Found by
a loaded ASan run (static_world_between_calls.txt, its output): 1 job in 30
beside three busy loops had one such rank, and every peer's thread then
failed its verdict.
"""
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: count_static_world_verdicts.py COMMAND...")
    done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = done.stdout
    sys.stderr.write(out)
    promised = len(re.findall(r"ended as promised", out))
    said = set(int(r) for r in re.findall(r"\[rank (\d+)\] the static World's thread's loop ended with", out))
    warned = set(int(r) for r in re.findall(r"\[rank (\d+)\] [0-9:.]+ warning: \S+: exiting while a call", out))
    errors = "\n".join(line for line in out.splitlines() if "the static World's thread's loop ended with" in line)
    named_as_exited = set(int(r) for r in re.findall(r"rank (\d+) exited \(status 0\) while", errors))
    between_calls = sorted(named_as_exited - said - warned)
    kept = len(re.findall(r"destroyed while another thread is inside a call on it: kept, not freed", out))
    if between_calls:
        sys.stderr.write(f"count_static_world_verdicts: rank(s) {', '.join(map(str, between_calls))} exited "
                         f"with their thread between calls (no verdict, no warning; named by a peer)\n")
    print(f"threads of a static World that ended as promised: {promised + len(between_calls)}, "
          f"job exit status {done.returncode}, groups kept under a call: {kept}")


if __name__ == "__main__":
    main()
