#!/usr/bin/env bash
# Builds bench/gpu_train_bench against a GPU build of the library and packs
# the GPU test and bench binaries (xz) for a run on the GPU machine:
#   bench/gpu_bench.sh [build-dir]      (default build-gpu)
# On the GPU machine: tar xJf <build-dir>/pack/bins.tar.xz -C /tmp/b
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
LIBS="-L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5 /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a -lpthread -lm -fopenmp -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudnn -lcublas -lcudart -lstdc++"
make BUILD="$B" -j2 "$B/libsparsecnn.a" "$B/tests/gpu_test_ops" "$B/tests/gpu_test_exec" >/dev/null
make BUILD="$B" -j2 "$B/bin/train" >/dev/null 2>&1 || echo "note: train tool not built"
mkdir -p "$B/bench" "$B/pack"
gcc -O2 -std=gnu11 -Wall -I. -DSC_HAVE_CUDA -I/usr/local/cuda/include -fopenmp \
    bench/gpu_train_bench.c "$B/libsparsecnn.a" $LIBS -o "$B/bench/gpu_train_bench"
stage=$(mktemp -d)
for f in "$B/tests/gpu_test_ops" "$B/tests/gpu_test_exec" "$B/bench/gpu_train_bench" "$B/bin/train"; do
    [ -f "$f" ] && strip -o "$stage/$(basename "$f")" "$f"
done
tar cJf "$B/pack/bins.tar.xz" -C "$stage" .
rm -rf "$stage"
ls -la "$B/pack/bins.tar.xz"
