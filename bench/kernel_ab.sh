#!/usr/bin/env bash
# Two builds of the block-sparse kernel side by side on one GPU, in one device
# call: B is checked first (every gpu_test_bsconv case, then compute-sanitizer
# memcheck of the variants in VARIANTS), then both are timed layer by layer in
# alternation (A, B, A, B: `gpu_test_bsconv --time LAYER SPARSITY`, each the best
# checked variant, median of 50) and one table says which is faster.
#   bench/kernel_ab.sh A_PACK B_PACK      each a tar.xz holding tests/gpu_test_bsconv of one
#                                         build, e.g. tar cJf a.tar.xz -C build tests/gpu_test_bsconv
#                                         (about 4 MB; bench/pack.sh's whole pack also works)
# Environment (defaults): LAYERS ("r18-64x32 r18-256x8 r18-512x4 vgg-512x2"),
# SPARSITIES ("0.999 0.95 0.9"), VARIANTS ("0 7 11 12": memcheck of B),
# ROUNDS (2), OUT (bench/out: kernel_ab.md and the logs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -eq 2 ] && [ -f "$1" ] && [ -f "$2" ] || { sed -n 2,12p "$0"; exit 2; }
out=${OUT:-bench/out}; mkdir -p "$out"
read -ra layers <<<"${LAYERS:-r18-64x32 r18-256x8 r18-512x4 vgg-512x2}"
read -ra sps <<<"${SPARSITIES:-0.999 0.95 0.9}"
read -ra variants <<<"${VARIANTS:-0 7 11 12}"
rounds=${ROUNDS:-2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for k in A B; do
    mkdir -p "$tmp/$k"
    f=$1; [ $k = B ] && f=$2
    tar xJf "$f" -C "$tmp/$k" || { echo "kernel_ab: cannot unpack $f" >&2; exit 1; }
    [ -x "$tmp/$k/tests/gpu_test_bsconv" ] || { echo "kernel_ab: $f has no tests/gpu_test_bsconv" >&2; exit 1; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tee "$out/kernel_ab_gpu.txt"

# 1. B's correctness: every case, then memcheck per variant (a failure stops the timing).
"$tmp/B/tests/gpu_test_bsconv" >"$out/kernel_ab_B_test.log" 2>&1
last=$(tail -n 1 "$out/kernel_ab_B_test.log"); echo "B: $last"
case $last in
*" 0 passed, 0 failed"*) echo "kernel_ab: no GPU (every case skipped); nothing to time"; exit 0 ;;
*" passed, 0 failed"*) ;;
*) echo "kernel_ab: B fails its correctness cases; not timed"; exit 1 ;;
esac
for v in "${variants[@]}"; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "$tmp/B/tests/gpu_test_bsconv" --variant "$v" \
        >"$out/kernel_ab_B_memcheck_$v.log" 2>&1
    rc=$?; echo "memcheck variant $v: rc $rc ($(grep -c 'Invalid\|Error' "$out/kernel_ab_B_memcheck_$v.log") error lines)"
    [ $rc -eq 0 ] || { echo "kernel_ab: memcheck failed on variant $v; not timed"; exit 1; }
done

# best K LAYER SP: "variant ms" of build K's fastest checked variant (empty when none).
best() {
    "$tmp/$1/tests/gpu_test_bsconv" --time "$2" "$3" 2>&1 | tee -a "$out/kernel_ab_$1_time.log" |
        awk '/^best / { for (i = 1; i <= NF; i++) if ($i == "variant") { print $(i + 1), $(i + 2); exit } }'
}

# median X...: the median of the numbers, 4 decimals.
median() {
    printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {printf "%.4f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# 2. Timing, alternating builds, the median of the rounds per build.
{
    echo "| layer | sparsity | A variant / ms | B variant / ms | B / A |"
    echo "|---|---|---|---|---|"
    for L in "${layers[@]}"; do
        for s in "${sps[@]}"; do
            ta=(); tb=(); va=""; vb=""
            for ((r = 0; r < rounds; r++)); do
                read -r v t <<<"$(best A "$L" "$s")"; va=$v; ta+=("$t")
                read -r v t <<<"$(best B "$L" "$s")"; vb=$v; tb+=("$t")
            done
            ma=$(median "${ta[@]}"); mb=$(median "${tb[@]}")
            ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')
            echo "| $L | $s | $va / $ma | $vb / $mb | $ratio |"
        done
    done
} | tee "$out/kernel_ab.md"
