#!/usr/bin/env bash
# Issue 17's acceptance on a GPU machine (docs/prune.md, "Latency objective"):
# one trained MODEL pruned with the same seed and image budget by
#   U      uniform sparsity X (--min-layer-sparsity X --target-sparsity X),
#   F1, F2 two --layer-floor settings that force the early layers sparse
#          (0.98 and 0.95), F3 a third (0.93: a floors run a little slower
#          than F2, so a latency run there has floors at its own speed),
#   L1-L3  --objective latency at three --latency-target values,
#   S1-S3  --objective latency at those targets with the overall sparsity fixed
#          at X (--target-sparsity X: the latency steers where the sparsity goes),
#   W      the pattern at X, sparsity allocated by the weights (--objective
#          sparsity --target-sparsity X, no floors), N the same unstructured
#          (issue 16's reference: the unstructured model of the same budget),
# each winner exported and deployed on the mixed fp16 plan of the dense engine
# (deploy --precision fp16 --engine fp16: the measured batch-128 and batch-1
# times, and the dense fp16 engine of the same process), then one markdown
# table by bench/pareto_table.py:
#   bench/prune_pareto.sh MODEL              (MODEL: resnet18, vgg16, ...)
# The latency table is measured once (job T: a one-iteration latency run that
# writes it, alone on its GPU) and every latency run reads it (--latency-table).
# Jobs run one per GPU at a time (bench/gpu_queue.sh: nvidia-smi -L; CUDA_VISIBLE_DEVICES per job),
# so every timing has its GPU to itself; a job's prune, export and deploy run
# in sequence on one GPU and a failed job leaves the others' results.
# Expects build/bin/* and CIFAR-100 in data/cifar-100-binary (linked to
# /root/data when that exists, as bench/prune_latency.sh does); the start model
# is /root/MODEL.h5 (train's defaults, trained when missing).
# Environment (defaults): ITER (48) POP (8) BATCHES (10) search budget; SEED (1);
# UNIFORM (0.9) X; TARGETS (per model below); FLOOR1, FLOOR2, FLOOR3 (per model below);
# PATTERN (unstructured; 16x8 lets the block-sparse kernel run); LAT_BATCH (128);
# LAT_ALLOC (prune's --latency-allocation default: time; ramp or sparsity for the others);
# ONLY (all jobs: "T U F1 F2 L1 L2 L3"; F3, W, N, S1-S9 run when named here); GPUS (count, default nvidia-smi's);
# NODEPLOY (jobs exported but not deployed, e.g. "N": an unstructured model runs dense at fp16);
# WORK (/root/pareto-MODEL: models, logs, JSON; a table found there is reused
# unless REMEASURE=1, a job done there is skipped unless REDO=1: run the same
# command again to go on); OUT (bench/out: pareto-MODEL.tar.gz and pareto-MODEL.md);
# DEADLINE (540): seconds after which what is done is written to OUT while the
# rest goes on (a device call ends at 10 minutes and keeps what OUT holds);
# DATASET (cifar100), START, TRAIN_ARGS, DEPLOY_ARGS for other set-ups; PRUNE_ARGS:
# more prune options for every job (e.g. "--distill 0.5").
# Wall time, resnet18 on 4 H100/H200 with the defaults: ~6-8 min (T ~1 min,
# each other job: prune ~90 s + deploy 60-110 s); on one GPU ~20 min (use ONLY
# to split it across calls; WORK keeps what is done).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_queue.sh
model=${1:?usage: bench/prune_pareto.sh MODEL}
B=build/bin; ds=${DATASET:-cifar100}; out=${OUT:-bench/out}
it=${ITER:-48}; pop=${POP:-8}; batches=${BATCHES:-10}; seed=${SEED:-1}; X=${UNIFORM:-0.9}
read -ra train_args <<<"${TRAIN_ARGS:-}"
read -ra prune_extra <<<"${PRUNE_ARGS:-}"
pattern=${PATTERN:-unstructured}; lbatch=${LAT_BATCH:-128}
work=${WORK:-/root/pareto-$model}; start=${START:-/root/$model.h5}
deploy_args=${DEPLOY_ARGS:---precision fp16 --engine fp16}
# floor_spec X: the model's early layers (resnet: layer1-3; vgg: conv2-10) at floor X (empty for others).
floor_spec() {
    local s
    case $model in
    resnet*) s=$(printf "layer%d=$1," 1 2 3) ;;
    vgg*) s=$(printf "conv%d.=$1," $(seq 2 10)) ;;
    *) s="" ;;
    esac
    echo "${s%,}"
}
f1=${FLOOR1:-$(floor_spec 0.98)}; f2=${FLOOR2:-$(floor_spec 0.95)}; f3=${FLOOR3:-$(floor_spec 0.93)}
# Targets spanning the floors' speed, so that a latency run and a floors run meet
# (the acceptance compares them at the same measured time): resnet18's floors ran
# 1.1-1.2x and vgg16's 1.4-1.6x over the dense fp16 engine (H200, 2026-11-26).
case $model in resnet*) dt="1.05x 1.1x 1.2x" ;; vgg*) dt="1.3x 1.4x 1.5x" ;; *) dt="1.1x 1.25x 1.5x" ;; esac
read -ra targets <<<"${TARGETS:-$dt}"
jobs=${ONLY:-T U F1 F2 L1 L2 L3}
mkdir -p "$out" "$work/logs" "$work/json"
gq_data "$ds" || exit 1
tools=(train prune export)  # deploy only when a job deploys (T measures inside prune)
for j in $jobs; do case " ${NODEPLOY:-} T " in *" $j "*) ;; *) tools+=(deploy); break ;; esac; done
for t in "${tools[@]}"; do [ -x "$B/$t" ] || { echo "missing $B/$t" >&2; exit 1; }; done
ngpu=$(gq_gpus)
[ "${ngpu:-0}" -ge 1 ] || ngpu=1
echo "prune_pareto: $model, $ngpu GPU(s), jobs: $jobs, work in $work"

# The search settings every run shares (bench/pattern_prune.sh's budget).
common=(--from "$start" --seed "$seed" --lr 0.2 --sched onecycle --warmup 0.1 --batches "$batches"
        --iterations "$it" --population "$pop" --pattern "$pattern" --latency-batch "$lbatch"
        --quiet --runs "$work/runs" "${prune_extra[@]}")

# prune_args JOB: the options that make job JOB (one per line).
prune_args() {
    case $1 in
    U) printf '%s\n' --objective sparsity --min-layer-sparsity "$X" --target-sparsity "$X" ;;
    F1) printf '%s\n' --objective sparsity --target-sparsity "$X" --layer-floor "$f1" ;;
    F2) printf '%s\n' --objective sparsity --target-sparsity "$X" --layer-floor "$f2" ;;
    F3) printf '%s\n' --objective sparsity --target-sparsity "$X" --layer-floor "$f3" ;;
    W) printf '%s\n' --objective sparsity --target-sparsity "$X" ;;
    N) printf '%s\n' --objective sparsity --target-sparsity "$X" --pattern unstructured ;;
    L[1-9]) printf '%s\n' --objective latency --latency-target "${targets[${1#L} - 1]}" \
                --latency-table "$work/table_latency.json" ${LAT_ALLOC:+--latency-allocation "$LAT_ALLOC"} ;;
    S[1-9]) printf '%s\n' --objective latency --latency-target "${targets[${1#S} - 1]}" --target-sparsity "$X" \
                --latency-table "$work/table_latency.json" ;;
    esac
}

# table_job: the latency table, measured alone on this GPU by a one-iteration run.
table_job() {
    if [ -f "$work/table_latency.json" ] && [ "${REMEASURE:-0}" != 1 ]; then
        echo "reusing $work/table_latency.json"; touch "$work/table.done"; return 0
    fi
    rm -f "$work/table_latency.json"
    local c=() a  # not --quiet: the log keeps each grid point's whole graph against the table
    for a in "${common[@]}"; do [ "$a" = --quiet ] || c+=("$a"); done
    $B/prune "${c[@]}" --iterations 1 --population 2 --batches 1 --finetune 0 --scan-images 0 \
        --objective latency --latency-target 1x --target-sparsity 0.5 --latency-checks 0 -o "$work/table.h5" \
        --json "$work/json/table.json" "$ds" || return 1
    [ -f "$work/table_latency.json" ] && touch "$work/table.done"
}

# wait_table: until job T is done (1 when it failed or was not queued and left no table).
wait_table() {
    while [ ! -f "$work/table.done" ]; do
        [ -f "$work/table.failed" ] && return 1
        case " $jobs " in *" T "*) sleep 2 ;; *) [ -f "$work/table_latency.json" ] || return 1; return 0 ;; esac
    done
}

# ready_job JOB: a latency run waits for the table here, before it claims a GPU (GQ_READY).
ready_job() { case $1 in [LS][1-9]) wait_table || true ;; esac; }
GQ_READY=ready_job

# run_job JOB: prune (after the table for latency runs), export, deploy; 1 on any failure.
run_job() {
    local j=$1 m="$work/$1.h5"
    [ "$j" = T ] && { table_job || { touch "$work/table.failed"; return 1; }; return; }
    local a; mapfile -t a < <(prune_args "$j")
    [ ${#a[@]} -gt 0 ] || { echo "unknown job $j"; return 1; }
    case $j in [LS][1-9]) wait_table || { echo "no latency table"; return 1; } ;; esac
    $B/prune "${common[@]}" "${a[@]}" -o "$m" --json "$work/json/prune-$j.json" "$ds" || return 1
    $B/export --quiet "$m" -o "$work/$j.csr.h5" --json "$work/json/export-$j.json" || return 1
    case " ${NODEPLOY:-} " in *" $j "*) return 0 ;; esac
    # shellcheck disable=SC2086
    $B/deploy --quiet $deploy_args --chart none --json "$work/json/deploy-$j.json" "$work/$j.csr.h5" "$ds"
}

[ -f "$start" ] || gq_on_gpu $B/train --quiet --model "$model" "${train_args[@]}" -o "$start" "$ds" \
    >"$work/logs/train.log" 2>&1 || { echo "training $model failed: $(tail -n 3 "$work/logs/train.log")" >&2; exit 1; }
rm -rf "$work/table.done" "$work/table.failed" "$work/done/T"  # T runs every time: it reuses a table it finds
read -ra queue <<<"$jobs"
# summarise: the tarball of the JSON summaries and logs, and the markdown table, into $out.
summarise() {
    local keep=(json logs)
    [ -f "$work/table_latency.json" ] && keep+=(table_latency.json)
    tar czf "$out/pareto-$model.tar.gz" -C "$work" "${keep[@]}"
    {
        python3 bench/pareto_table.py "$work/json" --table "$work/table_latency.json" --targets "${targets[*]}" \
            --uniform "$X" --jobs "$jobs" --floors "F1=$f1" "F2=$f2" "F3=$f3"
        printf '\nJobs (%s GPUs, pattern %s, %s iterations x %s batches, population %s, seed %s):\n' \
            "$ngpu" "$pattern" "$it" "$batches" "$pop" "$seed"
        sed 's/^/- /' "$work/logs/jobs.txt"
    } >"$out/pareto-$model.md"
}

gq_run "$work" "$ngpu" summarise run_job "${queue[@]}"
cat "$out/pareto-$model.md"
