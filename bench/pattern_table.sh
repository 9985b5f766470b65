#!/usr/bin/env bash
# Issue 16's acceptance table on a GPU machine: each MODEL trained once, then
# pruned under each pattern to each sparsity with the same seed and image
# budget (evolve, as bench/pattern_prune.sh: ITER iterations x BATCHES batches,
# population POP), exported and deployed on the mixed fp16 plan against the
# dense fp16 engine of the same process (batch 128 and batch 1), with
# PyTorch's BN-folded channels_last CUDA graph of the same weights
# (bench/dense_pytorch.py) timed in the same call; bench/pattern_table.py
# makes the markdown table.
#   MODELS="resnet18 vgg16" PATTERNS="unstructured 8x1 16x8 2:4" SPARSITIES="0.9 0.95" \
#       bench/pattern_table.sh
# A sparsity written with a trailing 'f' (e.g. 0.95f) adds the per-layer
# floors FLOORS_<MODEL> (prune --layer-floor; e.g. FLOORS_vgg16=
# "conv2=0.85,conv3=0.85,conv4=0.85,conv5=0.85"): the large planes held where
# the block kernels beat cuDNN, the rest by the weights.
# A pattern written MODEL/SPEC (e.g. "resnet18/layer3=16x8,layer4=16x8", a
# per-layer pattern) is a job of MODEL only; a per-layer pattern's jobs and
# files are named "layers" and a checksum of it (WORK/patterns.txt; the table
# shows the pattern itself), since '=' and ',' do not travel in file names.
# A sparsity written with a trailing 'u' (e.g. 0.95u) is every layer at least
# that sparse (--min-layer-sparsity), not the weights' allocation; UNIFORM
# lists such jobs as PATTERN@SPARSITY (e.g. "16x8@0.95u", or "16x8@0.95f"
# for floors; a MODEL/SPEC pattern as above, e.g.
# "vgg16/conv2=16x8,conv3=16x8,8x1@0.95f"), beside the grid.
# Jobs (bench/gpu_queue.sh), in two rounds: prune-MODEL-PATTERN-SPARSITY
# (prune and export; ':' of N:M written 'of'), PRUNES_PER_GPU of them per GPU
# at a time (nothing of theirs is timed); when all have ended,
# MODEL-PATTERN-SPARSITY (deploy) and torch-MODEL (PyTorch on one export of
# MODEL), one per GPU at a time. Resumable: WORK keeps the models and
# the jobs done, so the same command on the same (warm) machine goes on where
# the last call stopped; DEADLINE seconds in (540) the table so far goes to
# OUT while the jobs go on. On two H200s (2026-11-28) a prune took 65-70 s
# alone on its GPU and 96-181 s three to a GPU, a deploy 20-130 s: 18 jobs
# took 6 min of prunes (PRUNES_PER_GPU=3) and 9 min of deploys.
# SEEDS="1 2 3 4" repeats every job with each seed (job names end in sN;
# the table then adds each pattern's mean gap to unstructured over the
# seeds): one seed can mislead by half a point either way. NODEPLOY=1 stops
# after the prunes (accuracy only).
# Env (defaults): MODELS, PATTERNS, SPARSITIES as above; UNIFORM (none);
# SEEDS (SEED); NODEPLOY (0); PRUNES_PER_GPU (1); ITER (48) POP (8)
# BATCHES (10) SEED (1); WORK (/root/pattern); OUT (bench/out:
# pattern-table.md and pattern-table.tar.gz); DATASET (cifar100); START_DIR
# (/root: START_DIR/MODEL.h5 is the start model, trained with train's
# defaults and TRAIN_ARGS when missing); DEPLOY_ARGS ("--precision fp16
# --engine fp16"); GPUS (count, default nvidia-smi's); REDO=1 runs done jobs again.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_queue.sh
B=build/bin; ds=${DATASET:-cifar100}; out=${OUT:-bench/out}; work=${WORK:-/root/pattern}
read -ra models <<<"${MODELS:-resnet18 vgg16}"; read -ra patterns <<<"${PATTERNS:-unstructured 8x1 16x8 2:4}"
read -ra sparsities <<<"${SPARSITIES:-0.9 0.95}"; read -ra uniform <<<"${UNIFORM:-}"; read -ra train_args <<<"${TRAIN_ARGS:-}"
pper=${PRUNES_PER_GPU:-1}; it=${ITER:-48}; pop=${POP:-8}; batches=${BATCHES:-10}; sdir=${START_DIR:-/root}
read -ra seeds <<<"${SEEDS:-${SEED:-1}}"
for sd in "${seeds[@]}"; do [[ $sd =~ ^[0-9]+$ ]] || { echo "SEEDS: $sd is not a number" >&2; exit 2; }; done
deploy_args=${DEPLOY_ARGS:---precision fp16 --engine fp16}
mkdir -p "$out" "$work/logs" "$work/json"
gq_data "$ds" || exit 1
for t in $B/train $B/prune $B/export $B/deploy; do [ -x "$t" ] || { echo "missing $t" >&2; exit 1; }; done
ngpu=$(gq_gpus)
[ "${ngpu:-0}" -ge 1 ] || ngpu=1

# pattern_tag P: P as a job name's part (':' written 'of'; a per-layer P as
# "layers" and its checksum, recorded in $work/patterns.txt).
pattern_tag() {
    case $1 in
        *=*) local t; t="layers$(printf %s "$1" | cksum | cut -d' ' -f1)"
             grep -q "^$t " "$work/patterns.txt" 2>/dev/null || echo "$t $1" >>"$work/patterns.txt"
             echo "$t" ;;
        *) echo "${1//:/of}" ;;
    esac
}

# pattern_of TAG: the pattern a job name's part stands for (pattern_tag's inverse).
pattern_of() {
    case $1 in
        layers*) awk -v t="$1" '$1 == t { print $2 }' "$work/patterns.txt" ;;
        *) echo "${1//of/:}" ;;
    esac
}

# prune_job prune-JOB: JOB's prune and export (JOB: MODEL-PATTERN-SPARSITY[sSEED]).
prune_job() {
    local j=${1#prune-} model pat sp seed=${seeds[0]} alloc=()
    IFS=- read -r model pat sp <<<"$j"
    if [[ $sp =~ ^(.*)s([0-9]+)$ ]]; then sp=${BASH_REMATCH[1]}; seed=${BASH_REMATCH[2]}; fi
    pat=$(pattern_of "$pat")
    [ -n "$pat" ] || { echo "no pattern recorded for $j" >&2; return 1; }
    case $sp in
        *u) sp=${sp%u}; alloc=(--min-layer-sparsity "$sp") ;;
        *f) sp=${sp%f}; local fv="FLOORS_$model"; alloc=(--layer-floor "${!fv:?$j needs $fv}") ;;
    esac
    $B/prune --from "$sdir/$model.h5" --target-sparsity "$sp" "${alloc[@]}" --pattern "$pat" --seed "$seed" --lr 0.2 \
        --sched onecycle --warmup 0.1 --batches "$batches" --iterations "$it" --population "$pop" --quiet \
        --runs "$work/runs" -o "$work/$j.h5" --json "$work/json/prune-$j.json" "$ds" || return 1
    $B/export --quiet "$work/$j.h5" -o "$work/$j.csr.h5" --json "$work/json/export-$j.json"
}

# run_job JOB: JOB's deploy (its export from prune_job) or, for torch-MODEL, PyTorch's.
run_job() {
    local j=$1
    case $j in torch-*) torch_job "${j#torch-}"; return ;; esac
    [ -f "$work/$j.csr.h5" ] || { echo "no export $work/$j.csr.h5 (its prune failed?)" >&2; return 1; }
    # shellcheck disable=SC2086
    $B/deploy --quiet $deploy_args --chart none --json "$work/json/deploy-$j.json" "$work/$j.csr.h5" "$ds"
}

# torch_job MODEL: PyTorch's dense network on the weights of one of MODEL's
# exports (dense, so any of them gives the same times).
torch_job() {
    local model=$1 f data=data/cifar-100-binary
    if [ "$ds" != cifar100 ]; then  # timing only: random test images (their accuracy means nothing)
        data=$work/random-test; mkdir -p "$data"
        [ -s "$data/test.bin" ] || head -c $((3074 * 10000)) /dev/urandom >"$data/test.bin"
    fi
    for f in "$work/$model"-*.csr.h5; do
        [ -e "$f" ] || break
        python3 bench/dense_pytorch.py "$f" --data "$data" --json "$work/json/torch-$model.json"
        return
    done
    echo "no export of $model"; return 1
}

# summarise: the JSON summaries and logs (tarball) and the markdown table into $out.
summarise() {
    tar czf "$out/pattern-table.tar.gz" -C "$work" json logs
    {
        python3 bench/pattern_table.py "$work/json"
        printf '\nJobs (%s GPUs, %s iterations x %s batches, population %s, seeds %s):\n' "$ngpu" "$it" "$batches" \
            "$pop" "${seeds[*]}"
        sed 's/^/- /' "$work/logs/jobs.txt"
    } >"$out/pattern-table.md"
}

for m in "${models[@]}"; do  # the start models, trained at once, each on a GPU it claims, when missing
    [ -f "$sdir/$m.h5" ] && continue
    gq_on_gpu $B/train --quiet --model "$m" "${train_args[@]}" -o "$sdir/$m.h5" "$ds" \
        >"$work/logs/train-$m.log" 2>&1 &
done
wait
for m in "${models[@]}"; do [ -f "$sdir/$m.h5" ] || { echo "training $m failed: $(tail -n 3 "$work/logs/train-$m.log")" >&2; exit 1; }; done
# model_pattern MODEL P: P as MODEL's pattern (of MODEL/SPEC, SPEC when the
# model is MODEL, else nothing and status 1).
model_pattern() {
    case $2 in
        */*) [ "${2%%/*}" = "$1" ] && echo "${2#*/}" ;;
        *) echo "$2" ;;
    esac
}

# seed_tag SEED: a job name's seed suffix (none with one seed).
seed_tag() { if [ "${#seeds[@]}" -gt 1 ]; then echo "s$1"; fi; }

jobs=()
for m in "${models[@]}"; do  # each model's PyTorch job right after its own: a run cut short has whole models
    for sd in "${seeds[@]}"; do
        for p in "${patterns[@]}"; do
            p=$(model_pattern "$m" "$p") || continue
            for s in "${sparsities[@]}"; do jobs+=("$m-$(pattern_tag "$p")-$s$(seed_tag "$sd")"); done
        done
        for u in "${uniform[@]}"; do
            p=$(model_pattern "$m" "${u%@*}") || continue
            jobs+=("$m-$(pattern_tag "$p")-${u#*@}$(seed_tag "$sd")")
        done
    done
    jobs+=("torch-$m")
done
pjobs=()
for j in "${jobs[@]}"; do case $j in torch-*) ;; *) pjobs+=("prune-$j") ;; esac; done
echo "pattern_table: ${#pjobs[@]} prunes, $pper per GPU, then ${#jobs[@]} deploys one per GPU, on $ngpu GPU(s), work in $work"
GQ_SLOTS=$pper gq_run "$work" "$ngpu" summarise prune_job "${pjobs[@]}"
[ "${NODEPLOY:-0}" = 1 ] || gq_run "$work" "$ngpu" summarise run_job "${jobs[@]}"
cat "$out/pattern-table.md"
