/* it_cluster_daemon.c: dtq-worker on a local Redis Cluster (3 primaries, 3 replicas) in the
 * cluster layout: nine queues whose tags land on every shard, two daemons; tasks enqueued
 * by FCALL with the queue's tag and by raw XADD run, a retryable failure retries, an
 * exhausted one dead-letters, a delayed task waits its delay; every task ends once; a
 * SIGKILLed daemon's tasks are adopted by the other; a namespace laid out for a single
 * Redis (cluster_hash_tag) is refused at start. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "harness.h"

static th_cluster CL;
static th_redis R; /* CL's directory and URL, for th_daemon_start */

#define NQ 9
static const char *Q[NQ] = {"q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"};

#define HANDLERS                                                                                   \
    "[handler:echo]\nbuiltin = echo\n[handler:sleep]\nbuiltin = sleep\n"                           \
    "[handler:fail]\nbuiltin = fail\n[handler:flaky]\nbuiltin = flaky\n"
#define CRON "[cron:tick]\nspec = @every 1s\nqueue = q3\ntask_type = echo\n"
#define FAST                                                                                       \
    "[retry]\nbase_delay = 0.2\nmax_delay = 0.5\njitter = 0\n"                                     \
    "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"                                      \
    "[limits]\nevents_stream_maxlen = 100000\n"

static void cluster_setup(void) {
    th_cluster_start(&CL, 3, 1);
    R = CL.node[0];
    snprintf(R.dir, sizeof(R.dir), "%s", CL.dir);
    snprintf(R.url, sizeof(R.url), "%s", CL.url);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* A command on the primary that serves key's slot. */
static redisReply *at(const char *key, const char *fmt, ...) {
    int port = th_cluster_owner_port(&CL, key);
    redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
    redisReply *r;
    va_list ap;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "no reply from %d", port);
    redisFree(c);
    return r;
}

static char *field(const char *q, const char *id, const char *name) {
    char key[256];
    redisReply *r;
    char *out = NULL;
    if (snprintf(key, sizeof(key), "{dtq:%s}:task:%s", q, id) >= (int)sizeof(key)) return NULL;
    r = at(key, "HGET %s %s", key, name);
    if (r->type == REDIS_REPLY_STRING) out = strdup(r->str);
    freeReplyObject(r);
    return out;
}

static int wait_status(const char *q, const char *id, const char *want, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        char *st = field(q, id, "status");
        int ok = st && !strcmp(st, want);
        free(st);
        if (ok) return 1;
        th_sleep_ms(50);
    }
    return 0;
}

static void expect_status(const char *q, const char *id, const char *want, int timeout_ms) {
    if (!wait_status(q, id, want, timeout_ms)) {
        char *st = field(q, id, "status");
        ck_abort_msg("task %s of %s: status %s, want %s", id, q, st ? st : "(none)", want);
    }
}

static long long num_field(const char *q, const char *id, const char *name) {
    char *v = field(q, id, name);
    long long n = v ? atoll(v) : -1;
    free(v);
    return n;
}

/* FCALL dtq_enqueue 1 {dtq:q} q type payload task_id id [opts], on the queue's node. */
static void enqueue(const char *q, const char *id, const char *type, const char *payload,
                    const char *opts) {
    char tag[64], cmd[512];
    redisReply *r;
    snprintf(tag, sizeof(tag), "{dtq:%s}", q);
    snprintf(cmd, sizeof(cmd), "FCALL dtq_enqueue 1 %s %s %s %%s task_id %s %s", tag, q, type, id,
             opts ? opts : "");
    r = at(tag, cmd, payload);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue %s: %s", id, r->str ? r->str : "?");
    freeReplyObject(r);
}

/* The terminal events of task id in its queue's events stream. */
static int terminal_events(const char *q, const char *id) {
    char key[128], needle[160];
    redisReply *r;
    int n = 0;
    snprintf(key, sizeof(key), "{dtq:%s}:stream:events", q);
    snprintf(needle, sizeof(needle), "\"task_id\":\"%s\"", id);
    r = at(key, "XRANGE %s - +", key);
    for (size_t i = 0; i < r->elements; i++) {
        const char *ev = r->element[i]->element[1]->element[1]->str;
        if (strstr(ev, needle) &&
            (strstr(ev, "\"TASK_SUCCEEDED\"") || strstr(ev, "\"TASK_FAILED\"") ||
             strstr(ev, "\"TASK_DEAD_LETTERED\"")))
            n++;
    }
    freeReplyObject(r);
    return n;
}

static void start_daemon(th_daemon *d, const char *id, const char *extra) {
    char ini[4096];
    int64_t end;
    snprintf(
        ini, sizeof(ini),
        "[worker]\nworker_id = %s\nqueues = q1,q2,q3,q4,q5,q6,q7,q8,q9\nconcurrency = 4\n"
        "heartbeat_interval_s = 1\nvisibility_timeout_s = 3\ndrain_timeout_s = 5\n%s\n" FAST CRON
            HANDLERS,
        id, extra ? extra : "");
    th_daemon_start(d, &R, ini);
    end = th_now_ms() + 20000;
    for (;;) {
        char key[128];
        redisReply *r;
        int ok;
        snprintf(key, sizeof(key), "{dtq}:worker:%s", id);
        r = at(key, "HGET %s status", key);
        ok = r->type == REDIS_REPLY_STRING && !strcmp(r->str, "running");
        freeReplyObject(r);
        if (ok) return;
        ck_assert_msg(th_now_ms() < end, "worker %s did not become ready (log %s)", id, d->log);
        th_sleep_ms(50);
    }
}

START_TEST(test_daemons_serve_every_shard) {
    th_daemon a, b;
    int shard_seen[TH_CLUSTER_MAX] = {0}, shards = 0;
    char raw[NQ][128], id[64];
    int64_t lat[NQ];

    for (int i = 0; i < NQ; i++) {
        char tag[64];
        int port;
        snprintf(tag, sizeof(tag), "{dtq:%s}", Q[i]);
        port = th_cluster_owner_port(&CL, tag);
        if (!shard_seen[th_cluster_node_index(&CL, port)]++) shards++;
        printf("queue %s: slot %d, node %d\n", Q[i], dtq_cluster_keyslot(tag, strlen(tag)), port);
    }
    ck_assert_int_eq(shards, 3);

    start_daemon(&a, "w-a", NULL);
    start_daemon(&b, "w-b", NULL);
    {
        redisReply *r = at("{dtq}", "GET {dtq}:layout");
        ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "cluster"), "marker");
        freeReplyObject(r);
        r = at("{dtq}", "SCARD {dtq}:queues");
        ck_assert_int_eq(r->integer, NQ);
        freeReplyObject(r);
        r = at("{dtq:q5}", "HGET {dtq:q5}:config events_stream_maxlen");
        ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "100000"), "config copy");
        freeReplyObject(r);
    }

    /* idle enqueue-to-start latency: both daemons idle (polling at its slowest) */
    th_sleep_ms(1500);
    for (int i = 0; i < NQ; i++) {
        snprintf(id, sizeof(id), "lat-%d", i);
        enqueue(Q[i], id, "echo", "{}", NULL);
        expect_status(Q[i], id, "succeeded", 5000);
        lat[i] = num_field(Q[i], id, "started_at") - num_field(Q[i], id, "created_at");
        printf("enqueue to start, idle, queue %s: %lld ms\n", Q[i], (long long)lat[i]);
        ck_assert_int_lt(lat[i], 1000);
        th_sleep_ms(300);
    }

    for (int i = 0; i < NQ; i++) {
        char key[128];
        redisReply *r;
        for (int k = 0; k < 5; k++) {
            snprintf(id, sizeof(id), "e-%s-%d", Q[i], k);
            enqueue(Q[i], id, "echo", "{\"k\":1}", NULL);
        }
        snprintf(id, sizeof(id), "r-%s", Q[i]);
        enqueue(Q[i], id, "flaky", "{\"succeed_on\":2}", NULL);
        snprintf(id, sizeof(id), "f-%s", Q[i]);
        enqueue(Q[i], id, "fail", "{\"retryable\":true}", "max_attempts 2");
        snprintf(id, sizeof(id), "d-%s", Q[i]);
        enqueue(Q[i], id, "echo", "{}", "delay_ms 1000");
        snprintf(key, sizeof(key), "{dtq:%s}:stream:%s:p5", Q[i], Q[i]);
        r = at(key, "XADD %s * task_type echo payload %s", key, "[1,2]");
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        snprintf(raw[i], sizeof(raw[i]), "%s:p5:%s", Q[i], r->str);
        freeReplyObject(r);
    }
    for (int i = 0; i < NQ; i++) {
        for (int k = 0; k < 5; k++) {
            snprintf(id, sizeof(id), "e-%s-%d", Q[i], k);
            expect_status(Q[i], id, "succeeded", 10000);
            ck_assert_int_eq(num_field(Q[i], id, "attempt"), 1);
            ck_assert_int_eq(terminal_events(Q[i], id), 1);
        }
        expect_status(Q[i], raw[i], "succeeded", 10000);
        ck_assert_int_eq(num_field(Q[i], raw[i], "attempt"), 1);
        ck_assert_int_eq(terminal_events(Q[i], raw[i]), 1);
        snprintf(id, sizeof(id), "r-%s", Q[i]);
        expect_status(Q[i], id, "succeeded", 10000);
        ck_assert_int_eq(num_field(Q[i], id, "attempt"), 2);
        ck_assert_int_eq(terminal_events(Q[i], id), 1);
        snprintf(id, sizeof(id), "f-%s", Q[i]);
        expect_status(Q[i], id, "dead_lettered", 10000);
        ck_assert_int_eq(num_field(Q[i], id, "attempt"), 2);
        ck_assert_int_eq(terminal_events(Q[i], id), 1);
        snprintf(id, sizeof(id), "d-%s", Q[i]);
        expect_status(Q[i], id, "succeeded", 10000);
        ck_assert_int_eq(num_field(Q[i], id, "attempt"), 1);
        ck_assert_int_ge(num_field(Q[i], id, "started_at") - num_field(Q[i], id, "created_at"),
                         1000);
        ck_assert_int_eq(terminal_events(Q[i], id), 1);
        {
            char key[128];
            redisReply *r;
            snprintf(key, sizeof(key), "{dtq:%s}:stream:dead-letter", Q[i]);
            r = at(key, "XLEN %s", key);
            ck_assert_int_eq(r->integer, 1);
            freeReplyObject(r);
        }
    }

    /* the config's periodic task, written on its queue's slot, fires there: a task of q3
     * that ran, and the schedule's last fire moving on */
    {
        redisReply *r;
        char *tid = NULL;
        int64_t end = th_now_ms() + 5000;
        while (!tid && th_now_ms() < end) {
            r = at("{dtq:q3}", "HGET {dtq:q3}:cron:q3:tick last_task_id");
            if (r->type == REDIS_REPLY_STRING && *r->str) tid = strdup(r->str);
            freeReplyObject(r);
            if (!tid) th_sleep_ms(100);
        }
        ck_assert_msg(tid != NULL, "the periodic task never fired");
        expect_status("q3", tid, "succeeded", 5000);
        free(tid);
        r = at("{dtq:q3}", "HEXISTS {dtq:q3}:crons tick");
        ck_assert_int_eq(r->integer, 1);
        freeReplyObject(r);
    }

    /* SIGKILL one daemon with tasks running: the other adopts them */
    for (int i = 0; i < NQ; i++) {
        snprintf(id, sizeof(id), "s-%s", Q[i]);
        enqueue(Q[i], id, "sleep", "{\"ms\":1500}", NULL);
    }
    {
        int64_t end = th_now_ms() + 5000;
        int on_a = 0;
        while (!on_a && th_now_ms() < end) {
            for (int i = 0; i < NQ && !on_a; i++) {
                char *w, *st;
                snprintf(id, sizeof(id), "s-%s", Q[i]);
                w = field(Q[i], id, "worker_id");
                st = field(Q[i], id, "status");
                on_a = w && st && !strcmp(w, "w-a") && !strcmp(st, "running");
                free(w);
                free(st);
            }
            if (!on_a) th_sleep_ms(20);
        }
        ck_assert_msg(on_a, "no sleep task ran on w-a");
    }
    th_stop_child(a.pid, SIGKILL);
    {
        int adopted = 0;
        for (int i = 0; i < NQ; i++) {
            char *w;
            snprintf(id, sizeof(id), "s-%s", Q[i]);
            expect_status(Q[i], id, "succeeded", 30000);
            w = field(Q[i], id, "worker_id");
            ck_assert_str_eq(w, "w-b");
            free(w);
            if (num_field(Q[i], id, "attempt") == 2) adopted++;
            ck_assert_int_eq(terminal_events(Q[i], id), 1);
        }
        printf("tasks adopted from the killed daemon: %d\n", adopted);
        ck_assert_int_ge(adopted, 1);
    }
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 15000), 0);
    {
        /* the drained daemon left {dtq}:workers */
        redisReply *r = at("{dtq}", "SISMEMBER {dtq}:workers w-b");
        ck_assert_int_eq(r->integer, 0);
        freeReplyObject(r);
    }
}
END_TEST

/* The shards are fetched concurrently: with the first served queue's primary paused
 * (CLIENT PAUSE: the fetch sent to it gets no answer for 2 s), a task of the second queue,
 * on another shard, still starts at once. A serial fetch would hold it until the pause
 * ends. */
START_TEST(test_stalled_shard_does_not_hold_others) {
    th_daemon d;
    char ini[2048], stalled[16] = "", other[16] = "", tag[64];
    int sport = 0, oport = 0;
    int64_t pause_at, lat;
    redisReply *r;
    for (int i = 0; i < 100 && !*other; i++) { /* two queues on two shards */
        char name[16];
        int port;
        snprintf(name, sizeof(name), "st%d", i);
        snprintf(tag, sizeof(tag), "{dtq:%s}", name);
        port = th_cluster_owner_port(&CL, tag);
        if (!*stalled) {
            snprintf(stalled, sizeof(stalled), "%s", name);
            sport = port;
        } else if (port != sport) {
            snprintf(other, sizeof(other), "%s", name);
            oport = port;
        }
    }
    ck_assert_msg(*other, "no two queues on two shards");
    printf("stalled queue %s on %d, other queue %s on %d\n", stalled, sport, other, oport);
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-st\nqueues = %s,%s\nconcurrency = 4\n"
             "heartbeat_interval_s = 1\nvisibility_timeout_s = 10\ndrain_timeout_s = 5\n" HANDLERS,
             stalled, other);
    th_daemon_start(&d, &R, ini);
    /* both queues run (the daemon is up on both shards) */
    enqueue(stalled, "st-warm", "echo", "{}", NULL);
    enqueue(other, "ot-warm", "echo", "{}", NULL);
    expect_status(stalled, "st-warm", "succeeded", 20000);
    expect_status(other, "ot-warm", "succeeded", 20000);
    th_sleep_ms(300); /* idle: polling both shards */

    th_cluster_node_ok(&CL, sport, "CLIENT PAUSE 2000 ALL");
    pause_at = th_now_ms();
    th_sleep_ms(300); /* a fetch of the stalled queue is out and unanswered by now */
    enqueue(other, "ot-1", "echo", "{}", NULL);
    ck_assert_msg(wait_status(other, "ot-1", "succeeded", 1200),
                  "the other shard's task waited for the stalled shard");
    lat = num_field(other, "ot-1", "started_at") - num_field(other, "ot-1", "created_at");
    printf("other shard's task started %lld ms after its enqueue, %lld ms into the pause\n",
           (long long)lat, (long long)(th_now_ms() - pause_at));
    ck_assert_int_lt(lat, 1000);
    ck_assert_int_lt(th_now_ms() - pause_at, 1900); /* it ran while the pause held */

    /* the stalled shard is served again once the pause ends */
    th_sleep_ms(2000);
    enqueue(stalled, "st-1", "echo", "{}", NULL);
    expect_status(stalled, "st-1", "succeeded", 5000);
    ck_assert_int_eq(num_field(stalled, "st-1", "attempt"), 1);

    /* The stalled shard has a backlog, so its lane fetches again at once while the other's
     * is parked (it found nothing): such a lone fetch asks for no more than its shard's
     * share of the slots, so the other shard's task still finds one while it stalls. */
    {
        redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, sport));
        enum { BACKLOG = 20000 };
        snprintf(tag, sizeof(tag), "{dtq:%s}", stalled);
        for (int i = 0; i < BACKLOG; i++)
            redisAppendCommand(c, "FCALL dtq_enqueue 1 %s %s echo {}", tag, stalled);
        for (int i = 0; i < BACKLOG; i++) {
            ck_assert_int_eq(redisGetReply(c, (void **)&r), REDIS_OK);
            ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "backlog enqueue: %s", r->str);
            freeReplyObject(r);
        }
        redisFree(c);
    }
    th_cluster_node_ok(&CL, sport, "CLIENT PAUSE 2000 ALL");
    pause_at = th_now_ms();
    th_sleep_ms(300);
    enqueue(other, "ot-2", "echo", "{}", NULL);
    /* started (claimed) in time; its end is recorded once the stalled shard answers: the
     * finisher sends the next batches when every shard answered the last ones */
    {
        int started = 0;
        for (int64_t t0 = th_now_ms(); !started && th_now_ms() - t0 < 1200;) {
            char *v = field(other, "ot-2", "started_at");
            started = v != NULL;
            free(v);
            if (!started) th_sleep_ms(10);
        }
        ck_assert_msg(started, "the other shard's task waited for the stalled shard's lone fetch");
    }
    lat = num_field(other, "ot-2", "started_at") - num_field(other, "ot-2", "created_at");
    printf("with a backlog on the stalled shard: the other's task started %lld ms after its "
           "enqueue\n",
           (long long)lat);
    ck_assert_int_lt(lat, 1000);
    ck_assert_int_lt(th_now_ms() - pause_at, 1900);
    expect_status(other, "ot-2", "succeeded", 5000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
    r = at("{dtq}", "SISMEMBER {dtq}:workers w-st");
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);
}
END_TEST

/* A namespace laid out for a single Redis with cluster_hash_tag ({ns}:config, no layout
 * marker) on the cluster: a daemon with the cluster URL refuses to start and says why. */
/* Workflows on the cluster (issue 29): through dtqctl's cluster router, a batch in one
 * shard's queue and a chain in another's, each in its queue's slot, run by a daemon to the
 * batch's callback and the chain's last link; the batch list merged over the slots; a task
 * after a task of another queue is refused with the reason. */
START_TEST(test_workflows_on_the_cluster) {
    th_daemon a;
    char path[400], args[600], *out, *save = NULL, *last = NULL, *cb;
    FILE *f;
    th_path(&R, "members.txt", path, sizeof(path));
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 20; i++) fprintf(f, "%s {\"i\":%d}\n", i % 10 == 3 ? "fail" : "echo", i);
    fclose(f);
    snprintf(args, sizeof(args), "batch create q2 --id cb1 --on-complete echo < %s", path);
    ck_assert_int_eq(th_ctl(&R, &out, args), 0);
    ck_assert_msg(!strncmp(out, "batch cb1\n", 10), "%s", out);
    free(out);
    th_path(&R, "links.txt", path, sizeof(path));
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 5; i++) fprintf(f, "echo {\"link\":%d}\n", i);
    fclose(f);
    snprintf(args, sizeof(args), "chain q7 < %s", path);
    ck_assert_int_eq(th_ctl(&R, &out, args), 0);
    for (char *t = strtok_r(out, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) last = t;
    ck_assert_ptr_nonnull(last);
    last = strdup(last);
    free(out);
    /* a second batch in q7's slot: the list merges every queue's slot, or shows one's */
    th_path(&R, "two.txt", path, sizeof(path));
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "echo {}\necho {}\n");
    fclose(f);
    snprintf(args, sizeof(args), "batch create q7 --id cb2 < %s", path);
    ck_assert_int_eq(th_ctl(&R, &out, args), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "batch list --json"), 0);
    ck_assert_msg(strstr(out, "\"id\":\"cb1\"") && strstr(out, "\"id\":\"cb2\"") &&
                      strstr(out, "\"more\":false"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "batch list --queue q2"), 0);
    ck_assert_msg(strstr(out, "cb1") && !strstr(out, "cb2"), "%s", out);
    free(out);
    /* a task of q3 cannot wait for one of q7: another slot */
    snprintf(args, sizeof(args), "enqueue q3 echo {} --after %s", last);
    ck_assert_int_eq(th_ctl(&R, &out, args), 1);
    ck_assert_msg(strstr(out, "in the slot of queue q3 (cluster layout"), "%s", out);
    free(out);

    start_daemon(&a, "w-flow", NULL);
    expect_status("q7", last, "succeeded", 20000);
    for (int i = 0; i < 200; i++) {
        redisReply *r = at("{dtq:q2}", "HGET {dtq:q2}:batch:cb1 complete_task");
        int done = r->type == REDIS_REPLY_STRING;
        freeReplyObject(r);
        if (done) break;
        th_sleep_ms(100);
    }
    ck_assert_int_eq(th_ctl(&R, &out, "batch show cb1 --queue q2 --json"), 0);
    ck_assert_msg(strstr(out, "\"succeeded\":18") && strstr(out, "\"dead_lettered\":2") &&
                      strstr(out, "\"pending\":0"),
                  "%s", out);
    free(out);
    {
        redisReply *r = at("{dtq:q2}", "HGET {dtq:q2}:batch:cb1 complete_task");
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        cb = strdup(r->str);
        freeReplyObject(r);
    }
    expect_status("q2", cb, "succeeded", 20000);
    out = field("q7", last, "parent_results");
    ck_assert_ptr_nonnull(strstr(out, "{\"link\":3}"));
    free(out);
    free(cb);
    free(last);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_wrong_layout_refused) {
    char cfg[400], *out = NULL;
    FILE *f;
    int rc;
    redisReply *r = at("{single1}", "HSET {single1}:config max_payload_bytes 1000");
    freeReplyObject(r);
    snprintf(cfg, sizeof(cfg), "%s/wrong.ini", CL.dir);
    f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[redis]\nurl = %s\nnamespace = single1\n[worker]\nqueues = a,b\n" HANDLERS, CL.url);
    fclose(f);
    rc = th_run_worker(&out, "-c", cfg, NULL);
    ck_assert_msg(rc != 0, "exit 0: %s", out);
    ck_assert_msg(strstr(out, "WRONG_LAYOUT namespace single1 is laid out for a single Redis"),
                  "%s", out);
    free(out);
    /* nothing of the refused daemon was written: no queue index, no marker */
    r = at("{single1}", "EXISTS {single1}:queues {single1}:layout");
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cluster_daemon");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, test_wrong_layout_refused);
    tcase_add_test(tc, test_daemons_serve_every_shard);
    tcase_add_test(tc, test_stalled_shard_does_not_hold_others);
    tcase_add_test(tc, test_workflows_on_the_cluster);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
