#!/usr/bin/env bash
# Issue 3, honest choice of search settings: the start model is trained on
# 40,000 images (--val-size 10000); prune's fitness uses 5,000 of the other
# 10,000 and --holdout keeps the remaining 5,000 out of every decision, so the
# settings (racing K, image budget) are chosen on holdout_accuracy, and test
# is only reported. One call per line of ARGS, each well under 10 minutes:
#   bench/prune_select.sh SPARSITY ITER "K..."      e.g. 0.9 24 "0 1 2"
# Expects build/bin/{train,prune} and CIFAR-100 under /root/data; the start
# model is kept in /root/r18-40k.h5 between calls on the same machine.
set -euo pipefail
cd "$(dirname "$0")/.."
t=$1; it=$2; ks=$3
out=${OUT:-bench/out}; mkdir -p "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
M=/root/r18-40k.h5
[ -f $M ] || build/bin/train --quiet --model resnet18 --val-size 10000 -o $M cifar100
common="--from $M --holdout 5000 --target-sparsity $t --seed 1 --lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --quiet --runs /tmp/runs --population 8 --iterations $it"
show() {  # show JSON TAG
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{sys.argv[2]:<22} val {j['val_accuracy']} holdout {j.get('holdout_accuracy')} test {j['test_accuracy']} sparsity {j['sparsity']:.4f} images {j['images']} seconds {j['seconds']:.1f}\")" "$1" "$2"
}
for k in $ks; do
    tag="ev-$t-i$it-K$k"
    build/bin/prune $common --halve-every "$k" -o "/tmp/$tag.h5" --json "$out/$tag.json" cifar100 >/dev/null
    show "$out/$tag.json" "$tag"
done
tag="gmp-$t-i$it"
build/bin/prune $common --method gmp -o "/tmp/$tag.h5" --json "$out/$tag.json" cifar100 >/dev/null
show "$out/$tag.json" "$tag"
