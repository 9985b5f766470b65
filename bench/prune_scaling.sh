#!/usr/bin/env bash
# Issue 7: scaling of the evolutionary search over GPUs, on the GPU machine.
#   bench/prune_scaling.sh [NP...]          (default: 1 2 4, as far as there are GPUs)
# Runs the same search with `mpirun -np N` (one GPU per rank) for each N and
# prints the table of every run kept so far:
#   GPUs | wall s (the process) | search s (--json seconds) | images/s | speedups | val / test
# The search: resnet18 from a trained model on CIFAR-100, population 8,
# ITER iterations x BATCHES batches of 512 (default 30 x 50, prune's own
# defaults: 6,144,000 images), no racing, no fine-tuning (phases with one
# solution run on one rank: docs/prune.md, "Several GPUs").
# MPIRUN_ARGS replaces the transport options (default: shared memory only).
# Results are kept in $KEEP (default ~/prune-scaling, which survives between
# commands on a warm machine) and copied to $OUT when set, so the runs can be
# split over commands that each stay under 10 minutes: `... 1`, then `... 2 4`.
# Expects build/bin/{train,prune} built with MPI and CIFAR-100 in /root/data
# (docs/architecture.md, Running on the GPU machine); trains a short start model (5 epochs) into
# ~/r18-5ep.h5 when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
nps=${*:-1 2 4}
iter=${ITER:-30}
batches=${BATCHES:-50}
keep=${KEEP:-$HOME/prune-scaling}
mkdir -p "$keep" data
[ -e data/cifar-100-binary ] || ln -s /root/data data/cifar-100-binary
ldd build/bin/prune | grep -q libmpi || { echo "prune_scaling: build/bin/prune has no MPI" >&2; exit 1; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
start=$HOME/r18-5ep.h5
[ -f "$start" ] || build/bin/train --quiet --model resnet18 --epochs 5 -o "$start" cifar100
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
# One machine: shared memory only. A container that forbids cross-process
# reads (CMA) needs vader's copy-in/copy-out; a tiny CPU run checks first.
mpiargs=${MPIRUN_ARGS:---mca pml ob1 --mca btl self,vader}
preflight() {
    # shellcheck disable=SC2086
    mpirun -q $root --bind-to none $mpiargs -np 2 build/bin/prune --device cpu --quiet --model lenet \
        --population 2 --iterations 1 --batches 1 --batch 32 --val-size 100 --data-dir /tmp/pf \
        --runs /tmp/pf/runs -o /tmp/pf/m.h5 synthetic >/dev/null 2>&1
}
if ! preflight; then
    mpiargs="$mpiargs --mca btl_vader_single_copy_mechanism none"
    preflight || { echo "prune_scaling: mpirun -np 2 prune fails (try MPIRUN_ARGS=...)" >&2; exit 1; }
fi
echo "prune_scaling: mpirun $mpiargs"
args="--from $start --population 8 --iterations $iter --batches $batches --finetune 0 --halve-every 0
      --target-sparsity 0.9 --lr 0.2 --sched onecycle --warmup 0.1 --seed 1 --quiet --runs /tmp/runs"
for np in $nps; do
    if [ "$np" -gt "$gpus" ]; then echo "prune_scaling: skip -np $np ($gpus GPUs)"; continue; fi
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    mpirun -q $root --bind-to none $mpiargs -np "$np" build/bin/prune $args -o "/tmp/scale-np$np.h5" \
        --json "$keep/scale-np$np.json" cifar100 >/dev/null
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' >"$keep/scale-np$np.wall"
    echo "prune_scaling: -np $np: $(cat "$keep/scale-np$np.wall") s"
done
[ -n "${OUT:-}" ] && cp "$keep"/scale-np* "$OUT"/ 2>/dev/null || true
python3 - "$keep" <<'PY'
import glob, json, os, sys
keep = sys.argv[1]
rows = []
for f in glob.glob(os.path.join(keep, "scale-np*.json")):
    j = json.load(open(f))
    wall = float(open(f[:-5] + ".wall").read())
    rows.append((j["ranks"], wall, j["seconds"], j["images"], j["images_per_second"],
                 j["val_accuracy"], j["test_accuracy"],
                 f'{j["device"]}: {j["model"]}, {j["dataset"]}, population {j["population"]}'))
rows.sort()
if not rows:
    sys.exit("prune_scaling: no runs in " + keep)
base = {r[0]: r for r in rows}.get(1)
print(f"prune scaling on {rows[0][7]}, {rows[0][3]:,} training images per run")
print("| GPUs | wall s | search s | images/s | speedup wall | speedup search | wall / 1 GPU | search / 1 GPU | val / test |")
print("|---|---|---|---|---|---|---|---|---|")
def ratio(a, b, fmt):
    return fmt.format(a / b) if base else "-"
for n, wall, sec, img, ips, val, test, _ in rows:
    cells = [str(n), f"{wall:.1f}", f"{sec:.1f}", f"{ips:,.0f}",
             ratio(base[1] if base else 0, wall, "{:.2f}x"), ratio(base[2] if base else 0, sec, "{:.2f}x"),
             ratio(wall, base[1] if base else 1, "{:.3f}"), ratio(sec, base[2] if base else 1, "{:.3f}"),
             f"{val:.2f} / {test:.2f}"]
    print("| " + " | ".join(cells) + " |")
PY
