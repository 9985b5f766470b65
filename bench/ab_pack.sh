#!/usr/bin/env bash
# Builds the two gpu_test_bsconv packs that bench/kernel_ab.sh compares, on this
# machine (no GPU needed): A from the checkout's HEAD, B from HEAD with the
# PATCHes applied in order (a stack), each in its own temporary worktree, for CUDA_ARCH (default 90):
#   bench/ab_pack.sh PATCH... [OUTDIR]   -> OUTDIR/A.tar.xz, OUTDIR/B.tar.xz
# (OUTDIR, the last argument when it does not end in .patch, default .dev/ab, which git ignores when .dev/
# is in .git/info/exclude; carry it to the GPU machine and run bench/kernel_ab.sh OUTDIR/A.tar.xz OUTDIR/B.tar.xz).
# About 3 minutes per build on 2 cores. Each pack holds tests/gpu_test_bsconv, stripped.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,8p "$0"; exit 2; }
out=.dev/ab; arch=${CUDA_ARCH:-90}
case "${!#}" in *.patch) ;; *) out=${!#}; set -- "${@:1:$#-1}" ;; esac
[ $# -ge 1 ] || { sed -n 2,8p "$0"; exit 2; }
patches=()
for p in "$@"; do
    [ -f "$p" ] || { echo "ab_pack: no patch $p" >&2; exit 1; }
    patches+=("$(realpath "$p")")
done
mkdir -p "$out"; out=$(realpath "$out")
tmp=$(mktemp -d); trap 'for k in A B; do git worktree remove --force "$tmp/$k" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
for k in B A; do  # B first: a stack that does not apply stops before any build
    git worktree add --quiet --detach "$tmp/$k" HEAD
    for p in "${patches[@]}"; do
        [ $k = A ] || git -C "$tmp/$k" apply "$p" || { echo "ab_pack: $p does not apply on the ones before it" >&2; exit 1; }
    done
    echo "ab_pack: building $k ($(git -C "$tmp/$k" describe --always --dirty)) for sm_$arch"
    make -C "$tmp/$k" -j"$(nproc)" CUDA_ARCH="$arch" build/tests/gpu_test_bsconv >"$tmp/$k.log" 2>&1 ||
        { echo "ab_pack: $k does not build; the end of its log:" >&2; tail -n 20 "$tmp/$k.log" >&2; exit 1; }
    mkdir -p "$tmp/$k.pack/tests"
    strip -o "$tmp/$k.pack/tests/gpu_test_bsconv" "$tmp/$k/build/tests/gpu_test_bsconv"
    tar cJf "$out/$k.tar.xz" -C "$tmp/$k.pack" tests
done
ls -la "$out/A.tar.xz" "$out/B.tar.xz"
