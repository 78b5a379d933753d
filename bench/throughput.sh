#!/usr/bin/env bash
# End-to-end throughput of one daemon running no-op tasks: N tasks enqueued beforehand
# (FCALL dtq_enqueue, or raw XADD with "raw"), then the time until every one succeeded.
# Usage: bench/throughput.sh [N] [concurrency] [fcall|raw]
. "$(dirname "$0")/lib.sh"
n=${1:-100000}
conc=${2:-64}
mode=${3:-fcall}
machine
echo "tasks: $n no-op, concurrency = $conc, enqueue = $mode, events = ${EVENTS:-all}"
start_worker "[worker]
worker_id = bench
queues = paused-at-first
[handler:noop]
builtin = noop"
rc SET dtq:queue:default:paused 1 >/dev/null
if [ "$mode" = raw ]; then
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "XADD dtq:stream:default:p5 * task_type noop payload {}\r\n" }' | rc --pipe >/dev/null
else
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default noop {}\r\n" }' | rc --pipe >/dev/null
fi
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
start_worker "[worker]
worker_id = bench
concurrency = $conc
[limits]
events = ${EVENTS:-all}
[handler:noop]
builtin = noop"
t0=$(now_ms)
rc DEL dtq:queue:default:paused >/dev/null
while :; do
    left=$(rc XLEN dtq:stream:default:p5)
    [ "$left" -eq 0 ] && break
    sleep 0.02
done
t1=$(now_ms)
ms=$((t1 - t0))
echo "ran $n tasks in $ms ms: $(( n * 1000 / (ms > 0 ? ms : 1) )) tasks/s"
