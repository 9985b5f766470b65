#!/usr/bin/env bash
# Issue 17's default: the mission's pipeline from scratch, once per setting,
#   prune --population 8 [SETTING] cifar100 && quantize --centroids 16 && export && deploy --precision fp16 --engine fp16
# SETTING: "sparsity" (today's default: --objective sparsity) or a latency target "1.2x"
# (--objective latency --latency-target 1.2x --pattern LAT_PATTERN: the fp16 engine's only
# sparse kernels are the block-sparse ones, so an unstructured latency run has nothing to
# gain); one job per GPU (bench/gpu_queue.sh), plus the dense
# model (train's defaults) as the yardstick; then bench/default_pipeline.py's table: validation and
# test top-1 after prune and after quantize, deploy's mixed fp16 plan against the dense fp16 engine
# of the same process at batch 128 and 1, and the setting a rule on validation picks (the fastest
# whose quantized validation top-1 is within 0.5 points of the dense model's).
#
#   bench/default_pipeline.sh [SETTING ...]      default: sparsity 1.1x 1.2x 1.3x
#
# Environment (defaults): SEED (1); WORK (/root/default-pipeline: models, logs, JSON; a job done there
# is skipped: run the same command again on the warm machine to go on); OUT (bench/out:
# default-pipeline.md and .tar.gz); DEADLINE (540 s: what is done is written to OUT while the rest goes
# on); GPUS (nvidia-smi's count); DATASET (cifar100); MODEL (the tools' default, resnet18); PRUNE_ARGS
# (extra prune options); LAT_PATTERN (16x8: the latency settings' --pattern); DEPLOY_ARGS ("--precision fp16 --engine fp16"). A smoke test on the CPU:
# DATASET=synthetic MODEL=lenet GPUS=1 PRUNE_ARGS="--iterations 1 --batches 2 --finetune 1" DEPLOY_ARGS="--device cpu".
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_queue.sh
settings=("$@"); [ ${#settings[@]} -gt 0 ] || settings=(sparsity 1.1x 1.2x 1.3x)
work=${WORK:-/root/default-pipeline}; out=${OUT:-bench/out}; B=build/bin
ds=${DATASET:-cifar100}; seed=${SEED:-1}; read -ra extra <<<"${PRUNE_ARGS:-}"
read -ra dargs <<<"${DEPLOY_ARGS:---precision fp16 --engine fp16}"; model=(); [ -z "${MODEL:-}" ] || model=(--model "$MODEL")
mkdir -p "$out" "$work/json" "$work/logs"
gq_data "$ds" || exit 1
for t in train prune quantize export deploy; do [ -x $B/$t ] || { echo "default_pipeline: missing $B/$t" >&2; exit 1; }; done
for s in "${settings[@]}"; do
    case $s in sparsity|*x) ;; *) echo "default_pipeline: a setting is 'sparsity' or a target like 1.2x, not $s" >&2; exit 2 ;; esac
done
ngpu=$(gq_gpus)
[ "${ngpu:-0}" -ge 1 ] || { echo "default_pipeline: no GPU (nvidia-smi -L)" >&2; exit 1; }

# run_job dense | SETTING: the yardstick's training, or one setting's whole pipeline.
run_job() {
    if [ "$1" = dense ]; then
        $B/train --quiet "${model[@]}" --seed "$seed" -o "$work/dense.h5" --json "$work/json/train-dense.json" "$ds"
        return
    fi
    local j=$1 obj=(--objective sparsity)
    [ "$j" = sparsity ] || obj=(--objective latency --latency-target "$j" --pattern "${LAT_PATTERN:-16x8}")
    $B/prune --population 8 "${model[@]}" "${obj[@]}" --seed "$seed" --quiet --runs "$work/runs" "${extra[@]}" -o "$work/$j.h5" \
        --json "$work/json/prune-$j.json" "$ds" &&
        $B/quantize --quiet --centroids 16 "$work/$j.h5" -o "$work/$j-k16.h5" --json "$work/json/quantize-$j.json" &&
        $B/export --quiet "$work/$j-k16.h5" -o "$work/$j.csr.h5" --json "$work/json/export-$j.json" &&
        $B/deploy --quiet "${dargs[@]}" --chart none --json "$work/json/deploy-$j.json" "$work/$j.csr.h5" "$ds"
}

# summarise: the table and the JSON summaries into OUT.
summarise() {
    python3 bench/default_pipeline.py "$work/json" "${settings[@]}" >"$out/default-pipeline.md"
    tar czf "$out/default-pipeline.tar.gz" -C "$work" json logs
}

gq_run "$work" "$ngpu" summarise run_job dense "${settings[@]}"
cat "$out/default-pipeline.md"
