#!/usr/bin/env bash
# exec handlers beside the machine's spawn floor, in one sitting: N tasks of `exec =
# /bin/true` at concurrency C through one daemon, then the bare posix_spawn + waitpid loop
# (bench/spawn_floor.c) with the same parallelism: bare, with stdio pipes, with the pipes
# and the clean slate dtq gives its children, and that started as dtq starts it (a clone on
# a stack mapped once, not glibc's posix_spawn). Also the daemon's own CPU per task.
# Usage: bench/exec.sh [N] [concurrency]
# shellcheck source-path=SCRIPTDIR source=lib.sh
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
stop_worker
start_worker "[worker]
worker_id = bench
concurrency = $conc
[handler:t]
exec = /bin/true"
wpid=${pids[-1]}
resume_and_wait_start "$n"
rc CONFIG RESETSTAT >/dev/null
r0=$(redis_cpu)
c0=$(proc_cpu "$wpid")
t0=$(now_ms)
n_all=$n
n=$left
wait_drained
t1=$(now_ms)
c1=$(proc_cpu "$wpid")
r1=$(redis_cpu)
ms=$((t1 - t0))
per_task() { awk -v a="$1" -v b="$2" -v n="$n" 'BEGIN { printf "%.0f", (b - a) * 1e6 / n }'; }
calls=$(rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v n="$n" '/^cmdstat_fcall:/ { printf "%.2f", $3 / n }')
echo "dtq exec: $n tasks in $ms ms: $(( n * 1000 / (ms > 0 ? ms : 1) )) tasks/s;" \
     "daemon CPU $(per_task "$c0" "$c1") us/task, Redis CPU $(per_task "$r0" "$r1") us/task," \
     "$calls Function calls/task"
"$floor_bin" "$n_all" "$conc" /bin/true
"$floor_bin" "$n_all" "$conc" /bin/true pipes
"$floor_bin" "$n_all" "$conc" /bin/true clean
"$floor_bin" "$n_all" "$conc" /bin/true clone
