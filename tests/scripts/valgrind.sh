#!/usr/bin/env bash
# A short daemon run under valgrind: every builtin, a retry, a dead letter, a raw entry,
# a Python pool (a result, a failure, a timeout with its kill, a crash), a reload, then
# SIGTERM. Fails on any leak or memory error valgrind reports.
set -euo pipefail
worker=$1 redis_server=$2 sdk_python=$3
tmp=$(mktemp -d /tmp/dtq-valgrind.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$redis_server" --port 0 --unixsocket "$tmp/r.sock" --dir "$tmp" --save "" --daemonize no \
    --loglevel warning >/dev/null 2>&1 &
for _ in $(seq 100); do [ -S "$tmp/r.sock" ] && break; sleep 0.05; done
rc() { redis-cli -s "$tmp/r.sock" "$@"; }
cat >"$tmp/vgtasks.py" <<'PY'
import os, time
import dtq

@dtq.task
def py_ok(payload):
    return {"pid": os.getpid()}

@dtq.task
def py_fail(payload):
    raise ValueError("no")

@dtq.task
def py_hang(payload):
    time.sleep(60)

@dtq.task
def py_crash(payload):
    os._exit(3)
PY
cat >"$tmp/w.ini" <<INI
[redis]
url = unix://$tmp/r.sock
[worker]
worker_id = vg
heartbeat_interval_s = 1
visibility_timeout_s = 3
[retry]
base_delay = 0.1
[scheduler]
interval_ms = 100
[limits]
events_stream_maxlen = 100
[handler:echo]
builtin = echo
[handler:sleep]
builtin = sleep
[handler:fail]
builtin = fail
[handler:flaky]
builtin = flaky
[handler:noop]
builtin = noop
[pool:py]
command = /usr/bin/python3 -m dtq serve vgtasks
env = PYTHONPATH=$sdk_python:$tmp
processes = 1
kill_grace_ms = 200
[cron:tick]
spec = @every 1s
queue = default
task_type = noop
[cron:nightly]
spec = 30 2 * * *
tz = America/New_York
queue = default
task_type = noop
INI
valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
    --error-exitcode=99 --log-file="$tmp/vg.log" "$worker" -c "$tmp/w.ini" 2>"$tmp/w.log" &
vg=$!
for _ in $(seq 200); do [ "$(rc HGET dtq:worker:vg status)" = running ] && break; sleep 0.1; done
rc FCALL dtq_enqueue 0 default echo '{"a":1}' task_id e1 >/dev/null
rc FCALL dtq_enqueue 0 default flaky '{"succeed_on":2}' task_id f1 >/dev/null
rc FCALL dtq_enqueue 0 default fail '{}' task_id x1 >/dev/null
rc FCALL dtq_enqueue 0 default nosuch '{}' task_id u1 >/dev/null
rc FCALL dtq_enqueue 0 default sleep '{"ms":100}' task_id s1 >/dev/null
rc FCALL dtq_enqueue 0 default sleep '{"ms":60000}' task_id s2 timeout_ms 300 max_attempts 1 >/dev/null
rc XADD dtq:stream:default:p5 '*' task_type echo payload '{bad' >/dev/null
rc FCALL dtq_limit_set 0 vg default noop rate 50 period_ms 1000 concurrency 2 >/dev/null
rc FCALL dtq_enqueue 0 default py_ok '{}' task_id p1 >/dev/null
rc FCALL dtq_enqueue 0 default py_fail '{}' task_id p2 >/dev/null
rc FCALL dtq_enqueue 0 default py_hang '{}' task_id p3 timeout_ms 300 max_attempts 1 >/dev/null
rc FCALL dtq_enqueue 0 default py_crash '{}' task_id p4 max_attempts 1 >/dev/null
rc FCALL dtq_enqueue 0 default py_ok '{}' task_id p5 >/dev/null
for _ in $(seq 200); do [ "$(rc HGET dtq:task:f1 status)" = succeeded ] && [ "$(rc HGET dtq:task:s2 status)" = dead_lettered ] &&
    [ "$(rc HGET dtq:task:p5 status)" = succeeded ] && [ "$(rc HGET dtq:task:p3 status)" = dead_lettered ] &&
    [ "$(rc HGET dtq:task:p4 status)" = dead_lettered ] && break; sleep 0.1; done
kill -HUP $vg; sleep 0.5
rc FCALL dtq_enqueue 0 default sleep '{"ms":30000}' task_id s3 >/dev/null
sleep 1
for t in e1 f1 x1 u1 s1 s2 s3 p1 p2 p3 p4 p5; do echo "$t: $(rc HGET dtq:task:$t status) $(rc HGET dtq:task:$t last_error_class)"; done
kill -TERM $vg
sleep 0.3
kill -TERM $vg 2>/dev/null || true # a second signal ends the drain at once (s3 is handed back)
set +e
wait $vg
code=$?
set -e
grep -E "definitely lost|indirectly lost|possibly lost|ERROR SUMMARY" "$tmp/vg.log" || true
[ "$(rc HGET dtq:task:f1 status)" = succeeded ] || { echo "f1 did not succeed"; cat "$tmp/w.log"; exit 1; }
# the leader fired the periodic task (cron_pass.c, cron.c ran under valgrind) through the limit
[ -n "$(rc HGET dtq:cron:default:tick last_task_id)" ] || { echo "cron:tick never fired"; cat "$tmp/w.log"; exit 1; }
[ "$(rc HGET dtq:task:s3 status)" = queued ] || { echo "s3 was not handed back"; cat "$tmp/w.log"; exit 1; }
# the pool ran under valgrind: a result, a permanent failure, a timeout, a crash
[ "$(rc HGET dtq:task:p1 status)" = succeeded ] || { echo "p1 did not succeed"; cat "$tmp/w.log"; exit 1; }
[ "$(rc HGET dtq:task:p2 last_error_class)" = permanent ] || { echo "p2 not permanent"; cat "$tmp/w.log"; exit 1; }
[ "$(rc HGET dtq:task:p3 last_error_class)" = timeout ] || { echo "p3 not a timeout"; cat "$tmp/w.log"; exit 1; }
[ "$(rc HGET dtq:task:p4 last_error_class)" = handler_crashed ] || { echo "p4 not handler_crashed"; cat "$tmp/w.log"; exit 1; }
if pgrep -f "dtq serve vgtasks" >/dev/null; then echo "a pool process outlived the daemon"; exit 1; fi
if [ $code -ne 0 ]; then echo "valgrind/daemon exit $code"; cat "$tmp/vg.log"; exit 1; fi
echo "valgrind: clean"
