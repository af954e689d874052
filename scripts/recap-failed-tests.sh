#!/usr/bin/env bash
# Prints, for each test that failed in the last ctest run, its name and the
# last lines of its output. `make test` calls it after a failure so that the
# reason is in the last lines printed: CI keeps the head and the tail of a
# long log, and with `-j` a failed test's output lands mid-log, where it is
# cut out.
# Usage: recap-failed-tests.sh BUILD_DIR [LINES]
set -euo pipefail
log="$1/Testing/Temporary/LastTest.log"
lines="${2:-40}"
[[ -r "$log" ]] || { echo "recap: no ctest log at $log"; exit 0; }
awk -v keep="$lines" '
  /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); n = 0; inside = 0; next }
  /^Output:$/ { getline; inside = 1; n = 0; next }
  /^<end of output>$/ { inside = 0; next }
  inside { out[n++] = $0; next }
  /^Test Failed\.$/ {
    printf "\n===== failed: %s (last %d of %d output lines) =====\n", name, (n < keep ? n : keep), n
    for (i = (n > keep ? n - keep : 0); i < n; i++) print out[i]
  }
' "$log"
