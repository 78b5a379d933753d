/* it_faults.c: faults beyond crashes, each against a real redis-server: a reload that
 * drops a queue whose tasks run, a scheduler leader that dies holding claims, a reload
 * that turns the scheduler off, a Redis that is demoted to a replica, and an eviction
 * policy that could lose tasks. Nothing may be lost, run twice, or failed by them. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "proxy.h"

static th_redis R;
static redisContext *C;

#define HANDLERS "[handler:sleep]\nbuiltin = sleep\n[handler:echo]\nbuiltin = echo\n"
#define RELOADED "SIGHUP: configuration reloaded"

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

static int pending_count_of(const char *queue) {
    int n = 0;
    for (int band = 0; band < 10; band++) {
        redisReply *r = th_cmd(C, "XPENDING dtq:stream:%s:p%d workers", queue, band);
        if (r->type == REDIS_REPLY_ARRAY) n += (int)r->element[0]->integer;
        freeReplyObject(r);
    }
    return n;
}

/* Worker `id` on R with `worker_ini` (a [worker] section's extra keys) and `extra`. */
static void start(th_daemon *d, const char *id, const char *worker_ini, const char *extra,
                  int wait) {
    char ini[4096];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\nvisibility_timeout_s = 3\n%s\n"
             "%s\n" HANDLERS,
             id, worker_ini ? worker_ini : "", extra ? extra : "");
    th_daemon_start(d, &R, ini);
    if (wait) th_daemon_wait_ready(C, id, 10000);
}

static void rewrite(const th_daemon *d, const char *id, const char *worker_ini, const char *extra) {
    FILE *f = fopen(d->cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "[redis]\nurl = %s\n[worker]\nworker_id = %s\nheartbeat_interval_s = 1\n"
            "visibility_timeout_s = 3\n%s\n%s\n" HANDLERS,
            R.url, id, worker_ini ? worker_ini : "", extra ? extra : "");
    fclose(f);
}

static int exists(const char *key) {
    return (int)th_int(th_cmd(C, "EXISTS %s", key));
}

/* A reload that stops serving a queue must not stop renewing the claims of its tasks that
 * still run here: the lease renews by each run's own stream, so no other worker's reaper
 * takes them and runs them again. */
START_TEST(test_reload_dropping_a_queue_keeps_its_running_claims) {
    th_daemon a, b;
    start(&a, "w-a", "queues = qa, qb", NULL, 1);
    th_enqueue(C, "qb", "long", "sleep", "{\"ms\":7000}", NULL);
    th_expect_status(C, "long", "running", 5000);
    th_assert_field(C, "long", "worker_id", "w-a");
    rewrite(&a, "w-a", "queues = qa", NULL);
    kill(a.pid, SIGHUP);
    ck_assert(th_wait_log(a.log, RELOADED, 1, 5000));
    start(&b, "w-b", "queues = qb", NULL, 1); /* its reaper looks every 1.5 s */
    th_expect_status(C, "long", "succeeded", 15000);
    th_assert_field(C, "long", "attempt", "1");
    th_assert_field(C, "long", "worker_id", "w-a");
    ck_assert_int_eq(th_count_in_file(b.log, "adopted"), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
}
END_TEST

/* A leader that dies between its claim and its promote leaves the batch in
 * retry:claimed; the next leader returns such claims at once instead of after
 * claim_timeout_ms (60 s). */
START_TEST(test_new_leader_promotes_stranded_claims_at_once) {
    th_daemon d;
    redisReply *t;
    long long now_ms;
    th_load_library(C);
    th_enqueue(C, "default", "stranded", "echo", "{\"x\":1}", "delay_ms 600000");
    t = th_cmd(C, "TIME");
    now_ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    /* as the dead leader left it: out of the schedule, claimed just now */
    freeReplyObject(th_cmd(C, "ZREM dtq:retry:schedule stranded"));
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:claimed %lld stranded", now_ms));
    start(&d, "w-leader", NULL, NULL, 1);
    th_expect_status(C, "stranded", "succeeded", 10000);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_reload_turning_the_scheduler_off_releases_the_lock) {
    th_daemon d;
    char *log;
    start(&d, "w-sched", NULL, NULL, 1);
    ck_assert(th_wait_until_cmd_str(C, "GET dtq:lock:scheduler", "w-sched", 5000));
    rewrite(&d, "w-sched", NULL, "[scheduler]\nenabled = false\n[http]\nlisten = 127.0.0.1:1\n");
    kill(d.pid, SIGHUP);
    ck_assert(th_wait_log(d.log, RELOADED, 1, 5000));
    /* released now, not after leader_lock_ms (10 s) */
    ck_assert(th_wait_until_cmd_str(C, "EXISTS dtq:lock:scheduler", "0", 2000));
    log = th_read_file(d.log);
    ck_assert_ptr_nonnull(strstr(log, "[http] listen changes take effect only after a restart"));
    free(log);
    ck_assert_int_eq(exists("dtq:lock:scheduler"), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A primary demoted to a replica answers writes with READONLY: that is a connection
 * failure (reconnect with a growing backoff, no busy loop), and serving resumes once the
 * server is a primary again. */
START_TEST(test_readonly_replica_is_a_connection_failure) {
    th_daemon d;
    th_redis other;
    int lines;
    start(&d, "w-ro", NULL, NULL, 1);
    th_enqueue(C, "default", "before", "echo", "1", NULL);
    th_expect_status(C, "before", "succeeded", 5000);
    th_redis_start_tcp(&other, NULL, NULL);
    freeReplyObject(th_cmd(C, "REPLICAOF 127.0.0.1 %d", other.port));
    ck_assert_msg(th_wait_log(d.log, "server cannot serve", 1, 10000), "READONLY not noticed");
    th_sleep_ms(4000); /* deliberate: let the backoff show over a few seconds */
    lines = th_count_in_file(d.log, "server cannot serve");
    ck_assert_msg(lines <= 12, "%d reconnects in ~4 s: a busy loop", lines);
    freeReplyObject(th_cmd(C, "REPLICAOF NO ONE"));
    th_redis_stop(&other);
    /* the replica's sync emptied the data set: wait for the daemon to load its library */
    ck_assert(th_wait_until_cmd_str(C, "FUNCTION LIST LIBRARYNAME dtq", NULL, 15000));
    th_daemon_wait_ready(C, "w-ro", 15000);
    th_enqueue(C, "default", "after", "echo", "1", NULL);
    th_expect_status(C, "after", "succeeded", 10000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* allkeys-* may evict queued task hashes: the daemon does not serve under it, says why,
 * and starts serving once the policy is noeviction. volatile-* is served with a warning. */
START_TEST(test_eviction_policy_that_can_lose_tasks_is_refused) {
    th_daemon d;
    freeReplyObject(th_cmd(C, "CONFIG SET maxmemory-policy allkeys-lru"));
    start(&d, "w-evict", NULL, NULL, 0);
    ck_assert(th_wait_log(d.log, "maxmemory-policy is allkeys-lru", 1, 10000));
    th_load_library(C);
    th_enqueue(C, "default", "waits", "echo", "1", NULL);
    th_sleep_ms(1000); /* deliberate: nothing may run while the policy is refused */
    th_assert_field(C, "waits", "status", "queued");
    ck_assert_int_eq(exists("dtq:worker:w-evict"), 0);
    freeReplyObject(th_cmd(C, "CONFIG SET maxmemory-policy volatile-lru"));
    th_daemon_wait_ready(C, "w-evict", 15000);
    th_expect_status(C, "waits", "succeeded", 5000);
    ck_assert(th_wait_log(d.log, "maxmemory-policy is volatile-lru", 1, 1000));
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* Redis refusing writes while connected (OOM under noeviction): the worker keeps the
 * results it holds, keeps their entries claimed so no other worker adopts and re-runs
 * them, takes no new work, and writes the results once Redis accepts them. */
START_TEST(test_refused_finishes_are_held_and_their_claims_kept) {
    th_daemon a, b;
    char id[16];
    start(&a, "w-hold", "concurrency = 4", NULL, 1);
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "held%d", i);
        th_enqueue(C, "default", id, "sleep", "{\"ms\":1500}", NULL);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "held%d", i);
        th_expect_status(C, id, "running", 5000);
    }
    start(&b, "w-other", "concurrency = 4", NULL, 1);
    freeReplyObject(th_cmd(C, "CONFIG SET maxmemory 1"));
    ck_assert_msg(th_wait_log(a.log, "finish batch refused by Redis; holding", 1, 10000),
                  "refusal not logged");
    th_sleep_ms(6000); /* deliberate: twice visibility_timeout_s with writes refused */
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "held%d", i);
        th_assert_field(C, id, "status", "running");
    }
    freeReplyObject(th_cmd(C, "CONFIG SET maxmemory 0"));
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "held%d", i);
        th_expect_status(C, id, "succeeded", 10000);
        th_assert_field(C, id, "attempt", "1");
        th_assert_field(C, id, "worker_id", "w-hold");
    }
    ck_assert(th_wait_log(a.log, "finish batches accepted again", 1, 5000));
    ck_assert_int_eq(th_count_in_file(b.log, "adopted"), 0);
    ck_assert_int_eq(pending_count_of("default"), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
}
END_TEST

/* The reply to a fetch is lost after Redis ran it (a liveness drop, a network cut): the
 * task it claimed is not left to a reaper with an extra attempt. With max_attempts = 1
 * it still runs, and succeeds, at attempt 1. */
START_TEST(test_lost_fetch_reply_runs_the_task_at_the_same_attempt) {
    th_redis tcp;
    th_proxy px;
    th_daemon d;
    redisContext *c;
    redisReply *r;
    char ini[512];
    th_redis_start_tcp(&tcp, NULL, NULL);
    c = th_connect(&tcp);
    th_load_library(c);
    r = th_cmd(c, "FCALL dtq_enqueue 0 default echo {} task_id once max_attempts 1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_proxy_start(&px, tcp.port, "dtq_fetch", 1);
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-cut\nheartbeat_interval_s = 1\nvisibility_timeout_s = 3\n"
             "[redis]\nurl = redis://127.0.0.1:%d\n" HANDLERS,
             px.port);
    th_daemon_start(&d, &tcp, ini);
    ck_assert_msg(th_wait_status(c, "once", "succeeded", 15000), "task did not succeed");
    r = th_cmd(c, "HMGET dtq:task:once attempt worker_id");
    ck_assert_str_eq(r->element[0]->str, "1");
    ck_assert_str_eq(r->element[1]->str, "w-cut");
    freeReplyObject(r);
    ck_assert(th_wait_log(
        d.log, "recovered 1 task(s) claimed by a fetch or reap whose reply was lost", 1, 1000));
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    th_proxy_stop(&px);
    redisFree(c);
    th_redis_stop(&tcp);
}
END_TEST

/* A process with a fixed worker_id that crashed and is restarted knows at once that the
 * attempts pending under its name are lost: they are adopted now, not after
 * visibility_timeout_s. */
START_TEST(test_restart_with_a_fixed_id_recovers_its_own_attempts_at_once) {
    th_daemon d;
    char ini[256];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-fixed\nvisibility_timeout_s = 600\n" HANDLERS);
    th_daemon_start(&d, &R, ini);
    th_daemon_wait_ready(C, "w-fixed", 10000);
    th_enqueue(C, "default", "crashy", "sleep", "{\"ms\":60000}", NULL);
    th_expect_status(C, "crashy", "running", 5000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGKILL, 5000), 128 + SIGKILL);
    th_daemon_start(&d, &R, ini);
    /* requeued as attempt 2 at once; visibility_timeout_s would take ten minutes */
    ck_assert(th_wait_until_cmd_str(C, "HGET dtq:task:crashy attempt", "2", 10000));
    th_expect_status(C, "crashy", "running", 10000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGKILL, 5000), 128 + SIGKILL);
}
END_TEST

static int consumers_named(const char *stream, const char *name) {
    redisReply *r = th_cmd(C, "XINFO CONSUMERS %s workers", stream);
    int n = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        if (!strcmp(r->element[i]->element[1]->str, name)) n++;
    freeReplyObject(r);
    return n;
}

static int dead_consumer_gone(void *arg) {
    return consumers_named("dtq:stream:default:p5", arg) == 0 &&
           th_int(th_cmd(C, "SISMEMBER dtq:workers %s", (const char *)arg)) == 0;
}

/* Nothing grows with every deploy or crash: a stopped worker leaves the consumer groups
 * and the workers set; a dead one is pruned once its heartbeat expired and it holds
 * nothing; a rejected raw entry keeps no more than max_payload_bytes of its payload. */
START_TEST(test_workers_and_consumers_do_not_accumulate) {
    th_daemon a, b, c;
    start(&a, "w-stops", NULL, NULL, 1);
    th_enqueue(C, "default", "g1", "echo", "1", NULL);
    th_expect_status(C, "g1", "succeeded", 5000);
    ck_assert_int_eq(consumers_named("dtq:stream:default:p5", "w-stops"), 1);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
    ck_assert_int_eq(consumers_named("dtq:stream:default:p5", "w-stops"), 0);
    ck_assert_int_eq(consumers_named("dtq:stream:default:p9", "w-stops"), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:workers w-stops")), 0);

    start(&b, "w-dies", NULL, NULL, 1);
    th_enqueue(C, "default", "g2", "echo", "1", NULL);
    th_expect_status(C, "g2", "succeeded", 5000);
    ck_assert_int_eq(th_daemon_stop(&b, SIGKILL, 5000), 128 + SIGKILL);
    start(&c, "w-prunes", NULL, NULL, 1);
    /* heartbeat expiry (3 s) + idle beyond visibility_timeout_s (3 s) + a reap cycle */
    ck_assert_msg(th_wait_until(dead_consumer_gone, (void *)"w-dies", 15000),
                  "dead worker not pruned");
    /* a live worker's idle consumer stays (Redis 7.0 creates it on its first delivery) */
    th_enqueue(C, "default", "g3", "echo", "1", NULL);
    th_expect_status(C, "g3", "succeeded", 5000);
    th_sleep_ms(5000); /* deliberate: idle beyond visibility_timeout_s, reaps in between */
    ck_assert_int_eq(consumers_named("dtq:stream:default:p5", "w-prunes"), 1);

    {
        size_t big = 2 * 1024 * 1024;
        char *payload = malloc(big + 1);
        redisReply *r;
        char id[128];
        memset(payload, 'x', big);
        payload[big] = 0;
        r = th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload %s", payload);
        snprintf(id, sizeof(id), "default:p5:%s", r->str);
        freeReplyObject(r);
        free(payload);
        th_expect_status(C, id, "dead_lettered", 5000);
        ck_assert_int_le(th_int(th_cmd(C, "HSTRLEN dtq:task:%s payload", id)), 262144);
        r = th_cmd(C, "XREVRANGE dtq:stream:dead-letter + - COUNT 1");
        for (size_t i = 0; i + 1 < r->element[0]->element[1]->elements; i += 2) {
            const redisReply *k = r->element[0]->element[1]->element[i];
            const redisReply *v = r->element[0]->element[1]->element[i + 1];
            if (!strcmp(k->str, "payload")) ck_assert_int_le(v->len, 262144);
            if (!strcmp(k->str, "last_error"))
                ck_assert_ptr_nonnull(strstr(v->str, "payload kept truncated"));
        }
        freeReplyObject(r);
        ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    }
    ck_assert_int_eq(th_daemon_stop(&c, SIGTERM, 10000), 0);
}
END_TEST

typedef struct link_poll {
    redisContext *c;
} link_poll;

static int replica_linked(void *arg) {
    redisReply *r = th_cmd(((link_poll *)arg)->c, "INFO replication");
    int up = r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up") != NULL;
    freeReplyObject(r);
    return up;
}

/* [redis] wait_replicas: each finish batch is followed by WAIT, and the next batch leaves
 * only once a replica has it (or wait_timeout_ms passed: a warning, and it goes on). */
START_TEST(test_wait_for_a_replica_after_each_finish_batch) {
    th_redis primary, replica;
    th_daemon d;
    redisContext *p, *rc;
    link_poll lp;
    char ini[512], id[16];
    th_redis_start_tcp(&primary, NULL, NULL);
    th_redis_start(&replica, 0);
    p = th_connect(&primary);
    rc = th_connect(&replica);
    freeReplyObject(th_cmd(rc, "REPLICAOF 127.0.0.1 %d", primary.port));
    lp.c = rc;
    ck_assert(th_wait_until(replica_linked, &lp, 10000));
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-wait\n[redis]\nwait_replicas = 1\nwait_timeout_ms = 1500\n"
             "[handler:echo]\nbuiltin = echo\n");
    th_daemon_start(&d, &primary, ini);
    th_daemon_wait_ready(p, "w-wait", 10000);
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof(id), "w%d", i);
        freeReplyObject(th_cmd(p, "FCALL dtq_enqueue 0 default echo {} task_id %s", id));
    }
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof(id), "w%d", i);
        ck_assert(th_wait_status(p, id, "succeeded", 10000));
        ck_assert(th_wait_status(rc, id, "succeeded", 5000)); /* on the replica too */
    }
    ck_assert_int_eq(th_count_in_file(d.log, "replica(s) within"), 0);
    /* without a replica every batch still completes, after wait_timeout_ms, with a warning */
    th_redis_stop(&replica);
    freeReplyObject(th_cmd(p, "FCALL dtq_enqueue 0 default echo {} task_id alone"));
    ck_assert(th_wait_status(p, "alone", "succeeded", 10000));
    ck_assert(th_wait_log(d.log, "reached 0 of 1 replica(s) within 1500 ms", 1, 5000));
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    redisFree(rc);
    redisFree(p);
    th_redis_stop(&primary);
}
END_TEST

static int pending_count(void) {
    redisReply *r = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
    int n = (int)r->element[0]->integer;
    freeReplyObject(r);
    return n;
}

static int sixty_pending(void *arg) {
    (void)arg;
    return pending_count() == 60;
}

/* A lost worker's entries behind 60 live ones in the pending list: recovery depends
 * neither on free slots (the reaper examines a minimum every cycle and requeues what it
 * cannot run) nor on the first COUNT x 10 pending entries (the scan cursor is kept). */
START_TEST(test_reaper_finds_lost_entries_behind_live_ones) {
    th_daemon a, b;
    char id[16];
    int64_t t0;
    start(&a, "w-full", "concurrency = 60", NULL, 1);
    for (int i = 0; i < 60; i++) {
        snprintf(id, sizeof(id), "live%d", i);
        th_enqueue(C, "default", id, "sleep", "{\"ms\":25000}", NULL);
    }
    ck_assert(th_wait_until(sixty_pending, NULL, 10000));
    start(&b, "w-free", "concurrency = 4", NULL, 1);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 default"));
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "lost%d", i);
        th_enqueue(C, "default", id, "echo", "1", NULL);
    }
    /* a worker that claims five and dies (its fetch ignores the pause: another key) */
    redisReply *r = th_cmd(C, "FCALL dtq_fetch 11 dtq:nopause dtq:stream:default:p9 "
                              "dtq:stream:default:p8 dtq:stream:default:p7 dtq:stream:default:p6 "
                              "dtq:stream:default:p5 dtq:stream:default:p4 dtq:stream:default:p3 "
                              "dtq:stream:default:p2 dtq:stream:default:p1 dtq:stream:default:p0 "
                              "dead-w 5 {} default");
    th_fetch_claims(r);
    ck_assert_int_eq(r->element[0]->elements, 5);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 default"));
    t0 = th_now_ms();
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "lost%d", i);
        /* visibility_timeout_s (3) plus a few seconds; the live tasks run for 25 */
        th_expect_status(C, id, "succeeded", (int)(12000 - (th_now_ms() - t0)));
        th_assert_field(C, id, "attempt", "2");
    }
    th_assert_field(C, "live0", "attempt", "1");
    th_assert_field(C, "live59", "worker_id", "w-full");
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGKILL, 10000), 128 + SIGKILL);
}
END_TEST

/* Redis away for longer than visibility_timeout_s (a restart with a long load, a
 * failover): no worker could renew its claims meanwhile, so an entry's idle time says
 * nothing about its worker. The worker that reconnects first must not take the running
 * attempt of one that reconnects two seconds later (here held back with SIGSTOP): its
 * reaper waits visibility_timeout_s after a reconnect, and the other renews its claims as
 * soon as it is back. The task (max_attempts = 1) succeeds at attempt 1. */
START_TEST(test_redis_outage_does_not_make_live_workers_look_lost) {
    th_daemon a, b;
    redisFree(C); /* this one must survive a restart: appendonly */
    th_redis_stop(&R);
    th_redis_start(&R, 1);
    C = th_connect(&R);
    start(&a, "w-late", NULL, NULL, 1);
    th_enqueue(C, "default", "outlived", "sleep", "{\"ms\":12000}", "max_attempts 1");
    th_expect_status(C, "outlived", "running", 5000);
    start(&b, "w-early", NULL, NULL, 1);
    kill(a.pid, SIGSTOP);
    th_redis_stop(&R);
    ck_assert_msg(th_wait_log(b.log, "; reconnecting", 2, 5000), "loss of Redis not logged");
    th_sleep_ms(4000); /* deliberate: longer than visibility_timeout_s (3) */
    th_redis_restart(&R);
    redisFree(C);
    C = th_connect(&R);
    ck_assert(th_wait_log(b.log, "redis setup done after reconnect", 1, 15000));
    th_sleep_ms(2000); /* deliberate: w-early's reaper (every 1.5 s) looks while w-late is away */
    kill(a.pid, SIGCONT);
    th_expect_status(C, "outlived", "succeeded", 20000);
    th_assert_field(C, "outlived", "attempt", "1");
    th_assert_field(C, "outlived", "worker_id", "w-late");
    ck_assert_int_eq(pending_count_of("default"), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
}
END_TEST

/* An outage in which Redis kept its clock running (here Redis itself held with SIGSTOP
 * for longer than visibility_timeout_s, as in a network partition; a restart would reset
 * the idle times as the file is loaded), and the daemon that reaps first is a fresh
 * process started as Redis came back, with no reconnect of its own to wait after. Redis's
 * view decides: its first reap finds no reap for longer than visibility_timeout_s / 2 +
 * 2 s, so no reap adopts anything until visibility_timeout_s after it, whichever daemon
 * sends it; w-late (held back too) renews its claim when it is back within that time. The
 * task (max_attempts = 1) succeeds at attempt 1 on w-late; before, w-fresh adopted it at
 * its first reap and it was dead-lettered worker_lost. */
START_TEST(test_fresh_daemon_after_an_outage_does_not_take_live_work) {
    th_daemon a, b;
    start(&a, "w-late", NULL, NULL, 1);
    th_enqueue(C, "default", "outlived2", "sleep", "{\"ms\":9000}", "max_attempts 1");
    th_expect_status(C, "outlived2", "running", 5000);
    kill(a.pid, SIGSTOP);
    kill(R.pid, SIGSTOP);
    th_sleep_ms(4500); /* deliberate: longer than visibility_timeout_s (3) */
    kill(R.pid, SIGCONT);
    start(&b, "w-fresh", NULL, NULL, 1);
    th_sleep_ms(2000); /* deliberate: w-fresh's first reaps (1 s, then every 1.5 s) */
    kill(a.pid, SIGCONT);
    th_expect_status(C, "outlived2", "succeeded", 20000);
    th_assert_field(C, "outlived2", "attempt", "1");
    th_assert_field(C, "outlived2", "worker_id", "w-late");
    ck_assert_int_eq(pending_count_of("default"), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
}
END_TEST

/* Redis refusing writes while a daemon starts (OOM under noeviction): its setup is
 * refused command by command (Functions, config, one XGROUP CREATE per stream), and that
 * is one log line per try, not one per command. It serves once writes are accepted. */
START_TEST(test_refused_setup_is_logged_once_per_try) {
    th_daemon d;
    freeReplyObject(th_cmd(C, "CONFIG SET maxmemory 1"));
    start(&d, "w-oomstart", NULL, NULL, 0);
    ck_assert(th_wait_log(d.log, "redis setup failed", 1, 10000));
    th_sleep_ms(1000); /* deliberate: the refusals of the other setup commands come in */
    ck_assert_int_eq(th_count_in_file(d.log, "redis setup failed"), 1);
    freeReplyObject(th_cmd(C, "CONFIG SET maxmemory 0"));
    th_daemon_wait_ready(C, "w-oomstart", 15000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reload_dropping_a_queue_keeps_its_running_claims);
    tcase_add_test(tc, test_new_leader_promotes_stranded_claims_at_once);
    tcase_add_test(tc, test_reload_turning_the_scheduler_off_releases_the_lock);
    tcase_add_test(tc, test_readonly_replica_is_a_connection_failure);
    tcase_add_test(tc, test_eviction_policy_that_can_lose_tasks_is_refused);
    tcase_add_test(tc, test_reaper_finds_lost_entries_behind_live_ones);
    tcase_add_test(tc, test_refused_finishes_are_held_and_their_claims_kept);
    tcase_add_test(tc, test_lost_fetch_reply_runs_the_task_at_the_same_attempt);
    tcase_add_test(tc, test_restart_with_a_fixed_id_recovers_its_own_attempts_at_once);
    tcase_add_test(tc, test_workers_and_consumers_do_not_accumulate);
    tcase_add_test(tc, test_wait_for_a_replica_after_each_finish_batch);
    tcase_add_test(tc, test_redis_outage_does_not_make_live_workers_look_lost);
    tcase_add_test(tc, test_fresh_daemon_after_an_outage_does_not_take_live_work);
    tcase_add_test(tc, test_refused_setup_is_logged_once_per_try);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
