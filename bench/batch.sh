#!/usr/bin/env bash
# Batches against plain tasks, in one sitting (issue 29): N no-op tasks enqueued in one call
# (<ns>_enqueue_bulk) and drained, against a batch of N no-op members (<ns>_batch create, one
# call) with an on_complete callback, drained until its callback has succeeded; alternated
# ROUNDS times on one daemon, each timed on Redis's clock from the first task's start to the
# last end (the plain tasks'; the callback's for the batch). CPU is counted from the
# daemon's first claim after the queue's resume. Then what waiting tasks
# cost Redis while they wait: the commands Redis ran in IDLE_S seconds with the daemon
# running and nothing to do, and again with N tasks waiting (`after`) for a parent that
# does not run.
# Usage: bench/batch.sh [N] [concurrency] [rounds]
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n=${1:-10000}
conc=${2:-64}
rounds=${3:-3}
idle_s=${IDLE_S:-3}
machine
echo "tasks: $n no-op per run, concurrency = $conc, rounds = $rounds, events = all, no subscriber"
start_worker "[worker]
worker_id = bench
concurrency = $conc
queues = default
[handler:noop]
builtin = noop"
wpid=${pids[-1]}
mapfile -t payloads < <(yes '{}' | head -n "$n")
mapfile -t members < <(yes 'noop
{}' | head -n $((2 * n)))

# The span on Redis's clock from the first start to the last end among the tasks whose ids
# are in file $1 (their hashes' started_at and finished_at), in ms.
span_ms() {
    awk '{ printf "HMGET dtq:task:%s started_at finished_at\n", $1 }' "$1" | rc |
        awk 'NR % 2 == 1 { if (min == "" || $1 < min) min = $1 } NR % 2 == 0 { if ($1 > max) max = $1 }
             END { print max - min }'
}

run_plain() {
    rc SET dtq:queue:default:paused 1 >/dev/null
    rc FCALL dtq_enqueue_bulk 0 default noop "$n" "${payloads[@]}" >"$tmp/ids"
    resume_and_wait_start "$n" # (the daemon notices a resume within its poll interval)
    cpu0=$(redis_cpu)
    wcpu0=$(proc_cpu "$wpid")
    wait_drained
}

run_batch() { # round
    rc SET dtq:queue:default:paused 1 >/dev/null
    rc FCALL dtq_batch 0 create default "$n" "${members[@]}" batch_id "bench-$1" on_complete noop |
        tail -n +2 >"$tmp/ids"
    resume_and_wait_start "$n" # (the daemon notices a resume within its poll interval)
    cpu0=$(redis_cpu)
    wcpu0=$(proc_cpu "$wpid")
    while :; do
        cb=$(rc HGET "dtq:batch:bench-$1" complete_task)
        [ -n "$cb" ] && [ "$(rc HGET "dtq:task:$cb" status)" = succeeded ] && break
        sleep 0.005
    done
    echo "$cb" >>"$tmp/ids" # the span ends with the callback's end
}

report() { # label
    local ms cpu1 wcpu1
    cpu1=$(redis_cpu)
    wcpu1=$(proc_cpu "$wpid")
    ms=$(span_ms "$tmp/ids")
    awk -v l="$1" -v n="$n" -v ms="$ms" -v a="$cpu0" -v b="$cpu1" -v c="$wcpu0" -v d="$wcpu1" 'BEGIN {
        printf "%-6s %6d ms  %7.0f tasks/s  redis %.1f us/task  daemon %.1f us/task\n",
            l, ms, n * 1000 / (ms > 0 ? ms : 1), (b - a) * 1e6 / n, (d - c) * 1e6 / n }'
    echo "$ms" >>"$tmp/$1.ms"
}

for r in $(seq "$rounds"); do
    run_plain
    report plain
    run_batch "$r"
    report batch
done
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
p=$(median "$tmp/plain.ms")
b=$(median "$tmp/batch.ms")
awk -v p="$p" -v b="$b" 'BEGIN { printf "median: plain %d ms, batch %d ms (with its callback): batch / plain = %.2f\n", p, b, b / p }'

# What a waiting task costs while it waits: Redis's commands over idle_s seconds, without
# and then with N tasks waiting for a parent in a paused queue.
idle_cost() { # label
    rc CONFIG RESETSTAT >/dev/null
    local c0 c1
    c0=$(redis_cpu)
    sleep "$idle_s"
    c1=$(redis_cpu)
    rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v l="$1" -v s="$idle_s" -v a="$c0" -v b="$c1" '
        /^cmdstat_/ { total += $3 }
        END { printf "idle %-22s %6d commands in %d s, redis CPU %.1f ms\n", l, total, s, (b - a) * 1000 }'
}
idle_cost "(nothing waiting)"
rc SET dtq:queue:hold:paused 1 >/dev/null
rc FCALL dtq_enqueue 0 hold noop '{}' task_id parent >/dev/null
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default noop {} after parent\r\n" }' |
    rc --pipe >/dev/null
echo "waiting: $(rc SCARD dtq:waiters:parent) tasks"
idle_cost "($n tasks waiting)"
