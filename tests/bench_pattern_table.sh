#!/usr/bin/env bash
# Test of bench/pattern_table.py on hand-made summaries: a row of one seed is
# judged against the unstructured row of its own seed (not another seed's),
# a floors row ('0.95f') against unstructured at 0.95, and a pattern measured
# with several seeds gets its mean, best and worst gap and its mean validation
# gap; a table of one seed has no such summary; the per-layer bar counts only
# layers at >= 90% and names the slowest; deploy's accuracy is set against
# prune's and the CPU's.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
need_python
mkdir -p "$T/seeds" "$T/one"
# prune DIR TAG TEST: a prune summary with that test top-1.
prune() { echo "{\"test_accuracy\": $3, \"val_accuracy\": ${4:-$3}}" >"$1/prune-$2.json"; }
prune "$T/seeds" m-unstructured-0.95s1 70.0
prune "$T/seeds" m-unstructured-0.95s2 71.0
prune "$T/seeds" m-16x8-0.95fs1 69.5
prune "$T/seeds" m-16x8-0.95fs2 69.0 69.4  # validation 69.4: the validation gaps are -0.50 and -1.60
out=$("$PY" bench/pattern_table.py "$T/seeds" 2>&1)
grep -qF -- "- m 16x8 at 0.95f seed 1: test top-1 -0.50 vs unstructured (within 1 point: yes)" <<<"$out" \
    && grep -qF -- "- m 16x8 at 0.95f seed 2: test top-1 -2.00 vs unstructured (within 1 point: no)" <<<"$out" \
    && ok "each seed against the unstructured row of its own seed" || bad "per-seed gaps" "$out"
grep -qF -- "- m 16x8 at 0.95f, 2 seeds: test top-1 -1.25 on average vs unstructured (best -0.50, worst -2.00; within 1 point on average: no; validation -1.05 on average)" <<<"$out" \
    && ok "mean, best and worst gap over the seeds, and the mean validation gap" || bad "over the seeds" "$out"
grep -qF "| m | unstructured | 0.95 seed 2 |" <<<"$out" && ok "the seed shown in the target column" || bad "seed column" "$out"
prune "$T/one" m-unstructured-0.95 70.0
prune "$T/one" m-16x8-0.95 69.2
out=$("$PY" bench/pattern_table.py "$T/one" 2>&1)
grep -qF -- "- m 16x8 at 0.95: test top-1 -0.80 vs unstructured (within 1 point: yes)" <<<"$out" \
    && ! grep -q "Over the seeds" <<<"$out" && ok "one seed: a gap per row, no summary over seeds" || bad "one seed" "$out"
cat >"$T/one/deploy-m-16x8-0.95.json" <<'J'
{"layers": [{"name": "a", "sparsity": 0.95}, {"name": "b", "sparsity": 0.5}, {"name": "c", "sparsity": 0.92}],
 "mixed_fp16": {"test_accuracy": 69.25, "cpu_agreement_images": 998, "cpu_compared_images": 1000,
  "layers": [{"name": "a", "cudnn_ms": 0.02, "sparse_ms": 0.01}, {"name": "b", "cudnn_ms": 0.01, "sparse_ms": 0.05},
             {"name": "c", "cudnn_ms": 0.02, "sparse_ms": 0.025}]}}
J
out=$("$PY" bench/pattern_table.py "$T/one" 2>&1)
grep -qF "block layers at >= 90%: 2, each faster than its cuDNN conv: no (slowest c 0.80x)" <<<"$out" \
    && ok "the per-layer bar: layers at >= 90% only, the slowest named" || bad "per-layer bar" "$out"
grep -qF "deploy test +0.05 vs prune, top-1 = CPU on 998 of 1000" <<<"$out" && ok "deploy's accuracy against prune's and the CPU's" \
    || bad "deploy's accuracy" "$out"
summary
