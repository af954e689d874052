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

source "$(dirname "$0")/support/memory_cgroup.sh"
memory_cgroup axon-limit-test $((64 << 20))
dir=$cgroup_dir

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
