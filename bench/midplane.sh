#!/usr/bin/env bash
# Where the block kernels lose time on the 8x8 and 4x4 planes at the sparsity a
# trained model gives them (82-97%), in one device call: the tail kernel's
# chains (resnet18's layer3-4, vgg16's conv5-13 with its pools) checked, under
# compute-sanitizer memcheck, and against one-layer launches (gpu_test_tail
# --time), every variant of the one-layer kernels per layer and block sparsity against cuDNN
# (gpu_test_bsconv --time), then Nsight Compute on the tail and on each
# layer's best variant at PROFILE_SP (bench/kernel_profile.sh). One table in
# $OUT/midplane.md; the logs and profiles' text beside it.
#   bench/midplane.sh [BUILD]    BUILD (default build) holding tests/gpu_test_bsconv and tests/gpu_test_tail
# Environment (defaults): LAYERS ("r18-256x8 r18-512x4"), SPS ("0.85 0.9 0.95 0.99"),
# PROFILE_SP (0.9), OUT (bench/out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=${1:-build}
T=$B/tests/gpu_test_bsconv
[ -x "$T" ] && [ -x "$B/tests/gpu_test_tail" ] || { sed -n 2,12p "$0"; exit 2; }
out=${OUT:-bench/out}; mkdir -p "$out"
read -ra layers <<<"${LAYERS:-r18-256x8 r18-512x4}"
read -ra sps <<<"${SPS:-0.85 0.9 0.95 0.99}"
psp=${PROFILE_SP:-0.9}
nvidia-smi -L >/dev/null 2>&1 || { echo "midplane: no GPU here; nothing measured"; exit 0; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1 | tee "$out/midplane_gpu.txt"

"$B/tests/gpu_test_tail" --time >"$out/midplane_tail.log" 2>&1
echo "gpu_test_tail: $(tail -n 1 "$out/midplane_tail.log")"
compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/gpu_test_tail" >"$out/midplane_tail_memcheck.log" 2>&1
echo "memcheck gpu_test_tail: exit $?, $(tail -n 1 "$out/midplane_tail_memcheck.log")"
log=$out/midplane_time.log; : >"$log"
for l in "${layers[@]}"; do for s in "${sps[@]}"; do "$T" --time "$l" "$s" >>"$log" 2>&1; done; done
{
    echo "| layer | block sparsity | cuDNN ms | best variant | its ms | x cuDNN |"
    echo "|---|---|---|---|---|---|"
    awk '/^layer / { cur = $2; sub(":", "", cur) }
         /dense cuDNN fused conv/ { d = $(NF - 4) }
         $1 == "best" && $0 !~ / hybrid:/ { sub(":", "", $7); printf "| %s | %s | %.4f | %s | %s | %.2f |\n", cur, $7, d, $9, $10, d / $10 }' "$log"
    echo
    echo "Tail chains (resnet18 layer4 and layer3+4, one launch) against one-layer launches:"
    grep '^time ' "$out/midplane_tail.log" | sed 's/^/- /'
} | tee "$out/midplane.md"
OUT=$out bench/kernel_profile.sh tail "$psp" | tee -a "$out/midplane.md"
for l in "${layers[@]}"; do
    v=$(awk -v L="$l" -v S="$psp" '$1 == "best" && $3 == L && $0 !~ / hybrid:/ { sub(":", "", $7); if ($7 + 0 == S + 0) print $9 }' "$log" | tail -n 1)
    [ -n "$v" ] || { echo "midplane: no best variant for $l at $psp" | tee -a "$out/midplane.md"; continue; }
    echo "profile $l $psp variant $v:" | tee -a "$out/midplane.md"
    OUT=$out bench/kernel_profile.sh "$l" "$psp" "$v" | tee -a "$out/midplane.md"
done
