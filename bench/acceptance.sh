#!/usr/bin/env bash
# Issue-2 acceptance on the GPU machine, side by side in one run:
#   bench/acceptance.sh resnet18|vgg16|torch-resnet18|torch-vgg16 [EPOCHS]
# Expects build/ (carried) and CIFAR-100 under /root/data (docs/architecture.md, Running on the GPU machine).
# Logs and JSON summaries go to $OUT (or bench/out when OUT is unset).
set -euo pipefail
cd "$(dirname "$0")/.."
what=$1; epochs=${2:-30}
out=${OUT:-bench/out}; mkdir -p "$out" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/gpu.txt"
case $what in
  torch-*)
    PYTHONUNBUFFERED=1 python3 bench/train_pytorch.py --model "${what#torch-}" --epochs "$epochs" \
        --data data/cifar-100-binary 2>&1 | tee "$out/$what.log" ;;
  *)
    build/bin/train --model "$what" --epochs "$epochs" --runs "$out/runs" --json "$out/$what.json" \
        cifar100 2>&1 | tee "$out/$what.log" ;;
esac
