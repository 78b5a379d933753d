#!/usr/bin/env bash
# Idle enqueue-to-start latency: one daemon waiting on an empty queue; K times a C client
# enqueues one task and waits for its TASK_STARTED event (bench/latency.c). Beside it, the
# hop it is made of: a bare blocking XREADGROUP consumer woken by an XADD cannot be faster
# than one trip through Redis; dtq's path takes three (enqueue wakes the daemon's blocking
# read, the daemon's claim call, the event to the client).
# The probe also prints the enqueue's own round trip: after 20 ms idle a single Function
# call pays for cold caches on this kind of machine (compare a PING after the same pause).
# Usage: bench/latency.sh [K]
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
k=${1:-200}
bin=${DTQ_LATENCY:-$root/build/bench/latency}
machine
echo "probes: $k, one at a time, 20 ms apart, events = all"
start_worker "[worker]
worker_id = bench
concurrency = 64
[handler:noop]
builtin = noop"
"$bin" "$tmp/r.sock" dtq default noop "$k"
