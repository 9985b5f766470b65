#!/usr/bin/env bash
# Nsight Compute on one variant of the block-sparse conv kernel for one layer,
# on the GPU machine:
#   bench/kernel_profile.sh LAYER SPARSITY VARIANT [F]  e.g. r18-64x32 0.95 4
#   bench/kernel_profile.sh tail SPARSITY               the tail kernel on resnet18's layer3+4
# Runs `gpu_test_bsconv --time LAYER SPARSITY VARIANT [F]` (only that variant's
# launches; F: a hybrid layer, singles that share of the kept weights), or
# `gpu_test_tail --profile SPARSITY`, under ncu, profiles one launch after the
# warm-up (SKIP launches, default 20; 2 for the tail) with the sections that
# say where its time goes, writes OUT/profile-LAYER-SPARSITY-vVARIANT.{ncu-rep,txt}
# (OUT: bench/out) and prints duration, throughputs, occupancy, registers and
# the largest warp stall reasons.
# GTB, GTT: the test binaries (default build/tests/gpu_test_bsconv, gpu_test_tail).
# Without ncu or a GPU: one line, exit 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = tail ] && [ $# -eq 2 ]; then
    layer=tail sp=$2 v=0 f=0 gtb=${GTT:-build/tests/gpu_test_tail} skip=${SKIP:-2}
    run=("$gtb" --profile "$sp")
elif [ $# -eq 3 ] || [ $# -eq 4 ]; then
    layer=$1 sp=$2 v=$3 f=${4:-0} gtb=${GTB:-build/tests/gpu_test_bsconv} skip=${SKIP:-20}
    run=("$gtb" --time "$layer" "$sp" "$v" "$f")
else
    sed -n 2,15p "$0"; exit 2
fi
out=${OUT:-bench/out}
command -v ncu >/dev/null || { echo "kernel_profile: no ncu here; nothing profiled"; exit 0; }
nvidia-smi -L >/dev/null 2>&1 || { echo "kernel_profile: no GPU here; nothing profiled"; exit 0; }
[ -x "$gtb" ] || { echo "kernel_profile: no $gtb (build it: make CUDA_ARCH=90 $gtb)" >&2; exit 1; }
mkdir -p "$out"; tag=$out/profile-$layer-$sp-v$v; [ "$f" = 0 ] || tag=$tag-f$f
if ! ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section SchedulerStats -k 'regex:bs[hkdtv]_kernel' -s "$skip" -c 1 \
        -f -o "$tag" "${run[@]}" >"$tag.log" 2>&1 || [ ! -s "$tag.ncu-rep" ]; then
    echo "kernel_profile: ncu failed; the end of $tag.log:" >&2; tail -n 5 "$tag.log" >&2; exit 1
fi
ncu -i "$tag.ncu-rep" --page details >"$tag.txt" 2>&1
grep -E 'bs[hkdtv]_kernel|Duration|Throughput|Registers Per Thread|Occupancy|Grid Size|Block Size|Shared Memory Config|Warp Cycles Per Issued|No Eligible' "$tag.txt" | head -n 30
echo "largest stall reasons (warp cycles per issued instruction):"
ncu -i "$tag.ncu-rep" --page raw 2>/dev/null | awk '/smsp__average_warps_issue_stalled_.*_per_issue_active.ratio/ {
    n = $1; sub(/^smsp__average_warps_issue_stalled_/, "", n); sub(/_per_issue_active.ratio$/, "", n); print $NF, n }' |
    sort -rn | head -n 6
