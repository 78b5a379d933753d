#!/usr/bin/env bash
# Promotion rate: N retrying tasks due now in dtq:retry:schedule, one daemon as scheduler
# leader; time until every one is back in its stream. Usage: bench/promotion.sh [N] [batch]
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n=${1:-100000}
batch=${2:-500}
machine
echo "tasks: $n, [scheduler] batch = $batch, interval_ms = 1000"
# Load the tasks with a far-future due time so none moves before the clock starts.
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) {
    printf "HSET dtq:task:b%d id b%d queue bench task_type noop payload {} status retrying attempt 1 priority 5 created_at 1 metadata {}\r\n", i, i
    printf "ZADD dtq:retry:schedule 9000000000000 b%d\r\n", i } }' | rc --pipe >/dev/null
# The daemon serves another queue, so promoted entries stay in their stream to be counted.
start_worker "[worker]
worker_id = bench
queues = elsewhere
[scheduler]
batch = $batch"
for _ in $(seq 100); do [ "$(rc GET dtq:lock:scheduler)" = bench ] && break; sleep 0.05; done
rc ZUNIONSTORE dtq:retry:schedule 1 dtq:retry:schedule WEIGHTS 0 >/dev/null # all due now
# The clock starts at the leader's first pass (it comes within interval_ms, which is not
# promotion time) and counts what was still to move then.
while :; do
    left=$(( $(rc ZCARD dtq:retry:schedule) + $(rc ZCARD dtq:retry:claimed) ))
    [ "$left" -lt "$n" ] && break
    sleep 0.002
done
t0=$(now_ms)
moved=$left
while :; do
    left=$(( $(rc ZCARD dtq:retry:schedule) + $(rc ZCARD dtq:retry:claimed) ))
    [ "$left" -eq 0 ] && break
    sleep 0.01
done
t1=$(now_ms)
queued=$(rc XLEN dtq:stream:bench:p5)
ms=$((t1 - t0))
[ "$queued" -eq "$n" ] || { echo "only $queued of $n entries in the stream"; exit 1; }
echo "promoted $queued tasks; the last $moved in $ms ms: $(( moved * 1000 / (ms > 0 ? ms : 1) )) tasks/s"
