#!/usr/bin/env bash
# The cost of [redis] wait_replicas = 1 (WAIT 1 after each finish batch) with one replica
# attached: throughput.sh-style runs (N no-op tasks enqueued beforehand, then the time
# until every one succeeded) alternately without and with it, against a primary and a
# replica (--replicaof) on this machine. Prints each run, then the median per setting.
# Usage: bench/wait_cost.sh [N] [concurrency] [runs per setting]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
worker=${DTQ_WORKER:-$root/build/dtq-worker}
[ -x "$worker" ] || { echo "build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build" >&2; exit 1; }
n=${1:-50000}
conc=${2:-64}
runs=${3:-3}
tmp=$(mktemp -d /tmp/dtq-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "failed at line $LINENO: $BASH_COMMAND" >&2; tail -5 "$tmp"/w.log >&2' ERR
port=$((30000 + $$ % 20000)) # the replica connects over TCP; redis fails fast if taken
redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$tmp/p.sock" --dir "$tmp" \
    --dbfilename p.rdb --save "" --appendonly no --daemonize no --loglevel warning \
    >"$tmp/p.log" 2>&1 &
pids+=($!)
redis-server --port 0 --unixsocket "$tmp/r.sock" --dir "$tmp" --dbfilename r.rdb --save "" \
    --appendonly no --daemonize no --loglevel warning --replicaof 127.0.0.1 "$port" \
    >"$tmp/r.log" 2>&1 &
pids+=($!)
rc() { redis-cli -s "$tmp/p.sock" "$@"; }
rr() { redis-cli -s "$tmp/r.sock" "$@"; }
for _ in $(seq 100); do rr INFO replication 2>/dev/null | grep -q master_link_status:up && break; sleep 0.05; done
rr INFO replication | grep -q master_link_status:up || { echo "the replica did not sync"; cat "$tmp"/*.log; exit 1; }
now_ms() { date +%s%3N; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), redis $(redis-server --version | grep -o 'v=[0-9.]*')"
echo "tasks: $n no-op per run, concurrency = $conc; one replica attached (loopback)"

start_worker() { # ini-text
    printf '[redis]\nurl = unix://%s/p.sock\n%s\n' "$tmp" "$1" >"$tmp/w.ini"
    "$worker" -c "$tmp/w.ini" 2>"$tmp/w.log" &
    pids+=($!)
    for _ in $(seq 200); do [ "$(rc HGET dtq:worker:bench status)" = running ] && return 0; sleep 0.05; done
    echo "worker did not start:"; cat "$tmp/w.log"; exit 1
}
stop_worker() { kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'; }

# one_run WAIT_REPLICAS: prints "tasks/s ms batches wait_us_per_call"
one_run() {
    rc FLUSHALL >/dev/null
    start_worker "[worker]
worker_id = bench
queues = paused-at-first
[handler:noop]
builtin = noop"
    rc SET dtq:queue:default:paused 1 >/dev/null
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default noop {}\r\n" }' | rc --pipe >/dev/null
    stop_worker
    start_worker "[redis]
wait_replicas = $1
wait_timeout_ms = 1000
[worker]
worker_id = bench
concurrency = $conc
[handler:noop]
builtin = noop"
    rc CONFIG RESETSTAT >/dev/null
    local t0 t1 ms
    t0=$(now_ms)
    rc DEL dtq:queue:default:paused >/dev/null
    while [ "$(rc XLEN dtq:stream:default:p5)" -ne 0 ]; do sleep 0.02; done
    t1=$(now_ms)
    ms=$((t1 - t0))
    local stats
    stats=$(rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' '
        /^cmdstat_fcall:/ { f = $3 } /^cmdstat_wait:/ { w = $3; wu = $7 }
        END { printf "%d %d %.0f", f, w, wu }')
    stop_worker
    if grep -q "replica(s) within" "$tmp/w.log"; then echo "warning: a WAIT timed out:" >&2; grep "replica(s) within" "$tmp/w.log" | head -3 >&2; fi
    echo "$(( n * 1000 / (ms > 0 ? ms : 1) )) $ms $stats"
}

declare -A results
for r in $(seq "$runs"); do
    for w in 0 1; do
        read -r tps ms fcalls waits wait_us <<<"$(one_run "$w")"
        results[$w]+="$tps "
        echo "run $r, wait_replicas = $w: $n tasks in $ms ms: $tps tasks/s ($fcalls FCALLs, $waits WAITs, $wait_us us per WAIT)"
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
m0=$(echo "${results[0]}" | median)
m1=$(echo "${results[1]}" | median)
echo "median: wait_replicas = 0: $m0 tasks/s; wait_replicas = 1: $m1 tasks/s ($(awk -v a="$m0" -v b="$m1" 'BEGIN { printf "%+.1f%%", (b - a) * 100 / a }'))"
