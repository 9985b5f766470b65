#!/usr/bin/env bash
# CLI test of a net with channel concatenations (the concat layer kind) on
# synthetic data on the CPU: a tiny DenseNet-style description trains two
# epochs and learns, a oneshot prune keeps it running, export writes it, and
# deploy's CPU path runs it with the pruned model's test accuracy.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
COMMON="--device cpu --quiet --data-dir $T/data --runs $T/runs"
cat >"$T/dense.txt" <<'NET'
conv 8 3 pad=1 name=c0
relu name=r0
conv 8 3 pad=1
relu
concat r0 name=d1        # 16 channels
maxpool 2 name=p1
conv 8 3 pad=1
relu
concat r0                # r0 is 32x32, this block 16x16: refused
NET
expect_fail "concat of different sizes" 1 '^train: .*line 9: concat: r0 is 32x32' \
    $BIN/train $COMMON --model "$T/dense.txt" synthetic
sed -i 's/^concat r0  .*/concat p1 name=d2/' "$T/dense.txt"
printf 'gap\nlinear classes\n' >>"$T/dense.txt"
$BIN/train $COMMON --model "$T/dense.txt" --epochs 2 --batch 100 --val-size 200 --seed 2 \
    --json "$T/t.json" synthetic >/dev/null 2>&1 || bad "train" "failed"
loss=$(grep -oE '"train_loss": *[0-9.]+' "$T/t.json" 2>/dev/null | grep -oE '[0-9.]+$' | tr '\n' ' ')
acc=$(grep -oE '"val_accuracy": *[0-9.]+' "$T/t.json" 2>/dev/null | tail -n 1 | grep -oE '[0-9.]+$')
# Two epochs of a net this small: the loss falls and accuracy leaves chance (10%).
awk -v l="$loss" -v a="${acc:-0}" 'BEGIN { n = split(l, v, " "); exit !(n == 2 && v[2] < v[1] && a > 13) }' \
    && ok "concat net learns synthetic (loss $loss, val $acc%)" \
    || bad "concat net learns synthetic" "loss ${loss:-?}, val ${acc:-?}%"
$BIN/prune $COMMON --method oneshot --from latest --target-sparsity 0.5 --epochs 0.1 --batch 100 \
    --val-size 200 --json "$T/p.json" synthetic >/dev/null 2>&1 && ok "prune" || bad "prune" "failed"
$BIN/export --quiet --runs "$T/runs" >/dev/null 2>&1 && ok "export" || bad "export" "failed"
$BIN/deploy --device cpu --quiet --chart none --data-dir "$T/data" --runs "$T/runs" --json "$T/d.json" \
    >/dev/null 2>&1 && ok "deploy runs concat" || bad "deploy runs concat" "failed"
pa=$(grep -oE '"test_accuracy": *[0-9.]+' "$T/p.json" 2>/dev/null | tail -n 1 | grep -oE '[0-9.]+$')
da=$(grep -oE '"test_accuracy": *[0-9.]+' "$T/d.json" 2>/dev/null | head -n 1 | grep -oE '[0-9.]+$')
[ -n "$pa" ] && awk -v a="$pa" -v b="${da:-x}" 'BEGIN { exit !(a + 0 == b + 0) }' \
    && ok "deploy's accuracy is the pruned model's ($da%)" || bad "deploy accuracy" "prune ${pa:-?}%, deploy ${da:-?}%"
summary
