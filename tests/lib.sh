# Helpers for the shell tests (sourced): expect_fail, pass/fail counters and
# the summary line tests/run.sh reads.
PASS=0; FAIL=0; SKIP=0
BIN=${BIN:-build/bin}

# ok NAME / bad NAME MESSAGE: record one result.
ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }

# expect_fail NAME CODE PATTERN CMD...: CMD must exit with CODE and print
# exactly one stderr line that matches PATTERN.
expect_fail() {
    local name=$1 code=$2 pat=$3; shift 3
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    local lines; lines=$(printf '%s\n' "$err" | grep -c .)
    if [ "$rc" -ne "$code" ]; then bad "$name" "exit $rc, want $code: $err"
    elif [ "$lines" -ne 1 ]; then bad "$name" "want one error line, got $lines: $err"
    elif ! grep -qE "$pat" <<<"$err"; then bad "$name" "message '$err' lacks /$pat/"
    else ok "$name"; fi
}

# summary: print the closing line and return the status.
summary() {
    echo "$(basename "$0"): $PASS passed, $FAIL failed, $SKIP skipped"
    [ "$FAIL" -eq 0 ]
}
