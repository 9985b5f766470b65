#!/usr/bin/env bash
# CLI tests of `prune` spread over several ranks with mpirun, on the CPU on
# synthetic data: 2 and 3 ranks end bitwise equal to one process (with and
# without racing, and for gmp); a run of 2 ranks stopped after iteration 2
# and resumed with 1 and with 3 ranks ends equal to the uninterrupted run;
# a rank that dies stops the job with one clear line and leaves a state file
# that a single process resumes to the same end; errors are one line from
# rank 0; only rank 0 writes files. Skips (with its summary line) when
# mpirun is missing or the build has no MPI.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
# Under make test SANITIZE=1, Open MPI's components (dlopen'ed: their frames
# cannot be suppressed by name) keep memory until exit, so the ranks run
# without leak checks; the address and undefined-behaviour checks stay on.
[ "${SANITIZE:-0}" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1  # up to 3 ranks on 2 cores
PR="$BIN/prune --device cpu --quiet --data-dir $T/data"
MPIRUN="mpirun -q --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"

if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip: mpirun not found"; SKIP=1; summary; exit
fi
if ! ldd "$BIN/prune" 2>/dev/null | grep -q libmpi; then
    # Without MPI, several copies under mpirun refuse with one line.
    expect_fail "no MPI under mpirun" 1 '^prune: .*no MPI' $MPIRUN -np 2 $PR --model lenet synthetic
    echo "skip: $BIN/prune is built without MPI"; SKIP=1; summary; exit
fi

# same NAME A B: two results (model files and JSON summaries) are equal.
same() {
    local name=$1 a=$2 b=$3
    if ! h5diff -q "$a.h5" "$b.h5" /params /params || ! h5diff -q "$a.h5" "$b.h5" /masks /masks ||
       ! h5diff -q "$a.h5" "$b.h5" /buffers /buffers; then
        bad "$name" "$(basename "$a").h5 and $(basename "$b").h5 differ"; return
    fi
    local ka kb
    ka=$(grep -oE '"(test_accuracy|images|(best|mean)_val_accuracy|admitted|rewound|replaced)": *[-0-9.e+]+' "$a.json")
    kb=$(grep -oE '"(test_accuracy|images|(best|mean)_val_accuracy|admitted|rewound|replaced)": *[-0-9.e+]+' "$b.json")
    if [ -z "$ka" ] || [ "$ka" != "$kb" ]; then bad "$name" "summaries differ"; else ok "$name"; fi
}

# A start model that has learnt something (selection and sensitivities work on it).
$BIN/train --device cpu --quiet --model lenet --epochs 2 --batch 64 --val-size 200 \
    --data-dir "$T/data" --runs "$T/runs" -o "$T/m.h5" synthetic >/dev/null 2>&1 || bad "start model" "train failed"
COMMON="--model lenet --batches 2 --batch 32 --val-size 200 --scan-images 64 --from $T/m.h5 --seed 3"
# A: no racing, 6 solutions: rewinds, replacements and a clustering copy solutions between ranks.
A="$COMMON --population 6 --iterations 5 --halve-every 0 --finetune 1 --threshold 0.5 --target-sparsity 0.8"
# R: racing 6 -> 3 -> 1: the survivors are rebalanced over the ranks.
R="$COMMON --population 6 --iterations 5 --halve-every 1 --finetune 2 --target-sparsity 0.85"

# --- N ranks == 1 process ---------------------------------------------------------
$PR $A --runs "$T/runs" -o "$T/a1.h5" --json "$T/a1.json" >/dev/null 2>&1 || bad "A, 1 process" "failed"
$MPIRUN -np 2 $PR $A --runs "$T/r2" --json "$T/a2.json" >"$T/a2.out" 2>"$T/a2.err" || bad "A, 2 ranks" "failed: $(cat "$T/a2.err")"
ln -s "$T/r2/latest/model.pruned.h5" "$T/a2.h5"
same "2 ranks == 1 process" "$T/a1" "$T/a2"
$MPIRUN -np 3 $PR $A --runs "$T/runs" -o "$T/a3.h5" --json "$T/a3.json" >/dev/null 2>&1 || bad "A, 3 ranks" "failed"
same "3 ranks == 1 process" "$T/a1" "$T/a3"
ev=$(grep -oE '"replaced": *[1-9]' "$T/a1.json" | head -n 1)
[ -n "$ev" ] && ok "selection copied solutions ($ev)" || bad "selection copied solutions" "no replacement in run A"
grep -q '"ranks": *2' "$T/a2.json" && ok "json ranks" || bad "json ranks" "no \"ranks\": 2"
runs=$(find "$T/r2" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$runs" -eq 1 ] && [ -e "$T/r2/latest" ] && ok "one run directory ($runs)" || bad "one run directory" "$runs"
lines=$(grep -c 'pruned lenet' "$T/a2.out")
[ "$lines" -eq 1 ] && [ ! -s "$T/a2.err" ] && ok "rank 0 alone prints" || bad "rank 0 alone prints" "$lines result lines, stderr: $(head -c 300 "$T/a2.err")"

$PR $R -o "$T/b1.h5" --json "$T/b1.json" >/dev/null 2>&1 || bad "R, 1 process" "failed"
$MPIRUN -np 3 $PR $R -o "$T/b3.h5" --json "$T/b3.json" >/dev/null 2>&1 || bad "R, 3 ranks" "failed"
same "racing: 3 ranks == 1 process" "$T/b1" "$T/b3"

G="$COMMON --method gmp --population 2 --iterations 3 --target-sparsity 0.7"
$PR $G -o "$T/g1.h5" --json "$T/g1.json" >/dev/null 2>&1 || bad "gmp, 1 process" "failed"
$MPIRUN -np 2 $PR $G -o "$T/g2.h5" --json "$T/g2.json" >/dev/null 2>&1 || bad "gmp, 2 ranks" "failed"
same "gmp: 2 ranks == 1 process" "$T/g1" "$T/g2"

# --- stopped with 2 ranks, resumed with 1 and with 3 ---------------------------------
$MPIRUN -np 2 $PR $R -o "$T/s1.h5" --stop-after 2 --json "$T/s1.json" >/dev/null 2>&1 || bad "stop, 2 ranks" "failed"
grep -q '"iterations_done": *2' "$T/s1.json" || bad "stop after 2" "$(head -c 200 "$T/s1.json" 2>/dev/null)"
cp "$T/s1.state" "$T/s3.state"
for n in 1 3; do
    if [ "$n" -eq 1 ]; then
        $BIN/prune --device cpu --quiet --resume -o "$T/s$n.h5" --json "$T/s$n.json" >/dev/null 2>&1 || bad "resume, 1 process" "failed"
    else
        $MPIRUN -np 3 $BIN/prune --device cpu --quiet --resume -o "$T/s$n.h5" --json "$T/s$n.json" >/dev/null 2>&1 || bad "resume, 3 ranks" "failed"
    fi
    same "2 ranks stopped, resumed with $n == uninterrupted" "$T/b1" "$T/s$n"
done

# --- a rank dies -----------------------------------------------------------------------
# (the hook is only in the test build of prune, build/testbin/prune)
PRH="${TESTBIN:-$(dirname "$BIN")/testbin}/prune --device cpu --quiet --data-dir $T/data"
SC_PRUNE_TEST_DIE_AT=3,1 $MPIRUN -np 3 $PRH $R -o "$T/d.h5" --json "$T/d.json" --save-interval 0 \
    >/dev/null 2>"$T/d.err"; rc=$?
n=$(grep -c . "$T/d.err")
if [ "$rc" -eq 0 ]; then bad "dead rank stops the run" "exit 0"
elif [ "$n" -ne 1 ] || ! grep -qE '^prune: .*stopped by mpirun.*state file .*d\.state, iteration [12]' "$T/d.err"; then
    bad "dead rank stops the run" "want one line naming the state file, got: $(cat "$T/d.err")"
else ok "dead rank stops the run (exit $rc): $(cat "$T/d.err")"; fi
[ ! -f "$T/d.h5" ] && ok "no model after the death" || bad "no model after the death" "d.h5 written"
$BIN/prune --device cpu --quiet --resume -o "$T/d.h5" --json "$T/d.json" >/dev/null 2>"$T/d2.err" || bad "resume after the death" "$(cat "$T/d2.err")"
same "resumed after the death == uninterrupted" "$T/b1" "$T/d"

# --- errors: one line from rank 0, every rank exits alike -------------------------------
expect_fail "bad input, 3 ranks" 1 '^prune: .*nothere\.h5' $MPIRUN -np 3 $PR $A --from "$T/nothere.h5"
expect_fail "bad usage, 2 ranks" 2 '^prune: .*population' $MPIRUN -np 2 $PR $A --population 0
expect_fail "resume without state, 2 ranks" 1 '^prune: .*zz\.state' $MPIRUN -np 2 $PR --resume -o "$T/zz.h5"
summary
