#!/usr/bin/env bash
# The dense engine against PyTorch in one short call, for every MODEL given
# (GPU machine, CIFAR-100 under /root/data/cifar-100-binary, tools under
# build/bin): trains MODEL into /root/MODEL.h5 when missing, exports it
# dense, runs deploy with the dense engine only (--precision none; the CPU
# reference on the first $REF test images, default 128: the CPU reference
# runs the dense net at about 18 images/s), then bench/dense_pytorch.py on
# the same export without torch.compile (it takes ~2 min per shape; pass
# COMPILE=1 to include it). PRECISION=fp32 (or fp16, both) adds deploy's
# per-layer plans of that precision (default none); REF=all compares with
# the CPU reference on every test image. Logs and JSON go to $OUT (default
# bench/out).
#   bench/engine_quick.sh resnet18 vgg16
set -uo pipefail
cd "$(dirname "$0")/.."
B=build/bin; out=${OUT:-bench/out}; ref=${REF:-128}
mkdir -p "$out" data /root/pipe
[ -e data/cifar-100-binary ] || ln -s /root/data/cifar-100-binary data/cifar-100-binary
for model in "$@"; do
    start=/root/$model.h5; x=/root/pipe/$model-dense.csr.h5; t0=$(date +%s)
    [ -f "$start" ] || $B/train --quiet --model "$model" -o "$start" --json "$out/train-$model.json" cifar100 >/dev/null
    $B/export --quiet "$start" -o "$x" >/dev/null
    $B/deploy "$x" --precision "${PRECISION:-none}" --engine "${ENGINE:-fp16,bf16,tf32}" --reference "$ref" --json "$out/deploy-$model.json" \
        >"$out/deploy-$model.txt" 2>"$out/deploy-$model.err"
    echo "$model: deploy rc=$? at $(( $(date +%s) - t0 )) s"
    grep -E "(fp16|bf16|tf32): batch|warning|diagnosis" "$out/deploy-$model.err"
    grep -iE "accuracy|reference|top-1" "$out/deploy-$model.txt" | head -n 12
    PYTHONUNBUFFERED=1 python3 bench/dense_pytorch.py "$x" ${COMPILE:+--compile} \
        --json "$out/pytorch-$model.json" 2>"$out/pytorch-$model.err" | grep -v "^ *(compiled"
    echo "$model: done at $(( $(date +%s) - t0 )) s"
done
