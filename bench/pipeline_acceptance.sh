#!/usr/bin/env bash
# Issues 4-6 on the GPU machine: the whole chain on real CIFAR-100 with the
# tools' own commands, logs and JSON summaries into $OUT/pipe (tarred at the end):
#   bench/pipeline_acceptance.sh models    train resnet18 + vgg16, prune them (0.9; resnet18
#                                          also 0.95), quantize resnet18-0.9 three ways, export
#   bench/pipeline_acceptance.sh deploy    deploy every export (fp32 and fp16 plans)
# Expects build/bin/* and CIFAR-100 under /root/data (docs/architecture.md, Running on the GPU machine); models
# are kept in /root/pipe between the two steps (same machine, back-to-back calls).
set -euo pipefail
cd "$(dirname "$0")/.."
step=$1
B=build/bin; M=/root/pipe; out=${OUT:-bench/out}/pipe
mkdir -p "$M" "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
log() { echo "== $*"; "$@" 2>&1 | tee -a "$out/log.txt" | tail -n 25; }
PR="--lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --iterations 24 --population 8 --quiet --runs /tmp/runs"
if [ "$step" = models ]; then
    log $B/train --quiet --model resnet18 -o $M/r18.h5 --json $out/train-r18.json cifar100
    log $B/train --quiet --model vgg16 -o $M/vgg16.h5 --json $out/train-vgg16.json cifar100
    log $B/prune --from $M/r18.h5 --target-sparsity 0.9 $PR -o $M/r18-90.h5 --json $out/prune-r18-90.json cifar100
    log $B/prune --from $M/r18.h5 --target-sparsity 0.95 $PR -o $M/r18-95.h5 --json $out/prune-r18-95.json cifar100
    log $B/prune --from $M/vgg16.h5 --target-sparsity 0.9 $PR -o $M/vgg16-90.h5 --json $out/prune-vgg16-90.json cifar100
    log $B/quantize --quiet $M/r18-90.h5 --centroids 16 -o $M/r18-90-k16.h5 --json $out/quant-k16.json
    log $B/quantize --quiet $M/r18-90.h5 --bits 8 -o $M/r18-90-b8.h5 --json $out/quant-b8.json
    log $B/quantize --quiet $M/r18-90.h5 --centroids 16 --finetune-epochs 3 -o $M/r18-90-k16ft.h5 --json $out/quant-k16ft.json
    for m in r18-90 r18-95 vgg16-90; do
        log $B/export --quiet $M/$m.h5 -o $M/$m.csr.h5 --json $out/export-$m.json
    done
    log $B/export --quiet $M/r18-90-k16ft.h5 -o $M/r18-90-k16ft.csr.h5 --json $out/export-r18-90-k16ft.json
else
    for m in r18-90 vgg16-90; do
        log $B/deploy --quiet $M/$m.csr.h5 --reference all --json $out/deploy-$m.json --chart $out/deploy-$m.svg
    done
    for m in r18-95 r18-90-k16ft; do
        log $B/deploy --quiet $M/$m.csr.h5 --json $out/deploy-$m.json --chart $out/deploy-$m.svg
    done
fi
tar czf "${OUT:-bench/out}/pipe-$step.tgz" -C "$(dirname "$out")" pipe
