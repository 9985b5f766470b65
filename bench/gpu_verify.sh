#!/usr/bin/env bash
# One device call that checks a build on the GPU machine before anything is
# timed (tools and tests unpacked under build/, CIFAR-100 under
# /root/data/cifar-100-binary):
#   1. every build/tests/gpu_test_* (each at most $TEST_LIMIT s, default 300),
#      one line each, logs under $OUT/gpu_tests.tgz;
#   2. the dense fp16 engine on trained resnet18 and vgg16 ($MODELS), built
#      $RUNS times each (default 3) in separate processes: its test top-1
#      over all 10,000 images and its agreement with the CPU reference on the
#      first $REF images (default 384). The engine picks cuDNN plans by timing,
#      so a wrong pick shows as a run that disagrees.
#   bench/gpu_verify.sh            # tests + engine runs
#   SKIP_TESTS=1 bench/gpu_verify.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}; L=/tmp/gpu_verify; mkdir -p "$out" "$L" data /root/pipe
[ -e data/cifar-100-binary ] || ln -s /root/data/cifar-100-binary data/cifar-100-binary
if [ -z "${SKIP_TESTS:-}" ]; then
    for t in build/tests/gpu_test_*; do
        s=$(date +%s); timeout "${TEST_LIMIT:-300}" "$t" >"$L/$(basename "$t").log" 2>&1; rc=$?
        echo "$(basename "$t") rc=$rc $(( $(date +%s) - s ))s: $(grep -v '^ *$' "$L/$(basename "$t").log" | tail -n 1)"
    done
    tar czf "$out/gpu_tests.tgz" -C "$L" .
fi
for m in ${MODELS:-resnet18 vgg16}; do
    [ -f "/root/$m.h5" ] || build/bin/train --quiet --model "$m" -o "/root/$m.h5" cifar100 | tail -n 1
    build/bin/export --quiet "/root/$m.h5" -o "/root/pipe/$m.csr.h5" >/dev/null
    for r in $(seq 1 "${RUNS:-3}"); do
        build/bin/deploy "/root/pipe/$m.csr.h5" --precision none --engine fp16 --reference "${REF:-384}" \
            --chart none --json "$out/engine-$m-$r.json" >/dev/null 2>"$L/engine-$m-$r.err"
        echo "$m run $r rc=$?: $(grep -E 'fp16: batch|warning' "$L/engine-$m-$r.err" | tr '\n' ' ')"
    done
done
