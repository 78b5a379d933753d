/* check_cluster.c: cluster.c: the CRC16 and a key's hash slot (hash tags), the slot map
 * built from hand-made CLUSTER SLOTS replies, the MOVED / ASK errors, and where a
 * command's routing key is. (The integration suite it_rcluster.c checks the slots against
 * a real cluster's CLUSTER KEYSLOT.) */
#include <check.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "cluster.h"

/* ---- hand-made replies (freed with freeReplyObject, as hiredis's own) */

static redisReply *r_int(long long v) {
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

static redisReply *r_str(const char *s) {
    redisReply *r = calloc(1, sizeof(*r));
    r->type = s ? REDIS_REPLY_STRING : REDIS_REPLY_NIL;
    if (s) {
        r->str = strdup(s);
        r->len = strlen(s);
    }
    return r;
}

static redisReply *r_err(const char *s) {
    redisReply *r = r_str(s);
    r->type = REDIS_REPLY_ERROR;
    return r;
}

/* An array of n replies (NULL-terminated list of n items). */
static redisReply *r_arr(int n, ...) {
    redisReply *r = calloc(1, sizeof(*r));
    va_list ap;
    r->type = REDIS_REPLY_ARRAY;
    r->elements = (size_t)n;
    r->element = calloc((size_t)(n ? n : 1), sizeof(redisReply *));
    va_start(ap, n);
    for (int i = 0; i < n; i++) r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}

static redisReply *node(const char *host, int port, const char *id) {
    return r_arr(3, r_str(host), r_int(port), r_str(id));
}

/* ---- the slot function */

START_TEST(test_crc16) {
    ck_assert_uint_eq(dtq_cluster_crc16("123456789", 9), 0x31C3);
    ck_assert_uint_eq(dtq_cluster_crc16("", 0), 0);
}
END_TEST

START_TEST(test_keyslot) {
#define SLOT(s) dtq_cluster_keyslot(s, strlen(s))
    ck_assert_uint_eq(SLOT("foo"), 12182);
    ck_assert_uint_eq(SLOT("bar"), 5061);
    ck_assert_uint_eq(SLOT("123456789"), 0x31C3 % 16384);
    ck_assert_uint_eq(SLOT(""), 0);
    /* a hash tag: only what is between the braces */
    ck_assert_uint_eq(SLOT("{user1000}.following"), SLOT("{user1000}.followers"));
    ck_assert_uint_eq(SLOT("{user1000}.following"), SLOT("user1000"));
    ck_assert_uint_eq(SLOT("foo{bar}zap"), SLOT("bar"));
    /* an empty tag: the whole key */
    ck_assert_uint_eq(SLOT("foo{}{bar}"), dtq_cluster_crc16("foo{}{bar}", 10) % 16384);
    ck_assert_uint_ne(SLOT("foo{}{bar}"), SLOT("bar"));
    /* the first '}' after the first '{' */
    ck_assert_uint_eq(SLOT("foo{{bar}}zap"), SLOT("{bar"));
    ck_assert_uint_eq(SLOT("foo{bar}{zap}"), SLOT("bar"));
    /* no '}' after the '{': the whole key */
    ck_assert_uint_eq(SLOT("foo{bar"), dtq_cluster_crc16("foo{bar", 7) % 16384);
    ck_assert_uint_eq(SLOT("}foo{bar}"), SLOT("bar"));
    /* binary-safe: a NUL byte counts */
    ck_assert_uint_ne(dtq_cluster_keyslot("a\0b", 3), dtq_cluster_keyslot("a", 1));
    ck_assert_uint_eq(dtq_cluster_keyslot("{a\0b}x", 6), dtq_cluster_keyslot("a\0b", 3));
    for (int i = 0; i < 1000; i++) {
        char k[32];
        snprintf(k, sizeof(k), "key:%d", i);
        ck_assert_uint_lt(SLOT(k), 16384);
    }
#undef SLOT
}
END_TEST

/* ---- the slot map */

START_TEST(test_map_three_shards) {
    char why[256];
    redisReply *r = r_arr(
        3,
        r_arr(4, r_int(0), r_int(5460), node("10.0.0.1", 7000, "a"), node("10.0.0.4", 7003, "d")),
        r_arr(4, r_int(10923), r_int(16383), node("10.0.0.3", 7002, "c"),
              node("10.0.0.6", 7005, "f")),
        r_arr(5, r_int(5461), r_int(10922), node("10.0.0.2", 7001, "b"),
              node("10.0.0.5", 7004, "e"), node("10.0.0.7", 7006, "g")));
    dtq_cluster_map *m = dtq_cluster_map_from_slots(r, "seed", why, sizeof(why));
    const dtq_redis_endpoint *e;
    ck_assert_msg(m != NULL, "%s", why);
    ck_assert_int_eq(m->nranges, 3);
    ck_assert_int_eq(m->nprimaries, 3);
    ck_assert_int_eq(m->nnodes, 7);
    ck_assert_int_eq(dtq_cluster_map_covered(m), 16384);
    /* sorted by start */
    ck_assert_uint_eq(m->ranges[0].start, 0);
    ck_assert_uint_eq(m->ranges[1].start, 5461);
    ck_assert_uint_eq(m->ranges[2].start, 10923);
    ck_assert_int_eq(m->ranges[1].nreplicas, 2);
    ck_assert_str_eq(m->nodes[m->ranges[1].replicas[1]].host, "10.0.0.7");
    e = dtq_cluster_map_primary(m, 0);
    ck_assert_str_eq(e->host, "10.0.0.1");
    ck_assert_int_eq(e->port, 7000);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 5460)->port, 7000);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 5461)->port, 7001);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 10922)->port, 7001);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 10923)->port, 7002);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 16383)->port, 7002);
    ck_assert_int_eq(dtq_cluster_map_primary(m, dtq_cluster_keyslot("foo", 3))->port, 7002);
    ck_assert_int_eq(dtq_cluster_map_find(m, "10.0.0.5", 7004), m->ranges[1].replicas[0]);
    ck_assert_int_eq(dtq_cluster_map_find(m, "10.0.0.5", 7005), -1);
    /* a redirection is followed only to a node of the map (primary or replica), or to the
     * node that answered (host ""); never to an address only the reply names (issue 27.7) */
    ck_assert(dtq_cluster_redirect_allowed(m, "10.0.0.2", 7001));
    ck_assert(dtq_cluster_redirect_allowed(m, "10.0.0.7", 7006));
    ck_assert(dtq_cluster_redirect_allowed(m, "", 7001));
    ck_assert(!dtq_cluster_redirect_allowed(m, "10.0.0.2", 7002)); /* another port */
    ck_assert(!dtq_cluster_redirect_allowed(m, "evil.example", 7001));
    ck_assert(!dtq_cluster_redirect_allowed(NULL, "10.0.0.2", 7001)); /* no map yet */
    dtq_cluster_map_free(m);
    freeReplyObject(r);
}
END_TEST

START_TEST(test_map_split_and_holes) {
    char why[256];
    /* one primary with two ranges, a hole (100..199 served by nobody) */
    redisReply *r = r_arr(3, r_arr(3, r_int(0), r_int(99), node("h1", 1, "a")),
                          r_arr(3, r_int(200), r_int(300), node("h2", 2, "b")),
                          r_arr(3, r_int(301), r_int(16383), node("h1", 1, "a")));
    dtq_cluster_map *m = dtq_cluster_map_from_slots(r, "seed", why, sizeof(why));
    ck_assert_msg(m != NULL, "%s", why);
    ck_assert_int_eq(m->nprimaries, 2);
    ck_assert_int_eq(m->nnodes, 2);
    ck_assert_int_eq(dtq_cluster_map_covered(m), 16384 - 100);
    ck_assert_ptr_null(dtq_cluster_map_primary(m, 100));
    ck_assert_ptr_null(dtq_cluster_map_primary(m, 199));
    ck_assert_str_eq(dtq_cluster_map_primary(m, 99)->host, "h1");
    ck_assert_str_eq(dtq_cluster_map_primary(m, 250)->host, "h2");
    ck_assert_str_eq(dtq_cluster_map_primary(m, 16383)->host, "h1");
    dtq_cluster_map_free(m);
    freeReplyObject(r);

    /* an empty map: no slot assigned yet */
    r = r_arr(0);
    m = dtq_cluster_map_from_slots(r, "seed", why, sizeof(why));
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(dtq_cluster_map_covered(m), 0);
    ck_assert_int_eq(m->nprimaries, 0);
    dtq_cluster_map_free(m);
    freeReplyObject(r);
}
END_TEST

START_TEST(test_map_unknown_endpoint) {
    char why[256];
    /* nil, "" and "?" endpoints: the node asked, with the port given */
    redisReply *r =
        r_arr(3, r_arr(3, r_int(0), r_int(5000), node(NULL, 7000, "a")),
              r_arr(3, r_int(5001), r_int(10000), node("", 7001, "b")),
              r_arr(4, r_int(10001), r_int(16383), node("?", 7002, "c"), node("::1", 7003, "d")));
    dtq_cluster_map *m = dtq_cluster_map_from_slots(r, "lb.example", why, sizeof(why));
    ck_assert_msg(m != NULL, "%s", why);
    ck_assert_str_eq(dtq_cluster_map_primary(m, 0)->host, "lb.example");
    ck_assert_int_eq(dtq_cluster_map_primary(m, 0)->port, 7000);
    ck_assert_str_eq(dtq_cluster_map_primary(m, 5001)->host, "lb.example");
    ck_assert_int_eq(dtq_cluster_map_primary(m, 5001)->port, 7001);
    ck_assert_str_eq(dtq_cluster_map_primary(m, 16383)->host, "lb.example");
    ck_assert_str_eq(m->nodes[m->ranges[2].replicas[0]].host, "::1");
    dtq_cluster_map_free(m);
    freeReplyObject(r);
    /* without an asked host, such an endpoint cannot be placed */
    r = r_arr(1, r_arr(3, r_int(0), r_int(5000), node(NULL, 7000, "a")));
    ck_assert_ptr_null(dtq_cluster_map_from_slots(r, NULL, why, sizeof(why)));
    freeReplyObject(r);
}
END_TEST

START_TEST(test_map_bad) {
    char why[256];
    redisReply *bad[] = {
        r_err("ERR This instance has cluster support disabled"),
        r_str("nope"),
        r_arr(1, r_int(3)),
        r_arr(1, r_arr(2, r_int(0), r_int(10))),                       /* no primary */
        r_arr(1, r_arr(3, r_int(10), r_int(5), node("h", 1, "a"))),    /* reversed */
        r_arr(1, r_arr(3, r_int(0), r_int(16384), node("h", 1, "a"))), /* past the end */
        r_arr(1, r_arr(3, r_int(-1), r_int(5), node("h", 1, "a"))),    /* negative */
        r_arr(1, r_arr(3, r_int(0), r_int(5), node("h", 0, "a"))),     /* port 0 */
        r_arr(1, r_arr(3, r_int(0), r_int(5), node("h", 65536, "a"))), /* port */
        r_arr(1, r_arr(3, r_int(0), r_int(5), r_arr(1, r_str("h")))),  /* no port */
        r_arr(1, r_arr(3, r_int(0), r_int(5), r_int(7))),              /* not a node */
        r_arr(1,
              r_arr(4, r_int(0), r_int(5), node("h", 1, "a"), r_str("replica"))), /* bad replica */
        r_arr(1, r_arr(3, r_str("0"), r_int(5), node("h", 1, "a"))),              /* string slot */
        NULL};
    ck_assert_ptr_null(dtq_cluster_map_from_slots(NULL, "h", why, sizeof(why)));
    for (int i = 0; bad[i]; i++) {
        why[0] = '\0';
        ck_assert_msg(dtq_cluster_map_from_slots(bad[i], "h", why, sizeof(why)) == NULL,
                      "accepted bad reply %d", i);
        ck_assert_msg(strlen(why) > 0, "no reason for bad reply %d", i);
        freeReplyObject(bad[i]);
    }
    {
        redisReply *e = r_err("ERR This instance has cluster support disabled");
        ck_assert_ptr_null(dtq_cluster_map_from_slots(e, "h", why, sizeof(why)));
        ck_assert_str_eq(why, "ERR This instance has cluster support disabled");
        freeReplyObject(e);
    }
}
END_TEST

/* ---- redirections */

START_TEST(test_redirect) {
    dtq_cluster_redirect d;
    ck_assert_int_eq(dtq_cluster_redirect_parse("MOVED 3999 127.0.0.1:6381", &d),
                     DTQ_REDIRECT_MOVED);
    ck_assert_int_eq(d.kind, DTQ_REDIRECT_MOVED);
    ck_assert_uint_eq(d.slot, 3999);
    ck_assert_str_eq(d.host, "127.0.0.1");
    ck_assert_int_eq(d.port, 6381);

    ck_assert_int_eq(dtq_cluster_redirect_parse("ASK 16383 redis-3.example:7002", &d),
                     DTQ_REDIRECT_ASK);
    ck_assert_uint_eq(d.slot, 16383);
    ck_assert_str_eq(d.host, "redis-3.example");
    ck_assert_int_eq(d.port, 7002);

    /* IPv6, as Redis writes it (no brackets: the port after the last ':') and bracketed */
    ck_assert_int_eq(dtq_cluster_redirect_parse("MOVED 0 2001:db8::1:7000", &d),
                     DTQ_REDIRECT_MOVED);
    ck_assert_str_eq(d.host, "2001:db8::1");
    ck_assert_int_eq(d.port, 7000);
    ck_assert_uint_eq(d.slot, 0);
    ck_assert_int_eq(dtq_cluster_redirect_parse("ASK 12 [::1]:6390", &d), DTQ_REDIRECT_ASK);
    ck_assert_str_eq(d.host, "::1");
    ck_assert_int_eq(d.port, 6390);

    /* an empty host: the node asked */
    ck_assert_int_eq(dtq_cluster_redirect_parse("MOVED 3999 :6381", &d), DTQ_REDIRECT_MOVED);
    ck_assert_str_eq(d.host, "");
    ck_assert_int_eq(d.port, 6381);

    /* not a redirection */
    ck_assert_int_eq(dtq_cluster_redirect_parse("ERR unknown command", &d), DTQ_REDIRECT_NONE);
    ck_assert_int_eq(dtq_cluster_redirect_parse("CLUSTERDOWN Hash slot not served", &d),
                     DTQ_REDIRECT_NONE);
    ck_assert_int_eq(dtq_cluster_redirect_parse("MOVEDX 1 h:1", &d), DTQ_REDIRECT_NONE);
    ck_assert_int_eq(dtq_cluster_redirect_parse(NULL, &d), DTQ_REDIRECT_NONE);
    {
        const char *bad[] = {"MOVED",
                             "ASK",
                             "MOVED ",
                             "MOVED 3999",
                             "MOVED 3999 ",
                             "MOVED 3999 127.0.0.1",
                             "MOVED 3999 127.0.0.1:",
                             "MOVED 3999 127.0.0.1:0",
                             "MOVED 3999 127.0.0.1:65536",
                             "MOVED 3999 127.0.0.1:63x",
                             "MOVED 16384 127.0.0.1:6381",
                             "MOVED -1 127.0.0.1:6381",
                             "MOVED x 127.0.0.1:6381",
                             "MOVED  3999 127.0.0.1:6381",
                             "MOVED 3999 127.0.0.1:6381 extra",
                             "ASK 1 [::1:6390",
                             "ASK 1 [::1]6390",
                             "ASK 99999999999999999999 h:1",
                             NULL};
        for (const char **b = bad; *b; b++)
            ck_assert_msg(dtq_cluster_redirect_parse(*b, &d) == DTQ_REDIRECT_BAD, "accepted '%s'",
                          *b);
    }
    {
        char longhost[400];
        memset(longhost, 'a', sizeof(longhost));
        memcpy(longhost, "MOVED 1 ", 8);
        snprintf(longhost + 300, sizeof(longhost) - 300, ":1");
        ck_assert_int_eq(dtq_cluster_redirect_parse(longhost, &d), DTQ_REDIRECT_BAD);
    }
}
END_TEST

/* ---- the routing key */

static int ki(const char **argv, int argc) {
    return dtq_cluster_key_index(argc, argv, NULL);
}

START_TEST(test_key_index) {
#define KI(...)                                                                                    \
    ki((const char *[]){__VA_ARGS__},                                                              \
       (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)))
    ck_assert_int_eq(KI("GET", "k"), 1);
    ck_assert_int_eq(KI("set", "k", "v"), 1);
    ck_assert_int_eq(KI("HGETALL", "dtq:task:1"), 1);
    ck_assert_int_eq(KI("FCALL", "dtq_enqueue", "0", "a", "b"), -1);
    ck_assert_int_eq(KI("FCALL", "dtq_enqueue", "1", "{q}x", "b"), 3);
    ck_assert_int_eq(KI("fcall_ro", "dtq_stats", "2", "k1", "k2"), 3);
    ck_assert_int_eq(KI("FCALL", "f", "1"), -1); /* numkeys 1 but no key */
    ck_assert_int_eq(KI("FCALL", "f", "x", "k"), -1);
    ck_assert_int_eq(KI("EVALSHA", "abc", "1", "k"), 3);
    ck_assert_int_eq(KI("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"), 7);
    ck_assert_int_eq(KI("XREAD", "STREAMS", "s1", "0"), 2);
    /* a subcommand before the key */
    ck_assert_int_eq(KI("XGROUP", "CREATE", "{dtq:q}:stream:q:p5", "workers", "0", "MKSTREAM"), 2);
    ck_assert_int_eq(KI("xinfo", "GROUPS", "s"), 2);
    ck_assert_int_eq(KI("XINFO", "HELP"), -1);
    ck_assert_int_eq(KI("PING"), -1);
    ck_assert_int_eq(KI("WAIT", "1", "100"), -1);
    ck_assert_int_eq(KI("SUBSCRIBE", "dtq:events"), -1);
    ck_assert_int_eq(KI("FUNCTION", "LOAD", "REPLACE", "lib"), -1);
    ck_assert_int_eq(KI("CLUSTER", "SLOTS"), -1);
    ck_assert_int_eq(KI("cluster", "keyslot", "x"), -1);
    {
        const char *a[] = {"PINGX", "k"};
        size_t lens[] = {4, 1}; /* "PING" by length */
        ck_assert_int_eq(dtq_cluster_key_index(2, a, lens), -1);
        lens[0] = 5;
        ck_assert_int_eq(dtq_cluster_key_index(2, a, lens), 1);
    }
#undef KI
}
END_TEST

int main(void) {
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_crc16);
    tcase_add_test(tc, test_keyslot);
    tcase_add_test(tc, test_map_three_shards);
    tcase_add_test(tc, test_map_split_and_holes);
    tcase_add_test(tc, test_map_unknown_endpoint);
    tcase_add_test(tc, test_map_bad);
    tcase_add_test(tc, test_redirect);
    tcase_add_test(tc, test_key_index);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
