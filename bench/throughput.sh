#!/usr/bin/env bash
# End-to-end throughput of one daemon running no-op tasks: N tasks enqueued beforehand
# (FCALL dtq_enqueue, or raw XADD with "raw"), then the time until every one succeeded.
# Usage: bench/throughput.sh [N] [concurrency] [fcall|raw]
# EVENTS=all|terminal|off sets [limits] events; SUBSCRIBER=1 adds a client subscribed to
# the events channel (without a listener the Functions build no events at all).
# LIMIT="<options of <ns>_limit_set>" puts that limit on the queue first (as in fn_cost.sh).
# LEAN=1 makes the queue lean first (reference 4.3).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n=${1:-100000}
conc=${2:-64}
mode=${3:-fcall}
machine
echo "tasks: $n no-op, concurrency = $conc, enqueue = $mode, events = ${EVENTS:-all}, subscriber = ${SUBSCRIBER:-0}, limit = ${LIMIT:-none}, lean = ${LEAN:-0}"
start_worker "[worker]
worker_id = bench
queues = paused-at-first
[handler:noop]
builtin = noop"
rc SET dtq:queue:default:paused 1 >/dev/null
if [ "${LEAN:-0}" = 1 ]; then # a lean queue (reference 4.3): the tasks are entries alone
    [ "$(rc FCALL dtq_queue_mode 0 bench default lean)" = lean ] || { echo "queue_mode refused"; exit 1; }
fi
if [ -n "${LIMIT:-}" ]; then
    # shellcheck disable=SC2086
    [ "$(rc FCALL dtq_limit_set 0 bench default '' $LIMIT)" = set ] ||
        { echo "limit_set refused: $LIMIT"; exit 1; }
fi
used_memory() { rc INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }'; }
mem0=$(used_memory)
n_all=$n
if [ "$mode" = raw ]; then
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "XADD dtq:stream:default:p5 * task_type noop payload {}\r\n" }' | rc --pipe >/dev/null
else
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default noop {}\r\n" }' | rc --pipe >/dev/null
fi
stop_worker
start_worker "[worker]
worker_id = bench
concurrency = $conc
[limits]
events = ${EVENTS:-all}
[handler:noop]
builtin = noop"
wpid=${pids[-1]}
if [ "${SUBSCRIBER:-0}" = 1 ]; then # someone listens: every event is built and published
    rc SUBSCRIBE dtq:events >/dev/null &
    pids+=($!)
fi
resume_and_wait_start "$n"
rc CONFIG RESETSTAT >/dev/null
cpu0=$(redis_cpu)
wcpu0=$(proc_cpu "$wpid")
t0=$(now_ms)
n=$left
wait_drained
t1=$(now_ms)
ms=$((t1 - t0))
cpu1=$(redis_cpu)
wcpu1=$(proc_cpu "$wpid")
echo "ran $n tasks in $ms ms: $(( n * 1000 / (ms > 0 ? ms : 1) )) tasks/s"
awk -v a="$cpu0" -v b="$cpu1" -v n="$n" -v ms="$ms" 'BEGIN {
    printf "redis CPU: %.1f us/task (busy %.0f%% of the run)\n", (b - a) * 1e6 / n, (b - a) * 1e5 / ms }'
awk -v a="$wcpu0" -v b="$wcpu1" -v n="$n" -v ms="$ms" 'BEGIN {
    printf "daemon CPU: %.1f us/task (busy %.0f%% of the run)\n", (b - a) * 1e6 / n, (b - a) * 1e5 / ms }'
# Commands per task, those run inside Functions included (INFO commandstats counts both).
rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v n="$n" '/^cmdstat_/ {
    name = substr($1, 9); calls[name] = $3; usec[name] = $5; total += $3 }
    END { printf "redis commands: %.2f per task;", total / n
          for (c in calls) if (usec[c] / n >= 0.1) printf " %s %.2f (%.1f us)", c, calls[c] / n, usec[c] / n
          printf "\n" }'
# What stays in Redis per finished task (its hash, kept task_retention_s), and the
# daemon's peak resident memory.
mem1=$(used_memory)
echo "redis memory per retained succeeded task: $(( (mem1 - mem0) / n_all )) bytes"
echo "daemon peak RSS (VmHWM): $(awk '/^VmHWM/ { print $2, $3 }' "/proc/$wpid/status")"
