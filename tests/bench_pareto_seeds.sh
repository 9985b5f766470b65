#!/usr/bin/env bash
# Test of bench/pareto_seeds.py on hand-made summaries of two seeds: a pair
# met in both seeds says "yes (2 of 2)" with the right mean and worst
# margins; a pair met in one seed only says "no (1 of 2)"; a pair never at
# the same speed or accuracy is left out; a third floors run (F3) is compared
# like the others; a latency run's margin over the floors' line at its time is
# interpolated between the floors runs around it; no deployed run is an error.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
need_python
# run DIR TAG TEST_TOP1 MS: one run's prune and deploy summaries.
run() {
    mkdir -p "$1"
    echo "{\"test_accuracy\": $3, \"layers\": []}" >"$1/prune-$2.json"
    echo "{\"batch\": 128, \"mixed_fp16\": {\"batch_ms\": $4}, \"dense_engine\": []}" >"$1/deploy-$2.json"
}
run "$T/s1" F1 65.0 0.200; run "$T/s1" L1 66.5 0.205; run "$T/s1" L2 70.0 0.400
run "$T/s2" F1 65.5 0.200; run "$T/s2" L1 66.0 0.204; run "$T/s2" L2 71.0 0.400
out=$("$PY" bench/pareto_seeds.py "$T/s1" "$T/s2" 2>&1)
grep -qF "| L1 vs F1 | seed 1: +1.50, 0.98x (met); seed 2: +0.50, 0.98x (not met) | +1.00 | +0.50 | no (1 of 2) |" <<<"$out" \
    && ok "a pair met in one seed of two" || bad "a pair met in one seed of two" "$out"
grep -q "L2 vs F1" <<<"$out" && bad "a pair never comparable" "listed: $out" || ok "a pair never comparable is left out"
run "$T/s3" F1 65.0 0.200; run "$T/s3" L1 67.0 0.200
run "$T/s4" F1 64.0 0.200; run "$T/s4" L1 66.0 0.190
out=$("$PY" bench/pareto_seeds.py "$T/s3" "$T/s4" 2>&1)
grep -qF "| L1 vs F1 | seed 1: +2.00, 1.00x (met); seed 2: +2.00, 1.05x (met) | +2.00 | +2.00 | yes (2 of 2) |" <<<"$out" \
    && ok "a pair met in both seeds" || bad "a pair met in both seeds" "$out"
run "$T/s5" F3 69.0 0.210; run "$T/s5" L1 70.2 0.212
out=$("$PY" bench/pareto_seeds.py "$T/s5" 2>&1)
grep -qF "| L1 vs F3 | seed 1: +1.20, 0.99x (met) |" <<<"$out" && ok "the third floors run (F3) is compared" \
    || bad "the third floors run (F3) is compared" "$out"
run "$T/s6" F1 65.0 0.200; run "$T/s6" F2 69.0 0.220; run "$T/s6" L1 68.0 0.210; run "$T/s6" L2 71.0 0.230
out=$("$PY" bench/pareto_seeds.py "$T/s6" 2>&1)
grep -qF "| L1 | seed 1: +1.00 | +1.00 |" <<<"$out" && grep -qF "| L2 | seed 1: - | - |" <<<"$out" \
    && ok "the floors' line at a latency run's time (none outside the floors' times)" \
    || bad "the floors' line at a latency run's time" "$out"
mkdir -p "$T/empty"
"$PY" bench/pareto_seeds.py "$T/empty" >/dev/null 2>&1 && bad "no runs" "exit 0" || ok "no deployed run: an error"
summary
