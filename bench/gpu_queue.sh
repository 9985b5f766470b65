# shellcheck shell=bash
# A job queue over the GPUs of one machine, sourced by the bench scripts that
# run many independent jobs (bench/prune_pareto.sh, bench/pattern_table.sh):
# one job per GPU at a time, so every timing has its GPU to itself.
# A worker claims a free GPU for each job (a lock directory per GPU under
# $GQ_LOCKS, default /tmp/gq-locks, shared by every script on the machine), so
# two scripts started side by side share the GPUs instead of doubling up, and a
# command that takes a GPU's lock (gq_claim) keeps the queues off it. GPU_IDS
# (e.g. "2,3") limits the GPUs a script may claim (default: all of nvidia-smi's).
# GQ_SLOTS (default 1) lets that many jobs share a GPU (slot S > 0 of GPU G is
# the lock gpuG.S): for work that is not timed, e.g. prune runs that leave the
# GPU idle between small kernels. Timed work runs with GQ_SLOTS=1 after such a
# run has ended (a one-slot claim does not wait for the other slots).
#
#   . bench/gpu_queue.sh
#   gq_run WORK NGPU SUMMARY_FN RUN_FN JOB...
#
# RUN_FN JOB runs one job with CUDA_VISIBLE_DEVICES set and OMP_NUM_THREADS =
# all cores for one worker, else cores / (2 x workers) (a whole share
# oversubscribed the cores: two prunes at 16 threads each on 32 cores took
# 150 s, at 8 threads 65-70 s; alone, 8 to 32 threads ran alike), its output
# in WORK/logs/JOB.log. A job that returns 0 is
# marked done (WORK/done/JOB) and skipped by later calls (REDO=1 runs every
# job again), so a run longer than one device call goes on when the same
# command runs again on the same machine. Past DEADLINE seconds of the
# calling script (default 540: a device call ends at 10 minutes) SUMMARY_FN
# saves what is done while the jobs go on; it runs again at the end. One line
# per job in WORK/logs/jobs.txt. GQ_READY names a function READY JOB that the
# worker calls before it claims a GPU for JOB (a job that waits for another
# one waits there, holding no GPU).

# gq_data DATASET: links data/cifar-100-binary to /root/data when that exists; 1
# (with a message) when DATASET is cifar100 and its train.bin is missing.
gq_data() {
    [ -e data/cifar-100-binary ] || [ ! -d /root/data ] || { mkdir -p data; ln -s /root/data data/cifar-100-binary; }
    [ "$1" != cifar100 ] || [ -f data/cifar-100-binary/train.bin ] || { echo "no CIFAR-100 in data/cifar-100-binary" >&2; return 1; }
}

# gq_gpus: how many jobs at a time: $GPUS, else the GPUs of GPU_IDS, else nvidia-smi's count (0 when none).
gq_gpus() {
    if [ -n "${GPUS:-}" ]; then echo "$GPUS"
    elif [ -n "${GPU_IDS:-}" ]; then tr ',' '\n' <<<"$GPU_IDS" | grep -c .
    else nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; fi
}

# gq_next WORK: the next queued job name (empty when none), under a mkdir lock.
gq_next() {
    local w=$1 n
    until mkdir "$w/q.lock" 2>/dev/null; do sleep 0.2; done
    n=$(cat "$w/q.next")
    echo $((n + 1)) >"$w/q.next"
    rmdir "$w/q.lock"
    sed -n "$((n + 1))p" "$w/q.jobs"
}

# gq_ids: the GPU indices this script may claim, one per line (0 on a machine without GPUs).
gq_ids() {
    local n
    if [ -n "${GPU_IDS:-}" ]; then tr ',' '\n' <<<"$GPU_IDS"; return; fi
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    seq 0 $(( ${n:-0} > 1 ? n - 1 : 0 ))
}

# gq_claim OWNER: waits for a GPU slot of gq_ids whose lock it can take (a lock
# whose owner process has died is taken over), records OWNER (a pid) in it,
# prints the lock's name: the GPU's index, then '.' and the slot for a slot > 0.
gq_claim() {
    local d=${GQ_LOCKS:-/tmp/gq-locks} own=$1 i s l
    mkdir -p "$d"
    while :; do
        for s in $(seq 0 $((${GQ_SLOTS:-1} - 1))); do
            for i in $(gq_ids); do
                l=$i; [ "$s" = 0 ] || l=$i.$s
                if mkdir "$d/gpu$l" 2>/dev/null; then echo "$own" >"$d/gpu$l/pid"; echo "$l"; return 0; fi
                kill -0 "$(cat "$d/gpu$l/pid" 2>/dev/null)" 2>/dev/null || rm -rf "$d/gpu$l"
            done
        done
        sleep 1
    done
}

# gq_release L: gives the GPU lock L (gq_claim's name) back.
gq_release() { rm -rf "${GQ_LOCKS:-/tmp/gq-locks}/gpu$1"; }

# gq_on_gpu CMD...: runs CMD on a GPU it claims for the time, then gives it back.
gq_on_gpu() {
    local me=$BASHPID g rc
    g=$(gq_claim "$me")
    CUDA_VISIBLE_DEVICES=${g%.*} "$@" && rc=0 || rc=$?
    gq_release "$g"
    return $rc
}

# gq_worker N WORK THREADS RUN_FN: worker N runs queued jobs, each on a GPU it
# claims for the job, until the queue is empty.
gq_worker() {
    local n=$1 w=$2 th=$3 fn=$4 me=$BASHPID j g t0 rc
    while j=$(gq_next "$w") && [ -n "$j" ]; do
        [ -z "${GQ_READY:-}" ] || "$GQ_READY" "$j" || true
        g=$(gq_claim "$me")
        t0=$(date +%s)
        echo "[worker $n, gpu $g] $j started"
        CUDA_VISIBLE_DEVICES=${g%.*} OMP_NUM_THREADS=$th "$fn" "$j" >"$w/logs/$j.log" 2>&1 && rc=0 || rc=$?
        gq_release "$g"
        [ $rc -eq 0 ] && touch "$w/done/$j"
        echo "$j gpu=$g rc=$rc seconds=$(($(date +%s) - t0))" >>"$w/logs/jobs.txt"
        echo "[worker $n, gpu $g] $j done: rc $rc, $(($(date +%s) - t0)) s"
    done
}

# gq_running PID...: 0 while one of them runs.
gq_running() {
    local p
    for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done
    return 1
}

# gq_run WORK NGPU SUMMARY_FN RUN_FN JOB...: the jobs not done yet over NGPU
# workers (with GQ_SLOTS, NGPU x GQ_SLOTS of them).
gq_run() {
    local w=$1 ngpu=$2 summary=$3 fn=$4 j g th nw early=0 pids=()
    shift 4
    mkdir -p "$w/logs" "$w/done"
    rm -rf "$w/q.lock"
    [ "${REDO:-0}" = 1 ] && rm -f "$w"/done/*
    : >"$w/q.jobs"
    for j in "$@"; do
        if [ -f "$w/done/$j" ]; then echo "$j: done before (REDO=1 runs it again)"; else echo "$j" >>"$w/q.jobs"; fi
    done
    echo 0 >"$w/q.next"
    echo "# $(date -u +%FT%TZ) jobs: $*" >>"$w/logs/jobs.txt"
    nw=$((ngpu * ${GQ_SLOTS:-1}))
    th=$(($(nproc) / nw / (nw > 1 ? 2 : 1)))
    [ "$th" -ge 1 ] || th=1
    for ((g = 0; g < nw; g++)); do gq_worker "$g" "$w" "$th" "$fn" & pids+=($!); done
    while gq_running "${pids[@]}"; do
        if [ $early = 0 ] && [ "$SECONDS" -ge "${DEADLINE:-540}" ]; then
            echo "gpu_queue: ${DEADLINE:-540} s passed: saving what is done (jobs go on)"
            "$summary" || true
            early=1
        fi
        sleep 2
    done
    wait
    "$summary"
}
