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

# py_check NAME EXPORT MODEL: runs tests/export_check.py (the documented
# h5py + scipy reader of docs/export-format.md against the model and against
# the toolkit's own decode of the file, build/helpers/export_decode) with
# python PY (default /usr/bin/python3) and records its result; a skip when
# python, h5py or scipy is missing. Needs a scratch directory T.
py_check() {
    local out line py=${PY:-/usr/bin/python3}
    if [ ! -x "$py" ]; then SKIP=$((SKIP + 1)); echo "skip $1: no $py"; return; fi
    "${BIN%/bin}/helpers/export_decode" "$2" >"$T/decoded.txt" || { bad "$1" "export_decode failed on $2"; return; }
    out=$("$py" tests/export_check.py "$2" "$3" "$T/decoded.txt" 2>&1)
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
    if grep -qE ' 0 passed, 0 failed, 1 skipped' <<<"$line"; then
        SKIP=$((SKIP + 1)); echo "skip $1: $(head -n 1 <<<"$out") (h5py or scipy missing)"
    elif grep -qE ' [1-9][0-9]* passed, 0 failed' <<<"$line"; then ok "$1 ($line)"
    else bad "$1" "$out"; fi
}

# need_python: PY (default /usr/bin/python3) for a test of a bench script;
# when it is missing the whole test is a skip (summary, exit).
need_python() {
    PY=${PY:-/usr/bin/python3}
    if [ ! -x "$PY" ]; then echo "skip: no $PY"; SKIP=1; summary; exit; fi
}

# summary: print the closing line and return the status.
summary() {
    echo "$(basename "$0"): $PASS passed, $FAIL failed, $SKIP skipped"
    [ "$FAIL" -eq 0 ]
}
