#!/usr/bin/env bash
# Redis Cluster scale (docs/BENCHMARKS.md "Redis Cluster"): the same drain on clusters of 1,
# 2 and 3 primaries (no replicas, no persistence), QPS queues per shard whose hash tags land
# on that shard, N no-op tasks per queue enqueued beforehand (pipelined FCALL with the
# queue's tag, straight to its node), then one daemon drains them all. Per shard it prints
# Redis CPU per task, commands per task and Function calls per task (INFO cpu and
# commandstats, commands inside Functions included; the calls per task are the inverse of
# the batches), and the cluster's errorstats (a call that touched two slots would show as
# CROSSSLOT). Per run: tasks/s and the daemon's CPU per task.
# Usage: bench/cluster_scale.sh [N per queue] [concurrency] ["shard counts"]
# QPS=queues per shard (2). PIN=1 pins the daemon to CPU 1 and every redis-server to CPU 0
# (taskset), so that the daemon has a core of its own. LEAN=1 makes every queue lean.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
worker=${DTQ_WORKER:-$root/build/dtq-worker}
ctl=${DTQCTL:-$root/build/dtqctl}
if [ ! -x "$worker" ] || [ ! -x "$ctl" ]; then echo "build first" >&2; exit 1; fi
n=${1:-20000}
conc=${2:-256}
counts=${3:-"1 2 3"}
qps=${QPS:-2}
base=${BASE_PORT:-7700}
tmp=$(mktemp -d /tmp/dtq-cscale.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
pin_redis=() pin_daemon=()
if [ "${PIN:-0}" = 1 ]; then pin_redis=(taskset -c 0) pin_daemon=(taskset -c 1); fi
now_ms() { date +%s%3N; }
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.6f", ($14 + $15) / hz }' "/proc/$1/stat"; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), redis $(redis-server --version | grep -o 'v=[0-9.]*')"
echo "per queue $n no-op tasks, $qps queues per shard, concurrency $conc, pinned ${PIN:-0}, lean ${LEAN:-0}"

# The shard (0..k-1) whose even split of the slots holds slot $1.
shard_of() { # slot k
    local s=$(($1 * $2 / 16384))
    while [ $((16384 * s / $2)) -gt "$1" ]; do s=$((s - 1)); done
    while [ $((16384 * (s + 1) / $2)) -le "$1" ]; do s=$((s + 1)); done
    echo "$s"
}

run() { # shards
    local k=$1 ports=() url="" p
    rm -rf "${tmp:?}"/*
    for ((i = 0; i < k; i++)); do
        p=$((base + i))
        ports+=("$p")
        mkdir -p "$tmp/$p"
        "${pin_redis[@]}" redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
            --cluster-config-file "$tmp/$p/nodes.conf" --dir "$tmp/$p" --save "" \
            --appendonly no --loglevel warning >"$tmp/$p/log" 2>&1 &
        pids+=($!)
        url+="${url:+,}127.0.0.1:$p"
    done
    for p in "${ports[@]}"; do
        for _ in $(seq 200); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.05; done
    done
    # slots split evenly, the nodes met
    for ((i = 0; i < k; i++)); do
        redis-cli -p "${ports[$i]}" CLUSTER ADDSLOTSRANGE $((16384 * i / k)) $((16384 * (i + 1) / k - 1)) >/dev/null
        [ "$i" -gt 0 ] && redis-cli -p "${ports[$i]}" CLUSTER MEET 127.0.0.1 "${ports[0]}" >/dev/null
    done
    for _ in $(seq 300); do
        ok=1
        for p in "${ports[@]}"; do
            redis-cli -p "$p" CLUSTER INFO | grep -q 'cluster_state:ok' || ok=0
            [ "$(redis-cli -p "$p" CLUSTER SLOTS | grep -c '^127.0.0.1$' || true)" -ge "$k" ] || ok=0
        done
        [ "$ok" = 1 ] && break
        sleep 0.1
    done
    url="redis-cluster://$url"
    "$ctl" -u "$url" functions install >/dev/null
    # QPS queue names per shard whose tags land there
    local queues=() owner=() per=() q s
    for ((i = 0; i < k; i++)); do per[i]=0; done
    for ((j = 0; ${#queues[@]} < k * qps && j < 10000; j++)); do
        q="s$j"
        s=$(shard_of "$(redis-cli -p "${ports[0]}" CLUSTER KEYSLOT "{dtq:$q}")" "$k")
        [ "${per[$s]}" -ge "$qps" ] && continue
        per[s]=$((per[s] + 1))
        queues+=("$q")
        owner+=("${ports[$s]}")
    done
    local list
    list=$(IFS=,; echo "${queues[*]}")
    for ((i = 0; i < ${#queues[@]}; i++)); do
        q=${queues[$i]}
        if [ "${LEAN:-0}" = 1 ]; then
            redis-cli -p "${owner[$i]}" FCALL dtq_queue_mode 1 "{dtq:$q}" bench "$q" lean >/dev/null
        fi
        redis-cli -p "${owner[$i]}" SET "{dtq:$q}:queue:$q:paused" 1 >/dev/null
        awk -v n="$n" -v q="$q" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 1 {dtq:%s} %s noop {}\r\n", q, q }' |
            redis-cli -p "${owner[$i]}" --pipe >/dev/null
    done
    printf '[redis]\nurl = %s\n[worker]\nworker_id = bench\nqueues = %s\nconcurrency = %s\n[limits]\nevents = off\n[handler:noop]\nbuiltin = noop\n' \
        "$url" "$list" "$conc" >"$tmp/w.ini"
    "${pin_daemon[@]}" "$worker" -c "$tmp/w.ini" 2>"$tmp/w.log" &
    local wpid=$!
    pids+=("$wpid")
    local gport
    gport=${ports[$(shard_of "$(redis-cli -p "${ports[0]}" CLUSTER KEYSLOT '{dtq}')" "$k")]}
    for _ in $(seq 400); do
        [ "$(redis-cli -c -p "$gport" HGET '{dtq}:worker:bench' status 2>/dev/null)" = running ] && break
        sleep 0.05
    done
    local cpu0=() cpu1=()
    for p in "${ports[@]}"; do redis-cli -p "$p" CONFIG RESETSTAT >/dev/null; done
    for ((i = 0; i < k; i++)); do
        cpu0[i]=$(redis-cli -p "${ports[$i]}" INFO cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }')
    done
    local wcpu0 t0 t1
    wcpu0=$(proc_cpu "$wpid")
    t0=$(now_ms)
    for ((i = 0; i < ${#queues[@]}; i++)); do
        q=${queues[$i]}
        redis-cli -p "${owner[$i]}" DEL "{dtq:$q}:queue:$q:paused" >/dev/null
    done
    while :; do
        left=0
        for ((i = 0; i < ${#queues[@]}; i++)); do
            q=${queues[$i]}
            left=$((left + $(redis-cli -p "${owner[$i]}" XLEN "{dtq:$q}:stream:$q:p5")))
        done
        [ "$left" -eq 0 ] && break
        sleep 0.02
    done
    t1=$(now_ms)
    local ms=$((t1 - t0)) total=$((n * ${#queues[@]})) wcpu1
    wcpu1=$(proc_cpu "$wpid")
    echo "shards $k: ${#queues[@]} queues, $total tasks in $ms ms: $((total * 1000 / (ms > 0 ? ms : 1))) tasks/s;" \
        "daemon $(awk -v a="$wcpu0" -v b="$wcpu1" -v n="$total" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }') us/task"
    for ((i = 0; i < k; i++)); do
        p=${ports[$i]}
        cpu1[i]=$(redis-cli -p "$p" INFO cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }')
        local tasks=$((n * per[i]))
        redis-cli -p "$p" INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v n="$tasks" -v a="${cpu0[$i]}" -v b="${cpu1[$i]}" -v p="$p" -v ms="$ms" '
            /^cmdstat_/ { total += $3 }
            /^cmdstat_fcall:/ { fc = $3 }
            END { printf "  shard %s: %d tasks, redis %.1f us/task (busy %.0f%% of the run), %.2f commands/task, %.3f Function calls/task\n",
                  p, n, (b - a) * 1e6 / n, (b - a) * 1e5 / ms, total / n, fc / n }'
        redis-cli -p "$p" INFO errorstats | tr -d '\r' | grep '^errorstat' | sed "s/^/    errors on $p: /" || true
    done
    kill "$wpid"
    wait "$wpid" 2>/dev/null || true
    for p in "${ports[@]}"; do redis-cli -p "$p" SHUTDOWN NOSAVE >/dev/null 2>&1 || true; done
    wait 2>/dev/null || true
    pids=()
}

for k in $counts; do run "$k"; done
