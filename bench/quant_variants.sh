#!/usr/bin/env bash
# Issue 4 on the GPU machine: k-means variants on the 90%-sparse resnet18 of
# bench/pipeline_acceptance.sh (retrained and re-pruned here when missing; both
# are deterministic on the GPU); the choice among variants uses val_accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bin; M=/root/pipe; out=${OUT:-bench/out}/quant; mkdir -p "$M" "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
PR="--lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --iterations 24 --population 8 --quiet --runs /tmp/runs"
[ -f $M/r18.h5 ] || $B/train --quiet --model resnet18 -o $M/r18.h5 cifar100
[ -f $M/r18-90.h5 ] || $B/prune --from $M/r18.h5 --target-sparsity 0.9 $PR -o $M/r18-90.h5 --json $out/prune-r18-90.json cifar100 >/dev/null
q() {  # q TAG ARGS...
    local tag=$1; shift
    $B/quantize --quiet $M/r18-90.h5 "$@" -o $M/q-$tag.h5 --json $out/q-$tag.json > $out/q-$tag.txt 2>&1
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{sys.argv[2]:<14} val {j['val_accuracy_before']} -> {j['val_accuracy']}  test {j['test_accuracy_before']} -> {j['test_accuracy']}  {j['seconds']:.0f} s\")" $out/q-$tag.json $tag
}
q k16bn --centroids 16 --bn-recalibrate 100
q k16ftlr1bn --centroids 16 --finetune-epochs 3 --finetune-lr 1 --bn-recalibrate 50
q k16ftlr03 --centroids 16 --finetune-epochs 3 --finetune-lr 0.03
q k16noskip --centroids 16 --skip-last --bn-recalibrate 100
