#!/usr/bin/env bash
# Runs every test program under $BUILD/tests (C binaries; BUILD defaults to
# build, and the CLI tests get BIN=$BUILD/bin) and tests/*.sh (CLI tests), adds up their "N passed, N failed, N skipped" lines and ends with
# the total on a line of its own, after the eight slowest programs and their seconds. Exit status 1 when anything failed.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
export BIN=${BIN:-$B/bin}
pass=0; fail=0; skip=0; broken=0
times=()  # "seconds name" per program, for the slowest list at the end
# OpenBLAS 0.3.21 does not know recent CPUs and falls back to SSE3 kernels;
# its AVX2 kernels are 1.5x faster for the CPU tests where the CPU has AVX2.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=Haswell
fi
# SANITIZE=1 (make test SANITIZE=1): a sanitizer report fails the program;
# tests/lsan.supp lists the allocations kept on purpose until exit.
if [ "${SANITIZE:-0}" = 1 ]; then
    export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
run_one() {  # run_one NAME CMD...
    local name=$1; shift
    local out rc line t0=$EPOCHREALTIME
    out=$("$@" 2>&1); rc=$?
    times+=("$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') $name")
    printf '%s\n' "$out" | grep -v '^ok ' | sed "s|^|[$name] |"
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "[$name] no summary line (exit $rc)"; broken=$((broken + 1)); return
    fi
    local p f s
    p=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + ${s:-0}))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "[$name] exit $rc with no failed test"; broken=$((broken + 1))
    fi
}
for t in "$B"/tests/*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for t in tests/*.sh; do
    case $(basename "$t") in run.sh|lib.sh) continue ;; esac
    run_one "$(basename "$t")" bash "$t"
done
fail=$((fail + broken))
echo "slowest programs (seconds):"
printf '%s\n' "${times[@]}" | sort -rg | head -n 8 | sed 's/^/  /'
echo "${pass} passed, ${fail} failed, ${skip} skipped"
[ "$fail" -eq 0 ]
