#!/usr/bin/env bash
# exec handlers beside the machine's spawn floor, in one sitting: N tasks of `exec =
# /bin/true` at concurrency C through one daemon, then the bare posix_spawn + waitpid loop
# (bench/spawn_floor.c) with the same parallelism. Also the daemon's own CPU per task.
# Usage: bench/exec.sh [N] [concurrency]
. "$(dirname "$0")/lib.sh"
n=${1:-5000}
conc=${2:-64}
floor_bin=${DTQ_SPAWN_FLOOR:-$root/build/bench/spawn_floor}
machine
echo "tasks: $n x exec /bin/true, concurrency = $conc"
start_worker "[worker]
worker_id = bench
queues = paused-at-first
[handler:t]
exec = /bin/true"
rc SET dtq:queue:default:paused 1 >/dev/null
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default t {}\r\n" }' | rc --pipe >/dev/null
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
start_worker "[worker]
worker_id = bench
concurrency = $conc
[handler:t]
exec = /bin/true"
wpid=${pids[-1]}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$wpid/stat"; }
rc DEL dtq:queue:default:paused >/dev/null
# The clock starts when the daemon has begun (it notices the resume within its poll
# interval, which is not exec time) and counts the tasks left then.
while :; do
    left=$(rc XLEN dtq:stream:default:p5)
    [ "$left" -lt "$n" ] && break
    sleep 0.002
done
redis_cpu() { rc INFO cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'; }
rc CONFIG RESETSTAT >/dev/null
r0=$(redis_cpu)
c0=$(cpu_ticks)
t0=$(now_ms)
n_all=$n
n=$left
while :; do
    left=$(rc XLEN dtq:stream:default:p5)
    [ "$left" -eq 0 ] && break
    sleep 0.02
done
t1=$(now_ms)
c1=$(cpu_ticks)
r1=$(redis_cpu)
ms=$((t1 - t0))
hz=$(getconf CLK_TCK)
echo "dtq exec: $n tasks in $ms ms: $(( n * 1000 / (ms > 0 ? ms : 1) )) tasks/s; daemon CPU $(awk -v a="$c0" -v b="$c1" -v hz="$hz" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / hz * 1e6 / n }') us/task, Redis CPU $(awk -v a="$r0" -v b="$r1" -v n="$n" 'BEGIN { printf "%.0f", (b - a) * 1e6 / n }') us/task, $(rc INFO commandstats | awk -F'[:=,]' -v n="$n" '/^cmdstat_fcall:/ { printf "%.2f", $3 / n }') Function calls/task"
"$floor_bin" "$n_all" "$conc" /bin/true
"$floor_bin" "$n_all" "$conc" /bin/true pipes
