/* it_web_cluster.c: dtq-web on a real local Redis Cluster of 3 primaries and 3 replicas
 * (th_cluster_start, once for the suite; the cases run in order and build on each other),
 * without a daemon: nine queues whose slots land on all three shards, filled by dtqctl
 * (tasks, delayed tasks, dead letters from `queue clear`). The overview's queues and totals
 * are the sums of each queue's own numbers; a task is read by id with ?queue= (400
 * without); cancel, pause and resume through the API land in the queue's slot; the dead
 * letters are one list over the queues, paged by cursor, and requeued; the schedule is
 * listed across queues; events of every shard reach one /api/events stream; a namespace
 * laid out for a single Redis is refused (API and /readyz); /readyz names the queues of a
 * primary that went away, and once its replica took over the stream still carries events. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

#include "cluster.h"

#define NQ 9
#define NS "wc"
#define TOKEN "it-web-cluster-token-0123456789abcdef-Zm9vYmFy"

static th_cluster CL;
static char Q[NQ][16]; /* three per shard, in shard order: Q[0..2], Q[3..5], Q[6..8] */
static th_daemon W;    /* dtq-web */
static int PORT;

/* Tasks enqueued into Q[i]: 1 + i % 3 of them, ids t<i>-<k>. */
#define TASKS(i) (1 + (i) % 3)
#define DELAYED_QUEUE 4 /* holds one delayed task too, "later" */
#define DLQ_A 2         /* cleared: their tasks become dead letters */
#define DLQ_B 7

/* ----------------------------------------------------------------- the cluster */

static void cluster_setup(void) {
    th_cluster_start(&CL, 3, 1);
    th_cluster_pick_queues(&CL, NS, 3, NQ / 3, Q);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* dtqctl -n <ns> <args> on the cluster URL; the exit code, the output in *out. */
static int ctl_ns(const char *ns, char **out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ctl_ns(const char *ns, char **out, const char *fmt, ...) {
    char env[sizeof(CL.url) + 32], args[2048], full[2100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", CL.url);
    snprintf(full, sizeof(full), "-n %s %s", ns, args);
    return th_run_dtqctl(&CL.node[0], out, env, full);
}

/* dtqctl -n NS that must exit 0. */
static void ctl_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ctl_ok(const char *fmt, ...) {
    char args[2048], *out;
    int rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    rc = ctl_ns(NS, &out, "%s", args);
    ck_assert_msg(rc == 0, "dtqctl %s: exit %d: %s", args, rc, out);
    free(out);
}

/* A connection to the primary that serves queue q's slot (the caller frees it). */
static redisContext *owner_of_queue(const char *q) {
    char tag[192];
    snprintf(tag, sizeof(tag), "{" NS ":%s}", q);
    return th_cluster_connect(&CL, th_cluster_node_index(&CL, th_cluster_owner_port(&CL, tag)));
}

/* HGET {NS:q}:task:<id> <field> on q's primary (caller frees; NULL when absent). */
static char *task_field(const char *q, const char *id, const char *field) {
    redisContext *c = owner_of_queue(q);
    redisReply *r = th_cmd(c, "HGET {" NS ":%s}:task:%s %s", q, id, field);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void assert_task_field(const char *q, const char *id, const char *field, const char *want) {
    char *v = task_field(q, id, field);
    ck_assert_msg(v && !strcmp(v, want), "%s of %s in %s: %s, want %s", field, id, q,
                  v ? v : "(none)", want);
    free(v);
}

/* ----------------------------------------------------------------- HTTP */

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
    char *body;
    cJSON *json;
} resp;

static void resp_free(resp *r) {
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof(*r));
}

/* One request on its own connection; the whole answer within 15 s. */
static resp http(const char *method, const char *path, const char *body) {
    resp r = {0, NULL, NULL};
    int fd = tcp_connect(PORT);
    char *req, *buf = NULL, *sep;
    size_t len = 0, cap = 0;
    int64_t end = th_now_ms() + 15000;
    int post = !strcmp(method, "POST");
    ck_assert_msg(fd >= 0, "cannot connect to dtq-web on port %d", PORT);
    if (asprintf(&req,
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                 "Content-Length: %zu\r\n\r\n%s",
                 method, path, post ? "Authorization: Bearer " TOKEN "\r\n" : "",
                 body ? strlen(body) : 0, body ? body : "") < 0)
        abort();
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    free(req);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        int64_t left = end - th_now_ms();
        ck_assert_msg(left > 0 && poll(&p, 1, (int)left) > 0, "%s %s: no answer", method, path);
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 131072;
            buf = realloc(buf, cap);
        }
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    ck_assert_msg(buf != NULL && len > 0, "%s %s: closed without an answer", method, path);
    buf[len] = '\0';
    sep = strstr(buf, "\r\n\r\n");
    ck_assert_msg(sep != NULL, "%s %s: no end of headers", method, path);
    ck_assert_int_eq(sscanf(buf, "HTTP/1.%*d %d", &r.status), 1);
    r.body = strdup(sep + 4);
    free(buf);
    r.json = cJSON_Parse(r.body);
    return r;
}

/* A request that must answer `status` with JSON; the parsed body (caller frees). */
static cJSON *req_json(const char *method, int status, const char *body, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static cJSON *req_json(const char *method, int status, const char *body, const char *fmt, ...) {
    char path[1024];
    resp r;
    cJSON *j;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    r = http(method, path, body);
    ck_assert_msg(r.status == status, "%s %s: want %d, got %d: %s", method, path, status, r.status,
                  r.body);
    ck_assert_msg(r.json != NULL, "%s %s: not JSON: %s", method, path, r.body);
    j = r.json;
    r.json = NULL;
    resp_free(&r);
    return j;
}

#define GET(status, ...) req_json("GET", status, NULL, __VA_ARGS__)
#define POST(status, body, ...) req_json("POST", status, body, __VA_ARGS__)

/* dtq-web -n ns on the cluster URL, with the token file; waits until it answers. */
static void start_web_ns(const char *ns) {
    char tok[400], cfg[400], log[400], listen[64];
    char *argv[10];
    FILE *f;
    PORT = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    th_path(&CL.node[0], "web.token", tok, sizeof(tok));
    th_path(&CL.node[0], "web.ini", cfg, sizeof(cfg));
    th_path(&CL.node[0], "web.log", log, sizeof(log));
    f = fopen(tok, "w");
    ck_assert(f != NULL);
    fputs(TOKEN "\n", f);
    fclose(f);
    chmod(tok, 0600);
    f = fopen(cfg, "w");
    ck_assert(f != NULL);
    fprintf(f, "[redis]\nurl = %s\nnamespace = %s\n[web]\nsample_interval_s = 1\n", CL.url, ns);
    fclose(f);
    argv[0] = (char *)DTQ_WEB_BIN;
    argv[1] = (char *)"-c";
    argv[2] = cfg;
    argv[3] = (char *)"--listen";
    argv[4] = listen;
    argv[5] = (char *)"--token-file";
    argv[6] = tok;
    argv[7] = NULL;
    th_process_start(&W, argv, log);
    for (int i = 0; i < 500; i++) {
        int fd = tcp_connect(PORT);
        if (fd >= 0) {
            close(fd);
            return;
        }
        th_sleep_ms(20);
    }
    ck_abort_msg("dtq-web did not listen; see %s", log);
}

/* GET /readyz: the status, the body in buf. */
static int readyz(char *buf, size_t cap) {
    resp r = http("GET", "/readyz", NULL);
    int st = r.status;
    snprintf(buf, cap, "%s", r.body);
    resp_free(&r);
    return st;
}

static int is_ready(void *arg) {
    char buf[1024];
    (void)arg;
    return readyz(buf, sizeof(buf)) == 200 && !strcmp(buf, "ready\n");
}

static void start_web(void) {
    start_web_ns(NS);
    ck_assert_msg(th_wait_until(is_ready, NULL, 10000), "dtq-web not ready; see %s", W.log);
}

static void setup(void) {
    memset(&W, 0, sizeof(W));
}

static void teardown(void) {
    if (W.pid > 0) ck_assert_int_eq(th_daemon_stop(&W, SIGTERM, 10000), 0);
}

/* ----------------------------------------------------------------- the world */

/* The library, then the tasks: TASKS(i) in Q[i], a delayed one in Q[DELAYED_QUEUE], and
 * the waiting tasks of Q[DLQ_A] and Q[DLQ_B] dead-lettered by queue clear. */
START_TEST(test_world) {
    char *out;
    int rc = ctl_ns(NS, &out, "functions install");
    ck_assert_msg(rc == 0 && strstr(out, "on 3 primaries"), "exit %d: %s", rc, out);
    free(out);
    for (int i = 0; i < NQ; i++)
        for (int k = 0; k < TASKS(i); k++) ctl_ok("enqueue %s echo '{}' --id t%d-%d", Q[i], i, k);
    ctl_ok("enqueue %s echo '{}' --id later --delay-ms 3600000", Q[DELAYED_QUEUE]);
    ctl_ok("enqueue %s echo '{}' --id soon --delay-ms 1800000", Q[7]);
    ctl_ok("queue clear %s", Q[DLQ_A]);
    ctl_ok("queue clear %s", Q[DLQ_B]);
    assert_task_field(Q[DLQ_A], "t2-0", "status", "dead_lettered");
    assert_task_field(Q[DLQ_B], "t7-0", "status", "dead_lettered");
}
END_TEST

/* The overview: the nine queues by name, each with its own depth (as dtqctl stats says),
 * the totals the sums; the scheduler's count is the delayed tasks of every queue; the dead
 * letters those of both cleared queues; /api/info says cluster. */
START_TEST(test_overview_sums) {
    cJSON *ov, *info, *st, *q;
    char *out;
    long long depth = 0, want_depth = 0;
    const char *prev = NULL;
    int rc;
    start_web();
    info = GET(200, "/api/info");
    ck_assert_str_eq(th_json_str(info, "layout"), "cluster");
    cJSON_Delete(info);
    rc = ctl_ns(NS, &out, "--json stats");
    ck_assert_msg(rc == 0, "stats: %s", out);
    st = cJSON_Parse(out);
    free(out);
    ov = GET(200, "/api/overview");
    ck_assert_int_eq(th_json_size(ov, "queues"), NQ);
    cJSON_ArrayForEach(q, cJSON_GetObjectItem(ov, "queues")) {
        const char *name = th_json_str(q, "name");
        char key[64];
        int i;
        for (i = 0; i < NQ && strcmp(Q[i], name); i++) continue;
        ck_assert_msg(i < NQ, "unknown queue %s", name);
        /* sorted by name, as on a single Redis */
        if (prev) ck_assert_msg(strcmp(prev, name) < 0, "%s before %s", prev, name);
        prev = name;
        snprintf(key, sizeof(key), "queues.%s.depth", name); /* stats --json: by queue */
        ck_assert_int_eq(th_json_int(q, "depth"), th_json_int(st, key));
        ck_assert_int_eq(th_json_int(q, "depth"),
                         (i == DLQ_A || i == DLQ_B) ? 0 : TASKS(i)); /* cleared: none */
        ck_assert_int_eq(th_json_size(q, "depth_by_band"), 10);
        ck_assert(cJSON_IsObject(cJSON_GetObjectItem(q, "totals")));
        depth += th_json_int(q, "depth");
    }
    for (int i = 0; i < NQ; i++)
        if (i != DLQ_A && i != DLQ_B) want_depth += TASKS(i);
    ck_assert_int_eq(depth, want_depth);
    ck_assert_int_eq(th_json_int(ov, "scheduler.scheduled"), 2);
    ck_assert_int_eq(th_json_int(ov, "scheduler.scheduled"), th_json_int(st, "scheduled"));
    ck_assert_int_eq(th_json_int(ov, "dlq.length"), TASKS(DLQ_A) + TASKS(DLQ_B));
    ck_assert_int_eq(th_json_int(ov, "dlq.length"), th_json_int(st, "dlq"));
    ck_assert_int_eq(th_json_size(ov, "workers"), 0);
    ck_assert_str_eq(th_json_str(ov, "namespace"), NS);
    cJSON_Delete(ov);
    cJSON_Delete(st);
}
END_TEST

/* The other merged views: /metrics (every queue's series, the dead letters summed), the
 * audit of both clears, and cron and limits (none yet) in their single-layout shapes. */
START_TEST(test_other_views) {
    resp m;
    cJSON *a, *e;
    const char *p;
    int n = 0, cleared = 0;
    char want[64];
    start_web();
    m = http("GET", "/metrics", NULL);
    ck_assert_int_eq(m.status, 200);
    for (p = strstr(m.body, "dtq_queue_paused{queue="); p;
         p = strstr(p + 1, "dtq_queue_paused{queue="))
        n++;
    ck_assert_int_eq(n, NQ);
    snprintf(want, sizeof(want), "dtq_dead_letter_length %d\n", TASKS(DLQ_A) + TASKS(DLQ_B));
    ck_assert_msg(strstr(m.body, want) != NULL, "no '%s' in %s", want, m.body);
    ck_assert_msg(strstr(m.body, "dtq_schedule_length 2\n") != NULL, "%s", m.body);
    resp_free(&m);
    a = GET(200, "/api/audit?count=500");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(a, "entries")) {
        if (!strcmp(th_json_str(e, "action"), "queue_clear")) cleared++;
    }
    ck_assert_int_eq(cleared, 2);
    cJSON_Delete(a);
    a = GET(200, "/api/audit?queue=%s", Q[DLQ_A]);
    ck_assert_int_eq(th_json_size(a, "entries"), 1);
    ck_assert_str_eq(th_json_str(a, "entries.0.queue"), Q[DLQ_A]);
    cJSON_Delete(a);
    a = GET(200, "/api/cron");
    ck_assert_int_eq(th_json_size(a, "schedules"), 0);
    cJSON_Delete(a);
    a = GET(404, "/api/cron/nightly");
    ck_assert_str_eq(th_json_str(a, "error"), "not_found");
    cJSON_Delete(a);
    a = GET(200, "/api/limits");
    ck_assert_int_eq(th_json_size(a, "limits"), 0);
    cJSON_Delete(a);
    /* batches: every queue's slot merged (none made here), or one queue's */
    a = GET(200, "/api/batches");
    ck_assert_int_eq(th_json_size(a, "batches"), 0);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(a, "more")));
    cJSON_Delete(a);
    a = GET(200, "/api/batches?queue=%s", Q[DLQ_A]);
    ck_assert_int_eq(th_json_size(a, "batches"), 0);
    cJSON_Delete(a);
    a = GET(400, "/api/batches?queue=bad%%20name");
    ck_assert_str_eq(th_json_str(a, "error"), "bad_request");
    cJSON_Delete(a);
}
END_TEST

/* A task by id names its queue: 200 with ?queue=, 400 without, 404 in another queue; a
 * queue's own view lists its waiting tasks. */
START_TEST(test_task_by_id) {
    cJSON *t, *e;
    start_web();
    t = GET(200, "/api/tasks/t5-1?queue=%s", Q[5]);
    ck_assert_str_eq(th_json_str(t, "id"), "t5-1");
    ck_assert_str_eq(th_json_str(t, "fields.queue"), Q[5]);
    ck_assert_str_eq(th_json_str(t, "status"), "queued");
    cJSON_Delete(t);
    e = GET(400, "/api/tasks/t5-1");
    ck_assert_str_eq(th_json_str(e, "error"), "bad_request");
    ck_assert_msg(strstr(th_json_str(e, "message"), "?queue=Q") != NULL, "%s",
                  th_json_str(e, "message"));
    cJSON_Delete(e);
    e = GET(404, "/api/tasks/t5-1?queue=%s", Q[4]);
    ck_assert_str_eq(th_json_str(e, "error"), "not_found");
    cJSON_Delete(e);
    t = GET(200, "/api/queues/%s", Q[8]);
    ck_assert_int_eq(th_json_size(t, "waiting"), TASKS(8));
    ck_assert_str_eq(th_json_str(t, "waiting.0.task_id"), "t8-0");
    cJSON_Delete(t);
}
END_TEST

/* Cancel and pause through the API land in the queue's slot. */
START_TEST(test_cancel_and_pause) {
    cJSON *r, *ov, *q;
    redisContext *c;
    redisReply *x;
    start_web();
    r = POST(400, NULL, "/api/tasks/t0-0/cancel");
    cJSON_Delete(r);
    r = POST(200, NULL, "/api/tasks/t0-0/cancel?queue=%s", Q[0]);
    ck_assert_str_eq(th_json_str(r, "result"), "cancelled");
    cJSON_Delete(r);
    assert_task_field(Q[0], "t0-0", "status", "cancelled");

    r = POST(200, NULL, "/api/queues/%s/pause", Q[3]);
    ck_assert_str_eq(th_json_str(r, "result"), "paused");
    cJSON_Delete(r);
    c = owner_of_queue(Q[3]);
    x = th_cmd(c, "EXISTS {" NS ":%s}:queue:%s:paused", Q[3], Q[3]);
    ck_assert_int_eq(x->integer, 1);
    freeReplyObject(x);
    ov = GET(200, "/api/overview");
    cJSON_ArrayForEach(q, cJSON_GetObjectItem(ov, "queues")) {
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItem(q, "paused")),
                         !strcmp(th_json_str(q, "name"), Q[3]));
    }
    cJSON_Delete(ov);
    r = POST(200, NULL, "/api/queues/%s/resume", Q[3]);
    cJSON_Delete(r);
    x = th_cmd(c, "EXISTS {" NS ":%s}:queue:%s:paused", Q[3], Q[3]);
    ck_assert_int_eq(x->integer, 0);
    freeReplyObject(x);
    redisFree(c);
    r = POST(404, NULL, "/api/queues/nosuchqueue/pause");
    cJSON_Delete(r);
}
END_TEST

/* The schedule over every queue, soonest first; ?queue= narrows it to one queue. */
START_TEST(test_scheduled_across_queues) {
    cJSON *s;
    start_web();
    s = GET(200, "/api/scheduled");
    ck_assert_int_eq(th_json_int(s, "total"), 2);
    ck_assert_int_eq(th_json_size(s, "entries"), 2);
    ck_assert_str_eq(th_json_str(s, "entries.0.task_id"), "soon");
    ck_assert_str_eq(th_json_str(s, "entries.1.task_id"), "later");
    ck_assert_str_eq(th_json_str(s, "entries.1.queue"), Q[DELAYED_QUEUE]);
    cJSON_Delete(s);
    s = GET(200, "/api/scheduled?count=1");
    ck_assert_int_eq(th_json_size(s, "entries"), 1);
    ck_assert_str_eq(th_json_str(s, "entries.0.task_id"), "soon");
    {
        char cursor[128];
        snprintf(cursor, sizeof(cursor), "%s", th_json_str(s, "next_cursor"));
        cJSON_Delete(s);
        s = GET(200, "/api/scheduled?count=1&cursor=%s", cursor);
    }
    ck_assert_int_eq(th_json_size(s, "entries"), 1);
    ck_assert_str_eq(th_json_str(s, "entries.0.task_id"), "later");
    cJSON_Delete(s);
    s = GET(200, "/api/scheduled?queue=%s", Q[DELAYED_QUEUE]);
    ck_assert_int_eq(th_json_size(s, "entries"), 1);
    ck_assert_str_eq(th_json_str(s, "entries.0.task_id"), "later");
    cJSON_Delete(s);
}
END_TEST

/* The dead letters of both cleared queues as one list, newest first; pages of 2 walk them
 * all once; requeue one by id with its queue, and the rest of a queue in bulk. */
START_TEST(test_dlq_list_and_requeue) {
    int total = TASKS(DLQ_A) + TASKS(DLQ_B), seen = 0, from_a = 0;
    char cursor[128] = "", ids[16][32];
    cJSON *d, *e;
    start_web();
    d = GET(200, "/api/dlq?count=500");
    ck_assert_int_eq(th_json_int(d, "total"), total);
    ck_assert_int_eq(th_json_size(d, "entries"), total);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(d, "next_cursor")));
    {
        const char *prev = NULL;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(d, "entries")) {
            const char *id = th_json_str(e, "entry_id");
            if (prev) ck_assert_msg(strcmp(prev, id) >= 0 || strlen(prev) > strlen(id), "order");
            prev = id;
            from_a += !strcmp(th_json_str(e, "queue"), Q[DLQ_A]);
        }
    }
    ck_assert_int_eq(from_a, TASKS(DLQ_A));
    cJSON_Delete(d);
    for (int page = 0; page < 10; page++) {
        d = GET(200, "/api/dlq?count=2%s%s", *cursor ? "&cursor=" : "", cursor);
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(d, "entries")) {
            ck_assert_int_lt(seen, 16);
            snprintf(ids[seen], sizeof(ids[seen]), "%s", th_json_str(e, "task_id"));
            for (int k = 0; k < seen; k++) ck_assert_str_ne(ids[k], ids[seen]);
            seen++;
        }
        if (cJSON_IsNull(cJSON_GetObjectItem(d, "next_cursor"))) {
            cJSON_Delete(d);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", th_json_str(d, "next_cursor"));
        cJSON_Delete(d);
    }
    ck_assert_int_eq(seen, total);

    d = POST(200, NULL, "/api/tasks/t2-0/requeue?queue=%s", Q[DLQ_A]);
    ck_assert_str_eq(th_json_str(d, "result"), "queued");
    cJSON_Delete(d);
    assert_task_field(Q[DLQ_A], "t2-0", "status", "queued");
    d = POST(400, "{\"ids\":[\"t7-0\"]}", "/api/dlq/requeue");
    cJSON_Delete(d);
    d = POST(200, "{\"ids\":[\"t7-0\",\"t7-1\"]}", "/api/dlq/requeue?queue=%s", Q[DLQ_B]);
    ck_assert_int_eq(th_json_int(d, "counts.queued"), 2);
    cJSON_Delete(d);
    assert_task_field(Q[DLQ_B], "t7-1", "status", "queued");
    d = GET(200, "/api/dlq");
    ck_assert_int_eq(th_json_int(d, "total"), total - 3);
    cJSON_Delete(d);
    /* requeue-all goes over every queue */
    d = POST(200, NULL, "/api/dlq/requeue-all");
    ck_assert_int_eq(th_json_int(d, "requeued"), total - 3);
    cJSON_Delete(d);
    d = GET(200, "/api/dlq");
    ck_assert_int_eq(th_json_int(d, "total"), 0);
    cJSON_Delete(d);
}
END_TEST

/* ----------------------------------------------------------------- events */

/* The subscribers of {NS}:events summed over the primaries, and the port of one that has. */
static int subscribers(int *port) {
    int n = 0;
    for (int i = 0; i < CL.n; i++) {
        redisContext *c;
        redisReply *r;
        if (CL.node[i].pid <= 0) continue;
        c = th_cluster_connect(&CL, i);
        r = redisCommand(c, "PUBSUB NUMSUB {" NS "}:events");
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer > 0) {
            n += (int)r->element[1]->integer;
            if (port) *port = CL.node[i].port;
        }
        if (r) freeReplyObject(r);
        redisFree(c);
    }
    return n;
}

static int one_subscriber(void *arg) {
    return subscribers(arg) == 1;
}

/* An /api/events stream: the connection, its answer's head read into buf. */
static int events_open(char *buf, size_t cap) {
    const char *req = "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    int fd = tcp_connect(PORT);
    ck_assert(fd >= 0);
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    ck_assert(th_read_until(fd, "\r\n\r\n", 5000, buf, cap));
    ck_assert(strstr(buf, "200") && strstr(buf, "text/event-stream"));
    return fd;
}

/* Enqueues one task into a queue of each shard; each's TASK_QUEUED reaches the stream. */
static void events_of_every_shard(int fd, char *buf, size_t cap, const char *tag) {
    for (int s = 0; s < 3; s++) {
        char id[64], needle[96];
        snprintf(id, sizeof(id), "%s-%d", tag, s);
        ctl_ok("enqueue %s echo '{}' --id %s", Q[3 * s + 1], id);
        snprintf(needle, sizeof(needle), "\"task_id\":\"%s\"", id);
        ck_assert_msg(th_read_until(fd, needle, 10000, buf, cap), "no event of %s (queue %s): %s",
                      id, Q[3 * s + 1], buf);
    }
}

START_TEST(test_events_from_every_shard) {
    char *buf = calloc(1, 1 << 20);
    int fd;
    start_web();
    fd = events_open(buf, 1 << 20);
    ck_assert_msg(th_wait_until(one_subscriber, NULL, 5000), "no subscriber");
    events_of_every_shard(fd, buf, 1 << 20, "ev");
    close(fd);
    free(buf);
}
END_TEST

/* ----------------------------------------------------------------- refusals, failures */

/* A namespace laid out for a single Redis: every read is refused with the Function's
 * WRONG_LAYOUT message, and /readyz says it. */
START_TEST(test_wrong_layout) {
    redisContext *c;
    redisReply *r;
    char buf[1024];
    cJSON *e;
    int port = th_cluster_owner_port(&CL, "{wcs}");
    c = th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
    r = th_cmd(c, "SET {wcs}:layout single");
    freeReplyObject(r);
    redisFree(c);
    {
        char *out;
        int rc = ctl_ns("wcs", &out, "functions install");
        ck_assert_msg(rc == 0, "install: %s", out);
        free(out);
    }
    start_web_ns("wcs");
    for (int i = 0; i < 250 && readyz(buf, sizeof(buf)) == 503 && !strstr(buf, "WRONG_LAYOUT"); i++)
        th_sleep_ms(20);
    ck_assert_msg(strstr(buf, "not ready: WRONG_LAYOUT namespace wcs is laid out for") != NULL,
                  "%s", buf);
    e = GET(503, "/api/overview");
    ck_assert_str_eq(th_json_str(e, "error"), "wrong_layout");
    ck_assert_msg(strstr(th_json_str(e, "message"), "WRONG_LAYOUT") != NULL, "%s",
                  th_json_str(e, "message"));
    cJSON_Delete(e);
}
END_TEST

static int names_the_queues(void *arg) {
    char buf[1024], want[192];
    (void)arg;
    if (readyz(buf, sizeof(buf)) != 503) return 0;
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof(want), "%s (slot ", Q[i]);
        if (!strstr(buf, want)) return 0;
    }
    return strstr(buf, "not ready: cannot reach ") == buf;
}

/* The primary the subscriber is on goes away: /readyz names the queues of that primary's
 * slots (among the index's) until its replica takes over; then ready again, and the stream
 * (its subscriber on another node now) carries the events of every shard. */
START_TEST(test_node_down_readyz_and_events) {
    char *buf = calloc(1, 1 << 20), tag[64];
    int fd, sub_port = 0, victim;
    start_web();
    fd = events_open(buf, 1 << 20);
    ck_assert_msg(th_wait_until(one_subscriber, &sub_port, 5000), "no subscriber");
    /* the primary of Q[0..2] holds the subscriber, or is made to: if it is elsewhere, that
     * node is the one stopped (the queues named are then that node's) */
    snprintf(tag, sizeof(tag), "{" NS ":%s}", Q[0]);
    victim = th_cluster_owner_port(&CL, tag);
    if (sub_port != victim) {
        /* order the queues so that Q[0..2] are the subscriber's node's */
        for (int s = 1; s < 3; s++) {
            snprintf(tag, sizeof(tag), "{" NS ":%s}", Q[3 * s]);
            if (th_cluster_owner_port(&CL, tag) == sub_port)
                for (int k = 0; k < 3; k++) {
                    char t[16];
                    memcpy(t, Q[k], sizeof(t));
                    memcpy(Q[k], Q[3 * s + k], sizeof(t));
                    memcpy(Q[3 * s + k], t, sizeof(t));
                }
        }
        victim = sub_port;
    }
    {
        int i = th_cluster_node_index(&CL, victim);
        ck_assert_int_eq(kill(CL.node[i].pid, SIGKILL), 0); /* the parent's child: it reaps */
        CL.node[i].pid = 0;
    }
    ck_assert_msg(th_wait_until(names_the_queues, NULL, 10000), "readyz did not name %s %s %s",
                  Q[0], Q[1], Q[2]);
    {
        /* the dashboard and the scrape answer at once with the live shards, and name the
         * queues of the one down (issue 27.9): not 503 after the command timeout */
        int64_t t0 = th_now_ms();
        resp o = http("GET", "/api/overview", NULL), m;
        char want[128];
        ck_assert_msg(o.status == 200, "overview: %d %s", o.status, o.body);
        ck_assert_msg(th_now_ms() - t0 < 3000, "overview took %lld ms",
                      (long long)(th_now_ms() - t0));
        for (int k = 0; k < 3; k++) {
            snprintf(want, sizeof(want), "\"%.60s\"", Q[k]);
            ck_assert_msg(strstr(o.body, "\"unreachable\":[") &&
                              strstr(strstr(o.body, "\"unreachable\":["), want),
                          "%s not named unreachable: %s", Q[k], o.body);
        }
        ck_assert_int_eq(th_json_size(o.json, "queues"), NQ - 3); /* the live shards' */
        resp_free(&o);
        m = http("GET", "/metrics", NULL);
        ck_assert_int_eq(m.status, 200);
        snprintf(want, sizeof(want), "dtq_part_unreachable{part=\"%.60s\"} 1\n", Q[0]);
        ck_assert_msg(strstr(m.body, want) != NULL, "no '%s' in %s", want, m.body);
        resp_free(&m);
    }
    ck_assert_msg(th_wait_until(is_ready, NULL, 30000), "not ready again after the failover");
    /* the stream's connection stays; its subscriber moved to a node still up */
    ck_assert_msg(th_wait_until(one_subscriber, &sub_port, 10000), "no subscriber after failover");
    ck_assert_int_ne(sub_port, victim);
    events_of_every_shard(fd, buf, 1 << 20, "after");
    close(fd);
    free(buf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("web_cluster");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_world);
    tcase_add_test(tc, test_overview_sums);
    tcase_add_test(tc, test_other_views);
    tcase_add_test(tc, test_task_by_id);
    tcase_add_test(tc, test_cancel_and_pause);
    tcase_add_test(tc, test_scheduled_across_queues);
    tcase_add_test(tc, test_dlq_list_and_requeue);
    tcase_add_test(tc, test_events_from_every_shard);
    tcase_add_test(tc, test_wrong_layout);
    tcase_add_test(tc, test_node_down_readyz_and_events);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
