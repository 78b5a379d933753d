#!/usr/bin/env bash
# web_browser.sh: dtq-web's page in a real browser (headless Chromium) against a private
# redis-server and a dtq-worker that has run tasks: some succeeded, one dead-lettered, one
# queue paused. Asserts what the rendered DOM shows (--dump-dom) for the overview, the
# dead letters, a task, the Scheduled, Retries, Periodic and Limits tabs, takes a screenshot
# (--screenshot), then clicks Requeue through the DevTools protocol (web_cdp.py) and checks
# in Redis that the task is queued again, audited as dtq-web.
#
#   web_browser.sh DTQ_WORKER DTQ_WEB REDIS_SERVER
#
# DTQ_WEB_SCREENSHOT=path copies the screenshot there (docs/dashboard.png is made so);
# DTQ_WEB_SCHED_SCREENSHOT=path the Scheduled tab's; DTQ_KEEP_TMP=1 keeps the temporary
# directory (DOM dumps, logs).
set -euo pipefail

worker_bin=$1 web_bin=$2 redis_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
    echo "chromium not found: run scripts/test, which installs it" >&2
    exit 1
fi
if ! /usr/bin/python3 -c 'import websocket' 2>/dev/null; then
    echo "python3-websocket not found: run scripts/test, which installs it" >&2
    exit 1
fi

tmp=$(mktemp -d /tmp/dtq-test-browser.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ $rc -ne 0 ]; then
        echo "--- logs ($tmp)" >&2
        tail -n 20 "$tmp"/*.log >&2 || true
    fi
    if grep -qs -e Sanitizer -e 'runtime error:' "$tmp"/web.log "$tmp"/worker.log; then
        echo "sanitizer report in a log" >&2
        rc=1
    fi
    [ -n "${DTQ_KEEP_TMP:-}" ] || rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
rc() { redis-cli -s "$tmp/redis.sock" "$@"; }
wait_for() { # description, command...
    local what=$1
    shift
    for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    fail "timed out waiting for $what"
}
status_is() { [ "$(rc HGET "dtq:task:$1" status)" = "$2" ]; }

"$redis_bin" --port 0 --unixsocket "$tmp/redis.sock" --dir "$tmp" --save "" \
    --daemonize no --loglevel warning >"$tmp/redis.log" 2>&1 &
pids+=($!)
wait_for redis-server test -S "$tmp/redis.sock"
wait_for "redis PING" rc PING

cat >"$tmp/worker.ini" <<INI
[redis]
url = unix://$tmp/redis.sock
[worker]
worker_id = w-browser
queues = default, mail
concurrency = 4
heartbeat_interval_s = 1
visibility_timeout_s = 5
[limits]
events_stream_maxlen = 1000
[web]
sample_interval_s = 1
[handler:echo]
builtin = echo
[handler:fail]
builtin = fail
[handler:metered]
builtin = echo
[handler:flaky]
builtin = fail
base_delay = 3600
max_delay = 3600
INI
"$worker_bin" -c "$tmp/worker.ini" >"$tmp/worker.log" 2>&1 &
pids+=($!)
worker_running() { [ "$(rc HGET dtq:worker:w-browser status)" = running ]; }
wait_for "the worker" worker_running

token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
printf '%s\n' "$token" >"$tmp/web.token"
chmod 600 "$tmp/web.token"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
"$web_bin" -c "$tmp/worker.ini" --listen "127.0.0.1:$port" --token-file "$tmp/web.token" \
    >"$tmp/web.log" 2>&1 &
pids+=($!)
wait_for "dtq-web" /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('$base/api/info')"
sleep 1.2 # the baseline sample: what runs from here on shows in the rates

# tasks: succeeded in two bursts (for the plot), one dead letter, one queue paused
for i in 1 2 3 4 5 6; do rc FCALL dtq_enqueue 0 default echo "{\"n\":$i}" task_id "ok-$i" >/dev/null; done
rc FCALL dtq_enqueue 0 mail fail '{"retryable":false,"message":"card declined"}' task_id bad-card >/dev/null
for i in 1 2 3 4 5 6; do wait_for "ok-$i" status_is "ok-$i" succeeded; done
wait_for "bad-card dead-lettered" status_is bad-card dead_lettered
sleep 1.5
for i in $(seq 7 20); do rc FCALL dtq_enqueue 0 default echo "{\"n\":$i}" task_id "ok-$i" >/dev/null; done
rc FCALL dtq_pause 0 mail >/dev/null
rc FCALL dtq_enqueue 0 mail echo '{"to":"x"}' task_id mail-waiting priority 7 >/dev/null
wait_for "ok-20" status_is ok-20 succeeded
# the schedule: delayed tasks, and one waiting for its retry an hour away
rc FCALL dtq_enqueue 0 mail echo '{"to":"y"}' task_id later-1 delay_ms 3600000 >/dev/null
rc FCALL dtq_enqueue 0 mail echo '{"to":"z"}' task_id later-2 delay_ms 7200000 >/dev/null
rc FCALL dtq_enqueue 0 default echo '{"n":0}' task_id report-7 delay_ms 600000 >/dev/null
rc FCALL dtq_enqueue 0 default flaky '{"retryable":true,"message":"smtp timeout"}' \
    task_id flaky-1 >/dev/null
wait_for "flaky-1 retrying" status_is flaky-1 retrying
sleep 3 # a few samples for the plots and rates

browse() { # url file: the DOM once the page has run for a few (virtual) seconds
    timeout 120 "$chromium" --headless --disable-gpu --no-sandbox --no-first-run \
        --user-data-dir="$tmp/profile-dump" --window-size=1280,1000 \
        --virtual-time-budget=5000 --dump-dom "$1" >"$2" 2>>"$tmp/chromium.log"
}
# check FILE PYTHON-EXPR: evaluated with `dom` (the text) and row(attr, value) -> the <tr>
check() {
    /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$2 (in $1)"
import re, sys
dom = open(sys.argv[1]).read()
def row(attr, value):
    m = re.search(r'<tr[^>]*data-%s="%s"[^>]*>(.*?)</tr>' % (attr, re.escape(value)), dom, re.S)
    return re.sub(r'<[^>]+>', ' ', m.group(1)) if m else ''
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}

echo "== overview"
browse "$base/" "$tmp/overview.html"
check "$tmp/overview.html" "'data-state=\"ready\"' in dom"
check "$tmp/overview.html" "'paused' in row('queue', 'mail') and 'Resume' in row('queue', 'mail')"
check "$tmp/overview.html" "'active' in row('queue', 'default') and 'Pause' in row('queue', 'default')"
check "$tmp/overview.html" "'running' in row('worker', 'w-browser')"
check "$tmp/overview.html" "re.search(r'data-col=\"succeeded-total\">20<', dom)" # since dtq-web started
check "$tmp/overview.html" "'scheduler leader' in dom and 'w-browser' in dom"
check "$tmp/overview.html" "re.search(r'id=\"dlq-count\"[^>]*>1<', dom)"

echo "== dead letters"
browse "$base/#/dlq" "$tmp/dlq.html"
check "$tmp/dlq.html" "'card declined' in row('task', 'bad-card') and 'permanent' in row('task', 'bad-card')"
check "$tmp/dlq.html" "'Requeue' in row('task', 'bad-card') and 'Discard' in row('task', 'bad-card')"
browse "$base/#/dlq?class=timeout" "$tmp/dlq-timeout.html"
check "$tmp/dlq-timeout.html" "'no dead letter of class timeout' in dom"

echo "== a task, a queue"
browse "$base/#/task/ok-3" "$tmp/task.html"
check "$tmp/task.html" "'succeeded' in dom and '\"n\": 3' in dom and 'TASK_SUCCEEDED' in dom"
browse "$base/#/queue/mail" "$tmp/queue.html"
check "$tmp/queue.html" "'mail-waiting' in row('task', 'mail-waiting') and 'p7' in row('task', 'mail-waiting')"
browse "$base/#/task/no-such-task" "$tmp/missing.html"
check "$tmp/missing.html" "'data-state=\"notfound\"' in dom and 'task no-such-task' in dom"

echo "== a batch"
rc FCALL dtq_batch 0 create default 3 echo '{"page":1}' echo '{"page":2}' \
    fail '{"retryable":false,"message":"page 3 is corrupt"}' batch_id book-7 on_complete echo \
    description 'the book' >"$tmp/batch.out"
failed_member=$(sed -n 4p "$tmp/batch.out")
batch_complete() { rc FCALL_RO dtq_batch_show 0 book-7 | grep -q '"completed_at"'; }
wait_for "batch book-7 complete" batch_complete
browse "$base/#/batch/book-7" "$tmp/batch.html"
check "$tmp/batch.html" "'data-state=\"ready\"' in dom and 'the book' in dom and 'complete' in dom"
check "$tmp/batch.html" "re.search(r'<progress[^>]*value=\"100.0\"', dom) and '3 of 3 ended' in dom"
check "$tmp/batch.html" "'2' in row('count', 'succeeded') and '1' in row('count', 'dead_lettered')"
check "$tmp/batch.html" "'href=\"#/task/$failed_member\"' in dom" # the failed member, one click away
callback=$(rc FCALL_RO dtq_batch_show 0 book-7 | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["on_complete"]["task_id"])')
check "$tmp/batch.html" "'echo' in row('callback', 'on_complete') and 'href=\"#/task/$callback\"' in dom"
browse "$base/#/batches" "$tmp/batches.html"
check "$tmp/batches.html" "'complete' in row('batch', 'book-7') and 'the book' in row('batch', 'book-7') and 'href=\"#/batch/book-7\"' in dom"
browse "$base/#/task/$failed_member" "$tmp/member.html"
check "$tmp/member.html" "'member of batch' in dom and 'href=\"#/batch/book-7\"' in dom and 'page 3 is corrupt' in dom"

echo "== screenshot"
timeout 120 "$chromium" --headless --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$tmp/profile-shot" --hide-scrollbars --window-size=1280,1000 \
    --virtual-time-budget=5000 --screenshot="$tmp/dashboard.png" "$base/" \
    >/dev/null 2>>"$tmp/chromium.log"
[ "$(head -c 8 "$tmp/dashboard.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] ||
    fail "the screenshot is not a PNG"
[ "$(stat -c %s "$tmp/dashboard.png")" -gt 20000 ] || fail "the screenshot is nearly empty"
if [ -n "${DTQ_WEB_SCREENSHOT:-}" ]; then cp "$tmp/dashboard.png" "$DTQ_WEB_SCREENSHOT"; fi

echo "== the Scheduled and Retries tabs"
browse "$base/#/scheduled" "$tmp/scheduled.html"
check "$tmp/scheduled.html" "'data-state=\"ready\"' in dom and 'mail' in row('task', 'later-1')"
check "$tmp/scheduled.html" "re.search(r'in (9|10) min', row('task', 'report-7')) and re.search(r'in (5\\d|60) min', row('task', 'later-1'))"
check "$tmp/scheduled.html" "row('task', 'flaky-1') == '' and 'id=\"select-all\"' in dom and 'Run now' in dom"
browse "$base/#/scheduled?queue=mail&id_prefix=later" "$tmp/scheduled-search.html"
check "$tmp/scheduled-search.html" "row('task', 'later-2') and not row('task', 'report-7')"
browse "$base/#/retries" "$tmp/retries.html"
check "$tmp/retries.html" "'smtp timeout' in row('task', 'flaky-1') and 'retryable' in row('task', 'flaky-1')"
check "$tmp/retries.html" "row('task', 'later-1') == ''"
browse "$base/#/" "$tmp/overview2.html"
check "$tmp/overview2.html" "'href=\"#/scheduled\"' in dom and 'href=\"#/retries\"' in dom"
timeout 120 "$chromium" --headless --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$tmp/profile-shot" --hide-scrollbars --window-size=1280,700 \
    --virtual-time-budget=5000 --screenshot="$tmp/scheduled.png" "$base/#/scheduled" \
    >/dev/null 2>>"$tmp/chromium.log"
[ "$(stat -c %s "$tmp/scheduled.png")" -gt 20000 ] || fail "the Scheduled screenshot is nearly empty"
if [ -n "${DTQ_WEB_SCHED_SCREENSHOT:-}" ]; then cp "$tmp/scheduled.png" "$DTQ_WEB_SCHED_SCREENSHOT"; fi

echo "== the Periodic tab"
browse "$base/#/periodic" "$tmp/periodic-none.html"
check "$tmp/periodic-none.html" "'data-state=\"ready\"' in dom and 'No periodic schedule' in dom"
rc FCALL dtq_cron_set 0 ops nightly '0 3 * * *' default echo '{"n":0}' tz Europe/Berlin >/dev/null
rc FCALL dtq_cron_set 0 ops broken '61 * * * *' mail echo '{}' >/dev/null
planned() { [ -n "$(rc HGET dtq:cron:default:nightly next_fire)" ] &&
    [ -n "$(rc HGET dtq:cron:mail:broken error)" ]; }
wait_for "the leader to plan the schedules" planned
cron_task=$(rc FCALL dtq_cron_run 0 ops nightly)
browse "$base/#/periodic" "$tmp/periodic.html"
check "$tmp/periodic.html" "'0 3 * * *' in row('schedule', 'nightly') and 'Europe/Berlin' in row('schedule', 'nightly')"
check "$tmp/periodic.html" "re.search(r'in [\\d.]+ (s|min|h)\\b', row('schedule', 'nightly')) and 'active' in row('schedule', 'nightly')"
check "$tmp/periodic.html" "'$cron_task' in row('schedule', 'nightly') and 'href=\"#/task/$cron_task\"' in dom"
check "$tmp/periodic.html" "'Pause' in row('schedule', 'nightly') and 'Run now' in row('schedule', 'nightly')"
check "$tmp/periodic.html" "re.search(r'<tr class=\"has-error\" data-schedule=\"broken\"', dom) and 'spec' in row('schedule', 'broken')"

echo "== the Limits tab"
browse "$base/#/limits" "$tmp/limits-none.html"
check "$tmp/limits-none.html" "'data-state=\"ready\"' in dom and 'No rate or concurrency limit' in dom"
rc FCALL dtq_limit_set 0 ops default metered rate 1 period_ms 3600000 concurrency 2 >/dev/null
rc FCALL dtq_limit_set 0 ops mail '' rate 100 period_ms 10000 burst 5 concurrency 3 per_key 1 >/dev/null
rc FCALL dtq_enqueue 0 default metered '{"n":1}' task_id metered-1 >/dev/null
rc FCALL dtq_enqueue 0 default metered '{"n":2}' task_id metered-2 >/dev/null
deferred() { rc FCALL_RO dtq_limit_list 0 | grep -q '"deferred_until_ms":[0-9]'; }
wait_for "metered-1" status_is metered-1 succeeded
wait_for "metered-2 deferred by the rate" deferred
browse "$base/#/limits" "$tmp/limits.html"
check "$tmp/limits.html" "'1/h' in row('limit', 'default:metered') and 'href=\"#/queue/default\"' in dom"
check "$tmp/limits.html" "'0 / 2' in row('limit', 'default:metered') and 'class=\"usebar\"' in dom"
check "$tmp/limits.html" "re.search(r'deferring until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\s+in (5\\d|60) min', row('limit', 'default:metered'))"
check "$tmp/limits.html" "re.search(r'data-col=\"tokens\"[^>]*>0<', dom) and 'Remove' in row('limit', 'default:metered')"
check "$tmp/limits.html" "'100/10s' in row('limit', 'mail') and 'burst 5' in row('limit', 'mail') and 'yes' in row('limit', 'mail')"
check "$tmp/limits.html" "'whole queue' in row('limit', 'mail') and 'deferring' not in row('limit', 'mail')"

echo "== the attempt history with no events stream"
rc DEL dtq:stream:events >/dev/null
browse "$base/#/task/flaky-1" "$tmp/attempts.html"
check "$tmp/attempts.html" "'No event history is kept' in dom and 'smtp timeout' in row('attempt', '1')"
check "$tmp/attempts.html" "'retryable' in row('attempt', '1') and 'w-browser' in row('attempt', '1')"
check "$tmp/attempts.html" "re.search(r'id=\"due\"> · due <span[^>]*>in \\d+ (min|h)<', dom)"

echo "== a click on Run now (DevTools protocol)"
mkdir -p "$tmp/profile-cdp-sched"
/usr/bin/python3 "$here/../support/web_cdp.py" "$chromium" "$tmp/profile-cdp-sched" "$base" "$token" later-1 \
    scheduled || fail "Run now through the DevTools protocol"
status_is later-1 queued || fail "later-1 is $(rc HGET dtq:task:later-1 status), not queued"
[ -z "$(rc ZSCORE dtq:retry:schedule later-1)" ] || fail "later-1 is still in the schedule"
audit=$(rc XREVRANGE dtq:stream:audit + - COUNT 1 | tr '\n' ' ')
case "$audit" in
    *"actor dtq-web action sched_run_now task_id later-1"*) ;;
    *) fail "audit entry: $audit" ;;
esac

echo "== a click on Requeue (DevTools protocol)"
audit_before=$(rc XLEN dtq:stream:audit)
mkdir -p "$tmp/profile-cdp"
/usr/bin/python3 "$here/../support/web_cdp.py" "$chromium" "$tmp/profile-cdp" "$base" "$token" bad-card ||
    fail "the click through the DevTools protocol"
status_is bad-card queued || fail "bad-card is $(rc HGET dtq:task:bad-card status), not queued"
# (the batch's dead-lettered member is the one entry left)
[ "$(rc XLEN dtq:stream:dead-letter)" = 1 ] || fail "the dead letter is still in the stream"
rc XRANGE dtq:stream:dead-letter - + | grep -qx "$failed_member" || fail "the batch's dead letter is gone"
[ "$(rc XLEN dtq:stream:audit)" = $((audit_before + 1)) ] ||
    fail "want exactly one audit entry (the refused click must write nothing)"
audit=$(rc XREVRANGE dtq:stream:audit + - COUNT 1 | tr '\n' ' ')
case "$audit" in
    *"actor dtq-web action requeue task_id bad-card"*) ;;
    *) fail "audit entry: $audit" ;;
esac
echo "== DNS rebinding: a page of another name resolving to dtq-web is refused"
rebind_dom() { # url file: --dump-dom with evil.example resolving to 127.0.0.1
    timeout 120 "$chromium" --headless --disable-gpu --no-sandbox --no-first-run \
        --user-data-dir="$tmp/profile-rebind" --host-resolver-rules="MAP evil.example 127.0.0.1" \
        --virtual-time-budget=5000 --dump-dom "$1" >"$2" 2>>"$tmp/chromium.log"
}
rebind_dom "http://evil.example:$port/#/task/ok-3" "$tmp/rebind.html"
check "$tmp/rebind.html" "'misdirected_request' in dom and '\"n\"' not in dom"
rebind_dom "http://localhost:$port/#/task/ok-3" "$tmp/localhost.html"
check "$tmp/localhost.html" "'data-state=\"ready\"' in dom and '\"n\": 3' in dom"

echo "== reads with a read token (DevTools protocol)"
read_token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
printf '%s\n' "$read_token" >"$tmp/web-read.token"
chmod 600 "$tmp/web-read.token"
port2=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$web_bin" -c "$tmp/worker.ini" --listen "127.0.0.1:$port2" --token-file "$tmp/web.token" \
    --read-token-file "$tmp/web-read.token" >"$tmp/web2.log" 2>&1 &
pids+=($!)
refused_without_token() {
    /usr/bin/python3 -c "
import urllib.request, urllib.error, sys
try: urllib.request.urlopen('http://127.0.0.1:$port2/api/info')
except urllib.error.HTTPError as e: sys.exit(0 if e.code == 401 else 1)
sys.exit(1)"
}
wait_for "dtq-web with a read token" refused_without_token
mkdir -p "$tmp/profile-cdp2"
/usr/bin/python3 "$here/../support/web_cdp.py" "$chromium" "$tmp/profile-cdp2" "http://127.0.0.1:$port2" \
    "$read_token" ok-3 read-token || fail "the page with a read token"
echo "web_browser: all checks passed"
