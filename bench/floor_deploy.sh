#!/usr/bin/env bash
# Issue 6 with latency-aware pruning, on the GPU machine: resnet18 pruned to
# 0.90 from the trained start model of bench/prune_long.sh (/root/r18.h5,
# trained when missing) with a per-layer sparsity floor, then exported and
# deployed (fp32 and fp16 plans); one line per floor with val / test accuracy
# and the batch-128 / batch-1 speedups over the all-dense cuDNN network:
#   bench/floor_deploy.sh [ITER] [FLOOR...]     (default: 48 iterations, floors 0.8 0.9)
# MODEL=resnet18|vgg16 (default resnet18; the start model /root/MODEL.h5 is the
# tool's default training, made when missing) and TARGET (default 0.9) choose
# the network and the overall sparsity; the exported CSR files are copied to
# $OUT so that a later call can deploy them with another build. EXTRA adds
# prune options (e.g. EXTRA="--layer-floor layer1=0.98,layer2=0.98,layer3=0.98"),
# SUFFIX a tag suffix for the files.
# Floor 0 is the search without a floor (bench/RESULTS.md has it for ITER 48:
# test 75.10, fp32 batch 128 1.11x). Each floor: prune ~2 min, deploy ~1 min on
# an H200; give one call at most three floors. The accuracy figures are the
# prune tool's own (validation chooses nothing here: the floor is fixed before).
set -euo pipefail
cd "$(dirname "$0")/.."
it=${1:-48}; shift || true
floors=${*:-0.8 0.9}
B=build/bin; out=${OUT:-bench/out}; mkdir -p "$out" data /root/pipe
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
model=${MODEL:-resnet18}; target=${TARGET:-0.9}
start=/root/$model.h5; [ "$model" = resnet18 ] && start=/root/r18.h5
[ -f $start ] || $B/train --quiet --model "$model" -o $start cifar100
short=${model/resnet/r}
for f in $floors; do
    tag="$short-${target#0.}-floor$f-i$it${SUFFIX:-}"
    # shellcheck disable=SC2086
    $B/prune --from $start --target-sparsity "$target" --min-layer-sparsity "$f" --seed 1 ${EXTRA:-} \
        --lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --iterations "$it" --population 8 \
        --quiet --runs /tmp/runs -o "/root/pipe/$tag.h5" --json "$out/prune-$tag.json" cifar100 >/dev/null
    $B/export --quiet "/root/pipe/$tag.h5" -o "/root/pipe/$tag.csr.h5" --json "$out/export-$tag.json" >/dev/null
    $B/deploy --quiet "/root/pipe/$tag.csr.h5" --json "$out/deploy-$tag.json" --chart "$out/deploy-$tag.svg" \
        >"$out/deploy-$tag.txt" 2>&1
    cp "/root/pipe/$tag.csr.h5" "$out/"
    python3 - "$out" "$tag" <<'PY'
import json, sys
o, t = sys.argv[1], sys.argv[2]
p = json.load(open(f"{o}/prune-{t}.json"))
d = json.load(open(f"{o}/deploy-{t}.json"))
s = "  ".join(f"{v['precision']}: b128 {v['speedup']:.2f}x b1 {v['speedup_batch1']:.2f}x" for v in d["plans"])
print(f"{t:<24} val {p['val_accuracy']} test {p['test_accuracy']} sparsity {p['sparsity']:.4f} "
      f"deploy acc {d['test_accuracy']}  {s}")
PY
done
