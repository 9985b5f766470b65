#!/usr/bin/env bash
# Issue 16, pruning side, on the GPU machine: a network pruned to one overall
# sparsity under several patterns from the same trained start model with the
# same image budget (evolve, 48 iterations x 10 batches of 512, population 8,
# as bench/floor_deploy.sh), one line per pattern with val / test accuracy,
# sparsity, blocks kept and seconds; the models go to /root/pipe for export
# and deploy:
#   MODEL=resnet18 TARGET=0.95 bench/pattern_prune.sh unstructured 8x1 16x8 2:4
# MODEL=resnet18|vgg16 (start model /root/r18.h5 or /root/MODEL.h5, the
# tool's default training, made when missing), TARGET (default 0.9), ITER
# (default 48). REPRUNE=1 also re-prunes the unstructured model of the same
# MODEL/TARGET (run it first) onto each block pattern with the budget of a
# fine-tune (--method oneshot --epochs ${FT_EPOCHS:-15}) and prints the cost.
# Each prune is about 2 min on an H200: give one call at most four patterns.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bin; out=${OUT:-bench/out}; mkdir -p "$out" data /root/pipe
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
model=${MODEL:-resnet18}; target=${TARGET:-0.9}; it=${ITER:-48}
start=/root/$model.h5; [ "$model" = resnet18 ] && start=/root/r18.h5
[ -f $start ] || $B/train --quiet --model "$model" -o $start cifar100
short=${model/resnet/r}
line() {  # line TAG: one summary line from the prune JSON
    python3 - "$out/prune-$1.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
kept = sum(l.get("blocks_kept", 0) for l in j["layers"]); tot = sum(l.get("blocks", 0) for l in j["layers"])
rp = j.get("reprune")
extra = f" reprune val {rp['val_accuracy_before']:.2f} -> {rp['val_accuracy_projected']:.2f} -> {j['val_accuracy']:.2f}" if rp else ""
print(f"{sys.argv[2]:<28} val {j['val_accuracy']:.2f} test {j['test_accuracy']:.2f} sparsity {j['sparsity']:.4f} "
      f"blocks {kept}/{tot} off {j.get('off_pattern')} seconds {j['seconds']:.1f}{extra}")
PY
}
for p in "$@"; do
    tag="$short-${target#0.}-${p/:/of}-i$it"
    if [ "${REPRUNE:-0}" = 1 ]; then
        [ "$p" = unstructured ] && continue
        src="/root/pipe/$short-${target#0.}-unstructured-i$it.h5"; tag="$tag-reprune"
        $B/prune --from "$src" --pattern "$p" --method oneshot --epochs "${FT_EPOCHS:-15}" --seed 1 \
            --batches 10 --quiet --runs /tmp/runs -o "/root/pipe/$tag.h5" \
            --json "$out/prune-$tag.json" cifar100 >/dev/null
    else
        $B/prune --from $start --target-sparsity "$target" --pattern "$p" --seed 1 --lr 0.2 --sched onecycle \
            --warmup 0.1 --batches 10 --iterations "$it" --population 8 --quiet --runs /tmp/runs \
            -o "/root/pipe/$tag.h5" --json "$out/prune-$tag.json" cifar100 >/dev/null
    fi
    line "$tag"
done
