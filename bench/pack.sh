#!/usr/bin/env bash
# Packs stripped tools and GPU tests of a build for the GPU machine (the
# working tree that travels is limited to 64 MiB; every binary of a build packs
# to about 99 MB, so name the ones the call needs):
#   bench/pack.sh [BUILD] [NAME...]  -> BUILD/pack/bins.tar.xz (carry BUILD/pack)
#   NAME: a tool (bin/NAME) or a test (tests/NAME), e.g.
#   bench/pack.sh build train prune export deploy gpu_test_bsconv   (about 17 MB)
#   with no NAME, every tool and test of the build.
# There: mkdir -p BUILD && tar xJf BUILD/pack/bins.tar.xz -C BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
[ $# -gt 0 ] && shift
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$B/pack"
files=()
if [ $# -eq 0 ]; then
    files=("$B"/bin/* "$B"/tests/*)
else
    for n in "$@"; do
        if [ -f "$B/bin/$n" ]; then files+=("$B/bin/$n")
        elif [ -f "$B/tests/$n" ]; then files+=("$B/tests/$n")
        else echo "pack: no $B/bin/$n or $B/tests/$n (build it first)" >&2; exit 1; fi
    done
fi
for f in "${files[@]}"; do strip -o "$stage/$(basename "$(dirname "$f")")/$(basename "$f")" "$f"; done
tar cJf "$B/pack/bins.tar.xz" -C "$stage" .
ls -la "$B/pack/bins.tar.xz"
