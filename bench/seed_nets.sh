#!/usr/bin/env bash
# Issue 20 on the GPU machine: one seed network trained by `train` and by PyTorch with the same
# recipe and budget, pruned to 90%, exported and deployed with and without the
# activation-sparse candidates.
#
#   bench/seed_nets.sh NET [EPOCHS]     NET: resnet50 | densenet121 | vgg19; EPOCHS: 60
#
# Resumable: every artefact lives in $SEED/NET (default /root/seed/NET) and a step whose
# output exists is skipped; `train` continues its per-epoch checkpoint (--resume), PyTorch
# its own (--ckpt). Each step runs under the time left of BUDGET seconds (default 540, for a
# 10-minute device call): when it runs out the step is stopped, the results so far are
# packed, and the next call of the same command on the same (warm) machine goes on.
# GPUS (default "0 1"): with two GPUs both trainings run at once, and later both deploys
# (each compares against the dense engine timed in its own process on its own GPU); with
# one (one listed, or one in nvidia-smi -L), one after the other. Prune and export run on the
# first. Two networks at once on a 4-GPU machine: GPUS="0 1" for one, GPUS="2 3" for the other.
# Steps: train (ours), train_pytorch.py, prune --method gmp to 0.9 (PRUNE_EPOCHS fine-tuning
# epochs, default 10), export, the CPU reference on every test image once (a deploy of the
# dense fp16 engine only, --reference all: it fills deploy's reference cache next to the export,
# which the later deploys read instead of recomputing; resumable, its saved images kept when
# the call ends; one network's at a time on the machine, under the lock file REF_LOCK, default
# /tmp/seed_nets_reference.lock: four at once on 64 cores ran 6.5 images/s each), then per
# plan precision in PRECISION (fp16, fp32 or both, the default) two deploys, each its own
# resumable step (a resnet50 deploy of both precisions did not fit one 10-minute call): with the activation-sparse candidates (--reference all:
# accuracy against the CPU reference on the whole test set; both precisions at once, one per
# GPU) and with --skip-candidates actsparse (--reference $REF_WITHOUT, default all), the latter
# only where the former chose an activation-sparse candidate: otherwise the plan without them
# is the same plan, and deploy_without-PREC.json names it ({"same_plan_as": ...}). The fp16
# steps also time the dense fp16 and TF32 engines; the fp32 plan's all-dense network is the
# dense fp32 figure.
# Out: $OUT/seed-NET.tar.gz with the JSON summaries and logs; bench/seed_table.py makes the table.
# Expects build/bin/* (bench/pack.sh) and CIFAR-100 in /root/data or data/cifar-100-binary.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NET=${1:?usage: bench/seed_nets.sh resnet50|densenet121|vgg19 [EPOCHS]}
EPOCHS=${2:-60}
case $NET in resnet50|densenet121|vgg19) ;; *) [ -n "${SEED_ANY_NET:-}" ] || { echo "seed_nets: unknown net $NET" >&2; exit 2; } ;; esac
DATASET=${DATASET:-cifar100}  # (DATASET=synthetic SEED_ANY_NET=1 DEVICE=cpu: a smoke test of the script)
DEVICE=${DEVICE:-gpu}         # never a silent CPU run on the GPU machine
B=build/bin
D=${SEED:-/root/seed}/$NET
BUDGET=${BUDGET:-540}
PRUNE_EPOCHS=${PRUNE_EPOCHS:-10}
REF_WITHOUT=${REF_WITHOUT:-all}
REF_LOCK=${REF_LOCK:-/tmp/seed_nets_reference.lock}
ONE_AT_A_TIME=(); command -v flock >/dev/null && ONE_AT_A_TIME=(flock "$REF_LOCK")
PRECISION=${PRECISION:-both}  # deploy's sparse plans, one resumable step each (fp16 first)
case $PRECISION in both) PRECS="fp16 fp32" ;; fp16|fp32) PRECS=$PRECISION ;;
    *) echo "seed_nets: PRECISION fp16, fp32 or both, not $PRECISION" >&2; exit 2 ;; esac
OUTDIR=${OUT:-bench/out}
T0=$SECONDS
mkdir -p "$D" "$OUTDIR" data
[ -e data/cifar-100-binary ] || { [ -f /root/data/train.bin ] && ln -s /root/data data/cifar-100-binary; }
[ "$DATASET" != cifar100 ] || [ -f data/cifar-100-binary/train.bin ] ||
    { echo "seed_nets: no CIFAR-100 in data/cifar-100-binary or /root/data" >&2; exit 1; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NGPU" -ge 1 ] || { echo "seed_nets: no GPU (nvidia-smi -L)" >&2; exit 1; }
read -ra GL <<<"${GPUS:-0 1}"
G0=${GL[0]:-0}; G1=${GL[1]:-$G0}
[ "$NGPU" -ge 2 ] || G1=$G0
for g in "$G0" "$G1"; do [ "$g" -lt "$NGPU" ] || { echo "seed_nets: no GPU $g ($NGPU found)" >&2; exit 2; }; done

left() { echo $((BUDGET - (SECONDS - T0))); }
# step NAME DONE_FILE GPU CMD...: runs CMD on GPU under the time left unless DONE_FILE exists.
step() {
    local name=$1 done=$2 gpu=$3; shift 3
    if [ -s "$done" ]; then echo "== $name: done ($done)"; return 0; fi
    local t=$(left)
    if [ "$t" -lt 20 ]; then echo "== $name: no time left in this call (run again)"; return 1; fi
    echo "== $name (GPU $gpu, at most ${t}s): $*"
    CUDA_VISIBLE_DEVICES=$gpu timeout --signal=TERM --kill-after=10 "$t" "$@" >>"$D/$name.log" 2>&1
    local rc=$?
    tail -n 3 "$D/$name.log"
    [ $rc -eq 124 ] && echo "== $name: stopped at the time limit (run again to go on)"
    [ $rc -ne 0 ] && echo "== $name: exit $rc"
    return $rc
}

# Ours, resuming its checkpoint when there is one.
train_ours() {
    local args=(--model "$NET" --epochs "$EPOCHS" "$DATASET")
    [ -f "$D/model.h5" ] && args=(--resume)  # the settings and dataset come from the checkpoint
    step train "$D/train.json" "$1" $B/train --device "$DEVICE" -o "$D/model.h5" --json "$D/train.json" "${args[@]}"
}

# PyTorch, the same recipe and epochs; its last line is the JSON summary.
train_torch() {
    step train_pytorch "$D/train_pytorch.json" "$1" bash -c \
        "python3 bench/train_pytorch.py --model $NET --epochs $EPOCHS --ckpt $D/torch.ckpt \
         | tee -a $D/train_pytorch.out | tail -n 1 | grep '^{' >$D/train_pytorch.json.tmp \
         && mv $D/train_pytorch.json.tmp $D/train_pytorch.json"
}

# The parameter counts of both, side by side (PyTorch's without a GPU run).
params() {
    [ -s "$D/params.txt" ] && return 0
    local ours torch
    ours=$(grep -o '[0-9]* parameters' "$D/train.log" 2>/dev/null | head -n 1 | cut -d' ' -f1)
    torch=$(python3 bench/train_pytorch.py --model "$NET" --params 2>/dev/null | grep -o '"parameters": [0-9]*' | cut -d' ' -f2)
    if [ -n "$ours" ] && [ -n "$torch" ]; then
        echo "$NET parameters: ours $ours, pytorch $torch$([ "$ours" = "$torch" ] || echo ' DIFFERENT')" | tee "$D/params.txt"
    else echo "== params: ours '${ours}', pytorch '${torch}' (not both known yet)"; fi
}

# both A B: runs functions A and B, at once when there are two GPUs (A on G0, B on G1).
both() {
    if [ "$G1" != "$G0" ]; then
        "$1" "$G0" & local p1=$!
        "$2" "$G1" & local p2=$!
        wait $p1; local r1=$?; wait $p2; local r2=$?
        return $((r1 || r2))
    fi
    "$1" "$G0"; local r1=$?
    "$2" "$G0"; local r2=$?
    return $((r1 || r2))
}

# deploy_run RUN PREC GPU: deploy_with (the activation-sparse candidates in, --reference all)
# or deploy_without (left out, --reference $REF_WITHOUT), PREC's sparse plan only, as its own
# resumable step RUN-PREC; the fp16 step also builds the dense fp16 and TF32 engines.
deploy_run() {
    local run=$1 prec=$2 gpu=$3 engine=none ref=all skip=none
    [ "$prec" = fp16 ] && engine=fp16,tf32
    [ "$run" = deploy_without ] && ref=$REF_WITHOUT skip=actsparse
    step "$run-$prec" "$D/$run-$prec.json" "$gpu" $B/deploy --device "$DEVICE" --precision "$prec" --engine "$engine" \
        --skip-candidates "$skip" --reference "$ref" --chart none --json "$D/$run-$prec.json" "$D/pruned.csr.h5" "$DATASET"
}
# same_plan PREC: 0 when deploy_with-PREC chose no activation-sparse candidate on any layer at
# either batch: then the plan without them is that plan (the same timings pick the same
# candidates), and deploy_without-PREC.json says so instead of a second deploy.
same_plan() {
    python3 - "$D/deploy_with-$1.json" "$1" <<'EOF'
import json, sys
d, prec = json.load(open(sys.argv[1])), sys.argv[2]
picks = [t.get('chosen_' + prec) or '' for l in d['layers'] for t in (l, l.get('batch1', {}))]
sys.exit(any(p.startswith('actsparse') for p in picks))
EOF
}

# The deploys: with the activation-sparse candidates, both precisions at once; then without
# them only where a plan chose one (else a marker, see same_plan).
deploys() {
    local p need=()
    if [ "$PRECS" = "fp16 fp32" ]; then both deploy_with_fp16 deploy_with_fp32 || return 1
    else "deploy_with_$PRECS" "$G0" || return 1; fi
    for p in $PRECS; do
        [ -s "$D/deploy_without-$p.json" ] && continue
        if same_plan "$p"; then
            echo "{\"same_plan_as\": \"deploy_with-$p\"}" >"$D/deploy_without-$p.json"
            echo "== deploy_without-$p: the plan of deploy_with-$p (no layer chose an activation-sparse candidate)"
        else need+=("$p"); fi
    done
    if [ ${#need[@]} -eq 2 ]; then both deploy_without_fp16 deploy_without_fp32
    elif [ ${#need[@]} -eq 1 ]; then "deploy_without_${need[0]}" "$G0"; fi
}

deploy_with_fp16() { deploy_run deploy_with fp16 "$1"; }
deploy_without_fp16() { deploy_run deploy_without fp16 "$1"; }
deploy_with_fp32() { deploy_run deploy_with fp32 "$1"; }
deploy_without_fp32() { deploy_run deploy_without fp32 "$1"; }

both train_ours train_torch
params

if [ -s "$D/train.json" ]; then
    step prune "$D/prune.json" "$G0" $B/prune --quiet --device "$DEVICE" --method gmp --from "$D/model.h5" --target-sparsity 0.9 \
        --epochs "$PRUNE_EPOCHS" -o "$D/pruned.h5" --json "$D/prune.json" --runs "$D/runs" "$DATASET" &&
    step export "$D/export.json" "$G0" $B/export --quiet "$D/pruned.h5" -o "$D/pruned.csr.h5" --json "$D/export.json" &&
    { [ "$DEVICE" = cpu ] || step reference "$D/reference.json" "$G0" "${ONE_AT_A_TIME[@]}" $B/deploy --device "$DEVICE" \
        --precision none --engine fp16 --reference all --chart none --json "$D/reference.json" "$D/pruned.csr.h5" \
        "$DATASET"; } &&
    deploys
fi

# Pack the summaries and logs (the models stay in $D).
files=$(cd "$D" && ls -- *.json *.log *.txt train_pytorch.out 2>/dev/null)
tar czf "$OUTDIR/seed-$NET.tar.gz" -C "$D" $files
echo "== packed $OUTDIR/seed-$NET.tar.gz: $(echo $files)"
for f in train train_pytorch prune export reference $(for p in $PRECS; do echo deploy_with-$p deploy_without-$p; done); do
    [ -s "$D/$f.json" ] && printf '%s ' "$f" || printf '(%s) ' "$f"
done
echo "(parenthesised: not done yet)"
