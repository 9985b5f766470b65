#!/usr/bin/env bash
# Issue-3 comparison on the GPU machine at one sparsity and seed, all runs with
# the same number of training images (1,310,720), from one start model:
#   bench/prune_acceptance.sh SPARSITY SEED [K...]     (K: --halve-every values; default 0 1 2 6)
# Expects build/bin/{train,prune} and CIFAR-100 under /root/data (docs/architecture.md, Running on the GPU machine);
# trains the start model (resnet18, 45k/5k split, seed 1) into /root/r18.h5 when missing.
# Each run takes about 60-80 s on an H200: keep one call under 10 minutes.
# P1=0 leaves out the population-1 run.
# Prints "method val test images seconds" per run; JSON summaries go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
t=$1; s=$2; shift 2
ks=${*:-0 1 2 6}
out=${OUT:-bench/out}; mkdir -p "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
[ -f /root/r18.h5 ] || build/bin/train --quiet --model resnet18 -o /root/r18.h5 cifar100
common="--from /root/r18.h5 --target-sparsity $t --seed $s --lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --quiet --runs /tmp/runs"
run() {  # run TAG ARGS...
    local tag=$1; shift
    build/bin/prune $common "$@" -o "/tmp/$tag.h5" --json "$out/$tag.json" cifar100 >/dev/null
    python3 - "$out/$tag.json" "$tag" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<16} val {j.get('val_accuracy')} test {j.get('test_accuracy')} "
      f"sparsity {j.get('sparsity')} images {j.get('images')} seconds {j.get('seconds')}")
PY
}
for k in $ks; do run "ev-$t-$s-K$k" --population 8 --iterations 24 --halve-every "$k"; done
[ "${P1:-1}" = 0 ] || run "p1-$t-$s" --population 1 --iterations 192 --finetune 64
run "gmp-$t-$s" --method gmp --population 8 --iterations 24
