#!/usr/bin/env bash
# CLI tests of `deploy` on the CPU path: the whole pipeline on synthetic data
# (train lenet 1 epoch -> prune -> export -> deploy) exits 0 with the JSON
# fields documented in docs/deploy.md; the default input is the latest export;
# bad usage and bad input give one line `deploy: ...` and exit 2 / 1; the CPU
# reference cache resumes, matches an uncached run, survives damage.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
DP="$BIN/deploy --device cpu --data-dir $T/data --runs $T/runs"
PY=/usr/bin/python3

# --- bad usage (exit 2) -------------------------------------------------------------
expect_fail "unknown option" 2 '^deploy: .*--frobnicate' $DP --frobnicate
expect_fail "bad precision" 2 '^deploy: .*precision' $DP --precision fp64
expect_fail "batch 0" 2 '^deploy: .*batch' $DP --batch 0
expect_fail "three arguments" 2 '^deploy: ' $DP a.h5 synthetic extra
if $DP --help | grep -qE -- '--batch.*128'; then ok "help lists defaults"; else bad "help lists defaults" "no --batch default"; fi

# --- bad input without a pipeline (exit 1) ------------------------------------------
expect_fail "no runs" 1 '^deploy: .*no previous run' $DP
expect_fail "missing file" 1 '^deploy: .*nothere.h5' $DP "$T/nothere.h5" synthetic
echo "not hdf5" >"$T/junk.h5"
expect_fail "corrupt file" 1 '^deploy: .*not an HDF5 file.*junk.h5' $DP "$T/junk.h5" synthetic

# --- the pipeline ---------------------------------------------------------------------
COMMON="--device cpu --quiet --data-dir $T/data --runs $T/runs"
$BIN/train $COMMON --model lenet --epochs 1 --batch 128 synthetic >/dev/null 2>&1 || bad "train" "failed"
expect_fail "latest run without export" 1 '^deploy: .*run export' $DP
expect_fail "a model that is not an export" 1 '^deploy: .*run export' $DP "$T/runs/latest/model.h5" synthetic
$BIN/prune $COMMON --method oneshot --from latest --target-sparsity 0.8 --epochs 0.1 --batch 128 \
    synthetic >/dev/null 2>&1 || bad "prune" "failed"
$BIN/export --quiet --runs "$T/runs" >/dev/null 2>&1 || bad "export" "failed"
X=$T/runs/latest/model.csr.h5
[ -f "$X" ] && ok "export in the latest run" || bad "export in the latest run" "missing"

GPU=0
"$BIN/deploy" --device gpu --quiet --data-dir "$T/data" --test-images 10 --reference 0 --repeat 1 \
    --chart none "$X" >/dev/null 2>&1 && GPU=1

# default input, auto device: on a machine without a GPU it says it runs the CPU path
out=$($BIN/deploy --data-dir "$T/data" --runs "$T/runs" --device auto --json "$T/a.json" 2>"$T/err")
rc=$?
[ $rc -eq 0 ] && ok "deploy exits 0" || bad "deploy exits 0" "exit $rc: $(cat "$T/err")"
if [ $GPU -eq 1 ]; then SKIP=$((SKIP + 1)); echo "skip says CPU path: a GPU is here"
elif grep -q 'running the CPU path' "$T/err"; then ok "says it runs the CPU path"
else bad "says it runs the CPU path" "$(cat "$T/err")"; fi

# the CPU path: table and summary on stdout, the JSON summary
out=$($DP --json "$T/d.json" 2>"$T/err")
rc=$?
[ $rc -eq 0 ] && ok "cpu path exits 0" || bad "cpu path exits 0" "exit $rc: $(cat "$T/err")"
grep -q '^conv2 ' <<<"$out" && grep -q 'test accuracy' <<<"$out" && ok "table and summary" || bad "table and summary" "$out"
grep -q '^layer .* sparsity  *act-sp' <<<"$out" && grep -q '^(act-sp: zeros in the layer' <<<"$out" \
    && ok "act-sp column" || bad "act-sp column" "$out"
grep -qE '^loaded .*model\.csr\.h5 in [0-9]+\.[0-9]{3} s$' <<<"$out" && ok "load time line" || bad "load time line" "$out"
for k in tool dataset model output test_accuracy load_seconds cpu_reference_accuracy sparsity mac_sparsity images_per_second \
         dense_images_per_second latency_ms_batch1 dense_latency_ms_batch1 seconds layers; do
    grep -q "\"$k\"" "$T/d.json" || bad "json has $k" "missing"
done
for k in name shape sparsity act_sparsity cudnn_fp32_ms cudnn_tf32_ms cudnn_fp16_ms sparse_fp32_ms sparse_fp16_ms \
         cusparse_ms chosen; do
    grep -q "\"$k\"" "$T/d.json" || bad "json layers have $k" "missing"
done
grep -q '"tool": *"deploy"' "$T/d.json" && grep -q '"output": *null' "$T/d.json" && ok "json summary" || bad "json summary" "$(cat "$T/d.json")"
if [ -x "$PY" ]; then
    "$PY" - "$T/d.json" <<'EOF' && ok "json values" || bad "json values" "$(cat "$T/d.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dataset"] == "synthetic" and d["model"] == "lenet", d
assert d["test_accuracy"] == d["cpu_reference_accuracy"] and 0 <= d["test_accuracy"] <= 100
assert abs(d["sparsity"] - 0.8) < 0.01, d["sparsity"]
# the compute pruned: lenet's first conv, unpruned, holds about half the multiply-accumulates
assert 0.2 < d["mac_sparsity"] < 0.6, d["mac_sparsity"]
assert d["images_per_second"] > 0 and d["latency_ms_batch1"] > 0 and d["dense_images_per_second"] > 0
assert 0 < d["load_seconds"] < d["seconds"], (d["load_seconds"], d["seconds"])
names = [l["name"] for l in d["layers"]]
assert names == ["conv1", "conv2", "fc1", "fc2", "fc3"], names
assert all(l["chosen"] == "cpu" and l["cpu_ms"] > 0 for l in d["layers"])
# activation sparsity: measured over every test image the CPU ran; the image
# input is dense, the inputs after ReLUs hold zeros
assert d["act_sparsity_images"] == d["test_images"], d["act_sparsity_images"]
act = [l["act_sparsity"] for l in d["layers"]]
assert all(0 <= a <= 1 for a in act), act
assert act[0] < 0.5 and max(act[1:]) > 0, act
EOF
else
    SKIP=$((SKIP + 1)); echo "skip json values: no $PY"
fi

# explicit file and dataset, JSON on stdout, fewer test images
"$BIN/deploy" --device cpu --quiet --data-dir "$T/data" --test-images 100 --batch 32 --json - "$X" synthetic \
    >"$T/s.json" 2>"$T/err2"
grep -q '"test_images": *100' "$T/s.json" && grep -q '"batch": *32' "$T/s.json" && ok "explicit input, --json -" \
    || bad "explicit input, --json -" "$(cat "$T/s.json" "$T/err2")"

# --skip-candidates / --actsparse-min-zeros: parse, reach the JSON, refuse bad values
# (names are checked against the build's candidate table: a CPU-only build has none)
expect_fail "actsparse-min-zeros above 1" 2 '^deploy: .*actsparse-min-zeros' $DP --actsparse-min-zeros 1.5 "$X"
"$BIN/deploy" --device cpu --quiet --data-dir "$T/data" --test-images 20 --skip-candidates actsparse,cusparse \
    --actsparse-min-zeros 0.3 --json "$T/k.json" "$X" synthetic >/dev/null 2>"$T/err3"
rc=$?
[ $rc -eq 0 ] && grep -q '"actsparse_min_zeros": *0.3' "$T/k.json" && ok "skip options parse" \
    || bad "skip options parse" "exit $rc: $(cat "$T/err3")"
if grep -q '"actsparse_fp32_ms"' "$T/d.json"; then
    tr -d ' \n' <"$T/k.json" | grep -q '"skipped_candidates":\["cusparse","actsparse_fp32","actsparse_fp16"\]' \
        && ok "skipped candidates in the JSON" || bad "skipped candidates in the JSON" "$(grep -A4 skipped "$T/k.json")"
    expect_fail "unknown candidate" 2 "^deploy: --skip-candidates: 'frob' is no candidate" \
        $DP --skip-candidates actsparse,frob "$X"
    expect_fail "dense baseline" 2 '^deploy: --skip-candidates: cudnn_fp32 is a dense baseline' \
        $DP --skip-candidates cudnn "$X"
    expect_fail "empty name" 2 "^deploy: --skip-candidates: '' is no candidate" $DP --skip-candidates actsparse, "$X"
else
    SKIP=$((SKIP + 4)); echo "skip candidate names: this build has no GPU candidates"
fi

# --reference-cache: a run over the first 400 images leaves a prefix that a full run
# continues, with the same results as a run without the cache; a damaged cache is
# recomputed; an unwritable one is a warning; the default sits next to the export
mkdir -p "$T/rc" && cp "$X" "$T/rc/x.h5"
RC="$BIN/deploy --device cpu --data-dir $T/data --chart none"
$RC --quiet --reference-cache none --json "$T/rc/plain.json" "$T/rc/x.h5" synthetic >/dev/null 2>&1
$RC --quiet --test-images 400 "$T/rc/x.h5" synthetic >/dev/null 2>&1
[ -s "$T/rc/x.h5.cpuref" ] && ok "cache next to the export" || bad "cache next to the export" "no $T/rc/x.h5.cpuref"
$RC --json "$T/rc/resumed.json" "$T/rc/x.h5" synthetic >/dev/null 2>"$T/rc/err"
grep -q '^CPU reference: 400 images from .*x.h5.cpuref$' "$T/rc/err" && ok "cache resumed at 400" \
    || bad "cache resumed at 400" "$(grep -v '^CPU reference: [0-9]*/' "$T/rc/err" | head -3)"
$RC "$T/rc/x.h5" synthetic >/dev/null 2>"$T/rc/err"
grep -q '^CPU reference: 1000 images from' "$T/rc/err" && ok "cache complete" || bad "cache complete" "$(head -3 "$T/rc/err")"
cp "$BIN/deploy" "$T/rc/deploy2" && printf 'x' >>"$T/rc/deploy2"  # another executable: its own results
"$T/rc/deploy2" --device cpu --data-dir "$T/data" --chart none --reference-cache "$T/rc/other" "$T/rc/x.h5" synthetic \
    >/dev/null 2>&1 && cp "$T/rc/other" "$T/rc/x.h5.cpuref"
$RC "$T/rc/x.h5" synthetic >/dev/null 2>"$T/rc/err"
rc=$?
[ $rc -eq 0 ] && ! grep -q 'images from' "$T/rc/err" && ok "another build's cache not used" \
    || bad "another build's cache not used" "exit $rc: $(head -3 "$T/rc/err")"
head -c 100 "$T/rc/x.h5.cpuref" >"$T/rc/cut" && mv "$T/rc/cut" "$T/rc/x.h5.cpuref"
$RC --json "$T/rc/damaged.json" "$T/rc/x.h5" synthetic >/dev/null 2>"$T/rc/err"
rc=$?
[ $rc -eq 0 ] && ! grep -q 'images from' "$T/rc/err" && [ "$(stat -c %s "$T/rc/x.h5.cpuref")" -gt 100 ] \
    && ok "damaged cache recomputed" || bad "damaged cache recomputed" "exit $rc: $(head -3 "$T/rc/err")"
$RC --quiet --reference-cache "$T/nodir/c" "$T/rc/x.h5" synthetic >/dev/null 2>"$T/rc/err"
rc=$?
[ $rc -eq 0 ] && grep -q '^deploy: warning: --reference-cache: ' "$T/rc/err" && ok "unwritable cache warns" \
    || bad "unwritable cache warns" "exit $rc: $(cat "$T/rc/err")"
if [ -x "$PY" ]; then
    "$PY" - "$T/rc/plain.json" "$T/rc/resumed.json" "$T/rc/damaged.json" <<'EOF' && ok "cached results equal" || bad "cached results equal" "see above"
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:])
for k in ("test_accuracy", "cpu_reference_accuracy", "act_sparsity_images", "test_images"):
    assert a[k] == b[k] == c[k], (k, a[k], b[k], c[k])
for la, lb, lc in zip(a["layers"], b["layers"], c["layers"]):
    assert la["act_sparsity"] == lb["act_sparsity"] == lc["act_sparsity"], (la["name"], la["act_sparsity"], lb["act_sparsity"])
EOF
else
    SKIP=$((SKIP + 1)); echo "skip cached results equal: no $PY"
fi

# --- bad input with a pipeline (exit 1) ------------------------------------------------
expect_fail "unknown dataset" 1 '^deploy: .*nosuchset' $DP "$X" nosuchset
expect_fail "bad reference" 1 '^deploy: .*--reference' $DP --reference many "$X"
head -c 20000 "$X" >"$T/trunc.h5"
expect_fail "truncated export" 1 '^deploy: .*trunc.h5' $DP "$T/trunc.h5" synthetic
if [ $GPU -eq 1 ]; then
    SKIP=$((SKIP + 2)); echo "skip no-GPU errors: a GPU is here"
else
    expect_fail "fp16 without a GPU" 1 '^deploy: .*fp16.*GPU' $DP --precision fp16 "$X"
    expect_fail "--device gpu without a GPU" 1 '^deploy: .*--device gpu' $DP --device gpu "$X"
fi
summary
