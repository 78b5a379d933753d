/* it_rcluster.c: dtq's Redis Cluster client against a real local cluster of 3 primaries and
 * 3 replicas (th_cluster_start, once for the suite, in the parent process: the cases run in
 * order and the later ones change the cluster: a slot migrated, a primary killed). The
 * slot map from CLUSTER SLOTS, dtq_cluster_keyslot against CLUSTER KEYSLOT, and the
 * daemon's refusal of a cluster URL. (it_cluster.c is another thing: several daemons on
 * one Redis.) */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "cluster.h"

static th_cluster CL;

static void cluster_setup(void) {
    th_cluster_start(&CL, 3, 1);
}

static void cluster_teardown(void) {
    th_cluster_stop(&CL);
}

/* The map from node i's CLUSTER SLOTS. */
static dtq_cluster_map *map_of(int i) {
    redisContext *c = th_cluster_connect(&CL, i);
    redisReply *r = th_cmd(c, "CLUSTER SLOTS");
    char why[256];
    dtq_cluster_map *m = dtq_cluster_map_from_slots(r, "127.0.0.1", why, sizeof(why));
    ck_assert_msg(m != NULL, "map: %s", why);
    freeReplyObject(r);
    redisFree(c);
    return m;
}

/* (a) 3 primaries covering 0-16383, each a node of the cluster, each with its replica. */
START_TEST(test_map) {
    for (int i = 0; i < CL.n; i++) {
        dtq_cluster_map *m = map_of(i);
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

/* dtq-worker refuses a cluster URL at start, saying so. */
START_TEST(test_daemon_refuses) {
    char *out = NULL, cfg[400], ini[600];
    FILE *f;
    int rc;
    snprintf(cfg, sizeof(cfg), "%s/worker.ini", CL.dir);
    snprintf(ini, sizeof(ini), "[redis]\nurl = %s\n", CL.url);
    f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fputs(ini, f);
    fclose(f);
    rc = th_run_worker(&out, "-c", cfg, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(out, "redis-cluster:// is supported by dtqctl only so far"), "%s", out);
    free(out);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rcluster");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, test_map);
    tcase_add_test(tc, test_keyslot_oracle);
    tcase_add_test(tc, test_daemon_refuses);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
