#!/usr/bin/env bash
# dtq-web at scale: TASKS retained task hashes (1,000,000), QUEUES queues (100) with entries
# in two bands each, a dead-letter stream and an events stream, 20 worker hashes with
# per-queue counters; then the time of each page's API call, median of RUNS.
# Usage: bench/web.sh [TASKS] [QUEUES] [RUNS]
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
web=${DTQ_WEB:-$root/build/dtq-web}
n=${1:-1000000}
nq=${2:-100}
runs=${3:-20}
machine
echo "task hashes: $n, queues: $nq, runs per page: $runs"
start_worker "[worker]
worker_id = bench
queues = q0
[limits]
events_stream_maxlen = 100000"
# retained tasks: finished hashes, as a busy deployment keeps them for task_retention_s
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++)
    printf "HSET dtq:task:t%d id t%d queue q%d task_type noop payload {} status succeeded attempt 1 priority 5 created_at 1 metadata {}\r\n", i, i, i % 100 }' |
    rc --pipe >/dev/null
# queues with waiting entries in p7 and p3; dead letters; events; other workers' hashes
awk -v nq="$nq" 'BEGIN { for (q = 0; q < nq; q++) {
    printf "SADD dtq:queues q%d\r\n", q
    for (i = 0; i < 20; i++) printf "XADD dtq:stream:q%d:p%d * task_id t%d attempt 1\r\n", q, (i % 2 ? 7 : 3), q * 20 + i
    if (q) printf "XGROUP CREATE dtq:stream:q%d:p7 workers 0 MKSTREAM\r\n", q }
  for (i = 0; i < 5000; i++) {
    printf "XADD dtq:stream:dead-letter * task_id t%d queue q%d task_type noop payload {} attempt 3 last_error boom last_error_class %s\r\n", i, i % nq, (i % 10 ? "permanent" : "timeout")
    printf "XADD dtq:stream:events * event '{\"type\":\"TASK_SUCCEEDED\",\"task_id\":\"t%d\",\"queue\":\"q0\"}'\r\n", i }
  for (w = 0; w < 20; w++) {
    printf "SADD dtq:workers w%d\r\n", w
    printf "HSET dtq:worker:w%d worker_id w%d status running started_at 1 last_heartbeat 9999999999999 concurrency 16 active_tasks 0", w, w
    for (q = 0; q < nq; q++) printf " q:q%d:succeeded %d q:q%d:failed 0 q:q%d:retried 0", q, w, q, q
    printf "\r\n" } }' | rc --pipe >/dev/null
echo "redis: $(rc DBSIZE) keys, $(rc INFO memory | grep -m1 used_memory_human | tr -d '\r')"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$web" -u "unix://$tmp/r.sock" --listen "127.0.0.1:$port" 2>"$tmp/web.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/info" >/dev/null && break; sleep 0.05; done
page() { # path: median and max of `runs` calls, ms
    local times=() t
    for _ in $(seq "$runs"); do
        t=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$port$1")
        times+=("$t")
    done
    printf '%s\n' "${times[@]}" | sort -n | awk -v p="$1" '{ a[NR] = $1 } END {
        printf "  %-44s median %6.1f ms   max %6.1f ms\n", p, a[int((NR + 1) / 2)] * 1000, a[NR] * 1000 }'
}
page /api/overview
page /api/queues/q42
page "/api/tasks/t4999"
page "/api/dlq?count=50"
page "/api/dlq?class=timeout&count=50"
page /api/history
calls() { rc INFO commandstats | awk -F'[=,]' '/calls=/ { s += $2 } END { print s }'; }
c0=$(calls)
curl -s -o /dev/null "http://127.0.0.1:$port/api/overview"
c1=$(calls)
echo "Redis commands for one overview: $((c1 - c0 - 1)); SCAN/KEYS calls in the whole run: $(rc INFO commandstats | grep -cE 'cmdstat_(scan|keys):')"
