#!/usr/bin/env bash
# The block kernel end to end on synthetic models, on the GPU machine: for each
# model, train one epoch on synthetic data, prune every layer one-shot to
# SPARSITY on PATTERN blocks (every layer at least SPARSITY), export, then
# `deploy --precision fp16 --engine fp16` (speedups over the dense fp16 engine
# of the same process) and bench/dense_pytorch.py (PyTorch's BN-folded
# channels-last CUDA graph) on the same export, in this call:
#   bench/block_e2e.sh [MODEL...]          default: resnet18 vgg16
# Environment (defaults): BIN (build/bin), PATTERN (16x8), SPARSITY (0.95), EPOCHS
# (0.1: prune's fine-tuning, kept short since only times count here),
# OUT (bench/out: per model the tools' logs and JSON summaries, named as
# bench/pattern_table.sh names them, and e2e.md, their table by bench/pattern_table.py).
# The weights are random-trained, so only the times mean anything.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
case ${1:-} in -h|--help) sed -n 2,12p "$0"; exit 0 ;; esac
bin=${BIN:-build/bin}; pat=${PATTERN:-16x8}; sp=${SPARSITY:-0.95}; out=${OUT:-bench/out}; ep=${EPOCHS:-0.1}
models=("$@"); [ ${#models[@]} -gt 0 ] || models=(resnet18 vgg16)
for t in train prune export deploy; do [ -x "$bin/$t" ] || { echo "block_e2e: no $bin/$t" >&2; exit 1; }; done
nvidia-smi -L >/dev/null 2>&1 || { echo "block_e2e: no GPU here; nothing measured"; exit 0; }
mkdir -p "$out"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for m in "${models[@]}"; do
    j=$m-${pat/:/of}-$sp
    if ! "$bin/train" --quiet --model "$m" --epochs 1 -o "$work/$m.h5" synthetic >"$out/make-$j.log" 2>&1 ||
       ! "$bin/prune" --quiet --from "$work/$m.h5" --method oneshot --target-sparsity "$sp" --pattern "$pat" \
             --min-layer-sparsity "$sp" --epochs "$ep" --runs "$work/runs" -o "$work/$j.h5" \
             --json "$out/prune-$j.json" synthetic >>"$out/make-$j.log" 2>&1 ||
       ! "$bin/export" --quiet "$work/$j.h5" -o "$work/$j.csr.h5" >>"$out/make-$j.log" 2>&1; then
        echo "block_e2e: $m: making the model failed, see $out/make-$j.log" >&2; continue
    fi
    "$bin/deploy" --quiet "$work/$j.csr.h5" --precision fp16 --engine fp16 --skip-candidates actsparse \
        --reference 256 --json "$out/deploy-$j.json" --chart none >"$out/deploy-$j.txt" 2>&1 ||
        echo "block_e2e: $m: deploy failed (rc $?), see $out/deploy-$j.txt" >&2
    python3 bench/dense_pytorch.py "$work/$j.csr.h5" --data data/synthetic --json "$out/torch-$m.json" \
        >"$out/torch-$m.txt" 2>&1 || echo "block_e2e: $m: dense_pytorch failed, see $out/torch-$m.txt" >&2
done
python3 bench/pattern_table.py "$out" | tee "$out/e2e.md"
