#!/usr/bin/env bash
# Builds and runs the CPU emulation of the block-sparse conv kernel
# (bench/wip/bsconv_emu.cpp) on the GPU test's cases: needs g++ and the CUDA
# headers (cuda_fp16.h, cuda_bf16.h), no GPU. Usage: bench/wip/bsconv_emu.sh [SPARSITIES]
# (1 to 5: how many of 0, 0.5, 0.95, 0.99, 1.0; default all; about a minute on 2 cores).
set -eu
cd "$(dirname "$0")/../.."
CUDA=${CUDA:-/usr/local/cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the kernel's text: from "using namespace nvcuda;" to the launch section
sed -n '/^using namespace nvcuda;/,/^\/\/ --- launch/p' kernels/bsconv.cu |
    grep -v '^// --- launch\|^using namespace' >"$tmp/kernel.inc"
for f in kernels/bsconv_cpu.c runtime/rng.c kernels/error.c; do
    gcc -O2 -std=gnu11 -I. -c "$f" -o "$tmp/$(basename "$f" .c).o"
done
g++ -O2 -std=c++17 -fpermissive -w -I. -I"$CUDA/include" -DSC_HAVE_CUDA \
    -DBSCONV_KERNEL_INC="\"$tmp/kernel.inc\"" bench/wip/bsconv_emu.cpp \
    "$tmp"/bsconv_cpu.o "$tmp"/rng.o "$tmp"/error.o -o "$tmp/emu" -lpthread -lm
"$tmp/emu" "${1:-5}"
