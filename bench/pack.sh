#!/usr/bin/env bash
# Packs the stripped tools and GPU tests of a build for the GPU machine (the
# working tree that travels is limited to 64 MiB):
#   bench/pack.sh [BUILD]        -> BUILD/pack/bins.tar.xz (carry BUILD/pack)
# There: mkdir -p BUILD && tar xJf BUILD/pack/bins.tar.xz -C BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$B/pack"
for f in "$B"/bin/*; do strip -o "$stage/bin/$(basename "$f")" "$f"; done
for f in "$B"/tests/*; do strip -o "$stage/tests/$(basename "$f")" "$f"; done
tar cJf "$B/pack/bins.tar.xz" -C "$stage" .
ls -la "$B/pack/bins.tar.xz"
