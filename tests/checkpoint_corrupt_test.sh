#!/usr/bin/env bash
# examples/train --checkpoint refuses a damaged or wrong file with a message
# naming it, before allocating what the file claims (a review: a corrupt
# element count made every rank allocate gigabytes, and under ulimit -v the
# message was a bare "std::bad_alloc").
#
#   checkpoint_corrupt_test.sh TRAIN [--no-ulimit]
#
# --no-ulimit: for AddressSanitizer builds, which cannot start under ulimit -v
# (the corrupt count is then checked for its message only).
set -uo pipefail
train=$1
limit=1
[[ ${2:-} == --no-ulimit ]] && limit=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
opts=(--epochs 1 --samples 512 --hidden 8)

timeout 120 "$train" "${opts[@]}" --checkpoint "$work/ck" >"$work/out" 2>&1 || fail "the first run failed: $(cat "$work/out")"

# The first parameter's element count (8 bytes after the parameter count,
# which follows the "epochs 1" line) set to 2^30: 4 GiB of floats.
line=$(grep -boa 'epochs 1' "$work/ck" | head -1 | cut -d: -f1)
[[ -n $line ]] || fail "no 'epochs 1' line in the checkpoint"
cp "$work/ck" "$work/corrupt"
printf '\x00\x00\x00\x40\x00\x00\x00\x00' |
  dd of="$work/corrupt" bs=1 seek=$((line + 9 + 8)) conv=notrunc status=none
if ((limit)); then
  (ulimit -v 1000000 && exec timeout 60 "$train" "${opts[@]}" --checkpoint "$work/corrupt") >"$work/out" 2>&1
else
  timeout 60 "$train" "${opts[@]}" --checkpoint "$work/corrupt" >"$work/out" 2>&1
fi
grep -q "train: --checkpoint $work/corrupt is truncated or corrupt" "$work/out" ||
  fail "corrupt count: $(cat "$work/out")"

# A checkpoint read from a pipe resumes (the count check first sought the
# file's end, and called every pipe corrupt; a review).
mkfifo "$work/pipe"
cat "$work/ck" >"$work/pipe" &
timeout 120 "$train" --epochs 2 --samples 512 --hidden 8 --checkpoint "$work/pipe" >"$work/out" 2>&1 ||
  fail "resuming from a pipe: $(cat "$work/out")"
grep -q "resuming from $work/pipe after epoch 1" "$work/out" || fail "resuming from a pipe: $(cat "$work/out")"

# A directory given as the checkpoint.
mkdir "$work/dir"
timeout 60 "$train" "${opts[@]}" --checkpoint "$work/dir" >"$work/out" 2>&1
grep -q "train: --checkpoint $work/dir is a directory: give the path of a file" "$work/out" ||
  fail "directory: $(cat "$work/out")"

# A file of random bytes: named, without quoting its bytes.
head -c 4096 /dev/urandom >"$work/random"
timeout 60 "$train" "${opts[@]}" --checkpoint "$work/random" >"$work/out" 2>&1
grep -q "train: --checkpoint $work/random is not a checkpoint of this program (it does not begin with \"axon-train-checkpoint 1\")" "$work/out" ||
  fail "random bytes: $(cat "$work/out")"
(($(wc -c <"$work/out") < 400)) || fail "random bytes: the message quotes the file: $(wc -c <"$work/out") bytes"
echo PASS
