#!/usr/bin/env bash
# Regenerates the seed corpus of tests/fuzz/corpus/ with the built tools
# (BIN, default build/bin): a tiny network description, a 40-image CIFAR-100
# folder, and the model, quantized model and export file of that network
# trained for one epoch on it (and pruned on 4x2 blocks: a BSR export; on
# 4x2+0.25: a hybrid export). Seeds stay small so each fuzz run is fast.
set -eu
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin}
C=tests/fuzz/corpus
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p $C/fuzz_desc $C/fuzz_cifar $C/fuzz_model $C/fuzz_quant $C/fuzz_export
printf 'conv 4 3 stride=4 pad=1 name=c1\nbn name=b1\nrelu\nmaxpool 2 name=p1\nconv 4 3 pad=1 bias=0 name=c2\nadd p1 name=sum\navgpool 2\ngap\nlinear classes name=fc\n' >$C/fuzz_desc/tiny.txt
printf 'conv 6 5\nrelu\nmaxpool 2\nlinear 8 name=fc1\nlinear classes\n' >$C/fuzz_desc/lenetish.txt
# an unknown model fails after the synthetic set is written: the data only
"$BIN/train" --device cpu --quiet --data-dir "$T/data" --model no-such-model synthetic -o "$T/x.h5" >/dev/null 2>&1 || true
mkdir -p "$T/tiny"
head -c $((40 * 3074)) "$T/data/synthetic/train.bin" >"$T/tiny/train.bin"
head -c $((20 * 3074)) "$T/data/synthetic/test.bin" >"$T/tiny/test.bin"
head -c $((6 * 3074)) "$T/data/synthetic/train.bin" >$C/fuzz_cifar/six.bin
"$BIN/train" --device cpu --quiet --model $C/fuzz_desc/tiny.txt --epochs 1 --batch 8 --val-size 8 "$T/tiny" -o $C/fuzz_model/tiny.h5 >/dev/null
"$BIN/quantize" --device cpu --quiet --centroids 4 --kmeans-weight none --batch 8 $C/fuzz_model/tiny.h5 -o $C/fuzz_quant/tiny.h5 >/dev/null
"$BIN/export" --quiet $C/fuzz_quant/tiny.h5 -o $C/fuzz_export/tiny.h5 >/dev/null
# the same net pruned on 4x2 blocks: an export with BSR layers (format_version 3)
"$BIN/prune" --device cpu --quiet --from $C/fuzz_model/tiny.h5 --pattern 4x2 --method oneshot --target-sparsity 0.5 \
    --epochs 0.5 --batch 8 --val-size 8 "$T/tiny" -o "$T/blocks.h5" >/dev/null
"$BIN/export" --quiet "$T/blocks.h5" -o $C/fuzz_export/tiny_bsr.h5 >/dev/null
# and on 4x2 blocks plus single weights: a hybrid export (format_version 4, BSR + remainder)
"$BIN/prune" --device cpu --quiet --from $C/fuzz_model/tiny.h5 --pattern 4x2+0.25 --method oneshot --target-sparsity 0.5 \
    --epochs 0.5 --batch 8 --val-size 8 "$T/tiny" -o "$T/hybrid.h5" >/dev/null
"$BIN/export" --quiet "$T/hybrid.h5" -o $C/fuzz_export/tiny_hybrid.h5 >/dev/null
ls -l $C/*/
