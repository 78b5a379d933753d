#!/usr/bin/env bash
# Redis memory per retained task: N small tasks ([<i>] payloads, a no-op handler) enqueued
# and run to success by a daemon, then Redis's used_memory against the empty namespace's;
# the difference per task is what task_retention_s (and result_retention_s) keep per task
# after it succeeded (the task hash with its TTL; with a result, the result key). Also a
# lean queue (reference 4.3), which keeps nothing of a succeeded task.
# Usage: bench/retention_memory.sh [N]
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n=${1:-20000}
machine
echo "tasks: $n, payload [<i>], handler builtin noop (no result) or echo (the payload as result)"
run() { # label, queue, handler, [lean]
    local before after
    rc FLUSHDB >/dev/null # the Functions survive it
    start_worker "[worker]
worker_id = bench
queues = $2
concurrency = 64
[handler:$3]
builtin = $3"
    [ "${4:-}" = lean ] && rc FCALL dtq_queue_mode 0 bench "$2" lean >/dev/null
    rc MEMORY PURGE >/dev/null 2>&1 || true
    before=$(rc INFO memory | awk -F: '/^used_memory:/ { print $2 + 0 }')
    awk -v n="$n" -v q="$2" -v t="$3" \
        'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 %s %s [%d]\r\n", q, t, i }' \
        >"$tmp/cmds"
    rc --pipe <"$tmp/cmds" >/dev/null
    while [ "$(rc XLEN "dtq:stream:$2:p5")" -ne 0 ] || [ "$(rc HGET dtq:worker:bench active_tasks)" != 0 ]; do
        sleep 0.2
    done
    sleep 1 # the last finish batch
    rc MEMORY PURGE >/dev/null 2>&1 || true
    after=$(rc INFO memory | awk -F: '/^used_memory:/ { print $2 + 0 }')
    echo "$1: $(((after - before) / n)) bytes per succeeded task kept ($(((after - before) / 1024)) KiB for $n)"
    stop_worker
}
run "full queue, no result" mem noop
run "full queue, result kept (echo)" memr echo
run "lean queue" meml noop lean
