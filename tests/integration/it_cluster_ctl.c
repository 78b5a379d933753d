/* it_cluster_ctl.c: dtqctl on a real local Redis Cluster of 3 primaries and 3 replicas
 * (th_cluster_start, once for the suite; the cases run in order and build on each other),
 * without a daemon: nine queues whose slots land on all three shards, enqueued through
 * dtqctl, through a cluster-aware client (`redis-cli -c`, FCALL with the queue's tag) and by
 * a raw XADD; stats summed over the queues; show and cancel by id with --queue (refused
 * without); pause and resume; the schedule listed across queues; cron and limit verbs; the
 * dead letters; and the layout marker refusing a namespace laid out for a single Redis. */
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

#include "cluster.h"

#define NQ 9
#define NS "cc"

/* Set up in the parent process (the cases run forked, in order, and build on each
 * other's Redis state, not on each other's memory). */
static th_cluster CL;
static char Q[NQ][16];  /* the nine queues, three on each shard, in shard order */
static char ID[NQ][16]; /* the id of the task dtqctl enqueues into each (--id) */
#define CLI_ID "cli-1"  /* the task redis-cli enqueues into Q[CLI_QUEUE] */
#define CLI_QUEUE 1
#define RAW_QUEUE 2 /* the queue of the raw XADD */

/* The cluster, and nine queue names whose slots land three on each shard: Q[0..2] on one
 * primary, Q[3..5] on another, Q[6..8] on the third (slot and node printed). */
static void cluster_setup(void) {
    th_cluster_start(&CL, 3, 1);
    th_cluster_pick_queues(&CL, NS, 3, NQ / 3, Q);
    for (int n = 0; n < NQ; n++) snprintf(ID[n], sizeof(ID[n]), "t-%d", n);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* dtqctl -n NS <args> on the cluster URL; the exit code, the output in *out. */
static int ctl(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ctl(char **out, const char *fmt, ...) {
    char env[sizeof(CL.url) + 32], args[2048], full[2100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", CL.url);
    snprintf(full, sizeof(full), "-n " NS " %s", args);
    return th_run_dtqctl(&CL.node[0], out, env, full);
}

/* ctl that must exit 0; its output parsed as JSON (caller deletes). */
static cJSON *ctl_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cJSON *ctl_json(const char *fmt, ...) {
    char args[2048], *out;
    cJSON *v;
    int rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    rc = ctl(&out, "--json %s", args);
    ck_assert_msg(rc == 0, "dtqctl --json %s: exit %d: %s", args, rc, out);
    v = cJSON_Parse(out);
    ck_assert_msg(v != NULL, "dtqctl --json %s: not JSON: %s", args, out);
    free(out);
    return v;
}

/* A connection to the primary that serves key's slot (the caller frees it). */
static redisContext *owner_of(const char *key) {
    int port = th_cluster_owner_port(&CL, key);
    return th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
}

/* The number of a stats member (0 when missing). */
/* The item `queue:<q>:<field>` (under "queues", by queue: stats --json nests them) or a
 * namespace counter of stats --json. */
static const cJSON *stat_item(const cJSON *st, const char *name) {
    const char *last = strrchr(name, ':');
    char q[256];
    if (strncmp(name, "queue:", 6) || !last) return cJSON_GetObjectItemCaseSensitive(st, name);
    snprintf(q, sizeof(q), "%.*s", (int)(last - name - 6), name + 6);
    return cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "queues"), q),
        last + 1);
}

static long long stat(const cJSON *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long long stat(const cJSON *st, const char *fmt, ...) {
    char name[256];
    const cJSON *v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    v = stat_item(st, name);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
}

/* The library on every primary, for namespace NS. */
START_TEST(test_install) {
    char *out;
    int rc = ctl(&out, "functions install");
    ck_assert_msg(rc == 0 && strstr(out, "on 3 primaries"), "exit %d: %s", rc, out);
    free(out);
}
END_TEST

/* Each of the nine queues (three per shard) enqueued into by dtqctl: the task lands under
 * the queue's tag on the node of its slot, {NS}:queues lists them, the marker says
 * cluster. */
START_TEST(test_enqueue_nine_queues) {
    redisContext *g;
    redisReply *r;
    for (int i = 0; i < NQ; i++) {
        cJSON *v = ctl_json("enqueue %s echo '{\"i\":%d}' --id %s", Q[i], i, ID[i]);
        char tag[192];
        redisContext *c;
        ck_assert_str_eq(th_json_str(v, "result"), "created");
        ck_assert_str_eq(th_json_str(v, "task_id"), ID[i]);
        cJSON_Delete(v);
        snprintf(tag, sizeof(tag), "{" NS ":%s}", Q[i]);
        c = owner_of(tag);
        r = th_cmd(c, "HGET %s:task:%s queue", tag, ID[i]);
        ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, Q[i]), "task of %s", Q[i]);
        freeReplyObject(r);
        r = th_cmd(c, "XLEN %s:stream:%s:p5", tag, Q[i]);
        ck_assert_int_eq(r->integer, 1);
        freeReplyObject(r);
        redisFree(c);
    }
    g = owner_of("{" NS "}");
    r = th_cmd(g, "SCARD {" NS "}:queues");
    ck_assert_int_eq(r->integer, NQ);
    freeReplyObject(r);
    r = th_cmd(g, "GET {" NS "}:layout");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "cluster"), "no marker");
    freeReplyObject(r);
    redisFree(g);
}
END_TEST

/* A cluster-aware client: `redis-cli -c` FCALL <ns>_enqueue with the queue's tag as its key,
 * from a node that may not serve it (redis-cli follows MOVED); and a raw XADD into a band's
 * stream. stats counts both: the depths sum to 9 + 2 over the nine queues. */
START_TEST(test_other_producers_and_stats) {
    char cli[512], cmd[2048], path[400], *slash, *text;
    redisContext *c;
    redisReply *r;
    cJSON *st;
    long long depth = 0;
    char tag[192];
    snprintf(cli, sizeof(cli), "%s", REDIS_SERVER_BIN);
    slash = strrchr(cli, '/');
    snprintf(slash + 1, sizeof(cli) - (size_t)(slash + 1 - cli), "redis-cli");
    ck_assert_msg(access(cli, X_OK) == 0, "no redis-cli next to redis-server");
    th_path(&CL.node[0], "cli.out", path, sizeof(path));
    /* from the node of Q[8]'s shard: Q[CLI_QUEUE] is on another (redis-cli follows MOVED) */
    snprintf(tag, sizeof(tag), "{" NS ":%s}", Q[8]);
    snprintf(cmd, sizeof(cmd),
             "%s -c -p %d FCALL " NS "_enqueue 1 '{" NS ":%s}' %s echo '{\"via\":\"cli\"}' "
             "task_id " CLI_ID " >%s 2>&1",
             cli, th_cluster_owner_port(&CL, tag), Q[CLI_QUEUE], Q[CLI_QUEUE], path);
    ck_assert_int_eq(system(cmd), 0);
    text = th_read_file(path);
    ck_assert_msg(strstr(text, CLI_ID "\ncreated"), "redis-cli: %s", text);
    free(text);

    snprintf(tag, sizeof(tag), "{" NS ":%s}", Q[RAW_QUEUE]);
    c = owner_of(tag);
    r = th_cmd(c, "XADD %s:stream:%s:p5 * task_type echo payload {}", tag, Q[RAW_QUEUE]);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    redisFree(c);

    st = ctl_json("stats");
    for (int i = 0; i < NQ; i++) {
        long long want = 1 + (i == CLI_QUEUE) + (i == RAW_QUEUE);
        ck_assert_msg(stat(st, "queue:%s:depth", Q[i]) == want, "%s: depth %lld, want %lld", Q[i],
                      stat(st, "queue:%s:depth", Q[i]), want);
        ck_assert_int_eq(stat(st, "queue:%s:paused", Q[i]), 0);
        depth += stat(st, "queue:%s:depth", Q[i]);
    }
    ck_assert_int_eq(depth, NQ + 2);
    /* the queues (4 items each) under "queues", then the totals */
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "queues")), NQ);
    for (int i = 0; i < NQ; i++)
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(st, "queues"), Q[i])),
                         4);
    ck_assert_int_eq(cJSON_GetArraySize(st), 1 + 4);
    ck_assert_int_eq(stat(st, "dlq"), 0);
    ck_assert_int_eq(stat(st, "workers"), 0);
    cJSON_Delete(st);

    /* the same merge as text: a line per name, the totals once */
    {
        char *out, line[64];
        ck_assert_int_eq(ctl(&out, "stats"), 0);
        snprintf(line, sizeof(line), "queue:%s:depth", Q[RAW_QUEUE]);
        ck_assert_msg(strstr(out, line) && strstr(strstr(out, line), " 2\n"), "%s", out);
        ck_assert_ptr_nonnull(strstr(out, "\nworkers "));
        ck_assert_ptr_null(strstr(strstr(out, "\nworkers ") + 1, "\nworkers "));
        free(out);
    }
    /* a queue's mode, set on its own slot (reference 4.3), shown by stats and queues */
    {
        char *out, cmdline[160];
        const cJSON *m;
        ck_assert_int_eq(ctl(&out, "queue mode %s lean", Q[0]), 0);
        free(out);
        st = ctl_json("stats");
        snprintf(cmdline, sizeof(cmdline), "queue:%s:mode", Q[0]);
        m = stat_item(st, cmdline);
        ck_assert_str_eq(cJSON_GetStringValue(m), "lean");
        snprintf(cmdline, sizeof(cmdline), "queue:%s:mode", Q[1]);
        m = stat_item(st, cmdline);
        ck_assert_str_eq(cJSON_GetStringValue(m), "full");
        cJSON_Delete(st);
        /* back to full: the later cases give their tasks ids */
        ck_assert_int_eq(ctl(&out, "queue mode %s full", Q[0]), 0);
        free(out);
    }
    /* queues: the nine, by name, with their depths */
    st = ctl_json("queues");
    ck_assert_int_eq(cJSON_GetArraySize(st), NQ);
    for (int i = 1; i < NQ; i++)
        ck_assert_int_lt(strcmp(th_json_str(cJSON_GetArrayItem(st, i - 1), "queue"),
                                th_json_str(cJSON_GetArrayItem(st, i), "queue")),
                         0);
    cJSON_Delete(st);
    st = ctl_json("workers");
    ck_assert_int_eq(cJSON_GetArraySize(st), 0);
    cJSON_Delete(st);
}
END_TEST

/* show and cancel by id: --queue names the slot; without it, the refusal. */
START_TEST(test_by_id) {
    char *out;
    cJSON *v;
    int rc = ctl(&out, "show %s", ID[4]);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "INVALID_ARGUMENT this namespace is laid out for Redis Cluster: "
                              "name the task's queue with --queue Q"),
                  "%s", out);
    free(out);
    v = ctl_json("show %s --queue %s", ID[4], Q[4]);
    ck_assert_str_eq(th_json_str(v, "id"), ID[4]);
    ck_assert_str_eq(th_json_str(v, "queue"), Q[4]);
    ck_assert_str_eq(th_json_str(v, "status"), "queued");
    cJSON_Delete(v);
    v = ctl_json("show --queue %s %s", Q[CLI_QUEUE], CLI_ID);
    ck_assert_str_eq(th_json_str(v, "payload"), "{\"via\":\"cli\"}");
    cJSON_Delete(v);
    /* another queue's slot holds no such task */
    rc = ctl(&out, "show %s --queue %s", ID[4], Q[5]);
    ck_assert_msg(rc == 1 && strstr(out, "NOT_FOUND"), "exit %d: %s", rc, out);
    free(out);

    rc = ctl(&out, "cancel %s", ID[6]);
    ck_assert_int_eq(rc, 1);
    ck_assert_ptr_nonnull(strstr(out, "--queue Q"));
    free(out);
    rc = ctl(&out, "cancel %s --queue %s", ID[6], Q[6]);
    ck_assert_msg(rc == 0 && !strcmp(out, "cancelled\n"), "exit %d: %s", rc, out);
    free(out);
    v = ctl_json("show %s --queue %s", ID[6], Q[6]);
    ck_assert_str_eq(th_json_str(v, "status"), "cancelled");
    cJSON_Delete(v);
}
END_TEST

/* pause and resume in the queue's slot; stats sees the flag. */
START_TEST(test_pause_resume) {
    char *out;
    cJSON *st;
    int rc = ctl(&out, "pause %s", Q[3]);
    ck_assert_msg(rc == 0 && !strcmp(out, "paused\n"), "exit %d: %s", rc, out);
    free(out);
    st = ctl_json("stats");
    ck_assert_int_eq(stat(st, "queue:%s:paused", Q[3]), 1);
    ck_assert_int_eq(stat(st, "queue:%s:paused", Q[4]), 0);
    cJSON_Delete(st);
    rc = ctl(&out, "resume %s", Q[3]);
    ck_assert_msg(rc == 0 && !strcmp(out, "resumed\n"), "exit %d: %s", rc, out);
    free(out);
    st = ctl_json("stats");
    ck_assert_int_eq(stat(st, "queue:%s:paused", Q[3]), 0);
    cJSON_Delete(st);
    /* a queue nobody used: NOT_FOUND; --create makes it known to the index */
    rc = ctl(&out, "pause fresh");
    ck_assert_int_eq(rc, 1);
    free(out);
    rc = ctl(&out, "pause --create fresh");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    st = ctl_json("stats");
    ck_assert_int_eq(stat(st, "queue:fresh:paused"), 1);
    cJSON_Delete(st);
    rc = ctl(&out, "resume fresh");
    ck_assert_int_eq(rc, 0);
    free(out);
    rc = ctl(&out, "queue remove fresh");
    ck_assert_msg(rc == 0 && strstr(out, "removed"), "exit %d: %s", rc, out);
    free(out);
    st = ctl_json("stats");
    ck_assert_ptr_null(stat_item(st, "queue:fresh:paused"));
    cJSON_Delete(st);
}
END_TEST

/* Delayed tasks in three queues of three shards: scheduled list merges them soonest due
 * first, --count cuts the merged list, --queue lists one queue; stats sums the schedules. */
START_TEST(test_scheduled_across_queues) {
    const int qs[3] = {0, 4, 8}; /* a queue of each shard (three per shard, in order) */
    char ids[3][64];
    cJSON *v, *st;
    char *out;
    int rc;
    for (int k = 0; k < 3; k++) { /* the later k, the sooner due */
        v = ctl_json("enqueue %s echo {} --delay-ms %d", Q[qs[k]], 600000 - k * 60000);
        ck_assert_str_eq(th_json_str(v, "result"), "created");
        snprintf(ids[k], sizeof(ids[k]), "%s", th_json_str(v, "task_id"));
        cJSON_Delete(v);
    }
    v = ctl_json("scheduled list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 3);
    for (int k = 0; k < 3; k++) {
        const cJSON *e = cJSON_GetArrayItem(v, k);
        ck_assert_str_eq(th_json_str(e, "task_id"), ids[2 - k]);
        ck_assert_str_eq(th_json_str(e, "queue"), Q[qs[2 - k]]);
    }
    cJSON_Delete(v);
    v = ctl_json("scheduled list --count 2");
    ck_assert_int_eq(cJSON_GetArraySize(v), 2);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 0), "task_id"), ids[2]);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 1), "task_id"), ids[1]);
    cJSON_Delete(v);
    v = ctl_json("scheduled list --queue %s", Q[qs[1]]);
    ck_assert_int_eq(cJSON_GetArraySize(v), 1);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 0), "task_id"), ids[1]);
    cJSON_Delete(v);
    st = ctl_json("stats");
    ck_assert_int_eq(stat(st, "scheduled"), 3);
    cJSON_Delete(st);
    /* run-now by id needs the queue too */
    rc = ctl(&out, "scheduled run-now %s", ids[0]);
    ck_assert_int_eq(rc, 1);
    free(out);
    rc = ctl(&out, "scheduled run-now %s --queue %s", ids[0], Q[qs[0]]);
    ck_assert_msg(rc == 0 && strstr(out, " done"), "exit %d: %s", rc, out);
    free(out);
    st = ctl_json("stats");
    ck_assert_int_eq(stat(st, "scheduled"), 2);
    ck_assert_int_eq(stat(st, "queue:%s:depth", Q[qs[0]]), 2); /* its first task and this */
    cJSON_Delete(st);
}
END_TEST

/* cron add into two queues, list merged by name, a name in two queues needs --queue. */
START_TEST(test_cron) {
    cJSON *v;
    char *out;
    int rc = ctl(&out, "cron add nightly '0 3 * * *' %s echo {}", Q[1]);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    rc = ctl(&out, "cron add hourly '0 * * * *' %s echo {}", Q[7]);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    rc = ctl(&out, "cron add nightly '0 4 * * *' %s echo {}", Q[5]);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    v = ctl_json("cron list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 3);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 0), "name"), "hourly");
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 0), "queue"), Q[7]);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 1), "name"), "nightly");
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 2), "name"), "nightly");
    cJSON_Delete(v);
    rc = ctl(&out, "cron pause nightly");
    ck_assert_msg(rc == 1 && strstr(out, "2 queues have a periodic schedule named nightly"),
                  "exit %d: %s", rc, out);
    free(out);
    rc = ctl(&out, "cron remove nightly --queue %s", Q[5]);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    rc = ctl(&out, "cron pause nightly"); /* one left: found in Q[1] */
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    v = ctl_json("cron list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 2);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 1), "queue"), Q[1]);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(v, 1), "paused")));
    cJSON_Delete(v);
    rc = ctl(&out, "cron remove nosuch");
    ck_assert_msg(rc == 1 && strstr(out, "NOT_FOUND"), "exit %d: %s", rc, out);
    free(out);
    ck_assert_int_eq(ctl(&out, "cron remove nightly"), 0);
    free(out);
    ck_assert_int_eq(ctl(&out, "cron remove hourly"), 0);
    free(out);
    v = ctl_json("cron list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
}
END_TEST

/* limit set on two queues of two shards, list merged, remove. */
START_TEST(test_limits) {
    cJSON *v;
    char *out;
    int rc = ctl(&out, "limit set %s --rate 5/s", Q[2]);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    rc = ctl(&out, "limit set %s:echo --concurrency 2", Q[6]);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    v = ctl_json("limit list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 2);
    { /* by queue name, as one call over the whole namespace sorts them */
        char target[64];
        int first6 = strcmp(Q[6], Q[2]) < 0;
        const cJSON *l2 = cJSON_GetArrayItem(v, first6), *l6 = cJSON_GetArrayItem(v, !first6);
        snprintf(target, sizeof(target), "%s:echo", Q[6]);
        ck_assert_str_eq(th_json_str(l2, "target"), Q[2]);
        ck_assert_int_eq(th_json_int(l2, "rate"), 5);
        ck_assert_str_eq(th_json_str(l6, "target"), target);
        ck_assert_int_eq(th_json_int(l6, "concurrency"), 2);
    }
    cJSON_Delete(v);
    ck_assert_int_eq(ctl(&out, "limit remove %s", Q[2]), 0);
    free(out);
    ck_assert_int_eq(ctl(&out, "limit remove %s:echo", Q[6]), 0);
    free(out);
    v = ctl_json("limit list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
}
END_TEST

/* The dead letters: none, listed, requeued and purged over every queue. */
START_TEST(test_dlq_empty) {
    cJSON *v = ctl_json("dlq list");
    char *out;
    int rc;
    ck_assert(cJSON_IsArray(v));
    ck_assert_int_eq(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
    rc = ctl(&out, "dlq requeue-all");
    ck_assert_msg(rc == 0 && !strcmp(out, "requeued 0 dead letters\n"), "exit %d: %s", rc, out);
    free(out);
    rc = ctl(&out, "dlq purge");
    ck_assert_msg(rc == 0 && !strcmp(out, "purged 0 dead letters\n"), "exit %d: %s", rc, out);
    free(out);
    {
        /* the README's cluster form of a redis-cli requeue, from a node that may not own the
         * queue's slot (redis-cli -c follows MOVED) */
        char cli[512], cmd[2048], path[400], tag[192], *slash, *text;
        snprintf(cli, sizeof(cli), "%s", REDIS_SERVER_BIN);
        slash = strrchr(cli, '/');
        snprintf(slash + 1, sizeof(cli) - (size_t)(slash + 1 - cli), "redis-cli");
        th_path(&CL.node[0], "requeue.out", path, sizeof(path));
        snprintf(tag, sizeof(tag), "{" NS ":%s}", Q[8]);
        snprintf(cmd, sizeof(cmd), "%s -c -p %d FCALL " NS "_requeue_dlq 1 '{" NS ":%s}' >%s 2>&1",
                 cli, th_cluster_owner_port(&CL, tag), Q[0], path);
        ck_assert_int_eq(system(cmd), 0);
        text = th_read_file(path);
        ck_assert_msg(!strcmp(text, "0\n"), "redis-cli: %s", text);
        free(text);
    }
}
END_TEST

/* Dead letters of two queues (of two slots), the older queue cleared first: dlq list
 * merges them oldest first by entry id (view_merge.c's rule), --count N the first N;
 * purged after. */
START_TEST(test_dlq_merged) {
    const char *q[2] = {"dla", "dlb"};
    cJSON *v;
    char *out;
    int rc;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 3 - i; k++) {
            rc = ctl(&out, "enqueue %s echo {} --id dl-%s-%d", q[i], q[i], k);
            ck_assert_msg(rc == 0, "enqueue: exit %d: %s", rc, out);
            free(out);
        }
        usleep(5000); /* the second queue's dead letters in a later millisecond */
        rc = ctl(&out, "queue clear %s", q[i]);
        ck_assert_msg(rc == 0, "queue clear: exit %d: %s", rc, out);
        free(out);
    }
    v = ctl_json("dlq list");
    ck_assert_int_eq(cJSON_GetArraySize(v), 5);
    for (int k = 0; k < 5; k++)
        ck_assert_msg(!strncmp(th_json_str(cJSON_GetArrayItem(v, k), "task_id"),
                               k < 3 ? "dl-dla-" : "dl-dlb-", 7),
                      "entry %d: %s", k, th_json_str(cJSON_GetArrayItem(v, k), "task_id"));
    cJSON_Delete(v);
    v = ctl_json("dlq list --count 4");
    ck_assert_int_eq(cJSON_GetArraySize(v), 4);
    ck_assert_str_eq(th_json_str(cJSON_GetArrayItem(v, 3), "task_id"), "dl-dlb-0");
    cJSON_Delete(v);
    rc = ctl(&out, "dlq purge");
    ck_assert_msg(rc == 0 && !strcmp(out, "purged 5 dead letters\n"), "exit %d: %s", rc, out);
    free(out);
}
END_TEST

/* A namespace first used with cluster_hash_tag over a plain URL (the single layout in one
 * slot): dtqctl with the cluster URL refuses it, reads and writes alike. */

/* User `user` (password pw) with dtqctl acl's `role` on every node, ACL LOG reset. */
static void set_role_user(const char *role, const char *user) {
    char *tokens;
    int rc = ctl(&tokens, "acl %s", role);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(tokens, "{" NS ":*}:") && strstr(tokens, "&{" NS "}:events"), "%s",
                  tokens);
    tokens[strcspn(tokens, "\n")] = '\0';
    for (int i = 0; i < CL.n; i++) {
        redisContext *c = th_cluster_connect(&CL, i);
        char cmd[4096], *argv[256], *save = NULL;
        int argc = 0;
        redisReply *rr;
        /* the tokens hold '%' (%R~, %W~): sent as arguments, never as a format */
        snprintf(cmd, sizeof(cmd), "ACL SETUSER %s reset on >pw %s", user, tokens);
        for (char *t = strtok_r(cmd, " ", &save); t && argc < 256; t = strtok_r(NULL, " ", &save))
            argv[argc++] = t;
        rr = redisCommandArgv(c, argc, (const char **)argv, NULL);
        ck_assert_msg(rr && rr->type == REDIS_REPLY_STATUS, "node %d: %s", i,
                      rr && rr->str ? rr->str : "?");
        freeReplyObject(rr);
        freeReplyObject(th_cmd(c, "ACL LOG RESET"));
        redisFree(c);
    }
    free(tokens);
}

/* The monitor role may not call <ns>_layout (it writes the marker when there is none): its
 * reads go on unchecked with a warning, as dtq-web's do, where dtqctl used to refuse them
 * (the one layout policy, dtq_scope_layout_verdict). */
START_TEST(test_monitor_reads_unchecked) {
    char env[sizeof(CL.url) + 64], url[sizeof(CL.url) + 32], *out;
    int rc;
    set_role_user("monitor", "mon");
    snprintf(url, sizeof(url), "redis-cluster://mon:pw@%s", CL.url + strlen("redis-cluster://"));
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", url);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n " NS " stats");
    ck_assert_msg(rc == 0 && strstr(out, "layout not checked"), "monitor stats: exit %d: %s", rc,
                  out);
    free(out);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n " NS " queues");
    ck_assert_msg(rc == 0, "monitor queues: exit %d: %s", rc, out);
    free(out);
}
END_TEST

/* The ACL roles in the cluster layout (dtqctl acl on a redis-cluster:// URL: the patterns of
 * {ns} and of every queue's {ns:*}): set on every node (a replica may be promoted), a
 * producer enqueues into a queue of each shard, an admin reads the merged stats and a task
 * by id, and no node's ACL LOG holds a denial of either. */
START_TEST(test_acl_roles) {
    const char *roles[2] = {"producer", "admin"}, *users[2] = {"prod", "adm"};
    char env[sizeof(CL.url) + 64], url[sizeof(CL.url) + 32], *out;
    cJSON *v;
    int rc;
    for (int r = 0; r < 2; r++) set_role_user(roles[r], users[r]);
    snprintf(url, sizeof(url), "redis-cluster://prod:pw@%s", CL.url + strlen("redis-cluster://"));
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", url);
    for (int q = 0; q < NQ; q += 3) {
        char args[256];
        snprintf(args, sizeof(args), "-n " NS " enqueue %s echo {} --id acl-%d", Q[q], q);
        rc = th_run_dtqctl(&CL.node[0], &out, env, args);
        ck_assert_msg(rc == 0, "producer enqueue into %s: exit %d: %s", Q[q], rc, out);
        free(out);
    }
    snprintf(url, sizeof(url), "redis-cluster://adm:pw@%s", CL.url + strlen("redis-cluster://"));
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", url);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n " NS " --json stats");
    ck_assert_msg(rc == 0, "admin stats: exit %d: %s", rc, out);
    v = cJSON_Parse(out);
    ck_assert_ptr_nonnull(v);
    cJSON_Delete(v);
    free(out);
    {
        char args[256];
        snprintf(args, sizeof(args), "-n " NS " --json show acl-3 --queue %s", Q[3]);
        rc = th_run_dtqctl(&CL.node[0], &out, env, args);
        ck_assert_msg(rc == 0 && strstr(out, "\"queued\""), "admin show: exit %d: %s", rc, out);
        free(out);
    }
    for (int i = 0; i < CL.n; i++) {
        redisContext *c = th_cluster_connect(&CL, i);
        redisReply *rr = th_cmd(c, "ACL LOG");
        ck_assert_msg(rr->type == REDIS_REPLY_ARRAY && rr->elements == 0,
                      "node %d: %zu ACL denials, the first: %s", i, rr->elements,
                      rr->elements && rr->element[0]->elements > 1 ? rr->element[0]->element[1]->str
                                                                   : "?");
        freeReplyObject(rr);
        redisFree(c);
    }
}
END_TEST

START_TEST(test_layout_refusal) {
    char env[600], *out;
    int port = th_cluster_owner_port(&CL, "{lay}"), rc;
    /* the library's own prefix is {lay}, as a single-layout daemon with cluster_hash_tag
     * would load it */
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s' DTQ_REDIS_CLUSTER_HASH_TAG=true", CL.url);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n lay functions install");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    snprintf(env, sizeof(env), "DTQ_REDIS_URL=redis://127.0.0.1:%d DTQ_REDIS_CLUSTER_HASH_TAG=true",
             port);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n lay enqueue jobs echo {}");
    ck_assert_msg(rc == 0 && strstr(out, "created"), "single layout: exit %d: %s", rc, out);
    free(out);
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", CL.url);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n lay enqueue jobs echo {}");
    ck_assert_msg(rc == 1 &&
                      strstr(out, "WRONG_LAYOUT namespace lay is laid out for a single Redis"),
                  "exit %d: %s", rc, out);
    free(out);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "-n lay stats");
    ck_assert_msg(rc == 1 && strstr(out, "WRONG_LAYOUT"), "exit %d: %s", rc, out);
    free(out);
}
END_TEST

/* The port of the replica of the primary on `port` (CLUSTER NODES), or -1. */
static int replica_of(int port) {
    redisContext *c = th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
    redisReply *r = th_cmd(c, "CLUSTER NODES");
    char id[64] = "", *line, *save = NULL, *text = strdup(r->str);
    int rport = -1;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char nid[64], addr[128], flags[128];
        int p = 0;
        if (sscanf(line, "%63s %127s %127s", nid, addr, flags) == 3 &&
            sscanf(strchr(addr, ':') + 1, "%d", &p) == 1 && p == port)
            snprintf(id, sizeof(id), "%s", nid);
    }
    free(text);
    text = strdup(r->str);
    for (line = strtok_r(text, "\n", &save); line && *id; line = strtok_r(NULL, "\n", &save)) {
        char nid[64], addr[128], flags[128], master[64];
        int p = 0;
        if (sscanf(line, "%63s %127s %127s %63s", nid, addr, flags, master) == 4 &&
            strstr(flags, "slave") && !strcmp(master, id) &&
            sscanf(strchr(addr, ':') + 1, "%d", &p) == 1)
            rport = p;
    }
    free(text);
    freeReplyObject(r);
    redisFree(c);
    return rport;
}

/* The shard of the shared slot {ns} down (its primary and its replica stopped, so no
 * failover): a producer's enqueue into a queue of a healthy shard still succeeds, warning
 * that what it asks of the shared slot was skipped (issue 27.10). Last: it stops nodes. */
START_TEST(test_enqueue_without_the_shared_slot) {
    int shared = th_cluster_owner_port(&CL, "{" NS "}"), replica = replica_of(shared), q = -1, rc,
        alive;
    pid_t p1, p2;
    char *out, args[512];
    for (int i = 0; i < NQ && q < 0; i++) {
        char tag[64]; /* the queue's tag: its slot's owner */
        snprintf(tag, sizeof(tag), "{" NS ":%.40s}", Q[i]);
        alive = th_cluster_owner_port(&CL, tag);
        if (alive != shared) q = i;
    }
    ck_assert_int_ge(q, 0);
    ck_assert_int_gt(replica, 0);
    p1 = CL.node[th_cluster_node_index(&CL, shared)].pid;
    p2 = CL.node[th_cluster_node_index(&CL, replica)].pid;
    kill(p1, SIGSTOP);
    kill(p2, SIGSTOP);
    snprintf(args, sizeof(args),
             "-n " NS " -t 2 -u redis-cluster://127.0.0.1:%d enqueue %s echo '{}' --id no-shared-1",
             alive, Q[q]);
    rc = th_run_dtqctl(&CL.node[0], &out, "", args);
    kill(p1, SIGCONT);
    kill(p2, SIGCONT);
    ck_assert_msg(rc == 0 && strstr(out, "no-shared-1 created") &&
                      strstr(out, "skipped: the shared slot did not answer"),
                  "exit %d: %s", rc, out);
    free(out);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cluster_ctl");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, test_install);
    tcase_add_test(tc, test_enqueue_nine_queues);
    tcase_add_test(tc, test_other_producers_and_stats);
    tcase_add_test(tc, test_by_id);
    tcase_add_test(tc, test_pause_resume);
    tcase_add_test(tc, test_scheduled_across_queues);
    tcase_add_test(tc, test_cron);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_dlq_empty);
    tcase_add_test(tc, test_dlq_merged);
    tcase_add_test(tc, test_acl_roles);
    tcase_add_test(tc, test_monitor_reads_unchecked);
    tcase_add_test(tc, test_layout_refusal);
    tcase_add_test(tc, test_enqueue_without_the_shared_slot);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
