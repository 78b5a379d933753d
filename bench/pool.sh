#!/usr/bin/env bash
# Handler pools (issue 28) beside the builtin noop and a protocol floor, in one sitting: N
# no-op tasks enqueued beforehand, then drained by one daemon, for each case:
#   builtin   builtin = noop (no process at all)
#   floor-c   a pool of bench/pool_floor.c (protocol 1 with the least work: no interpreter)
#   floor-py  a pool of bench/pool_floor.py (plain Python, one json.loads/dumps per task)
#   py        a pool of `python3 -m dtq serve pool_noop` (sdk/python, bench/pool_noop.py)
#   node      a pool of sdk/node's dtq-serve with bench/pool_noop.js
#   py-exec   exec = python3 bench/exec_noop.py: one interpreter per task, json only (as the
#             peer harness's handlers/noop.py; N_EXEC tasks)
#   py-exec-sdk  exec = python3 bench/pool_noop.py: the pool's module run once per task, so
#             each task also imports the SDK (asyncio, threads: ~100 ms)
# Pools have `processes = PROCS` (2) and `inflight = INFLIGHT` (1, the default). Each case
# runs REPS times (3), the cases interleaved; then a table of the medians. Per case:
# drain tasks/s, the daemon's CPU per task (/proc/PID/stat utime+stime), the handlers' CPU
# per task (the pool processes' utime+stime, plus the daemon's reaped children's for exec),
# Redis CPU and commands per task (INFO commandstats, those inside Functions included), and
# the ratios to builtin noop.
# Usage: bench/pool.sh [N] [concurrency] [N_EXEC] [exec concurrency]
# Env: CASES ("builtin floor-c floor-py py node py-exec py-exec-sdk"), REPS, PROCS, INFLIGHT,
# PYTHON (/usr/bin/python3), NODE (node on PATH), DTQ_POOL_FLOOR (build/bench/pool_floor).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
n_main=${1:-20000}
conc=${2:-64}
n_exec=${3:-200}
conc_exec=${4:-16}
cases=${CASES:-builtin floor-c floor-py py node py-exec py-exec-sdk}
reps=${REPS:-3}
procs=${PROCS:-2}
inflight=${INFLIGHT:-1}
python=${PYTHON:-/usr/bin/python3}
node=${NODE:-$(command -v node || echo /usr/bin/node)}
floor_bin=${DTQ_POOL_FLOOR:-$(dirname "$worker")/bench/pool_floor}
[ -x "$floor_bin" ] || { echo "no $floor_bin: cmake --build build --target pool_floor" >&2; exit 1; }
machine
echo "settings: N = $n_main (exec $n_exec), concurrency = $conc (exec $conc_exec)," \
     "pools: processes = $procs, inflight = $inflight; $reps runs per case, interleaved;" \
     "$("$python" --version 2>&1), node $("$node" --version)"

pool_ini() { # command
    printf '[pool:bench]\ncommand = %s\nprocesses = %s\ninflight = %s\nenv = PYTHONPATH=%s\n' \
        "$1" "$procs" "$inflight" "$root/sdk/python:$root/bench"
}
handler_ini() { # case
    case $1 in
    builtin) printf '[handler:noop]\nbuiltin = noop\n' ;;
    floor-c) pool_ini "$floor_bin noop" ;;
    floor-py) pool_ini "$python $root/bench/pool_floor.py noop" ;;
    py) pool_ini "$python -m dtq serve pool_noop" ;;
    node) pool_ini "$node $root/sdk/node/bin/dtq-serve.js $root/bench/pool_noop.js" ;;
    py-exec) printf '[handler:noop]\nexec = %s %s\n' "$python" "$root/bench/exec_noop.py" ;;
    py-exec-sdk) printf '[handler:noop]\nexec = %s %s\nenv = PYTHONPATH=%s\n' "$python" \
        "$root/bench/pool_noop.py" "$root/sdk/python" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
    esac
}
# CPU seconds of the daemon's live children (the pool processes) plus those it reaped.
handler_cpu() { # daemon pid
    local s c
    s=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.6f", ($16 + $17) / hz }' "/proc/$1/stat")
    for c in $(pgrep -P "$1" || true); do
        s=$(awk -v a="$s" -v b="$(proc_cpu "$c" 2>/dev/null || echo 0)" 'BEGIN { printf "%.6f", a + b }')
    done
    echo "$s"
}
us() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }'; }

declare -A results # case -> "tps daemon_us handler_us redis_us" lines
run_case() { # case
    local c=$1 n=$n_main cc=$conc wpid r0 d0 h0 t0 t1 r1 d1 h1 ms tps
    case $c in py-exec*) n=$n_exec; cc=$conc_exec ;; esac
    start_worker "[worker]
worker_id = bench
queues = paused-at-first
[handler:noop]
builtin = noop"
    rc SET dtq:queue:default:paused 1 >/dev/null
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "FCALL dtq_enqueue 0 default noop {}\r\n" }' |
        rc --pipe >/dev/null
    stop_worker
    start_worker "[worker]
worker_id = bench
concurrency = $cc
$(handler_ini "$c")"
    wpid=${pids[-1]}
    if grep -q '^\[pool:' "$tmp/w.ini"; then # every pool process said hello
        for _ in $(seq 200); do
            [ "$(rc HGET dtq:worker:bench pools)" = "bench:$procs/$procs" ] && break
            sleep 0.05
        done
    fi
    # CPU from before the resume to the end (every task: n), the clock from the first
    # finished task (the `left` still queued then), as bench/throughput.sh
    rc CONFIG RESETSTAT >/dev/null
    r0=$(redis_cpu); d0=$(proc_cpu "$wpid"); h0=$(handler_cpu "$wpid")
    resume_and_wait_start "$n"
    t0=$(now_ms)
    wait_drained
    t1=$(now_ms)
    r1=$(redis_cpu); d1=$(proc_cpu "$wpid"); h1=$(handler_cpu "$wpid")
    ms=$((t1 - t0))
    tps=$((left * 1000 / (ms > 0 ? ms : 1)))
    local failed cmds
    cmds=$(rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v n="$n" '/^cmdstat_/ { t += $3 } END { printf "%.1f", t / n }')
    failed=$(( $(rc XLEN dtq:stream:dead-letter) + $(rc ZCARD dtq:retry:schedule) ))
    printf '  run %-11s %6d tasks in %6d ms: %6d tasks/s; CPU us/task daemon %7s, handlers %8s, redis %6s; %4s Redis cmds/task%s\n' \
        "$c" "$left" "$ms" "$tps" "$(us "$d0" "$d1" "$n")" "$(us "$h0" "$h1" "$n")" "$(us "$r0" "$r1" "$n")" "$cmds" \
        "$([ "$failed" != 0 ] && echo " ($failed failed: dead-lettered or to retry)")"
    results[$c]+="$tps $(us "$d0" "$d1" "$n") $(us "$h0" "$h1" "$n") $(us "$r0" "$r1" "$n") $cmds
"
    stop_worker
    rc FLUSHALL >/dev/null
}
for rep in $(seq "$reps"); do
    echo "pass $rep ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
    for c in $cases; do run_case "$c"; done
done

# Medians per column, then the table with ratios to builtin noop.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { printf '%s' "${results[$1]}" | awk -v k="$2" 'NF { print $k }' | median; }
echo "medians of $reps runs (ranges in the run lines above):"
printf '%-11s %9s %12s %13s %10s %10s %12s %15s\n' case tasks/s daemon_us/t handler_us/t redis_us/t cmds/t "x builtin/s" "daemon x builtin"
b_tps=; b_d=
if [ -n "${results[builtin]:-}" ]; then b_tps=$(col builtin 1); b_d=$(col builtin 2); fi
for c in $cases; do
    tps=$(col "$c" 1); d=$(col "$c" 2); h=$(col "$c" 3); r=$(col "$c" 4); k=$(col "$c" 5)
    if [ -n "$b_tps" ]; then
        rt=$(awk -v a="$tps" -v b="$b_tps" 'BEGIN { printf "%.3f", a / b }')
        rd=$(awk -v a="$d" -v b="$b_d" 'BEGIN { printf "%.2f", a / b }')
    else rt=-; rd=-; fi
    printf '%-11s %9.0f %12s %13s %10s %10s %12s %15s\n' "$c" "$tps" "$d" "$h" "$r" "$k" "$rt" "$rd"
done
