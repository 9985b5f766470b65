#!/usr/bin/env bash
# Test of bench/gpu_queue.sh without GPUs (GPU_IDS names two pretend ones):
# every job runs once, one per GPU at a time; a job whose GQ_READY check waits
# for another job claims its GPU only after that job, and a third job runs on
# the free GPU meanwhile (without GQ_READY the waiting job claims a GPU at
# once); a failed job is not marked done and the next call runs only it; with
# GQ_SLOTS=2 four jobs share the two GPUs at once, each seeing a GPU index.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. bench/gpu_queue.sh
export GQ_LOCKS=$T/locks GPU_IDS=0,1

# job J: A sleeps 2 s then marks itself; B waits for A; C records whether A was still running; F fails once.
job() {
    case $1 in
    A) sleep 2; touch "$T/A.ok" ;;
    B) while [ ! -f "$T/A.ok" ]; do sleep 0.1; done ;;
    C) [ -f "$T/A.ok" ] && echo late >"$T/C.when" || echo early >"$T/C.when" ;;
    F) [ -f "$T/F.once" ] || { touch "$T/F.once"; return 1; } ;;
    esac
    echo "$1 on GPU $CUDA_VISIBLE_DEVICES" >>"$T/ran"
}
# ready J: B waits for A.
ready() { if [ "$1" = B ]; then while [ ! -f "$T/A.ok" ]; do sleep 0.1; done; fi; return 0; }
none() { :; }

# b_after_a LOG: 0 when B claimed its GPU only after A was done.
b_after_a() { [ "$(grep -n "A done" "$1" | cut -d: -f1)" -lt "$(grep -n "B started" "$1" | cut -d: -f1)" ]; }

GQ_READY=ready gq_run "$T/w" 3 none job A B C F >"$T/first" 2>&1
[ "$(grep -c . "$T/ran")" = 3 ] && ok "each job ran once, F failed" || bad "jobs" "$(cat "$T/ran")"
b_after_a "$T/first" && [ "$(cat "$T/C.when")" = early ] && ok "a waiting job holds no GPU: B claims one after A, C ran while A did" \
    || bad "waiting job" "C ran $(cat "$T/C.when"): $(cat "$T/first")"
[ -f "$T/w/done/A" ] && [ ! -f "$T/w/done/F" ] && ok "done marks: A yes, F no" || bad "done marks" "$(ls "$T/w/done")"
gq_run "$T/w" 3 none job A B C F >"$T/second" 2>&1
[ "$(grep -c "F on GPU" "$T/ran")" = 1 ] && grep -q "A: done before" "$T/second" && ok "the next call runs only the failed job" \
    || bad "second call" "$(cat "$T/second")"
rm -rf "$T/w" "$T/A.ok" "$T/ran"
gq_run "$T/w" 3 none job A B C >"$T/control" 2>&1
b_after_a "$T/control" && bad "control" "B claimed after A without GQ_READY: $(cat "$T/control")" \
    || ok "without GQ_READY B holds a GPU while it waits (the test can tell)"

# slot J: a job that records how many jobs run beside it (one line each in $T/seen) and its GPU.
slot() {
    mkdir -p "$T/running"; touch "$T/running/$1"
    sleep 1; find "$T/running" -type f | wc -l >>"$T/seen"
    sleep 0.5; rm -f "$T/running/$1"
    echo "$CUDA_VISIBLE_DEVICES" >>"$T/slot-gpus"
}
# most: the most jobs any slot job saw at once.
most() { sort -n "$T/seen" | tail -n 1; }
GQ_SLOTS=2 gq_run "$T/s2" 2 none slot P Q R S >"$T/slots" 2>&1
[ "$(most)" = 4 ] && [ "$(sort -u "$T/slot-gpus" | tr '\n' ' ')" = "0 1 " ] \
    && ok "GQ_SLOTS=2: four jobs at once on GPUs 0 and 1" || bad "slots" "most $(most), GPUs $(cat "$T/slot-gpus")"
rm -f "$T/seen" "$T/slot-gpus"
gq_run "$T/s1" 2 none slot P Q R S >"$T/slots1" 2>&1
[ "$(most)" = 2 ] && ok "one slot: two jobs at once (the test can tell)" || bad "one slot" "most $(most)"
summary
