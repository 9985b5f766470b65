#!/usr/bin/env bash
# A GPU job longer than one device call (a call ends at 10 minutes; the machine
# keeps its files and processes while the next call follows within about 30 s):
#   bench/detach.sh start NAME CMD...   copies this checkout (build/ included) to
#                                       /root/detach/NAME/tree and starts CMD there,
#                                       detached (setsid), output in .../NAME/log
#   bench/detach.sh wait NAME [SECONDS] waits until the job ends or SECONDS pass
#                                       (default 540), then copies what it wrote to
#                                       $OUT/NAME and prints the end of its log
# Call `wait` again in the next device call to go on waiting. The job writes its
# results under $DETACH_OUT (/root/detach/NAME/out), not under a call's $OUT,
# which every call empties. `start` refuses a NAME already started on this
# machine, so sending the same start-and-wait command again only waits.
# Example (two calls): bench/detach.sh start pareto bench/prune_pareto.sh vgg16 \
#   && bench/detach.sh wait pareto; then: bench/detach.sh wait pareto
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
cmd=${1:-}; name=${2:-}
[ -n "$cmd" ] && [ -n "$name" ] || { sed -n 2,16p "$0"; exit 2; }
d=/root/detach/$name
case $cmd in
start)
    shift 2
    [ $# -gt 0 ] || { echo "detach: start $name: no command" >&2; exit 2; }
    if [ -e "$d/pid" ]; then echo "detach: $name already started; waiting only"; exit 0; fi
    mkdir -p "$d/tree" "$d/out" && cp -a . "$d/tree/" || { echo "detach: cannot copy the checkout to $d" >&2; exit 1; }
    (cd "$d/tree" && DETACH_OUT="$d/out" OUT="$d/out" DETACH_RC="$d/rc" \
         setsid nohup bash -c '"$@"; echo $? >"$DETACH_RC"' detach "$@" >"$d/log" 2>&1 </dev/null &
     echo $! >"$d/pid")
    echo "detach: $name started (pid $(cat "$d/pid")): $*"
    ;;
wait)
    [ -e "$d/pid" ] || { echo "detach: $name was not started on this machine" >&2; exit 1; }
    # The rc file, not the pid, says the job ended: a later call may not see the pid
    # (session 17: kill -0 failed in the next call while the job ran on and finished).
    limit=${3:-540}; t0=$SECONDS
    while [ ! -e "$d/rc" ] && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 2; done
    if [ -e "$d/rc" ]; then echo "detach: $name ended, exit status $(cat "$d/rc")"
    else echo "detach: $name has not ended after ${limit} s (or was lost with its machine)"; fi
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/$name" && cp -r "$d/out/." "$OUT/$name/" && cp "$d/log" "$OUT/$name/log"; fi
    tail -n 20 "$d/log"
    ;;
*) echo "detach: unknown command $cmd (start or wait)" >&2; exit 2 ;;
esac
