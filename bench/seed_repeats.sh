#!/usr/bin/env bash
# Issue 20's training comparison over several seeds: NET trained by `train` and by
# bench/train_pytorch.py with the same recipe and epochs, once per seed, one job per GPU
# (bench/gpu_queue.sh), then a table of each run's test top-1 and the two means with their
# standard deviations (bench/seed_repeats.py). One seed is not enough: a 10,000-image test
# set alone gives ~0.4 points of binomial error per figure, before seed-to-seed spread.
#
#   bench/seed_repeats.sh NET [EPOCHS]     NET: resnet50 | densenet121 | vgg19 | ...; EPOCHS: 30
#
# Environment (defaults): SEEDS ("1 2 3 4"); WORK (/root/repeats-NET: models, logs, JSON; a
# job done there is skipped, an interrupted one resumes its checkpoint: run the same command
# again on the warm machine to go on); OUT (bench/out: repeats-NET.md and .tar.gz); DEADLINE
# (540 s: what is done is written to OUT while the rest goes on); GPUS (nvidia-smi's count);
# TOOLS ("ours torch"). (DATASET=synthetic DEVICE=cpu TOOLS=ours GPUS=1: a smoke test of the script.)
# Expects build/bin/train and CIFAR-100 in data/cifar-100-binary (or /root/data).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_queue.sh
net=${1:?usage: bench/seed_repeats.sh NET [EPOCHS]}
epochs=${2:-30}
read -ra seeds <<<"${SEEDS:-1 2 3 4}"
work=${WORK:-/root/repeats-$net}; out=${OUT:-bench/out}; B=build/bin
ds=${DATASET:-cifar100}; device=${DEVICE:-gpu}; read -ra tools <<<"${TOOLS:-ours torch}"
mkdir -p "$out" "$work/json" "$work/logs"
gq_data "$ds" || exit 1
[ -x $B/train ] || { echo "seed_repeats: missing $B/train" >&2; exit 1; }
ngpu=$(gq_gpus)
[ "${ngpu:-0}" -ge 1 ] || { echo "seed_repeats: no GPU (nvidia-smi -L)" >&2; exit 1; }

# run_job ours-S | torch-S: one training of seed S, its JSON summary in WORK/json/JOB.json.
run_job() {
    local tool=${1%-*} s=${1##*-} m="$work/ours-${1##*-}.h5"
    if [ "$tool" = ours ]; then
        local args=(--model "$net" --epochs "$epochs" --seed "$s" "$ds")
        [ -f "$m" ] && args=(--resume)  # the settings come from the checkpoint
        $B/train --device "$device" --quiet -o "$m" --json "$work/json/$1.json" "${args[@]}"
    else
        python3 bench/train_pytorch.py --model "$net" --epochs "$epochs" --seed "$s" --ckpt "$work/torch-$s.ckpt" |
            tail -n 1 | grep '^{' >"$work/json/$1.json.tmp" && mv "$work/json/$1.json.tmp" "$work/json/$1.json"
    fi
}

# summarise: the table and the JSON summaries into OUT.
summarise() {
    python3 bench/seed_repeats.py "$net" "$work/json" >"$out/repeats-$net.md"
    tar czf "$out/repeats-$net.tar.gz" -C "$work" json logs
}

jobs=()
for s in "${seeds[@]}"; do for t in "${tools[@]}"; do jobs+=("$t-$s"); done; done
gq_run "$work" "$ngpu" summarise run_job "${jobs[@]}"
cat "$out/repeats-$net.md"
