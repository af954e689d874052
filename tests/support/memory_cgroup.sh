# Sourced by the tests that run axon-launch under a memory limit.
#
#   memory_cgroup NAME BYTES
#
# Makes NAME-PID, a child of this process's memory cgroup (v1
# memory.limit_in_bytes, or v2 memory.max), limited to BYTES; sets
# cgroup_dir to it and removes it at exit (a caller that traps EXIT itself
# must rmdir it too). Exits 77 (ctest: skipped) where it cannot.
memory_cgroup() {
  local v1 v2 limit_file=""
  v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
  v2=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup | head -1)
  cgroup_dir=""
  if [[ -n $v1 && -w /sys/fs/cgroup/memory${v1%/}/ ]]; then
    cgroup_dir=/sys/fs/cgroup/memory${v1%/}/$1-$$ limit_file=memory.limit_in_bytes
  elif [[ -n $v2 && -f /sys/fs/cgroup/cgroup.controllers && -w /sys/fs/cgroup${v2%/}/ ]]; then
    cgroup_dir=/sys/fs/cgroup${v2%/}/$1-$$ limit_file=memory.max
  fi
  if [[ -z $cgroup_dir ]] || ! mkdir "$cgroup_dir" 2>/dev/null; then
    echo "skipped: cannot make a memory cgroup here"
    exit 77
  fi
  trap 'rmdir "$cgroup_dir" 2>/dev/null' EXIT
  if ! echo "$2" >"$cgroup_dir/$limit_file" 2>/dev/null; then
    echo "skipped: cannot set $cgroup_dir/$limit_file"
    exit 77
  fi
}
