#!/usr/bin/env bash
# The halo, direct, vector and tail kernels of the block-sparse conv (kernels/bsconv_halo.cu,
# kernels/bsconv_direct.cu, kernels/bsconv_vec.cu, kernels/bsconv_tail.cu) emulated on the CPU (tests/halo_emu/: the files
# compiled as host C++, threads, barriers, shuffles, cp.async, ldmatrix and
# mma.sync emulated) on the GPU test's cases against the CPU reference, so that
# a machine without a GPU checks the kernels' index math and buffers. Needs g++ and the CUDA headers (skipped without them).
#   tests/halo_emu.sh [HALO_VARIANT...] [-s SHAPE]   (default: every halo, direct and vector variant,
#                                                     every shape, then the tail kernel's chains)
#   tests/halo_emu.sh vec [-s SHAPE]                 the vector kernel's variants only
#   tests/halo_emu.sh tail                           the tail kernel's chains only
# By default the 0.5 and 0.95 sparsities in fp16 (about 1.5 minutes on 2 cores, the build included);
# EMU_FULL=1 every sparsity in fp16 and bf16 (several times longer). Halo variant v
# is gpu_test_bsconv's variant v + 4. SANITIZE=1 adds AddressSanitizer;
# EMU_SMS=N emulates a GPU of N SMs (default 132).
set -u
cd "$(dirname "$0")/.." || exit 1
CUDA=${CUDA:-/usr/local/cuda}
if ! command -v g++ >/dev/null || [ ! -f "$CUDA/include/cuda_runtime.h" ] || [ ! -f "$CUDA/include/cudnn.h" ]; then
    echo "skip halo emulation (no g++ or no CUDA headers in $CUDA/include)"
    echo "halo emulation: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
san=""; [ "${SANITIZE:-0}" = 1 ] && san="-fsanitize=address -fno-omit-frame-pointer"
fail() { echo "halo emulation: build failed: $1"; echo "halo emulation: 0 passed, 1 failed, 0 skipped"; exit 1; }
sed 's/extern __shared__ __align__(16) char bsh_smem\[\];/char *bsh_smem = emu_smem;/' kernels/bsconv_halo.cu >"$tmp/bsconv_halo_emu.cpp"
sed 's/__shared__ \(int\|float\) /static \1 /' kernels/bsconv_direct.cu >"$tmp/bsconv_direct_emu.cpp"  # one CTA at a time
sed 's/extern __shared__ __align__(16) char bst_smem\[\];/char *bst_smem = emu_smem;/' kernels/bsconv_tail.cu >"$tmp/bsconv_tail_emu.cpp"
sed 's/extern __shared__ __align__(16) unsigned char bsv_sm\[\];/unsigned char *bsv_sm = (unsigned char *)emu_smem;/' \
    kernels/bsconv_vec.cu >"$tmp/bsconv_vec_emu.cpp"
for f in kernels/bsconv_halo.c kernels/bsconv_direct.c kernels/bsconv_vec.c kernels/bsconv_cpu.c runtime/rng.c runtime/half.c kernels/error.c; do
    gcc -O1 -g $san -std=gnu11 -I. -DSC_HAVE_CUDA -I"$CUDA/include" -c "$f" -o "$tmp/$(basename "$f" .c).o" ||
        fail "$f"
done
flags="-O1 -g $san -std=c++17 -w -fpermissive -I. -Itests/halo_emu -I$CUDA/include -DSC_HAVE_CUDA -include tests/halo_emu/prelude.h"
g++ $flags -DEMU_SOURCE="\"$tmp/bsconv_halo_emu.cpp\"" -DEMU_ARGS=bsh_args -DEMU_RUNNER=emu_run_halo \
    -c tests/halo_emu/kernel_tu.cpp -o "$tmp/k.o" || fail "halo kernel"
g++ $flags -DEMU_SOURCE="\"$tmp/bsconv_direct_emu.cpp\"" -DEMU_ARGS=bsd_args -DEMU_RUNNER=emu_run_direct \
    -c tests/halo_emu/kernel_tu.cpp -o "$tmp/kd.o" || fail "direct kernel"
g++ $flags -DEMU_SOURCE="\"$tmp/bsconv_tail_emu.cpp\"" -DEMU_ARGS=bst_args -DEMU_RUNNER=emu_run_tail \
    -c tests/halo_emu/kernel_tu.cpp -o "$tmp/kt.o" || fail "tail kernel"
g++ $flags -DEMU_SOURCE="\"$tmp/bsconv_vec_emu.cpp\"" -DEMU_ARGS=bsv_args -DEMU_RUNNER=emu_run_vec \
    -c tests/halo_emu/kernel_tu.cpp -o "$tmp/kv.o" || fail "vector kernel"
g++ $flags -c tests/halo_emu/driver.cpp -o "$tmp/d.o" || fail driver
g++ $san "$tmp"/*.o -o "$tmp/emu" -lpthread -lm || fail link
"$tmp/emu" "$@"
