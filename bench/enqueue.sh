#!/usr/bin/env bash
# Enqueue rates in one sitting, N tasks each, all pipelined through redis-cli --pipe:
# one FCALL dtq_enqueue per task, FCALL dtq_enqueue_bulk with 1000 payloads per call, raw
# XADD of producer entries, and the floor: a bare XADD of two fields (what Redis alone
# does for one stream entry). No daemon runs; one started briefly loads the library.
# Usage: bench/enqueue.sh [N]
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n=${1:-100000}
machine
start_worker "[worker]
worker_id = bench
queues = none-served"
stop_worker
run() { # label, awk program printing the commands
    rc FLUSHDB >/dev/null # the Functions survive it
    awk -v n="$n" "$2" >"$tmp/cmds"
    local t0 t1
    t0=$(now_ms)
    rc --pipe <"$tmp/cmds" >/dev/null
    t1=$(now_ms)
    echo "$1: $n tasks in $((t1 - t0)) ms: $(( n * 1000 / (t1 - t0 > 0 ? t1 - t0 : 1) ))/s"
}
run "FCALL dtq_enqueue, pipelined" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default noop {}\r\n" }'
run "FCALL dtq_enqueue_bulk, 1000 per call" 'BEGIN { for (i = 0; i < n; i += 1000) { printf "FCALL dtq_enqueue_bulk 0 default noop 1000"; for (j = 0; j < 1000; j++) printf " {}"; printf "\r\n" } }'
run "raw XADD producer entries" 'BEGIN { for (i = 0; i < n; i++) printf "XADD dtq:stream:default:p5 * task_type noop payload {}\r\n" }'
run "floor: bare XADD of 2 fields" 'BEGIN { for (i = 0; i < n; i++) printf "XADD s * a 1 b 2\r\n" }'
