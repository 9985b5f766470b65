#!/usr/bin/env bash
# Test of bench/pareto_table.py on hand-made summaries: without --targets a
# latency run is labelled with the speedup and time its prune summary aimed
# at; without --jobs a run that has a log but no summary is listed as failed,
# and a run with neither (not asked for) is not listed.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
need_python
mkdir -p "$T/json" "$T/logs"
echo '{"test_accuracy": 65.0, "layers": []}' >"$T/json/prune-F1.json"
echo '{"test_accuracy": 66.5, "layers": [], "latency": {"target_ms": 0.2, "dense_predicted_ms": 0.3}}' \
    >"$T/json/prune-L1.json"
for t in F1 L1; do echo '{"batch": 128, "mixed_fp16": {"batch_ms": 0.2}, "dense_engine": []}' >"$T/json/deploy-$t.json"; done
touch "$T/logs/F1.log" "$T/logs/L1.log" "$T/logs/F2.log"
out=$("$PY" bench/pareto_table.py "$T/json" 2>&1)
grep -qF "| L1 | latency target 1.50x (0.2000 ms) |" <<<"$out" && ok "a latency run's target from its summary" \
    || bad "a latency run's target from its summary" "$out"
grep -qF "| F2 | floors None | failed (see logs/F2.log) |" <<<"$out" && ok "a started run without a summary: failed" \
    || bad "a started run without a summary: failed" "$out"
grep -q "^| U \|^| L2 " <<<"$out" && bad "runs not asked for" "listed: $out" || ok "runs not asked for are not listed"
out=$("$PY" bench/pareto_table.py "$T/json" --targets "1.4x" 2>&1)
grep -qF "| L1 | latency target 1.4x |" <<<"$out" && ok "--targets names the runs' targets" \
    || bad "--targets names the runs' targets" "$out"
summary
