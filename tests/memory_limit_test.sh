#!/usr/bin/env bash
# axon-launch under a cgroup memory limit smaller than the arena it is asked
# for fails at once, naming the sizes, instead of being OOM-killed without a
# word (a review: under cgroup v1 only v2's memory.max was read).
#
#   memory_limit_test.sh AXON_LAUNCH
#
# Makes a child of this process's memory cgroup (v1 memory.limit_in_bytes,
# or v2 memory.max) with a 64 MiB limit; exits 77 (skipped) where it cannot.
set -uo pipefail
launch=$1

v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
v2=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup | head -1)
dir="" limit_file=""
if [[ -n $v1 && -w /sys/fs/cgroup/memory${v1%/}/ ]]; then
  dir=/sys/fs/cgroup/memory${v1%/}/axon-limit-test-$$ limit_file=memory.limit_in_bytes
elif [[ -n $v2 && -f /sys/fs/cgroup/cgroup.controllers && -w /sys/fs/cgroup${v2%/}/ ]]; then
  dir=/sys/fs/cgroup${v2%/}/axon-limit-test-$$ limit_file=memory.max
fi
if [[ -z $dir ]] || ! mkdir "$dir" 2>/dev/null; then
  echo "skipped: cannot make a memory cgroup here"
  exit 77
fi
trap 'rmdir "$dir" 2>/dev/null' EXIT
if ! echo $((64 << 20)) >"$dir/$limit_file" 2>/dev/null; then
  echo "skipped: cannot set $dir/$limit_file"
  exit 77
fi

# A child shell moves itself into the cgroup, then runs the launcher there.
out=$(timeout 60 bash -c 'echo $$ >"$1/cgroup.procs" && exec "$2" -n 2 --arena-mb 200 /bin/true' _ "$dir" "$launch" 2>&1)
status=$?
echo "$out"
[[ $status -eq 1 ]] || { echo "FAIL: exit status $status, expected 1"; exit 1; }
[[ $out == *"axon-launch: cannot reserve 200 MiB of shared memory for the arena (not enough memory; "*" MiB of memory available)"* ]] ||
  { echo "FAIL: no message naming the sizes"; exit 1; }
# Within the limit it runs.
out=$(timeout 60 bash -c 'echo $$ >"$1/cgroup.procs" && exec "$2" -n 2 --arena-mb 16 /bin/true' _ "$dir" "$launch" 2>&1)
status=$?
[[ $status -eq 0 ]] || { echo "FAIL: a 16 MiB arena under a 64 MiB limit: exit status $status: $out"; exit 1; }
echo "PASS"
