#!/usr/bin/env bash
# Fuzz smoke test: when clang (with libFuzzer) is present, builds the
# harnesses of tests/fuzz/ (make fuzz-build) and runs each on a copy of its
# seed corpus for FUZZ_SMOKE_RUNS inputs (default 10000, at most 30 s) drawn
# with the fixed seed FUZZ_SMOKE_SEED (default 1), so that every machine tries
# the same inputs and a failure repeats; a crash, hang or sanitizer report
# fails it (leaks inside libhdf5 after a damaged file are suppressed:
# tests/fuzz/lsan.supp). Skipped without clang. Finding new inputs is the long runs' job
# (make fuzz, random seeds).
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
R=${FUZZ_SMOKE_RUNS:-10000}
SEED=${FUZZ_SMOKE_SEED:-1}
NAMES=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
probe='int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }'
if ! printf '%s\n' "$probe" | clang -fsanitize=fuzzer -x c - -o "$T/probe" 2>/dev/null; then
    for n in $NAMES; do SKIP=$((SKIP + 1)); echo "skip $n (no clang with libFuzzer)"; done
    summary; exit
fi
if ! out=$(make -s fuzz-build -j2 2>&1); then
    bad "fuzz-build" "$(tail -n 5 <<<"$out")"; summary; exit
fi
export LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
for n in $NAMES; do
    mkdir -p "$T/$n"; cp tests/fuzz/corpus/$n/* "$T/$n/"
    log=$(build-fuzz/$n -seed="$SEED" -runs="$R" -max_total_time=30 -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
          -artifact_prefix="$T/" "$T/$n" 2>&1); rc=$?
    runs=$(grep -oE 'Done [0-9]+ runs' <<<"$log" | grep -oE '[0-9]+')
    if [ $rc -eq 0 ] && ! grep -qE 'ERROR: (Address|Undefined|Leak)Sanitizer|runtime error' <<<"$log"; then
        ok "$n: ${runs:-?} runs (seed $SEED), no crash"
    else
        bad "$n" "exit $rc: $(grep -E 'ERROR|runtime error|SUMMARY' <<<"$log" | head -n 3)"
    fi
done
summary
