/* it_sentinel.c: redis-sentinel:// against real processes on loopback: a primary, a
 * replica (--replicaof) and three redis-sentinel monitoring them (quorum 2,
 * down-after-milliseconds 1000, failover-timeout 3000), with config files written at
 * test time. Ports come from the pid (ten in a row, in 20000-29999), so parallel test
 * processes do not collide. The tls case gives every process a TLS port too
 * (rediss-sentinel://, certificates made by main() with the openssl CLI). The daemons and dtqctl
 * are given redis-sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>/m. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define NSENT 3

static th_redis P, R; /* the primary and the replica, as started */
static int sport[NSENT];
static int use_tls;     /* the tls case: every server also has a TLS port */
static char certs[64];  /* made by main() before the suite forks */
static int ptls, rtls;  /* TLS ports of the primary and the replica */
static int stls[NSENT]; /* ... and of the sentinels */
static pid_t spid[NSENT];
static char surl[256]; /* the sentinel URL */
static redisContext *CP;

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connection to 127.0.0.1:port with 2 s timeouts; NULL when it cannot connect. */
static redisContext *tcp(int port) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* SENTINEL get-master-addr-by-name m on sentinel i: the port, or 0. */
static int master_port(int i) {
    redisContext *c = tcp(sport[i]);
    redisReply *r;
    int port = 0;
    if (!c) return 0;
    r = redisCommand(c, "SENTINEL get-master-addr-by-name m");
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) port = atoi(r->element[1]->str);
    if (r) freeReplyObject(r);
    redisFree(c);
    return port;
}

static char ready_why[256]; /* what sentinel_ready saw last */

/* Sentinel i knows the replica (flags exactly "slave") and the other sentinels. */
static int sentinel_ready(void *arg) {
    int i = *(int *)arg, ok = 0;
    redisContext *c = tcp(sport[i]);
    redisReply *r;
    snprintf(ready_why, sizeof(ready_why), "cannot connect");
    if (!c) return 0;
    r = redisCommand(c, "SENTINEL replicas m");
    snprintf(ready_why, sizeof(ready_why), "replicas: %s",
             r && r->type == REDIS_REPLY_ERROR ? r->str : "none");
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        const redisReply *kv = r->element[0];
        for (size_t k = 0; k + 1 < kv->elements; k += 2)
            if (!strcmp(kv->element[k]->str, "flags")) {
                snprintf(ready_why, sizeof(ready_why), "replica flags %s", kv->element[k + 1]->str);
                ok = !strcmp(kv->element[k + 1]->str, "slave");
            }
    }
    if (r) freeReplyObject(r);
    r = ok ? redisCommand(c, "SENTINEL sentinels m") : NULL;
    if (r && r->type == REDIS_REPLY_ARRAY)
        snprintf(ready_why, sizeof(ready_why), "%zu other sentinel(s) known", r->elements);
    ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == NSENT - 1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

static int replica_linked(void *arg) {
    redisContext *c = tcp(*(int *)arg);
    redisReply *r;
    int ok;
    if (!c) return 0;
    r = redisCommand(c, "INFO replication");
    ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

static void start_sentinel(int i) {
    char conf[400], log[400], name[32];
    char *argv[] = {(char *)REDIS_SENTINEL_BIN, conf, NULL};
    FILE *f;
    snprintf(name, sizeof(name), "sentinel%d.conf", i);
    th_path(&P, name, conf, sizeof(conf));
    snprintf(name, sizeof(name), "sentinel%d.log", i);
    th_path(&P, name, log, sizeof(log));
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile \"\"\nloglevel notice\n"
            "sentinel monitor m 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds m 1000\n"
            "sentinel failover-timeout m 3000\n"
            "sentinel parallel-syncs m 1\n",
            sport[i], P.dir, use_tls ? ptls : P.port);
    if (use_tls) /* the test looks through the plain port, the daemon uses the TLS one */
        fprintf(f,
                "tls-port %d\ntls-cert-file %s/server.crt\ntls-key-file %s/server.key\n"
                "tls-ca-cert-file %s/ca.crt\ntls-auth-clients no\ntls-replication yes\n",
                stls[i], certs, certs, certs);
    fclose(f);
    spid[i] = th_spawn(argv, log);
    for (int k = 0; k < 200; k++) {
        redisContext *c = tcp(sport[i]);
        if (c) {
            redisFree(c);
            return;
        }
        th_sleep_ms(25);
    }
    {
        char *text = th_read_file(log);
        ck_abort_msg("redis-sentinel on port %d did not start: %s", sport[i], text);
    }
}

static void setup(void) {
    /* below the kernel's ephemeral ports (32768-60999: an outgoing connection could hold
     * one) and th_redis_start_tcp's (30000 and up) */
    int base = 20000 + (int)(getpid() % 1000) * 10;
    char extra[512], tls[400] = "";
    if (access(REDIS_SENTINEL_BIN, X_OK) != 0)
        ck_abort_msg("redis-sentinel not found at %s: run scripts/test, which installs it",
                     REDIS_SENTINEL_BIN);
    ptls = base + 5;
    rtls = base + 6;
    for (int i = 0; i < NSENT; i++) stls[i] = base + 7 + i;
    if (use_tls)
        snprintf(tls, sizeof(tls),
                 " --tls-cert-file %s/server.crt --tls-key-file %s/server.key --tls-ca-cert-file "
                 "%s/ca.crt --tls-auth-clients no --tls-replication yes",
                 certs, certs, certs);
    snprintf(extra, sizeof(extra), "%s%s%d", tls, use_tls ? " --tls-port " : "",
             use_tls ? ptls : 0);
    th_redis_start_port(&P, base, use_tls ? extra : NULL);
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d%s", use_tls ? ptls : base, tls);
    if (use_tls)
        snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), " --tls-port %d", rtls);
    th_redis_start_port(&R, base + 1, extra);
    ck_assert_msg(th_wait_until(replica_linked, &R.port, 10000), "the replica did not sync");
    for (int i = 0; i < NSENT; i++) sport[i] = base + 2 + i;
    if (use_tls)
        snprintf(surl, sizeof(surl), "rediss-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/m",
                 stls[0], stls[1], stls[2]);
    else
        snprintf(surl, sizeof(surl), "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/m",
                 sport[0], sport[1], sport[2]);
    for (int i = 0; i < NSENT; i++) start_sentinel(i);
    for (int i = 0; i < NSENT; i++)
        ck_assert_msg(th_wait_until(sentinel_ready, &i, 20000),
                      "sentinel %d did not see the replica and the other sentinels: %s", i,
                      ready_why);
    CP = th_connect(&P);
}

static void teardown(void) {
    for (int i = 0; i < NSENT; i++)
        if (spid[i] > 0) {
            kill(spid[i], SIGCONT);
            th_stop_child(spid[i], SIGTERM);
            spid[i] = 0;
        }
    if (CP) redisFree(CP);
    CP = NULL;
    th_redis_stop(&R);
    th_redis_stop(&P);
}

/* A daemon on the sentinel URL; `ini` after the [redis] url line. */
static void start_daemon(th_daemon *d, const char *ini) {
    th_redis fake = P;
    snprintf(fake.url, sizeof(fake.url), "%s", surl);
    th_daemon_start(d, &fake, ini);
}

/* Runs dtqctl (args: shell words) with DTQ_REDIS_URL = the sentinel URL and the extra
 * environment `env`; exit code, stdout then stderr in *out. */
static int ctl(char **out, const char *env, const char *args) {
    char with_url[2048];
    snprintf(with_url, sizeof(with_url), "DTQ_REDIS_URL='%s' %s", surl, env);
    return th_run_dtqctl(&P, out, with_url, args);
}

/* The [redis] and [worker] lines of a daemon with an echo handler. */
static void daemon_ini(char *out, size_t len, const char *worker_id) {
    snprintf(out, len,
             "connect_timeout_ms = 1000\n[worker]\nworker_id = %s\nheartbeat_interval_s = 1\n"
             "[handler:echo]\nbuiltin = echo\n",
             worker_id);
}

/* (1) The daemon finds the primary through the sentinels and runs tasks there. */
START_TEST(test_discovered_master_runs_tasks) {
    th_daemon d;
    char ini[512], line[128];
    daemon_ini(ini, sizeof(ini), "w-s1");
    start_daemon(&d, ini);
    th_daemon_wait_ready(CP, "w-s1", 15000);
    snprintf(line, sizeof(line), "sentinel: master m is at 127.0.0.1:%d", P.port);
    ck_assert_msg(th_wait_log(d.log, line, 1, 5000), "no '%s' in the log", line);
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof(id), "d%d", i);
        th_enqueue(CP, "default", id, "echo", "{\"n\":1}", NULL);
    }
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof(id), "d%d", i);
        ck_assert_msg(th_wait_status(CP, id, "succeeded", 10000), "task %s did not succeed", id);
    }
    ck_assert_int_eq(th_count_in_file(d.log, "is not a master"), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* ----------------------------------------------------------------- (2) failover */

/* One acknowledged enqueue of the producer. */
typedef struct acked {
    char id[16];
    int port;       /* the primary that acknowledged it */
    int replicated; /* WAIT 1 right after it answered 1 */
} acked;

/* The starts and ends the exec handler recorded, per (task, attempt). */
typedef struct run_rec {
    char id[16];
    int attempt;
    int starts;
    int64_t first_start, first_end;
} run_rec;

static run_rec *find_run(run_rec *runs, int *n, const char *id, int attempt) {
    for (int i = 0; i < *n; i++)
        if (runs[i].attempt == attempt && !strcmp(runs[i].id, id)) return &runs[i];
    memset(&runs[*n], 0, sizeof(runs[0]));
    snprintf(runs[*n].id, sizeof(runs[0].id), "%s", id);
    runs[*n].attempt = attempt;
    return &runs[(*n)++];
}

static int all_terminal(void *arg) {
    void **a = arg;
    redisContext *c = a[0];
    const acked *ids = a[1];
    int n = *(int *)a[2];
    for (int i = 0; i < n; i++) {
        char *st = th_task_field(c, ids[i].id, "status");
        int done = !st || !strcmp(st, "succeeded") || !strcmp(st, "failed") ||
                   !strcmp(st, "dead_lettered") || !strcmp(st, "cancelled");
        free(st);
        if (!done) return 0;
    }
    return 1;
}

/* (2) SENTINEL FAILOVER during a run: a producer enqueues continuously through its own
 * connection to the master (following the sentinels); the daemon follows the new primary
 * within seconds, every task whose record survived ends terminal, and no attempt runs
 * twice except those whose claim or finish was written to the old primary after the
 * failover began (lost with it: at-least-once). The acknowledged enqueues missing on the
 * new primary are counted and printed. Run twice: _i = 0, the producer only enqueues;
 * _i = 1, it sends WAIT 1 200 right after each enqueue, on the same connection. */
START_TEST(test_failover_followed) {
    const int with_wait = _i == 1;
    th_daemon d;
    char ini[1024], script[400], runs_path[400], moved[160];
    FILE *f;
    enum { MAXN = 6000 };
    acked *ids = calloc(MAXN, sizeof(*ids));
    int nids = 0, cur_port = P.port, attempts = 0, errors = 0;
    int64_t t_fail = 0, t_follow = 0, t_start;
    redisContext *pc;

    th_path(&P, "runs.log", runs_path, sizeof(runs_path));
    th_path(&P, "record.sh", script, sizeof(script));
    f = fopen(script, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "#!/bin/sh\n"
            "echo \"S $DTQ_TASK_ID $DTQ_ATTEMPT $(date +%%s%%3N)\" >> %s\n"
            "sleep 0.02\n"
            "echo \"E $DTQ_TASK_ID $DTQ_ATTEMPT $(date +%%s%%3N)\" >> %s\n",
            runs_path, runs_path);
    fclose(f);
    chmod(script, 0755);
    snprintf(ini, sizeof(ini),
             "connect_timeout_ms = 1000\n[worker]\nworker_id = wf\nheartbeat_interval_s = 1\n"
             "concurrency = 8\n[handler:rec]\nexec = %s\n",
             script);
    start_daemon(&d, ini);
    th_daemon_wait_ready(CP, "wf", 15000);
    snprintf(moved, sizeof(moved), "sentinel: master m moved from 127.0.0.1:%d to 127.0.0.1:%d",
             P.port, R.port);

    pc = tcp(cur_port);
    ck_assert_ptr_nonnull(pc);
    t_start = wall_ms();
    for (int i = 0; nids < MAXN; i++) {
        redisReply *r;
        char id[16];
        int64_t now = wall_ms();
        ck_assert_msg(now - t_start < 90000, "the run did not end within 90 s");
        if (i == 150) { /* ~1.5 s into the run */
            redisContext *sc = tcp(sport[0]);
            ck_assert_ptr_nonnull(sc);
            r = th_cmd(sc, "SENTINEL FAILOVER m");
            ck_assert_msg(r->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s", r->str);
            freeReplyObject(r);
            redisFree(sc);
            t_fail = wall_ms();
        }
        if (t_fail && !t_follow && th_count_in_file(d.log, moved) > 0) t_follow = wall_ms();
        if (t_follow && now - t_follow > 2000) break;
        snprintf(id, sizeof(id), "f%05d", i);
        attempts++;
        r = NULL;
        int unreplicated = 0;
        if (pc) { /* the enqueue, and WAIT 1 on the same connection right after it */
            redisReply *w = NULL;
            redisAppendCommand(pc, "FCALL dtq_enqueue 0 default rec {} task_id %s", id);
            if (with_wait) redisAppendCommand(pc, "WAIT 1 200");
            if (redisGetReply(pc, (void **)&r) == REDIS_OK && with_wait)
                redisGetReply(pc, (void **)&w);
            if (r && r->type == REDIS_REPLY_ARRAY) {
                snprintf(ids[nids].id, sizeof(ids[0].id), "%s", id);
                ids[nids].replicated = w && w->type == REDIS_REPLY_INTEGER && w->integer >= 1;
                unreplicated = with_wait && !ids[nids].replicated;
                ids[nids++].port = cur_port;
            }
            if (w) freeReplyObject(w);
            if (pc->err) { /* the link is gone: a new one after the next question */
                redisFree(pc);
                pc = NULL;
            }
        }
        if (!r || r->type != REDIS_REPLY_ARRAY) errors++;
        /* a producer that follows the sentinels: on an error, on a WAIT that no replica
         * confirmed, and every 10 enqueues */
        if (!pc || !r || r->type == REDIS_REPLY_ERROR || unreplicated || i % 10 == 0) {
            int p = 0;
            for (int s = 0; s < NSENT && !p; s++) p = master_port(s);
            if (p && (p != cur_port || !pc)) {
                if (pc) redisFree(pc);
                pc = tcp(p);
                cur_port = p;
            }
        }
        if (r) freeReplyObject(r);
        th_sleep_ms(10);
    }
    if (pc) redisFree(pc);
    ck_assert_msg(t_follow, "the daemon did not log '%s'", moved);
    ck_assert_msg(t_follow - t_fail < 15000, "the daemon followed only after %lld ms",
                  (long long)(t_follow - t_fail));

    /* the new primary: the replica, promoted; the daemon's worker hash is there, live */
    {
        redisContext *cr = th_connect(&R);
        redisReply *r = th_cmd(cr, "ROLE");
        int lost = 0, lost_old = 0, on_old = 0, replicated = 0, lost_replicated = 0;
        void *args[3] = {cr, ids, &nids};
        ck_assert_str_eq(r->element[0]->str, "master");
        freeReplyObject(r);
        ck_assert_msg(th_wait_until_cmd_str(cr, "HGET dtq:worker:wf status", "running", 10000),
                      "no running worker hash on the new primary");
        {
            int64_t t0 = wall_ms();
            r = th_cmd(cr, "HGET dtq:worker:wf last_heartbeat");
            ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
            ck_assert_msg(llabs(atoll(r->str) - t0) < 5000, "stale heartbeat on the new primary");
            freeReplyObject(r);
        }
        /* acknowledged enqueues that did not survive */
        for (int i = 0; i < nids; i++) {
            r = th_cmd(cr, "EXISTS dtq:task:%s", ids[i].id);
            if (ids[i].port == P.port) on_old++;
            replicated += ids[i].replicated;
            if (th_int(r) == 0) {
                lost++;
                if (ids[i].port == P.port) lost_old++;
                lost_replicated += ids[i].replicated;
            }
        }
        ck_assert_int_eq(lost, lost_old); /* only the old primary can have lost any */
        /* what WAIT 1 confirmed was on the replica that became the primary */
        ck_assert_int_eq(lost_replicated, 0);
        /* every surviving task ends terminal (those lost answer EXISTS 0: terminal) */
        ck_assert_msg(th_wait_until(all_terminal, args, 60000),
                      "tasks still not terminal on the new primary");
        {
            /* the exec handler's records: an attempt started twice is allowed only when
             * its first run's claim or finish went to the old primary after the failover
             * began (that write was lost with it) */
            char *log = th_read_file(runs_path), *save = NULL;
            run_rec *runs = calloc((size_t)nids * 2 + 16, sizeof(*runs));
            int nruns = 0, dups = 0, excused = 0;
            int64_t lo = t_fail - 200, hi = t_follow + 200;
            for (char *ln = strtok_r(log, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
                char kind, id[16];
                int att;
                long long t;
                run_rec *rr;
                if (sscanf(ln, "%c %15s %d %lld", &kind, id, &att, &t) != 4) continue;
                if (nruns >= nids * 2 + 15) break;
                rr = find_run(runs, &nruns, id, att);
                if (kind == 'S') {
                    if (!rr->starts++) rr->first_start = t;
                } else if (!rr->first_end) {
                    rr->first_end = t;
                }
            }
            for (int i = 0; i < nruns; i++) {
                if (runs[i].starts < 2) continue;
                dups++;
                if ((runs[i].first_start >= lo && runs[i].first_start <= hi) ||
                    (runs[i].first_end >= lo && runs[i].first_end <= hi))
                    excused++;
                else
                    ck_abort_msg("task %s attempt %d started %d times (first at %lld, outside "
                                 "the failover [%lld, %lld])",
                                 runs[i].id, runs[i].attempt, runs[i].starts,
                                 (long long)runs[i].first_start, (long long)lo, (long long)hi);
            }
            printf("it_sentinel failover (producer %s): %d enqueue attempts, %d acknowledged (%d "
                   "by the old "
                   "primary), %d errors; LOST %d acknowledged enqueue(s); %d acknowledged and "
                   "confirmed by WAIT 1, of which lost %d; the daemon followed in %lld ms; %d "
                   "attempt(s) ran twice because their claim or finish was lost with the old "
                   "primary\n",
                   with_wait ? "with WAIT 1 200" : "without WAIT", attempts, nids, on_old, errors,
                   lost, replicated, lost_replicated, (long long)(t_follow - t_fail), excused);
            fflush(stdout);
            free(runs);
            free(log);
        }
        redisFree(cr);
    }
    free(ids);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* (3) dtqctl over redis-sentinel://: enqueue --wait, show, --wait-replicas. */
START_TEST(test_dtqctl) {
    th_daemon d;
    char ini[512], *out, args[256], id[64];
    daemon_ini(ini, sizeof(ini), "w-ctl");
    start_daemon(&d, ini);
    th_daemon_wait_ready(CP, "w-ctl", 15000);
    ck_assert_int_eq(ctl(&out, "", "enqueue default echo '{\"k\":7}' --wait"), 0);
    ck_assert_msg(strstr(out, "succeeded") && strstr(out, "{\"k\":7}"), "%s", out);
    ck_assert_int_eq(sscanf(out, "%63s created", id), 1);
    free(out);
    snprintf(args, sizeof(args), "show %s", id);
    ck_assert_int_eq(ctl(&out, "", args), 0);
    ck_assert_msg(strstr(out, "status             succeeded\n"), "%s", out);
    free(out);
    /* on the primary, not somewhere else */
    th_assert_field(CP, id, "status", "succeeded");
    /* one replica is attached: WAIT 1 is met, WAIT 2 is not (exit 1, said on stderr) */
    ck_assert_int_eq(ctl(&out, "", "--json enqueue default echo '{}' --wait-replicas 1"), 0);
    ck_assert_msg(strstr(out, "\"replicas\":1"), "%s", out);
    free(out);
    ck_assert_int_eq(
        ctl(&out, "DTQ_REDIS_WAIT_TIMEOUT_MS=200", "enqueue default echo '{}' --wait-replicas 2"),
        1);
    ck_assert_msg(strstr(out, "created") && strstr(out, "reached 1 of 2 replica(s) within 200 ms"),
                  "%s", out);
    free(out);
    /* a master name no sentinel knows */
    {
        char env[512];
        snprintf(env, sizeof(env), "DTQ_REDIS_URL='redis-sentinel://127.0.0.1:%d/nosuch'",
                 sport[0]);
        ck_assert_int_eq(ctl(&out, env, "stats"), 1);
        ck_assert_msg(strstr(out, "no sentinel knows master nosuch"), "%s", out);
        free(out);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

/* (4) A sentinel that is down (refuses connections), then also one that hangs (SIGSTOP:
 * connects, never answers), is skipped by the daemon and by dtqctl. */
START_TEST(test_down_sentinel_skipped) {
    th_daemon d;
    char ini[512], *out, line[160];
    int64_t t0;
    th_stop_child(spid[0], SIGTERM);
    spid[0] = 0;
    daemon_ini(ini, sizeof(ini), "w-down");
    t0 = th_now_ms();
    start_daemon(&d, ini);
    th_daemon_wait_ready(CP, "w-down", 5000);
    snprintf(line, sizeof(line), "sentinel: master m is at 127.0.0.1:%d (sentinel 127.0.0.1:%d)",
             P.port, sport[1]);
    ck_assert_msg(th_wait_log(d.log, line, 1, 1000), "no '%s' in the log", line);
    printf("it_sentinel: ready in %lld ms with sentinel 1 of 3 down\n",
           (long long)(th_now_ms() - t0));
    th_enqueue(CP, "default", "down1", "echo", "{\"n\":1}", NULL);
    ck_assert(th_wait_status(CP, "down1", "succeeded", 10000));
    ck_assert_int_eq(ctl(&out, "", "enqueue default echo '{}' --wait"), 0);
    ck_assert_msg(strstr(out, "succeeded"), "%s", out);
    free(out);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);

    /* sentinel 2 hangs: accepted by the kernel, never answered */
    kill(spid[1], SIGSTOP);
    daemon_ini(ini, sizeof(ini), "w-hung");
    t0 = th_now_ms();
    start_daemon(&d, ini);
    th_daemon_wait_ready(CP, "w-hung", 10000);
    snprintf(line, sizeof(line), "sentinel: master m is at 127.0.0.1:%d (sentinel 127.0.0.1:%d)",
             P.port, sport[2]);
    ck_assert_msg(th_wait_log(d.log, line, 1, 1000), "no '%s' in the log", line);
    printf("it_sentinel: ready in %lld ms with sentinel 1 down and 2 hung (connect_timeout_ms "
           "1000)\n",
           (long long)(th_now_ms() - t0));
    th_enqueue(CP, "default", "hung1", "echo", "{\"n\":1}", NULL);
    ck_assert(th_wait_status(CP, "hung1", "succeeded", 10000));
    ck_assert_int_eq(
        ctl(&out, "DTQ_REDIS_CONNECT_TIMEOUT_MS=500", "enqueue default echo '{}' --wait"), 0);
    ck_assert_msg(strstr(out, "succeeded"), "%s", out);
    free(out);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
    kill(spid[1], SIGCONT);
}
END_TEST

static void setup_tls(void) {
    use_tls = 1;
    setup();
}

/* (5) rediss-sentinel://: TLS to the sentinels and to the primary they name (its
 * certificate checked for the address they report, 127.0.0.1), and a failover followed. */
START_TEST(test_tls) {
    th_daemon d;
    char ini[1024], *out, env[256], line[160];
    snprintf(ini, sizeof(ini),
             "tls_ca_file = %s/ca.crt\nconnect_timeout_ms = 1000\n[worker]\nworker_id = w-tls\n"
             "heartbeat_interval_s = 1\n[handler:echo]\nbuiltin = echo\n",
             certs);
    start_daemon(&d, ini);
    th_daemon_wait_ready(CP, "w-tls", 15000);
    snprintf(line, sizeof(line), "sentinel: master m is at 127.0.0.1:%d", ptls);
    ck_assert_msg(th_wait_log(d.log, line, 1, 1000), "no '%s' in the log", line);
    th_enqueue(CP, "default", "tls1", "echo", "{\"n\":1}", NULL);
    ck_assert(th_wait_status(CP, "tls1", "succeeded", 10000));
    snprintf(env, sizeof(env), "DTQ_REDIS_TLS_CA_FILE=%s/ca.crt", certs);
    ck_assert_int_eq(ctl(&out, env, "enqueue default echo '{}' --wait --wait-replicas 1"), 0);
    ck_assert_msg(strstr(out, "succeeded"), "%s", out);
    free(out);
    {
        redisContext *sc = tcp(sport[0]);
        redisReply *r = th_cmd(sc, "SENTINEL FAILOVER m");
        ck_assert_msg(r->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s", r->str);
        freeReplyObject(r);
        redisFree(sc);
    }
    snprintf(line, sizeof(line), "sentinel: master m moved from 127.0.0.1:%d to 127.0.0.1:%d", ptls,
             rtls);
    ck_assert_msg(th_wait_log(d.log, line, 1, 20000), "no '%s' in the log", line);
    {
        redisContext *cr = th_connect(&R);
        ck_assert(th_wait_until_cmd_str(cr, "HGET dtq:worker:w-tls status", "running", 10000));
        th_enqueue(cr, "default", "tls2", "echo", "{\"n\":1}", NULL);
        ck_assert(th_wait_status(cr, "tls2", "succeeded", 10000));
        redisFree(cr);
    }
    ck_assert_int_eq(th_count_in_file(d.log, "TLS handshake failed"), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 15000), 0);
}
END_TEST

static void run_sh(const char *cmd) {
    int status = system(cmd);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "it_sentinel: failed: %s\n", cmd);
        exit(EXIT_FAILURE);
    }
}

/* A CA and a server certificate for 127.0.0.1 (the address the sentinels report), used
 * by the servers and the sentinels alike. */
static void make_certs(void) {
    char cmd[2048];
    snprintf(certs, sizeof(certs), "/tmp/dtq-sentinel-tls-XXXXXX");
    if (!mkdtemp(certs)) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=ca "
             "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign "
             ">/dev/null 2>&1 && "
             "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth,"
             "clientAuth\\n' > server.ext && "
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout server.key -out server.csr -subj /CN=localhost >/dev/null 2>&1 && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
             "-out server.crt -days 2 -extfile server.ext >/dev/null 2>&1",
             certs);
    run_sh(cmd);
}

int main(void) {
    Suite *s = suite_create("sentinel");
    TCase *tc = tcase_create("core");
    TCase *tt = tcase_create("tls");
    int rc;
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_discovered_master_runs_tasks);
    tcase_add_loop_test(tc, test_failover_followed, 0, 2);
    tcase_add_test(tc, test_dtqctl);
    tcase_add_test(tc, test_down_sentinel_skipped);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(tt, setup_tls, teardown);
    tcase_set_timeout(tt, 180);
    tcase_add_test(tt, test_tls);
    suite_add_tcase(s, tt);
    make_certs();
    rc = th_run_suite(s);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
        if (system(cmd) != 0) { /* best effort */
        }
    }
    return rc;
}
