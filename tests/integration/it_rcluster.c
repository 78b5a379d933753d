/* it_rcluster.c: dtq's Redis Cluster client against a real local cluster of 3 primaries and
 * 3 replicas (th_cluster_start, once for the suite, in the parent process: the cases run in
 * order and the later ones change the cluster: a slot migrated, a primary killed). The
 * slot map from CLUSTER SLOTS, dtq_cluster_keyslot against CLUSTER KEYSLOT, the routing
 * blocking client (rsync.c) over every shard, MOVED after a slot migration, ASK during one,
 * a primary SIGKILLed and replaced by its replica, and the daemon's refusal of a cluster
 * URL. (it_cluster.c is another thing: several daemons on
 * one Redis.) */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "cluster.h"
#include "rsync.h"
#include "scripts.h"

static th_cluster CL;

static void cluster_setup(void) {
    th_cluster_start(&CL, 3, 1);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* (a) 3 primaries covering 0-16383, each a node of the cluster, each with its replica. */
START_TEST(test_map) {
    for (int i = 0; i < CL.n; i++) {
        dtq_cluster_map *m = th_cluster_map(&CL, i);
        int seen[TH_CLUSTER_MAX] = {0};
        ck_assert_int_eq(m->nprimaries, 3);
        ck_assert_int_eq(dtq_cluster_map_covered(m), DTQ_CLUSTER_SLOTS);
        ck_assert_int_eq(m->nnodes, 6);
        for (int k = 0; k < m->nprimaries; k++) {
            const dtq_redis_endpoint *e = &m->nodes[m->primaries[k]];
            int idx = th_cluster_node_index(&CL, e->port);
            ck_assert_str_eq(e->host, "127.0.0.1");
            ck_assert_int_ge(idx, 0);
            ck_assert_int_eq(seen[idx], 0);
            seen[idx] = 1;
        }
        for (int k = 0; k < m->nranges; k++) ck_assert_int_eq(m->ranges[k].nreplicas, 1);
        /* the ranges tile 0..16383 */
        ck_assert_uint_eq(m->ranges[0].start, 0);
        ck_assert_uint_eq(m->ranges[m->nranges - 1].end, 16383);
        for (int k = 1; k < m->nranges; k++)
            ck_assert_uint_eq(m->ranges[k].start, m->ranges[k - 1].end + 1);
        dtq_cluster_map_free(m);
    }
}
END_TEST

/* (b) 2000 random keys (some with hash tags, some with braces that are not tags, some
 * binary) against CLUSTER KEYSLOT. */
START_TEST(test_keyslot_oracle) {
    redisContext *c = th_cluster_connect(&CL, 0);
    unsigned seed = (unsigned)getpid();
    int tagged = 0, n = 2000;
    for (int i = 0; i < n; i++) {
        char key[64];
        size_t len = 1 + (size_t)(rand_r(&seed) % 40);
        for (size_t k = 0; k < len; k++) {
            int x = rand_r(&seed) % 100;
            key[k] = x < 8    ? '{'
                     : x < 16 ? '}'
                     : x < 18 ? (char)(rand_r(&seed) % 256)
                              : (char)('a' + rand_r(&seed) % 26);
        }
        if (i % 4 == 0) {                            /* a clean tag at a random place */
            size_t at = (size_t)rand_r(&seed) % len; /* len + 3 <= 43 < sizeof(key) */
            memmove(key + at + 3, key + at, len - at);
            key[at] = '{';
            key[at + 1] = (char)('a' + i % 26);
            key[at + 2] = '}';
            len += 3;
            tagged++;
        }
        {
            redisReply *r = th_cmd(c, "CLUSTER KEYSLOT %b", key, len);
            ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
            ck_assert_msg(r->integer == dtq_cluster_keyslot(key, len),
                          "key %d (%zu bytes): Redis says %lld, dtq %u", i, len, r->integer,
                          dtq_cluster_keyslot(key, len));
            freeReplyObject(r);
        }
    }
    ck_assert_int_ge(tagged, 400);
    redisFree(c);
}
END_TEST

/* ---- the routing client (rsync.c) */

static dtq_rsync *rclient(void) {
    dtq_redis_url u;
    dtq_rsync_opts o;
    char err[512];
    dtq_rsync *c;
    ck_assert_msg(dtq_redis_url_parse(CL.url, &u, err, sizeof(err)) == 0, "%s", err);
    memset(&o, 0, sizeof(o));
    o.connect_timeout_ms = 2000;
    c = dtq_rsync_connect(&u, &o, err, sizeof(err));
    dtq_redis_url_deinit(&u);
    ck_assert_msg(c != NULL, "connect: %s", err);
    ck_assert(dtq_rsync_is_cluster(c));
    return c;
}

/* A command through the router; fails the test on NULL (a lost connection). */
static redisReply *rcmd(dtq_rsync *c, int argc, const char **argv) {
    char why[512];
    redisReply *r = dtq_rsync_command(c, argc, argv, NULL, why, sizeof(why));
    ck_assert_msg(r != NULL, "%s: %s", argv[0], why);
    return r;
}

static void rset(dtq_rsync *c, const char *k, const char *v) {
    const char *a[] = {"SET", k, v};
    redisReply *r = rcmd(c, 3, a);
    ck_assert_msg(r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK"), "SET %s: %s", k,
                  r->str ? r->str : "?");
    freeReplyObject(r);
}

/* GET through the router must answer v. */
static void rget_is(dtq_rsync *c, const char *k, const char *v) {
    const char *a[] = {"GET", k};
    redisReply *r = rcmd(c, 2, a);
    ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, v), "GET %s: type %d %s", k,
                  r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

static dtq_rsync_cluster_stats stats_of(const dtq_rsync *c) {
    dtq_rsync_cluster_stats st;
    dtq_rsync_cluster_stats_get(c, &st);
    return st;
}

/* (c) SET and GET of 200 keys (half of them hash-tagged) through the router: every key is
 * on the primary its slot maps to (read there directly), every primary holds some, and no
 * redirection was needed. */
START_TEST(test_route_all_shards) {
    dtq_rsync *c = rclient();
    const dtq_cluster_map *m = dtq_rsync_cluster_map(c);
    int per[TH_CLUSTER_MAX] = {0};
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(dtq_cluster_map_covered(m), DTQ_CLUSTER_SLOTS);
    for (int i = 0; i < 200; i++) {
        char k[64], v[64];
        if (i % 2)
            snprintf(k, sizeof(k), "route:%d", i);
        else
            snprintf(k, sizeof(k), "{tag%d}:route:%d", i % 17, i);
        snprintf(v, sizeof(v), "value-%d", i);
        rset(c, k, v);
    }
    m = dtq_rsync_cluster_map(c);
    for (int i = 0; i < 200; i++) {
        char k[64], v[64];
        const dtq_redis_endpoint *e;
        redisContext *d;
        redisReply *r;
        int idx;
        if (i % 2)
            snprintf(k, sizeof(k), "route:%d", i);
        else
            snprintf(k, sizeof(k), "{tag%d}:route:%d", i % 17, i);
        snprintf(v, sizeof(v), "value-%d", i);
        rget_is(c, k, v);
        m = dtq_rsync_cluster_map(c);
        e = dtq_cluster_map_primary(m, dtq_cluster_keyslot(k, strlen(k)));
        idx = th_cluster_node_index(&CL, e->port);
        ck_assert_int_ge(idx, 0);
        per[idx]++;
        d = th_cluster_connect(&CL, idx);
        r = th_cmd(d, "GET %s", k);
        ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, v),
                      "%s is not on its slot's primary %d", k, e->port);
        freeReplyObject(r);
        redisFree(d);
    }
    {
        int shards = 0;
        for (int i = 0; i < CL.n; i++) shards += per[i] > 0;
        ck_assert_int_eq(shards, 3);
    }
    ck_assert_int_eq(stats_of(c).moved, 0);
    ck_assert_int_eq(stats_of(c).ask, 0);
    ck_assert_int_eq(stats_of(c).refreshes, 1);
    ck_assert_int_eq(stats_of(c).connects, 3); /* one link per primary */
    /* a command without a key goes to the node of the previous one: WAIT counts the
     * replica of the write before it */
    {
        const char *w[] = {"WAIT", "1", "2000"};
        redisReply *r;
        rset(c, "route:wait", "x");
        r = rcmd(c, 3, w);
        ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
        ck_assert_int_eq(r->integer, 1);
        freeReplyObject(r);
    }
    dtq_rsync_close(c);
}
END_TEST

/* (d) A slot migrated to another primary behind the client's back: its map is stale, the
 * old owner answers MOVED, the client reads the map again and gets the key from the new
 * owner. */
START_TEST(test_moved) {
    const char *key = "moved:key";
    dtq_rsync *c = rclient();
    int src, dst, slot = dtq_cluster_keyslot(key, strlen(key));
    rset(c, key, "before-the-move");
    rget_is(c, key, "before-the-move");
    src = th_cluster_owner_port(&CL, key);
    dst = th_cluster_other_primary(&CL, src);
    ck_assert_int_eq(dtq_cluster_map_primary(dtq_rsync_cluster_map(c), (uint16_t)slot)->port, src);
    th_cluster_migrate_start(&CL, key, src, dst);
    th_cluster_migrate_finish(&CL, key, src, dst);
    ck_assert_int_eq(stats_of(c).moved, 0);
    rget_is(c, key, "before-the-move");
    ck_assert_int_eq(stats_of(c).moved, 1);
    ck_assert_int_eq(stats_of(c).ask, 0);
    ck_assert_int_ge(stats_of(c).refreshes, 2);
    ck_assert_int_eq(dtq_cluster_map_primary(dtq_rsync_cluster_map(c), (uint16_t)slot)->port, dst);
    /* the next command of that slot goes straight to the new owner */
    rset(c, key, "after-the-move");
    rget_is(c, key, "after-the-move");
    ck_assert_int_eq(stats_of(c).moved, 1);
    dtq_rsync_close(c);
}
END_TEST

/* (e) During a migration (the key already moved, the slot still MIGRATING on the source)
 * the source answers ASK: the client sends ASKING and the command to the target, once,
 * and keeps its map; once the slot is given to the target, MOVED. */
START_TEST(test_ask) {
    const char *key = "ask:key";
    dtq_rsync *c = rclient();
    int src, dst, slot = dtq_cluster_keyslot(key, strlen(key));
    rset(c, key, "asked");
    src = th_cluster_owner_port(&CL, key);
    dst = th_cluster_other_primary(&CL, src);
    th_cluster_migrate_start(&CL, key, src, dst);
    rget_is(c, key, "asked");
    ck_assert_int_eq(stats_of(c).ask, 1);
    ck_assert_int_eq(stats_of(c).moved, 0);
    ck_assert_int_eq(stats_of(c).refreshes, 1); /* ASK does not change the map */
    ck_assert_int_eq(dtq_cluster_map_primary(dtq_rsync_cluster_map(c), (uint16_t)slot)->port, src);
    rget_is(c, key, "asked"); /* ASK again: it is one command's detour, not a new route */
    ck_assert_int_eq(stats_of(c).ask, 2);
    th_cluster_migrate_finish(&CL, key, src, dst);
    rget_is(c, key, "asked");
    ck_assert_int_eq(stats_of(c).moved, 1);
    ck_assert_int_eq(stats_of(c).ask, 2);
    ck_assert_int_eq(dtq_cluster_map_primary(dtq_rsync_cluster_map(c), (uint16_t)slot)->port, dst);
    dtq_rsync_close(c);
}
END_TEST

/* (f) A primary SIGKILLed: its replica takes over after the node timeout (2 s); the client
 * finds the node gone, reads the map again and answers for that shard's keys within ~10 s;
 * the other shards answer all along. */
START_TEST(test_failover) {
    const char *key = "failover:key", *other = NULL;
    char cand[32];
    dtq_rsync *c = rclient();
    int victim, idx, ok = 0, fails = 0;
    int64_t t0, took;
    rset(c, key, "survives");
    {
        const char *w[] = {"WAIT", "1", "2000"};
        redisReply *r = rcmd(c, 3, w);
        ck_assert_int_eq(r->integer, 1); /* the replica has it before the kill */
        freeReplyObject(r);
    }
    victim = th_cluster_owner_port(&CL, key);
    for (int i = 0; i < 100 && !other; i++) { /* a key of another shard */
        snprintf(cand, sizeof(cand), "other:%d", i);
        if (th_cluster_owner_port(&CL, cand) != victim) other = cand;
    }
    ck_assert_ptr_nonnull(other);
    rset(c, other, "elsewhere");
    idx = th_cluster_node_index(&CL, victim);
    ck_assert_int_eq(kill(CL.node[idx].pid, SIGKILL), 0);
    CL.node[idx].pid = 0;
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 15000) {
        const char *a[] = {"GET", key};
        char why[512];
        redisReply *r = dtq_rsync_command(c, 2, a, NULL, why, sizeof(why));
        if (r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "survives")) {
            freeReplyObject(r);
            ok = 1;
            break;
        }
        fails++;
        if (r) freeReplyObject(r);
        rget_is(c, other, "elsewhere"); /* the other shards serve meanwhile */
        th_sleep_ms(100);
    }
    took = th_now_ms() - t0;
    ck_assert_msg(ok, "no answer for the failed shard's key in 15 s");
    ck_assert_msg(took < 10000, "the failed shard's key answered only after %lld ms",
                  (long long)took);
    ck_assert_int_ge(fails, 1);
    ck_assert_int_ge(stats_of(c).node_failures, 1);
    ck_assert_int_ge(stats_of(c).refreshes, 2);
    ck_assert_int_ne(
        dtq_cluster_map_primary(dtq_rsync_cluster_map(c), dtq_cluster_keyslot(key, strlen(key)))
            ->port,
        victim);
    rset(c, key, "written-after");
    rget_is(c, key, "written-after");
    dtq_rsync_close(c);
}
END_TEST

/* A seed that is not a cluster node ends the connect with a clear line; dead seeds are
 * skipped (named through the note). */
static int notes;
static void count_note(const char *line, void *arg) {
    (void)arg;
    ck_assert_msg(strstr(line, "cannot connect to Redis at 127.0.0.1:") &&
                      strstr(line, "; trying the next"),
                  "%s", line);
    notes++;
}

START_TEST(test_seeds) {
    th_redis single;
    dtq_redis_url u;
    dtq_rsync_opts o;
    char url[256], err[512];
    dtq_rsync *c;
    th_redis_start_tcp(&single, NULL, NULL);
    snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%d", single.port);
    ck_assert_int_eq(dtq_redis_url_parse(url, &u, err, sizeof(err)), 0);
    memset(&o, 0, sizeof(o));
    o.connect_timeout_ms = 2000;
    ck_assert_ptr_null(dtq_rsync_connect(&u, &o, err, sizeof(err)));
    ck_assert_msg(strstr(err, "is it a cluster node?"), "%s", err);
    dtq_redis_url_deinit(&u);
    th_redis_stop(&single);
    /* a dead seed (the single server, now stopped) before a live one */
    snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", single.port,
             CL.node[1].port);
    ck_assert_int_eq(dtq_redis_url_parse(url, &u, err, sizeof(err)), 0);
    o.note = count_note;
    c = dtq_rsync_connect(&u, &o, err, sizeof(err));
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert_int_eq(notes, 1);
    rset(c, "seeds:k", "v");
    rget_is(c, "seeds:k", "v");
    dtq_rsync_close(c);
    dtq_redis_url_deinit(&u);
}
END_TEST

/* dtqctl functions install on a cluster: the library on every primary (a Function runs on
 * the node that serves its keys), so each answers <ns>_version. */
START_TEST(test_functions_install_every_primary) {
    char *out = NULL, env[sizeof(CL.url) + 32];
    dtq_cluster_map *m = th_cluster_map(&CL, 0);
    int rc;
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", CL.url);
    rc = th_run_dtqctl(&CL.node[0], &out, env, "functions install");
    ck_assert_msg(rc == 0 && strstr(out, "on 3 primaries"), "exit %d: %s", rc, out);
    free(out);
    for (int p = 0; p < m->nprimaries; p++) {
        int i = th_cluster_node_index(&CL, m->nodes[m->primaries[p]].port);
        redisContext *c = th_cluster_connect(&CL, i);
        redisReply *r = th_cmd(c, "FCALL_RO dtq_version 0");
        ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, dtq_scripts_version()),
                      "primary %d: %s", m->nodes[m->primaries[p]].port, r->str ? r->str : "?");
        freeReplyObject(r);
        redisFree(c);
    }
    dtq_cluster_map_free(m);
}
END_TEST

/* The owner of a key's slot, connected (the caller frees it). */
static redisContext *owner_of(const char *key) {
    int port = th_cluster_owner_port(&CL, key);
    return th_cluster_connect(&CL, th_cluster_node_index(&CL, port));
}

/* The cluster layout at the Functions (reference 5.9): queues whose tags land on every
 * shard each take an enqueue in their own slot, read back per queue; another queue's
 * argument, another namespace's tag, a {dtq} call that names a queue are refused; a {dtq}
 * read lists no queue; an event published on one node reaches a subscriber on another;
 * the layout marker refuses the other layout. Needs the library on every primary (the
 * case before). */
START_TEST(test_functions_scoped) {
    const char *queues[] = {"q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"};
    int nq = 9, shard_seen[TH_CLUSTER_MAX] = {0}, shards = 0;
    redisContext *g = owner_of("{dtq}"), *sub;
    redisReply *r;
    char tag[64], other_tag[64];

    r = th_cmd(g, "FCALL dtq_layout 1 {dtq} cluster");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "cluster"), "%s", r->str);
    freeReplyObject(r);
    r = th_cmd(g, "FCALL dtq_layout 1 {dtq} single");
    th_expect_refused(r, "INVALID_ARGUMENT single takes no key");

    /* a subscriber on a node that is not the {dtq:q1} owner */
    snprintf(tag, sizeof(tag), "{dtq:%s}", queues[0]);
    sub = th_cluster_connect(
        &CL,
        th_cluster_node_index(&CL, th_cluster_other_primary(&CL, th_cluster_owner_port(&CL, tag))));
    r = th_cmd(sub, "SUBSCRIBE {dtq}:events");
    freeReplyObject(r);

    for (int i = 0; i < nq; i++) {
        redisContext *c;
        int port;
        snprintf(tag, sizeof(tag), "{dtq:%s}", queues[i]);
        port = th_cluster_owner_port(&CL, tag);
        if (!shard_seen[th_cluster_node_index(&CL, port)]++) shards++;
        printf("queue %s: slot %d, node %d\n", queues[i], dtq_cluster_keyslot(tag, strlen(tag)),
               port);
        c = owner_of(tag);
        r = redisCommand(c, "FCALL dtq_enqueue 1 %s %s echo {\"i\":%d} task_id t-%d", tag,
                         queues[i], i, i);
        ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "%s: %s", tag,
                      r && r->str ? r->str : "?");
        freeReplyObject(r);
        /* the task and its stream entry under the queue's tag */
        r = redisCommand(c, "HGET %s:task:t-%d queue", tag, i);
        ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, queues[i]), "%s", tag);
        freeReplyObject(r);
        r = redisCommand(c, "XLEN %s:stream:%s:p5", tag, queues[i]);
        ck_assert_int_eq(r->integer, 1);
        freeReplyObject(r);
        /* another queue's argument in this queue's call */
        snprintf(other_tag, sizeof(other_tag), "%s", queues[(i + 1) % nq]);
        r = redisCommand(c, "FCALL dtq_enqueue 1 %s %s echo {}", tag, other_tag);
        th_expect_refused(r, "INVALID_ARGUMENT queue");
        r = redisCommand(c, "FCALL dtq_pause 1 %s %s", tag, other_tag);
        th_expect_refused(r, "INVALID_ARGUMENT queue");
        /* the read views answer for this queue alone */
        r = redisCommand(c, "FCALL_RO dtq_queue_view 1 %s %s", tag, queues[i]);
        ck_assert_msg(r->type == REDIS_REPLY_STRING && strstr(r->str, "\"depth\":1"), "%s: %s", tag,
                      r->str);
        freeReplyObject(r);
        r = redisCommand(c, "FCALL_RO dtq_stats 1 %s", tag);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        snprintf(other_tag, sizeof(other_tag), "queue:%s:depth", queues[i]);
        ck_assert_str_eq(r->element[0]->str, other_tag);
        ck_assert_int_eq(r->element[1]->integer, 1);
        freeReplyObject(r);
        redisFree(c);
    }
    ck_assert_int_eq(shards, 3);

    /* a tag of another namespace; a {dtq} call that names a queue */
    {
        redisContext *o = owner_of("{other:q1}");
        r = th_cmd(o, "FCALL dtq_enqueue 1 {other:q1} q1 echo {}");
        th_expect_refused(r, "INVALID_ARGUMENT key {other:q1} is not a hash tag of namespace dtq");
        redisFree(o);
    }
    r = th_cmd(g, "FCALL dtq_enqueue 1 {dtq} q1 echo {}");
    th_expect_refused(r, "INVALID_ARGUMENT queue 'q1' is not the queue of the call's key {dtq}");
    r = th_cmd(g, "FCALL_RO dtq_overview 1 {dtq}");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && strstr(r->str, "\"queues\":[]"), "%s", r->str);
    freeReplyObject(r);

    /* the enqueue of q1 published on its node; the subscriber elsewhere got it */
    {
        redisReply *m = NULL;
        struct timeval tv = {5, 0};
        redisSetTimeout(sub, tv);
        ck_assert_int_eq(redisGetReply(sub, (void **)&m), REDIS_OK);
        ck_assert_msg(m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
                          strstr(m->element[2]->str, "\"task_id\":\"t-0\""),
                      "no event of q1 across nodes");
        freeReplyObject(m);
    }
    redisFree(sub);

    /* the marker: a namespace laid out single refuses a cluster client; one with no
     * marker but the single layout's {dtq}:config (cluster_hash_tag) too */
    freeReplyObject(th_cmd(g, "SET {dtq}:layout single"));
    r = th_cmd(g, "FCALL dtq_layout 1 {dtq} cluster");
    th_expect_refused(r, "WRONG_LAYOUT namespace dtq is laid out for a single Redis");
    freeReplyObject(th_cmd(g, "DEL {dtq}:layout"));
    freeReplyObject(th_cmd(g, "HSET {dtq}:config max_payload_bytes 1000"));
    r = th_cmd(g, "FCALL dtq_layout 1 {dtq} cluster");
    th_expect_refused(r, "WRONG_LAYOUT namespace dtq is laid out for a single Redis");
    freeReplyObject(th_cmd(g, "DEL {dtq}:config"));
    r = th_cmd(g, "FCALL dtq_layout 1 {dtq} cluster");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "cluster"), "%s", r->str);
    freeReplyObject(r);
    redisFree(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rcluster");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, test_map);
    tcase_add_test(tc, test_keyslot_oracle);
    tcase_add_test(tc, test_functions_install_every_primary);
    tcase_add_test(tc, test_functions_scoped);
    tcase_add_test(tc, test_seeds);
    tcase_add_test(tc, test_route_all_shards);
    tcase_add_test(tc, test_moved);
    tcase_add_test(tc, test_ask);
    tcase_add_test(tc, test_failover); /* the last: it kills a primary */
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
