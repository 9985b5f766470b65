#!/usr/bin/env bash
# CLI tests of `prune` on synthetic data on the CPU: bad input gives one line
# `prune: ...` and a non-zero exit; a run stopped after iteration 2 and
# continued with --resume ends bitwise equal to an uninterrupted one; the
# run directory holds the model, the history and the plot; with
# --min-layer-sparsity every pruned layer ends at the floor, the target is
# still met, a floor of 0 changes nothing and a resumed run keeps the floor;
# --layer-floor refuses bad SPECs and floors over the budget (exit 2), holds
# every layer at its own floor (one above the target) for evolve and gmp,
# reports "layer_floor" and each layer's "floor" in the JSON, and a resumed
# run keeps it; --distill needs --from, is reported and changes the training.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
PR="$BIN/prune --device cpu --quiet --data-dir $T/data --runs $T/runs"
TINY="--model lenet --population 3 --iterations 4 --batches 2 --batch 32 --val-size 200 --scan-images 64"

# --- bad usage (exit 2) ---------------------------------------------------------
expect_fail "unknown method" 2 '^prune: .*method' $PR --method magic synthetic
expect_fail "sparsity 1" 2 '^prune: .*target-sparsity' $PR --target-sparsity 1 synthetic
expect_fail "sparsity 1.5" 2 '^prune: .*target-sparsity' $PR --target-sparsity 1.5 synthetic
expect_fail "negative sparsity" 2 '^prune: .*target-sparsity' $PR --target-sparsity -0.1 synthetic
expect_fail "population 0" 2 '^prune: .*population' $PR --population 0 synthetic
expect_fail "population abc" 2 '^prune: .*population' $PR --population abc synthetic
expect_fail "unknown option" 2 '^prune: .*--frobnicate' $PR --frobnicate synthetic
expect_fail "two datasets" 2 '^prune: ' $PR synthetic cifar10
expect_fail "resume with a dataset" 2 '^prune: .*resume' $PR --resume synthetic

# --- bad input (exit 1) ---------------------------------------------------------
expect_fail "unknown model" 1 '^prune: .*resnet19' $PR --model resnet19 synthetic
expect_fail "missing from" 1 '^prune: .*nothere.h5' $PR --from "$T/nothere.h5" synthetic
echo "not hdf5" >"$T/junk.h5"
expect_fail "corrupt model" 1 '^prune: .*junk.h5' $PR --from "$T/junk.h5" synthetic
expect_fail "resume without runs" 1 '^prune: .*no previous run' $PR --resume
expect_fail "bad epochs" 2 '^prune: .*epochs' $PR --method gmp --epochs x synthetic
expect_fail "bad halve-every" 2 '^prune: .*halve-every' $PR --halve-every 1.5 synthetic
expect_fail "fp16 on cpu" 1 '^prune: .*fp16' $PR --precision fp16 synthetic

# A tiny model to start from (pruned from scratch in one round).
$PR --model lenet --population 1 --iterations 1 --batches 2 --batch 32 --val-size 200 \
    --target-sparsity 0.1 -o "$T/m.h5" synthetic >/dev/null 2>&1 || bad "tiny model" "prune from scratch failed"
expect_fail "model of another arch" 1 '^prune: .*lenet.*resnet20' $PR --from "$T/m.h5" --model resnet20 synthetic
expect_fail "model of another dataset" 1 '^prune: .*synthetic.*cifar10' $PR --from "$T/m.h5" cifar10
head -c 20000 "$T/m.h5" >"$T/trunc.h5"
expect_fail "truncated model" 1 '^prune: .*trunc.h5' $PR --from "$T/trunc.h5" synthetic
expect_fail "holdout as large as val" 1 '^prune: .*held-out split too large' $PR --from "$T/m.h5" --holdout 200 synthetic
# --holdout: a part of the validation split kept out of the fitness, reported at the end.
$PR --from "$T/m.h5" --population 2 --iterations 1 --batches 2 --batch 32 --holdout 80 --target-sparsity 0.2 \
    -o "$T/h.h5" --json "$T/h.json" synthetic >/dev/null 2>&1 || bad "holdout run" "failed"
if grep -qE '"holdout_accuracy": *[0-9.]+' "$T/h.json" && grep -qE '"holdout_images": *80' "$T/h.json"
then ok "holdout accuracy reported"; else bad "holdout accuracy reported" "$(grep -o '"holdout[^,]*' "$T/h.json" 2>/dev/null)"; fi
if $PR --help | grep -qE -- '--population.*8'; then ok "help lists defaults"; else bad "help lists defaults" "no --population default"; fi
# --distill: needs --from and an ALPHA in [0, 1]; a run records it and trains otherwise than without it
expect_fail "distill without from" 2 '^prune: .*--distill needs --from' $PR --distill 0.5 synthetic
expect_fail "distill 1.5" 2 '^prune: .*distill' $PR --from "$T/m.h5" --distill 1.5 synthetic
DARGS="--from $T/m.h5 --population 2 --iterations 2 --batches 2 --batch 32 --target-sparsity 0.5 --seed 4"
$PR $DARGS -o "$T/d0.h5" --json "$T/d0.json" synthetic >/dev/null 2>&1 || bad "run without --distill" "failed"
$PR $DARGS --distill 0.5 -o "$T/d1.h5" --json "$T/d1.json" synthetic >/dev/null 2>&1 || bad "--distill run" "failed"
if grep -qE '"distill_alpha": *0.5' "$T/d1.json" && grep -qE '"distill_alpha": *null' "$T/d0.json"
then ok "distill_alpha reported"; else bad "distill_alpha reported" "$(grep -ho '"distill_alpha[^,]*' "$T"/d?.json)"; fi
if [ -f "$T/d0.h5" ] && [ -f "$T/d1.h5" ] && ! h5diff -q "$T/d0.h5" "$T/d1.h5" /params /params
then ok "distillation changes the training"; else bad "distillation changes the training" "same params or no model"; fi

# --- stopped after iteration 2, resumed == uninterrupted ---------------------------
# (population 3: racing trains only the best solution from iteration 2 on)
ARGS="$TINY --from $T/m.h5 --target-sparsity 0.8 --finetune 1 --seed 3"
$PR $ARGS -o "$T/a.h5" --json "$T/a.json" >/dev/null 2>&1 || bad "uninterrupted run" "failed"
$PR $ARGS -o "$T/b.h5" --stop-after 2 --json "$T/b.json" >/dev/null 2>&1 || bad "stopped run" "failed"
if [ -f "$T/b.h5" ]; then bad "stopped run" "wrote a model"; fi
if [ -f "$T/b.state" ] && grep -q '"finished": *false' "$T/b.json" && grep -q '"iterations_done": *2' "$T/b.json"
then ok "stopped after iteration 2 with a state file"; else bad "stopped after iteration 2" "$(cat "$T/b.json" 2>/dev/null)"; fi
$BIN/prune --device cpu --quiet --resume -o "$T/b.h5" --json "$T/b.json" >/dev/null 2>&1 || bad "resume" "failed"
if h5diff -q "$T/a.h5" "$T/b.h5" /params /params && h5diff -q "$T/a.h5" "$T/b.h5" /masks /masks \
   && h5diff -q "$T/a.h5" "$T/b.h5" /buffers /buffers; then ok "resume is bitwise equal"
else bad "resume is bitwise equal" "params differ"; fi
# a finished run removes its resumable state (also when finished by --resume);
# --keep-state keeps it; the model carries no optimizer state (--resume reads the state)
if [ ! -e "$T/a.state" ] && [ ! -e "$T/b.state" ]; then ok "finished runs remove their state"
else bad "finished runs remove their state" "$(ls "$T"/*.state 2>/dev/null)"; fi
h5ls "$T/a.h5/optimizer" >/dev/null 2>&1 && bad "no optimizer state in the pruned model" "/optimizer in a.h5" \
    || ok "no optimizer state in the pruned model"
$PR $ARGS --keep-state -o "$T/k.h5" >/dev/null 2>&1 || bad "--keep-state run" "failed"
[ -s "$T/k.state" ] && ok "--keep-state keeps the state" || bad "--keep-state keeps the state" "no k.state"
va=$(grep -oE '"test_accuracy": *[0-9.]+' "$T/a.json"); vb=$(grep -oE '"test_accuracy": *[0-9.]+' "$T/b.json")
[ -n "$va" ] && [ "$va" = "$vb" ] && ok "same test accuracy ($va)" || bad "same test accuracy" "$va vs $vb"
sp=$(grep -oE '"sparsity": *[0-9.]+' "$T/a.json" | head -n 1 | grep -oE '[0-9.]+$')
awk -v s="${sp:-0}" 'BEGIN { exit !(s > 0.799 && s < 0.801) }' && ok "target reached ($sp)" || bad "target reached" "sparsity ${sp:-?}"
ms=$(grep -oE '"mac_sparsity": *[0-9.]+' "$T/a.json" | grep -oE '[0-9.]+$')
awk -v s="${ms:--1}" 'BEGIN { exit !(s > 0 && s < 0.8) }' && ok "compute pruned below the weights: the unpruned first conv ($ms)" ||
    bad "mac_sparsity" "${ms:-missing}"
for k in tool dataset model output val_accuracy test_accuracy sparsity mac_sparsity images_per_second seconds history layers; do
    grep -q "\"$k\"" "$T/a.json" || bad "json has $k" "missing"
done
grep -q '"tool": *"prune"' "$T/a.json" && ok "json summary" || bad "json summary" "no tool"

# --- --min-layer-sparsity: every pruned layer at the floor, 0 == none, resume keeps it ---
expect_fail "floor above target" 2 '^prune: .*min-layer-sparsity' $PR --target-sparsity 0.5 --min-layer-sparsity 0.6 synthetic
expect_fail "negative floor" 2 '^prune: .*min-layer-sparsity' $PR --min-layer-sparsity -0.1 synthetic
expect_fail "floor abc" 2 '^prune: .*min-layer-sparsity' $PR --min-layer-sparsity abc synthetic
# layer_margin JSON FLOOR: the smallest zeros - FLOOR * weights over the pruned layers.
layer_margin() {
    awk -v f="$2" '/"layers"/ { on = 1 } /"history"/ { on = 0 }
        on && /"weights"/ { gsub(/[^0-9]/, ""); w = $0 }
        on && /"nonzeros"/ { gsub(/[^0-9]/, ""); z = $0 }
        on && /"pruned": *true/ { m = (w - z) - f * w; if (min == "" || m < min) min = m }
        END { print min }' "$1"
}
$PR $ARGS --min-layer-sparsity 0 -o "$T/z.h5" >/dev/null 2>&1 || bad "floor 0 run" "failed"
h5diff -q "$T/a.h5" "$T/z.h5" /params /params && h5diff -q "$T/a.h5" "$T/z.h5" /masks /masks \
    && ok "floor 0 == no floor, bitwise" || bad "floor 0 == no floor, bitwise" "params differ"
FL="$ARGS --min-layer-sparsity 0.75"
$PR $FL -o "$T/f.h5" --json "$T/f.json" >/dev/null 2>&1 || bad "floor run" "failed"
mf=$(layer_margin "$T/f.json" 0.75); ma=$(layer_margin "$T/a.json" 0.75)
awk -v m="${mf:--9}" 'BEGIN { exit !(m >= -1) }' && ok "every layer at the floor ($mf)" || bad "every layer at the floor" "margin ${mf:-?} weights"
awk -v m="${ma:-0}" 'BEGIN { exit !(m < -1) }' && ok "the floor binds (without: $ma)" || bad "the floor binds" "margin ${ma:-?} without it"
fs=$(grep -oE '"sparsity": *[0-9.]+' "$T/f.json" | head -n 1 | grep -oE '[0-9.]+$')
awk -v s="${fs:-0}" 'BEGIN { exit !(s > 0.799 && s < 0.801) }' && ok "target reached with a floor ($fs)" || bad "target with a floor" "sparsity ${fs:-?}"
grep -qE '"min_layer_sparsity": *0.75' "$T/f.json" && grep -qE '"min_layer_sparsity": *0[,.]?' "$T/a.json" \
    && ok "json min_layer_sparsity" || bad "json min_layer_sparsity" "missing"
$PR $FL -o "$T/fs.h5" --stop-after 2 >/dev/null 2>&1 || bad "floor, stopped run" "failed"
$BIN/prune --device cpu --quiet --resume --keep-state -o "$T/fs.h5" --json "$T/fs.json" >/dev/null 2>&1 || bad "floor, resume" "failed"
h5diff -q "$T/f.h5" "$T/fs.h5" /params /params && h5diff -q "$T/f.h5" "$T/fs.h5" /masks /masks \
    && grep -qE '"min_layer_sparsity": *0.75' "$T/fs.json" && ok "resume keeps the floor" || bad "resume keeps the floor" "differs"
expect_fail "resume: floor above the stored target" 2 '^prune: .*min-layer-sparsity' \
    $BIN/prune --device cpu --quiet --resume -o "$T/fs.h5" --min-layer-sparsity 0.85

# --- --layer-floor: per-layer floors (conv2 and fc3 above the target) ---------------
LFB="$PR --model lenet --target-sparsity 0.8"
expect_fail "layer floor without =" 2 "^prune: --layer-floor: no '='" $LFB --layer-floor conv2 synthetic
expect_fail "layer floor empty prefix" 2 '^prune: --layer-floor: empty prefix' $LFB --layer-floor =0.5 synthetic
expect_fail "layer floor not a number" 2 '^prune: --layer-floor: not a number' $LFB --layer-floor fc1=x synthetic
expect_fail "layer floor above 0.995" 2 '^prune: --layer-floor: floor outside' $LFB --layer-floor fc1=0.999 synthetic
expect_fail "layer floor negative" 2 '^prune: --layer-floor: floor outside' $LFB --layer-floor fc1=-0.1 synthetic
expect_fail "layer floor duplicate" 2 "^prune: --layer-floor: prefix 'fc1' given twice" $LFB --layer-floor fc1=0.5,fc1=0.6 synthetic
expect_fail "layer floor no such layer" 2 "^prune: --layer-floor: prefix 'conv1' matches no prunable layer" \
    $LFB --layer-floor conv2=0.9,conv1=0.5 synthetic
expect_fail "layer floor over budget" 2 '^prune: --layer-floor: .*need an overall sparsity of at least 0.7750' \
    $PR --model lenet --target-sparsity 0.5 --layer-floor fc1=0.99 synthetic
# own_margin JSON: the smallest zeros - floor * weights over the layers with a "floor".
own_margin() {
    awk '/"layers"/ { on = 1 } /"history"/ { on = 0 }
        on && /"weights"/ { gsub(/[^0-9]/, ""); w = $0 }
        on && /"nonzeros"/ { gsub(/[^0-9]/, ""); z = $0 }
        on && /"floor"/ { sub(/.*: */, ""); m = (w - z) - $0 * w; if (min == "" || m < min) min = m }
        END { print min }' "$1"
}
LF="$ARGS --layer-floor conv2=0.95,fc3=0.9,fc=0.5"
for meth in evolve gmp; do
    $PR $LF --method $meth -o "$T/l$meth.h5" --json "$T/l$meth.json" >"$T/l$meth.out" 2>&1 || bad "layer floor $meth run" "failed"
    m=$(own_margin "$T/l$meth.json")
    awk -v m="${m:--9}" 'BEGIN { exit !(m >= -0.5) }' && ok "$meth: every layer at its own floor ($m)" || bad "$meth: layer floors" "margin ${m:-?} weights"
    ls=$(grep -oE '"sparsity": *[0-9.]+' "$T/l$meth.json" | head -n 1 | grep -oE '[0-9.]+$')
    awk -v s="${ls:-0}" 'BEGIN { exit !(s > 0.799 && s < 0.801) }' && ok "$meth: target with layer floors ($ls)" || bad "$meth: target with layer floors" "sparsity ${ls:-?}"
    c2=$(grep -A4 '"conv2.weight"' "$T/l$meth.json" | grep -oE '"sparsity": *[0-9.]+' | grep -oE '[0-9.]+$')
    awk -v s="${c2:-0}" 'BEGIN { exit !(s >= 0.9499) }' && ok "$meth: conv2 above the target ($c2)" || bad "$meth: conv2 floor" "${c2:-?}"
done
grep -qE '"layer_floor": *"conv2=0.95,fc3=0.9,fc=0.5"' "$T/levolve.json" && grep -qE '"layer_floor": *null' "$T/a.json" \
    && ok "json layer_floor" || bad "json layer_floor" "$(grep -o '"layer_floor[^,]*' "$T/levolve.json")"
[ "$(grep -c '"floor": 0.95' "$T/levolve.json")" = 1 ] && [ "$(grep -c '"floor": 0.5' "$T/levolve.json")" = 2 ] \
    && ok "json per-layer floor" || bad "json per-layer floor" "$(grep '"floor"' "$T/levolve.json" | tr -d ' \n')"
grep -q 'layer floors (--layer-floor conv2=0.95,fc3=0.9,fc=0.5).*every layer at or above' "$T/levolve.out" \
    && ok "summary line" || bad "summary line" "$(grep 'layer floors' "$T/levolve.out")"
$PR $LF -o "$T/ls.h5" --stop-after 2 >/dev/null 2>&1 || bad "layer floor, stopped run" "failed"
$BIN/prune --device cpu --quiet --resume -o "$T/ls.h5" --json "$T/ls.json" >/dev/null 2>&1 || bad "layer floor, resume" "failed"
h5diff -q "$T/levolve.h5" "$T/ls.h5" /params /params && h5diff -q "$T/levolve.h5" "$T/ls.h5" /masks /masks \
    && grep -qE '"layer_floor": *"conv2=0.95' "$T/ls.json" && ok "resume keeps the layer floors" || bad "resume keeps the layer floors" "differs"

# --- run directory: model, history, plot; gmp reaches its target ---------------------
$PR $TINY --method gmp --from "$T/m.h5" --target-sparsity 0.7 --json "$T/g.json" >/dev/null 2>&1 || bad "gmp run" "failed"
D=$T/runs/latest
[ -f "$D/model.pruned.h5" ] && ok "runs/latest/model.pruned.h5" || bad "runs/latest/model.pruned.h5" "missing"
rows=$(grep -c . "$D/prune_history.csv" 2>/dev/null)
[ "${rows:-0}" -ge 3 ] && head -n 1 "$D/prune_history.csv" | grep -q best_val_accuracy && ok "history csv ($rows lines)" || bad "history csv" "${rows:-0} lines"
[ -f "$D/prune_history.json" ] && ok "history json" || bad "history json" "missing"
{ [ -s "$D/prune_plot.png" ] || grep -q '<svg' "$D/prune_plot.svg" 2>/dev/null; } && ok "plot" || bad "plot" "missing"
gs=$(grep -oE '"sparsity": *[0-9.]+' "$T/g.json" | head -n 1 | grep -oE '[0-9.]+$')
awk -v s="${gs:-0}" 'BEGIN { exit !(s > 0.699 && s < 0.701) }' && ok "gmp target ($gs)" || bad "gmp target" "sparsity ${gs:-?}"
h5dump -d /history "$D/model.pruned.h5" 2>/dev/null | grep -q 'prune: method gmp' && ok "history line in the model" || bad "history line in the model" "missing"
summary
