#!/usr/bin/env bash
# CLI tests of `export` on tiny models made on the CPU from synthetic data: bad
# usage and bad input give one line `export: ...` and exit 2 / 1; the default
# input and output in the latest run; the summary and --json; fp32, fp16 and
# codebook4 (after quantize, also with --row-scale) files checked in Python with h5py + scipy
# against the BN-folded weights (tests/export_check.py); an unpruned model is
# exported with dense rows and a one-line notice.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
EX="$BIN/export"
PR="$BIN/prune --device cpu --quiet --data-dir $T/data --runs $T/runs"
PY=/usr/bin/python3

# --- bad usage (exit 2) -----------------------------------------------------------
expect_fail "unknown option" 2 '^export: .*--frobnicate' $EX --frobnicate
expect_fail "bad codebook mode" 2 '^export: .*codebook' $EX --codebook maybe
expect_fail "two models" 2 '^export: ' $EX a.h5 b.h5
if $EX --help | grep -qE -- '--codebook.*auto'; then ok "help lists defaults"; else bad "help lists defaults" "no --codebook default"; fi

# --- bad input (exit 1) -------------------------------------------------------------
expect_fail "no runs" 1 '^export: .*no previous run' $EX --runs "$T/none"
expect_fail "missing model" 1 '^export: .*nothere.h5' $EX "$T/nothere.h5"
echo "not hdf5" >"$T/junk.h5"
expect_fail "not an HDF5 file" 1 '^export: .*not an HDF5 file.*junk.h5' $EX "$T/junk.h5"

# A tiny residual net (BN, max pool, strided 1x1 shortcut, add), pruned to 70%
# from scratch in two batches.
cat >"$T/tiny.txt" <<'EOF'
conv 8 3 pad=1 bias=0 name=conv1
bn name=bn1
relu name=relu1
maxpool 2 name=pool1
conv 16 3 stride=2 pad=1 bias=0 name=b.conv1
bn name=b.bn1
relu name=b.relu1
conv 16 3 pad=1 bias=0 name=b.conv2
bn name=b.bn2
conv 16 1 stride=2 bias=0 name=b.short from=pool1
bn name=b.sbn
add b.bn2 name=b.add
relu name=b.out
gap name=gap
linear classes name=fc
EOF
TINY="--model $T/tiny.txt --population 1 --iterations 1 --batches 2 --batch 32 --val-size 200 --scan-images 0 --finetune 0"
$PR $TINY --target-sparsity 0 -o "$T/dense.h5" synthetic >/dev/null 2>&1 || bad "unpruned model" "prune failed"
$PR $TINY --target-sparsity 0.7 synthetic >/dev/null 2>&1 || bad "pruned model" "prune failed"
D=$T/runs/latest

head -c 20000 "$D/model.pruned.h5" >"$T/trunc.h5"
expect_fail "truncated model" 1 '^export: .*(damaged or truncated|trunc.h5)' $EX "$T/trunc.h5"
cp "$D/model.pruned.h5" "$T/same.h5"
expect_fail "output over the input" 1 '^export: .*overwrite the input' $EX "$T/same.h5" -o "$T/same.h5"
expect_fail "output dir missing" 1 '^export: .*directory does not exist' $EX "$D/model.pruned.h5" -o "$T/nodir/x.h5"

# --- default input/output, summary, json, fp32 check ----------------------------------
out=$($EX --runs "$T/runs" --json "$T/e.json" 2>"$T/err"); rc=$?
if [ $rc -eq 0 ] && [ -f "$D/model.csr.h5" ] && [ ! -s "$T/err" ]; then ok "default input and output"
else bad "default input and output" "exit $rc: $(cat "$T/err")"; fi
grep -qE '^b\.conv2 +16x16x3x3 +[0-9]+ +[0-9.]+% +[0-9]+ +[0-9]+ +0 +64 +[0-9]+ +9280 +[0-9.]+x  csr$' <<<"$out" \
    && grep -qE 'file [0-9]+ bytes vs dense fp32 [0-9]+ bytes' <<<"$out" \
    && ok "summary table" || bad "summary table" "$out"
for k in tool dataset model output sparsity seconds layers file_bytes dense_fp32_bytes ratio_to_dense indices values codebook bias; do
    grep -q "\"$k\"" "$T/e.json" || bad "json has $k" "missing"
done
grep -q '"tool": *"export"' "$T/e.json" && grep -q '"values": *"fp32"' "$T/e.json" && ok "json summary" || bad "json summary" "$(head -c 300 "$T/e.json")"
ls "$D" | grep -q '\.tmp\.' && bad "no temporary files" "$(ls "$D")" || ok "no temporary files"
py_check "python check fp32" "$D/model.csr.h5" "$D/model.pruned.h5"
h5dump -d /history "$D/model.csr.h5" 2>/dev/null | grep -q 'export: fp32 values' && ok "history line" || bad "history line" "missing"
expect_fail "an export file as input" 1 "^export: .*format is 'sparsecnn-export'" $EX "$D/model.csr.h5" -o "$T/x.h5"

# --- fp16 ------------------------------------------------------------------------------
$EX -q --half "$D/model.pruned.h5" -o "$T/half.h5" >/dev/null || bad "fp16 export" "failed"
py_check "python check fp16" "$T/half.h5" "$D/model.pruned.h5"

# --- codebook4 after quantize --centroids 16 -------------------------------------------
$BIN/quantize --device cpu --quiet --data-dir "$T/data" --runs "$T/runs" --centroids 16 >/dev/null 2>&1 || bad "quantize" "failed"
out=$($EX -q --runs "$T/runs" --json "$T/q.json") || bad "codebook export" "failed"
grep -q '"values": *"codebook4"' "$T/q.json" && grep -q 'model.quant.h5' "$T/q.json" && ok "codebook4 from the latest quantized model" \
    || bad "codebook4 from the latest quantized model" "$(head -c 400 "$T/q.json")"
py_check "python check codebook4" "$D/model.csr.h5" "$D/model.quant.h5"
# quantize --row-scale: quantize's codebook, indices and row scales (times the BN scale) in the file
$BIN/quantize --device cpu --quiet --data-dir "$T/data" --centroids 16 --row-scale "$D/model.pruned.h5" \
    -o "$T/rs.quant.h5" >/dev/null 2>&1 || bad "quantize --row-scale" "failed"
$EX -q "$T/rs.quant.h5" -o "$T/rs.csr.h5" --json "$T/rs.json" >/dev/null && grep -q '"values": *"codebook4"' "$T/rs.json" \
    && ok "codebook4 from a row-scaled model" || bad "codebook4 from a row-scaled model" "$(head -c 300 "$T/rs.json")"
py_check "python check codebook4 with row scales" "$T/rs.csr.h5" "$T/rs.quant.h5"
$EX -q --codebook off "$D/model.quant.h5" -o "$T/off.h5" --json "$T/off.json" >/dev/null && grep -q '"values": *"fp32"' "$T/off.json" \
    && ok "--codebook off" || bad "--codebook off" "$(head -c 300 "$T/off.json")"
expect_fail "codebook on, too many values" 1 '^export: .*distinct values; run quantize --centroids 16 first' \
    $EX --codebook on "$D/model.pruned.h5" -o "$T/on.h5"

# --- an unpruned model: dense rows and a notice -------------------------------------------
err=$($EX "$T/dense.h5" -o "$T/dense.csr.h5" --json "$T/d.json" 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c . <<<"$err")" -eq 1 ] && grep -q '^export: model is not pruned; exporting dense rows' <<<"$err" \
    && grep -q '"pruned": *false' "$T/d.json"; then ok "unpruned model: notice"; else bad "unpruned model: notice" "exit $rc: $err"; fi
py_check "python check dense rows" "$T/dense.csr.h5" "$T/dense.h5"
summary
