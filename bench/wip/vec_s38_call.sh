#!/usr/bin/env bash
# The device call session 38 had ready for its eight stacked patches in bench/wip (no machine was lent): on
# the GPU machine, after `bench/ab_pack.sh bench/wip/vec_{epi_halves,deal_classes,offsets,regular_rows,stride2_dei,pairs,pool_staged,small_tiles}.patch .dev/ab` here (A: main, B: main + the eight
# changes) and carrying .dev/ab:
#   bash bench/wip/vec_s38_call.sh .dev/ab        (about 6 minutes; everything under $OUT/logs.tar.xz)
# 1. A's and B's gpu_test_bsconv, every case; 2. bench/kernel_ab.sh A B on 8x1 blocks (B checked first:
# every case, memcheck of vector variants 21, 23, 25, 27 and 30); 3. shared-load wavefronts and instructions of
# both under ncu; 4. 8x2 blocks, A against B, best checked variant.
set -u
d=${1:?pack directory}; L=$OUT/logs; mkdir -p "$L"
nvidia-smi -L; date
for k in A B; do mkdir -p /tmp/vs38$k; tar xJf "$d/$k.tar.xz" -C /tmp/vs38$k; done
for k in A B; do timeout 200 /tmp/vs38$k/tests/gpu_test_bsconv >"$L/$k.bsconv.log" 2>&1
    echo "$k gpu_test_bsconv: $(tail -n 1 "$L/$k.bsconv.log")"; done
LAY="r18-64x32 r18-64x32+res r18-128x16 r18-256x8 r18-512x4 vgg-512x2 vgg-256x8+pool r18-64to128s2"
BLOCK=8x1 SPARSITIES="0.95 0.9" VARIANTS="21 23 25 27 30" LAYERS="$LAY" OUT=$L/ab timeout 300 \
    bench/kernel_ab.sh "$d/A.tar.xz" "$d/B.tar.xz"
for k in A B; do for c in "r18-64x32 21" "r18-512x4 23" "vgg-256x8+pool 21" "r18-64to128s2 21"; do set -- $c
    BLOCK=8x1 timeout 30 ncu --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__sass_inst_executed_op_shared_ld.sum,smsp__inst_executed.sum,gpu__time_duration.sum \
        -k regex:bsv_kernel -s 20 -c 1 /tmp/vs38$k/tests/gpu_test_bsconv --time "$1" 0.95 "$2" >"$L/ncu-$k-$1.txt" 2>&1
    echo "== $k $1 variant $2"; grep -E "wavefronts|shared_ld|inst_executed|duration" "$L/ncu-$k-$1.txt"
done; done
# best BLOCK K LAYER SP: variant / ms / x cuDNN of build K's best checked variant.
best() { BLOCK=$1 timeout 30 /tmp/vs38$2/tests/gpu_test_bsconv --time "$3" "$4" 2>&1 | tee -a "$L/best-$2-$1.log" |
    awk '/^best / { for (i = 1; i <= NF; i++) if ($i == "variant") v = $(i + 1) " / " $(i + 2); else if ($i == "=") x = $(i + 1) }
         END { print v " / " x }'; }
echo "| layer (8x2) | sparsity | A variant / ms / x cuDNN | B variant / ms / x cuDNN |"; echo "|---|---|---|---|"
for l in r18-64x32 r18-128x16 r18-256x8 r18-512x4 vgg-512x2 vgg-256x8+pool; do for s in 0.95 0.9; do
    echo "| $l | $s | $(best 8x2 A $l $s) | $(best 8x2 B $l $s) |"; done; done
date
tar cJf "$OUT/logs.tar.xz" -C "$OUT" logs && rm -rf "$L"
