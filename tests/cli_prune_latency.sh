#!/usr/bin/env bash
# CLI tests of `prune --objective latency` on the CPU on synthetic data: bad
# usage and bad tables give one line; --objective auto and --pattern auto come
# to sparsity and unstructured on the CPU, and say so; without a GPU the table comes from the
# FLOP model (said so), is cached in the run's files and reused on --resume,
# and a cached table of another GPU is not reused; a stopped and resumed run
# ends bitwise equal to an uninterrupted one; a table is kept under
# <runs>/latency and reused by a later run of the same start (not by one of
# another seed or model); the history (CSV and JSON) and
# the summary carry the predicted latency; with a synthetic table where one
# layer is expensive the run ends under the target per the table and prunes
# that layer harder than --objective sparsity does at the same overall
# sparsity with the same seed; 2 MPI ranks end equal to one process.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
PRQ="$BIN/prune --device cpu --data-dir $T/data --runs $T/runs"
PR="$PRQ --quiet"
TINY="--model lenet --population 4 --iterations 4 --batches 2 --batch 32 --val-size 200 --finetune 1 --seed 3"
PY=${PY:-/usr/bin/python3}

# jget FILE EXPR: a value of a JSON file (python expression on d).
jget() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# --- bad usage and bad input --------------------------------------------------
expect_fail "latency needs evolve" 2 '^prune: .*--method evolve' $PR $TINY --objective latency --method gmp synthetic
expect_fail "bad objective" 2 '^prune: .*objective' $PR $TINY --objective speed synthetic
expect_fail "target below 1x" 2 '^prune: .*latency target 0.5x' $PR $TINY --objective latency --latency-target 0.5x synthetic
expect_fail "target not a number" 2 '^prune: .*latency target fast' $PR $TINY --objective latency --latency-target fast synthetic
expect_fail "target out of reach" 1 '^prune: .*out of reach' $PR $TINY --objective latency --latency-target 1000x synthetic
expect_fail "negative checks" 2 '^prune: .*latency-checks' $PR $TINY --objective latency --latency-checks -1 synthetic
expect_fail "missing table" 1 '^prune: .*nothere.json' $PR $TINY --objective latency --latency-table "$T/nothere.json" synthetic

# --- the defaults: --objective auto and --pattern auto are sparsity, unstructured on the CPU --------
err=$($PRQ $TINY --iterations 1 --target-sparsity 0.3 -o "$T/d.h5" --json "$T/d.json" synthetic 2>&1 >/dev/null)
grep -q "objective sparsity (auto), pattern unstructured (auto)" <<<"$err" && ok "auto: says what it chose" \
    || bad "auto: says what it chose" "$err"
[ "$(jget "$T/d.json" "d['objective'], d['pattern']")" = "sparsity unstructured" ] \
    && ok "auto on the CPU: sparsity, unstructured" || bad "auto on the CPU" "$(jget "$T/d.json" "d.get('objective')")"
err=$($PRQ $TINY --iterations 1 --objective latency --latency-target 1.5x -o "$T/e.h5" --json "$T/e.json" synthetic 2>&1 >/dev/null)
[ "$(jget "$T/e.json" "d['objective'], d['pattern']")" = "latency unstructured" ] \
    && ok "latency given on the CPU: pattern auto is unstructured" || bad "latency given on the CPU" "$err"
grep -q "objective latency, pattern unstructured (auto)" <<<"$err" && ok "auto pattern: said so" \
    || bad "auto pattern: said so" "$err"

err=$($PRQ $TINY --iterations 1 --objective latency --latency-target 1.5x --latency-allocation ramp -o "$T/g.h5" \
    --json "$T/g.json" synthetic 2>&1 >/dev/null)
[ "$(jget "$T/g.json" "d['latency_allocation']")" = ramp ] && grep -q "ramps towards" <<<"$err" \
    && ok "--latency-allocation ramp: said and in the JSON" || bad "--latency-allocation ramp" "$err"

# --- FLOP model, cache, history, resume ------------------------------------------
err=$($PRQ $TINY --objective latency --latency-target 1.5x -o "$T/a.h5" --json "$T/a.json" synthetic 2>&1 >"$T/a.out")
rc=$?
[ $rc -eq 0 ] && ok "FLOP-model run" || bad "FLOP-model run" "exit $rc: $err"
grep -q "FLOP model" <<<"$err" && ok "says FLOP model" || bad "says FLOP model" "$err"
[ "$(jget "$T/a_latency.json" "d['source']")" = "FLOP model (no GPU)" ] && ok "table cached in the run" \
    || bad "table cached in the run" "$(head -c 300 "$T/a_latency.json" 2>/dev/null)"
[ "$(jget "$T/a_latency.json" "d['plan']")" = per-layer ] && ok "fp32 table: the per-layer plan" \
    || bad "fp32 table: the per-layer plan" "$(jget "$T/a_latency.json" "d.get('plan')")"
grep -q "not measured (no GPU)" "$T/a.out" && ok "final latency: not measured without a GPU" \
    || bad "final latency line" "$(grep latency "$T/a.out")"
v=$(jget "$T/a.json" "d['latency']['predicted_ms'] <= d['latency']['target_ms'] * 1.0001 and d['latency']['not_measured'] == 'no GPU'")
[ "$v" = True ] && ok "summary: predicted under the target" || bad "summary latency" "$(jget "$T/a.json" "d['latency']")"
rest=$(jget "$T/a_latency.json" "d['rest_ms']")
v=$(jget "$T/a.json" "len(d['latency']['layers']) == len(json.load(open('$T/a_latency.json'))['layers']) and all(l['measured_ms'] is None and l['table_ms'] > 0 for l in d['latency']['layers']) and abs(sum(l['table_ms'] for l in d['latency']['layers']) + $rest - d['latency']['predicted_ms']) <= 1e-6 * d['latency']['predicted_ms']")
[ "$v" = True ] && ok "summary: per-layer table times add up to the prediction" \
    || bad "summary per-layer latency" "$(jget "$T/a.json" "d['latency'].get('layers')" | head -c 300)"
v=$(jget "$T/a_history.json" "all(h['best_predicted_latency_ms'] > 0 and h['measured_latency_ms'] is None and h['latency_scale'] == 1 for h in d['history'])")
[ "$v" = True ] && ok "history json: predicted latency, no checks without a GPU" || bad "history json latency" "$v"
v=$(jget "$T/a.json" "d['latency']['checks'] == 0 and d['latency']['check_scale'] == 1")
[ "$v" = True ] && ok "summary: no latency checks without a GPU" || bad "summary checks" "$(jget "$T/a.json" "d['latency']")"
head -n 1 "$T/a_history.csv" | grep -q "best_predicted_latency_ms,mean_predicted_latency_ms,measured_latency_ms$" \
    && [ "$(awk -F, '{print NF}' "$T/a_history.csv" | sort -u)" = 17 ] && ok "history csv has predicted latency" \
    || bad "history csv latency" "$(head -n 2 "$T/a_history.csv")"
$PR $TINY --objective latency --latency-target 1.5x -o "$T/b.h5" --stop-after 2 synthetic >/dev/null 2>&1 \
    || bad "stopped run" "failed"
sed -i 's/"source": *"[^"]*"/"source": "kept"/' "$T/b_latency.json"  # a mark: reused or rebuilt?
err=$($PRQ --resume -o "$T/b.h5" --json "$T/b.json" 2>&1 >/dev/null) || bad "resume" "failed: $err"
[ "$(jget "$T/b.json" "d['latency']['table_source']")" = kept ] && ok "resume reuses the cached table" \
    || bad "resume reuses the table" "$(jget "$T/b.json" "d['latency']")"
if h5diff -q "$T/a.h5" "$T/b.h5" /params /params && h5diff -q "$T/a.h5" "$T/b.h5" /masks /masks; then
    ok "resume is bitwise equal"; else bad "resume is bitwise equal" "params differ"; fi
# A cached table of another GPU is not reused (and rebuilt).
$PR $TINY --objective latency --latency-target 1.5x -o "$T/c.h5" --stop-after 1 synthetic >/dev/null 2>&1 \
    || bad "stopped run c" "failed"
sed -i 's/"gpu": *"[^"]*"/"gpu": "Other GPU"/; s/"source": *"[^"]*"/"source": "kept"/' "$T/c_latency.json"
err=$($PRQ --resume -o "$T/c.h5" --json "$T/c.json" 2>&1 >/dev/null) || bad "resume c" "failed: $err"
[ "$(jget "$T/c.json" "d['latency']['table_source']")" = "FLOP model (no GPU)" ] && ok "table of another GPU not reused" \
    || bad "table of another GPU not reused" "$(jget "$T/c.json" "d['latency']")"
[ "$(jget "$T/c_latency.json" "d['gpu']")" = none ] && ok "refused table rebuilt" || bad "refused table rebuilt" "$(jget "$T/c_latency.json" "d['gpu']")"

# --- tables kept for later runs (<runs>/latency): the same start reuses it, another seed or model not ---
sh="$T/runs/latency/lenet-synthetic-unstructured-seed3-none-b128-fp32.json"
[ -f "$sh" ] && ok "table kept for later runs" || bad "table kept for later runs" "$(ls "$T/runs/latency" 2>&1)"
sed -i 's/"source": *"[^"]*"/"source": "shared"/' "$sh"  # a mark: reused or measured?
LAT="--iterations 1 --objective latency --latency-target 1.5x"
err=$($PRQ $TINY $LAT -o "$T/s.h5" --json "$T/s.json" synthetic 2>&1 >/dev/null)
[ "$(jget "$T/s.json" "d['latency']['table_source']")" = shared ] && grep -qF "reusing the latency table $sh" <<<"$err" \
    && ok "a later run of the same start reuses it" || bad "a later run reuses it" "$err"
$PR $TINY $LAT --seed 4 -o "$T/s4.h5" --json "$T/s4.json" synthetic >/dev/null 2>&1
[ "$(jget "$T/s4.json" "d['latency']['table_source']")" = "FLOP model (no GPU)" ] && [ -f "${sh/seed3/seed4}" ] \
    && ok "another seed: a table of its own" || bad "another seed" "$(ls "$T/runs/latency")"
$PR $LAT --from "$T/a.h5" --batches 2 --batch 32 --finetune 1 -o "$T/sf.h5" synthetic >/dev/null 2>&1
ls "$T/runs/latency" | grep -qE '^lenet-synthetic-unstructured-from[0-9a-f]{8}-[0-9]+-none-b128-fp32\.json$' \
    && ok "--from: a table named after the model file's CRC and length" || bad "--from table" "$(ls "$T/runs/latency")"

# --- a synthetic table: layer 0 expensive and sparsity pays there ------------------
"$PY" - "$T/a_latency.json" "$T/syn.json" <<'EOF' || bad "synthetic table" "python failed"
import json, sys
d = json.load(open(sys.argv[1]))
d["gpu"], d["compute_capability"], d["source"], d["rest_ms"] = "Synthetic GPU", 0, "synthetic", 0.1
g = d["grid"]
d["ms"] = [[4.0 * (1 - s) + 0.05 for s in g] if l == 0 else [0.2 for s in g] for l in range(len(d["layers"]))]
json.dump(d, open(sys.argv[2], "w"))
EOF
sed 's/"batch": *[0-9]*/"batch": 64/' "$T/syn.json" >"$T/syn64.json"
expect_fail "table of another batch" 1 '^prune: .*does not fit.*batch 64' $PR $TINY --objective latency \
    --latency-table "$T/syn64.json" synthetic
sed 's/"pattern": *"[^"]*"/"pattern": "16x8"/' "$T/syn.json" >"$T/syn16x8.json"
expect_fail "table of another pattern" 1 '^prune: .*does not fit.*timed on pattern 16x8, the run prunes on unstructured' \
    $PR $TINY --objective latency --latency-table "$T/syn16x8.json" synthetic
grep -q '"pattern": *"unstructured"' "$T/syn.json" && sed 's/"pattern": *"[^"]*", *//' "$T/syn.json" >"$T/synold.json"
$PR $TINY --objective latency --latency-table "$T/synold.json" --latency-target 1.5x -o "$T/old.h5" \
    --json "$T/old.json" synthetic >/dev/null 2>&1 || bad "older table" "failed"
[ "$(jget "$T/old.json" "d['latency']['table_source']")" = synthetic ] \
    && ok "a table older than the pattern key is taken as given" || bad "older table" "$(jget "$T/old.json" "d['latency']")"
$PR $TINY --objective latency --latency-table "$T/syn.json" --latency-target 1.5x -o "$T/l.h5" --json "$T/l.json" \
    synthetic >/dev/null 2>&1 || bad "synthetic-table run" "failed"
v=$(jget "$T/l.json" "d['latency']['predicted_ms'] <= d['latency']['target_ms'] * 1.0001")
[ "$v" = True ] && ok "ends under the target per the table ($(jget "$T/l.json" "round(d['latency']['predicted_ms'], 4)") ms)" \
    || bad "ends under the target" "$(jget "$T/l.json" "d['latency']")"
ts=$(jget "$T/l.json" "d['target_sparsity']")
$PR $TINY --objective sparsity --target-sparsity "$ts" -o "$T/s.h5" --json "$T/s.json" synthetic >/dev/null 2>&1 \
    || bad "sparsity run" "failed"
first="[x['sparsity'] for x in d['layers'] if x['pruned']][0]"
la=$(jget "$T/l.json" "$first"); sa=$(jget "$T/s.json" "$first")
awk -v a="${la:-0}" -v b="${sa:-1}" 'BEGIN { exit !(a > b + 0.1) }' \
    && ok "expensive layer pruned harder: $la vs $sa (overall $ts)" || bad "expensive layer pruned harder" "$la vs $sa"

# --- two MPI ranks == one process ------------------------------------------------
MPIRUN="mpirun -q --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
if command -v mpirun >/dev/null 2>&1 && ldd "$BIN/prune" 2>/dev/null | grep -q libmpi; then
    # (under SANITIZE=1 the ranks run without leak checks, as in tests/cli_prune_mpi.sh:
    # Open MPI's dlopen'ed components keep memory until exit)
    nolsan=$([ "${SANITIZE:-0}" = 1 ] && echo "${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" || echo "${ASAN_OPTIONS:-}")
    ASAN_OPTIONS=$nolsan OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $MPIRUN -np 2 $PR $TINY --objective latency \
        --latency-table "$T/syn.json" --latency-target 1.5x -o "$T/m.h5" synthetic >/dev/null 2>"$T/mpi.err" \
        || bad "2 ranks" "failed: $(grep -m 3 -E 'ERROR|error|prune:' "$T/mpi.err")"
    if h5diff -q "$T/l.h5" "$T/m.h5" /params /params && h5diff -q "$T/l.h5" "$T/m.h5" /masks /masks; then
        ok "2 ranks == 1 process"; else bad "2 ranks == 1 process" "models differ"; fi
else
    echo "skip 2 ranks: no mpirun or no MPI build"; SKIP=$((SKIP + 1))
fi
summary
