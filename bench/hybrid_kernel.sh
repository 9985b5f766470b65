#!/usr/bin/env bash
# Hybrid layers (blocks plus single weights, prune --pattern KxC+F) on the
# block-sparse kernel, in one device call: the checks first (every
# gpu_test_bsconv case, hybrid ones included; compute-sanitizer memcheck of
# the halo variants in VARIANTS; gpu_test_dengine with its 16x8+0.2 net), then
# each layer timed as plain 16x8 blocks at SPARSITY and as the hybrid 16x8+F
# at the same total sparsity (its block sparsity 1 - (1 - SPARSITY)(1 - F),
# the singles the rest), alternating ROUNDS times; one table in
# $OUT/hybrid_kernel.md (the best checked variant's median of 50, and cuDNN's).
#   bench/hybrid_kernel.sh [BUILD]    BUILD (default build) holding tests/gpu_test_bsconv
#                                     and tests/gpu_test_dengine
# Environment (defaults): LAYERS ("r18-64x32 r18-128x16 r18-256x8 r18-512x4
# r18-64x32+res vgg-512x2"), SPARSITY (0.95), F (0.2), VARIANTS ("4 15"),
# ROUNDS (2), OUT (bench/out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=${1:-build}
T=$B/tests/gpu_test_bsconv
[ -x "$T" ] && [ -x "$B/tests/gpu_test_dengine" ] || { sed -n 2,14p "$0"; exit 2; }
out=${OUT:-bench/out}; mkdir -p "$out"
read -ra layers <<<"${LAYERS:-r18-64x32 r18-128x16 r18-256x8 r18-512x4 r18-64x32+res vgg-512x2}"
read -ra variants <<<"${VARIANTS:-4 15}"
sp=${SPARSITY:-0.95}; f=${F:-0.2}; rounds=${ROUNDS:-2}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tee "$out/hybrid_gpu.txt"

# 1. correctness: a failure stops the timing
"$T" >"$out/hybrid_bsconv_test.log" 2>&1
last=$(tail -n 1 "$out/hybrid_bsconv_test.log"); echo "gpu_test_bsconv: $last"
case $last in
*" 0 passed, 0 failed"*) echo "hybrid_kernel: no GPU (every case skipped)"; exit 0 ;;
*" passed, 0 failed"*) ;;
*) echo "hybrid_kernel: gpu_test_bsconv fails; not timed"; exit 1 ;;
esac
echo "hybrid cases passed: $(grep -c '^ok .* rem [0-9]' "$out/hybrid_bsconv_test.log")"
for v in "${variants[@]}"; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --variant "$v" >"$out/hybrid_memcheck_$v.log" 2>&1
    rc=$?; echo "memcheck variant $v: exit $rc, $(grep -c 'ERROR SUMMARY: 0 errors' "$out/hybrid_memcheck_$v.log") clean summary"
    [ $rc -eq 0 ] || { echo "hybrid_kernel: memcheck of variant $v failed; not timed"; exit 1; }
done
"$B/tests/gpu_test_dengine" >"$out/hybrid_dengine.log" 2>&1; echo "gpu_test_dengine: $(tail -n 1 "$out/hybrid_dengine.log")"

# 2. timing: plain and hybrid alternating, each the best checked variant
log=$out/hybrid_time.log; : >"$log"
for r in $(seq 1 "$rounds"); do
    for l in "${layers[@]}"; do
        "$T" --time "$l" "$sp" >>"$log" 2>&1
        "$T" --time "$l" "$sp" -1 "$f" >>"$log" 2>&1
    done
done
{
    echo "| layer | cuDNN ms | 16x8 at $sp ms (x cuDNN) | 16x8+$f ms (x cuDNN) | hybrid / plain |"
    echo "|---|---|---|---|---|"
    for l in "${layers[@]}"; do
        awk -v L="$l" '
            /^layer / { cur = $2; sub(":", "", cur) }
            cur == L && /dense cuDNN fused conv/ { d[++nd] = $(NF - 4) }
            $1 == "best" && $3 == L && $0 !~ / hybrid:/ { p[++np] = $(NF - 7) }
            $1 == "best" && $3 == L && / hybrid:/ { h[++nh] = $(NF - 7) }
            function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                           return n ? (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : 0 }
            END { dm = med(d, nd); pm = med(p, np); hm = med(h, nh)
                  if (pm > 0 && hm > 0) printf "| %s | %.4f | %.4f (%.2fx) | %.4f (%.2fx) | %.2f |\n", L, dm, pm, dm / pm, hm, dm / hm, hm / pm
                  else printf "| %s | missing | | | |\n", L }' "$log"
    done
    echo
    echo "medians over $rounds rounds; each entry the best checked variant's median of 50 (gpu_test_bsconv --time)"
} | tee "$out/hybrid_kernel.md"
