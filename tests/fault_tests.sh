#!/usr/bin/env bash
# Fault test: kill a random rank of an 8-rank stress workload at a random
# moment, KILLS times (seeded), and check each time that
#   - the launcher exits within $BOUND seconds with the dead rank's status
#     (128 + 9 for SIGKILL, 128 + 11 for SIGSEGV, 3 for exit(3));
#   - every survivor printed a PeerFailure naming the dead rank, or was still
#     running when the launcher announced SIGTERM (then it was terminated);
#   - no rank process remains, and nothing holds the job's arena.
# Prints the time from each death to the launcher's exit, then the median and
# the worst. Nothing asserts on those times beyond the generous bound.
#
#   fault_tests.sh AXON_LAUNCH STRESS_COLLECTIVES [KILLS] [SEED]
set -u
launch=$1
stress=$2
kills=${3:-20}
seed=${4:-6}
n=8
BOUND=${BOUND:-10}
work=$(mktemp -d)
launcher_pid=
cleanup() {
  [ -n "$launcher_pid" ] && kill -TERM "$launcher_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ulimit -c 0  # no core files from the SIGSEGV victims
# Under ASan a SIGSEGV would become ASan's report and exit 1.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"

fail() { echo "FAIL [kill $i]: $*" >&2; exit 1; }
now_ns() { local t=${EPOCHREALTIME/./}; echo $((10#$t * 1000)); }
# Empties the output files before a background launch: the launch's own
# redirections truncate them only once its forked shell runs, and a poll of
# the files right after the fork read the previous run's "ready" lines (the
# fault test took a still-starting job for ready, 1 run in many, under load).
clear_output() { : >"$work/out"; : >"$work/err"; }
ready_count() { local c; c=$(grep -c 'ready rank=' "$work/out" 2>/dev/null); echo "${c:-0}"; }
rank_pid() { sed -n "s/.*ready rank=$1 pid=\([0-9]*\).*/\1/p" "$work/out"; }
# A process that can still be signalled is gone only as a zombie: a read of
# its stat that came back empty took a live launcher for gone (the loop below
# gave up waiting for ready ranks after 10 ms, once in a fresh-clone run on
# a loaded machine).
process_gone() {  # gone, or a zombie nobody reaped yet
  local state=
  kill -0 "$1" 2>/dev/null || return 0
  [ -r "/proc/$1/stat" ] && read -r _ _ state _ <"/proc/$1/stat" 2>/dev/null
  [ "$state" = Z ]
}

# Waits up to $1 seconds for the launcher (our child) to end, polling every
# 10 ms (a precise end time, and no watchdog process); sets $end and $status.
await_launcher() {
  local limit=$(($(now_ns) + $1 * 1000000000))
  while ! process_gone "$launcher_pid"; do
    if [ "$(now_ns)" -gt "$limit" ]; then
      kill -TERM "$launcher_pid"
      fail "the launcher was still running $1 s later: $(tail -n 5 "$work/err")"
    fi
    sleep 0.01
  done
  end=$(now_ns)
  wait "$launcher_pid"
  status=$?
}

# Ranks not all ready: say what the launcher and every process of the job
# were doing, and how the launcher ended, if it did.
not_ready() {
  local waited_ms=$((($(now_ns) - started_ns) / 1000000)) how_ended="still running" p
  if process_gone "$launcher_pid"; then
    wait "$launcher_pid"
    how_ended="exited with status $?"
  else
    for p in $(pgrep -P "$launcher_pid"); do
      how_ended+=$'\n'"  child $p: $(cat "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1-4) wchan=$(cat "/proc/$p/wchan" 2>/dev/null)"
    done
    kill -TERM "$launcher_pid"
  fi
  fail "ranks never became ready ($(ready_count) of $n after $waited_ms ms); launcher $how_ended
stdout:
$(cat "$work/out")
stderr:
$(cat "$work/err")"
}

RANDOM=$seed
times=()
for i in $(seq 1 "$kills"); do
  victim=$((RANDOM % n))
  pick=$((RANDOM % 10))
  delay_ms=$((200 + RANDOM % 1500))
  exit_at=$((20 + RANDOM % 400))
  tag="fault-$$-$i"
  extra=()
  if [ "$pick" -lt 6 ]; then how=KILL; want=$((128 + 9)); summary="was killed by signal 9"
  elif [ "$pick" -lt 8 ]; then how=SEGV; want=$((128 + 11)); summary="was killed by signal 11"
  else how=exit3; want=3; summary="exited with code 3"
       extra=(--exit-rank "$victim" --exit-at "$exit_at" --exit-code 3)
  fi

  clear_output
  "$launch" -n $n --timeout 60 "$stress" --seed $((seed * 1000 + i)) \
      --endless --tag "$tag" "${extra[@]}" >"$work/out" 2>"$work/err" &
  launcher_pid=$!

  started_ns=$(now_ns)
  for _ in $(seq 1 600); do
    [ "$(ready_count)" -ge $n ] && break
    process_gone "$launcher_pid" && break
    sleep 0.1
  done
  if [ "$(ready_count)" -lt $n ]; then not_ready; fi
  pids=$(sed -n 's/.*ready rank=[0-9]* pid=\([0-9]*\).*/\1/p' "$work/out")
  if [ "$how" = exit3 ]; then
    await_launcher $((BOUND + 60))
    start=$(sed -n 's/.*exiting rank=[0-9]* code=3 at_ns=\([0-9]*\).*/\1/p' "$work/out")
    [ -n "$start" ] || fail "rank $victim never reached op $exit_at: $(tail -n 5 "$work/err")"
  else
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    ! process_gone "$launcher_pid" || fail "the job ended before the kill: $(tail -n 5 "$work/err")"
    start=$(now_ns)
    kill -"$how" "$(rank_pid "$victim")"
    await_launcher "$BOUND"
  fi
  ms=$(((end - start) / 1000000))
  err=$(cat "$work/err")

  [ "$status" -eq "$want" ] || fail "rank $victim ($how): expected exit status $want, got $status; stderr: $err"
  [ "$ms" -le $((BOUND * 1000)) ] || fail "rank $victim ($how): launcher exited $ms ms after the death (bound ${BOUND} s)"
  [[ "$err" == *"axon-launch: rank $victim $summary"* ]] || fail "no summary naming rank $victim: $err"
  terminated=0
  for r in $(seq 0 $((n - 1))); do
    [ "$r" -eq "$victim" ] && continue
    if ! grep -q "^\[rank $r\] stress rank $r caught PeerFailure: .*rank $victim $summary" "$work/err"; then
      [[ "$err" == *"axon-launch:"*"sending SIGTERM"* ]] || fail "rank $r did not report rank $victim's death: $err"
      terminated=$((terminated + 1))
    fi
  done
  ! grep -q "FAILED" "$work/err" || fail "a rank failed otherwise: $(grep FAILED "$work/err" | head -3)"
  for p in $pids; do process_gone "$p" || fail "rank process $p still runs"; done
  left=$(pgrep -f -- "--tag $tag( |$)" || true)
  [ -z "$left" ] || fail "processes of the job remain: $left"
  # The arena is a memfd named after the launcher's pid: nobody may hold it.
  holders=$(find /proc/[0-9]*/fd -lname "/memfd:axon-$launcher_pid-*" 2>/dev/null | head -3)
  [ -z "$holders" ] || fail "processes still hold the arena: $holders"
  ! ls /dev/shm 2>/dev/null | grep -q "^axon-$launcher_pid-" || fail "/dev/shm holds an arena of the job"
  launcher_pid=

  times+=("$ms")
  echo "kill $i: rank $victim by $how -> launcher exit $status after $ms ms (terminated survivors: $terminated)"
done

sorted=($(printf '%s\n' "${times[@]}" | sort -n))
count=${#sorted[@]}
if [ $((count % 2)) -eq 1 ]; then
  median=${sorted[$((count / 2))]}
else
  median=$(((sorted[count / 2 - 1] + sorted[count / 2]) / 2))
fi
echo "death -> launcher exit over $count kills: median $median ms, worst ${sorted[$((count - 1))]} ms"
echo "ok [fault]"
