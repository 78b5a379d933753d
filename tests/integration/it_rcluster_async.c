/* it_rcluster_async.c: the event-driven Redis Cluster router (rcluster.c) against a real
 * local cluster of 3 primaries and 3 replicas (th_cluster_start, once for the suite; the
 * cases run in order and the later ones change the cluster: slots migrated, a primary
 * killed). Each case drives its own libevent loop against a deadline: 300 SET/GET pipelined
 * over every shard, MOVED after a slot migration, ASK during one, a primary SIGKILLed and
 * replaced by its replica, and a URL that is not a cluster's. */
#include <check.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "cluster.h"
#include "rcluster.h"

static th_cluster CL;

static void cluster_setup(void) {
    th_cluster_start(&CL, 3, 1);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* ---- the router on a loop of the test's */

typedef struct answer {
    int done;
    int null;
    int type;
    long long integer;
    char str[128];
    int seq; /* the order it was answered in */
} answer;

static int answered;

static void on_answer(redisAsyncContext *ctx, void *reply, void *priv) {
    answer *a = priv;
    redisReply *r = reply;
    (void)ctx;
    ck_assert_msg(!a->done, "a callback ran twice");
    a->done = 1;
    a->seq = answered++;
    if (!r) {
        a->null = 1;
        return;
    }
    a->type = r->type;
    a->integer = r->integer;
    if (r->str) snprintf(a->str, sizeof(a->str), "%s", r->str);
}

typedef struct router {
    struct event_base *base;
    dtq_rcluster *rc;
    int ups, downs;
    int primaries_up[16]; /* the ports node_fn was told of, in order */
    int nprimaries_up;
    answer pings[16]; /* what node_fn sent to each */
} router;

/* node_fn: notes the port and sends a PING by the slot given, which the node must answer. */
static void on_primary_up(dtq_rcluster *rc, const char *host, int port, int slot, void *arg) {
    router *r = arg;
    const char *argv[] = {"PING"};
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_int_ge(slot, 0);
    ck_assert_int_lt(r->nprimaries_up, 16);
    ck_assert_int_eq(
        dtq_rcluster_command_slot(rc, slot, on_answer, &r->pings[r->nprimaries_up], 1, argv, NULL),
        DTQ_OK);
    r->primaries_up[r->nprimaries_up++] = port;
}

static void on_state(dtq_rcluster *rc, int up, void *arg) {
    router *r = arg;
    (void)rc;
    if (up)
        r->ups++;
    else
        r->downs++;
}

/* Runs the loop until *flag is set or ms pass; returns *flag. */
static int run_until(router *r, const int *flag, int64_t ms) {
    int64_t end = th_now_ms() + ms;
    while (!*flag && th_now_ms() < end) event_base_loop(r->base, EVLOOP_ONCE);
    return *flag;
}

static void run_for(router *r, int64_t ms) {
    int never = 0;
    run_until(r, &never, ms);
}

static void router_open(router *r, const char *url) {
    dtq_redis_url u;
    char err[512];
    memset(r, 0, sizeof(*r));
    r->base = event_base_new();
    ck_assert_msg(dtq_redis_url_parse(url, &u, err, sizeof(err)) == 0, "%s", err);
    r->rc = dtq_rcluster_new(r->base, &u, 1000, "rcluster", on_state, r);
    dtq_redis_url_deinit(&u);
    ck_assert_ptr_nonnull(r->rc);
    dtq_rcluster_set_node_fn(r->rc, on_primary_up, r);
    dtq_rcluster_start(r->rc);
}

static void router_up(router *r) {
    router_open(r, CL.url);
    ck_assert_msg(run_until(r, &r->ups, 5000), "the router did not come up in 5 s");
    ck_assert(dtq_rcluster_is_up(r->rc));
}

static void router_close(router *r) {
    dtq_rcluster_free(r->rc);
    event_base_free(r->base);
}

static dtq_rcluster_stats stats_of(const router *r) {
    dtq_rcluster_stats st;
    dtq_rcluster_stats_get(r->rc, &st);
    return st;
}

/* One command through the router, answered within 5 s. */
static void call(router *r, answer *a, int argc, const char **argv) {
    memset(a, 0, sizeof(*a));
    ck_assert_int_eq(dtq_rcluster_command(r->rc, on_answer, a, argc, argv, NULL), DTQ_OK);
    ck_assert_msg(!a->done, "answered from inside the call");
    ck_assert_msg(run_until(r, &a->done, 5000), "%s: no answer in 5 s", argv[0]);
}

static void rset(router *r, const char *k, const char *v) {
    const char *argv[] = {"SET", k, v};
    answer a;
    call(r, &a, 3, argv);
    ck_assert_msg(!a.null && a.type == REDIS_REPLY_STATUS && !strcmp(a.str, "OK"), "SET %s: %s", k,
                  a.null ? "(lost)" : a.str);
}

static void rget_is(router *r, const char *k, const char *v) {
    const char *argv[] = {"GET", k};
    answer a;
    call(r, &a, 2, argv);
    ck_assert_msg(!a.null && a.type == REDIS_REPLY_STRING && !strcmp(a.str, v),
                  "GET %s: type %d %s", k, a.type, a.null ? "(lost)" : a.str);
}

static int map_owner(const router *r, const char *key) {
    const dtq_cluster_map *m = dtq_rcluster_map(r->rc);
    ck_assert_ptr_nonnull(m);
    return dtq_cluster_map_primary(m, dtq_cluster_keyslot(key, strlen(key)))->port;
}

/* (e) a URL that is not a cluster's is refused; a cluster URL naming a single Redis never
 * comes up (its CLUSTER SLOTS is an error) and keeps asking. */
START_TEST(test_not_a_cluster) {
    th_redis single;
    dtq_redis_url u;
    char url[256], err[512];
    router r;
    struct event_base *base = event_base_new();
    th_redis_start_tcp(&single, NULL, NULL);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", single.port);
    ck_assert_int_eq(dtq_redis_url_parse(url, &u, err, sizeof(err)), 0);
    ck_assert_ptr_null(dtq_rcluster_new(base, &u, 1000, "x", NULL, NULL));
    dtq_redis_url_deinit(&u);
    event_base_free(base);
    snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%d", single.port);
    router_open(&r, url);
    run_for(&r, 1500);
    ck_assert_int_eq(r.ups, 0);
    ck_assert(!dtq_rcluster_is_up(r.rc));
    ck_assert_int_ge(stats_of(&r).refresh_fails, 2); /* asked again, with backoff */
    ck_assert_int_eq(stats_of(&r).refreshes, 0);
    {
        const char *argv[] = {"GET", "k"};
        answer a = {0};
        ck_assert_int_eq(dtq_rcluster_command(r.rc, on_answer, &a, 2, argv, NULL), DTQ_ERR);
    }
    router_close(&r);
    th_redis_stop(&single);
}
END_TEST

#define NKEYS 300

static void key_of(int i, char *k, size_t n) {
    if (i % 2)
        snprintf(k, n, "async:%d", i);
    else
        snprintf(k, n, "{atag%d}:async:%d", i % 13, i);
}

/* (a) 300 SET then 300 GET, each batch sent at once (pipelined per node): every answer
 * right, answered in the order sent per node, every key on its slot's primary, all three
 * shards used, no redirection; a keyless command answered; every slot up. */
START_TEST(test_pipeline_all_shards) {
    static answer sets[NKEYS], gets[NKEYS];
    router r;
    dtq_rcluster_primary p[8];
    int per[TH_CLUSTER_MAX] = {0}, shards = 0, last_seq[TH_CLUSTER_MAX], all;
    router_up(&r);
    ck_assert_int_eq(dtq_rcluster_primaries(r.rc, p, 8), 3);
    run_for(&r, 300); /* the links to the primaries come up */
    for (int k = 0; k < 3; k++) {
        ck_assert_int_ge(p[k].slot, 0);
        ck_assert(dtq_rcluster_slot_up(r.rc, p[k].slot));
    }
    for (int s = 0; s < DTQ_CLUSTER_SLOTS; s += 97) ck_assert(dtq_rcluster_slot_up(r.rc, s));
    /* node_fn was told of each primary's link once, and its PING went there */
    ck_assert_int_eq(r.nprimaries_up, 3);
    for (int k = 0; k < 3; k++) {
        int found = 0;
        for (int j = 0; j < 3; j++) found += r.primaries_up[j] == p[k].port;
        ck_assert_int_eq(found, 1);
        ck_assert_msg(r.pings[k].done && !strcmp(r.pings[k].str, "PONG"), "node_fn's PING %d", k);
    }
    answered = 0;
    for (int i = 0; i < NKEYS; i++) {
        char k[64], v[64];
        const char *argv[] = {"SET", k, v};
        key_of(i, k, sizeof(k));
        snprintf(v, sizeof(v), "value-%d", i);
        ck_assert_int_eq(dtq_rcluster_command(r.rc, on_answer, &sets[i], 3, argv, NULL), DTQ_OK);
    }
    for (int i = 0; i < NKEYS; i++) {
        char k[64];
        const char *argv[] = {"GET", k};
        key_of(i, k, sizeof(k));
        ck_assert_int_eq(dtq_rcluster_command(r.rc, on_answer, &gets[i], 2, argv, NULL), DTQ_OK);
    }
    all = 0;
    {
        int64_t end = th_now_ms() + 10000;
        while (th_now_ms() < end && !all) {
            event_base_loop(r.base, EVLOOP_ONCE);
            all = gets[NKEYS - 1].done;
            for (int i = 0; i < NKEYS && all; i++) all = sets[i].done && gets[i].done;
        }
    }
    ck_assert_msg(all, "not every command answered in 10 s");
    for (int i = 0; i < TH_CLUSTER_MAX; i++) last_seq[i] = -1;
    for (int i = 0; i < NKEYS; i++) {
        char k[64], v[64];
        int idx;
        key_of(i, k, sizeof(k));
        snprintf(v, sizeof(v), "value-%d", i);
        ck_assert_msg(!sets[i].null && !strcmp(sets[i].str, "OK"), "SET %s", k);
        ck_assert_msg(!gets[i].null && gets[i].type == REDIS_REPLY_STRING &&
                          !strcmp(gets[i].str, v),
                      "GET %s: %s", k, gets[i].str);
        idx = th_cluster_node_index(&CL, map_owner(&r, k));
        ck_assert_int_ge(idx, 0);
        per[idx]++;
        /* per node, the SETs are answered in the order they were sent */
        ck_assert_int_gt(sets[i].seq, last_seq[idx]);
        last_seq[idx] = sets[i].seq;
        ck_assert_int_lt(sets[i].seq, gets[i].seq);
        if (i % 10 == 0) { /* the key is on its slot's primary */
            redisContext *d = th_cluster_connect(&CL, idx);
            redisReply *x = th_cmd(d, "GET %s", k);
            ck_assert_msg(x->type == REDIS_REPLY_STRING && !strcmp(x->str, v), "%s not on %d", k,
                          CL.node[idx].port);
            freeReplyObject(x);
            redisFree(d);
        }
    }
    for (int i = 0; i < CL.n; i++) shards += per[i] > 0;
    ck_assert_int_eq(shards, 3);
    ck_assert_int_eq(stats_of(&r).moved, 0);
    ck_assert_int_eq(stats_of(&r).ask, 0);
    ck_assert_int_eq(stats_of(&r).refreshes, 1);
    ck_assert_int_eq(stats_of(&r).lost, 0);
    {
        const char *argv[] = {"PING"};
        answer a;
        call(&r, &a, 1, argv);
        ck_assert_str_eq(a.str, "PONG");
    }
    router_close(&r);
}
END_TEST

/* (b) a slot migrated behind the router's back: the old owner answers MOVED, the router
 * follows it and reads the map again; later commands of the slot go straight to the new
 * owner. */
START_TEST(test_moved) {
    const char *key = "amoved:key";
    router r;
    int src, dst;
    router_up(&r);
    rset(&r, key, "before-the-move");
    src = th_cluster_owner_port(&CL, key);
    dst = th_cluster_other_primary(&CL, src);
    ck_assert_int_eq(map_owner(&r, key), src);
    th_cluster_migrate_start(&CL, key, src, dst);
    th_cluster_migrate_finish(&CL, key, src, dst);
    rget_is(&r, key, "before-the-move");
    ck_assert_int_eq(stats_of(&r).moved, 1);
    ck_assert_int_eq(stats_of(&r).ask, 0);
    ck_assert_int_eq(map_owner(&r, key), dst);
    {
        int64_t end = th_now_ms() + 3000;
        while (stats_of(&r).refreshes < 2 && th_now_ms() < end)
            event_base_loop(r.base, EVLOOP_ONCE);
    }
    ck_assert_int_ge(stats_of(&r).refreshes, 2);
    ck_assert_int_eq(map_owner(&r, key), dst); /* the map read agrees */
    rset(&r, key, "after-the-move");
    rget_is(&r, key, "after-the-move");
    ck_assert_int_eq(stats_of(&r).moved, 1);
    router_close(&r);
}
END_TEST

/* (c) during a migration the source answers ASK: ASKING and the command at the target,
 * once, the map unchanged; after the slot is given away, MOVED. */
START_TEST(test_ask) {
    const char *key = "aask:key";
    router r;
    int src, dst;
    router_up(&r);
    rset(&r, key, "asked");
    src = th_cluster_owner_port(&CL, key);
    dst = th_cluster_other_primary(&CL, src);
    th_cluster_migrate_start(&CL, key, src, dst);
    rget_is(&r, key, "asked");
    ck_assert_int_eq(stats_of(&r).ask, 1);
    ck_assert_int_eq(stats_of(&r).moved, 0);
    ck_assert_int_eq(stats_of(&r).refreshes, 1);
    ck_assert_int_eq(map_owner(&r, key), src);
    rget_is(&r, key, "asked"); /* each command takes the detour */
    ck_assert_int_eq(stats_of(&r).ask, 2);
    th_cluster_migrate_finish(&CL, key, src, dst);
    rget_is(&r, key, "asked");
    ck_assert_int_eq(stats_of(&r).moved, 1);
    ck_assert_int_eq(stats_of(&r).ask, 2);
    ck_assert_int_eq(map_owner(&r, key), dst);
    router_close(&r);
}
END_TEST

/* An endless redirection (the slot MIGRATING on its owner, a key it does not hold, the
 * target not IMPORTING: ASK there, MOVED back, ...): after DTQ_CLUSTER_MAX_REDIRECTS
 * followed the caller gets the routers' one answer (cluster.c's dtq_route_decide, as
 * dtqctl's): an error reply naming the count and the last redirection. */
START_TEST(test_redirect_limit) {
    const char *key = "aloop:key";
    router r;
    int src, dst, slot = dtq_cluster_keyslot(key, strlen(key));
    char *did;
    router_up(&r);
    src = th_cluster_owner_port(&CL, key);
    dst = th_cluster_other_primary(&CL, src);
    did = th_cluster_node_id(&CL, dst);
    th_cluster_node_ok(&CL, src, "CLUSTER SETSLOT %d MIGRATING %s", slot, did);
    {
        const char *argv[] = {"GET", key};
        answer a;
        call(&r, &a, 2, argv);
        ck_assert_int_eq(a.type, REDIS_REPLY_ERROR);
        ck_assert_msg(!strncmp(a.str, "more than 5 cluster redirections for slot ", 42) &&
                          (strstr(a.str, "(the last: ASK ") || strstr(a.str, "(the last: MOVED ")),
                      "%s", a.str);
    }
    ck_assert_int_eq(stats_of(&r).ask + stats_of(&r).moved, DTQ_CLUSTER_MAX_REDIRECTS);
    ck_assert_int_ge(stats_of(&r).ask, 2);
    th_cluster_node_ok(&CL, src, "CLUSTER SETSLOT %d STABLE", slot);
    free(did);
    router_close(&r);
}
END_TEST

/* A callback that frees the router: the other commands in flight get NULL, once; nothing
 * else runs. */
static router *freeing;
static void free_in_callback(redisAsyncContext *ctx, void *reply, void *priv) {
    on_answer(ctx, reply, priv);
    dtq_rcluster_free(freeing->rc);
}

START_TEST(test_free_in_callback) {
    static answer first, rest[30];
    router r;
    router_up(&r);
    freeing = &r;
    {
        const char *argv[] = {"SET", "afree:0", "v"};
        ck_assert_int_eq(dtq_rcluster_command(r.rc, free_in_callback, &first, 3, argv, NULL),
                         DTQ_OK);
    }
    for (int i = 0; i < 30; i++) {
        char k[32];
        const char *argv[] = {"GET", k};
        snprintf(k, sizeof(k), "afree:%d", i);
        ck_assert_int_eq(dtq_rcluster_command(r.rc, on_answer, &rest[i], 2, argv, NULL), DTQ_OK);
    }
    ck_assert(run_until(&r, &first.done, 5000));
    run_for(&r, 300);
    for (int i = 0; i < 30; i++)
        ck_assert_msg(rest[i].done, "command %d never answered after the free", i);
    /* the SET's own node answers in order: its GETs may have come first; those after are
     * NULL, never a reply */
    for (int i = 0; i < 30; i++)
        if (rest[i].seq > first.seq) ck_assert_msg(rest[i].null, "command %d answered", i);
    event_base_free(r.base);
}
END_TEST

/* (d) a primary SIGKILLed: its slots' commands fail (NULL) or wait; the router reads the
 * map until the replica's promotion shows and answers for that shard within ~10 s; another
 * shard answers all along. */
START_TEST(test_failover) {
    const char *key = "afailover:key", *other = NULL;
    char cand[32];
    router r;
    answer va, oa;
    int victim, idx, ok = 0, vfails = 0, others = 0, vsent = 0, osent = 0;
    int64_t t0, took, last_other = 0;
    router_up(&r);
    rset(&r, key, "survives");
    {
        const char *argv[] = {"WAIT", "1", "2000"};
        answer a = {0};
        ck_assert_int_eq(dtq_rcluster_command_at(r.rc, key, on_answer, &a, 3, argv, NULL), DTQ_OK);
        ck_assert(run_until(&r, &a.done, 5000));
        ck_assert_int_eq(a.integer, 1); /* the replica has it before the kill */
    }
    victim = th_cluster_owner_port(&CL, key);
    for (int i = 0; i < 100 && !other; i++) {
        snprintf(cand, sizeof(cand), "aother:%d", i);
        if (th_cluster_owner_port(&CL, cand) != victim) other = cand;
    }
    ck_assert_ptr_nonnull(other);
    rset(&r, other, "elsewhere");
    idx = th_cluster_node_index(&CL, victim);
    ck_assert_int_eq(kill(CL.node[idx].pid, SIGKILL), 0);
    CL.node[idx].pid = 0;
    t0 = th_now_ms();
    memset(&va, 0, sizeof(va));
    memset(&oa, 0, sizeof(oa));
    while (th_now_ms() - t0 < 15000) {
        if (vsent && va.done) {
            if (!va.null && va.type == REDIS_REPLY_STRING && !strcmp(va.str, "survives")) {
                ok = 1;
                break;
            }
            vfails++;
            vsent = 0;
        }
        if (osent && oa.done) {
            ck_assert_msg(!oa.null && !strcmp(oa.str, "elsewhere"), "the other shard's key: %s",
                          oa.null ? "(lost)" : oa.str);
            others++;
            osent = 0;
        }
        if (!vsent) {
            const char *argv[] = {"GET", key};
            memset(&va, 0, sizeof(va));
            ck_assert_int_eq(dtq_rcluster_command(r.rc, on_answer, &va, 2, argv, NULL), DTQ_OK);
            vsent = 1;
        }
        if (!osent && th_now_ms() - last_other >= 100) {
            const char *argv[] = {"GET", other};
            memset(&oa, 0, sizeof(oa));
            ck_assert_int_eq(dtq_rcluster_command(r.rc, on_answer, &oa, 2, argv, NULL), DTQ_OK);
            osent = 1;
            last_other = th_now_ms();
        }
        event_base_loop(r.base, EVLOOP_ONCE);
    }
    took = th_now_ms() - t0;
    ck_assert_msg(ok, "no answer for the failed shard's key in 15 s");
    ck_assert_msg(took < 10000, "the failed shard's key answered only after %lld ms",
                  (long long)took);
    /* the other shard answered while the failed one could not (~3 s) */
    ck_assert_msg(others >= 10, "the other shard answered %d times meanwhile", others);
    ck_assert_int_ge(stats_of(&r).node_downs, 1);
    ck_assert_int_ge(stats_of(&r).refreshes, 2);
    ck_assert_int_ne(map_owner(&r, key), victim);
    ck_assert(dtq_rcluster_slot_up(r.rc, dtq_cluster_keyslot(key, strlen(key))));
    ck_assert_int_eq(r.downs, 0); /* the router stayed up: other nodes were */
    /* node_fn heard of the promoted replica, and its PING was answered there */
    {
        int promoted = map_owner(&r, key), seen = -1;
        for (int j = 0; j < r.nprimaries_up; j++)
            if (r.primaries_up[j] == promoted) seen = j;
        ck_assert_msg(seen >= 3, "node_fn not told of the new primary %d", promoted);
        ck_assert(run_until(&r, &r.pings[seen].done, 2000));
        ck_assert_str_eq(r.pings[seen].str, "PONG");
    }
    rset(&r, key, "written-after");
    rget_is(&r, key, "written-after");
    fprintf(stderr, "failover: answered after %lld ms, %d lost/failed, other shard %d times\n",
            (long long)took, vfails, others);
    router_close(&r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rcluster_async");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, test_not_a_cluster);
    tcase_add_test(tc, test_pipeline_all_shards);
    tcase_add_test(tc, test_moved);
    tcase_add_test(tc, test_ask);
    tcase_add_test(tc, test_redirect_limit);
    tcase_add_test(tc, test_free_in_callback);
    tcase_add_test(tc, test_failover); /* the last: it kills a primary */
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
