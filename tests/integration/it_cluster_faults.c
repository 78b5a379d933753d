/* it_cluster_faults.c: dtq-worker on a local Redis Cluster (3 primaries, 3 replicas) under
 * the cluster's own faults, with tasks flowing from a cluster-aware producer (follows MOVED
 * and ASK, retries TRYAGAIN, CLUSTERDOWN and lost links with the same task id) to two
 * daemons running an exec handler that logs every attempt it starts ("queue task attempt").
 * Every test ends with the same checks: every task enqueued ends succeeded with exactly one
 * terminal event, no (queue, task, attempt) started twice, nothing left pending.
 *
 * Tcase "faults" (ctest cluster_faults):
 *  - a queue's slot moved to another shard (SETSLOT IMPORTING/MIGRATING, MIGRATE in
 *    batches, SETSLOT NODE) while tasks flow: the daemons' ASK and MOVED counters move, the
 *    keys all moved, no Function ran half on each side;
 *  - CLUSTER FAILOVER from a replica, then a SIGKILLed primary (its writes paused and
 *    replicated first: what it acknowledged survives) with automatic failover: the daemons
 *    run tasks of those shards' queues again within 20 s;
 *  - one shard down (its primary and replica SIGKILLed): queues on the others keep running,
 *    the log and /readyz name the queues (and slots) that cannot be reached.
 * Tcase "chaos" (ctest cluster_chaos): a short seeded round of daemon kills, stops and
 * replacements and two failovers, with the same checks. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <hiredis/hiredis.h>
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

#include "cluster.h"
#include "harness.h"

static th_cluster CL;
static th_redis R; /* CL's directory and URL, for th_daemon_start */
static char HLOG[400], HSH[400];

#define NQ 9
static const char *Q[NQ] = {"q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"};

/* The handler: logs "queue task attempt" before anything else (one O_APPEND write), sleeps
 * the payload's ms, fails retryably (exit 75) while the attempt is below fail_below. */
static const char HANDLER_SH[] =
    "#!/bin/sh\n"
    "printf '%s %s %s\\n' \"$DTQ_QUEUE\" \"$DTQ_TASK_ID\" \"$DTQ_ATTEMPT\" >>\"$HLOG\"\n"
    "IFS= read -r p || true\n"
    "ms=${p#*\\\"ms\\\":}; ms=${ms%%[,\\}]*}\n"
    "f=${p#*\\\"fail_below\\\":}; f=${f%%[,\\}]*}\n"
    "if [ \"$ms\" -gt 0 ] 2>/dev/null; then sleep \"$((ms / 1000)).$(printf %03d $((ms % "
    "1000)))\"; fi\n"
    "if [ \"$DTQ_ATTEMPT\" -lt \"$f\" ] 2>/dev/null; then echo flaky >&2; exit 75; fi\n"
    "echo '{\"ok\":true}'\n";

static void cluster_setup(void) {
    FILE *f;
    th_cluster_start(&CL, 3, 1);
    R = CL.node[0];
    snprintf(R.dir, sizeof(R.dir), "%s", CL.dir);
    snprintf(R.url, sizeof(R.url), "%s", CL.url);
    snprintf(HLOG, sizeof(HLOG), "%s/handler.log", CL.dir);
    snprintf(HSH, sizeof(HSH), "%s/handler.sh", CL.dir);
    f = fopen(HSH, "w");
    ck_assert_ptr_nonnull(f);
    fputs(HANDLER_SH, f);
    fclose(f);
    chmod(HSH, 0755);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* ------------------------------------------------------------- a cluster-aware client */

static int alive(int i) {
    return CL.node[i].pid > 0 && kill(CL.node[i].pid, 0) == 0;
}

static redisContext *conns[TH_CLUSTER_MAX];
static int slot_port[DTQ_CLUSTER_SLOTS];

static redisContext *conn_of(int port) {
    int i = th_cluster_node_index(&CL, port);
    struct timeval tv = {3, 0};
    if (i < 0 || !alive(i)) return NULL;
    if (conns[i] && conns[i]->err) {
        redisFree(conns[i]);
        conns[i] = NULL;
    }
    if (!conns[i]) {
        conns[i] = redisConnectUnixWithTimeout(CL.node[i].sock, tv);
        if (!conns[i] || conns[i]->err) {
            if (conns[i]) redisFree(conns[i]);
            conns[i] = NULL;
            return NULL;
        }
        redisSetTimeout(conns[i], tv);
    }
    return conns[i];
}

static void drop_conns(void) {
    for (int i = 0; i < TH_CLUSTER_MAX; i++)
        if (conns[i]) {
            redisFree(conns[i]);
            conns[i] = NULL;
        }
}

/* The slot map from the first live node that answers CLUSTER SLOTS. */
static void refresh_map(void) {
    for (int i = 0; i < CL.n; i++) {
        redisContext *c;
        redisReply *r;
        if (!alive(i) || !(c = conn_of(CL.node[i].port))) continue;
        r = redisCommand(c, "CLUSTER SLOTS");
        if (r && r->type == REDIS_REPLY_ARRAY) {
            memset(slot_port, 0, sizeof(slot_port));
            for (size_t k = 0; k < r->elements; k++) {
                const redisReply *e = r->element[k];
                for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
                    slot_port[s] = (int)e->element[2]->element[1]->integer;
            }
            freeReplyObject(r);
            return;
        }
        if (r) freeReplyObject(r);
    }
}

/* A command routed by key's slot like a cluster client: MOVED (map read again), ASK (ASKING
 * first), TRYAGAIN, CLUSTERDOWN and lost links retried for up to 30 s. Returns the first
 * other reply (caller frees). fmt's arguments are the argv of redisCommandArgv. */
static redisReply *cl_argv(const char *key, int argc, const char **argv) {
    int slot = dtq_cluster_keyslot(key, strlen(key)), ask_port = 0;
    int64_t end = th_now_ms() + 30000;
    for (;;) {
        int port = ask_port ? ask_port : slot_port[slot];
        redisContext *c = port ? conn_of(port) : NULL;
        redisReply *r = NULL;
        dtq_cluster_redirect d;
        ck_assert_msg(th_now_ms() < end, "%s %s: no answer within 30 s", argv[0], key);
        if (c) {
            if (ask_port) freeReplyObject(redisCommand(c, "ASKING"));
            r = redisCommandArgv(c, argc, argv, NULL);
        }
        ask_port = 0;
        if (!r) {
            refresh_map();
            th_sleep_ms(100);
            continue;
        }
        if (r->type != REDIS_REPLY_ERROR) return r;
        switch (dtq_cluster_redirect_parse(r->str, &d)) {
        case DTQ_REDIRECT_MOVED:
            slot_port[d.slot] = d.port;
            refresh_map();
            break;
        case DTQ_REDIRECT_ASK: ask_port = d.port; break;
        default:
            if (strncmp(r->str, "TRYAGAIN", 8) && strncmp(r->str, "CLUSTERDOWN", 11) &&
                strncmp(r->str, "LOADING", 7) && strncmp(r->str, "MASTERDOWN", 10))
                return r;
            th_sleep_ms(50);
        }
        freeReplyObject(r);
    }
}

static redisReply *cl_cmd(const char *key, const char *fmt, ...) {
    char buf[1024], *argv[32], *save = NULL;
    int argc = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    for (char *t = strtok_r(buf, " ", &save); t && argc < 32; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    return cl_argv(key, argc, (const char **)argv);
}

/* ------------------------------------------------------------------ tasks and checks */

#define MAXT 2048
typedef struct ttask {
    int q;
    char id[48];
} ttask;
static ttask T[MAXT];
static int NT;

/* FCALL dtq_enqueue 1 {dtq:q} q ok {"ms":ms,"fail_below":f} task_id <id> [delay_ms d]. */
static void enqueue(int q, int ms, int fail_below, int delay_ms) {
    char tag[64], payload[96], delay[16];
    const char *argv[16];
    int argc = 0;
    redisReply *r;
    ttask *t;
    ck_assert_int_lt(NT, MAXT);
    t = &T[NT];
    t->q = q;
    snprintf(t->id, sizeof(t->id), "t%d-%s", NT, Q[q]);
    snprintf(tag, sizeof(tag), "{dtq:%s}", Q[q]);
    snprintf(payload, sizeof(payload), "{\"ms\":%d,\"fail_below\":%d}", ms, fail_below);
    snprintf(delay, sizeof(delay), "%d", delay_ms);
    argv[argc++] = "FCALL";
    argv[argc++] = "dtq_enqueue";
    argv[argc++] = "1";
    argv[argc++] = tag;
    argv[argc++] = Q[q];
    argv[argc++] = "ok";
    argv[argc++] = payload;
    argv[argc++] = "task_id";
    argv[argc++] = t->id;
    if (delay_ms > 0) {
        argv[argc++] = "delay_ms";
        argv[argc++] = delay;
    }
    r = cl_argv(tag, argc, argv);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY ||
                      (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ID_EXISTS", 9)),
                  "enqueue %s: %s", t->id, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    NT++;
}

static char *task_field(const ttask *t, const char *name) {
    char key[128];
    redisReply *r;
    char *out = NULL;
    snprintf(key, sizeof(key), "{dtq:%s}:task:%s", Q[t->q], t->id);
    r = cl_cmd(key, "HGET %s %s", key, name);
    if (r->type == REDIS_REPLY_STRING) out = strdup(r->str);
    freeReplyObject(r);
    return out;
}

/* Tasks from `from` on that are not succeeded yet (pipelined per node would be faster; the
 * counts are small). */
static int open_tasks(int from, char *first, size_t len) {
    int open = 0;
    for (int i = from; i < NT; i++) {
        char *st = task_field(&T[i], "status");
        if (!st || strcmp(st, "succeeded")) {
            if (!open && first) snprintf(first, len, "%s (%s)", T[i].id, st ? st : "no hash");
            open++;
        }
        free(st);
    }
    return open;
}

static void wait_all_succeeded(int from, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    char first[160] = "";
    int open;
    while ((open = open_tasks(from, first, sizeof(first))) > 0 && th_now_ms() < end)
        th_sleep_ms(200);
    ck_assert_msg(open == 0, "%d task(s) not succeeded after %d ms, e.g. %s", open, timeout_ms,
                  first);
}

/* Waits until task i has succeeded; returns when (ms since the epoch), or fails. */
static void wait_task(int i, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        char *st = task_field(&T[i], "status");
        int ok = st && !strcmp(st, "succeeded");
        free(st);
        if (ok) return;
        ck_assert_msg(th_now_ms() < end, "task %s did not succeed within %d ms", T[i].id,
                      timeout_ms);
        th_sleep_ms(50);
    }
}

/* The checks every test ends with (the single-Redis chaos run's, per queue): each task
 * succeeded, one terminal event each, no attempt started twice (handler.log), every attempt
 * that ended a task ran, nothing pending or left in the streams, schedules empty. Prints
 * one line per check. */
static void final_checks(void) {
    long long twice = 0, events_bad = 0, norun = 0, pending = 0, left = 0, sched = 0;
    char *log, *save = NULL, *line;
    char **seen = calloc((size_t)NT * 4 + 4096, sizeof(char *));
    int nseen = 0;
    ck_assert_ptr_nonnull(seen);
    wait_all_succeeded(0, 60000);
    log = th_read_file(HLOG);
    /* (queue, task, attempt) started twice */
    for (line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        for (int k = 0; k < nseen; k++)
            if (!strcmp(seen[k], line)) {
                twice++;
                fprintf(stderr, "attempt started twice: %s\n", line);
            }
        if (nseen < NT * 4 + 4096) seen[nseen++] = line;
    }
    for (int i = 0; i < NT; i++) {
        char want[128], *att = task_field(&T[i], "attempt");
        int ran = 0;
        snprintf(want, sizeof(want), "%s %s %s", Q[T[i].q], T[i].id, att ? att : "?");
        for (int k = 0; k < nseen && !ran; k++) ran = !strcmp(seen[k], want);
        if (!ran) {
            norun++;
            fprintf(stderr, "succeeded without a run of that attempt: %s\n", want);
        }
        free(att);
    }
    /* terminal events per task, from each queue's events stream */
    for (int q = 0; q < NQ; q++) {
        char key[128];
        redisReply *r;
        int *n = calloc((size_t)NT + 1, sizeof(int));
        snprintf(key, sizeof(key), "{dtq:%s}:stream:events", Q[q]);
        r = cl_cmd(key, "XRANGE %s - +", key);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        for (size_t e = 0; e < r->elements; e++) {
            const redisReply *f = r->element[e]->element[1];
            for (size_t j = 0; j + 1 < f->elements; j += 2) {
                const char *ev = f->element[j + 1]->str, *p = strstr(ev, "\"task_id\":\"t");
                if (strcmp(f->element[j]->str, "event") || !p) continue;
                if (strstr(ev, "\"TASK_SUCCEEDED\"") || strstr(ev, "\"TASK_FAILED\"") ||
                    strstr(ev, "\"TASK_DEAD_LETTERED\"")) {
                    int idx = atoi(p + strlen("\"task_id\":\"t"));
                    if (idx >= 0 && idx < NT) n[idx]++;
                }
            }
        }
        freeReplyObject(r);
        for (int i = 0; i < NT; i++)
            if (T[i].q == q && n[i] != 1) {
                events_bad++;
                fprintf(stderr, "task %s: %d terminal events\n", T[i].id, n[i]);
            }
        free(n);
        for (int b = 0; b < 10; b++) {
            snprintf(key, sizeof(key), "{dtq:%s}:stream:%s:p%d", Q[q], Q[q], b);
            r = cl_cmd(key, "XLEN %s", key);
            left += r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
            freeReplyObject(r);
            r = cl_cmd(key, "XPENDING %s workers", key);
            if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                r->element[0]->type == REDIS_REPLY_INTEGER)
                pending += r->element[0]->integer;
            freeReplyObject(r);
        }
        snprintf(key, sizeof(key), "{dtq:%s}:retry:schedule", Q[q]);
        r = cl_cmd(key, "ZCARD %s", key);
        sched += r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
        freeReplyObject(r);
    }
    printf("checks over %d tasks, %d attempts started: twice %lld, terminal events != 1 %lld, "
           "no run %lld, pending %lld, stream entries %lld, scheduled %lld\n",
           NT, nseen, twice, events_bad, norun, pending, left, sched);
    ck_assert_int_eq(twice, 0);
    ck_assert_int_eq(events_bad, 0);
    ck_assert_int_eq(norun, 0);
    ck_assert_int_eq(pending, 0);
    ck_assert_int_eq(left, 0);
    ck_assert_int_eq(sched, 0);
    free(seen);
    free(log);
}

/* ------------------------------------------------------------------------- daemons */

static void start_daemon(th_daemon *d, const char *id, int http_port) {
    char ini[4096], http[64] = "";
    int64_t end;
    if (http_port > 0) snprintf(http, sizeof(http), "[http]\nlisten = 127.0.0.1:%d\n", http_port);
    snprintf(ini, sizeof(ini),
             "connect_timeout_ms = 1000\n"
             "[worker]\nworker_id = %s\nqueues = q1,q2,q3,q4,q5,q6,q7,q8,q9\nconcurrency = 6\n"
             "heartbeat_interval_s = 1\nvisibility_timeout_s = 3\ndrain_timeout_s = 3\n"
             "[retry]\nbase_delay = 0.1\nmax_delay = 0.3\njitter = 0\ndefault_max_attempts = 10\n"
             "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"
             "[limits]\nevents_stream_maxlen = 1000000\n%s"
             "[handler:ok]\nexec = %s\nenv = HLOG=%s\ntimeout_ms = 20000\nmax_attempts = 10\n",
             id, http, HSH, HLOG);
    th_daemon_start(d, &R, ini);
    end = th_now_ms() + 30000;
    for (;;) {
        char key[128];
        redisReply *r;
        int ok;
        snprintf(key, sizeof(key), "{dtq}:worker:%s", id);
        r = cl_cmd(key, "HGET %s status", key);
        ok = r->type == REDIS_REPLY_STRING && !strcmp(r->str, "running");
        freeReplyObject(r);
        if (ok) return;
        ck_assert_msg(th_now_ms() < end, "worker %s did not become ready (log %s)", id, d->log);
        th_sleep_ms(50);
    }
}

/* GET path on 127.0.0.1:port: the status code; the body into body (may be NULL). */
static int http_get(int port, const char *path, char *body, size_t len) {
    struct sockaddr_in sa = {0};
    char req[128];
    static char buf[1 << 19];
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = 0;
    const char *b;
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        ck_assert_msg(poll(&p, 1, 5000) == 1, "no answer from %s", path);
        n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
        ck_assert_uint_lt(got, sizeof(buf) - 1);
    }
    close(fd);
    buf[got] = '\0';
    sscanf(buf, "HTTP/1.1 %d", &code);
    b = strstr(buf, "\r\n\r\n");
    if (body) snprintf(body, len, "%s", b ? b + 4 : "");
    return code;
}

/* A series' value in a /metrics body (the first line that starts with `series `). */
static long long metric(int port, const char *series) {
    static char body[1 << 19];
    char want[160];
    const char *p;
    ck_assert_int_eq(http_get(port, "/metrics", body, sizeof(body)), 200);
    snprintf(want, sizeof(want), "\n%s ", series);
    p = strstr(body, want);
    ck_assert_msg(p != NULL, "no %s in /metrics", series);
    return atoll(p + strlen(want));
}

/* ------------------------------------------------------------------ cluster topology */

static int queue_port(int q) {
    char tag[64];
    snprintf(tag, sizeof(tag), "{dtq:%s}", Q[q]);
    refresh_map();
    return slot_port[dtq_cluster_keyslot(tag, strlen(tag))];
}

/* The port of the replica of the primary on port (its CLUSTER NODES line says "slave <id>"). */
static int replica_of(int port) {
    char *id = th_cluster_node_id(&CL, port);
    int rport = 0;
    for (int i = 0; i < CL.n && !rport; i++) {
        redisContext *c;
        redisReply *r;
        if (!alive(i) || CL.node[i].port == port) continue;
        c = th_cluster_connect(&CL, i);
        r = th_cmd(c, "CLUSTER NODES");
        for (char *l = r->str, *save = NULL, *line; (line = strtok_r(l, "\n", &save)); l = NULL)
            if (strstr(line, "myself") && strstr(line, "slave") && strstr(line, id))
                rport = CL.node[i].port;
        freeReplyObject(r);
        redisFree(c);
    }
    free(id);
    ck_assert_msg(rport != 0, "no replica of %d", port);
    return rport;
}

static long long info_num(int port, const char *field) {
    redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
    redisReply *r = th_cmd(c, "INFO replication");
    const char *p = strstr(r->str, field);
    long long v = p ? atoll(p + strlen(field)) : -1;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* Waits until the node on port reports role:master in INFO replication. */
static int64_t wait_primary(int port, int timeout_ms) {
    int64_t t0 = th_now_ms(), end = t0 + timeout_ms;
    for (;;) {
        redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
        redisReply *r = th_cmd(c, "ROLE");
        int ok = r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[0]->str, "master");
        freeReplyObject(r);
        redisFree(c);
        if (ok) return th_now_ms() - t0;
        ck_assert_msg(th_now_ms() < end, "node %d not promoted within %d ms", port, timeout_ms);
        th_sleep_ms(50);
    }
}

/* SIGKILL of the node on port (tracked as gone). */
static void kill_node(int port) {
    int i = th_cluster_node_index(&CL, port);
    if (conns[i]) {
        redisFree(conns[i]);
        conns[i] = NULL;
    }
    th_stop_child(CL.node[i].pid, SIGKILL);
    CL.node[i].pid = 0;
}

/* The primary on port stops taking writes (CLIENT PAUSE WRITE), its replica catches up
 * with everything it acknowledged, then it is SIGKILLed: the automatic failover that
 * follows loses nothing a client was answered. */
static void pause_replicate_kill(int port, int rport) {
    int64_t end = th_now_ms() + 10000;
    long long off;
    th_cluster_node_ok(&CL, port, "CLIENT PAUSE 60000 WRITE");
    off = info_num(port, "master_repl_offset:");
    while (info_num(rport, "slave_repl_offset:") < off) {
        ck_assert_msg(th_now_ms() < end, "replica %d did not catch up", rport);
        th_sleep_ms(20);
    }
    kill_node(port);
}

/* Enqueues n tasks round-robin over the queues in `mask` (bit q), a short sleep each. */
static void produce(int n, unsigned mask, int ms, int gap_ms) {
    static int rr;
    for (int k = 0; k < n; k++) {
        int q;
        do q = rr++ % NQ;
        while (!(mask & (1u << q)));
        enqueue(q, ms, (NT % 7 == 3) ? 2 : 0, 0); /* every 7th fails its first attempt */
        if (gap_ms) th_sleep_ms(gap_ms);
    }
}

#define ALLQ 0x1ffu

static void reset_tasks(void) {
    NT = 0;
    drop_conns();
    refresh_map();
}

/* ------------------------------------------------------------------------- the tests */

/* A queue's slot moved to another shard while tasks flow, key batch by key batch. */
START_TEST(test_reshard_while_flowing) {
    th_daemon a, b;
    int pa = th_free_port(), pb = th_free_port(), src, dst, slot, third = 0, batches = 0;
    char tag[] = "{dtq:q1}", *sid, *did;
    long long ask, moved;
    int64_t t0;
    reset_tasks();
    start_daemon(&a, "w-a", pa);
    start_daemon(&b, "w-b", pb);
    slot = dtq_cluster_keyslot(tag, strlen(tag));
    src = queue_port(0);
    dst = th_cluster_other_primary(&CL, src);
    {
        redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, src));
        redisReply *r = th_cmd(c, "ROLE");
        ck_assert_str_eq(r->element[0]->str, "master");
        freeReplyObject(r);
        redisFree(c);
    }
    printf("reshard: q1 (slot %d) from %d to %d\n", slot, src, dst);
    /* tasks on every queue, some of q1 running and waiting */
    produce(60, ALLQ, 30, 0);
    produce(30, 1u, 100, 0);
    th_sleep_ms(300);

    t0 = th_now_ms();
    sid = th_cluster_node_id(&CL, src);
    did = th_cluster_node_id(&CL, dst);
    th_cluster_node_ok(&CL, dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, sid);
    th_cluster_node_ok(&CL, src, "CLUSTER SETSLOT %d MIGRATING %s", slot, did);
    for (;;) {
        redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, src));
        redisReply *keys = th_cmd(c, "CLUSTER GETKEYSINSLOT %d 8", slot), *r;
        const char *argv[16];
        char dport[16];
        int argc = 0;
        if (keys->elements == 0) {
            freeReplyObject(keys);
            redisFree(c);
            break;
        }
        snprintf(dport, sizeof(dport), "%d", dst);
        argv[argc++] = "MIGRATE";
        argv[argc++] = "127.0.0.1";
        argv[argc++] = dport;
        argv[argc++] = "";
        argv[argc++] = "0";
        argv[argc++] = "5000";
        argv[argc++] = "KEYS";
        for (size_t k = 0; k < keys->elements; k++) argv[argc++] = keys->element[k]->str;
        r = redisCommandArgv(c, argc, argv, NULL);
        ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "MIGRATE: %s", r ? r->str : c->errstr);
        freeReplyObject(r);
        freeReplyObject(keys);
        redisFree(c);
        if (batches++ == 0) {
            /* half moved: a Function call for the queue is not run on either side (the old
             * owner answers ASK, the new one TRYAGAIN after ASKING), where it would find half
             * the queue's keys */
            redisContext *cs = th_cluster_connect(&CL, th_cluster_node_index(&CL, src)),
                         *cd = th_cluster_connect(&CL, th_cluster_node_index(&CL, dst));
            const char *probe = "FCALL dtq_enqueue 1 {dtq:q1} q1 ok {} task_id probe";
            r = th_cmd(cs, probe);
            ck_assert_msg(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ASK ", 4), "%s",
                          r->str ? r->str : "not an error");
            freeReplyObject(r);
            freeReplyObject(th_cmd(cd, "ASKING"));
            r = th_cmd(cd, probe);
            ck_assert_msg(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "TRYAGAIN ", 9), "%s",
                          r->str ? r->str : "not an error");
            freeReplyObject(r);
            redisFree(cs);
            redisFree(cd);
        }
        /* tasks go on flowing between the batches: to q1 (TRYAGAIN until the move is
         * over, then on the new owner) and to the others */
        produce(2, ALLQ & ~1u, 20, 0);
        th_sleep_ms(60);
    }
    {
        dtq_cluster_map *m = th_cluster_map(&CL, th_cluster_node_index(&CL, dst));
        for (int k = 0; k < m->nprimaries; k++) {
            int p = m->nodes[m->primaries[k]].port;
            if (p != src && p != dst) third = p;
        }
        dtq_cluster_map_free(m);
    }
    th_cluster_node_ok(&CL, dst, "CLUSTER SETSLOT %d NODE %s", slot, did);
    th_cluster_node_ok(&CL, src, "CLUSTER SETSLOT %d NODE %s", slot, did);
    th_cluster_node_ok(&CL, third, "CLUSTER SETSLOT %d NODE %s", slot, did);
    printf("reshard: %d MIGRATE batches in %lld ms\n", batches, (long long)(th_now_ms() - t0));
    free(sid);
    free(did);
    produce(40, ALLQ, 20, 0);
    produce(20, 1u, 20, 0);

    final_checks();
    ck_assert_int_eq(queue_port(0), dst);
    {
        redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, src));
        redisReply *r = th_cmd(c, "CLUSTER COUNTKEYSINSLOT %d", slot);
        ck_assert_int_eq(r->integer, 0); /* every key of q1 moved */
        freeReplyObject(r);
        redisFree(c);
    }
    ask = metric(pa, "dtq_redis_cluster_redirections_total{kind=\"ask\"}") +
          metric(pb, "dtq_redis_cluster_redirections_total{kind=\"ask\"}");
    moved = metric(pa, "dtq_redis_cluster_redirections_total{kind=\"moved\"}") +
            metric(pb, "dtq_redis_cluster_redirections_total{kind=\"moved\"}");
    printf("reshard: the daemons followed %lld ASK and %lld MOVED\n", ask, moved);
    ck_assert_int_gt(ask, 0);
    ck_assert_int_gt(moved, 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 15000), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 15000), 0);
}
END_TEST

/* The first served queue on the primary on port. */
static int queue_on(int port) {
    for (int q = 0; q < NQ; q++)
        if (queue_port(q) == port) return q;
    ck_abort_msg("no queue on %d", port);
    return -1;
}

START_TEST(test_failovers) {
    th_daemon a, b;
    int pa = th_free_port(), pb = th_free_port(), p1, r1, p2, r2, q1, q2, i;
    int64_t t0, took;
    reset_tasks();
    start_daemon(&a, "w-a", pa);
    start_daemon(&b, "w-b", pb);
    /* two shards that do not hold {dtq} (so the heartbeats stay up), each with a queue */
    {
        char g[] = "{dtq}";
        int gport = slot_port[dtq_cluster_keyslot(g, strlen(g))];
        p1 = th_cluster_other_primary(&CL, gport);
        p2 = 0;
        for (int k = 0; k < NQ && !p2; k++) {
            int p = queue_port(k);
            if (p != gport && p != p1) p2 = p;
        }
        if (!p2) p2 = gport;
    }
    q1 = queue_on(p1);
    q2 = queue_on(p2);
    r1 = replica_of(p1);
    r2 = replica_of(p2);
    produce(60, ALLQ, 50, 0);

    /* 1. CLUSTER FAILOVER from the replica: the replica waits for every write of the
     * primary, so nothing is lost */
    produce(20, 1u << q1, 200, 0);
    t0 = th_now_ms();
    th_cluster_node_ok(&CL, r1, "CLUSTER FAILOVER");
    took = wait_primary(r1, 20000);
    printf("failover: %d promoted %lld ms after CLUSTER FAILOVER\n", r1, (long long)took);
    refresh_map();
    i = NT;
    enqueue(q1, 0, 0, 0);
    wait_task(i, 20000);
    printf("failover: a task of %s (on %d now) ran %lld ms after CLUSTER FAILOVER\n", Q[q1], r1,
           (long long)(th_now_ms() - t0));
    ck_assert_int_eq(queue_port(q1), r1);
    produce(30, ALLQ, 30, 0);

    /* 2. a primary SIGKILLed (its writes paused and replicated first) and its replica
     * promoted by the cluster (cluster-node-timeout 2000 ms) */
    produce(20, 1u << q2, 300, 0);
    th_sleep_ms(200);
    t0 = th_now_ms();
    pause_replicate_kill(p2, r2);
    took = wait_primary(r2, 20000);
    printf("failover: %d SIGKILLed, %d promoted %lld ms later\n", p2, r2, (long long)took);
    i = NT;
    enqueue(q2, 0, 0, 0);
    wait_task(i, 20000);
    took = th_now_ms() - t0;
    printf("failover: a task of %s (on %d now) ran %lld ms after the SIGKILL\n", Q[q2], r2,
           (long long)took);
    ck_assert_int_lt(took, 20000);
    produce(40, ALLQ, 30, 0);

    final_checks();
    ck_assert_int_gt(metric(pa, "dtq_redis_cluster_redirections_total{kind=\"moved\"}") +
                         metric(pb, "dtq_redis_cluster_redirections_total{kind=\"moved\"}") +
                         metric(pa, "dtq_redis_cluster_map_reads_total") +
                         metric(pb, "dtq_redis_cluster_map_reads_total"),
                     2);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 15000), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 15000), 0);
}
END_TEST

/* One shard down: the others go on, the daemon says what it cannot reach. */
START_TEST(test_one_shard_down) {
    th_daemon a;
    int pa = th_free_port(), down = 0, rdown, gport, ndown = 0;
    unsigned live = 0;
    char g[] = "{dtq}", body[1024], want[256] = "", logline[512];
    reset_tasks();
    start_daemon(&a, "w-a", pa);
    ck_assert_int_eq(http_get(pa, "/readyz", body, sizeof(body)), 200);
    gport = slot_port[dtq_cluster_keyslot(g, strlen(g))];
    down = th_cluster_other_primary(&CL, gport);
    for (int q = 0; q < NQ; q++) {
        if (queue_port(q) != down) {
            live |= 1u << q;
            continue;
        }
        ndown++;
    }
    ck_assert_int_gt(ndown, 0);
    produce(30, ALLQ, 20, 0);
    wait_all_succeeded(0, 30000);
    /* tasks of the doomed shard running when it goes: their results cannot be written */
    {
        int from = NT, running = 0;
        int64_t end = th_now_ms() + 10000;
        produce(3, ALLQ & ~live, 1500, 0);
        while (running < 3 && th_now_ms() < end) {
            running = 0;
            for (int i = from; i < NT; i++) {
                char *st = task_field(&T[i], "status");
                running += st && !strcmp(st, "running");
                free(st);
            }
            th_sleep_ms(50);
        }
        ck_assert_int_eq(running, 3);
        NT = from; /* not checked: lost with their shard */
    }
    rdown = replica_of(down);
    kill_node(rdown);
    kill_node(down);
    /* the queues of the other shards keep running: immediate, retried and delayed tasks,
     * neither the finisher (the dead shard's results held back) nor the scheduler's passes
     * waiting for the dead shard */
    {
        int from = NT;
        int64_t t0 = th_now_ms(), took;
        produce(40, live, 20, 0);
        for (int q = 0; q < NQ; q++)
            if (live & (1u << q)) enqueue(q, 0, 0, 500);
        wait_all_succeeded(from, 30000);
        took = th_now_ms() - t0;
        printf("shard down: %d tasks of the %d live queues done %lld ms after the kill\n",
               NT - from, NQ - ndown, (long long)took);
        ck_assert_int_lt(took, 4000);
    }
    /* the log and /readyz name the queues of the dead shard, and their slots */
    for (int q = 0, n = 0; q < NQ; q++) {
        char tag[64];
        if (live & (1u << q)) continue;
        snprintf(tag, sizeof(tag), "{dtq:%s}", Q[q]);
        n += snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s (slot %d)",
                      n ? ", " : "", Q[q], dtq_cluster_keyslot(tag, strlen(tag)));
    }
    snprintf(logline, sizeof(logline), "cannot reach the slot of %d served queue(s): %s", ndown,
             want);
    ck_assert_msg(th_wait_log(a.log, logline, 1, 15000), "no '%s' in %s", logline, a.log);
    ck_assert_int_eq(http_get(pa, "/readyz", body, sizeof(body)), 503);
    printf("shard down: /readyz: %s", body);
    ck_assert_msg(strstr(body, want) != NULL, "/readyz: %s, want %s", body, want);
    ck_assert_int_eq(metric(pa, "dtq_redis_cluster_unreachable_queues"), ndown);
    /* a drain cannot write the dead shard's results: it waits drain_timeout_s (3) and the
     * 15 s grace for the shard, then stops (their entries are the reaper's later) */
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 30000), 0);
    ck_assert_int_eq(th_count_in_file(a.log, "stopping without Redis"), 1);
}
END_TEST

/* ---------------------------------------------------------------- a short chaos round */

static unsigned long long rnd_state = 0x9e3779b97f4a7c15ULL;
static int rnd(int lo, int hi) {
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return lo + (int)(rnd_state % (unsigned long long)(hi - lo + 1));
}

START_TEST(test_chaos_round) {
    th_daemon d[3];
    int gen[3] = {0, 0, 0}, stopped[3] = {0, 0, 0}, kills = 0, stops = 0, failovers = 0;
    int64_t t0, end, next_fault, cont_at[3] = {0, 0, 0};
    char id[32];
    reset_tasks();
    for (int s = 0; s < 3; s++) {
        snprintf(id, sizeof(id), "c%dg0", s);
        start_daemon(&d[s], id, 0);
    }
    t0 = th_now_ms();
    end = t0 + 20000;
    next_fault = t0 + 1500;
    while (th_now_ms() < end) {
        int64_t now = th_now_ms();
        produce(3, ALLQ, rnd(0, 300), 0);
        for (int s = 0; s < 3; s++)
            if (stopped[s] && now >= cont_at[s]) {
                kill(d[s].pid, SIGCONT);
                stopped[s] = 0;
            }
        if (now >= next_fault) {
            int s = rnd(0, 2), k = rnd(0, 9);
            if (k < 4 && !stopped[s]) { /* SIGKILL and a replacement, new or same id */
                th_stop_child(d[s].pid, SIGKILL);
                if (rnd(0, 1)) gen[s]++;
                snprintf(id, sizeof(id), "c%dg%d", s, gen[s]);
                start_daemon(&d[s], id, 0);
                kills++;
            } else if (k < 7 && !stopped[s]) { /* SIGSTOP for a while */
                kill(d[s].pid, SIGSTOP);
                stopped[s] = 1;
                cont_at[s] = now + rnd(300, 4000);
                stops++;
            } else if (failovers < 2) { /* a replica takes over a shard that has queues */
                int p = queue_port(rnd(0, NQ - 1)), r = replica_of(p);
                th_cluster_node_ok(&CL, r, "CLUSTER FAILOVER");
                wait_primary(r, 20000);
                refresh_map();
                failovers++;
            }
            next_fault = th_now_ms() + rnd(800, 2000);
        }
        th_sleep_ms(100);
    }
    for (int s = 0; s < 3; s++)
        if (stopped[s]) kill(d[s].pid, SIGCONT);
    printf("chaos: %d tasks, %d daemon kills, %d stops, %d failovers in %lld ms\n", NT, kills,
           stops, failovers, (long long)(th_now_ms() - t0));
    final_checks();
    for (int s = 0; s < 3; s++) ck_assert_int_eq(th_daemon_stop(&d[s], SIGTERM, 15000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cluster_faults");
    TCase *tc = tcase_create("faults"), *tch = tcase_create("chaos");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, test_reshard_while_flowing);
    tcase_add_test(tc, test_failovers);
    tcase_add_test(tc, test_one_shard_down);
    suite_add_tcase(s, tc);
    tcase_set_timeout(tch, 240);
    tcase_add_checked_fixture(tch, cluster_setup, cluster_teardown);
    tcase_add_test(tch, test_chaos_round);
    suite_add_tcase(s, tch);
    return th_run_suite(s);
}
