#!/usr/bin/env bash
# CLI tests of `quantize` on synthetic data on the CPU: bad usage and bad
# input give one line `quantize: ...` and exit 2 / 1; the pipeline
# train -> prune -> quantize --centroids 16 (no file names) writes
# runs/latest/model.quant.h5, which loads as a model, keeps the pruned
# zeros and has at most 16 distinct non-zero values per layer; linear, half
# and fine-tuning runs write what their JSON summaries say; --row-scale
# writes per-row scales (/quant version 2) that decode to /params with at
# most 16 values per row, also after fine-tuning, and exports to codebook4
# values equal to the quantized weights. Fine-tuning distills from the
# unquantized model by default (JSON, history line and text say so, with
# the KL per epoch); --finetune-distill off uses the labels; a bad
# --finetune-alpha or --finetune-distill is a usage error. Sensitivity-
# weighted k-means (--kmeans-weight fisher) writes at most 16 values per
# layer (per row with --row-scale), keeps the zeros, decodes to /params,
# gives other codebooks than plain k-means, and says so in the JSON, the
# text and the history; bad values and other methods are usage errors.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
Q="$BIN/quantize --device cpu --quiet --data-dir $T/data --runs $T/runs"
PY=/usr/bin/python3
have_h5py() { [ -x "$PY" ] && "$PY" -c 'import h5py, numpy' 2>/dev/null; }
# Python prelude of the file checks (km_py CHECK FILE...: the prelude, then CHECK on
# stdin): km_check(f, name, g) asserts that k-means group g of tensor name decodes to
# /params, keeps the pruned zeros and holds at most 16 distinct non-zero values.
KM_PY='import sys, h5py, numpy as np
def km_check(f, name, g):
    w = f["params"][name][()]
    m = f["masks"][name][()].astype(bool) if name in f["masks"] else np.ones(w.shape, bool)
    dec = np.where(m, g["codebook"][()].astype(np.float32)[g["indices"][()]], np.float32(0))
    assert np.array_equal(dec, w), name
    assert (w[~m] == 0).all() and len(np.unique(w[w != 0])) <= 16, name
'
km_py() { { printf '%s\n' "$KM_PY"; cat; } | "$PY" - "$@"; }

# --- bad usage (exit 2) ---------------------------------------------------------
expect_fail "K = 1" 2 '^quantize: .*centroids' $Q --centroids 1
expect_fail "K = 257" 2 '^quantize: .*centroids' $Q --centroids 257
expect_fail "K = abc" 2 '^quantize: .*centroids' $Q --centroids abc
expect_fail "bits 4" 2 '^quantize: .*bits' $Q --bits 4
expect_fail "two methods" 2 '^quantize: .*one of' $Q --centroids 16 --bits 8
expect_fail "half and bits" 2 '^quantize: .*one of' $Q --half --bits 16
expect_fail "finetune linear" 2 '^quantize: .*finetune' $Q --bits 8 --finetune-epochs 1
expect_fail "unknown option" 2 '^quantize: .*--frobnicate' $Q --frobnicate
expect_fail "two models" 2 '^quantize: ' $Q a.h5 b.h5
expect_fail "bad init" 2 '^quantize: .*init' $Q --init random
expect_fail "lr-params -1" 2 '^quantize: .*finetune-lr-params' $Q --finetune-lr-params -1
expect_fail "lr-params abc" 2 '^quantize: .*finetune-lr-params' $Q --finetune-lr-params abc
expect_fail "lr-params 11" 2 '^quantize: .*finetune-lr-params' $Q --finetune-lr-params 11
expect_fail "finetune-wd 2" 2 '^quantize: .*finetune-wd' $Q --finetune-wd 2
expect_fail "row-scale with bits" 2 '^quantize: .*--row-scale needs k-means' $Q --bits 8 --row-scale
expect_fail "row-scale with half" 2 '^quantize: .*--row-scale needs k-means' $Q --half --row-scale
expect_fail "finetune-alpha 2" 2 '^quantize: .*finetune-alpha' $Q --finetune-alpha 2
expect_fail "finetune-alpha -0.5" 2 '^quantize: .*finetune-alpha' $Q --finetune-alpha -0.5
expect_fail "finetune-distill maybe" 2 '^quantize: .*finetune-distill' $Q --finetune-distill maybe
expect_fail "kmeans-weight foo" 2 '^quantize: .*kmeans-weight.*foo' $Q --kmeans-weight foo
expect_fail "fisher-batches 0" 2 '^quantize: .*fisher-batches' $Q --fisher-batches 0
expect_fail "fisher-batches abc" 2 '^quantize: .*fisher-batches' $Q --fisher-batches abc
expect_fail "fisher with bits" 2 '^quantize: .*--kmeans-weight fisher needs k-means' $Q --bits 8 --kmeans-weight fisher
expect_fail "fisher with half" 2 '^quantize: .*--kmeans-weight fisher needs k-means' $Q --half --kmeans-weight fisher

# --- bad input (exit 1) ---------------------------------------------------------
expect_fail "no previous run" 1 '^quantize: no previous run' $Q
expect_fail "missing model" 1 '^quantize: .*nothere.h5' $Q "$T/nothere.h5"
echo "not hdf5" >"$T/junk.h5"
expect_fail "corrupt model" 1 '^quantize: .*junk.h5' $Q "$T/junk.h5"

# --- the pipeline without file names ----------------------------------------------
$BIN/train --device cpu --quiet --data-dir "$T/data" --runs "$T/runs" --model lenet --epochs 2 \
    --batch 64 --val-size 300 synthetic >/dev/null 2>&1 || bad "train" "failed"
$BIN/prune --device cpu --quiet --data-dir "$T/data" --runs "$T/runs" --method oneshot --from latest \
    --target-sparsity 0.8 --epochs 1 --batch 64 --batches 10 synthetic >/dev/null 2>&1 || bad "prune" "failed"
D=$T/runs/latest
head -c 20000 "$D/model.pruned.h5" >"$T/trunc.h5"
expect_fail "truncated model" 1 '^quantize: .*trunc.h5' $Q "$T/trunc.h5"
expect_fail "fp16 on the cpu" 1 '^quantize: .*fp16' $Q --precision fp16

if $Q --centroids 16 --json "$T/k.json" >/dev/null 2>&1 && [ -f "$D/model.quant.h5" ]; then
    ok "quantize --centroids 16 -> runs/latest/model.quant.h5"
else bad "quantize --centroids 16" "failed or no runs/latest/model.quant.h5"; fi
for k in tool dataset model output val_accuracy test_accuracy val_accuracy_before test_accuracy_before \
         sparsity seconds sizes dense_fp32_bytes sparse_bytes sparse_codebook_bytes layers; do
    grep -q "\"$k\"" "$T/k.json" 2>/dev/null || bad "json has $k" "missing"
done
grep -q '"tool": *"quantize"' "$T/k.json" && ok "json summary" || bad "json summary" "no tool"
dmax=$(grep -oE '"max_distinct_nonzero_values": *[0-9]+' "$T/k.json" | grep -oE '[0-9]+$')
[ -n "$dmax" ] && [ "$dmax" -le 16 ] && ok "json: at most 16 values per layer ($dmax)" || bad "json distinct" "${dmax:-?}"
h5dump -d /history "$D/model.quant.h5" 2>/dev/null | grep -q 'quantize: Fisher-weighted k-means 16' \
    && ok "history line in the model" || bad "history line in the model" "missing"

# The quantized file is a model file: quantize reads it again (model_load).
$Q --half "$D/model.quant.h5" -o "$T/again.h5" >/dev/null 2>&1 && ok "model.quant.h5 loads as a model" \
    || bad "model.quant.h5 loads as a model" "failed"

# Independent check in Python: /quant decodes to /params, zeros kept, <= 16 values.
if have_h5py; then
    if out=$(km_py "$D/model.quant.h5" <<'EOF' 2>&1
with h5py.File(sys.argv[1], "r") as f:
    q = f["quant"]
    assert q.attrs["method"] == b"kmeans" and q.attrs["k"] == 16 and q.attrs["bits"] == 4
    assert len(q) == 4 and "conv1.weight" not in q, list(q)  # the first conv is skipped
    for name, g in q.items():
        cb = g["codebook"][()]
        assert cb.dtype == np.float16 and cb.shape == (16,), (name, cb.dtype)
        km_check(f, name, g)
print("ok")
EOF
    ) && [ "$out" = ok ]; then ok "python: decode == params, zeros, <= 16 values"
    else bad "python check" "$out"; fi
else
    SKIP=$((SKIP + 1)); echo "skip python check (no h5py)"
fi

# --- other methods ----------------------------------------------------------------------
P=$D/model.pruned.h5
num() { grep -oE "\"$1\": *-?[0-9.e+-]+" "$2" | head -n 1 | sed -E 's/.*: *//'; }
$Q "$P" --bits 8 -o "$T/l8.h5" --json "$T/l8.json" >/dev/null 2>&1 || bad "bits 8" "failed"
[ -n "$(num saturated "$T/l8.json")" ] && grep -q '"method": *"linear"' "$T/l8.json" \
    && ok "bits 8 reports saturated values ($(num saturated "$T/l8.json"))" || bad "bits 8 json" "no saturated count"
for args in "--bits 16 --asymmetric --scale layer" "--half" "--centroids 5 --codebook fp32 --init kmeans++" \
            "--centroids 256 --no-skip-first --skip-last --init density" "--bits 8 --clip percentile --percentile 99"; do
    if $Q "$P" $args -o "$T/m.h5" --json "$T/m.json" >/dev/null 2>&1; then
        b=$(num test_accuracy_before "$T/m.json"); a=$(num test_accuracy "$T/m.json")
        ok "quantize $args (test $b -> $a)"
    else bad "quantize $args" "failed"; fi
done
for args in "--bits 16 --asymmetric --scale layer" "--half"; do
    $Q "$P" $args -o "$T/m.h5" --json "$T/m.json" >/dev/null 2>&1
    b=$(num test_accuracy_before "$T/m.json"); a=$(num test_accuracy "$T/m.json")
    awk -v a="${a:-0}" -v b="${b:-100}" 'BEGIN { d = a - b; exit !(d < 0.31 && d > -0.31) }' \
        && ok "$args keeps the accuracy ($b -> $a)" || bad "$args keeps the accuracy" "$b -> $a"
done
if $Q "$P" --centroids 16 --finetune-epochs 1 --bn-recalibrate 2 -o "$T/ft.h5" --json "$T/ft.json" >/dev/null 2>&1 \
   && grep -A 2 '"finetune_history"' "$T/ft.json" | grep -q '"epoch": *1'; then ok "fine-tuning run"
else bad "fine-tuning run" "failed or no history"; fi
# Distillation is the default: the JSON says so (alpha 0) and the history has the KL.
grep -q '"finetune_distill": *true' "$T/ft.json" 2>/dev/null && [ "$(num finetune_alpha "$T/ft.json")" = 0 ] \
    && [ -n "$(num kl "$T/ft.json")" ] && [ -n "$(num teacher_accuracy "$T/ft.json")" ] \
    && ok "fine-tuning distills by default (KL $(num kl "$T/ft.json"))" \
    || bad "fine-tuning distills by default" "json: $(grep -oE '"(finetune_distill|kl)": *[a-z0-9.]+' "$T/ft.json" | tr '\n' ' ')"
h5dump -d /history "$T/ft.h5" 2>/dev/null | grep -q 'distill on alpha 0' \
    && ok "history line names distillation" || bad "history line names distillation" "missing"
# Hard labels with --finetune-distill off: no KL in the history.
if $Q "$P" --centroids 16 --finetune-epochs 1 --finetune-distill off --bn-recalibrate 2 -o "$T/fth.h5" \
      --json "$T/fth.json" >/dev/null 2>&1 && grep -q '"finetune_distill": *false' "$T/fth.json" \
   && grep -q '"kl": *null' "$T/fth.json"; then ok "fine-tuning with --finetune-distill off"
else bad "fine-tuning with --finetune-distill off" "failed or json wrong"; fi
# The distillation settings are reported in the text too.
out=$($BIN/quantize --device cpu --data-dir "$T/data" --runs "$T/runs" "$P" --centroids 16 \
      --finetune-epochs 1 --finetune-alpha 0.25 --bn-recalibrate 2 -o "$T/fta.h5" 2>&1)
echo "$out" | grep -q 'distills from the unquantized model (targets 0.25 \* label' \
   && echo "$out" | grep -q 'fine-tuned (distillation, alpha 0.25' \
   && ok "text names distillation and alpha" || bad "text names distillation and alpha" "$(echo "$out" | grep -i distill | head -n 2)"
# Fine-tuning the other parameters too (BN, biases, the fp32 last layer): the JSON
# says so, the file still decodes to /params with <= 16 values and the zeros.
if $Q "$P" --centroids 16 --skip-last --finetune-epochs 2 --finetune-lr-params 0.02 --bn-recalibrate 2 \
      -o "$T/ftp.h5" --json "$T/ftp.json" >/dev/null 2>&1; then
    lp=$(num finetune_lr_params "$T/ftp.json"); nt=$(num finetune_trained_tensors "$T/ftp.json")
    [ "$lp" = 0.02 ] && [ "${nt:-0}" -gt 0 ] && ok "fine-tuning with --finetune-lr-params ($nt tensors)" \
        || bad "fine-tuning with --finetune-lr-params" "json lr_params ${lp:-?}, tensors ${nt:-?}"
    h5dump -d /history "$T/ftp.h5" 2>/dev/null | grep -q 'lr-params 0.02' \
        && ok "history line names lr-params" || bad "history line names lr-params" "missing"
else bad "fine-tuning with --finetune-lr-params" "failed"; fi
if have_h5py && [ -f "$T/ftp.h5" ]; then
    if out=$(km_py "$T/ftp.h5" <<'EOF' 2>&1
with h5py.File(sys.argv[1], "r") as f:
    q = f["quant"]
    assert "fc3.weight" not in q and len(q) == 3, list(q)  # first and last layers in fp32
    for name, g in q.items():
        km_check(f, name, g)
    w, m = f["params/fc3.weight"][()], f["masks/fc3.weight"][()].astype(bool)
    assert (w[~m] == 0).all(), "fc zeros"
print("ok")
EOF
    ) && [ "$out" = ok ]; then ok "python: lr-params file decodes, zeros, <= 16 values"
    else bad "python check (lr-params)" "$out"; fi
fi

# --- row scales --------------------------------------------------------------------------
if $Q "$P" --row-scale -o "$T/rs.h5" --json "$T/rs.json" >/dev/null 2>&1 \
   && grep -q '"row_scale": *true' "$T/rs.json" && grep -q '"centroids": *16' "$T/rs.json"; then
    dmax=$(num max_distinct_nonzero_values "$T/rs.json")
    [ -n "$dmax" ] && [ "$dmax" -le 16 ] && ok "--row-scale: k-means 16, at most 16 values per row ($dmax)" \
        || bad "--row-scale distinct per row" "${dmax:-?}"
else bad "--row-scale" "failed or json without row_scale"; fi
if $Q "$P" --centroids 16 --row-scale --finetune-epochs 1 --finetune-lr-params 0.02 --bn-recalibrate 2 \
      -o "$T/rsft.h5" --json "$T/rsft.json" >/dev/null 2>&1 && grep -q '"row_scale": *true' "$T/rsft.json"; then
    ok "--row-scale with fine-tuning"
else bad "--row-scale with fine-tuning" "failed"; fi
h5dump -d /history "$T/rs.h5" 2>/dev/null | grep -q 'row scales' && ok "history names row scales" \
    || bad "history names row scales" "missing"
if have_h5py; then
    for f in rs rsft; do
        if out=$("$PY" - "$T/$f.h5" <<'EOF' 2>&1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    q = f["quant"]
    assert q.attrs["version"] == 2 and q.attrs["row_scale"] == 1 and q.attrs["k"] == 16, dict(q.attrs)
    for name, g in q.items():
        cb, s = g["codebook"][()], g["row_scale"][()]
        w = f["params"][name][()]
        assert cb.dtype == np.float16 and s.dtype == np.float16 and s.shape == (w.shape[0],), name
        assert (s > 0).all(), name
        m = f["masks"][name][()].astype(bool) if name in f["masks"] else np.ones(w.shape, bool)
        shape = (-1,) + (1,) * (w.ndim - 1)
        dec = cb.astype(np.float32)[g["indices"][()]] * s.astype(np.float32).reshape(shape)
        assert np.array_equal(np.where(m, dec, np.float32(0)), w), name
        assert (w[~m] == 0).all(), name
        rows = w.reshape(w.shape[0], -1)
        assert max(len(np.unique(r[r != 0])) for r in rows) <= 16, name
print("ok")
EOF
        ) && [ "$out" = ok ]; then ok "python: $f.h5 decodes codebook * row scale, zeros, <= 16 per row"
        else bad "python check ($f.h5)" "$out"; fi
    done
    if $BIN/export -q "$T/rsft.h5" -o "$T/rs.csr.h5" >/dev/null 2>&1; then
        out=$("$PY" tests/export_check.py "$T/rs.csr.h5" "$T/rsft.h5" 2>&1)
        grep -qE ' [1-9][0-9]* passed, 0 failed' <<<"$out" && grep -q codebook4 <<<"$out" \
            && ok "export of a row-scaled model: codebook4 values == quantized weights" \
            || bad "export check (row scales)" "$out"
    else bad "export of a row-scaled model" "failed"; fi
else
    SKIP=$((SKIP + 1)); echo "skip row-scale python checks (no h5py)"
fi

# --- sensitivity-weighted k-means (the empirical Fisher diagonal) -----------------------
grep -q '"kmeans_weight": *"fisher"' "$T/k.json" && [ "$(num fisher_batches "$T/k.json")" = 32 ] \
    && ok "json: Fisher-weighted k-means by default (kmeans_weight fisher, 32 batches)" \
    || bad "json kmeans_weight default" "missing or wrong"
if $Q "$P" --centroids 16 --kmeans-weight none --bn-recalibrate 2 -o "$T/kn.h5" --json "$T/kn.json" >/dev/null 2>&1 \
   && grep -q '"kmeans_weight": *"none"' "$T/kn.json" && [ "$(num fisher_batches "$T/kn.json")" = 0 ]; then
    ok "--kmeans-weight none: plain k-means (fisher_batches 0)"
else bad "--kmeans-weight none" "failed or json wrong"; fi
if $Q "$P" --bits 8 -o "$T/b8auto.h5" --json "$T/b8auto.json" >/dev/null 2>&1 \
   && ! grep -q '"kmeans_weight": *"fisher"' "$T/b8auto.json"; then
    ok "--bits 8: no Fisher pass by default"
else bad "--bits 8 default kmeans-weight" "fisher or failed"; fi
if out=$($Q "$P" --kmeans-weight fisher --fisher-batches 4 --batch 64 --bn-recalibrate 2 -o "$T/fi.h5" \
         --json "$T/fi.json" 2>&1) && grep -q '"kmeans_weight": *"fisher"' "$T/fi.json" \
   && [ "$(num fisher_batches "$T/fi.json")" = 4 ]; then
    dmax=$(num max_distinct_nonzero_values "$T/fi.json")
    [ -n "$dmax" ] && [ "$dmax" -le 16 ] && ok "--kmeans-weight fisher: at most 16 values per layer ($dmax; Fisher pass $(num fisher_seconds "$T/fi.json") s)" \
        || bad "--kmeans-weight fisher distinct" "${dmax:-?}"
    grep -q 'quantized lenet (Fisher-weighted k-means 16' <<<"$out" && ok "text names Fisher-weighted k-means" \
        || bad "text names Fisher-weighted k-means" "$(tail -n 1 <<<"$out")"
else bad "--kmeans-weight fisher" "failed or json without kmeans_weight/fisher_batches: $(tail -n 1 <<<"$out")"; fi
h5dump -d /history "$T/fi.h5" 2>/dev/null | grep -q 'Fisher-weighted k-means 16.*kmeans-weight fisher 4 batches' \
    && ok "history names the Fisher weighting" || bad "history names the Fisher weighting" "missing"
if $Q "$P" --kmeans-weight fisher --row-scale --fisher-batches 3 --batch 64 --bn-recalibrate 2 -o "$T/firs.h5" \
      --json "$T/firs.json" >/dev/null 2>&1 && grep -q '"row_scale": *true' "$T/firs.json"; then
    dmax=$(num max_distinct_nonzero_values "$T/firs.json")
    [ -n "$dmax" ] && [ "$dmax" -le 16 ] && ok "--kmeans-weight fisher --row-scale: at most 16 values per row ($dmax)" \
        || bad "--kmeans-weight fisher --row-scale distinct" "${dmax:-?}"
else bad "--kmeans-weight fisher --row-scale" "failed"; fi
if have_h5py && [ -f "$T/fi.h5" ] && [ -f "$T/kn.h5" ]; then
    if out=$(km_py "$T/fi.h5" "$T/kn.h5" <<'EOF' 2>&1
differ = 0
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "r") as plain:
    q = f["quant"]
    assert q.attrs["method"] == b"kmeans" and q.attrs["k"] == 16 and len(q) == 4, dict(q.attrs)
    for name, g in q.items():
        km_check(f, name, g)
        cb = g["codebook"][()].astype(np.float32)
        differ += not np.array_equal(np.sort(cb), np.sort(plain["quant"][name]["codebook"][()].astype(np.float32)))
assert differ > 0, "every codebook equals plain k-means'"
print("ok")
EOF
    ) && [ "$out" = ok ]; then ok "python: Fisher-weighted file decodes, zeros, <= 16 values, codebooks differ from plain"
    else bad "python check (Fisher)" "$out"; fi
fi

# --- a model without weights --------------------------------------------------------------
if have_h5py; then
    "$PY" - "$P" "$T/empty.h5" <<'EOF' >/dev/null 2>&1
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    del f["net/description"]
    f["net"].create_dataset("description", data="gap\n", dtype=h5py.string_dtype())
    f.attrs["classes"] = 3
    for g in ("params", "masks", "buffers"):
        for k in list(f[g]): del f[g][k]
    if "optimizer" in f: del f["optimizer"]
import zlib  # re-seal the checksum block (docs/model-format.md) after the edit
data = open(sys.argv[2], "rb").read()
with open(sys.argv[2], "r+b") as g:
    g.write(b"sparsecnn-crc32 %08x %d\n" % (zlib.crc32(data[512:]), len(data) - 512))
EOF
    expect_fail "model without weights" 1 '^quantize: .*no conv or linear weights.*empty.h5' $Q "$T/empty.h5"
else
    SKIP=$((SKIP + 1)); echo "skip model without weights (no h5py)"
fi
$Q --help | grep -qE -- '--centroids.*' && $Q --help | grep -qE -- '--init.*linear' \
    && ok "help lists the options" || bad "help" "options missing"
$Q --help | grep -qE -- '--finetune-distill.*on\|off' && $Q --help | grep -qE -- '--finetune-alpha' \
    && ok "help lists the distillation options" || bad "help" "distillation options missing"
$Q --help | grep -qE -- '--kmeans-weight auto\|fisher\|none' && $Q --help | grep -qE -- '--fisher-batches N' \
    && ok "help lists --kmeans-weight and --fisher-batches" || bad "help" "Fisher options missing"
summary
