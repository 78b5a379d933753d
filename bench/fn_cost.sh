#!/usr/bin/env bash
# Redis time per task of <ns>_enqueue, <ns>_fetch and <ns>_finish, measured by Redis itself (INFO
# commandstats), without a daemon in the loop: most of what bench/throughput.sh reports
# as "redis CPU". With CALLGRIND=1 the server runs under callgrind and each phase also
# prints instructions per task: the same count for the same code, however busy the
# machine is, so a change to lua/ can be compared on a noisy machine.
# Usage: bench/fn_cost.sh [N] [batch]   (EVENTS=all|terminal|off, default off; SUBSCRIBER=1
# adds a client subscribed to the events channel; LIMIT="<options of <ns>_limit_set>" puts
# that limit on the queue the tasks go through, e.g. LIMIT="rate 1000000 period_ms 1000
# concurrency 1000000": high enough that no task waits, so what it adds is the admission's
# own cost; LIMIT_TYPE=noop sets it on the task type instead of the queue; LEAN=1 makes the
# queue lean, reference 4.3: enqueue writes the entry alone, finish acknowledges in its
# lean section)
if [ "${CALLGRIND:-0}" = 1 ]; then
    export REDIS_WRAP="valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null"
fi
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n=${1:-20000}
batch=${2:-100}
bin=${DTQ_FN_COST:-$root/build/bench/fn_cost}
machine
echo "tasks: $n no-op, fetched and finished in batches of $batch, events = ${EVENTS:-off}, subscriber = ${SUBSCRIBER:-0}, limit = ${LIMIT:-none}, lean = ${LEAN:-0}"
# A daemon loads the Functions and publishes <ns>:config, then stops.
start_worker "[worker]
worker_id = bench
queues = not-this-one
[limits]
events = ${EVENTS:-off}
[handler:noop]
builtin = noop"
stop_worker
if [ "${LEAN:-0}" = 1 ]; then # the queue is lean (reference 4.3)
    [ "$(rc FCALL dtq_queue_mode 0 bench default lean)" = lean ] || { echo "queue_mode refused"; exit 1; }
fi
if [ -n "${LIMIT:-}" ]; then
    # shellcheck disable=SC2086
    [ "$(rc FCALL dtq_limit_set 0 bench default "${LIMIT_TYPE:-}" $LIMIT)" = set ] ||
        { echo "limit_set refused: $LIMIT"; exit 1; }
fi
if [ "${SUBSCRIBER:-0}" = 1 ]; then # someone listens: the Functions build their events
    rc SUBSCRIBE dtq:events >/dev/null &
    pids+=($!)
fi
if [ "${CALLGRIND:-0}" = 1 ]; then
    rpid=${pids[0]}
    cat >"$tmp/hook" <<HOOK
#!/bin/sh
# begin|end phase: count the server's instructions over one phase
if [ "\$1" = begin ]; then
    callgrind_control -z $rpid >/dev/null 2>&1 && callgrind_control -i on $rpid >/dev/null 2>&1
else
    callgrind_control -e Ir $rpid 2>/dev/null | awk -v p="\$2" -v n=$n '/^ *Th 1 / { gsub(",", "", \$3); printf "%-7s %.0f server instructions/task\n", p, \$3 / n }'
    callgrind_control -i off $rpid >/dev/null 2>&1
fi
HOOK
    chmod +x "$tmp/hook"
    export FN_COST_HOOK="$tmp/hook"
fi
"$bin" "$tmp/r.sock" dtq "$n" "$batch"
