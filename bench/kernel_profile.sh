#!/usr/bin/env bash
# Nsight Compute on one variant of the block-sparse conv kernel for one layer,
# on the GPU machine:
#   bench/kernel_profile.sh LAYER SPARSITY VARIANT [F]  e.g. r18-64x32 0.95 4
# Runs `gpu_test_bsconv --time LAYER SPARSITY VARIANT [F]` (only that variant's
# launches; F: a hybrid layer, singles that share of the kept weights) under ncu, profiles one launch after the warm-up (SKIP launches,
# default 20) with the sections that say where its time goes, writes
# OUT/profile-LAYER-SPARSITY-vVARIANT.{ncu-rep,txt} (OUT: bench/out) and prints
# duration, throughputs, occupancy, registers and the largest warp stall reasons.
# GTB: the test binary (default build/tests/gpu_test_bsconv, built for the GPU).
# Without ncu or a GPU: one line, exit 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -eq 3 ] || [ $# -eq 4 ] || { sed -n 2,12p "$0"; exit 2; }
layer=$1 sp=$2 v=$3 f=${4:-0}
gtb=${GTB:-build/tests/gpu_test_bsconv}; out=${OUT:-bench/out}; skip=${SKIP:-20}
command -v ncu >/dev/null || { echo "kernel_profile: no ncu here; nothing profiled"; exit 0; }
nvidia-smi -L >/dev/null 2>&1 || { echo "kernel_profile: no GPU here; nothing profiled"; exit 0; }
[ -x "$gtb" ] || { echo "kernel_profile: no $gtb (build it: make CUDA_ARCH=90 $gtb)" >&2; exit 1; }
mkdir -p "$out"; tag=$out/profile-$layer-$sp-v$v; [ "$f" = 0 ] || tag=$tag-f$f
if ! ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section SchedulerStats -k 'regex:bs[hkd]_kernel' -s "$skip" -c 1 \
        -f -o "$tag" "$gtb" --time "$layer" "$sp" "$v" "$f" >"$tag.log" 2>&1 || [ ! -s "$tag.ncu-rep" ]; then
    echo "kernel_profile: ncu failed; the end of $tag.log:" >&2; tail -n 5 "$tag.log" >&2; exit 1
fi
ncu -i "$tag.ncu-rep" --page details >"$tag.txt" 2>&1
grep -E 'bs[hkd]_kernel|Duration|Throughput|Registers Per Thread|Occupancy|Grid Size|Block Size|Shared Memory Config|Warp Cycles Per Issued|No Eligible' "$tag.txt" | head -n 30
echo "largest stall reasons (warp cycles per issued instruction):"
ncu -i "$tag.ncu-rep" --page raw 2>/dev/null | awk '/smsp__average_warps_issue_stalled_.*_per_issue_active.ratio/ {
    n = $1; sub(/^smsp__average_warps_issue_stalled_/, "", n); sub(/_per_issue_active.ratio$/, "", n); print $NF, n }' |
    sort -rn | head -n 6
