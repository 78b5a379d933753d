/* it_pool.c: [pool:NAME] handler pools (issue 28) with real processes of the SDKs
 * (sdk/python, sdk/node) under a real dtq-worker: the types a pool announces, how each
 * way a handler fails ends its task, timeouts and kills and crashes of the processes,
 * crash-loop back-off and /readyz, recycling (max_tasks, max_rss_mb), the output of the
 * processes in the daemon's log, async concurrency, rolling replacement (dtqctl pool
 * restart, SIGHUP), the stop, and the routing beside [handler:X]. The handlers are in
 * tests/fixtures/pool/. Suite "pool"; suite "pool_chaos" kills processes at random under
 * load (CK_RUN_SUITE picks one; ctest runs each as its own test). */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static th_redis R;
static redisContext *C;

#define FAST_RETRY "[retry]\nbase_delay = 0.2\nmax_delay = 0.5\njitter = 0\n"
#define FAST_SCHED "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"
#define FIXTURES DTQ_SOURCE_DIR "/tests/fixtures/pool"
/* The environment of a Python pool: the SDK and the fixtures importable, no __pycache__
 * written into the source tree. */
#define PY_ENV "PYTHONPATH=" DTQ_SOURCE_DIR "/sdk/python:" FIXTURES " PYTHONDONTWRITEBYTECODE=1"
/* A [pool:NAME] of the Python fixtures; the caller adds its keys after it. */
#define PY_CMD "command = /usr/bin/python3 -m dtq serve pytasks\n"
#define PY_POOL(name) "[pool:" name "]\n" PY_CMD "env = " PY_ENV "\n"
/* The same with POOL_TAG=tag in its environment (the handlers report it). */
#define PY_POOL_TAG(name, tag) "[pool:" name "]\n" PY_CMD "env = " PY_ENV " POOL_TAG=" tag "\n"
#define JS_POOL(name)                                                                              \
    "[pool:" name "]\ncommand = /usr/bin/node " DTQ_SOURCE_DIR                                     \
    "/sdk/node/bin/dtq-serve.js " FIXTURES "/jstasks.js\n"

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

/* The config of a daemon: `worker` goes into [worker], `sections` after it. */
static void make_ini(char *ini, size_t len, const char *id, const char *worker,
                     const char *sections) {
    snprintf(ini, len,
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\n%s\n" FAST_RETRY FAST_SCHED "%s",
             id, worker ? worker : "", sections ? sections : "");
}

static void start(th_daemon *d, const char *id, const char *worker, const char *sections) {
    char ini[8192];
    make_ini(ini, sizeof(ini), id, worker, sections);
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 20000);
}

/* Rewrites the daemon's config file (as th_daemon_start wrote it) and sends SIGHUP. */
static void reconfigure(th_daemon *d, const char *id, const char *worker, const char *sections) {
    char ini[8192], tmp[512];
    FILE *f;
    make_ini(ini, sizeof(ini), id, worker, sections);
    snprintf(tmp, sizeof(tmp), "%s.new", d->cfg);
    f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[redis]\nurl = %s\n%s\n", R.url, ini);
    fclose(f);
    ck_assert_int_eq(rename(tmp, d->cfg), 0);
    ck_assert_int_eq(kill(d->pid, SIGHUP), 0);
}

/* GET dtq:result:<id> parsed (caller deletes); fails the test when there is none or it is
 * no JSON. */
static cJSON *result_of(const char *id) {
    redisReply *r = th_cmd(C, "GET dtq:result:%s", id);
    cJSON *j;
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "task %s has no result", id);
    j = cJSON_Parse(r->str);
    ck_assert_msg(j != NULL, "task %s: the result is no JSON: %s", id, r->str);
    freeReplyObject(r);
    return j;
}

/* The "pid" of a task's result. */
static int result_pid(const char *id) {
    cJSON *j = result_of(id);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pid");
    int pid;
    ck_assert_msg(cJSON_IsNumber(p), "task %s: no pid in its result", id);
    pid = (int)p->valuedouble;
    cJSON_Delete(j);
    return pid;
}

/* The task's attempt history (the hash's `history`, a JSON array; an empty array when
 * there is none). Caller deletes. */
static cJSON *history_of(const char *id) {
    char *h = th_task_field(C, id, "history");
    cJSON *j = h ? cJSON_Parse(h) : cJSON_CreateArray();
    ck_assert_msg(cJSON_IsArray(j), "task %s: history is not a JSON array: %s", id, h);
    free(h);
    return j;
}

/* Fails unless history record i of task id has attempt `attempt` and class `cls`. */
static void assert_history(const char *id, int i, int attempt, const char *cls) {
    cJSON *h = history_of(id), *rec = cJSON_GetArrayItem(h, i);
    char *text = cJSON_PrintUnformatted(h);
    ck_assert_msg(rec != NULL, "task %s: no history record %d: %s", id, i, text);
    ck_assert_msg(
        (int)th_json_num(rec, "attempt") == attempt && !strcmp(th_json_str(rec, "class"), cls),
        "task %s: history record %d is not attempt %d class %s: %s", id, i, attempt, cls, text);
    free(text);
    cJSON_Delete(h);
}

/* Fails unless the field starts with / contains want. */
static void assert_field_prefix(const char *id, const char *field, const char *want) {
    char *v = th_task_field(C, id, field);
    ck_assert_msg(v && !strncmp(v, want, strlen(want)), "task %s: %s is \"%s\", want \"%s...\"", id,
                  field, v ? v : "(none)", want);
    free(v);
}

static void assert_field_has(const char *id, const char *field, const char *want) {
    char *v = th_task_field(C, id, field);
    ck_assert_msg(v && strstr(v, want), "task %s: %s is \"%s\", want it to contain \"%s\"", id,
                  field, v ? v : "(none)", want);
    free(v);
}

static int pid_gone(int pid) {
    return pid > 0 && kill(pid, 0) == -1 && errno == ESRCH;
}

static int pid_gone_pred(void *arg) {
    return pid_gone(*(int *)arg);
}

/* Processes whose parent is `ppid` and whose name is `comm`: how many, at most max in pids. */
static int children_of(pid_t ppid, const char *comm, int *pids, int max) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        char path[300], line[512], *close_paren;
        FILE *f;
        int pp;
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        if (!(f = fopen(path, "r"))) continue;
        if (!fgets(line, sizeof(line), f)) line[0] = '\0';
        fclose(f);
        close_paren = strrchr(line, ')');
        if (!close_paren || sscanf(close_paren + 1, " %*c %d", &pp) != 1 || pp != ppid) continue;
        *close_paren = '\0';
        if (!strchr(line, '(') || strcmp(strchr(line, '(') + 1, comm)) continue;
        if (n < max) pids[n] = atoi(e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

typedef struct kids {
    pid_t ppid;
    const char *comm;
    int want;
    int pids[16];
} kids;

static int has_kids(void *arg) {
    kids *k = arg;
    return children_of(k->ppid, k->comm, k->pids, 16) == k->want;
}

/* Waits until the daemon has exactly n children named comm; fills pids. */
static void wait_kids(const th_daemon *d, const char *comm, int n, int *pids) {
    kids k = {d->pid, comm, n, {0}};
    ck_assert_msg(th_wait_until(has_kids, &k, 20000),
                  "the daemon never had %d %s children (has %d)", n, comm,
                  children_of(d->pid, comm, k.pids, 16));
    memcpy(pids, k.pids, sizeof(int) * (size_t)n);
}

static int in_set(const int *set, int n, int v) {
    for (int i = 0; i < n; i++)
        if (set[i] == v) return 1;
    return 0;
}

/* ----------------------------------------------------------------- HTTP */

/* GET path on 127.0.0.1:port (HTTP/1.0): the status code, the body in *body (caller
 * frees). */
static int http_get(int port, const char *path, char **body) {
    struct sockaddr_in sa = {0};
    char req[256];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = 0;
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap), *b;
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "cannot connect to %d: %s",
                  port, strerror(errno));
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        ck_assert_msg(poll(&p, 1, 5000) == 1, "no answer from %s", path);
        n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
        ck_assert_uint_lt(got, cap - 1);
    }
    close(fd);
    buf[got] = '\0';
    sscanf(buf, "HTTP/1.%*d %d", &code);
    b = strstr(buf, "\r\n\r\n");
    *body = strdup(b ? b + 4 : "");
    free(buf);
    return code;
}

/* The sum of the samples of a /metrics body whose line starts with `prefix` (a name and
 * the start of its labels, e.g. `dtq_pool_restarts_total{pool="bad"`). NAN when none. */
static double metric_sum(const char *body, const char *prefix) {
    double sum = NAN;
    size_t n = strlen(prefix);
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *sp;
        if (strncmp(p, prefix, n)) continue;
        sp = strchr(p, ' ');
        if (!sp || (strchr(p, '\n') && sp > strchr(p, '\n'))) continue;
        sum = (isnan(sum) ? 0 : sum) + strtod(sp + 1, NULL);
    }
    return sum;
}

static double scrape_sum(int port, const char *prefix) {
    char *body;
    double v;
    ck_assert_int_eq(http_get(port, "/metrics", &body), 200);
    v = metric_sum(body, prefix);
    free(body);
    return v;
}

/* ----------------------------------------------------------------- 1. announced types */

/* A pool without `types =`: what its processes announce in their hello is routed to it.
 * Tasks enqueued before the daemon starts run at attempt 1 (the start gate: no fetch
 * before the hello), the result is the handler's JSON, a payload written over several
 * lines arrives whole, the process sees the protocol's variables and not the daemon's,
 * and the heartbeat names the pool ready/wanted. */
START_TEST(test_announced_types_succeed) {
    th_daemon d;
    const char *payload = "{\n  \"x\": [1, 2, \"three\"],\n  \"nested\": {\"k\": null}\n}";
    char sections[2048], *body;
    int port = th_free_port();
    cJSON *res, *want;
    th_load_library(C);
    th_enqueue(C, "default", "b1", "echo", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "b2", "echo", payload, NULL);
    setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1); /* the process must not get it */
    snprintf(sections, sizeof(sections),
             PY_POOL_TAG("py", "basic") "[http]\nlisten = 127.0.0.1:%d\n", port);
    start(&d, "w-basic", NULL, sections);
    unsetenv("NOTIFY_SOCKET");
    th_expect_status(C, "b1", "succeeded", 20000);
    th_expect_status(C, "b2", "succeeded", 20000);
    th_assert_field(C, "b1", "attempt", "1");
    th_assert_field(C, "b2", "attempt", "1");
    res = result_of("b2");
    want = cJSON_Parse(payload);
    ck_assert_msg(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(res, "payload"), want, 1),
                  "payload differs: %s", cJSON_PrintUnformatted(res));
    cJSON_Delete(want);
    ck_assert_int_eq((int)th_json_num(res, "attempt"), 1);
    ck_assert_str_eq(th_json_str(res, "queue"), "default");
    ck_assert_str_eq(th_json_str(res, "type"), "echo");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "has_deadline")));
    ck_assert_str_eq(th_json_str(res, "env.DTQ_TASKS_FD"), "3");
    ck_assert_str_eq(th_json_str(res, "env.DTQ_REPLIES_FD"), "4");
    ck_assert_str_eq(th_json_str(res, "env.DTQ_PROTOCOL"), "1");
    ck_assert_str_eq(th_json_str(res, "env.DTQ_POOL"), "py");
    ck_assert_str_eq(th_json_str(res, "env.DTQ_INFLIGHT"), "1");
    ck_assert_str_eq(th_json_str(res, "env.POOL_TAG"), "basic");
    ck_assert(cJSON_IsNull(th_json_at(res, "env.NOTIFY_SOCKET")));
    ck_assert(cJSON_IsNull(th_json_at(res, "env.DTQ_REDIS_URL")));
    cJSON_Delete(res);
    ck_assert_msg(th_wait_until_cmd_str(C, "HGET dtq:worker:w-basic pools", "py:2/2", 10000),
                  "heartbeat pools field is not py:2/2");
    {
        /* the pool's series: 2 ready processes of 1 slot each, idle, up */
        cJSON *fams;
        ck_assert_int_eq(http_get(port, "/metrics", &body), 200);
        fams = th_metrics_parse(&R, body);
        ck_assert(th_metrics_value(fams, "dtq_pool_processes", "pool=py,state=ready") == 2);
        ck_assert(th_metrics_value(fams, "dtq_pool_processes", "pool=py,state=starting") == 0);
        ck_assert(th_metrics_value(fams, "dtq_pool_slots", "pool=py") == 2);
        ck_assert(th_metrics_value(fams, "dtq_pool_busy_slots", "pool=py") == 0);
        ck_assert(th_metrics_value(fams, "dtq_pool_backlog", "pool=py") == 0);
        ck_assert(th_metrics_value(fams, "dtq_pool_up", "pool=py") == 1);
        cJSON_Delete(fams);
        free(body);
        ck_assert_int_eq(http_get(port, "/readyz", &body), 200);
        free(body);
    }
    {
        /* the dtqctl view of the task: succeeded, the same result */
        char *out;
        ck_assert_int_eq(th_ctl(&R, &out, "show b1 --json"), 0);
        ck_assert_msg(strstr(out, "\"succeeded\""), "dtqctl show: %s", out);
        free(out);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 2. error classes */

START_TEST(test_error_classes) {
    th_daemon d;
    cJSON *res;
    start(&d, "w-errors", "concurrency = 4", PY_POOL("py"));
    th_enqueue(C, "default", "e1", "flaky", "{}", "max_attempts 3");
    th_enqueue(C, "default", "e2", "permanent", "{}", "max_attempts 3");
    th_enqueue(C, "default", "e3", "value_error", "{}", "max_attempts 3");
    th_enqueue(C, "default", "e4", "invalid", "{}", "max_attempts 3");
    th_enqueue(C, "default", "e5", "not_json", "{}", "max_attempts 3");

    th_expect_status(C, "e1", "succeeded", 20000);
    th_assert_field(C, "e1", "attempt", "2");
    th_assert_field(C, "e1", "last_error_class", "retryable");
    assert_field_has("e1", "last_error", "RetryableError: not yet, try again");
    assert_history("e1", 0, 1, "retryable");
    res = result_of("e1");
    ck_assert_int_eq((int)th_json_num(res, "attempt"), 2);
    cJSON_Delete(res);

    th_expect_status(C, "e2", "dead_lettered", 20000);
    th_assert_field(C, "e2", "attempt", "1");
    th_assert_field(C, "e2", "last_error_class", "permanent");
    assert_field_has("e2", "last_error", "PermanentError: no such user");

    th_expect_status(C, "e3", "dead_lettered", 20000);
    th_assert_field(C, "e3", "attempt", "1");
    th_assert_field(C, "e3", "last_error_class", "permanent");
    assert_field_prefix("e3", "last_error", "ValueError: bad input 42");

    th_expect_status(C, "e4", "dead_lettered", 20000);
    th_assert_field(C, "e4", "attempt", "1");
    th_assert_field(C, "e4", "last_error_class", "invalid_payload");
    assert_field_has("e4", "last_error", "InvalidPayloadError: to: field required");

    th_expect_status(C, "e5", "dead_lettered", 20000);
    th_assert_field(C, "e5", "attempt", "1");
    th_assert_field(C, "e5", "last_error_class", "permanent");
    assert_field_has("e5", "last_error", "not JSON-serialisable");

    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 4);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 3. timeout */

/* A handler deaf to the cancel: the attempt ends as `timeout` (retryable) when timeout_ms
 * passes; kill_grace_ms later the process is killed and replaced; the retry and the next
 * task run in the new process. (timeout_ms 2500: the retry's time counts from its claim,
 * and it waits in the backlog for the kill and the new process's hello.) */
START_TEST(test_timeout_kills_and_replaces) {
    th_daemon d;
    int port = th_free_port(), first, second, kids1[1];
    char sections[2048];
    int64_t t0;
    snprintf(sections, sizeof(sections),
             PY_POOL("py") "processes = 1\nkill_grace_ms = 500\n[http]\nlisten = 127.0.0.1:%d\n",
             port);
    start(&d, "w-timeout", "concurrency = 2", sections);
    th_enqueue(C, "default", "t0", "pid", "{}", NULL);
    th_expect_status(C, "t0", "succeeded", 20000);
    first = result_pid("t0");
    wait_kids(&d, "python3", 1, kids1);
    ck_assert_int_eq(kids1[0], first);

    t0 = th_now_ms();
    th_enqueue(C, "default", "t1", "hang", "{\"sleep_s\":60}", "timeout_ms 2500 max_attempts 3");
    th_expect_status(C, "t1", "succeeded", 20000);
    th_assert_field(C, "t1", "attempt", "2");
    th_assert_field(C, "t1", "last_error_class", "timeout");
    assert_history("t1", 0, 1, "timeout");
    ck_assert_msg(th_wait_until(pid_gone_pred, &first, 5000),
                  "process %d still alive after its task timed out and kill_grace_ms passed",
                  first);
    second = result_pid("t1");
    ck_assert_msg(second != first, "the retry ran in the process that hung (%d)", first);
    /* the hang was 60 s: the kill, not the handler, ended it */
    ck_assert_int_lt(th_now_ms() - t0, 15000);

    th_enqueue(C, "default", "t2", "pid", "{}", NULL);
    th_expect_status(C, "t2", "succeeded", 20000);
    th_assert_field(C, "t2", "attempt", "1");
    ck_assert_int_ne(result_pid("t2"), first);
    ck_assert_msg(scrape_sum(port, "dtq_pool_restarts_total{pool=\"py\",reason=\"timeout\"") >= 1,
                  "no restart of reason timeout counted");
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 4. a killed process */

static int file_exists(void *arg) {
    struct stat st;
    return stat((const char *)arg, &st) == 0;
}

START_TEST(test_sigkill_mid_task) {
    th_daemon d;
    char pidfile[400], payload[600], *text;
    int victim, after;
    th_path(&R, "crash.pid", pidfile, sizeof(pidfile));
    snprintf(payload, sizeof(payload), "{\"pidfile\":\"%s\"}", pidfile);
    start(&d, "w-crash", NULL, PY_POOL("py") "processes = 1\n");
    th_enqueue(C, "default", "k1", "crashme", payload, "max_attempts 3");
    ck_assert_msg(th_wait_until(file_exists, pidfile, 20000), "the handler never wrote its pid");
    text = th_read_file(pidfile);
    victim = atoi(text);
    free(text);
    ck_assert_int_gt(victim, 1);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    th_expect_status(C, "k1", "succeeded", 20000);
    th_assert_field(C, "k1", "attempt", "2");
    th_assert_field(C, "k1", "last_error_class", "handler_crashed");
    {
        char want[128];
        snprintf(want, sizeof(want), "handler_crashed: pool py pid %d killed by signal 9", victim);
        assert_field_prefix("k1", "last_error", want);
    }
    assert_history("k1", 0, 1, "handler_crashed");
    after = result_pid("k1");
    ck_assert_int_ne(after, victim);
    ck_assert(pid_gone(victim));
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 5. crash loop */

/* Fails unless none of the tasks has used an attempt or ended. */
static void assert_waiting(const char *const *ids, int n) {
    for (int i = 0; i < n; i++) {
        char *st = th_task_field(C, ids[i], "status"), *att = th_task_field(C, ids[i], "attempt");
        ck_assert_msg(st && (!strcmp(st, "queued") || !strcmp(st, "pending") ||
                             !strcmp(st, "running") || !strcmp(st, "retrying")),
                      "task %s of a crash-looping pool is %s", ids[i], st ? st : "(none)");
        ck_assert_msg(att && !strcmp(att, "1"), "task %s of a crash-looping pool is at attempt %s",
                      ids[i], att ? att : "(none)");
        free(st);
        free(att);
    }
}

START_TEST(test_crash_loop_backs_off) {
    th_daemon d;
    int port = th_free_port();
    char sections[2048], *body;
    const char *ids[] = {"l1", "l2", "l3"};
    double restarts;
    snprintf(sections, sizeof(sections),
             "[pool:bad]\ncommand = /usr/bin/python3 -c \"import sys; sys.exit(3)\"\n"
             "types = doomed\nprocesses = 1\n[http]\nlisten = 127.0.0.1:%d\n",
             port);
    start(&d, "w-loop", NULL, sections);
    for (int i = 0; i < 3; i++) th_enqueue(C, "default", ids[i], "doomed", "{}", "max_attempts 2");
    /* 4 s of a program that exits at once: a few restarts, backing off */
    for (int i = 0; i < 20; i++) {
        th_sleep_ms(200);
        assert_waiting(ids, 3);
    }
    restarts = scrape_sum(port, "dtq_pool_restarts_total{pool=\"bad\"");
    printf("crash loop: %.0f restarts in 4 s\n", restarts);
    ck_assert_msg(!isnan(restarts), "no dtq_pool_restarts_total for pool bad");
    ck_assert_msg(restarts >= 2 && restarts < 15, "%.0f restarts of pool bad in 4 s", restarts);
    ck_assert_int_eq(http_get(port, "/readyz", &body), 503);
    ck_assert_msg(strstr(body, "pool bad"), "/readyz: %s", body);
    free(body);
    ck_assert_msg(scrape_sum(port, "dtq_pool_up{pool=\"bad\"") == 0, "dtq_pool_up is not 0");
    for (int i = 0; i < 3; i++) {
        /* tried and put back: deferred, class pool_unavailable */
        th_assert_field(C, ids[i], "last_error_class", "pool_unavailable");
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_ge(th_count_in_file(d.log, "pool bad"), 2);
    /* put back because the pool is down, not because the type is unknown */
    ck_assert_msg(th_count_in_file(d.log, "task type unknown here") == 0,
                  "a task of the pool's `types` was logged as of an unknown type");

    /* a working command, by SIGHUP: the waiting tasks run, at attempt 1 */
    snprintf(sections, sizeof(sections),
             PY_POOL("bad") "types = doomed\nprocesses = 1\n[http]\nlisten = 127.0.0.1:%d\n", port);
    reconfigure(&d, "w-loop", NULL, sections);
    for (int i = 0; i < 3; i++) {
        cJSON *res;
        th_expect_status(C, ids[i], "succeeded", 45000);
        th_assert_field(C, ids[i], "attempt", "1");
        res = result_of(ids[i]);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "fixed")));
        cJSON_Delete(res);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(http_get(port, "/readyz", &body), 200);
    free(body);
    ck_assert(scrape_sum(port, "dtq_pool_up{pool=\"bad\"") == 1);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 6. max_tasks */

START_TEST(test_max_tasks_recycles) {
    th_daemon d;
    char id[16];
    int pids[10], distinct = 0;
    start(&d, "w-maxtasks", NULL, PY_POOL("py") "processes = 1\nmax_tasks = 3\n");
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "m%d", i);
        th_enqueue(C, "default", id, "pid", "{}", NULL);
    }
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "m%d", i);
        th_expect_status(C, id, "succeeded", 30000);
        th_assert_field(C, id, "attempt", "1");
        pids[i] = result_pid(id);
        if (!in_set(pids, i, pids[i])) distinct++;
    }
    printf("max_tasks = 3: 10 tasks in %d processes\n", distinct);
    ck_assert_msg(distinct >= 4, "10 tasks ran in %d processes with max_tasks = 3", distinct);
    {
        /* no process ran more than 3 */
        for (int i = 0; i < 10; i++) {
            int n = 0;
            for (int j = 0; j < 10; j++) n += pids[j] == pids[i];
            ck_assert_msg(n <= 3, "process %d ran %d tasks", pids[i], n);
        }
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 7. max_rss_mb */

START_TEST(test_max_rss_recycles) {
    th_daemon d;
    int before, hog, after;
    cJSON *res;
    start(&d, "w-rss", NULL, PY_POOL("py") "processes = 1\nmax_rss_mb = 60\n");
    th_enqueue(C, "default", "r0", "pid", "{}", NULL);
    th_expect_status(C, "r0", "succeeded", 20000);
    before = result_pid("r0");
    th_enqueue(C, "default", "r1", "hog", "{\"mb\":150}", NULL);
    th_expect_status(C, "r1", "succeeded", 20000);
    th_assert_field(C, "r1", "attempt", "1");
    res = result_of("r1");
    hog = (int)th_json_num(res, "pid");
    ck_assert_int_eq((int)th_json_num(res, "held_mb"), 150);
    cJSON_Delete(res);
    ck_assert_int_eq(hog, before); /* 20 MB or so before: not replaced for r0 */
    th_enqueue(C, "default", "r2", "pid", "{}", NULL);
    th_expect_status(C, "r2", "succeeded", 20000);
    after = result_pid("r2");
    ck_assert_msg(after != hog, "the process that grew to 150 MiB (%d) ran the next task", hog);
    ck_assert_msg(th_wait_until(pid_gone_pred, &hog, 10000), "process %d never exited", hog);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 8. output */

START_TEST(test_output_logged_and_attributed) {
    th_daemon d;
    char want[256];
    int pid;
    cJSON *res;
    start(&d, "w-noisy", NULL, PY_POOL("py") "processes = 1\n");
    th_enqueue(C, "default", "n1", "noisy", "{}", NULL);
    th_expect_status(C, "n1", "succeeded", 20000);
    th_assert_field(C, "n1", "attempt", "1");
    res = result_of("n1");
    pid = (int)th_json_num(res, "pid");
    ck_assert_int_eq((int)th_json_num(res, "printed"), 24);
    cJSON_Delete(res);
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: out-line 0 of n1", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: out-line 9 of n1", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: err-line 5 of n1", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    /* a line that looks like an answer is output, nothing more (the log escapes its quotes) */
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: {", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: LLLLLLLLLL", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: EEEEEEEEEE", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    snprintf(want, sizeof(want), "pool py[pid %d] task n1: noisy-done n1", pid);
    ck_assert_msg(th_wait_log(d.log, want, 1, 5000), "no \"%s\" in the log", want);
    {
        /* no line of the log holds the 200 000 bytes of the long line whole */
        char *log = th_read_file(d.log), *run = malloc(70001);
        memset(run, 'L', 70000);
        run[70000] = '\0';
        ck_assert_msg(strstr(log, run) == NULL, "a line of the log holds 70000 bytes of output");
        free(run);
        free(log);
    }
    /* the process is healthy after its output: another task in the same process */
    th_enqueue(C, "default", "n2", "pid", "{}", NULL);
    th_expect_status(C, "n2", "succeeded", 20000);
    ck_assert_int_eq(result_pid("n2"), pid);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 9. async inflight */

START_TEST(test_async_inflight) {
    th_daemon d;
    const char *ids[] = {"a1", "a2", "a3", "a4"};
    long long first_start = 0, last_end = 0;
    int pid = 0;
    start(&d, "w-async", "concurrency = 4", PY_POOL("py") "processes = 1\ninflight = 4\n");
    for (int i = 0; i < 4; i++) th_enqueue(C, "default", ids[i], "nap", "{\"ms\":1000}", NULL);
    for (int i = 0; i < 4; i++) {
        char *s, *f;
        int p;
        th_expect_status(C, ids[i], "succeeded", 20000);
        th_assert_field(C, ids[i], "attempt", "1");
        s = th_task_field(C, ids[i], "started_at");
        f = th_task_field(C, ids[i], "finished_at");
        ck_assert(s && f);
        if (!first_start || atoll(s) < first_start) first_start = atoll(s);
        if (atoll(f) > last_end) last_end = atoll(f);
        free(s);
        free(f);
        p = result_pid(ids[i]);
        if (i) ck_assert_int_eq(p, pid); /* one process ran all four */
        pid = p;
    }
    printf("4 async tasks of 1 s in one process: %lld ms\n", last_end - first_start);
    ck_assert_msg(last_end - first_start < 2500,
                  "4 async tasks of 1 s on inflight = 4 took %lld ms (serially: 4000)",
                  last_end - first_start);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 10. rolling restart */

/* A steady stream of `pid` tasks (100 ms each), one enqueued every 100 ms. */
typedef struct stream {
    int n;
    char ids[600][16];
    int64_t next_ms;
} stream;

static void stream_tick(stream *s) {
    if (th_now_ms() < s->next_ms || s->n >= 600) return;
    snprintf(s->ids[s->n], sizeof(s->ids[0]), "s%03d", s->n);
    th_enqueue(C, "default", s->ids[s->n], "pid", "{\"sleep_ms\":100}", NULL);
    s->n++;
    s->next_ms = th_now_ms() + 100;
}

/* Streams until every pid of olds is gone (or timeout_ms). */
static int stream_until_gone(stream *s, const int *olds, int n, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        int gone = 1;
        for (int i = 0; i < n; i++) gone &= pid_gone(olds[i]);
        if (gone) return 1;
        stream_tick(s);
        th_sleep_ms(20);
    }
    return 0;
}

/* Streams for ms. */
static void stream_for(stream *s, int ms) {
    int64_t end = th_now_ms() + ms;
    while (th_now_ms() < end) {
        stream_tick(s);
        th_sleep_ms(20);
    }
}

/* Every task of the stream from `from` on succeeded at attempt 1 with no failed attempt;
 * those from `after` on ran in none of the processes `olds` and report tag `tag` (NULL:
 * any). */
static void stream_check(const stream *s, int from, int after, const int *olds, int nolds,
                         const char *tag) {
    for (int i = from; i < s->n; i++) {
        th_expect_status(C, s->ids[i], "succeeded", 20000);
        th_assert_field(C, s->ids[i], "attempt", "1");
        {
            char *h = th_task_field(C, s->ids[i], "history");
            ck_assert_msg(h == NULL, "task %s had a failed attempt: %s", s->ids[i], h);
        }
        if (i >= after) {
            cJSON *res = result_of(s->ids[i]);
            int pid = (int)th_json_num(res, "pid");
            ck_assert_msg(!in_set(olds, nolds, pid),
                          "task %s (enqueued after the roll) ran in old process %d", s->ids[i],
                          pid);
            if (tag) ck_assert_str_eq(th_json_str(res, "tag"), tag);
            cJSON_Delete(res);
        }
    }
}

START_TEST(test_rolling_restart) {
    static stream s; /* static: large */
    th_daemon d;
    int olds[2], mid;
    char *out;
    memset(&s, 0, sizeof(s));
    start(&d, "w-roll", "concurrency = 4",
          PY_POOL_TAG("py", "v1") "processes = 2\nkill_grace_ms = 2000\n");
    wait_kids(&d, "python3", 2, olds);
    stream_for(&s, 1000);

    /* (a) dtqctl pool restart: every daemon rolls the pool at its next heartbeat */
    ck_assert_int_eq(th_ctl(&R, &out, "pool restart py"), 0);
    free(out);
    ck_assert_msg(stream_until_gone(&s, olds, 2, 20000),
                  "the old processes %d and %d still run 20 s after dtqctl pool restart", olds[0],
                  olds[1]);
    mid = s.n;
    stream_for(&s, 1000);
    stream_check(&s, 0, mid, olds, 2, "v1");
    printf("rolling restart (dtqctl): %d tasks, all at attempt 1\n", s.n);

    /* (b) SIGHUP with the pool's env changed */
    wait_kids(&d, "python3", 2, olds);
    {
        int from = s.n;
        reconfigure(&d, "w-roll", "concurrency = 4",
                    PY_POOL_TAG("py", "v2") "processes = 2\nkill_grace_ms = 2000\n");
        ck_assert_msg(stream_until_gone(&s, olds, 2, 20000),
                      "the old processes %d and %d still run 20 s after SIGHUP", olds[0], olds[1]);
        mid = s.n;
        stream_for(&s, 1000);
        stream_check(&s, from, mid, olds, 2, "v2");
    }
    printf("rolling restart (SIGHUP): %d tasks in all, all at attempt 1\n", s.n);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 11. SIGTERM drain */

START_TEST(test_sigterm_drains_and_reaps) {
    th_daemon d;
    const char *ids[] = {"d1", "d2"};
    int procs[2], n = 0, all[4];
    start(&d, "w-drain", "concurrency = 2\ndrain_timeout_s = 20",
          PY_POOL("py") "processes = 2\nkill_grace_ms = 3000\n");
    wait_kids(&d, "python3", 2, procs);
    for (int i = 0; i < 2; i++)
        th_enqueue(C, "default", ids[i], "pid", "{\"sleep_ms\":1000}", NULL);
    for (int i = 0; i < 2; i++) th_expect_status(C, ids[i], "running", 10000);
    th_sleep_ms(300); /* the tasks are in the processes now */
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
    for (int i = 0; i < 2; i++) {
        th_assert_field(C, ids[i], "status", "succeeded");
        th_assert_field(C, ids[i], "attempt", "1");
        all[n++] = result_pid(ids[i]);
    }
    all[n++] = procs[0];
    all[n++] = procs[1];
    for (int i = 0; i < n; i++)
        ck_assert_msg(pid_gone(all[i]), "pool process %d is left after the daemon exited", all[i]);
}
END_TEST

/* ----------------------------------------------------------------- 12. Node */

START_TEST(test_node_pool) {
    th_daemon d;
    cJSON *res;
    start(&d, "w-node", "concurrency = 2", JS_POOL("js") "processes = 1\n");
    th_enqueue(C, "default", "j1", "jecho", "{\"hello\":\"node\"}", NULL);
    th_enqueue(C, "default", "j2", "jflaky", "{}", "max_attempts 3");
    th_enqueue(C, "default", "j3", "jperm", "{}", "max_attempts 3");
    th_expect_status(C, "j1", "succeeded", 20000);
    res = result_of("j1");
    ck_assert_str_eq(th_json_str(res, "sdk"), "node");
    ck_assert_str_eq(th_json_str(res, "pool"), "js");
    ck_assert_str_eq(th_json_str(res, "payload.hello"), "node");
    ck_assert_int_gt((int)th_json_num(res, "pid"), 1);
    cJSON_Delete(res);
    th_expect_status(C, "j2", "succeeded", 20000);
    th_assert_field(C, "j2", "attempt", "2");
    th_assert_field(C, "j2", "last_error_class", "retryable");
    assert_field_has("j2", "last_error", "mail server refused");
    assert_history("j2", 0, 1, "retryable");
    th_expect_status(C, "j3", "dead_lettered", 20000);
    th_assert_field(C, "j3", "attempt", "1");
    th_assert_field(C, "j3", "last_error_class", "permanent");
    assert_field_has("j3", "last_error", "no such user");
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 13. routing */

/* A type nobody serves is unknown_task_type as before; a [handler:X] wins over a pool
 * that announces X (builtin echo returns the payload, the pool's echo adds a pid). */
START_TEST(test_routing) {
    th_daemon d;
    redisReply *r;
    start(&d, "w-route", NULL, "[handler:echo]\nbuiltin = echo\n" PY_POOL("py"));
    th_enqueue(C, "default", "u1", "nobody_serves_this", "{}", "max_attempts 3");
    th_expect_status(C, "u1", "dead_lettered", 20000);
    th_assert_field(C, "u1", "attempt", "1");
    th_assert_field(C, "u1", "last_error_class", "unknown_task_type");
    th_assert_field(C, "u1", "last_error", "unknown_task_type:nobody_serves_this");

    th_enqueue(C, "default", "u2", "echo", "{\"n\":7}", NULL);
    th_expect_status(C, "u2", "succeeded", 20000);
    r = th_cmd(C, "GET dtq:result:u2");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, "{\"n\":7}");
    freeReplyObject(r);
    /* the pool still serves what it announced and no section names */
    th_enqueue(C, "default", "u3", "pid", "{}", NULL);
    th_expect_status(C, "u3", "succeeded", 20000);
    ck_assert_int_gt(result_pid("u3"), 1);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- cancel, rate limit */

/* An admin's cancel of a running task: it ends cancelled at once; the process, deaf to the
 * cancel, is killed kill_grace_ms later and replaced. */
START_TEST(test_cancel_running) {
    th_daemon d;
    int victim, kids1[1];
    char *out;
    start(&d, "w-cancel", NULL, PY_POOL("py") "processes = 1\nkill_grace_ms = 500\n");
    wait_kids(&d, "python3", 1, kids1);
    victim = kids1[0];
    th_enqueue(C, "default", "x1", "deaf", "{\"sleep_s\":60}", "max_attempts 3");
    th_expect_status(C, "x1", "running", 20000);
    th_sleep_ms(300); /* in the process by now */
    ck_assert_int_eq(th_ctl(&R, &out, "cancel x1"), 0);
    free(out);
    th_expect_status(C, "x1", "cancelled", 10000);
    th_assert_field(C, "x1", "attempt", "1");
    ck_assert_msg(th_wait_until(pid_gone_pred, &victim, 10000),
                  "process %d, deaf to the cancel, still runs", victim);
    th_enqueue(C, "default", "x2", "pid", "{}", NULL);
    th_expect_status(C, "x2", "succeeded", 20000);
    ck_assert_int_ne(result_pid("x2"), victim);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* 250 lines at once: at most 100 reach the log, then one line says how many were dropped:
 * once the 10 s window is over, or at the latest when the process stops. */
START_TEST(test_output_rate_limit) {
    th_daemon d;
    char want[160];
    int pid, logged, rc;
    start(&d, "w-spam", NULL, PY_POOL("py") "processes = 1\n");
    th_enqueue(C, "default", "o1", "spam", "{\"lines\":250}", NULL);
    th_expect_status(C, "o1", "succeeded", 20000);
    pid = result_pid("o1");
    th_wait_log(d.log, "spam-line 249", 1, 1000); /* (dropped: never comes) */
    logged = th_count_in_file(d.log, "spam-line ");
    printf("rate limit: %d of 250 lines logged\n", logged);
    ck_assert_int_le(logged, 100);
    ck_assert_int_ge(logged, 50);
    snprintf(want, sizeof(want), "pool py[pid %d]: %d line(s) of output dropped (rate limit)", pid,
             250 - logged);
    if (!th_wait_log(d.log, want, 1, 12000)) {
        rc = th_daemon_stop(&d, SIGTERM, 15000);
        ck_assert_msg(th_count_in_file(d.log, want) == 1,
                      "no \"%s\" in the log, 12 s after the output nor after the stop", want);
        ck_assert_int_eq(rc, 0);
        return;
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- 14. chaos */

#define CHAOS_TASKS 300

/* 300 tasks on two processes while a random process is SIGKILLed every ~300 ms (for at
 * most 15 s, whenever one runs): every task succeeds, none is lost, no attempt is recorded
 * twice, and each failed attempt is recorded once. */
START_TEST(test_chaos_kills) {
    th_daemon d;
    char id[16], payload[64];
    int kills = 0, done = 0, retried = 0, max_attempt = 1;
    int64_t kill_end, end;
    srand(1);
    start(&d, "w-chaos", "concurrency = 4", PY_POOL("py") "processes = 2\nkill_grace_ms = 1000\n");
    /* both processes ready (their hello) before the first kill */
    ck_assert(th_wait_until_cmd_str(C, "HGET dtq:worker:w-chaos pools", "py:2/2", 20000));
    for (int i = 0; i < CHAOS_TASKS; i++) {
        snprintf(id, sizeof(id), "c%03d", i);
        snprintf(payload, sizeof(payload), "{\"sleep_ms\":%d}", 10 + rand() % 40);
        th_enqueue(C, "default", id, "pid", payload, "max_attempts 25");
    }
    kill_end = th_now_ms() + 15000;
    end = th_now_ms() + 100000;
    while (th_now_ms() < end) {
        int pids[16], n;
        done = 0;
        for (int i = 0; i < CHAOS_TASKS; i++) {
            redisReply *r = th_cmd(C, "HGET dtq:task:c%03d status", i);
            done += r->type == REDIS_REPLY_STRING && !strcmp(r->str, "succeeded");
            freeReplyObject(r);
        }
        if (done == CHAOS_TASKS) break;
        if (th_now_ms() < kill_end && (n = children_of(d.pid, "python3", pids, 16)) > 0) {
            if (kill(pids[rand() % (n < 16 ? n : 16)], SIGKILL) == 0) kills++;
        }
        th_sleep_ms(250 + rand() % 100);
    }
    printf("chaos: %d kills, %d of %d tasks succeeded\n", kills, done, CHAOS_TASKS);
    fflush(stdout);
    /* fewer than one per 300 ms: the pool backs off after failures in a row, and no process
     * is there to kill meanwhile */
    ck_assert_int_ge(kills, 5);
    for (int i = 0; i < CHAOS_TASKS; i++) {
        cJSON *h, *rec;
        int seen[64] = {0};
        char *att;
        snprintf(id, sizeof(id), "c%03d", i);
        th_expect_status(C, id, "succeeded", 1000);
        h = history_of(id);
        cJSON_ArrayForEach(rec, h) {
            int a = (int)th_json_num(rec, "attempt");
            ck_assert_msg(a >= 1 && a < 64, "task %s: attempt %d in its history", id, a);
            ck_assert_msg(!seen[a], "task %s: attempt %d twice in its history: %s", id, a,
                          cJSON_PrintUnformatted(h));
            seen[a] = 1;
            ck_assert_msg(!strcmp(th_json_str(rec, "class"), "handler_crashed") ||
                              !strcmp(th_json_str(rec, "class"), "timeout"),
                          "task %s: a failed attempt of class %s", id, th_json_str(rec, "class"));
        }
        att = th_task_field(C, id, "attempt");
        if (atoi(att) > 1) retried++;
        if (atoi(att) > max_attempt) max_attempt = atoi(att);
        ck_assert_msg(cJSON_GetArraySize(h) == atoi(att) - 1,
                      "task %s: attempt %s with %d failed attempt(s) recorded", id, att,
                      cJSON_GetArraySize(h));
        free(att);
        cJSON_Delete(h);
    }
    printf("chaos: %d tasks retried, the most attempts %d\n", retried, max_attempt);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pool"), *chaos = suite_create("pool_chaos");
    TCase *tc = tcase_create("basics");
    SRunner *sr;
    int failed;
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_announced_types_succeed);
    tcase_add_test(tc, test_error_classes);
    tcase_add_test(tc, test_node_pool);
    tcase_add_test(tc, test_routing);
    suite_add_tcase(s, tc);
    tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_timeout_kills_and_replaces);
    tcase_add_test(tc, test_sigkill_mid_task);
    tcase_add_test(tc, test_crash_loop_backs_off);
    suite_add_tcase(s, tc);
    tc = tcase_create("lifecycle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_max_tasks_recycles);
    tcase_add_test(tc, test_max_rss_recycles);
    tcase_add_test(tc, test_output_logged_and_attributed);
    tcase_add_test(tc, test_async_inflight);
    tcase_add_test(tc, test_rolling_restart);
    tcase_add_test(tc, test_sigterm_drains_and_reaps);
    tcase_add_test(tc, test_cancel_running);
    tcase_add_test(tc, test_output_rate_limit);
    suite_add_tcase(s, tc);
    tc = tcase_create("chaos");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_chaos_kills);
    suite_add_tcase(chaos, tc);
    sr = srunner_create(s);
    srunner_add_suite(sr, chaos);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
