#!/usr/bin/env bash
# train under axon-launch --max-restarts 1, with rank 1 killed (SIGKILL) in
# epoch 2 of 3 in the first attempt, ends with the parameters of an
# undisturbed run: the second attempt resumes from the epoch-1 checkpoint.
#
#   train_restart.sh AXON_LAUNCH TRAIN COMPARE_PARAMS
set -u
launch=$1
train=$2
compare=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL [train restart]: $*" >&2; exit 1; }
args=(--epochs 3 --samples 16384 --sync sync)

"$launch" -n 4 "$train" "${args[@]}" --checksum-file "$work/undisturbed.txt" >"$work/out0" 2>&1 ||
  fail "the undisturbed run failed: $(tail -5 "$work/out0")"

# Rank 1 of the first attempt kills itself (SIGKILL) halfway through epoch 2,
# after rank 0's checkpoint of epoch 1. (A watcher that killed it once the
# checkpoint appeared was starved on a loaded machine until epoch 2 had
# ended: the run resumed after epoch 2 in a full-suite run beside load.)
# A link where the checkpoint's temporary file used to go (PATH.tmp): the
# write must never follow it into another file (found by a review).
echo "precious" >"$work/precious"
ln -s "$work/precious" "$work/ckpt.tmp"
"$launch" -n 4 --max-restarts 1 "$train" "${args[@]}" --die-in-epoch 2 --die-rank 1 \
  --checkpoint "$work/ckpt" --checksum-file "$work/restarted.txt" >"$work/out" 2>"$work/err"
status=$?
out=$(cat "$work/out")
err=$(cat "$work/err")
[ "$status" -eq 0 ] || fail "expected exit status 0, got $status: $err"
[[ "$err" == *"axon-launch: attempt 1 of 2: rank 1 was killed by signal 9 (SIGKILL)"*"restarting every rank with AXON_RESTART_COUNT=1"* ]] ||
  fail "the first attempt did not fail by the kill: $err"
[[ "$err" == *"axon-launch: attempt 2 of 2: every rank exited 0"* ]] || fail "no line for the second attempt: $err"
[[ "$out" == *"[rank 0] train: resuming from $work/ckpt after epoch 1"* ]] ||
  fail "the second attempt did not resume after epoch 1: $out"
[[ "$out" != *"resuming"*"resuming"* ]] || fail "resumed twice: $out"
[ "$(cat "$work/precious")" = precious ] || fail "the checkpoint was written through the link at $work/ckpt.tmp"
left=$(cd "$work" && ls ckpt.* 2>/dev/null | grep -v '^ckpt\.tmp$')
[ -z "$left" ] || fail "a temporary checkpoint was left behind: $left"
"$compare" "$work/restarted.txt" "$work/undisturbed.txt" 1e-5 ||
  fail "the restarted run's parameters differ from the undisturbed run's"
echo "ok [train restart]"
