#!/usr/bin/env bash
# A SIGKILL in the middle of a write (tests/kill_shim.c, preloaded: it kills
# while the temporary is being written or just before it is renamed) leaves
# the previous file, which loads: for train (checkpoint) and prune (state
# file) `--resume` then ends bitwise equal to an uninterrupted run on the CPU;
# quantize has no --resume, so its previous output must stay intact and loadable
# and a rerun must equal an uninterrupted one. The next write to the same
# path removes the killed writer's temporary.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if ! ${CC:-cc} -O1 -shared -fPIC -o "$T/kill.so" tests/kill_shim.c -ldl 2>"$T/cc.err"; then
    echo "skip: cannot build the kill shim: $(head -n 1 "$T/cc.err")"; SKIP=1; summary; exit
fi
# Under SANITIZE=1 the shim is preloaded ahead of the ASan runtime.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
TR="$BIN/train --device cpu --quiet --data-dir $T/data --runs $T/runs"
PR="$BIN/prune --device cpu --quiet --data-dir $T/data --runs $T/runs"
QU="$BIN/quantize --device cpu --quiet"

# killed WHEN N PATH-SUFFIX CMD...: runs CMD with the shim killing it at the
# Nth write (WHEN: data or rename) to a file ending in PATH-SUFFIX; true when
# CMD died of SIGKILL (exit 137).
killed() {
    local when=$1 n=$2 suffix=$3; shift 3
    local rc  # (the subshell reaps CMD, so its "Killed" notice goes to /dev/null)
    rc=$( (LD_PRELOAD="$T/kill.so" SC_KILL_WHEN=$when SC_KILL_AT=$n SC_KILL_PATH=$suffix "$@" >/dev/null 2>&1
           echo $?) 2>/dev/null)
    [ "$rc" = 137 ]
}

# temps PATH: the number of temporaries of PATH left behind.
temps() { ls "$1".tmp.* 2>/dev/null | wc -l; }

# same_model NAME A B: the parameters, masks and buffers of A and B are equal.
same_model() {
    local g same=1
    [ -f "$2" ] && [ -f "$3" ] || same=0
    for g in "${@:4}"; do h5diff -q "$2" "$3" "$g" "$g" >/dev/null 2>&1 || same=0; done
    [ "$same" = 1 ] && ok "$1" || bad "$1" "$(basename "$2") and $(basename "$3") differ"
}

# --- train: killed while writing the epoch-2 checkpoint ------------------------
ARGS="--model lenet --epochs 3 --batch 100 --val-size 500 --seed 5 synthetic"
$TR $ARGS -o "$T/a.h5" >/dev/null 2>&1 || bad "train: uninterrupted run" "failed"
if killed data 2 /b.h5 $TR $ARGS -o "$T/b.h5"; then ok "train: killed mid-write"
else bad "train: killed mid-write" "the process was not killed"; fi
epoch=$(h5dump -a /state/epoch "$T/b.h5" 2>/dev/null | grep -oE '\(0\): [0-9]+' | grep -oE '[0-9]+$')
[ "${epoch:-0}" = 1 ] && ok "train: previous checkpoint (epoch 1) loads" \
    || bad "train: previous checkpoint loads" "epoch ${epoch:-?}"
[ "$(temps "$T/b.h5")" = 1 ] && ok "train: the killed write left its temporary" \
    || bad "train: the killed write left its temporary" "$(temps "$T/b.h5") temporaries"
$TR --resume -o "$T/b.h5" >/dev/null 2>&1 || bad "train: resume" "failed"
same_model "train: resume is bitwise equal" "$T/a.h5" "$T/b.h5" /params /buffers /optimizer
[ "$(temps "$T/b.h5")" = 0 ] && ok "train: the next write removed the temporary" \
    || bad "train: the next write removed the temporary" "$(temps "$T/b.h5") left"

# --- prune: killed as the state after iteration 2 is renamed ---------------------
# (saves: before iteration 1, then after each; population 3 with racing)
$PR --model lenet --population 1 --iterations 1 --batches 2 --batch 32 --val-size 200 \
    --target-sparsity 0.1 -o "$T/m.h5" synthetic >/dev/null 2>&1 || bad "prune: tiny model" "failed"
PARGS="--model lenet --population 3 --iterations 4 --batches 2 --batch 32 --val-size 200 --scan-images 64
       --from $T/m.h5 --target-sparsity 0.8 --finetune 1 --seed 3 --save-interval 0"
$PR $PARGS -o "$T/pa.h5" >/dev/null 2>&1 || bad "prune: uninterrupted run" "failed"
if killed rename 3 /pb.state $PR $PARGS -o "$T/pb.h5"; then ok "prune: killed at the state's rename"
else bad "prune: killed at the state's rename" "the process was not killed"; fi
[ ! -e "$T/pb.h5" ] && [ -s "$T/pb.state" ] && [ "$(temps "$T/pb.state")" = 1 ] \
    && ok "prune: previous state kept, temporary left" \
    || bad "prune: previous state kept" "$(ls "$T" | tr '\n' ' ')"
$PR --resume -o "$T/pb.h5" >/dev/null 2>&1 || bad "prune: resume" "failed"
same_model "prune: resume is bitwise equal" "$T/pa.h5" "$T/pb.h5" /params /masks /buffers
[ "$(temps "$T/pb.state")" = 0 ] && ok "prune: the next write removed the temporary" \
    || bad "prune: the next write removed the temporary" "$(temps "$T/pb.state") left"
# killed while writing the final model: the state (finished) stays and --resume writes it
if killed data 1 /pc.h5 $PR $PARGS -o "$T/pc.h5"; then ok "prune: killed mid-write of the model"
else bad "prune: killed mid-write of the model" "the process was not killed"; fi
[ ! -e "$T/pc.h5" ] && [ -s "$T/pc.state" ] && ok "prune: no partial model, state kept" \
    || bad "prune: no partial model, state kept" "$(ls "$T" | tr '\n' ' ')"
$PR --resume -o "$T/pc.h5" >/dev/null 2>&1 || bad "prune: resume after a killed model write" "failed"
same_model "prune: model after the killed write is bitwise equal" "$T/pa.h5" "$T/pc.h5" /params /masks /buffers

# --- quantize (no --resume): the previous output survives a kill mid-write --------
$QU --bits 8 "$T/pa.h5" -o "$T/qa.h5" >/dev/null 2>&1 || bad "quantize: uninterrupted run" "failed"
$QU --centroids 4 "$T/pa.h5" -o "$T/qb.h5" >/dev/null 2>&1 || bad "quantize: previous output" "failed"
sum=$(md5sum <"$T/qb.h5")
if killed data 1 /qb.h5 $QU --bits 8 "$T/pa.h5" -o "$T/qb.h5"; then ok "quantize: killed mid-write"
else bad "quantize: killed mid-write" "the process was not killed"; fi
[ "$(md5sum <"$T/qb.h5")" = "$sum" ] && ok "quantize: previous output intact" \
    || bad "quantize: previous output intact" "changed"
$BIN/export --quiet "$T/qb.h5" -o "$T/qb.export.h5" >/dev/null 2>&1 && ok "quantize: previous output loads" \
    || bad "quantize: previous output loads" "export refused it"
$QU --bits 8 "$T/pa.h5" -o "$T/qb.h5" >/dev/null 2>&1 || bad "quantize: rerun" "failed"
same_model "quantize: rerun is bitwise equal" "$T/qa.h5" "$T/qb.h5" /
[ "$(temps "$T/qb.h5")" = 0 ] && ok "quantize: the rerun removed the temporary" \
    || bad "quantize: the rerun removed the temporary" "$(temps "$T/qb.h5") left"
summary
