# Shared by the benchmarks: a private redis-server and a daemon, stopped on exit.
# shellcheck shell=bash
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
worker=${DTQ_WORKER:-$root/build/dtq-worker}
[ -x "$worker" ] || { echo "build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build" >&2; exit 1; }
tmp=$(mktemp -d /tmp/dtq-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
# REDIS_WRAP runs the server under a tool (valgrind); REDIS_ARGS adds server settings
# (e.g. "--stream-node-max-entries 16").
# shellcheck disable=SC2086
${REDIS_WRAP:-} redis-server --port 0 --unixsocket "$tmp/r.sock" --dir "$tmp" --save "" --appendonly no \
    --daemonize no --loglevel warning ${REDIS_ARGS:-} >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 400); do [ -S "$tmp/r.sock" ] && break; sleep 0.05; done
rc() { redis-cli -s "$tmp/r.sock" "$@"; }
now_ms() { date +%s%3N; }
start_worker() { # ini-text
    printf '[redis]\nurl = unix://%s/r.sock\n%s\n' "$tmp" "$1" >"$tmp/w.ini"
    "$worker" -c "$tmp/w.ini" 2>"$tmp/w.log" &
    pids+=($!)
    for _ in $(seq 200); do [ "$(rc HGET dtq:worker:bench status)" = running ] && return 0; sleep 0.05; done
    echo "worker did not start:"; cat "$tmp/w.log"; exit 1
}
# Stops the daemon started last (one that only loaded the library or queued the tasks).
stop_worker() { kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'; }
machine() { echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), redis $(redis-server --version | grep -o 'v=[0-9.]*')"; }
# Seconds of CPU Redis has used (user + system).
redis_cpu() { rc INFO cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'; }
# Seconds of CPU process $1 has used (user + system, not its children).
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.6f", ($14 + $15) / hz }' "/proc/$1/stat"; }
# Resumes the paused queue `default` and waits until the daemon has begun on its N queued
# tasks (it notices the resume within its poll interval, which is no part of a run); sets
# `left` to the tasks still queued then, where a run's clock starts.
resume_and_wait_start() { # N
    rc DEL dtq:queue:default:paused >/dev/null
    while :; do
        left=$(rc XLEN dtq:stream:default:p5)
        [ "$left" -lt "$1" ] && break
        sleep 0.002
    done
}
# Waits until the stream of queue `default` is empty.
wait_drained() {
    while [ "$(rc XLEN dtq:stream:default:p5)" -ne 0 ]; do sleep 0.02; done
}
