/* check_redis_proto.c: redis_proto.c: the handshake's commands and reply checks, and the
 * reading of a sentinel's answer, shared by rconn.c, sentinel.c and rsync.c. Replies are
 * parsed from RESP bytes by hiredis's reader, as the clients get them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "redis_proto.h"

/* One reply from len bytes of RESP. */
static redisReply *resp_n(const char *text, size_t len) {
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    ck_assert_int_eq(redisReaderFeed(rd, text, len), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(rd, &r), REDIS_OK);
    ck_assert_ptr_nonnull(r);
    redisReaderFree(rd);
    return r;
}

static redisReply *resp(const char *text) {
    return resp_n(text, strlen(text));
}

static void parse_url(const char *s, dtq_redis_url *u) {
    char err[128];
    ck_assert_msg(dtq_redis_url_parse(s, u, err, sizeof(err)) == 0, "%s: %s", s, err);
}

START_TEST(test_plan) {
    dtq_redis_url u;
    dtq_handshake h;
    dtq_hs_opts none = {0, NULL, 0}, all = {1, "dtqctl", 1};

    parse_url("redis://127.0.0.1:6379", &u);
    dtq_handshake_plan(&h, &u, &none);
    ck_assert_int_eq(h.n, 0);
    dtq_handshake_plan(&h, &u, &(dtq_hs_opts){0, NULL, 1});
    ck_assert_int_eq(h.n, 1);
    ck_assert_int_eq(h.steps[0].kind, DTQ_HS_PING);
    ck_assert_str_eq(h.steps[0].argv[0], "PING");
    dtq_redis_url_deinit(&u);

    /* a password alone: AUTH password (the default user) */
    parse_url("redis://:s3cret@h/0", &u);
    dtq_handshake_plan(&h, &u, &none);
    ck_assert_int_eq(h.n, 1);
    ck_assert_int_eq(h.steps[0].argc, 2);
    ck_assert_str_eq(h.steps[0].argv[0], "AUTH");
    ck_assert_str_eq(h.steps[0].argv[1], "s3cret");
    dtq_redis_url_deinit(&u);

    /* everything, in order: AUTH user password, ROLE, SELECT, CLIENT SETNAME, PING */
    parse_url("redis-sentinel://alice:pw@s1/m/7", &u);
    dtq_handshake_plan(&h, &u, &all);
    ck_assert_int_eq(h.n, 5);
    ck_assert_int_eq(h.steps[0].kind, DTQ_HS_AUTH);
    ck_assert_int_eq(h.steps[0].argc, 3);
    ck_assert_str_eq(h.steps[0].argv[1], "alice");
    ck_assert_str_eq(h.steps[0].argv[2], "pw");
    ck_assert_int_eq(h.steps[1].kind, DTQ_HS_ROLE);
    ck_assert_int_eq(h.steps[1].argc, 1);
    ck_assert_int_eq(h.steps[2].kind, DTQ_HS_SELECT);
    ck_assert_int_eq(h.steps[2].argc, 2);
    ck_assert_str_eq(h.steps[2].argv[0], "SELECT");
    ck_assert_str_eq(h.steps[2].argv[1], "7");
    ck_assert_int_eq(h.steps[3].kind, DTQ_HS_SETNAME);
    ck_assert_int_eq(h.steps[3].argc, 3);
    ck_assert_str_eq(h.steps[3].argv[0], "CLIENT");
    ck_assert_str_eq(h.steps[3].argv[1], "SETNAME");
    ck_assert_str_eq(h.steps[3].argv[2], "dtqctl");
    ck_assert_int_eq(h.steps[4].kind, DTQ_HS_PING);
    ck_assert_str_eq(dtq_handshake_step_name(DTQ_HS_SETNAME), "CLIENT SETNAME");
    dtq_redis_url_deinit(&u);
}
END_TEST

static int check(dtq_hs_kind k, const char *text, char *why, size_t len) {
    redisReply *r = resp(text);
    int v = dtq_handshake_check(k, r, why, len);
    freeReplyObject(r);
    return v;
}

START_TEST(test_check) {
    char why[200];
    ck_assert_int_eq(check(DTQ_HS_AUTH, "+OK\r\n", why, sizeof(why)), DTQ_HS_OK);
    ck_assert_int_eq(check(DTQ_HS_SELECT, "+OK\r\n", why, sizeof(why)), DTQ_HS_OK);
    ck_assert_int_eq(check(DTQ_HS_PING, "+PONG\r\n", why, sizeof(why)), DTQ_HS_OK);
    ck_assert_int_eq(check(DTQ_HS_ROLE, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n", why, sizeof(why)),
                     DTQ_HS_OK);

    /* an error reply is a refusal, with the server's words */
    ck_assert_int_eq(
        check(DTQ_HS_AUTH, "-WRONGPASS invalid username-password pair\r\n", why, sizeof(why)),
        DTQ_HS_REFUSED);
    ck_assert_str_eq(why, "WRONGPASS invalid username-password pair");
    ck_assert_int_eq(check(DTQ_HS_SELECT, "-ERR DB index is out of range\r\n", why, sizeof(why)),
                     DTQ_HS_REFUSED);
    ck_assert_int_eq(check(DTQ_HS_ROLE, "-NOPERM no ROLE for you\r\n", why, sizeof(why)),
                     DTQ_HS_REFUSED);
    ck_assert_int_eq(check(DTQ_HS_PING, "-NOAUTH Authentication required.\r\n", why, sizeof(why)),
                     DTQ_HS_REFUSED);

    /* a replica named by the sentinels, mid-failover */
    ck_assert_int_eq(check(DTQ_HS_ROLE,
                           "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:"
                           "1\r\n",
                           why, sizeof(why)),
                     DTQ_HS_WRONG);
    ck_assert_str_eq(why, "not a master (ROLE: slave)");
    ck_assert_int_eq(check(DTQ_HS_ROLE, ":1\r\n", why, sizeof(why)), DTQ_HS_WRONG);
    ck_assert_str_eq(why, "not a master (ROLE: ?)");

    /* anything but the expected status is not a handshake */
    ck_assert_int_eq(check(DTQ_HS_AUTH, "+QUEUED\r\n", why, sizeof(why)), DTQ_HS_WRONG);
    ck_assert_str_eq(why, "unexpected reply to AUTH");
    ck_assert_int_eq(check(DTQ_HS_PING, "$4\r\nPONG\r\n", why, sizeof(why)), DTQ_HS_WRONG);
    ck_assert_int_eq(check(DTQ_HS_SELECT, ":0\r\n", why, sizeof(why)), DTQ_HS_WRONG);
    ck_assert_int_eq(dtq_handshake_check(DTQ_HS_PING, NULL, why, sizeof(why)), DTQ_HS_WRONG);

    /* CLIENT SETNAME is a label: its refusal (an ACL without it) does not fail the link */
    ck_assert_int_eq(check(DTQ_HS_SETNAME, "+OK\r\n", why, sizeof(why)), DTQ_HS_OK);
    ck_assert_int_eq(check(DTQ_HS_SETNAME, "-NOPERM no CLIENT for you\r\n", why, sizeof(why)),
                     DTQ_HS_OK);
}
END_TEST

static int answer(const char *text, char **host, int *port, char *why, size_t len) {
    redisReply *r = resp(text);
    int v = dtq_sentinel_answer(r, host, port, why, len);
    freeReplyObject(r);
    return v;
}

START_TEST(test_sentinel_answer) {
    char why[200], *host;
    int port;
    const char *argv[DTQ_SENTINEL_QUESTION_ARGC];
    dtq_sentinel_question("mymaster", argv);
    ck_assert_str_eq(argv[0], "SENTINEL");
    ck_assert_str_eq(argv[1], "get-master-addr-by-name");
    ck_assert_str_eq(argv[2], "mymaster");

    ck_assert_int_eq(answer("*2\r\n$8\r\n10.0.0.7\r\n$4\r\n6380\r\n", &host, &port, why, 200),
                     DTQ_SENTINEL_ADDR);
    ck_assert_str_eq(host, "10.0.0.7");
    ck_assert_int_eq(port, 6380);
    free(host);
    ck_assert_int_eq(answer("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", &host, &port, why, 200),
                     DTQ_SENTINEL_ADDR);
    ck_assert_str_eq(host, "::1");
    free(host);

    /* nil: this sentinel does not know the master */
    ck_assert_int_eq(answer("*-1\r\n", &host, &port, why, 200), DTQ_SENTINEL_UNKNOWN);
    ck_assert_ptr_null(host);
    ck_assert_int_eq(answer("$-1\r\n", &host, &port, why, 200), DTQ_SENTINEL_UNKNOWN);

    /* an error reply, with its words */
    ck_assert_int_eq(answer("-NOAUTH Authentication required.\r\n", &host, &port, why, 200),
                     DTQ_SENTINEL_BAD);
    ck_assert_str_eq(why, "NOAUTH Authentication required.");
    ck_assert_ptr_null(host);

    /* not an address: an empty host, a port out of range or not a number, another shape */
    {
        const char *bad[] = {"*2\r\n$0\r\n\r\n$4\r\n6379\r\n",
                             "*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n",
                             "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n65536\r\n",
                             "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n63x9\r\n",
                             "*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n",
                             "*1\r\n$9\r\n127.0.0.1\r\n",
                             "*3\r\n$1\r\nh\r\n$4\r\n6379\r\n$1\r\nx\r\n",
                             "+OK\r\n",
                             NULL};
        for (const char **b = bad; *b; b++) {
            ck_assert_msg(answer(*b, &host, &port, why, 200) == DTQ_SENTINEL_BAD, "accepted %s",
                          *b);
            ck_assert_ptr_null(host);
            ck_assert_str_eq(why, "not an address");
        }
    }
    {
        /* a host with a NUL inside would be cut short: not an address either */
        static const char nul[] = "*2\r\n$3\r\na\0b\r\n$4\r\n6379\r\n";
        redisReply *r = resp_n(nul, sizeof(nul) - 1);
        ck_assert_int_eq(dtq_sentinel_answer(r, &host, &port, why, 200), DTQ_SENTINEL_BAD);
        freeReplyObject(r);
    }
    ck_assert_int_eq(dtq_sentinel_answer(NULL, &host, &port, why, 200), DTQ_SENTINEL_BAD);
}
END_TEST

/* A +switch-master message with this payload, as SUBSCRIBE delivers it. */
static redisReply *switch_msg(const char *payload, size_t len) {
    char text[1024];
    int n = snprintf(text, sizeof(text), "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$%zu\r\n",
                     len);
    ck_assert_int_lt(n + (int)len + 2, (int)sizeof(text));
    memcpy(text + n, payload, len);
    memcpy(text + n + len, "\r\n", 2);
    return resp_n(text, (size_t)n + len + 2);
}

/* The +switch-master payload (sentinel.c's subscription): was read with sscanf("%255s ...
 * %d"), which took a port such as 0, -1 or 70000 (and overflowing digits, undefined) and
 * cut a word of more than 255 bytes into the next field. */
START_TEST(test_sentinel_switch) {
    static const char *const bad[] = {
        "mymaster 10.0.0.1 6379 10.0.0.2",        /* four words */
        "mymaster 10.0.0.1 6379 10.0.0.2 6380 x", /* six */
        "mymaster 10.0.0.1 6379 10.0.0.2 0",      /* port 0 */
        "mymaster 10.0.0.1 6379 10.0.0.2 70000",  /* above 65535 */
        "mymaster 10.0.0.1 6379 10.0.0.2 -1",     /* negative */
        "mymaster 10.0.0.1 6379 10.0.0.2 99999999999999999999",
        "mymaster 10.0.0.1 x 10.0.0.2 6380", /* the old port too */
        "",
    };
    dtq_sentinel_switch sw;
    redisReply *r = switch_msg("mymaster 10.0.0.1 6379 10.0.0.2 6380", 36);
    ck_assert_int_eq(dtq_sentinel_switch_parse(r, &sw), 0);
    ck_assert_str_eq(sw.master, "mymaster");
    ck_assert_str_eq(sw.old_host, "10.0.0.1");
    ck_assert_int_eq(sw.old_port, 6379);
    ck_assert_str_eq(sw.new_host, "10.0.0.2");
    ck_assert_int_eq(sw.new_port, 6380);
    freeReplyObject(r);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = switch_msg(bad[i], strlen(bad[i]));
        ck_assert_msg(dtq_sentinel_switch_parse(r, &sw) == -1, "accepted '%s'", bad[i]);
        ck_assert_int_eq(sw.new_port, 0);
        freeReplyObject(r);
    }
    {
        /* a host of 256 bytes: refused, not split into the port's place; 255 fit */
        char p[300];
        for (int len = 255; len <= 256; len++) {
            memset(p, 'a', sizeof(p));
            memcpy(p, "m ", 2);
            snprintf(p + 2 + len, sizeof(p) - 2 - (size_t)len, " 1 h 2");
            r = switch_msg(p, strlen(p));
            ck_assert_int_eq(dtq_sentinel_switch_parse(r, &sw), len == 255 ? 0 : -1);
            freeReplyObject(r);
        }
    }
    {
        static const char nul[] = "m h 1\0 h 2";
        r = switch_msg(nul, sizeof(nul) - 1);
        ck_assert_int_eq(dtq_sentinel_switch_parse(r, &sw), -1);
        freeReplyObject(r);
    }
    r = resp("*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n:5\r\n"); /* a payload that is no string */
    ck_assert_int_eq(dtq_sentinel_switch_parse(r, &sw), -1);
    freeReplyObject(r);
    ck_assert_int_eq(dtq_sentinel_switch_parse(NULL, &sw), -1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("redis_proto");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_plan);
    tcase_add_test(tc, test_check);
    tcase_add_test(tc, test_sentinel_answer);
    tcase_add_test(tc, test_sentinel_switch);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
