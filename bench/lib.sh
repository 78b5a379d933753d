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
${REDIS_WRAP:-} redis-server --port 0 --unixsocket "$tmp/r.sock" --dir "$tmp" --save "" --appendonly no \
    --daemonize no --loglevel warning >"$tmp/redis.log" 2>&1 &
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
machine() { echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), redis $(redis-server --version | grep -o 'v=[0-9.]*')"; }
