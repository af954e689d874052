#!/usr/bin/env bash
# Launcher behaviour tests: run one case by name.
#   launcher_tests.sh CASE AXON_LAUNCH LAUNCHER_PROBE
# Each case prints what it checks and exits non-zero with a message on the
# first thing that is wrong. Waits are bounded but generous (a loaded 2-core
# machine); nothing asserts on timing.
set -u
case_name=$1
launch=$2
probe=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }

# Runs the launcher in the foreground; sets $status, $out, $err.
run() {
  "$launch" "$@" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
}

expect_status() {
  [ "$status" -eq "$1" ] || fail "expected exit status $1, got $status; stdout: $out; stderr: $err"
}

# No /dev/shm object of the launcher with pid $1 is left.
expect_no_arena_of() {
  local left
  left=$(ls /dev/shm 2>/dev/null | grep "^axon-$1-" || true)
  [ -z "$left" ] || fail "/dev/shm still holds $left after launcher $1 ended"
}

# Polls `$@` every 0.1 s for up to $limit seconds (default 60).
wait_for() {
  local limit=${limit:-60} i=0
  while ! "$@"; do
    i=$((i + 1))
    [ "$i" -lt $((limit * 10)) ] || return 1
    sleep 0.1
  done
}

process_gone() {  # a pid that no longer runs (gone, or a zombie nobody reaped yet)
  [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

ready_count() { grep -c 'ready pid=' "$work/out" 2>/dev/null || echo 0; }
have_ready() { [ "$(ready_count)" -ge "$1" ]; }
arena_gone() { ! ls /dev/shm 2>/dev/null | grep -q "^axon-$1-"; }
launcher_done() { ! kill -0 "$1" 2>/dev/null; }
rank_pids() { sed -n 's/.*ready pid=\([0-9]*\).*/\1/p' "$work/out"; }

case "$case_name" in
  bad-arguments)
    for args in "-n 0 $probe ok" "-n 100000 $probe ok" "-n 2 --bogus $probe ok" "-n 2" \
                "-n two $probe ok" "$probe ok" "-n 2 --timeout -1 $probe ok"; do
      # shellcheck disable=SC2086
      run $args
      expect_status 2
      [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "'$args': expected one stderr line, got: $err"
      [[ "$err" == axon-launch:* ]] || fail "'$args': message does not name axon-launch: $err"
    done
    run -n 256 --help
    expect_status 0
    [[ "$out" == *Usage* ]] || fail "--help prints no usage: $out"
    ;;
  missing-program)
    run -n 2 "$work/no-such-program"
    expect_status 127
    [[ "$err" == *"cannot run"*no-such-program* ]] || fail "unclear message: $err"
    touch "$work/not-executable"
    run -n 2 "$work/not-executable"
    expect_status 127
    [[ "$err" == *"not executable"* ]] || fail "unclear message: $err"
    run -n 2 no-such-program-in-path-axon
    expect_status 127
    ;;
  arena-too-large)
    # More than /dev/shm holds: refused up front with the sizes, never SIGBUS.
    free_mb=$(df -m --output=avail /dev/shm | tail -1 | tr -d ' ')
    run -n 2 --arena-mb $((free_mb * 2 + 1024)) "$probe" ok
    expect_status 1
    [[ "$err" == *"cannot reserve"*MiB*free*--arena-mb* ]] || fail "message does not name the sizes: $err"
    run -n 8 --arena-mb 1 "$probe" ok
    expect_status 2
    [[ "$err" == *"too small for 8 ranks"*--arena-mb* ]] || fail "unclear message: $err"
    ;;
  success)
    "$launch" -n 3 "$probe" ok >"$work/out" 2>"$work/err" &
    pid=$!
    wait "$pid"
    status=$?
    err=$(cat "$work/err")
    expect_status 0
    expect_no_arena_of "$pid"
    ;;
  exit-code)
    run -n 3 "$probe" exit 1 3
    expect_status 3
    [[ "$err" == *"rank 1 exited with code 3"* ]] || fail "no summary naming rank 1: $err"
    ;;
  signal-status)
    run -n 3 "$probe" raise 2 10   # SIGUSR1
    expect_status $((128 + 10))
    [[ "$err" == *"rank 2 was killed by signal 10"* ]] || fail "no summary naming rank 2: $err"
    ;;
  output-lines)
    run -n 4 "$probe" lines 200
    expect_status 0
    bad=$(grep -Ev '^\[rank ([0-3])\] (out-\1-[0-9]+-end|tail-\1)$' "$work/out" | head -3)
    [ -z "$bad" ] || fail "stdout lines not whole or not prefixed: $bad"
    bad=$(grep -Ev '^\[rank ([0-3])\] err-\1-[0-9]+-end$' "$work/err" | head -3)
    [ -z "$bad" ] || fail "stderr lines not whole or not prefixed: $bad"
    [ "$(wc -l <"$work/out")" -eq $((4 * 201)) ] || fail "expected 804 stdout lines, got $(wc -l <"$work/out")"
    [ "$(wc -l <"$work/err")" -eq $((4 * 200)) ] || fail "expected 800 stderr lines"
    run -n 2 --no-tag-output "$probe" lines 3
    expect_status 0
    # Raw output: the ranks' bytes as written, unprefixed (and so free to mix mid-line).
    [ "$(grep -o -- '-end' "$work/out" | wc -l)" -eq 6 ] || fail "--no-tag-output lost lines: $out"
    [ "$(grep -o 'tail-[01]' "$work/out" | wc -l)" -eq 2 ] || fail "--no-tag-output lost the tails: $out"
    ! grep -q '\[rank' "$work/out" || fail "--no-tag-output still prefixes: $out"
    ;;
  rank-killed)
    # One rank dies by kill -9 while every rank waits in a recv: the others
    # fail with PeerFailure naming it, the launcher exits 137, nothing remains.
    "$launch" -n 4 --timeout 120 "$probe" wait >"$work/out" 2>"$work/err" &
    pid=$!
    wait_for have_ready 4 || fail "ranks never became ready: $(cat "$work/out" "$work/err")"
    victim=$(grep 'rank 2\] ready' "$work/out" | sed 's/.*pid=//')
    pids=$(rank_pids)
    start=$(date +%s.%N)
    kill -9 "$victim"
    limit=60 wait_for launcher_done "$pid" || { kill -9 "$pid"; fail "launcher still running 60 s after a rank died"; }
    end=$(date +%s.%N)
    wait "$pid"
    status=$?
    err=$(cat "$work/err")
    expect_status 137
    for r in 0 1 3; do
      grep -q "^\[rank $r\] probe rank $r caught PeerFailure: .*rank 2 was killed by signal 9" "$work/err" ||
        fail "rank $r did not report rank 2's death: $err"
    done
    [[ "$err" == *"axon-launch: rank 2 was killed by signal 9"* ]] || fail "no summary line: $err"
    expect_no_arena_of "$pid"
    for p in $pids; do process_gone "$p" || fail "rank process $p still runs"; done
    echo "rank kill -9 -> launcher exit: $(echo "$end - $start" | bc) s"
    ;;
  launcher-killed)
    # kill -9 of the launcher: every rank dies with it (PDEATHSIG), and the
    # arena's name was already gone once all ranks attached.
    "$launch" -n 4 --timeout 120 "$probe" wait >"$work/out" 2>"$work/err" &
    pid=$!
    wait_for have_ready 4 || fail "ranks never became ready: $(cat "$work/out" "$work/err")"
    limit=30 wait_for arena_gone "$pid" || fail "arena name still in /dev/shm after every rank attached"
    pids=$(rank_pids)
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    for p in $pids; do
      limit=30 wait_for process_gone "$p" || fail "rank process $p outlived the launcher"
    done
    expect_no_arena_of "$pid"
    ;;
  interrupt)
    # SIGINT to the launcher reaches every rank.
    "$launch" -n 3 --timeout 120 "$probe" wait >"$work/out" 2>"$work/err" &
    pid=$!
    wait_for have_ready 3 || fail "ranks never became ready"
    kill -INT "$pid"
    limit=60 wait_for launcher_done "$pid" || { kill -9 "$pid"; fail "launcher ignored SIGINT"; }
    wait "$pid"
    status=$?
    err=$(cat "$work/err")
    expect_status $((128 + 2))
    expect_no_arena_of "$pid"
    ;;
  early-exit)
    # A rank that exits 0 without calling World::init() while the others
    # wait for it: a clear error at once, not a wait until --timeout.
    start=$(date +%s)
    run -n 4 --timeout 120 "$probe" early 2 0
    expect_status 1
    [ $(($(date +%s) - start)) -lt 60 ] || fail "took until the timeout: $err"
    [[ "$err" == *"axon-launch: rank 2 exited (status 0) before joining the job (did it call World::init()?)"* ]] ||
      fail "no summary naming rank 2: $err"
    for r in 0 1 3; do
      grep -q "^\[rank $r\] probe rank $r caught PeerFailure: .*rank 2 exited (status 0) before joining" "$work/err" ||
        fail "rank $r did not report rank 2: $err"
    done
    # Non-zero before joining: its own status, and the same hint of when.
    run -n 3 --timeout 120 "$probe" early 0 3
    expect_status 3
    [[ "$err" == *"axon-launch: rank 0 exited with code 3 before joining the job"* ]] || fail "unclear summary: $err"
    ;;
  leave-early)
    # A rank that exits 0 after its last collective while the others still
    # run is a normal ending.
    run -n 4 --timeout 120 "$probe" leave 1
    expect_status 0
    [ -z "$err" ] || fail "unexpected stderr: $err"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "ok [$case_name]"
