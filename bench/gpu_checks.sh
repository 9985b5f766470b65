#!/usr/bin/env bash
# Device-side checks that are not a benchmark of their own, one step per call:
#   bench/gpu_checks.sh tests     GPU tests, compute-sanitizer memcheck of the deploy
#                                 tests, and 1 vs 2 ranks of prune on one GPU (the
#                                 same search must end equal; 1,600 steps, so the old
#                                 carried-over loss scale would have doubled)
#   bench/gpu_checks.sh default   issue 3: the whole default `prune --population 8
#                                 cifar100` (from scratch), timed
#   bench/gpu_checks.sh deploy M  export /root/pipe/M.h5 and deploy it (fp32 and fp16
#                                 plans, CPU reference on every test image)
#   bench/gpu_checks.sh deploy-csr TAR
#                                 deploy every exported *.csr.h5 in the tarball TAR (for
#                                 example the 95% models of session 4, kept off git:
#                                 carry a build-*/ directory holding it) the same way
# Expects build/{bin,tests} unpacked and CIFAR-100 under /root/data; logs and JSON
# go to $OUT (or bench/out).
set -euo pipefail
cd "$(dirname "$0")/.."
step=$1
out=${OUT:-bench/out}; mkdir -p "$out" data /root/pipe
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
B=build/bin
case $step in
tests)
    for t in build/tests/gpu_test_*; do
        "$t" >"$out/$(basename "$t").log" 2>&1 && r=ok || r=FAILED
        echo "$(basename "$t"): $r: $(tail -n 1 "$out/$(basename "$t").log")"
    done
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/gpu_test_deploy \
        >"$out/sanitizer_deploy.log" 2>&1 && r=ok || r="FAILED ($?)"
    echo "compute-sanitizer gpu_test_deploy: $r: $(grep -E 'ERROR SUMMARY' "$out/sanitizer_deploy.log" | tail -n 1)"
    root=""; [ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
    [ -f /root/r18-5ep.h5 ] || $B/train --quiet --model resnet18 --epochs 5 -o /root/r18-5ep.h5 cifar100
    for np in 1 2; do
        # shellcheck disable=SC2086
        mpirun -q $root --bind-to none --oversubscribe --mca pml ob1 --mca btl self,vader \
            --mca btl_vader_single_copy_mechanism none -np $np $B/prune --from /root/r18-5ep.h5 \
            --population 8 --iterations 4 --batches 50 --finetune 0 --halve-every 0 \
            --target-sparsity 0.9 --seed 1 --quiet --runs /tmp/runs -o /tmp/det-np$np.h5 \
            --json "$out/det-np$np.json" cifar100 >/dev/null
    done
    python3 - "$out" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/det-np{n}.json")) for n in (1, 2))
keys = ("val_accuracy", "test_accuracy", "sparsity")
print("1 vs 2 ranks on one GPU:", {k: (a[k], b[k]) for k in keys},
      "equal" if all(a[k] == b[k] for k in keys) else "DIFFERENT")
PY
    ;;
default)
    t0=$(date +%s.%N)
    $B/prune --population 8 --quiet --runs /tmp/runs-default -o /root/pipe/default.h5 \
        --json "$out/prune-default.json" cifar100 >"$out/prune-default.log" 2>&1
    t1=$(date +%s.%N)
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"prune --population 8 cifar100: process {float(sys.argv[3])-float(sys.argv[2]):.1f} s, search {j['seconds']:.1f} s, images {j['images']:,}, sparsity {j['sparsity']:.4f}, val {j['val_accuracy']} test {j['test_accuracy']}\")" \
        "$out/prune-default.json" "$t0" "$t1"
    ;;
deploy)
    m=$2
    $B/export --quiet "/root/pipe/$m.h5" -o "/root/pipe/$m.csr.h5" --json "$out/export-$m.json"
    $B/deploy --quiet "/root/pipe/$m.csr.h5" --reference all --json "$out/deploy-$m.json" \
        --chart "$out/deploy-$m.svg" 2>&1 | tee "$out/deploy-$m.txt" | tail -n 40
    ;;
deploy-csr)
    d=$(mktemp -d); tar xJf "$2" -C "$d"
    for f in "$d"/*.csr.h5; do
        m=$(basename "$f" .csr.h5)
        $B/deploy --quiet "$f" --reference all --json "$out/deploy-$m.json" --chart "$out/deploy-$m.svg" \
            >"$out/deploy-$m.txt" 2>&1 || echo "$m: deploy failed"
        echo "== $m"; grep -E "test accuracy|batch" "$out/deploy-$m.txt"
    done
    ;;
*) echo "gpu_checks: unknown step $step (tests|default|deploy M|deploy-csr TAR)" >&2; exit 2 ;;
esac
