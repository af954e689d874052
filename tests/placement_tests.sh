#!/usr/bin/env bash
# axon-launch --bind tests: run one case by name.
#   placement_tests.sh CASE AXON_LAUNCH AFFINITY_PROBE
# The probe prints each rank's own sched_getaffinity mask; the cases compare
# it with what `axon-launch --verbose` printed and with the launcher's own
# allowed CPUs (which `taskset` narrows). HWLOC_SYNTHETIC (hwloc's own
# variable) gives the launcher a made-up topology, e.g. two NUMA nodes of one
# core each, so the NUMA cases run on any machine with two CPUs.
set -u
case_name=$1
launch=$2
probe=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }

# Runs the launcher; sets $status, $out (stdout), $err (stderr).
run() {
  "$@" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
}
expect_status() {
  [ "$status" -eq "$1" ] || fail "expected exit status $1, got $status; stdout: $out; stderr: $err"
}
# The CPUs rank $1 reported for itself.
probe_cpus() { sed -n "s/.*affinity rank=$1 cpus=\([^ ]*\) .*/\1/p" "$work/out"; }
probe_field() { sed -n "s/.*affinity rank=$1 .*$2=\([^ ]*\).*/\1/p" "$work/out"; }
# The CPUs --verbose said rank $1 gets.
planned_cpus() { sed -n "s/.*rank $1 -> cpus \([^ ]*\) .*/\1/p" "$work/err"; }
planned_node() { sed -n "s/.*rank $1 -> cpus .* -> NUMA node \([^ ]*\) .*/\1/p" "$work/err"; }
# A CPU list ("0-2,5" or "0,1,2,5") as one number per word: "0 1 2 5".
expand() {
  local part out=""
  for part in ${1//,/ }; do
    if [[ $part == *-* ]]; then out="$out $(seq -s ' ' "${part%-*}" "${part#*-}")"; else out="$out $part"; fi
  done
  echo $out
}
# The CPUs this shell may use, expanded.
own_cpus() { expand "$(taskset -cp $$ | sed 's/.*: //')"; }
# The NUMA nodes this shell may place memory on, as "0 1 ...".
allowed_nodes() { expand "$(sed -n 's/^Mems_allowed_list:[[:space:]]*//p' /proc/self/status)"; }
cpu_count() { nproc; }

case "$case_name" in
  printed-placement-is-applied)
    # Every rank runs exactly on the CPUs --verbose printed for it, and no two share one.
    n=$(cpu_count)
    run "$launch" -n "$n" --bind core --verbose "$probe"
    expect_status 0
    echo "$err" | grep -q "placement --bind core: $n ranks" || fail "no placement header in: $err"
    seen=""
    for ((r = 0; r < n; r++)); do
      planned=$(planned_cpus $r); got=$(probe_cpus $r)
      [ -n "$planned" ] || fail "--verbose printed no cpus for rank $r: $err"
      [ "$planned" = "$got" ] || fail "rank $r: planned cpus $planned, runs on $got"
      case ",$seen," in *",$got,"*) fail "rank $r shares cpus $got with another rank";; esac
      [ "$(probe_field $r over)" = 0 ] || fail "rank $r has its own core but AXON_OVERSUBSCRIBED=$(probe_field $r over)"
      seen="$seen,$got"
      [ -n "$(planned_node $r)" ] || fail "--verbose printed no NUMA node for rank $r: $err"
    done
    ;;
  default-binds-cores)
    # Without --bind, ranks that fit the cores are bound one block each.
    run "$launch" -n 2 --verbose "$probe"
    expect_status 0
    if [ "$(cpu_count)" -ge 2 ]; then
      echo "$err" | grep -q "placement --bind core" || fail "default was not core on $(cpu_count) cpus: $err"
      [ "$(probe_cpus 0)" != "$(probe_cpus 1)" ] || fail "both ranks run on $(probe_cpus 0)"
      [ "$(probe_cpus 0)" = "$(planned_cpus 0)" ] || fail "rank 0 runs on $(probe_cpus 0), planned $(planned_cpus 0)"
    fi
    ;;
  cpuset-smaller-than-ranks-falls-back)
    # taskset leaves the launcher one CPU: --bind core cannot give 2 ranks a
    # core each, so it warns once and binds nothing (each rank keeps CPU 0).
    first=$(own_cpus | cut -d' ' -f1)
    run taskset -c "$first" "$launch" -n 2 --bind core "$probe"
    expect_status 0
    [ "$(echo "$err" | grep -c 'warning: 2 ranks but only 1 usable core')" -eq 1 ] ||
      fail "expected one fallback warning, got: $err"
    echo "$err" | grep -q -- "--bind none" || fail "the warning does not say what it does instead: $err"
    for r in 0 1; do
      [ "$(probe_cpus $r)" = "$first" ] || fail "rank $r runs on $(probe_cpus $r), expected the cpuset $first"
      [ "$(probe_field $r over)" = 1 ] || fail "rank $r: AXON_OVERSUBSCRIBED=$(probe_field $r over), expected 1"
      [ "$(probe_field $r node)" = unset ] || fail "rank $r: AXON_NUMA_NODE set for an unbound rank"
    done
    # The default falls back the same way, with the same warning.
    run taskset -c "$first" "$launch" -n 2 "$probe"
    expect_status 0
    echo "$err" | grep -q 'warning: 2 ranks but only 1 usable core' || fail "default did not warn: $err"
    ;;
  bind-none-leaves-affinity)
    mine=$(own_cpus)
    run "$launch" -n 2 --bind none --verbose "$probe"
    expect_status 0
    [ -z "$(echo "$err" | grep warning)" ] || fail "unexpected warning: $err"
    echo "$err" | grep -q "rank 1 -> cpus .* (not bound)" || fail "--verbose did not say 'not bound': $err"
    for r in 0 1; do
      [ "$(expand "$(probe_cpus $r)")" = "$mine" ] || fail "rank $r runs on $(probe_cpus $r), expected the inherited $mine"
    done
    ;;
  numa-binds-whole-nodes)
    # A made-up machine of two NUMA nodes with one core each: --bind numa puts
    # rank 0 on node 0 (cpu 0) and rank 1 on node 1 (cpu 1); 4 ranks share them in blocks.
    [ "$(cpu_count)" -ge 2 ] || { echo "skipped: needs two cpus"; exit 0; }
    run taskset -c 0,1 env HWLOC_SYNTHETIC="node:2 core:1 pu:1" "$launch" -n 4 --bind numa --verbose "$probe"
    expect_status 0
    for r in 0 1 2 3; do
      want_node=$((r / 2))
      [ "$(planned_node $r)" = "$want_node" ] || fail "rank $r planned on node $(planned_node $r), expected $want_node: $err"
      [ "$(probe_cpus $r)" = "$want_node" ] || fail "rank $r runs on cpus $(probe_cpus $r), expected $want_node"
      # Its arena pages would go to that node, but a made-up node is not
      # one this machine lets a process place memory on (the rank would
      # refuse it): nothing is exported. Two ranks share each one-core node.
      want_export=unset
      case " $(allowed_nodes) " in *" $want_node "*) want_export=$want_node ;; esac
      [ "$(probe_field $r node)" = "$want_export" ] || fail "rank $r: AXON_NUMA_NODE=$(probe_field $r node), expected $want_export"
      [ "$(probe_field $r over)" = 1 ] || fail "rank $r: AXON_OVERSUBSCRIBED=$(probe_field $r over), expected 1"
    done
    # On the real machine, a rank bound within one node has that node exported.
    first_node=$(allowed_nodes | cut -d' ' -f1)
    run "$launch" -n 1 --bind numa --verbose "$probe"
    expect_status 0
    if [ "$(planned_node 0)" = "$first_node" ]; then
      [ "$(probe_field 0 node)" = "$first_node" ] || fail "rank 0 bound to node $first_node: AXON_NUMA_NODE=$(probe_field 0 node)"
    fi
    ;;
  threads-share)
    # Each rank's thread share is the cores it is bound to, and fair_share() follows it.
    run "$launch" -n 1 --bind core "$probe"
    expect_status 0
    n=$(cpu_count)
    [ "$(probe_field 0 threads)" = "$n" ] || fail "1 rank on $n cores: AXON_THREADS_PER_RANK=$(probe_field 0 threads)"
    [ "$(probe_field 0 omp)" = "$n" ] || fail "1 rank on $n cores: OMP_NUM_THREADS=$(probe_field 0 omp)"
    [ "$(probe_field 0 share)" = "$n" ] || fail "fair_share() = $(probe_field 0 share), expected $n"
    first=$(own_cpus | cut -d' ' -f1)
    run taskset -c "$first" "$launch" -n 2 "$probe"
    expect_status 0
    for r in 0 1; do
      [ "$(probe_field $r share)" = 1 ] || fail "2 ranks on 1 cpu: rank $r fair_share() = $(probe_field $r share)"
    done
    ;;
  user-omp-wins)
    OMP_NUM_THREADS=7 AXON_THREADS_PER_RANK=5 run "$launch" -n 2 "$probe"
    expect_status 0
    for r in 0 1; do
      [ "$(probe_field $r omp)" = 7 ] || fail "rank $r: OMP_NUM_THREADS=$(probe_field $r omp), the user set 7"
      [ "$(probe_field $r threads)" = 5 ] || fail "rank $r: AXON_THREADS_PER_RANK=$(probe_field $r threads), the user set 5"
      [ "$(probe_field $r share)" = 5 ] || fail "rank $r: fair_share() = $(probe_field $r share), expected 5"
    done
    ;;
  bad-bind-value)
    for value in socket CORE 1; do
      run "$launch" -n 2 --bind "$value" "$probe"
      expect_status 2
      echo "$err" | grep -q -- "--bind $value is not one of none, core, numa" || fail "unclear message for --bind '$value': $err"
    done
    run "$launch" -n 2 --bind "" "$probe"
    expect_status 2
    echo "$err" | grep -q -- "--bind: an empty value is not allowed" || fail "unclear message for --bind '': $err"
    AXON_THREADS_PER_RANK=many run "$launch" -n 1 "$probe"
    [ "$status" -ne 0 ] || fail "AXON_THREADS_PER_RANK=many was accepted"
    echo "$out$err" | grep -q "AXON_THREADS_PER_RANK=many" || fail "the error does not name AXON_THREADS_PER_RANK=many: $out $err"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "ok [$case_name]"
