#!/usr/bin/env bash
# CLI tests of `train` on synthetic data on the CPU: bad input gives one line
# and the right exit code; an interrupted (SIGKILL) run resumed with --resume
# ends bitwise equal to an uninterrupted one.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
TR="$BIN/train --device cpu --quiet --data-dir $T/data --runs $T/runs"

# --- bad usage (exit 2) and bad input (exit 1) --------------------------------
expect_fail "bad epochs" 2 '^train: .*epochs' $TR --epochs abc synthetic
expect_fail "negative lr" 2 '^train: .*lr' $TR --lr -1 synthetic
expect_fail "unknown option" 2 '^train: .*--frobnicate' $TR --frobnicate synthetic
expect_fail "two datasets" 2 '^train: ' $TR synthetic cifar10
expect_fail "unknown model" 1 '^train: .*resnet19' $TR --model resnet19 synthetic
expect_fail "unknown dataset" 1 '^train: .*imagenet' $TR imagenet
expect_fail "missing cifar100" 1 '^train: .*cifar-100' $TR cifar100
mkdir -p "$T/bad"; head -c 5000 /dev/urandom >"$T/bad/train.bin"; cp "$T/bad/train.bin" "$T/bad/test.bin"
expect_fail "truncated dataset" 1 '^train: .*train.bin' $TR "$T/bad"
printf 'conv 4 3\nfrob\nlinear classes\n' >"$T/net.txt"
expect_fail "bad description" 1 '^train: .*line 2' $TR --model "$T/net.txt" synthetic
echo "not hdf5" >"$T/junk.h5"
expect_fail "resume non-HDF5" 1 '^train: .*junk.h5' $TR --resume -o "$T/junk.h5"
expect_fail "resume without runs" 1 '^train: .*no previous run' $TR --resume
expect_fail "fp16 on cpu" 1 '^train: .*fp16' $TR --precision fp16 synthetic
if $TR --help | grep -q -- '--epochs N.*(default: 30)\|--epochs.*30'; then ok "help lists defaults"; else bad "help lists defaults" "no --epochs default in help"; fi

# --- interrupted run resumed == uninterrupted run ------------------------------
ARGS="--model lenet --epochs 3 --batch 100 --val-size 500 --seed 5 synthetic"
$TR $ARGS -o "$T/a.h5" --json "$T/a.json" >/dev/null 2>&1 || bad "uninterrupted run" "failed"
$TR $ARGS -o "$T/b.h5" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do [ -f "$T/b.h5" ] && break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
if [ ! -f "$T/b.h5" ]; then bad "kill after epoch 1" "no checkpoint"; else
    epoch=$(h5dump -a /state/epoch "$T/b.h5" 2>/dev/null | grep -oE '\(0\): [0-9]+' | grep -oE '[0-9]+$')
    if [ "${epoch:-0}" -ge 1 ] && [ "${epoch:-0}" -lt 3 ]; then ok "killed mid-run at epoch $epoch"
    else bad "killed mid-run" "checkpoint epoch ${epoch:-?}"; fi
    $BIN/train --device cpu --quiet --resume -o "$T/b.h5" >/dev/null 2>&1 || bad "resume" "failed"
    if h5diff -q "$T/a.h5" "$T/b.h5" /params /params && h5diff -q "$T/a.h5" "$T/b.h5" /buffers /buffers \
       && h5diff -q "$T/a.h5" "$T/b.h5" /optimizer /optimizer; then ok "resume is bitwise equal"
    else bad "resume is bitwise equal" "params differ"; fi
fi
grep -q '"test_accuracy"' "$T/a.json" && grep -q '"tool": *"train"' "$T/a.json" && ok "json summary" || bad "json summary" "$(cat "$T/a.json" 2>/dev/null)"
# lenet on 10 classes, counted by hand: conv1 6*3*5*5+6, conv2 16*6*5*5+16, fc1 400*120+120,
# fc2 120*84+84, fc3 84*10+10
grep -qE '"parameters": *62006,' "$T/a.json" && grep -qE '"lr": *0\.05(00000007[0-9]*)?,' "$T/a.json" && ok "json parameters and lr" \
    || bad "json parameters and lr" "$(grep -E 'parameters|"lr"' "$T/a.json")"
acc=$(grep -oE '"val_accuracy": *[0-9.]+' "$T/a.json" | tail -n 1 | grep -oE '[0-9.]+$')
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 30) }' && ok "lenet learns synthetic (val $acc%)" || bad "lenet learns synthetic" "val ${acc:-?}%"

# --- run directory chain ---------------------------------------------------------
$TR --model lenet --epochs 1 --batch 100 synthetic >/dev/null 2>&1
[ -f "$T/runs/latest/model.h5" ] && ok "runs/latest/model.h5" || bad "runs/latest/model.h5" "missing"
summary
