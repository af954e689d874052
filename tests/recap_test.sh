#!/usr/bin/env bash
# scripts/recap-failed-tests.sh against a ctest log written here in ctest's
# format: it names every failed test (by its output, by a regular
# expression, or never run), never a passed one, gives ctest's reason, keeps
# the last LINES output lines, and reads output lines that look like the
# log's own markers as output.
#   recap_test.sh SOURCE_DIR
set -euo pipefail
recap="$1/scripts/recap-failed-tests.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/Testing/Temporary"
dashes=----------------------------------------------------------
block() {  # name, output lines (one argument), verdict lines (one argument)
  printf '%s\n' "1/4 Testing: $1" "1/4 Test: $1" "Command: \"/bin/true\"" "Directory: /tmp" \
    "\"$1\" start time: Dec 05 12:00 UTC" "Output:" "$dashes"
  printf '%s\n' "$2" "<end of output>" "Test time =   0.01 sec" "$dashes" "$3" \
    "\"$1\" end time: Dec 05 12:00 UTC" "\"$1\" time elapsed: 00:00:00" "$dashes" ""
}
{
  printf '%s\n' "Start testing: Dec 05 12:00 UTC" "$dashes"
  block "passes" "passed-output" "Test Passed."
  block "fails" "$(printf 'line %s\n' 1 2 3 4 5)
Output:
1/2 Test: not a test
<end of output>
Test Failed.
last line" "Test Failed."
  block "regex" "regex-output" "Test Fail Reason:
Required regular expression not found. Regex=[wanted]"
} >"$work/Testing/Temporary/LastTest.log"
printf '%s\n' "2:fails" "3:regex" "4:never ran" >"$work/Testing/Temporary/LastTestsFailed.log"

out=$(bash "$recap" "$work" 6)
fail() { echo "FAIL: $1"; echo "$out"; exit 1; }
grep -qx '===== failed: fails (last 6 of 10 output lines) =====' <<<"$out" || fail "the failed test's header"
want=$'Output:\n1/2 Test: not a test\n<end of output>\nTest Failed.\nlast line'
[[ "$out" == *"line 5"$'\n'"$want"* ]] || fail "the failed test's last 6 lines, marker-like ones included"
[[ "$out" != *"line 4"* ]] || fail "more than the last 6 lines"
grep -q '===== failed: regex (last 1 of 1 output lines); Test Fail Reason:; Required regular expression not found. Regex=\[wanted\] =====' \
  <<<"$out" || fail "a regular expression's failure and its reason"
grep -qx '===== failed: never ran (no output in the log: it may not have run) =====' <<<"$out" || fail "a test that never ran"
[[ "$out" != *passes* && "$out" != *"not a test ("* ]] || fail "a passed test, or an output line, taken for a failed test"
[ "$(grep -c '^===== failed' <<<"$out")" -eq 3 ] || fail "each failed test once"
rm "$work/Testing/Temporary/LastTestsFailed.log"
[ "$(bash "$recap" "$work")" = "recap: no list of failed tests at $work/Testing/Temporary/LastTestsFailed.log" ] ||
  fail "no list: says so"
echo "recap_test: ok"
