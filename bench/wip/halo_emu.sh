#!/usr/bin/env bash
# Builds and runs the CPU emulation of the block-sparse conv's halo kernel
# (bench/wip/halo_emu/: kernels/bsconv_halo.cu compiled as host C++ with the
# device built-ins, cp.async, ldmatrix and mma.sync emulated) on the GPU
# test's cases against the CPU reference: needs g++ and the CUDA headers, no GPU.
#   bench/wip/halo_emu.sh [HALO_VARIANT...] [-s SHAPE]   (default: every variant, every shape)
# Halo variant v is gpu_test_bsconv's variant v + 4. SANITIZE=1 adds AddressSanitizer;
# EMU_SMS=N emulates a GPU of N SMs (default 132; 1 makes persistent CTAs walk many tiles).
set -eu
cd "$(dirname "$0")/../.."
CUDA=${CUDA:-/usr/local/cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
san=""; [ "${SANITIZE:-0}" = 1 ] && san="-fsanitize=address -fno-omit-frame-pointer"
sed 's/extern __shared__ __align__(16) char bsh_smem\[\];/char *bsh_smem = emu_smem;/' kernels/bsconv_halo.cu >"$tmp/bsconv_halo_emu.cpp"
for f in kernels/bsconv_halo.c kernels/bsconv_cpu.c runtime/rng.c kernels/error.c; do
    gcc -O1 -g $san -std=gnu11 -I. -DSC_HAVE_CUDA -I"$CUDA/include" -c "$f" -o "$tmp/$(basename "$f" .c).o"
done
flags="-O1 -g $san -std=c++17 -w -fpermissive -I. -Ibench/wip/halo_emu -I$CUDA/include -DSC_HAVE_CUDA -include bench/wip/halo_emu/prelude.h"
g++ $flags -DBSH_SOURCE="\"$tmp/bsconv_halo_emu.cpp\"" -c bench/wip/halo_emu/kernel_tu.cpp -o "$tmp/k.o"
g++ $flags -c bench/wip/halo_emu/driver.cpp -o "$tmp/d.o"
g++ $san "$tmp"/*.o -o "$tmp/emu" -lpthread -lm
"$tmp/emu" "$@"
