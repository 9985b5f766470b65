#!/usr/bin/env bash
# Issue-3 runs with a larger image budget (ITER iterations of 10 batches of
# 512 per solution-slot, i.e. ITER * 54,613 images in all), evolve with racing
# (--halve-every K) against gmp with the same images, from the start model of
# bench/prune_acceptance.sh (/root/r18.h5, trained when missing):
#   bench/prune_long.sh ITER K SPARSITY...
set -euo pipefail
cd "$(dirname "$0")/.."
it=$1; k=$2; shift 2
out=${OUT:-bench/out}; mkdir -p "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
[ -f /root/r18.h5 ] || build/bin/train --quiet --model resnet18 -o /root/r18.h5 cifar100
for t in "$@"; do
    common="--from /root/r18.h5 --target-sparsity $t --seed 1 --lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --quiet --runs /tmp/runs --population 8 --iterations $it"
    for m in "evolve --halve-every $k" "gmp"; do
        tag="$(echo "$m" | cut -d' ' -f1)-$t-i$it-K$k"
        build/bin/prune $common --method $m -o "/tmp/$tag.h5" --json "$out/$tag.json" cifar100 >/dev/null
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{sys.argv[2]:<22} val {j['val_accuracy']} test {j['test_accuracy']} sparsity {j['sparsity']:.4f} images {j.get('images')} seconds {j['seconds']:.1f}\")" "$out/$tag.json" "$tag"
    done
done
