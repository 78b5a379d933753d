/* it_web.c: dtq-web's JSON API against a real redis-server and a real dtq-worker that has
 * run tasks: the states it reports (queues, bands, workers, scheduler, rates from the
 * heartbeat's per-queue counters), a queue's waiting and running entries, a task with its
 * result and events, dead-letter paging and filtering, the writes with no token configured,
 * without a token, with a wrong one and with the right ones (audited as dtq-web), bad input
 * (unknown ids, huge pages, malformed JSON, wrong methods), the live event stream, the
 * periodic schedules (list, pause, resume, run now), and the command line. Refused calls
 * are checked to write nothing: with the daemon stopped, Redis's own count of changes
 * (rdb_changes_since_last_save) must not move. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"
#include "web_events.h"

#define TOKEN "it-web-token-0123456789abcdef-Zm9vYmFyYmF6cXV4"
#define ALICE "alice-token-fedcba9876543210-cXV1eGNvcmdlZ3JhdWx0"
#define WORKER "w-web"

static th_redis R;
static redisContext *C;
static th_daemon D, W; /* the worker, dtq-web */
static int PORT;

/* ----------------------------------------------------------------- plumbing */

static int tcp_connect(int port) {
    struct sockaddr_in sa = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct resp {
    int status;
    char *head; /* status line and headers */
    char *body;
    cJSON *json; /* the body parsed, when it is JSON */
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof(*r));
}

/* One request on its own connection (Connection: close); the whole answer within 10 s. */
static resp http(const char *method, const char *path, const char *auth, const char *body) {
    resp r = {0, NULL, NULL, NULL};
    int fd = tcp_connect(PORT);
    char *req, *buf = NULL, *sep;
    size_t len = 0, cap = 0;
    int64_t end = th_now_ms() + 10000;
    ck_assert_msg(fd >= 0, "cannot connect to dtq-web on port %d", PORT);
    if (asprintf(&req,
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s"
                 "Content-Length: %zu\r\n\r\n%s",
                 method, path, auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "",
                 body ? strlen(body) : 0, body ? body : "") < 0)
        abort();
    {
        /* a server that refuses a body (413) may close before it is all sent */
        size_t off = 0, total = strlen(req);
        while (off < total) {
            ssize_t n = send(fd, req + off, total - off, MSG_NOSIGNAL);
            if (n <= 0) break;
            off += (size_t)n;
        }
    }
    free(req);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        int64_t left = end - th_now_ms();
        ck_assert_msg(left > 0 && poll(&p, 1, (int)left) > 0, "%s %s: no answer in 10 s", method,
                      path);
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 131072;
            buf = realloc(buf, cap);
        }
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* EOF, or a reset after the answer */
        len += (size_t)n;
    }
    close(fd);
    ck_assert_msg(buf != NULL && len > 0, "%s %s: closed without an answer", method, path);
    buf[len] = '\0';
    sep = strstr(buf, "\r\n\r\n");
    ck_assert_msg(sep != NULL, "%s %s: no end of headers", method, path);
    r.head = strndup(buf, (size_t)(sep - buf));
    r.body = strdup(sep + 4);
    free(buf);
    ck_assert_int_eq(sscanf(r.head, "HTTP/1.%*d %d", &r.status), 1);
    r.json = cJSON_Parse(r.body);
    return r;
}

/* GET path, which must answer `status` with JSON; the parsed body (caller frees). */
static cJSON *get_json(const char *path, int status) {
    resp r = http("GET", path, NULL, NULL);
    cJSON *j;
    ck_assert_msg(r.status == status, "GET %s: want %d, got %d: %s", path, status, r.status,
                  r.body);
    ck_assert_msg(r.json != NULL, "GET %s: not JSON: %s", path, r.body);
    ck_assert_msg(strstr(r.head, "application/json") != NULL, "GET %s: %s", path, r.head);
    j = r.json;
    r.json = NULL;
    resp_free(&r);
    return j;
}

/* A 4xx/5xx answer: the status and the JSON error word. */
static void expect_error(const char *method, const char *path, const char *auth, const char *body,
                         int status, const char *error) {
    resp r = http(method, path, auth, body);
    const cJSON *e;
    ck_assert_msg(r.status == status, "%s %s: want %d, got %d: %s", method, path, status, r.status,
                  r.body);
    if (error) {
        ck_assert_msg(r.json != NULL, "%s %s: not JSON: %s", method, path, r.body);
        e = cJSON_GetObjectItem(r.json, "error");
        ck_assert_msg(cJSON_IsString(e) && !strcmp(e->valuestring, error),
                      "%s %s: want error %s: %s", method, path, error, r.body);
        ck_assert_msg(cJSON_IsString(cJSON_GetObjectItem(r.json, "message")), "%s", r.body);
    }
    resp_free(&r);
}

/* POST with a token; must answer 200 {"ok": true}; returns the body. */
static cJSON *post_ok(const char *path, const char *token, const char *body) {
    char auth[256];
    resp r;
    cJSON *j;
    snprintf(auth, sizeof(auth), "Bearer %s", token);
    r = http("POST", path, auth, body);
    ck_assert_msg(r.status == 200, "POST %s: want 200, got %d: %s", path, r.status, r.body);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "ok")));
    j = r.json;
    r.json = NULL;
    resp_free(&r);
    return j;
}

/* ----------------------------------------------------------------- the world */

#define WORKER_INI                                                                                 \
    "[worker]\nworker_id = " WORKER "\nqueues = default, mail\nconcurrency = 4\n"                  \
    "heartbeat_interval_s = 1\nvisibility_timeout_s = 5\ndrain_timeout_s = 2\n"                    \
    "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"                                      \
    "[limits]\nevents_stream_maxlen = 10000\n"                                                     \
    "[web]\nsample_interval_s = 1\n"                                                               \
    "[handler:echo]\nbuiltin = echo\n[handler:fail]\nbuiltin = fail\n"                             \
    "[handler:sleep]\nbuiltin = sleep\n"                                                           \
    "[handler:flaky]\nbuiltin = fail\nbase_delay = 3600\nmax_delay = 3600\n"

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
    memset(&W, 0, sizeof(W));
    memset(&D, 0, sizeof(D));
}

static void teardown(void) {
    if (W.pid > 0) ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);
    if (D.pid > 0) th_daemon_stop(&D, SIGTERM, 10000);
    th_fixture_stop(&R, &C);
}

static void start_worker(void) {
    th_daemon_start(&D, &R, WORKER_INI);
    th_daemon_wait_ready(C, WORKER, 10000);
}

/* Writes the token file (NULL: none) and starts dtq-web on a free port with the worker's
 * config; waits until it answers and has taken its first sample. */
static void start_web(const char *tokens) {
    char tokpath[400], log[400], port[16], listen[64];
    char *argv[12];
    int n = 0;
    PORT = th_free_port();
    snprintf(port, sizeof(port), "%d", PORT);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    th_path(&R, "web.log", log, sizeof(log));
    argv[n++] = (char *)DTQ_WEB_BIN;
    argv[n++] = (char *)"-c";
    argv[n++] = D.cfg;
    argv[n++] = (char *)"--listen";
    argv[n++] = listen;
    if (tokens) {
        FILE *f;
        th_path(&R, "web.token", tokpath, sizeof(tokpath));
        f = fopen(tokpath, "w");
        ck_assert(f != NULL);
        fputs(tokens, f);
        fclose(f);
        chmod(tokpath, 0600);
        argv[n++] = (char *)"--token-file";
        argv[n++] = tokpath;
    }
    argv[n] = NULL;
    th_process_start(&W, argv, log);
    for (int i = 0; i < 500; i++) {
        int fd = tcp_connect(PORT);
        if (fd >= 0) {
            close(fd);
            break;
        }
        th_sleep_ms(20);
    }
    for (int i = 0; i < 500; i++) { /* the baseline sample: outcomes after it count */
        cJSON *h = get_json("/api/history", 200);
        int n_samples = cJSON_GetArraySize(cJSON_GetObjectItem(h, "samples"));
        cJSON_Delete(h);
        if (n_samples > 0) return;
        th_sleep_ms(20);
    }
    ck_abort_msg("dtq-web took no sample; see %s", log);
}

/* Redis's count of writes since start (dirty): unchanged means nothing was written. */
static long long redis_changes(void) {
    redisReply *r = th_cmd(C, "INFO persistence");
    const char *p = strstr(r->str, "rdb_changes_since_last_save:");
    long long n;
    ck_assert(p != NULL);
    n = atoll(p + strlen("rdb_changes_since_last_save:"));
    freeReplyObject(r);
    return n;
}

/* Stops the worker and drops its hash (which would expire, a change), so that from here
 * on only dtq-web could write. */
static long long quiet(void) {
    ck_assert_int_eq(th_daemon_stop(&D, SIGTERM, 10000), 0);
    freeReplyObject(th_cmd(C, "DEL dtq:worker:%s", WORKER));
    return redis_changes();
}

/* The usual world: 3 tasks succeeded in "default", one dead-lettered in "mail", then
 * "mail" paused with 2 tasks waiting at p7, and one delayed task scheduled. */
static void run_tasks(void) {
    th_enqueue(C, "default", "ok1", "echo", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "ok2", "echo", "{\"n\":2}", NULL);
    th_enqueue(C, "default", "ok3", "echo", "[3]", NULL);
    th_enqueue(C, "mail", "bad1", "fail", "{\"retryable\":false,\"message\":\"card declined\"}",
               NULL);
    th_expect_status(C, "ok1", "succeeded", 10000);
    th_expect_status(C, "ok2", "succeeded", 10000);
    th_expect_status(C, "ok3", "succeeded", 10000);
    th_expect_status(C, "bad1", "dead_lettered", 10000);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 mail"));
    th_enqueue(C, "mail", "m1", "echo", "{}", "priority 7");
    th_enqueue(C, "mail", "m2", "echo", "{}", "priority 7");
    th_enqueue(C, "default", "later", "echo", "{}", "delay_ms 600000");
}

/* ----------------------------------------------------------------- reads */

START_TEST(test_overview_states_and_rates) {
    cJSON *o, *info;
    const cJSON *q, *wk;
    int ok = 0;
    start_worker();
    start_web(NULL);
    info = get_json("/api/info", 200);
    ck_assert_str_eq(th_json_str(info, "namespace"), "dtq");
    ck_assert(cJSON_IsFalse(th_json_at(info, "writable")));
    ck_assert(cJSON_IsTrue(th_json_at(info, "redis_connected")));
    cJSON_Delete(info);
    run_tasks();
    /* the daemon's heartbeat carries per-queue counters (nothing is written per task) */
    ck_assert(
        th_wait_until_cmd_str(C, "HGET dtq:worker:" WORKER " q:default:succeeded", "3", 5000));
    ck_assert(th_wait_until_cmd_str(C, "HGET dtq:worker:" WORKER " q:mail:failed", "1", 5000));
    ck_assert(th_wait_until_cmd_str(C, "HGET dtq:worker:" WORKER " q:mail:retried", "0", 5000));
    /* rates: the sampler sees the counters move within a few samples */
    for (int i = 0; i < 250 && !ok; i++) {
        o = get_json("/api/overview", 200);
        q = th_overview_queue(o, "default");
        ok = th_json_num(q, "totals.succeeded") == 3 && cJSON_IsObject(th_json_at(q, "rates.1m")) &&
             th_json_num(q, "rates.1m.succeeded") > 0 &&
             th_json_num(th_overview_queue(o, "mail"), "totals.failed") == 1;
        if (!ok) {
            cJSON_Delete(o);
            th_sleep_ms(40);
        }
    }
    ck_assert_msg(ok, "the per-queue rates never showed the 3 successes and 1 failure");
    ck_assert(th_json_num(o, "rates.1m.succeeded") > 0);
    ck_assert(th_json_num(o, "totals.failed") == 1);
    /* queues: paused, depth per band */
    q = th_overview_queue(o, "mail");
    ck_assert(cJSON_IsTrue(th_json_at(q, "paused")));
    ck_assert_int_eq((int)th_json_num(q, "depth"), 2);
    ck_assert_int_eq((int)th_json_num(q, "depth_by_band.7"), 2);
    ck_assert_int_eq((int)th_json_num(q, "depth_by_band.5"), 0);
    ck_assert_int_eq((int)th_json_num(q, "pending"), 0);
    q = th_overview_queue(o, "default");
    ck_assert(cJSON_IsFalse(th_json_at(q, "paused")));
    ck_assert_int_eq((int)th_json_num(q, "depth"), 0);
    ck_assert_str_eq(th_json_str(q, "mode"), "full");
    { /* a lean queue says so (reference 4.3) */
        cJSON *o2;
        freeReplyObject(th_cmd(C, "SET dtq:queue:mail:mode lean"));
        o2 = get_json("/api/overview", 200);
        ck_assert_str_eq(th_json_str(th_overview_queue(o2, "mail"), "mode"), "lean");
        cJSON_Delete(o2);
        o2 = get_json("/api/queues/mail", 200);
        ck_assert_str_eq(th_json_str(o2, "mode"), "lean");
        cJSON_Delete(o2);
        freeReplyObject(th_cmd(C, "DEL dtq:queue:mail:mode"));
    }
    /* scheduler, schedule, dead letters, events */
    ck_assert_str_eq(th_json_str(o, "scheduler.leader"), WORKER);
    ck_assert_int_eq((int)th_json_num(o, "scheduler.scheduled"), 1);
    ck_assert_int_eq((int)th_json_num(o, "dlq.length"), 1);
    ck_assert(cJSON_IsTrue(th_json_at(o, "events.stream")));
    /* workers: heartbeat age, concurrency, running tasks, per-queue counters */
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "workers")), 1);
    wk = th_json_at(o, "workers.0");
    ck_assert_str_eq(th_json_str(wk, "id"), WORKER);
    ck_assert_str_eq(th_json_str(wk, "status"), "running");
    ck_assert_int_eq((int)th_json_num(wk, "concurrency"), 4);
    ck_assert_int_eq((int)th_json_num(wk, "active_tasks"), 0);
    ck_assert(th_json_num(wk, "heartbeat_age_ms") >= 0 &&
              th_json_num(wk, "heartbeat_age_ms") < 5000);
    ck_assert_int_eq((int)th_json_num(wk, "queues.default.succeeded"), 3);
    ck_assert_int_eq((int)th_json_num(wk, "queues.mail.failed"), 1);
    cJSON_Delete(o);
    /* the history behind the plots */
    o = get_json("/api/history?queue=default", 200);
    ck_assert(cJSON_GetArraySize(th_json_at(o, "samples")) >= 2);
    ck_assert_int_eq((int)th_json_num(o, "interval_s"), 1);
    cJSON_Delete(o);
    expect_error("GET", "/api/history?queue=no%20spaces", NULL, NULL, 400, "bad_request");
}
END_TEST

START_TEST(test_queue_view) {
    cJSON *o;
    redisReply *r;
    char raw_id[128];
    start_worker();
    start_web(NULL);
    run_tasks();
    r = th_cmd(C, "XADD dtq:stream:mail:p2 * task_type echo payload [1]");
    snprintf(raw_id, sizeof(raw_id), "mail:p2:%s", r->str);
    freeReplyObject(r);
    /* waiting: p7 first, then the producer's raw entry at p2, oldest first in a band */
    o = get_json("/api/queues/mail?count=5", 200);
    ck_assert(cJSON_IsTrue(th_json_at(o, "paused")));
    ck_assert_int_eq((int)th_json_num(o, "depth"), 3);
    ck_assert_int_eq((int)th_json_num(o, "bands.2.band"), 7); /* bands: p9 first */
    ck_assert_int_eq((int)th_json_num(o, "bands.2.depth"), 2);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "waiting")), 3);
    ck_assert_str_eq(th_json_str(o, "waiting.0.task_id"), "m1");
    ck_assert_str_eq(th_json_str(o, "waiting.0.status"), "queued");
    ck_assert_str_eq(th_json_str(o, "waiting.0.task_type"), "echo");
    ck_assert_str_eq(th_json_str(o, "waiting.1.task_id"), "m2");
    ck_assert_str_eq(th_json_str(o, "waiting.2.task_id"), raw_id);
    ck_assert(cJSON_IsTrue(th_json_at(o, "waiting.2.raw")));
    cJSON_Delete(o);
    o = get_json("/api/queues/mail?count=1", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "waiting")), 1);
    cJSON_Delete(o);
    /* running: a task in its handler shows its worker */
    th_enqueue(C, "default", "slow", "sleep", "{\"ms\":4000}", NULL);
    th_expect_status(C, "slow", "running", 10000);
    o = get_json("/api/queues/default", 200);
    ck_assert_int_eq((int)th_json_num(o, "pending"), 1);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "running")), 1);
    ck_assert_str_eq(th_json_str(o, "running.0.task_id"), "slow");
    ck_assert_str_eq(th_json_str(o, "running.0.worker_id"), WORKER);
    ck_assert_str_eq(th_json_str(o, "running.0.status"), "running");
    cJSON_Delete(o);
    /* bad input */
    expect_error("GET", "/api/queues/nosuch", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/queues/bad%20name", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/queues/mail?count=201", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/queues/mail?count=0", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/queues/mail?count=ten", NULL, NULL, 400, "bad_request");
}
END_TEST

START_TEST(test_task_view) {
    cJSON *o;
    const cJSON *ev;
    const char *want[] = {"TASK_QUEUED", "TASK_STARTED", "TASK_SUCCEEDED"};
    start_worker();
    start_web(NULL);
    run_tasks();
    o = get_json("/api/tasks/ok1", 200);
    ck_assert_str_eq(th_json_str(o, "id"), "ok1");
    ck_assert_str_eq(th_json_str(o, "status"), "succeeded");
    ck_assert_str_eq(th_json_str(o, "fields.queue"), "default");
    ck_assert_str_eq(th_json_str(o, "fields.worker_id"), WORKER);
    ck_assert_str_eq(th_json_str(o, "fields.payload"), "{\"n\":1}");
    ck_assert_int_eq((int)th_json_num(o, "result.n"), 1); /* the result, parsed */
    ck_assert(cJSON_IsTrue(th_json_at(o, "result_is_json")));
    ck_assert(th_json_num(o, "ttl_ms") > 0);
    ck_assert(cJSON_IsNull(th_json_at(o, "dead_letter")));
    ck_assert(cJSON_IsTrue(th_json_at(o, "events_stream")));
    ck_assert(cJSON_IsTrue(th_json_at(o, "events_complete")));
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "events")), 3);
    for (int i = 0; i < 3; i++) {
        ev = cJSON_GetArrayItem(th_json_at(o, "events"), i);
        ck_assert_str_eq(th_json_str(ev, "type"), want[i]);
        ck_assert_str_eq(th_json_str(ev, "task_id"), "ok1");
    }
    cJSON_Delete(o);
    o = get_json("/api/tasks/bad1", 200);
    ck_assert_str_eq(th_json_str(o, "status"), "dead_lettered");
    ck_assert_str_eq(th_json_str(o, "fields.last_error"), "card declined");
    ck_assert_str_eq(th_json_str(o, "dead_letter.task_id"), "bad1");
    ck_assert_str_eq(th_json_str(o, "dead_letter.last_error_class"), "permanent");
    ck_assert(cJSON_IsNull(th_json_at(o, "result")));
    cJSON_Delete(o);
    expect_error("GET", "/api/tasks/nosuch", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/tasks/bad%2Fid", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/tasks/a%00b", NULL, NULL, 400, "bad_request");
    /* a key of another type is no task */
    freeReplyObject(th_cmd(C, "SET dtq:task:strange 1"));
    expect_error("GET", "/api/tasks/strange", NULL, NULL, 404, "not_found");
}
END_TEST

START_TEST(test_dlq_paging_and_filter) {
    cJSON *o;
    char ids[8][16], path[256], cursor[64] = "";
    int seen = 0;
    redisReply *r;
    start_worker();
    start_web(NULL);
    /* five dead letters: three permanent, two unknown_task_type, in this order */
    for (int i = 0; i < 5; i++) {
        snprintf(ids[i], sizeof(ids[i]), "d%d", i);
        th_enqueue(C, "default", ids[i], i % 2 ? "nohandler" : "fail", "{\"retryable\":false}",
                   NULL);
        th_expect_status(C, ids[i], "dead_lettered", 10000);
    }
    /* newest first, two per page, following next_cursor to the end */
    for (int page = 0; page < 4; page++) {
        const cJSON *e;
        snprintf(path, sizeof(path), "/api/dlq?count=2%s%s", *cursor ? "&cursor=" : "", cursor);
        o = get_json(path, 200);
        ck_assert_int_eq((int)th_json_num(o, "total"), 5);
        cJSON_ArrayForEach(e, th_json_at(o, "entries")) {
            ck_assert_str_eq(th_json_str(e, "task_id"), ids[4 - seen]);
            seen++;
        }
        if (cJSON_IsNull(th_json_at(o, "next_cursor"))) {
            cJSON_Delete(o);
            break;
        }
        ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), 2);
        snprintf(cursor, sizeof(cursor), "%s", th_json_str(o, "next_cursor"));
        cJSON_Delete(o);
    }
    ck_assert_int_eq(seen, 5);
    /* oldest first is the stream's order */
    o = get_json("/api/dlq?order=oldest&count=500", 200);
    r = th_cmd(C, "XRANGE dtq:stream:dead-letter - +");
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), (int)r->elements);
    for (size_t i = 0; i < r->elements; i++) {
        char p[64];
        snprintf(p, sizeof(p), "entries.%zu.entry_id", i);
        ck_assert_str_eq(th_json_str(o, p), r->element[i]->element[0]->str);
    }
    freeReplyObject(r);
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    cJSON_Delete(o);
    /* a class filter, paged too */
    o = get_json("/api/dlq?class=unknown_task_type&count=1", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "d3");
    ck_assert_str_eq(th_json_str(o, "entries.0.last_error_class"), "unknown_task_type");
    snprintf(path, sizeof(path), "/api/dlq?class=unknown_task_type&count=1&cursor=%s",
             th_json_str(o, "next_cursor"));
    cJSON_Delete(o);
    o = get_json(path, 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "d1");
    cJSON_Delete(o);
    o = get_json("/api/dlq?class=timeout", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), 0);
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    cJSON_Delete(o);
    /* page sizes over the cap are refused (400), not clamped */
    expect_error("GET", "/api/dlq?count=501", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/dlq?count=1000000000000", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/dlq?count=0", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/dlq?count=-1", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/dlq?cursor=yesterday", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/dlq?order=sideways", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/dlq?class=a%20b", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/audit?count=501", NULL, NULL, 400, "bad_request");
    o = get_json("/api/dlq?count=500", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), 5);
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- writes */

static const char *const WRITES[][2] = {
    {"/api/tasks/bad1/requeue", NULL},
    {"/api/tasks/bad1/discard", NULL},
    {"/api/tasks/m1/cancel", NULL},
    {"/api/queues/mail/resume", NULL},
    {"/api/queues/default/pause", NULL},
    {"/api/dlq/purge", NULL},
    {"/api/dlq/requeue-all", "{\"class\":\"permanent\"}"},
    {"/api/dlq/requeue-all", NULL},
    {"/api/cron/nightly/pause", NULL},
    {"/api/cron/nightly/resume", NULL},
    {"/api/cron/nightly/run", NULL},
    {"/api/limits/default/remove", NULL},
    {"/api/limits/default/remove", "{\"task_type\":\"echo\"}"},
};
#define NWRITES (sizeof(WRITES) / sizeof(WRITES[0]))

START_TEST(test_writes_refused_when_read_only) {
    long long before;
    cJSON *info;
    start_worker();
    start_web(NULL);
    run_tasks();
    before = quiet();
    info = get_json("/api/info", 200);
    ck_assert(cJSON_IsFalse(th_json_at(info, "writable")));
    cJSON_Delete(info);
    for (size_t i = 0; i < NWRITES; i++) {
        expect_error("POST", WRITES[i][0], NULL, WRITES[i][1], 403, "read_only");
        expect_error("POST", WRITES[i][0], "Bearer " TOKEN, WRITES[i][1], 403, "read_only");
    }
    ck_assert_int_eq(redis_changes(), before);
    th_assert_field(C, "bad1", "status", "dead_lettered");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:mail:paused")), 1);
}
END_TEST

START_TEST(test_writes_refused_without_the_token) {
    long long before;
    start_worker();
    start_web(TOKEN "\nalice " ALICE "\n");
    run_tasks();
    before = quiet();
    for (size_t i = 0; i < NWRITES; i++) {
        resp r = http("POST", WRITES[i][0], NULL, WRITES[i][1]);
        ck_assert_msg(r.status == 401, "%s: %d %s", WRITES[i][0], r.status, r.body);
        ck_assert(strstr(r.head, "WWW-Authenticate: Bearer") != NULL);
        resp_free(&r);
        expect_error("POST", WRITES[i][0], "Bearer wrong-token-0123456789", WRITES[i][1], 401,
                     "unauthorized");
        expect_error("POST", WRITES[i][0], "Bearer " TOKEN "x", WRITES[i][1], 401, "unauthorized");
        expect_error("POST", WRITES[i][0], "Basic " TOKEN, WRITES[i][1], 401, "unauthorized");
        expect_error("POST", WRITES[i][0], "Bearer alice " ALICE, WRITES[i][1], 401,
                     "unauthorized");
    }
    /* a right token with a bad request writes nothing either */
    expect_error("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, "{oops", 400, "bad_request");
    expect_error("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, "[1]", 400, "bad_request");
    expect_error("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, "{\"force\":true}", 400,
                 "bad_request");
    expect_error("POST", "/api/tasks/nosuch/requeue", "Bearer " TOKEN, NULL, 404, "not_found");
    expect_error("POST", "/api/tasks/ok1/requeue", "Bearer " TOKEN, NULL, 409, "wrong_state");
    expect_error("POST", "/api/tasks/ok1/cancel", "Bearer " TOKEN, NULL, 409, "wrong_state");
    expect_error("POST", "/api/tasks/m1/discard", "Bearer " TOKEN, NULL, 409, "wrong_state");
    expect_error("POST", "/api/queues/nosuch/pause", "Bearer " TOKEN, NULL, 404, "not_found");
    expect_error("POST", "/api/dlq/requeue-all", "Bearer " TOKEN, "{\"class\":7}", 400,
                 "bad_request");
    ck_assert_int_eq(redis_changes(), before);
    th_assert_field(C, "bad1", "status", "dead_lettered");
    th_assert_field(C, "m1", "status", "queued");
}
END_TEST

/* The last audit entry's actor, action and task id, "actor action task". */
static char *last_audit(void) {
    redisReply *r = th_cmd(C, "XREVRANGE dtq:stream:audit + - COUNT 1");
    char *out;
    const redisReply *f;
    ck_assert_int_eq((int)r->elements, 1);
    f = r->element[0]->element[1];
    ck_assert_int_ge((int)f->elements, 10); /* actor action task_id queue ts [removed] */
    if (asprintf(&out, "%s %s %s", f->element[1]->str, f->element[3]->str, f->element[5]->str) < 0)
        abort();
    freeReplyObject(r);
    return out;
}

static void assert_last_audit(const char *want) {
    char *got = last_audit();
    ck_assert_str_eq(got, want);
    free(got);
}

START_TEST(test_writes_with_the_token) {
    cJSON *o;
    start_worker();
    start_web(TOKEN "\nalice " ALICE "\n");
    run_tasks();
    /* requeue: the dead letter goes back to queued (its queue is paused: it stays there) */
    o = post_ok("/api/tasks/bad1/requeue", TOKEN, NULL);
    ck_assert_str_eq(th_json_str(o, "result"), "queued");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web");
    cJSON_Delete(o);
    th_assert_field(C, "bad1", "status", "queued");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    assert_last_audit("dtq-web requeue bad1");
    /* cancel a queued task, with the named token and an empty JSON body */
    o = post_ok("/api/tasks/m1/cancel", ALICE, "{}");
    ck_assert_str_eq(th_json_str(o, "result"), "cancelled");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web:alice");
    cJSON_Delete(o);
    th_assert_field(C, "m1", "status", "cancelled");
    assert_last_audit("dtq-web:alice cancel m1");
    /* pause and resume */
    o = post_ok("/api/queues/default/pause", TOKEN, NULL);
    ck_assert_str_eq(th_json_str(o, "result"), "paused");
    cJSON_Delete(o);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:default:paused")), 1);
    assert_last_audit("dtq-web pause ");
    cJSON_Delete(post_ok("/api/queues/default/resume", TOKEN, NULL));
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:default:paused")), 0);
    /* new dead letters of two classes (the queue "default" runs), then requeue by class */
    th_enqueue(C, "default", "p1", "fail", "{\"retryable\":false}", "max_attempts 1");
    th_enqueue(C, "default", "u1", "nohandler", "{}", NULL);
    th_enqueue(C, "default", "u2", "nohandler", "{}", NULL);
    th_expect_status(C, "p1", "dead_lettered", 10000);
    th_expect_status(C, "u1", "dead_lettered", 10000);
    th_expect_status(C, "u2", "dead_lettered", 10000);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 default"));
    o = post_ok("/api/dlq/requeue-all", TOKEN, "{\"class\":\"unknown_task_type\"}");
    ck_assert_int_eq((int)th_json_num(o, "requeued"), 2);
    cJSON_Delete(o);
    th_assert_field(C, "u1", "status", "queued");
    th_assert_field(C, "u2", "status", "queued");
    th_assert_field(C, "p1", "status", "dead_lettered");
    /* discard the last one, then requeue-all finds nothing; purge an empty stream */
    o = post_ok("/api/tasks/p1/discard", TOKEN, NULL);
    ck_assert_str_eq(th_json_str(o, "result"), "discarded");
    cJSON_Delete(o);
    assert_last_audit("dtq-web discard p1");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    o = post_ok("/api/dlq/requeue-all", TOKEN, NULL);
    ck_assert_int_eq((int)th_json_num(o, "requeued"), 0);
    cJSON_Delete(o);
    /* requeue-all without a class: every dead letter there is (u1 and u2 fail again) */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 default"));
    th_enqueue(C, "default", "p2", "fail", "{\"retryable\":false}", NULL);
    th_expect_status(C, "p2", "dead_lettered", 10000);
    th_expect_status(C, "u1", "dead_lettered", 10000);
    th_expect_status(C, "u2", "dead_lettered", 10000);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 default"));
    o = post_ok("/api/dlq/requeue-all", TOKEN, "{\"class\":null}");
    ck_assert_int_eq((int)th_json_num(o, "requeued"), 3);
    cJSON_Delete(o);
    th_assert_field(C, "p2", "status", "queued");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    /* purge, once they are dead letters again */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 default"));
    th_expect_status(C, "p2", "dead_lettered", 10000);
    o = post_ok("/api/dlq/purge", TOKEN, NULL);
    ck_assert(th_json_num(o, "result") >= 1);
    cJSON_Delete(o);
    assert_last_audit("dtq-web purge_dlq ");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    /* the audit, through the API */
    o = get_json("/api/audit?count=3", 200);
    ck_assert_str_eq(th_json_str(o, "entries.0.actor"), "dtq-web");
    ck_assert_str_eq(th_json_str(o, "entries.0.action"), "purge_dlq");
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- protocol */

START_TEST(test_bad_input_and_methods) {
    long long before;
    resp r;
    char *big;
    start_worker();
    start_web(TOKEN "\n");
    run_tasks();
    before = quiet();
    /* wrong methods: 405 with Allow */
    r = http("GET", "/api/tasks/bad1/requeue", NULL, NULL);
    ck_assert_int_eq(r.status, 405);
    ck_assert(strstr(r.head, "Allow: POST") != NULL);
    resp_free(&r);
    r = http("POST", "/api/overview", "Bearer " TOKEN, NULL);
    ck_assert_int_eq(r.status, 405);
    ck_assert(strstr(r.head, "Allow: GET, HEAD") != NULL);
    resp_free(&r);
    expect_error("DELETE", "/api/tasks/bad1", "Bearer " TOKEN, NULL, 405, "method_not_allowed");
    expect_error("PUT", "/api/queues/mail/pause", "Bearer " TOKEN, NULL, 405, "method_not_allowed");
    expect_error("PATCH", "/api/dlq", NULL, NULL, 405, "method_not_allowed");
    expect_error("OPTIONS", "/api/dlq/purge", NULL, NULL, 405, "method_not_allowed");
    expect_error("POST", "/", NULL, NULL, 405, "method_not_allowed");
    /* unknown paths */
    expect_error("GET", "/api/nope", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/tasks", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/tasks/", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/tasks/bad1/requeue/now", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/a/b/c/d/e/f/g/h", NULL, NULL, 404, "not_found");
    expect_error("GET", "/nope.html", NULL, NULL, 404, "not_found");
    expect_error("POST", "/api/tasks/bad1/explode", "Bearer " TOKEN, NULL, 404, "not_found");
    /* malformed bodies, and one over the 64 KiB cap */
    expect_error("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, "{\"a\":", 400, "bad_request");
    expect_error("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, "\"text\"", 400,
                 "bad_request");
    expect_error("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, "{} {}", 400, "bad_request");
    big = malloc(70001);
    memset(big, ' ', 70000);
    big[0] = '{';
    big[69999] = '}';
    big[70000] = '\0';
    r = http("POST", "/api/tasks/bad1/requeue", "Bearer " TOKEN, big);
    ck_assert_msg(r.status == 413, "a 70 KB body: %d", r.status);
    resp_free(&r);
    free(big);
    /* HEAD of a read: the headers only */
    r = http("HEAD", "/api/overview", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "");
    resp_free(&r);
    /* the page and its files; GET never wrote anything */
    r = http("GET", "/", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert(strstr(r.head, "text/html") && strstr(r.head, "Content-Security-Policy"));
    ck_assert(strstr(r.body, "app.js") != NULL);
    resp_free(&r);
    r = http("GET", "/app.js", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert(strstr(r.head, "text/javascript") != NULL);
    resp_free(&r);
    ck_assert_int_eq(redis_changes(), before);
    th_assert_field(C, "bad1", "status", "dead_lettered");
}
END_TEST

/* Reads until one "data:" line holds both a and b; 1 when it came within timeout_ms. */
static int read_event(int fd, const char *a, const char *b, int timeout_ms, char *buf, size_t cap) {
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        for (const char *line = strstr(buf, "data: "); line; line = strstr(line + 1, "data: ")) {
            const char *eol = strchr(line, '\n');
            char *copy;
            int hit;
            if (!eol) break;
            copy = strndup(line, (size_t)(eol - line));
            hit = strstr(copy, a) && strstr(copy, b);
            free(copy);
            if (hit) return 1;
        }
        if (th_now_ms() >= end) return 0;
        {
            struct pollfd p = {fd, POLLIN, 0};
            size_t len = strlen(buf);
            ssize_t n;
            if (poll(&p, 1, 100) <= 0) continue;
            n = recv(fd, buf + len, cap - len - 1, 0);
            if (n <= 0) return 0;
            buf[len + (size_t)n] = '\0';
        }
    }
}

static long long subscribers(void) {
    redisReply *r = th_cmd(C, "PUBSUB NUMSUB dtq:events");
    long long n = r->element[1]->integer;
    freeReplyObject(r);
    return n;
}

static int no_subscriber(void *arg) {
    DTQ_UNUSED(arg);
    return subscribers() == 0;
}

static int one_subscriber(void *arg) {
    DTQ_UNUSED(arg);
    return subscribers() == 1;
}

START_TEST(test_event_stream) {
    char *buf = calloc(1, 65536);
    const char *req = "GET /api/events?backlog=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    int fd;
    start_worker();
    start_web(NULL);
    run_tasks();
    ck_assert_int_eq(subscribers(), 0); /* nobody watches: no subscription */
    fd = tcp_connect(PORT);
    ck_assert(fd >= 0);
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    ck_assert(th_read_until(fd, "\r\n\r\n", 5000, buf, 65536));
    ck_assert(strstr(buf, "200") && strstr(buf, "text/event-stream"));
    /* the backlog: the newest two events of the stream (m1 and m2 queued), oldest first */
    ck_assert(read_event(fd, "\"task_id\":\"m2\"", "TASK_QUEUED", 5000, buf, 65536));
    ck_assert(strstr(buf, "\"task_id\":\"m1\"") < strstr(buf, "\"task_id\":\"m2\""));
    ck_assert(th_wait_until(one_subscriber, NULL, 5000));
    /* live: a new task's events arrive as they happen */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 mail"));
    th_enqueue(C, "default", "live1", "echo", "{}", NULL);
    ck_assert_msg(read_event(fd, "\"task_id\":\"live1\"", "\"TASK_SUCCEEDED\"", 10000, buf, 65536),
                  "no TASK_SUCCEEDED of live1 on the stream: %s", buf);
    ck_assert(read_event(fd, "\"task_id\":\"m1\"", "\"TASK_SUCCEEDED\"", 10000, buf, 65536));
    close(fd);
    /* the last stream closed: the subscription ends too */
    ck_assert(th_wait_until(no_subscriber, NULL, 5000));
    free(buf);
    expect_error("GET", "/api/events?backlog=501", NULL, NULL, 400, "bad_request");
}
END_TEST

/* ----------------------------------------------------------------- the command line */

/* Runs dtq-web with the arguments (NULL-terminated) and returns its exit code; its output
 * in out (caller frees). */
static int run_web(char **out, ...) {
    char path[] = "/tmp/dtq-test-web-XXXXXX";
    int fd = mkstemp(path), status, n = 1;
    char *args[16] = {(char *)"dtq-web"};
    const char *a;
    va_list ap;
    pid_t pid;
    ck_assert(fd >= 0);
    va_start(ap, out);
    while ((a = va_arg(ap, const char *)) != NULL && n < 15) args[n++] = (char *)a;
    va_end(ap);
    args[n] = NULL;
    pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execv(DTQ_WEB_BIN, args);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    {
        off_t size = lseek(fd, 0, SEEK_END);
        *out = calloc(1, (size_t)size + 1);
        if (pread(fd, *out, (size_t)size, 0) < 0) (*out)[0] = '\0';
    }
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(test_command_line) {
    char *out, tok[400], shortok[400], busy[64];
    FILE *f;
    int bfd, port = th_free_port();
    struct sockaddr_in sa = {0};
    th_path(&R, "ok.token", tok, sizeof(tok));
    th_path(&R, "short.token", shortok, sizeof(shortok));
    f = fopen(tok, "w");
    fputs(TOKEN "\n", f);
    fclose(f);
    f = fopen(shortok, "w");
    fputs("abc\n", f);
    fclose(f);
    ck_assert_int_eq(run_web(&out, "--help", NULL), 0);
    ck_assert(strstr(out, "usage: dtq-web") != NULL);
    free(out);
    ck_assert_int_eq(run_web(&out, "--version", NULL), 0);
    free(out);
    ck_assert_int_eq(run_web(&out, "--bogus", NULL), 2);
    free(out);
    ck_assert_int_eq(run_web(&out, "-u", "http://x", NULL), 78);
    ck_assert_msg(strstr(out, "config error") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run_web(&out, "-u", R.url, "-n", "a:b", NULL), 78);
    free(out);
    ck_assert_int_eq(run_web(&out, "-u", R.url, "--listen", "nowhere", NULL), 78);
    free(out);
    ck_assert_int_eq(run_web(&out, "-u", R.url, "--token-file", "/nonexistent", NULL), 78);
    ck_assert_msg(strstr(out, "token_file") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run_web(&out, "-u", R.url, "--token-file", shortok, NULL), 78);
    /* the file, the line, and how to make a good one */
    ck_assert_msg(strstr(out, shortok) != NULL &&
                      strstr(out, "line 1: the token is 3 characters") &&
                      strstr(out, "openssl rand -hex 32"),
                  "%s", out);
    free(out);
    /* an address in use */
    bfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(bfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(bfd, 1), 0);
    snprintf(busy, sizeof(busy), "127.0.0.1:%d", port);
    ck_assert_int_eq(run_web(&out, "-u", R.url, "--token-file", tok, "--listen", busy, NULL), 78);
    ck_assert_msg(strstr(out, "cannot listen") != NULL, "%s", out);
    free(out);
    close(bfd);
    /* -u and -n alone, and the environment, work without a file; SIGTERM stops it with 0 */
    {
        char listen[64], log[400];
        char *argv[] = {(char *)DTQ_WEB_BIN, (char *)"-u",       R.url,  (char *)"-n",
                        (char *)"other",     (char *)"--listen", listen, NULL};
        cJSON *info;
        PORT = th_free_port();
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
        th_path(&R, "web2.log", log, sizeof(log));
        th_process_start(&W, argv, log);
        for (int i = 0; i < 500 && tcp_connect(PORT) < 0; i++) th_sleep_ms(20);
        info = get_json("/api/info", 200);
        ck_assert_str_eq(th_json_str(info, "namespace"), "other");
        ck_assert_str_eq(th_json_str(info, "prefix"), "other");
        cJSON_Delete(info);
        ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);
    }
}
END_TEST

/* The unit: Type=notify (READY=1 comes once dtq-web listens), a dynamic non-root user
 * and the worker unit's hardening. */
START_TEST(test_systemd_unit_and_ready) {
    char *unit = th_read_file(DTQ_SOURCE_DIR "/systemd/dtq-web.service");
    const char *lines[] = {"Type=notify",
                           "ExecStart=/usr/bin/dtq-web -c /etc/dtq/worker.ini",
                           "ExecReload=/bin/kill -HUP $MAINPID",
                           "RestartPreventExitStatus=78",
                           "LimitNOFILE=8192",
                           "DynamicUser=yes",
                           "User=dtq-web",
                           "NoNewPrivileges=yes",
                           "ProtectSystem=strict",
                           "ProtectHome=yes",
                           "PrivateTmp=yes",
                           "PrivateDevices=yes",
                           "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                           "MemoryDenyWriteExecute=yes",
                           "CapabilityBoundingSet=",
                           "SystemCallFilter=@system-service"};
    char sock[400], got[1024] = "", listen[64], log[400];
    int fd;
    char *argv[] = {(char *)DTQ_WEB_BIN, (char *)"-u", R.url, (char *)"--listen", listen, NULL};
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char want[200];
        snprintf(want, sizeof(want), "\n%s\n", lines[i]);
        ck_assert_msg(strstr(unit, want) != NULL, "dtq-web.service lacks %s", lines[i]);
    }
    free(unit);
    fd = th_notify_socket(&R, sock, sizeof(sock), 10);
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    th_path(&R, "web3.log", log, sizeof(log));
    setenv("NOTIFY_SOCKET", sock, 1);
    th_process_start(&W, argv, log);
    unsetenv("NOTIFY_SOCKET");
    ck_assert_msg(recv(fd, got, sizeof(got) - 1, 0) > 0, "no notification from dtq-web");
    ck_assert_msg(strstr(got, "READY=1") != NULL, "%s", got);
    {
        int c = tcp_connect(PORT); /* it listens by the time it says so */
        ck_assert_int_ge(c, 0);
        close(c);
    }
    ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);
    close(fd);
}
END_TEST

/* ----------------------------------------------------------------- Host check, read tokens */

#define READTOK "it-web-read-token-0123456789-Z2FycGx5d2FsZG9mcmVk"
#define SECRET "{\"card\":\"4111-secret\"}"

/* One request with the given Host header line (NULL: none) and Authorization value (NULL:
 * none) on its own connection, as HTTP/1.1 unless http10; the whole answer. */
static resp raw(const char *method, const char *path, const char *host, const char *auth,
                int http10) {
    resp r = {0, NULL, NULL, NULL};
    int fd = tcp_connect(PORT);
    char *req, *buf = calloc(1, 262144), *sep;
    size_t len = 0;
    int64_t end = th_now_ms() + 10000;
    ck_assert_msg(fd >= 0, "cannot connect to dtq-web on port %d", PORT);
    if (asprintf(&req, "%s %s HTTP/1.%d\r\n%s%s%s%s%s%sConnection: close\r\n\r\n", method, path,
                 http10 ? 0 : 1, host ? "Host: " : "", host ? host : "", host ? "\r\n" : "",
                 auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "") < 0)
        abort();
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    free(req);
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        int64_t left = end - th_now_ms();
        ssize_t n;
        ck_assert_msg(left > 0 && poll(&pf, 1, (int)left) > 0, "%s %s (Host %s): no answer", method,
                      path, host ? host : "none");
        n = recv(fd, buf + len, 262144 - len - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    sep = strstr(buf, "\r\n\r\n");
    ck_assert_msg(sep != NULL, "%s %s (Host %s): no end of headers: %s", method, path,
                  host ? host : "none", buf);
    r.head = strndup(buf, (size_t)(sep - buf));
    r.body = strdup(sep + 4);
    free(buf);
    ck_assert_int_eq(sscanf(r.head, "HTTP/1.%*d %d", &r.status), 1);
    r.json = cJSON_Parse(r.body);
    return r;
}

/* GET path with Host host (and auth): the status must be want; for 421 and 401 the JSON
 * error word is checked and the secret payload must not be in the answer. */
static void get_with(const char *path, const char *host, const char *auth, int want) {
    resp r = raw("GET", path, host, auth, 0);
    ck_assert_msg(r.status == want, "GET %s, Host %s, auth %s: want %d, got %d: %s", path,
                  host ? host : "none", auth ? auth : "none", want, r.status, r.body);
    if (want == 421 || want == 401) {
        const cJSON *e = cJSON_GetObjectItem(r.json, "error");
        ck_assert_msg(
            cJSON_IsString(e) &&
                !strcmp(e->valuestring, want == 421 ? "misdirected_request" : "unauthorized"),
            "GET %s: %s", path, r.body);
        ck_assert(strstr(r.body, "4111-secret") == NULL);
    }
    if (want == 421) ck_assert_msg(strstr(r.head, " 421 Misdirected Request"), "%s", r.head);
    if (want == 401) ck_assert(strstr(r.head, "WWW-Authenticate: Bearer") != NULL);
    if (want == 200 && !strncmp(path, "/api/tasks/", 11))
        ck_assert_msg(strstr(r.body, "4111-secret") != NULL, "no payload: %s", r.body);
    resp_free(&r);
}

/* An event stream with Host host (and auth) must start with 200 text/event-stream. */
static void events_open(const char *host, const char *auth) {
    char req[512], *buf = calloc(1, 8192);
    int fd = tcp_connect(PORT);
    ck_assert(fd >= 0);
    snprintf(req, sizeof(req), "GET /api/events HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", host,
             auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    ck_assert_msg(th_read_until(fd, "\r\n\r\n", 5000, buf, 8192), "no answer: %s", buf);
    ck_assert_msg(!strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "text/event-stream"),
                  "Host %s: %s", host, buf);
    close(fd);
    free(buf);
}

/* Starts dtq-web on listen with a config of its own: [redis] url and the [web] lines
 * given; read_tokens and tokens (NULL: none) are written to files named in it. The log
 * goes to log (a file in the test's directory). Waits until it accepts connections on
 * 127.0.0.1:PORT (listen must cover it) and is connected to Redis. */
static void start_web_cfg(const char *listen, const char *web_lines, const char *read_tokens,
                          const char *tokens, const char *log_name, char *log, size_t loglen) {
    char ini[400], rtok[400], wtok[400];
    char *argv[] = {(char *)DTQ_WEB_BIN, (char *)"-c",   ini,
                    (char *)"--listen",  (char *)listen, NULL};
    FILE *f;
    th_path(&R, "rebind.ini", ini, sizeof(ini));
    th_path(&R, "rebind-read.token", rtok, sizeof(rtok));
    th_path(&R, "rebind-write.token", wtok, sizeof(wtok));
    th_path(&R, log_name, log, loglen);
    f = fopen(ini, "w");
    ck_assert(f != NULL);
    fprintf(f, "[redis]\nurl = %s\n[web]\n%s\n", R.url, web_lines ? web_lines : "");
    if (read_tokens) fprintf(f, "read_token_file = %s\n", rtok);
    if (tokens) fprintf(f, "token_file = %s\n", wtok);
    fclose(f);
    for (int i = 0; i < 2; i++) {
        const char *text = i ? tokens : read_tokens;
        if (!text) continue;
        f = fopen(i ? wtok : rtok, "w");
        ck_assert(f != NULL);
        fputs(text, f);
        fclose(f);
        chmod(i ? wtok : rtok, 0600);
    }
    th_process_start(&W, argv, log);
    for (int i = 0; i < 500; i++) {
        int fd = tcp_connect(PORT);
        if (fd >= 0) {
            close(fd);
            /* it listens before it connects: a read before that would answer 503 */
            ck_assert_msg(th_wait_log(log, "web: connected to redis", 1, 10000),
                          "dtq-web does not connect to Redis; see %s", log);
            return;
        }
        ck_assert_msg(kill(W.pid, 0) == 0 && waitpid(W.pid, NULL, WNOHANG) == 0,
                      "dtq-web exited; see %s", log);
        th_sleep_ms(20);
    }
    ck_abort_msg("dtq-web does not listen; see %s", log);
}

/* A queued task whose payload is the secret. */
static void secret_task(void) {
    th_load_library(C);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo %s task_id secret1", SECRET));
    th_assert_field(C, "secret1", "status", "queued");
}

/* DNS rebinding: a page of evil.example (a name resolving to 127.0.0.1) makes the browser
 * send Host: evil.example:PORT. Every route refuses it, the page and the event stream too;
 * the listen address and localhost are answered. */
START_TEST(test_host_check_refuses_foreign_names) {
    char listen[64], log[400], host[64], wrong[64];
    secret_task();
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    start_web_cfg(listen, NULL, NULL, NULL, "rebind1.log", log, sizeof(log));
    snprintf(host, sizeof(host), "evil.example:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 421);
    get_with("/api/tasks/secret1", "evil.example", NULL, 421);
    get_with("/api/overview", host, NULL, 421);
    get_with("/api/dlq", host, NULL, 421);
    get_with("/", host, NULL, 421);
    get_with("/app.js", host, NULL, 421);
    get_with("/api/events", host, NULL, 421);
    get_with("/api/events?backlog=5", "evil.example", NULL, 421);
    {
        resp r = raw("HEAD", "/api/tasks/secret1", host, NULL, 0);
        ck_assert_int_eq(r.status, 421);
        resp_free(&r);
        r = raw("POST", "/api/queues/default/pause", host, "Bearer " TOKEN, 0);
        ck_assert_int_eq(r.status, 421);
        resp_free(&r);
    }
    /* near misses: another loopback address, localhost on another port, a name that ends
     * like an allowed one, a request target in absolute form naming another host */
    snprintf(wrong, sizeof(wrong), "127.0.0.2:%d", PORT);
    get_with("/api/tasks/secret1", wrong, NULL, 421);
    snprintf(wrong, sizeof(wrong), "localhost:%d", PORT == 65535 ? 1 : PORT + 1);
    get_with("/api/tasks/secret1", wrong, NULL, 421);
    get_with("/api/tasks/secret1", "evil.localhost", NULL, 421);
    get_with("/api/tasks/secret1", "127.0.0.1.evil.example", NULL, 421);
    get_with("http://evil.example/api/tasks/secret1", "127.0.0.1", NULL, 421);
    get_with("/api/tasks/secret1", "", NULL, 421);
    /* HTTP/1.1 without Host is malformed; HTTP/1.0 without one (no browser sends that) is
     * answered */
    get_with("/api/tasks/secret1", NULL, NULL, 400);
    {
        resp r = raw("GET", "/api/tasks/secret1", NULL, NULL, 1);
        ck_assert_int_eq(r.status, 200);
        resp_free(&r);
    }
    /* the names of dtq-web itself, with the listen port or none */
    snprintf(host, sizeof(host), "127.0.0.1:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 200);
    get_with("/api/tasks/secret1", "127.0.0.1", NULL, 200);
    snprintf(host, sizeof(host), "localhost:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 200);
    get_with("/api/tasks/secret1", "LocalHost", NULL, 200);
    get_with("/", host, NULL, 200);
    events_open(host, NULL);
    ck_assert_int_eq(th_count_in_file(log, "not a loopback address"), 0);
}
END_TEST

/* [web] allowed_hosts: the names listed (any port, any case) are answered besides the
 * listen address and localhost; "*" turns the check off with a warning. */
START_TEST(test_allowed_hosts) {
    char listen[64], log[400], host[64];
    secret_task();
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    start_web_cfg(listen, "allowed_hosts = dash.example, [::1] 10.1.2.3", NULL, NULL, "rebind2.log",
                  log, sizeof(log));
    get_with("/api/tasks/secret1", "dash.example", NULL, 200);
    get_with("/api/tasks/secret1", "DASH.Example:443", NULL, 200);
    snprintf(host, sizeof(host), "[::1]:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 200);
    get_with("/api/tasks/secret1", "[0:0::1]", NULL, 200);
    get_with("/api/tasks/secret1", "10.1.2.3:8080", NULL, 200);
    get_with("/", "dash.example", NULL, 200);
    events_open("dash.example", NULL);
    get_with("/api/tasks/secret1", "www.dash.example", NULL, 421);
    get_with("/api/tasks/secret1", "dash.example.evil", NULL, 421);
    get_with("/api/tasks/secret1", "10.1.2.4", NULL, 421);
    snprintf(host, sizeof(host), "localhost:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 200);
    ck_assert_int_eq(th_count_in_file(log, "allowed_hosts = *"), 0);
    ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);

    start_web_cfg(listen, "allowed_hosts = *", NULL, NULL, "rebind3.log", log, sizeof(log));
    get_with("/api/tasks/secret1", "evil.example", NULL, 200);
    ck_assert_msg(th_wait_log(log, "allowed_hosts = *: the Host check is off", 1, 5000),
                  "no warning in %s", log);
    ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);

    /* a bad entry stops dtq-web before it listens: exit 78, the entry named */
    {
        char ini[400], *out;
        FILE *f;
        th_path(&R, "bad-hosts.ini", ini, sizeof(ini));
        f = fopen(ini, "w");
        ck_assert(f != NULL);
        fprintf(f, "[redis]\nurl = %s\n[web]\nallowed_hosts = ok.example dash.example:8080\n",
                R.url);
        fclose(f);
        ck_assert_int_eq(run_web(&out, "-c", ini, NULL), 78);
        ck_assert_msg(strstr(out, "[web] allowed_hosts: 'dash.example:8080'") != NULL, "%s", out);
        free(out);
    }
}
END_TEST

/* [web] read_token_file: every read of /api/ (the event stream too) needs a read token or a
 * write token; the page's files need none (the page asks for the token); a read token does
 * not write; SIGHUP reads the file again. */
START_TEST(test_read_token) {
    char listen[64], log[400], rtok[400];
    resp r;
    secret_task();
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    start_web_cfg(listen, NULL, "reader " READTOK "\n", TOKEN "\n", "rebind4.log", log,
                  sizeof(log));
    get_with("/api/tasks/secret1", "127.0.0.1", NULL, 401);
    get_with("/api/tasks/secret1", "127.0.0.1", "Bearer wrong-token-0123456789abc", 401);
    get_with("/api/tasks/secret1", "127.0.0.1", READTOK, 401); /* no scheme */
    get_with("/api/info", "127.0.0.1", NULL, 401);
    get_with("/api/overview", "127.0.0.1", NULL, 401);
    get_with("/api/dlq", "127.0.0.1", NULL, 401);
    get_with("/api/audit", "127.0.0.1", NULL, 401);
    get_with("/api/history", "127.0.0.1", NULL, 401);
    get_with("/api/queues/default", "127.0.0.1", NULL, 401);
    get_with("/api/events", "127.0.0.1", NULL, 401);
    r = raw("HEAD", "/api/tasks/secret1", "127.0.0.1", NULL, 0);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    get_with("/api/tasks/secret1", "127.0.0.1", "Bearer " READTOK, 200);
    get_with("/api/tasks/secret1", "127.0.0.1", "Bearer " TOKEN, 200);
    get_with("/api/overview", "127.0.0.1", "Bearer " READTOK, 200);
    events_open("127.0.0.1", "Bearer " READTOK);
    events_open("127.0.0.1", "Bearer " TOKEN);
    get_with("/", "127.0.0.1", NULL, 200);
    get_with("/app.js", "127.0.0.1", NULL, 200);
    /* the Host check comes first: a foreign name with a good token is still refused */
    get_with("/api/tasks/secret1", "evil.example", "Bearer " READTOK, 421);
    /* a read token does not write */
    r = raw("POST", "/api/queues/default/pause", "127.0.0.1", "Bearer " READTOK, 0);
    ck_assert_msg(r.status == 401, "%d %s", r.status, r.body);
    resp_free(&r);
    th_assert_field(C, "secret1", "status", "queued");
    {
        redisReply *p = th_cmd(C, "EXISTS dtq:queue:default:paused");
        ck_assert_int_eq(p->integer, 0);
        freeReplyObject(p);
    }
    /* SIGHUP: a new read token replaces the old one */
    {
        FILE *f;
        th_path(&R, "rebind-read.token", rtok, sizeof(rtok));
        f = fopen(rtok, "w");
        ck_assert(f != NULL);
        fputs("fresh-read-token-0123456789-cGx1Z2h4eXp6eXRob3Jw\n", f);
        fclose(f);
        kill(W.pid, SIGHUP);
        ck_assert_msg(th_wait_log(log, "1 read token(s) loaded", 1, 5000), "see %s", log);
        get_with("/api/tasks/secret1", "127.0.0.1", "Bearer " READTOK, 401);
        get_with("/api/tasks/secret1", "127.0.0.1",
                 "Bearer fresh-read-token-0123456789-cGx1Z2h4eXp6eXRob3Jw", 200);
        get_with("/api/tasks/secret1", "127.0.0.1", "Bearer " TOKEN, 200);
    }
    ck_assert_int_eq(th_count_in_file(log, "not a loopback address"), 0);
}
END_TEST

/* Listening on every address without read tokens logs a warning at start; with read
 * tokens it does not. Listening on every address, any IP address is a name of dtq-web. */
START_TEST(test_non_loopback_bind_warns) {
    char listen[64], log[400], host[64];
    secret_task();
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "0.0.0.0:%d", PORT);
    start_web_cfg(listen, NULL, NULL, NULL, "rebind5.log", log, sizeof(log));
    ck_assert_msg(th_wait_log(log, "is not a loopback address and reads need no token", 1, 5000),
                  "no warning in %s", log);
    snprintf(host, sizeof(host), "127.0.0.1:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 200);
    snprintf(host, sizeof(host), "192.0.2.7:%d", PORT);
    get_with("/api/tasks/secret1", host, NULL, 200);
    get_with("/api/tasks/secret1", "[2001:db8::7]", NULL, 200);
    get_with("/api/tasks/secret1", "evil.example", NULL, 421);
    ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);

    start_web_cfg(listen, NULL, READTOK "\n", NULL, "rebind6.log", log, sizeof(log));
    ck_assert(th_wait_log(log, "reads need a bearer token", 1, 5000));
    ck_assert_int_eq(th_count_in_file(log, "not a loopback address"), 0);
    get_with("/api/tasks/secret1", "127.0.0.1", NULL, 401);
}
END_TEST

/* ----------------------------------------------------------------- ACL refusals */

#define BLIND_PW "blind-password-0123456789"

static void setup_tcp(void) {
    th_fixture_start(&R, &C, TH_LIBRARY, "");
    memset(&W, 0, sizeof(W));
    memset(&D, 0, sizeof(D));
}

/* dtq-web listens and is connected to Redis. */
static int web_connected(void *arg) {
    int fd = tcp_connect(PORT), up;
    resp r;
    DTQ_UNUSED(arg);
    if (fd < 0) return 0;
    close(fd);
    r = http("GET", "/api/info", NULL, NULL);
    up = r.status == 200 && cJSON_IsTrue(cJSON_GetObjectItem(r.json, "redis_connected"));
    resp_free(&r);
    return up;
}

/* dtq-web as a Redis user that may connect and nothing else: its reads and writes are
 * refused by the ACL, and each answers 403 redis_permission saying it is a permission
 * error, never 404 (which would say the task or queue does not exist). */
START_TEST(test_acl_refusal_is_403_not_404) {
    static const char *const paths[][2] = {{"GET", "/api/tasks/t1"},
                                           {"GET", "/api/queues/default"},
                                           {"GET", "/api/overview"},
                                           {"GET", "/api/dlq"},
                                           {"GET", "/api/audit?task=t1"},
                                           {"POST", "/api/queues/default/pause"},
                                           {"POST", "/api/tasks/t1/cancel"},
                                           {"GET", "/api/cron"},
                                           {"POST", "/api/cron/nightly/run"},
                                           {"GET", "/api/limits"},
                                           {"POST", "/api/limits/default/remove"}};
    char ini[400], tok[400], log[400], listen[64];
    char *argv[] = {(char *)DTQ_WEB_BIN, (char *)"-c", ini, (char *)"--listen", listen, NULL};
    redisReply *x;
    FILE *f;
    x = th_cmd(C, "FCALL dtq_enqueue 0 default echo {} task_id t1");
    ck_assert_int_eq(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    x = th_cmd(C, "ACL SETUSER blind reset on >" BLIND_PW " +ping");
    ck_assert_int_eq(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    th_path(&R, "blind.ini", ini, sizeof(ini));
    th_path(&R, "blind.token", tok, sizeof(tok));
    th_path(&R, "blind.log", log, sizeof(log));
    f = fopen(tok, "w");
    ck_assert(f != NULL);
    fputs(TOKEN "\n", f);
    fclose(f);
    chmod(tok, 0600);
    f = fopen(ini, "w");
    ck_assert(f != NULL);
    fprintf(f, "[redis]\nurl = redis://blind:" BLIND_PW "@127.0.0.1:%d\n[web]\ntoken_file = %s\n",
            R.port, tok);
    fclose(f);
    th_process_start(&W, argv, log);
    ck_assert_msg(th_wait_until(web_connected, NULL, 10000), "dtq-web never connected; see %s",
                  log);
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        resp r = http(paths[i][0], paths[i][1], "Bearer " TOKEN, NULL);
        const cJSON *e = cJSON_GetObjectItem(r.json, "error");
        const cJSON *m = cJSON_GetObjectItem(r.json, "message");
        ck_assert_msg(r.status == 403, "%s %s: %d %s", paths[i][0], paths[i][1], r.status, r.body);
        ck_assert_msg(cJSON_IsString(e) && !strcmp(e->valuestring, "redis_permission"), "%s",
                      r.body);
        ck_assert_msg(cJSON_IsString(m) && strstr(m->valuestring, "permission"), "%s", r.body);
        resp_free(&r);
    }
    th_assert_field(C, "t1", "status", "queued");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:default:paused")), 0);
}
END_TEST

/* Held event streams cannot lock the dashboard out: with DTQ_WEB_EVENTS_CLIENTS_MAX streams
 * open, one more is served and the oldest stream is ended (its client reconnects, as the
 * page does), while the newer ones stay. */
START_TEST(test_event_streams_evict_oldest) {
    const char *req = "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    int fds[DTQ_WEB_EVENTS_CLIENTS_MAX + 1];
    char buf[4096];
    start_worker();
    start_web(NULL);
    for (int i = 0; i <= DTQ_WEB_EVENTS_CLIENTS_MAX; i++) {
        fds[i] = tcp_connect(PORT);
        ck_assert(fds[i] >= 0);
        ck_assert_int_eq(send(fds[i], req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
        buf[0] = '\0';
        ck_assert_msg(th_read_until(fds[i], "dtq-web events", 5000, buf, sizeof(buf)),
                      "stream %d was not served: %s", i, buf);
        ck_assert_msg(strstr(buf, "200") != NULL, "stream %d: %s", i, buf);
    }
    /* the oldest ends: the last chunk of its answer (its connection may stay for another
     * request, as HTTP/1.1 allows) */
    buf[0] = '\0';
    ck_assert_msg(th_read_until(fds[0], "0\r\n\r\n", 5000, buf, sizeof(buf)),
                  "the oldest stream was not ended: %s", buf);
    for (int i = 1; i <= DTQ_WEB_EVENTS_CLIENTS_MAX; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        while (poll(&p, 1, 0) == 1) /* the rest of its first chunk may still be there */
            ck_assert_msg(recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT) > 0, "stream %d ended too",
                          i);
    }
    for (int i = 0; i <= DTQ_WEB_EVENTS_CLIENTS_MAX; i++) close(fds[i]);
}
END_TEST

/* ----------------------------------------------------------------- /metrics */

#define METRICS_INI                                                                                \
    "[worker]\nworker_id = " WORKER "\nqueues = default, mail\nconcurrency = 4\n"                  \
    "heartbeat_interval_s = 1\n"                                                                   \
    "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"                                      \
    "[retry]\nbase_delay = 600\nmax_delay = 600\njitter = 0\n"                                     \
    "[handler:echo]\nbuiltin = echo\n[handler:fail]\nbuiltin = fail\n"                             \
    "[handler:sleep]\nbuiltin = sleep\n"

static int has_leader(void *arg) {
    redisReply *r = th_cmd(C, "GET dtq:lock:scheduler");
    int ok = r->type == REDIS_REPLY_STRING && !strcmp(r->str, WORKER);
    DTQ_UNUSED(arg);
    freeReplyObject(r);
    return ok;
}

/* GET /metrics after known work: a paused queue with entries in two bands, a delayed and a
 * retrying task, dead letters of two classes, a worker that leads the scheduler, and a
 * worker hash whose status needs escaping; parsed by Prometheus' parser: every family a
 * gauge with help, the labels and the values. Then Redis goes away: dtq_redis_connected 0
 * alone. */
START_TEST(test_metrics) {
    static const char *const families[] = {
        "dtq_redis_connected",    "dtq_queue_depth",
        "dtq_queue_pending",      "dtq_queue_oldest_waiting_seconds",
        "dtq_queue_paused",       "dtq_scheduled_tasks",
        "dtq_schedule_length",    "dtq_dead_letters",
        "dtq_dead_letter_length", "dtq_workers",
        "dtq_scheduler_leader",   "dtq_metrics_truncated",
        "dtq_part_unreachable"}; /* Redis Cluster only: none here, the family stays */
    resp r;
    cJSON *fams, *f;
    long long now;
    th_daemon_start(&D, &R, METRICS_INI);
    th_daemon_wait_ready(C, WORKER, 10000);
    start_web(NULL);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 mail it"));
    th_enqueue(C, "mail", "m7", "echo", "{}", "priority 7");
    th_enqueue(C, "mail", "m2a", "echo", "{}", "priority 2");
    th_enqueue(C, "mail", "m2b", "echo", "{}", "priority 2");
    th_enqueue(C, "default", "later", "echo", "{}", "delay_ms 600000");
    th_enqueue(C, "default", "rt", "fail", "{\"retryable\":true}", "max_attempts 3");
    th_enqueue(C, "default", "dp", "fail", "{}", "max_attempts 1");
    th_enqueue(C, "default", "dt", "sleep", "{\"ms\":5000}", "max_attempts 1 timeout_ms 100");
    th_expect_status(C, "rt", "retrying", 10000);
    th_expect_status(C, "dp", "dead_lettered", 10000);
    th_expect_status(C, "dt", "dead_lettered", 10000);
    ck_assert(th_wait_until(has_leader, NULL, 10000));
    now = dtq_now_ms();
    freeReplyObject(th_cmd(C,
                           "HSET dtq:worker:odd worker_id odd last_heartbeat %lld "
                           "status %s",
                           now, "a\"b\\c\nd"));
    freeReplyObject(th_cmd(C, "SADD dtq:workers odd"));
    th_sleep_ms(1100); /* the mail entries wait a second at least */

    r = http("GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.head, "Content-Type: text/plain; version=0.0.4"), "%s", r.head);
    fams = th_metrics_parse(&R, r.body);
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        cJSON *t, *h;
        cJSON_ArrayForEach(f, fams) {
            if (!strcmp(cJSON_GetObjectItem(f, "name")->valuestring, families[i])) break;
        }
        ck_assert_msg(f != NULL, "no family %s in\n%s", families[i], r.body);
        t = cJSON_GetObjectItem(f, "type");
        h = cJSON_GetObjectItem(f, "help");
        ck_assert_str_eq(t->valuestring, "gauge");
        ck_assert_msg(cJSON_IsString(h) && strlen(h->valuestring) > 10, "%s: no help", families[i]);
    }
    ck_assert_int_eq(cJSON_GetArraySize(fams), (int)(sizeof(families) / sizeof(families[0])));
    ck_assert(th_metrics_value(fams, "dtq_redis_connected", "") == 1);
    ck_assert(th_metrics_value(fams, "dtq_queue_depth", "queue=mail,priority=7") == 1);
    ck_assert(th_metrics_value(fams, "dtq_queue_depth", "queue=mail,priority=2") == 2);
    ck_assert(th_metrics_value(fams, "dtq_queue_depth", "queue=mail,priority=5") == 0);
    for (int b = 0; b < 10; b++) {
        char l[64];
        snprintf(l, sizeof(l), "queue=default,priority=%d", b);
        ck_assert_msg(th_metrics_value(fams, "dtq_queue_depth", l) == 0, "%s", l);
    }
    ck_assert(th_metrics_value(fams, "dtq_queue_pending", "queue=default") == 0);
    ck_assert(th_metrics_value(fams, "dtq_queue_paused", "queue=mail") == 1);
    ck_assert(th_metrics_value(fams, "dtq_queue_paused", "queue=default") == 0);
    ck_assert(th_metrics_value(fams, "dtq_queue_oldest_waiting_seconds", "queue=mail") >= 1.0);
    ck_assert(th_metrics_value(fams, "dtq_queue_oldest_waiting_seconds", "queue=mail") < 60);
    ck_assert(th_metrics_value(fams, "dtq_queue_oldest_waiting_seconds", "queue=default") == 0);
    ck_assert(th_metrics_value(fams, "dtq_scheduled_tasks", "queue=default") == 2);
    ck_assert(th_metrics_value(fams, "dtq_scheduled_tasks", "queue=mail") == 0);
    ck_assert(th_metrics_value(fams, "dtq_schedule_length", "") == 2);
    ck_assert(th_metrics_value(fams, "dtq_dead_letters", "queue=default,class=permanent") == 1);
    ck_assert(th_metrics_value(fams, "dtq_dead_letters", "queue=default,class=timeout") == 1);
    ck_assert(th_metrics_value(fams, "dtq_dead_letter_length", "") == 2);
    ck_assert(th_metrics_value(fams, "dtq_workers", "status=running") == 1);
    ck_assert(th_metrics_value(fams, "dtq_workers", "status=draining") == 0);
    ck_assert(th_metrics_value(fams, "dtq_workers", "status=a\"b\\c\nd") ==
              1); /* escaped, parsed back */
    ck_assert(th_metrics_value(fams, "dtq_scheduler_leader", "worker=" WORKER) == 1);
    ck_assert(th_metrics_value(fams, "dtq_metrics_truncated", "part=queues") == 0);
    ck_assert(th_metrics_value(fams, "dtq_metrics_truncated", "part=dead_letters") == 0);
    ck_assert(th_metrics_value(fams, "dtq_metrics_truncated", "part=scheduled") == 0);
    ck_assert(th_metrics_value(fams, "dtq_metrics_truncated", "part=workers") == 0);
    cJSON_Delete(fams);
    resp_free(&r);

    /* HEAD: the headers alone; POST: 405 */
    r = http("HEAD", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "");
    resp_free(&r);
    r = http("POST", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);

    /* Redis gone: a scrape still answers, with dtq_redis_connected 0 and nothing else */
    th_daemon_stop(&D, SIGTERM, 10000);
    memset(&D, 0, sizeof(D));
    th_redis_stop(&R);
    for (int i = 0; i < 200; i++) {
        r = http("GET", "/metrics", NULL, NULL);
        if (r.status == 200 && strstr(r.body, "dtq_redis_connected 0")) break;
        resp_free(&r);
        th_sleep_ms(50);
    }
    ck_assert_msg(r.body && strstr(r.body, "dtq_redis_connected 0"), "still connected");
    fams = th_metrics_parse(&R, r.body);
    ck_assert_int_eq(cJSON_GetArraySize(fams), 1);
    cJSON_Delete(fams);
    resp_free(&r);
}
END_TEST

/* ----------------------------------------------------------------- the schedule */

/* run_tasks, plus a delayed task in "mail" and a task waiting for its retry (an hour away)
 * after an attempt that failed with "smtp timeout". */
static void schedule_world(void) {
    run_tasks();
    th_enqueue(C, "mail", "later2", "echo", "{}", "delay_ms 600000");
    th_enqueue(C, "default", "flaky1", "flaky", "{\"retryable\":true,\"message\":\"smtp timeout\"}",
               NULL);
    th_expect_status(C, "flaky1", "retrying", 10000);
}

/* The task ids of a scheduled page, "a,b,c". */
static char *sched_ids_of(const cJSON *page) {
    char *out = dtq_xstrdup("");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(page, "entries")) {
        char *n = dtq_xasprintf("%s%s%s", out, *out ? "," : "", th_json_str(e, "task_id"));
        free(out);
        out = n;
    }
    return out;
}

static void assert_sched(const char *query, const char *want) {
    char path[256];
    cJSON *o;
    char *ids;
    snprintf(path, sizeof(path), "/api/scheduled%s", query);
    o = get_json(path, 200);
    ids = sched_ids_of(o);
    ck_assert_msg(!strcmp(ids, want), "GET %s: want [%s], got [%s]", path, want, ids);
    free(ids);
    cJSON_Delete(o);
}

START_TEST(test_scheduled_list_and_filters) {
    cJSON *o, *o2;
    const cJSON *e;
    start_worker();
    start_web(TOKEN "\n");
    schedule_world();
    /* soonest due first: later2 and later (10 min), flaky1 (an hour) */
    o = get_json("/api/scheduled", 200);
    ck_assert_int_eq((int)th_json_num(o, "total"), 3);
    ck_assert_str_eq(th_json_str(o, "filter.kind"), "all");
    cJSON_Delete(o);
    assert_sched("?kind=delayed", "later,later2");
    assert_sched("?kind=retrying", "flaky1");
    assert_sched("?kind=delayed&queue=mail", "later2");
    assert_sched("?id_prefix=lat", "later,later2");
    assert_sched("?id_prefix=later2", "later2");
    assert_sched("?task_type=flaky", "flaky1");
    assert_sched("?class=retryable", "flaky1");
    assert_sched("?class=timeout", "");
    o = get_json("/api/scheduled?kind=retrying", 200);
    e = th_json_at(o, "entries.0");
    ck_assert_str_eq(th_json_str(e, "kind"), "retrying");
    ck_assert_str_eq(th_json_str(e, "queue"), "default");
    ck_assert_str_eq(th_json_str(e, "last_error_class"), "retryable");
    ck_assert_msg(strstr(th_json_str(e, "last_error"), "smtp timeout") != NULL, "%s",
                  th_json_str(e, "last_error"));
    ck_assert_int_eq((int)th_json_num(e, "next_attempt"), 2);
    /* an hour with the default jitter (spread 0.2): 2880-4320 s away */
    ck_assert(th_json_num(e, "due_ms") > th_json_num(o, "time_ms") + 2800000);
    cJSON_Delete(o);
    /* paging with the cursor */
    o = get_json("/api/scheduled?kind=delayed&count=1", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "entries")), 1);
    {
        char path[256];
        snprintf(path, sizeof(path), "/api/scheduled?kind=delayed&count=1&cursor=%s",
                 th_json_str(o, "next_cursor"));
        o2 = get_json(path, 200);
    }
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "later");
    ck_assert_str_eq(th_json_str(o2, "entries.0.task_id"), "later2");
    cJSON_Delete(o);
    cJSON_Delete(o2);
    /* bad parameters are refused before any call */
    expect_error("GET", "/api/scheduled?kind=soon", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/scheduled?count=501", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/scheduled?count=0", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/scheduled?cursor=later", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/scheduled?queue=a%20b", NULL, NULL, 400, "bad_request");
    expect_error("GET", "/api/scheduled?class=a/b", NULL, NULL, 400, "bad_request");
    expect_error("POST", "/api/scheduled", "Bearer " TOKEN, NULL, 405, "method_not_allowed");
}
END_TEST

/* The attempt history from the hash alone: with no events stream, the task page still
 * has the attempts; a delayed task has its due time. */
START_TEST(test_task_attempts_without_events_stream) {
    cJSON *o;
    start_worker();
    start_web(NULL);
    schedule_world();
    quiet();
    freeReplyObject(th_cmd(C, "DEL dtq:stream:events"));
    o = get_json("/api/tasks/flaky1", 200);
    ck_assert(cJSON_IsFalse(th_json_at(o, "events_stream")));
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "attempts")), 1);
    ck_assert_int_eq((int)th_json_num(o, "attempts.0.attempt"), 1);
    ck_assert_str_eq(th_json_str(o, "attempts.0.class"), "retryable");
    ck_assert_str_eq(th_json_str(o, "attempts.0.worker"), WORKER);
    ck_assert_msg(strstr(th_json_str(o, "attempts.0.error"), "smtp timeout") != NULL, "%s",
                  th_json_str(o, "attempts.0.error"));
    ck_assert(th_json_num(o, "due_ms") > 0);
    cJSON_Delete(o);
    o = get_json("/api/tasks/later", 200);
    ck_assert(th_json_num(o, "due_ms") > atof(th_json_str(o, "fields.created_at")) + 500000);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "attempts")), 0);
    cJSON_Delete(o);
}
END_TEST

static const char *const BULK[] = {"/api/scheduled/run-now", "/api/scheduled/delete",
                                   "/api/dlq/requeue", "/api/dlq/discard"};

START_TEST(test_bulk_writes_refused) {
    long long before;
    start_worker();
    start_web(TOKEN "\n");
    schedule_world();
    before = quiet();
    for (size_t i = 0; i < 4; i++) {
        const char *body = "{\"ids\":[\"later\",\"bad1\"]}";
        expect_error("POST", BULK[i], NULL, body, 401, "unauthorized");
        expect_error("POST", BULK[i], "Bearer wrong-token-0123456789", body, 401, "unauthorized");
        expect_error("GET", BULK[i], NULL, NULL, 405, "method_not_allowed");
        /* the right token, a bad body */
        expect_error("POST", BULK[i], "Bearer " TOKEN, NULL, 400, "bad_request");
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{}", 400, "bad_request");
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{\"ids\":[]}", 400, "bad_request");
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{\"ids\":\"later\"}", 400, "bad_request");
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{\"ids\":[7]}", 400, "bad_request");
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{\"ids\":[\"a b\"]}", 400, "bad_request");
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{\"ids\":[\"later\"],\"all\":true}", 400,
                     "bad_request");
    }
    {
        /* 501 ids */
        size_t cap = 8 + 501 * 6 + 4, off;
        char *big = malloc(cap);
        off = (size_t)snprintf(big, cap, "{\"ids\":[");
        for (int i = 0; i < 501; i++)
            off += (size_t)snprintf(big + off, cap - off, "%s\"t%d\"", i ? "," : "", i % 100);
        snprintf(big + off, cap - off, "]}");
        expect_error("POST", BULK[0], "Bearer " TOKEN, big, 400, "bad_request");
        free(big);
    }
    ck_assert_int_eq(redis_changes(), before);
    th_assert_field(C, "later", "status", "pending");
    th_assert_field(C, "bad1", "status", "dead_lettered");
    /* read-only */
    ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);
    start_web(NULL);
    for (size_t i = 0; i < 4; i++)
        expect_error("POST", BULK[i], "Bearer " TOKEN, "{\"ids\":[\"later\"]}", 403, "read_only");
    ck_assert_int_eq(redis_changes(), before);
}
END_TEST

START_TEST(test_bulk_writes_with_the_token) {
    cJSON *o;
    start_worker();
    start_web(TOKEN "\nalice " ALICE "\n");
    schedule_world();
    /* run now: later is queued at once (default runs it), ok1 was never scheduled */
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 default"));
    o = post_ok("/api/scheduled/run-now", TOKEN,
                "{\"ids\":[\"later\",\"nosuch\",\"ok1\",\"later\"]}");
    ck_assert_str_eq(th_json_str(o, "action"), "run-now");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web");
    ck_assert_str_eq(th_json_str(o, "results.later"), "done");
    ck_assert_str_eq(th_json_str(o, "results.nosuch"), "not_found");
    ck_assert_str_eq(th_json_str(o, "results.ok1"), "not_scheduled");
    ck_assert_int_eq((int)th_json_num(o, "counts.done"), 1);
    cJSON_Delete(o);
    th_assert_field(C, "later", "status", "queued");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 2); /* later2, flaky1 */
    assert_last_audit("dtq-web sched_run_now later");
    assert_sched("?kind=delayed", "later2");
    /* delete, with the named token */
    o = post_ok("/api/scheduled/delete", ALICE, "{\"ids\":[\"later2\",\"flaky1\"]}");
    ck_assert_str_eq(th_json_str(o, "results.later2"), "done");
    ck_assert_str_eq(th_json_str(o, "results.flaky1"), "done");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web:alice");
    cJSON_Delete(o);
    th_assert_field(C, "later2", "status", "cancelled");
    th_assert_field(C, "flaky1", "status", "cancelled");
    assert_last_audit("dtq-web:alice sched_delete flaky1");
    assert_sched("", "");
    /* dead letters in bulk: bad1 (mail) and p1 (default) */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 default"));
    th_enqueue(C, "default", "p1", "fail", "{\"retryable\":false}", NULL);
    th_expect_status(C, "p1", "dead_lettered", 10000);
    th_enqueue(C, "default", "p2", "fail", "{\"retryable\":false}", NULL);
    th_expect_status(C, "p2", "dead_lettered", 10000);
    o = post_ok("/api/dlq/requeue", TOKEN, "{\"ids\":[\"bad1\",\"ok1\",\"nosuch\"]}");
    ck_assert_str_eq(th_json_str(o, "action"), "requeue");
    ck_assert_str_eq(th_json_str(o, "results.bad1"), "queued");
    ck_assert_str_eq(th_json_str(o, "results.ok1"), "wrong_state");
    ck_assert_str_eq(th_json_str(o, "results.nosuch"), "not_found");
    cJSON_Delete(o);
    th_assert_field(C, "bad1", "status", "queued"); /* mail is paused: it stays queued */
    assert_last_audit("dtq-web requeue bad1");
    o = post_ok("/api/dlq/discard", TOKEN, "{\"ids\":[\"p1\",\"p2\"]}");
    ck_assert_str_eq(th_json_str(o, "results.p1"), "discarded");
    ck_assert_str_eq(th_json_str(o, "results.p2"), "discarded");
    ck_assert_int_eq((int)th_json_num(o, "counts.discarded"), 2);
    cJSON_Delete(o);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
}
END_TEST

/* ----------------------------------------------------------------- periodic schedules */

/* A schedule's hash field (caller frees), NULL when there is none. */
static char *cron_field(const char *queue, const char *name, const char *field) {
    redisReply *r = th_cmd(C, "HGET dtq:cron:%s:%s %s", queue, name, field);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

static void assert_cron_field(const char *queue, const char *name, const char *field,
                              const char *want) {
    char *v = cron_field(queue, name, field);
    ck_assert_msg(v && !strcmp(v, want), "schedule %s: %s is %s, want %s", name, field,
                  v ? v : "(nil)", want);
    free(v);
}

/* Both schedules are planned by the leader: nightly has its next fire time, broken its
 * error. */
static int crons_planned(void *arg) {
    char *next = cron_field("default", "nightly", "next_fire");
    char *err = cron_field("mail", "broken", "error");
    int ok = next && *next && err && *err;
    DTQ_UNUSED(arg);
    free(next);
    free(err);
    return ok;
}

/* The last audit entry has the field `field` = want. */
static void assert_last_audit_field(const char *field, const char *want) {
    redisReply *r = th_cmd(C, "XREVRANGE dtq:stream:audit + - COUNT 1");
    const redisReply *f = r->element[0]->element[1];
    int found = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (!strcmp(f->element[i]->str, field)) found = !strcmp(f->element[i + 1]->str, want);
    freeReplyObject(r);
    ck_assert_msg(found, "the last audit entry has no %s %s", field, want);
}

static void assert_last_audit_name(const char *want) {
    assert_last_audit_field("name", want);
}

/* GET /api/cron passes <ns>_cron_list through; pause, resume and run write the schedule
 * (and a task) as dtq-web's actor, audited; unknown names are 404, bad ones 400, and
 * neither writes. */
START_TEST(test_cron) {
    cJSON *o, *fn;
    const cJSON *sch;
    redisReply *x;
    long long before;
    char path[128], *tid;
    start_worker();
    start_web(TOKEN "\nalice " ALICE "\n");
    o = get_json("/api/cron", 200);
    ck_assert(th_json_num(o, "now_ms") > 0);
    ck_assert(cJSON_IsArray(th_json_at(o, "schedules")));
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "schedules")), 0);
    cJSON_Delete(o);
    x = th_cmd(C,
               "FCALL dtq_cron_set 0 ops nightly %s default echo {\"n\":1} tz Europe/Berlin "
               "priority 7",
               "0 3 * * *");
    ck_assert_msg(x->type == REDIS_REPLY_STRING && !strcmp(x->str, "created"), "%s", x->str);
    freeReplyObject(x);
    x = th_cmd(C, "FCALL dtq_cron_set 0 ops broken %s mail echo {}", "61 * * * *");
    ck_assert_int_eq(x->type, REDIS_REPLY_STRING);
    freeReplyObject(x);
    ck_assert_msg(th_wait_until(crons_planned, NULL, 10000), "the leader planned nothing");
    /* the list as the Function answers it (now_ms aside) */
    o = get_json("/api/cron", 200);
    x = th_cmd(C, "FCALL_RO dtq_cron_list 0");
    ck_assert_int_eq(x->type, REDIS_REPLY_STRING);
    fn = cJSON_Parse(x->str);
    freeReplyObject(x);
    ck_assert(fn != NULL);
    ck_assert_msg(cJSON_Compare(th_json_at(o, "schedules"), th_json_at(fn, "schedules"), 1),
                  "GET /api/cron differs from dtq_cron_list");
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "schedules")), 2);
    ck_assert_str_eq(th_json_str(o, "schedules.0.name"), "broken");
    ck_assert(strstr(th_json_str(o, "schedules.0.error"), "spec") != NULL);
    ck_assert_str_eq(th_json_str(o, "schedules.1.name"), "nightly");
    ck_assert_str_eq(th_json_str(o, "schedules.1.tz"), "Europe/Berlin");
    ck_assert(th_json_num(o, "schedules.1.next_fire_ms") > th_json_num(o, "now_ms"));
    ck_assert(cJSON_IsNull(th_json_at(o, "schedules.1.error")));
    ck_assert(cJSON_IsFalse(th_json_at(o, "schedules.1.paused")));
    cJSON_Delete(o);
    cJSON_Delete(fn);
    o = get_json("/api/cron/nightly", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "schedules")), 1);
    ck_assert_int_eq((int)th_json_num(o, "schedules.0.priority"), 7);
    cJSON_Delete(o);
    expect_error("GET", "/api/cron/nosuch", NULL, NULL, 404, "not_found");
    expect_error("GET", "/api/cron/bad:name", NULL, NULL, 400, "bad_request");

    /* refused: nothing written (the worker stopped, Redis's change count stays) */
    before = quiet();
    expect_error("POST", "/api/cron/nosuch/pause", "Bearer " TOKEN, NULL, 404, "not_found");
    expect_error("POST", "/api/cron/nosuch/resume", "Bearer " TOKEN, NULL, 404, "not_found");
    expect_error("POST", "/api/cron/nosuch/run", "Bearer " TOKEN, NULL, 404, "not_found");
    expect_error("POST", "/api/cron/bad:name/pause", "Bearer " TOKEN, NULL, 400, "bad_request");
    expect_error("POST", "/api/cron/a%20b/run", "Bearer " TOKEN, NULL, 400, "bad_request");
    snprintf(path, sizeof(path), "/api/cron/%065d/pause", 0);
    expect_error("POST", path, "Bearer " TOKEN, NULL, 400, "bad_request");
    expect_error("POST", "/api/cron/nightly/pause", "Bearer " TOKEN, "{\"force\":1}", 400,
                 "bad_request");
    expect_error("POST", "/api/cron/nightly/pause", NULL, NULL, 401, "unauthorized");
    expect_error("POST", "/api/cron/nightly/run", "Bearer " TOKEN "x", NULL, 401, "unauthorized");
    expect_error("GET", "/api/cron/nightly/run", NULL, NULL, 405, "method_not_allowed");
    expect_error("POST", "/api/cron/nightly/explode", "Bearer " TOKEN, NULL, 404, "not_found");
    ck_assert_int_eq(redis_changes(), before);
    assert_cron_field("default", "nightly", "paused", "0");

    /* pause, twice (0: it was so already), resume with the named token */
    o = post_ok("/api/cron/nightly/pause", TOKEN, NULL);
    ck_assert_str_eq(th_json_str(o, "action"), "pause");
    ck_assert_str_eq(th_json_str(o, "name"), "nightly");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web");
    ck_assert_int_eq((int)th_json_num(o, "result"), 1);
    cJSON_Delete(o);
    assert_cron_field("default", "nightly", "paused", "1");
    assert_last_audit("dtq-web cron_pause ");
    assert_last_audit_name("nightly");
    o = post_ok("/api/cron/nightly/pause", TOKEN, NULL);
    ck_assert_int_eq((int)th_json_num(o, "result"), 0);
    cJSON_Delete(o);
    o = get_json("/api/cron/nightly", 200);
    ck_assert(cJSON_IsTrue(th_json_at(o, "schedules.0.paused")));
    cJSON_Delete(o);
    o = post_ok("/api/cron/nightly/resume", ALICE, "{}");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web:alice");
    ck_assert_int_eq((int)th_json_num(o, "result"), 1);
    cJSON_Delete(o);
    assert_cron_field("default", "nightly", "paused", "0");
    assert_last_audit("dtq-web:alice cron_resume ");
    assert_last_audit_name("nightly");

    /* run now: a new task of the schedule's queue, named in the answer and the schedule */
    o = post_ok("/api/cron/nightly/run", TOKEN, NULL);
    ck_assert_str_eq(th_json_str(o, "action"), "run");
    sch = th_json_at(o, "task_id");
    ck_assert(cJSON_IsString(sch));
    ck_assert_str_eq(th_json_str(o, "result"), sch->valuestring);
    tid = strdup(sch->valuestring);
    cJSON_Delete(o);
    th_assert_field(C, tid, "cron", "nightly");
    th_assert_field(C, tid, "queue", "default");
    th_assert_field(C, tid, "status", "queued");
    th_assert_field(C, tid, "payload", "{\"n\":1}");
    assert_cron_field("default", "nightly", "last_task_id", tid);
    {
        char want[300];
        snprintf(want, sizeof(want), "dtq-web cron_run %s", tid);
        assert_last_audit(want);
    }
    assert_last_audit_name("nightly");
    o = get_json("/api/cron/nightly", 200);
    ck_assert_str_eq(th_json_str(o, "schedules.0.last_task_id"), tid);
    cJSON_Delete(o);
    free(tid);
}
END_TEST

/* ----------------------------------------------------------------- limits */

/* <ns>_limit_list's array, parsed (caller deletes). */
static cJSON *limit_list(void) {
    redisReply *x = th_cmd(C, "FCALL_RO dtq_limit_list 0");
    cJSON *l;
    ck_assert_msg(x->type == REDIS_REPLY_STRING, "limit_list: %s", x->str ? x->str : "");
    l = cJSON_Parse(x->str);
    freeReplyObject(x);
    ck_assert(cJSON_IsArray(l));
    return l;
}

/* The first limit holds its one slot and has deferred a task (its horizon is set). */
static int limit_in_use(void *arg) {
    cJSON *l = limit_list();
    const cJSON *u = cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "use");
    int ok = u && cJSON_IsNumber(cJSON_GetObjectItem(u, "running")) &&
             cJSON_GetObjectItem(u, "running")->valueint == 1 &&
             cJSON_IsNumber(cJSON_GetObjectItem(u, "deferred_until_ms"));
    DTQ_UNUSED(arg);
    cJSON_Delete(l);
    return ok;
}

/* The reply of the command must be the string want. */
static void cmd_is(const char *want, const char *fmt, const char *arg) {
    redisReply *x = th_cmd(C, fmt, arg);
    ck_assert_msg(x->type == REDIS_REPLY_STRING && !strcmp(x->str, want), "%s: %s", fmt,
                  x->str ? x->str : "");
    freeReplyObject(x);
}

/* GET /api/limits is <ns>_limit_list's array under "limits", use included (a slot held, a
 * task deferred by the rate); POST /api/limits/<q>/remove takes the queue-wide limit away,
 * or a task type's named in the body, as dtq-web's actor, audited; no such limit is 404,
 * a bad queue, task type or body 400, and none of the refusals writes. */
START_TEST(test_limits) {
    cJSON *o, *fn;
    long long before;
    double now;
    start_worker();
    start_web(TOKEN "\nalice " ALICE "\n");
    o = get_json("/api/limits", 200);
    ck_assert(cJSON_IsArray(th_json_at(o, "limits")));
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "limits")), 0);
    cJSON_Delete(o);
    cmd_is("set", "FCALL dtq_limit_set 0 ops default %s rate 1 period_ms 3600000 concurrency 1",
           "sleep");
    cmd_is("set", "FCALL dtq_limit_set 0 ops mail %s concurrency 3 per_key 1", "");
    th_enqueue(C, "default", "s1", "sleep", "{\"ms\":4000}", NULL);
    th_enqueue(C, "default", "s2", "sleep", "{\"ms\":1}", NULL);
    ck_assert_msg(th_wait_until(limit_in_use, NULL, 10000), "s1 never held the slot");
    now = (double)th_now_ms();
    o = get_json("/api/limits", 200);
    fn = limit_list();
    ck_assert_msg(cJSON_Compare(th_json_at(o, "limits"), fn, 1),
                  "GET /api/limits differs from dtq_limit_list");
    cJSON_Delete(fn);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "limits")), 2);
    ck_assert_str_eq(th_json_str(o, "limits.0.target"), "default:sleep");
    ck_assert_str_eq(th_json_str(o, "limits.0.queue"), "default");
    ck_assert_str_eq(th_json_str(o, "limits.0.task_type"), "sleep");
    ck_assert_int_eq((int)th_json_num(o, "limits.0.rate"), 1);
    ck_assert(th_json_num(o, "limits.0.period_ms") == 3600000);
    ck_assert_int_eq((int)th_json_num(o, "limits.0.burst"), 0);
    ck_assert_int_eq((int)th_json_num(o, "limits.0.concurrency"), 1);
    ck_assert(cJSON_IsFalse(th_json_at(o, "limits.0.per_key")));
    ck_assert_int_eq((int)th_json_num(o, "limits.0.use.running"), 1);
    ck_assert_int_eq((int)th_json_num(o, "limits.0.use.tokens_left"), 0);
    ck_assert(cJSON_IsNull(th_json_at(o, "limits.0.use.keys")));
    ck_assert(th_json_num(o, "limits.0.use.deferred_until_ms") > now + 3000000); /* about an hour */
    ck_assert_str_eq(th_json_str(o, "limits.1.target"), "mail");
    ck_assert(cJSON_IsNull(th_json_at(o, "limits.1.task_type")));
    ck_assert(cJSON_IsNull(th_json_at(o, "limits.1.rate")));
    ck_assert(cJSON_IsNull(th_json_at(o, "limits.1.burst")));
    ck_assert_int_eq((int)th_json_num(o, "limits.1.concurrency"), 3);
    ck_assert(cJSON_IsTrue(th_json_at(o, "limits.1.per_key")));
    ck_assert_int_eq((int)th_json_num(o, "limits.1.use.keys"), 0);
    ck_assert_int_eq((int)th_json_num(o, "limits.1.use.running"), 0);
    cJSON_Delete(o);
    th_assert_field(C, "s2", "status", "pending");

    /* refused: nothing written */
    before = quiet();
    expect_error("POST", "/api/limits/default/remove", "Bearer " TOKEN, NULL, 404, "not_found");
    expect_error("POST", "/api/limits/mail/remove", "Bearer " TOKEN, "{\"task_type\":\"echo\"}",
                 404, "not_found");
    expect_error("POST", "/api/limits/nosuch/remove", "Bearer " TOKEN, "{\"task_type\":null}", 404,
                 "not_found");
    expect_error("POST", "/api/limits/a%20b/remove", "Bearer " TOKEN, NULL, 400, "bad_request");
    expect_error("POST", "/api/limits/default/remove", "Bearer " TOKEN, "{\"task_type\":7}", 400,
                 "bad_request");
    expect_error("POST", "/api/limits/default/remove", "Bearer " TOKEN, "{\"task_type\":\"a b\"}",
                 400, "bad_request");
    expect_error("POST", "/api/limits/default/remove", "Bearer " TOKEN, "{\"task_type\":\"\"}", 400,
                 "bad_request");
    expect_error("POST", "/api/limits/default/remove", "Bearer " TOKEN, "{\"force\":1}", 400,
                 "bad_request");
    expect_error("POST", "/api/limits/default/remove", NULL, "{\"task_type\":\"sleep\"}", 401,
                 "unauthorized");
    expect_error("GET", "/api/limits/default/remove", NULL, NULL, 405, "method_not_allowed");
    expect_error("POST", "/api/limits", "Bearer " TOKEN, NULL, 405, "method_not_allowed");
    ck_assert_int_eq(redis_changes(), before);
    ck_assert_int_eq(th_int(th_cmd(C, "HLEN dtq:limits:default")), 1);

    /* the task type's limit, then the queue's */
    o = post_ok("/api/limits/default/remove", ALICE, "{\"task_type\":\"sleep\"}");
    ck_assert_str_eq(th_json_str(o, "action"), "remove");
    ck_assert_str_eq(th_json_str(o, "target"), "default:sleep");
    ck_assert_str_eq(th_json_str(o, "actor"), "dtq-web:alice");
    ck_assert_str_eq(th_json_str(o, "result"), "removed");
    cJSON_Delete(o);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:limits:default")), 0);
    assert_last_audit("dtq-web:alice limit_remove ");
    assert_last_audit_field("target", "default:sleep");
    o = post_ok("/api/limits/mail/remove", TOKEN, "{\"task_type\":null}");
    ck_assert_str_eq(th_json_str(o, "target"), "mail");
    cJSON_Delete(o);
    assert_last_audit("dtq-web limit_remove ");
    assert_last_audit_field("target", "mail");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:limits")), 0);
    o = get_json("/api/limits", 200);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "limits")), 0);
    cJSON_Delete(o);
    expect_error("POST", "/api/limits/mail/remove", "Bearer " TOKEN, NULL, 404, "not_found");
}
END_TEST

/* ----------------------------------------------------------------- connection floods */

/* Lines of the file that contain needle; *last_out (optional) gets the last such line. */
static int count_lines(const char *path, const char *needle, char *last_out, size_t cap) {
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle)) {
            n++;
            if (last_out) snprintf(last_out, cap, "%s", line);
        }
    fclose(f);
    return n;
}

/* /healthz answers 200 "ok" at once with no token and no Host check, whatever else holds
 * the port: here 300 connections that send nothing (more than the cap: the oldest give
 * way). */
START_TEST(test_healthz_under_idle_flood) {
    enum { IDLE = 300 };
    int fds[IDLE];
    int64_t t0;
    resp r;
    start_worker();
    start_web(TOKEN "\n");
    for (int i = 0; i < IDLE; i++) {
        fds[i] = tcp_connect(PORT);
        ck_assert_msg(fds[i] >= 0, "idle connection %d", i);
    }
    th_sleep_ms(200); /* accepted, all of them */
    t0 = th_now_ms();
    r = raw("GET", "/healthz", NULL, NULL, 0);
    ck_assert_msg(th_now_ms() - t0 < 1000, "/healthz took %lld ms", (long long)(th_now_ms() - t0));
    ck_assert_msg(r.status == 200 && !strcmp(r.body, "ok\n"), "%d %s", r.status, r.body);
    resp_free(&r);
    r = raw("GET", "/healthz", "evil.example", NULL, 0); /* says nothing: no Host check */
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    r = raw("POST", "/healthz", "127.0.0.1", NULL, 0);
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);
    /* the oldest idle connections were closed for the newer ones */
    {
        char b;
        struct pollfd p = {fds[0], POLLIN, 0};
        ck_assert_msg(poll(&p, 1, 2000) == 1 && recv(fds[0], &b, 1, 0) <= 0,
                      "the oldest idle connection is still open past the cap");
    }
    for (int i = 0; i < IDLE; i++) close(fds[i]);
    ck_assert(count_lines(W.log, "closing the oldest one that has not sent a whole request", NULL,
                          0) >= 1);
}
END_TEST

/* A client that sends its request a byte a second is cut DTQ_WEB_DEADLINE_MS after
 * accept, though every byte would restart evhttp's own timeout. */
START_TEST(test_slow_client_cut_at_deadline) {
    const char *req = "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
                      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    int fd, closed = 0;
    int64_t t0, took = 0;
    start_worker();
    start_web(NULL);
    fd = tcp_connect(PORT);
    ck_assert(fd >= 0);
    t0 = th_now_ms();
    for (size_t i = 0; i < strlen(req) && !closed; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        char b[256];
        if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1 ||
            (poll(&p, 1, 1000) == 1 && recv(fd, b, sizeof(b), 0) <= 0)) {
            closed = 1;
            took = th_now_ms() - t0;
        }
        if (th_now_ms() - t0 > DTQ_WEB_DEADLINE_MS + 5000) break;
    }
    close(fd);
    ck_assert_msg(closed, "a one-byte-a-second client still connected after %lld ms",
                  (long long)(th_now_ms() - t0));
    ck_assert_msg(took >= DTQ_WEB_DEADLINE_MS - 1000 && took <= DTQ_WEB_DEADLINE_MS + 2500,
                  "cut after %lld ms", (long long)took);
    ck_assert(count_lines(W.log, "sent no whole request within", NULL, 0) == 1);
}
END_TEST

/* Wrong tokens are logged with the peer's address, a few lines and then one summary with
 * the count, never a line each. */
START_TEST(test_wrong_tokens_logged_rate_limited) {
    enum { WRONG = 200, BURST = 5 };
    char last[2048] = "", want[128];
    int lines;
    start_worker();
    start_web(TOKEN "\n");
    for (int i = 0; i < WRONG; i++) {
        resp r = http("POST", "/api/queues/default/pause",
                      "Bearer wrong-token-0123456789abcdef0123456789abcdef", NULL);
        ck_assert_int_eq(r.status, 401);
        resp_free(&r);
    }
    lines = count_lines(W.log, "a wrong token from 127.0.0.1", NULL, 0);
    ck_assert_msg(lines == BURST, "%d lines for %d wrong tokens", lines, WRONG);
    /* the summary comes when the window of the first line ends (10 s) */
    snprintf(want, sizeof(want), "web: wrong tokens: %d more in the last 10 s", WRONG - BURST);
    for (int i = 0; i < 150 && !count_lines(W.log, "web: wrong tokens:", last, sizeof(last)); i++)
        th_sleep_ms(100);
    ck_assert_msg(strstr(last, want) != NULL, "no summary '%s': '%s'", want, last);
    /* no token at all is not a wrong one */
    {
        resp r = http("POST", "/api/queues/default/pause", NULL, NULL);
        ck_assert_int_eq(r.status, 401);
        resp_free(&r);
    }
    ck_assert_int_eq(count_lines(W.log, "a wrong token from", NULL, 0), BURST);
}
END_TEST

/* 1,100 connections under RLIMIT_NOFILE 1024: a normal request is still answered and the
 * log stays short (no line per accept error, per eviction). */
START_TEST(test_connection_flood_under_fd_limit) {
    enum { FLOOD = 1100 };
    static int fds[FLOOD];
    struct rlimit old, low;
    int64_t t0;
    int nlines, opened = 0;
    resp r;
    start_worker();
    /* dtq-web inherits the limit: lowered around its start only */
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = 1024;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    start_web(NULL);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    for (int i = 0; i < FLOOD; i++) {
        struct sockaddr_in sa = {0};
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ck_assert(fds[i] >= 0);
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)PORT);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EINPROGRESS)
            opened++;
    }
    ck_assert_int_ge(opened, 1000);
    th_sleep_ms(500);
    t0 = th_now_ms();
    r = raw("GET", "/api/info", "127.0.0.1", NULL, 0);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    resp_free(&r);
    ck_assert_msg(th_now_ms() - t0 < 3000, "took %lld ms", (long long)(th_now_ms() - t0));
    th_sleep_ms(1500);
    for (int i = 0; i < FLOOD; i++) close(fds[i]);
    nlines = count_lines(W.log, "", NULL, 0);
    ck_assert_msg(nlines < 40, "%d log lines", nlines);
    ck_assert_int_le(count_lines(W.log, "web: accept", NULL, 0), 3);
    cJSON_Delete(get_json("/api/info", 200)); /* still serving */
}
END_TEST

/* A TCase of the suite with the usual fixture (one redis-server, one dtq-web). */
static TCase *api_case(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    suite_add_tcase(s, tc);
    return tc;
}

int main(void) {
    Suite *s = suite_create("web");
    TCase *tc = api_case(s, "reads"); /* the read model as the page gets it */
    tcase_add_test(tc, test_overview_states_and_rates);
    tcase_add_test(tc, test_queue_view);
    tcase_add_test(tc, test_task_view);
    tcase_add_test(tc, test_dlq_paging_and_filter);
    tcase_add_test(tc, test_scheduled_list_and_filters);
    tcase_add_test(tc, test_task_attempts_without_events_stream);
    tcase_add_test(tc, test_cron);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_metrics);
    tc = api_case(s, "writes"); /* the admin actions, the token and read-only mode */
    tcase_add_test(tc, test_writes_refused_when_read_only);
    tcase_add_test(tc, test_writes_refused_without_the_token);
    tcase_add_test(tc, test_writes_with_the_token);
    tcase_add_test(tc, test_bulk_writes_refused);
    tcase_add_test(tc, test_bulk_writes_with_the_token);
    tcase_add_test(tc, test_bad_input_and_methods);
    tc = api_case(s, "events"); /* the server-sent event streams */
    tcase_add_test(tc, test_event_stream);
    tcase_add_test(tc, test_event_streams_evict_oldest);
    tc = api_case(s, "guards"); /* who may ask: hosts, tokens, floods, slow clients */
    tcase_add_test(tc, test_host_check_refuses_foreign_names);
    tcase_add_test(tc, test_allowed_hosts);
    tcase_add_test(tc, test_read_token);
    tcase_add_test(tc, test_wrong_tokens_logged_rate_limited);
    tcase_add_test(tc, test_healthz_under_idle_flood);
    tcase_add_test(tc, test_slow_client_cut_at_deadline);
    tcase_add_test(tc, test_connection_flood_under_fd_limit);
    tc = api_case(s, "process"); /* the program: its command line, unit and warnings */
    tcase_add_test(tc, test_command_line);
    tcase_add_test(tc, test_systemd_unit_and_ready);
    tcase_add_test(tc, test_non_loopback_bind_warns);
    tc = tcase_create("acl"); /* a TCP server: an ACL user is named in the URL */
    tcase_add_checked_fixture(tc, setup_tcp, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_acl_refusal_is_403_not_404);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
