#!/usr/bin/env bash
# Prints, for each test that failed in the last ctest run, its name, why
# ctest failed it (where its log says: a regular expression, say) and the
# last lines of its output. `make test` calls it after a failure so that the
# reason is in the last lines printed: CI keeps the head and the tail of a
# long log, and with `-j` a failed test's output lands mid-log, where it is
# cut out.
# The failed tests are those in Testing/Temporary/LastTestsFailed.log
# ("N:name" lines; `make test` removes the file before each run, so that an
# old one is never read); their output comes from LastTest.log, where a
# test's block is "N/M Test: name", ..., "Output:", a line of dashes, the
# output, "<end of output>", "Test time = ...", then the verdict. A test that
# never ran has no output there, and is named all the same.
# Usage: recap-failed-tests.sh BUILD_DIR [LINES]
set -euo pipefail
dir="$1/Testing/Temporary"
lines="${2:-40}"
failed="$dir/LastTestsFailed.log"
[[ -r "$failed" ]] || { echo "recap: no list of failed tests at $failed"; exit 0; }
awk -v keep="$lines" '
  FNR == NR { sub(/^[0-9]+:/, ""); wanted[$0] = 1; order[++count] = $0; next }
  # Inside a test output every line is output, whatever it looks like, up to
  # "<end of output>" followed by "Test time =".
  inside && pending { if ($0 ~ /^Test time = /) { inside = 0; pending = 0; verdict = 1; next }
                      out[n++] = "<end of output>"; pending = 0 }
  inside { if ($0 == "<end of output>") pending = 1; else out[n++] = $0; next }
  /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); n = 0; reason = ""; verdict = 0; next }
  /^Output:$/ { getline; inside = 1; n = 0; next }
  verdict && /^"/ && / end time: / {
    verdict = 0
    if (!(name in wanted) || (name in shown)) next
    shown[name] = 1
    printf "\n===== failed: %s (last %d of %d output lines)%s =====\n", name, (n < keep ? n : keep), n, reason
    for (i = (n > keep ? n - keep : 0); i < n; i++) print out[i]
    next
  }
  verdict && !/^-+$/ && !/^Test Failed\.$/ && !/^Test Passed\.$/ { reason = reason "; " $0 }
  END {
    for (i = 1; i <= count; i++)
      if (!(order[i] in shown)) printf "\n===== failed: %s (no output in the log: it may not have run) =====\n", order[i]
  }
' "$failed" "$dir/LastTest.log"
