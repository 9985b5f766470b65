#!/usr/bin/env bash
# The latency objective on the GPU machine (docs/prune.md, "Latency objective"):
#   bench/prune_latency.sh [TARGET] [SEED]          (TARGET: ms or Nx, default 2x; SEED default 1)
# 1. gpu_test_latency (measures a resnet20 table in fp16 and fp32);
# 2. prune --objective latency from the trained resnet18 (/root/r18.h5, trained when
#    missing), which measures the table (cached as /tmp/lat-*_latency.json) and at the
#    end measures the winner and prints the prediction error;
# 3. prune --objective sparsity at the overall sparsity the latency run used, same seed
#    and images; then export and deploy both winners (deploy's own end-to-end timing
#    against the dense engine, the yardstick the objective is meant to beat).
# Expects build/bin/{train,prune,export,deploy} and CIFAR-100 under /root/data
# (docs/architecture.md, Running on the GPU machine). Keep each call under 10 minutes:
# ITER (default 12) search iterations per run.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-2x}; seed=${2:-1}; it=${ITER:-12}
out=${OUT:-bench/out}; mkdir -p "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
build/tests/gpu_test_latency
[ -f /root/r18.h5 ] || build/bin/train --quiet --model resnet18 -o /root/r18.h5 cifar100
common="--from /root/r18.h5 --seed $seed --lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --population 8 --iterations $it --runs /tmp/runs"
build/bin/prune $common --objective latency --latency-target "$target" -o /tmp/lat.h5 --json "$out/lat.json" cifar100 \
    | grep -E '^(latency|pruned)'
sp=$(python3 -c "import json; print(json.load(open('$out/lat.json'))['target_sparsity'])")
build/bin/prune $common --objective sparsity --target-sparsity "$sp" -o /tmp/spa.h5 --json "$out/spa.json" cifar100 \
    | grep -E '^pruned'
for m in lat spa; do
    build/bin/export --quiet -o "/tmp/$m.csr.h5" "/tmp/$m.h5"
    build/bin/deploy --quiet --json "$out/deploy-$m.json" "/tmp/$m.csr.h5" cifar100 | tail -n 3
done
