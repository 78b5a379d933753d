/* check_cluster.c: cluster.c: the CRC16 and a key's hash slot (hash tags), the slot map
 * built from hand-made CLUSTER SLOTS replies, the MOVED / ASK errors, where a command's
 * routing key is, and the router core: dtq_route_decide's every branch, the keyless rule. (The
 * integration suite it_rcluster.c checks the slots against a real cluster's CLUSTER KEYSLOT.) */
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

/* ---- the router core: dtq_route_decide, one test per branch */

/* Two shards: 10.0.0.1:7000 (slots 0..8191, replica 10.0.0.3:7002) and 10.0.0.2:7001
 * (8192..16383); with a third primary 10.0.0.9:7009 holding 16000..16383 when `grown`. */
static dtq_cluster_map *route_map(int grown) {
    char why[256];
    redisReply *r = grown ? r_arr(3,
                                  r_arr(4, r_int(0), r_int(8191), node("10.0.0.1", 7000, "a"),
                                        node("10.0.0.3", 7002, "c")),
                                  r_arr(3, r_int(8192), r_int(15999), node("10.0.0.2", 7001, "b")),
                                  r_arr(3, r_int(16000), r_int(16383), node("10.0.0.9", 7009, "z")))
                          : r_arr(2,
                                  r_arr(4, r_int(0), r_int(8191), node("10.0.0.1", 7000, "a"),
                                        node("10.0.0.3", 7002, "c")),
                                  r_arr(3, r_int(8192), r_int(16383), node("10.0.0.2", 7001, "b")));
    dtq_cluster_map *m = dtq_cluster_map_from_slots(r, "seed", why, sizeof(why));
    ck_assert_msg(m != NULL, "%s", why);
    freeReplyObject(r);
    return m;
}

/* The step for the error reply text (NULL: a status reply "OK"), from 10.0.0.1:7000. */
static dtq_route_action decide(dtq_route *rt, const dtq_cluster_map *m, const char *err,
                               int64_t now, dtq_route_step *st) {
    redisReply *r = err ? r_err(err) : r_str("OK");
    dtq_route_action a;
    if (!err) r->type = REDIS_REPLY_STATUS;
    a = dtq_route_decide(rt, m, "10.0.0.1", 7000, r, now, st);
    ck_assert_int_eq(a, st->action);
    freeReplyObject(r);
    return a;
}

START_TEST(test_route_done) {
    dtq_cluster_map *m = route_map(0);
    dtq_route rt;
    dtq_route_step st;
    redisReply *arr = r_arr(1, r_int(1));
    dtq_route_start(&rt, 1000);
    /* a success, of any type */
    ck_assert_int_eq(decide(&rt, m, NULL, 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(st.reread, 0);
    ck_assert_int_eq(dtq_route_decide(&rt, m, "10.0.0.1", 7000, arr, 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(dtq_route_decide(&rt, m, "10.0.0.1", 7000, NULL, 0, &st), DTQ_ROUTE_DONE);
    /* an error that is not a redirection: the caller's */
    ck_assert_int_eq(
        decide(&rt, m, "CROSSSLOT Keys in request don't hash to the same slot", 0, &st),
        DTQ_ROUTE_DONE);
    ck_assert_int_eq(st.reread, 0);
    ck_assert_int_eq(decide(&rt, m, "NOT_FOUND queue q", 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(decide(&rt, m, "MOVEDX 1 10.0.0.2:7001", 0, &st), DTQ_ROUTE_DONE);
    /* a malformed redirection: the caller's too, never followed */
    ck_assert_int_eq(decide(&rt, m, "MOVED", 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(decide(&rt, m, "MOVED 16384 10.0.0.2:7001", 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(decide(&rt, m, "ASK 1 10.0.0.2", 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(decide(&rt, m, "MOVED 1 10.0.0.2:7001 extra", 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(rt.redirects, 0);
    /* CLUSTERDOWN: the caller's, and the map is read again */
    ck_assert_int_eq(decide(&rt, m, "CLUSTERDOWN Hash slot not served", 0, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(st.reread, 1);
    freeReplyObject(arr);
    dtq_cluster_map_free(m);
}
END_TEST

START_TEST(test_route_moved_known) {
    dtq_cluster_map *m = route_map(0);
    dtq_route rt;
    dtq_route_step st;
    dtq_route_start(&rt, 1000);
    ck_assert_int_eq(decide(&rt, m, "MOVED 3999 10.0.0.2:7001", 0, &st), DTQ_ROUTE_RESEND);
    ck_assert_str_eq(st.host, "10.0.0.2");
    ck_assert_int_eq(st.port, 7001);
    ck_assert_int_eq(st.asking, 0);
    ck_assert_int_eq(st.pause_ms, 0);
    ck_assert_int_eq(st.followed, DTQ_REDIRECT_MOVED);
    ck_assert_int_eq(st.moved, 1); /* the owner patched ... */
    ck_assert_int_eq(st.slot, 3999);
    ck_assert_int_eq(st.reread, 1); /* ... and the map read again */
    ck_assert_int_eq(rt.redirects, 1);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 3999)->port, 7000);
    ck_assert(dtq_cluster_map_move(m, (uint16_t)st.slot, st.host, st.port));
    ck_assert_int_eq(dtq_cluster_map_primary(m, 3999)->port, 7001);
    ck_assert_int_eq(dtq_cluster_map_primary(m, 3998)->port, 7000);
    ck_assert(!dtq_cluster_map_move(m, 1, "10.0.0.8", 7001)); /* not a node of the map */
    ck_assert(!dtq_cluster_map_move(NULL, 1, "10.0.0.2", 7001));
    ck_assert_int_eq(dtq_cluster_map_primary(m, 1)->port, 7000);
    /* an empty host: the node that answered */
    ck_assert_int_eq(decide(&rt, m, "MOVED 5 :7000", 0, &st), DTQ_ROUTE_RESEND);
    ck_assert_str_eq(st.host, "10.0.0.1");
    ck_assert_int_eq(st.port, 7000);
    /* to a replica of the map (a failover under way): a node of the map, followed */
    ck_assert_int_eq(decide(&rt, m, "MOVED 5 10.0.0.3:7002", 0, &st), DTQ_ROUTE_RESEND);
    ck_assert_int_eq(rt.redirects, 3);
    dtq_cluster_map_free(m);
}
END_TEST

START_TEST(test_route_moved_unknown) {
    dtq_cluster_map *m = route_map(0), *grown = route_map(1);
    dtq_route rt;
    dtq_route_step st;
    /* before the map is read again: read it */
    dtq_route_start(&rt, 1000);
    ck_assert_int_eq(decide(&rt, m, "MOVED 16100 10.0.0.9:7009", 0, &st), DTQ_ROUTE_REREAD);
    ck_assert_int_eq(rt.redirects, 0);
    /* the new map names it: followed, the owner patched, no second read */
    ck_assert_int_eq(decide(&rt, grown, "MOVED 16100 10.0.0.9:7009", 0, &st), DTQ_ROUTE_RESEND);
    ck_assert_str_eq(st.host, "10.0.0.9");
    ck_assert_int_eq(st.port, 7009);
    ck_assert_int_eq(st.moved, 1);
    ck_assert_int_eq(st.reread, 0);
    ck_assert_int_eq(rt.redirects, 1);
    /* the next unknown address of the same command is read for again (once per reply) */
    ck_assert_int_eq(decide(&rt, grown, "MOVED 1 10.6.6.6:6379", 0, &st), DTQ_ROUTE_REREAD);
    /* still not in the map: refused, nothing sent there (no command, no AUTH) */
    ck_assert_int_eq(decide(&rt, grown, "MOVED 1 10.6.6.6:6379", 0, &st), DTQ_ROUTE_GIVE_UP);
    ck_assert_str_eq(st.why, "cluster redirection to 10.6.6.6:6379, not a node of the cluster's "
                             "slot map; not followed");
    ck_assert_int_eq(st.host[0], '\0');
    ck_assert_int_eq(rt.redirects, 1);
    /* no map at all: read, then refused */
    dtq_route_start(&rt, 1000);
    ck_assert_int_eq(decide(&rt, NULL, "MOVED 1 10.0.0.2:7001", 0, &st), DTQ_ROUTE_REREAD);
    ck_assert_int_eq(decide(&rt, NULL, "MOVED 1 10.0.0.2:7001", 0, &st), DTQ_ROUTE_GIVE_UP);
    dtq_cluster_map_free(m);
    dtq_cluster_map_free(grown);
}
END_TEST

START_TEST(test_route_ask) {
    dtq_cluster_map *m = route_map(0);
    dtq_route rt;
    dtq_route_step st;
    dtq_route_start(&rt, 1000);
    ck_assert_int_eq(decide(&rt, m, "ASK 3999 10.0.0.2:7001", 0, &st), DTQ_ROUTE_RESEND);
    ck_assert_str_eq(st.host, "10.0.0.2");
    ck_assert_int_eq(st.port, 7001);
    ck_assert_int_eq(st.asking, 1);
    ck_assert_int_eq(st.followed, DTQ_REDIRECT_ASK);
    ck_assert_int_eq(st.moved, 0); /* the map unchanged, not read */
    ck_assert_int_eq(st.reread, 0);
    ck_assert_int_eq(rt.redirects, 1);
    /* the target sends it back (MOVED): no ASKING on that send */
    ck_assert_int_eq(decide(&rt, m, "MOVED 3999 10.0.0.1:7000", 0, &st), DTQ_ROUTE_RESEND);
    ck_assert_int_eq(st.asking, 0);
    /* ASK to an unknown address: read, then refused */
    ck_assert_int_eq(decide(&rt, m, "ASK 3999 10.6.6.6:7001", 0, &st), DTQ_ROUTE_REREAD);
    ck_assert_int_eq(decide(&rt, m, "ASK 3999 10.6.6.6:7001", 0, &st), DTQ_ROUTE_GIVE_UP);
    ck_assert_ptr_nonnull(strstr(st.why, "10.6.6.6:7001, not a node of the cluster's slot map"));
    dtq_cluster_map_free(m);
}
END_TEST

START_TEST(test_route_tryagain) {
    dtq_cluster_map *m = route_map(0);
    dtq_route rt;
    dtq_route_step st;
    int64_t now = 1000000, pauses[] = {50, 100, 200, 400, 500, 500};
    dtq_route_start(&rt, 2000);
    /* sent again to the node that answered, after pauses doubling to 500 ms, until the
     * window from the first TRYAGAIN has passed */
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(
            decide(&rt, m, "TRYAGAIN Multiple keys request during rehashing", now, &st),
            DTQ_ROUTE_RESEND);
        ck_assert_str_eq(st.host, "10.0.0.1");
        ck_assert_int_eq(st.port, 7000);
        ck_assert_int_eq(st.asking, 0);
        ck_assert_int_eq(st.pause_ms, pauses[i]);
        ck_assert_int_eq(st.followed, DTQ_REDIRECT_NONE);
        now += st.pause_ms;
    }
    /* 1750 ms gone: the next pause would pass the window: the TRYAGAIN is the answer */
    ck_assert_int_eq(decide(&rt, m, "TRYAGAIN x", now, &st), DTQ_ROUTE_DONE);
    ck_assert_int_eq(rt.redirects, 0); /* not a redirection */
    /* after an ASK, the importing node hears ASKING again with each resend */
    dtq_route_start(&rt, 2000);
    ck_assert_int_eq(decide(&rt, m, "ASK 3999 10.0.0.2:7001", now, &st), DTQ_ROUTE_RESEND);
    {
        redisReply *t = r_err("TRYAGAIN x");
        ck_assert_int_eq(dtq_route_decide(&rt, m, "10.0.0.2", 7001, t, now, &st), DTQ_ROUTE_RESEND);
        freeReplyObject(t);
    }
    ck_assert_str_eq(st.host, "10.0.0.2");
    ck_assert_int_eq(st.port, 7001);
    ck_assert_int_eq(st.asking, 1);
    /* no window: the first TRYAGAIN is the answer */
    dtq_route_start(&rt, 0);
    ck_assert_int_eq(decide(&rt, m, "TRYAGAIN x", now, &st), DTQ_ROUTE_DONE);
    dtq_cluster_map_free(m);
}
END_TEST

START_TEST(test_route_cap) {
    dtq_cluster_map *m = route_map(0);
    dtq_route rt;
    dtq_route_step st;
    dtq_route_start(&rt, 1000);
    for (int i = 0; i < DTQ_CLUSTER_MAX_REDIRECTS; i++)
        ck_assert_int_eq(
            decide(&rt, m, i % 2 ? "MOVED 7 10.0.0.1:7000" : "ASK 7 10.0.0.2:7001", 0, &st),
            DTQ_ROUTE_RESEND);
    ck_assert_int_eq(rt.redirects, DTQ_CLUSTER_MAX_REDIRECTS);
    /* one more: given up, the answer naming the count and the last redirection */
    ck_assert_int_eq(decide(&rt, m, "ASK 7 10.0.0.2:7001", 0, &st), DTQ_ROUTE_GIVE_UP);
    ck_assert_str_eq(st.why,
                     "more than 5 cluster redirections for slot 7 (the last: ASK 7 10.0.0.2:7001)");
    /* the cap before the address: no map read for a command that is over it */
    ck_assert_int_eq(decide(&rt, m, "MOVED 7 10.6.6.6:1", 0, &st), DTQ_ROUTE_GIVE_UP);
    /* the answer is an error reply of that text */
    {
        redisReply *e = dtq_cluster_error_reply("more than 5 cluster\r\nredirections");
        ck_assert_int_eq(e->type, REDIS_REPLY_ERROR);
        ck_assert_str_eq(e->str, "more than 5 cluster  redirections");
        freeReplyObject(e);
    }
    dtq_cluster_map_free(m);
}
END_TEST

/* ---- the keyless rule */

static int up_mask;
static int node_up(void *arg, int i) {
    (void)arg;
    return (up_mask >> i) & 1;
}

START_TEST(test_keyless_node) {
    dtq_cluster_map *m = route_map(0); /* nodes: 0 10.0.0.1 (primary), 1 .3 (replica), 2 .2 */
    int a = dtq_cluster_map_find(m, "10.0.0.1", 7000),
        r = dtq_cluster_map_find(m, "10.0.0.3", 7002),
        b = dtq_cluster_map_find(m, "10.0.0.2", 7001);
    up_mask = (1 << a) | (1 << r) | (1 << b);
    /* the node of the previous command, while a primary with its link up */
    ck_assert_int_eq(dtq_cluster_keyless_node(m, b, node_up, NULL), b);
    ck_assert_int_eq(dtq_cluster_keyless_node(m, a, node_up, NULL), a);
    /* a replica never: the first primary whose link is up */
    ck_assert_int_eq(dtq_cluster_keyless_node(m, r, node_up, NULL), a);
    ck_assert_int_eq(dtq_cluster_keyless_node(m, -1, node_up, NULL), a);
    up_mask = 1 << b; /* the previous node's link is down */
    ck_assert_int_eq(dtq_cluster_keyless_node(m, a, node_up, NULL), b);
    up_mask = 0; /* no link up: the first primary */
    ck_assert_int_eq(dtq_cluster_keyless_node(m, b, node_up, NULL), a);
    ck_assert_int_eq(dtq_cluster_keyless_node(m, b, NULL, NULL), a);
    ck_assert_int_eq(dtq_cluster_keyless_node(NULL, -1, NULL, NULL), -1);
    dtq_cluster_map_free(m);
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
    tcase_add_test(tc, test_route_done);
    tcase_add_test(tc, test_route_moved_known);
    tcase_add_test(tc, test_route_moved_unknown);
    tcase_add_test(tc, test_route_ask);
    tcase_add_test(tc, test_route_tryagain);
    tcase_add_test(tc, test_route_cap);
    tcase_add_test(tc, test_keyless_node);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
