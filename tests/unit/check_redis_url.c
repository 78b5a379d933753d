/* check_redis_url.c: redis_url.c: parsing of redis://, rediss://, unix://,
 * redis-sentinel://, rediss-sentinel://, redis-cluster:// and rediss-cluster:// URLs, the deep
 * copy, and the address shown in messages. */
#include <check.h>
#include <string.h>

#include "harness.h"

#include "redis_url.h"

START_TEST(test_url_tcp) {
    dtq_redis_url u;
    char err[128];
    ck_assert_int_eq(dtq_redis_url_parse("redis://127.0.0.1:6380/3", &u, err, sizeof(err)), 0);
    ck_assert(!u.is_unix);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(u.port, 6380);
    ck_assert_int_eq(u.db, 3);
    ck_assert_ptr_null(u.password);
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis://alice:s3cr:et@h.example", &u, err, sizeof(err)),
                     0);
    ck_assert_str_eq(u.user, "alice");
    ck_assert_str_eq(u.password, "s3cr:et");
    ck_assert_str_eq(u.host, "h.example");
    ck_assert_int_eq(u.port, 6379);
    ck_assert_int_eq(u.db, 0);
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis://:pw@localhost:7000", &u, err, sizeof(err)), 0);
    ck_assert_ptr_null(u.user);
    ck_assert_str_eq(u.password, "pw");
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis://[::1]:6390/1", &u, err, sizeof(err)), 0);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_int_eq(u.port, 6390);
    ck_assert_int_eq(u.db, 1);
    ck_assert(!u.tls);
    dtq_redis_url_deinit(&u);
}
END_TEST

START_TEST(test_url_tls) {
    dtq_redis_url u;
    char err[128];
    ck_assert_int_eq(
        dtq_redis_url_parse("rediss://alice:pw@redis.example.com:6380/2", &u, err, sizeof(err)), 0);
    ck_assert(u.tls);
    ck_assert(!u.is_unix);
    ck_assert_str_eq(u.user, "alice");
    ck_assert_str_eq(u.password, "pw");
    ck_assert_str_eq(u.host, "redis.example.com");
    ck_assert_int_eq(u.port, 6380);
    ck_assert_int_eq(u.db, 2);
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("rediss://10.0.0.5", &u, err, sizeof(err)), 0);
    ck_assert(u.tls);
    ck_assert_str_eq(u.host, "10.0.0.5");
    ck_assert_int_eq(u.port, 6379);
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("rediss://[::1]:7000", &u, err, sizeof(err)), 0);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_int_eq(u.port, 7000);
    dtq_redis_url_deinit(&u);
    ck_assert_int_ne(dtq_redis_url_parse("rediss://", &u, err, sizeof(err)), 0);
    ck_assert_int_ne(dtq_redis_url_parse("redisss://h", &u, err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(strstr(err, "rediss://"));
}
END_TEST

START_TEST(test_url_unix) {
    dtq_redis_url u;
    char err[128];
    ck_assert_int_eq(dtq_redis_url_parse("unix:///run/redis.sock?db=2", &u, err, sizeof(err)), 0);
    ck_assert(u.is_unix);
    ck_assert_str_eq(u.path, "/run/redis.sock");
    ck_assert_int_eq(u.db, 2);
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("unix:///tmp/x.sock", &u, err, sizeof(err)), 0);
    ck_assert_int_eq(u.db, 0);
    dtq_redis_url_deinit(&u);
}
END_TEST

START_TEST(test_url_sentinel) {
    dtq_redis_url u;
    char err[128];
    ck_assert_int_eq(
        dtq_redis_url_parse("redis-sentinel://127.0.0.1:26380,s2.example,[::1]:26390/m", &u, err,
                            sizeof(err)),
        0);
    ck_assert(u.sentinel);
    ck_assert(!u.tls);
    ck_assert(!u.is_unix);
    ck_assert_ptr_null(u.host);
    ck_assert_int_eq(u.nsentinels, 3);
    ck_assert_str_eq(u.sentinels[0].host, "127.0.0.1");
    ck_assert_int_eq(u.sentinels[0].port, 26380);
    ck_assert_str_eq(u.sentinels[1].host, "s2.example");
    ck_assert_int_eq(u.sentinels[1].port, 26379);
    ck_assert_str_eq(u.sentinels[2].host, "::1");
    ck_assert_int_eq(u.sentinels[2].port, 26390);
    ck_assert_str_eq(u.master_name, "m");
    ck_assert_int_eq(u.db, 0);
    ck_assert_ptr_null(u.password);
    {
        /* a deep copy: it outlives the original, and the original's strings are not shared */
        dtq_redis_url copy;
        dtq_redis_url_copy(&copy, &u);
        ck_assert_ptr_ne(copy.sentinels, u.sentinels);
        ck_assert_ptr_ne(copy.master_name, u.master_name);
        dtq_redis_url_deinit(&u);
        ck_assert(copy.sentinel);
        ck_assert_int_eq(copy.nsentinels, 3);
        ck_assert_str_eq(copy.sentinels[2].host, "::1");
        ck_assert_int_eq(copy.sentinels[2].port, 26390);
        ck_assert_str_eq(copy.master_name, "m");
        u = copy;
    }
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("rediss-sentinel://alice:p/w@d@h1:5000/mymaster/3", &u,
                                         err, sizeof(err)),
                     0);
    ck_assert(u.sentinel);
    ck_assert(u.tls);
    ck_assert_str_eq(u.user, "alice");
    ck_assert_str_eq(u.password, "p/w@d");
    ck_assert_int_eq(u.nsentinels, 1);
    ck_assert_str_eq(u.sentinels[0].host, "h1");
    ck_assert_int_eq(u.sentinels[0].port, 5000);
    ck_assert_str_eq(u.master_name, "mymaster");
    ck_assert_int_eq(u.db, 3);
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis-sentinel://:pw@h1/m/", &u, err, sizeof(err)), 0);
    ck_assert_ptr_null(u.user);
    ck_assert_str_eq(u.password, "pw");
    ck_assert_str_eq(u.master_name, "m");
    dtq_redis_url_deinit(&u);
    {
        const char *bad[] = {"redis-sentinel://h1:26379", "redis-sentinel://h1:26379/",
                             "redis-sentinel:///m",       "redis-sentinel://h1,,h2/m",
                             "redis-sentinel://h1,/m",    "redis-sentinel://h1:0/m",
                             "redis-sentinel://h1/m/x",   "redis-sentinel://[::1/m",
                             "rediss-sentinel://",        NULL};
        for (const char **b = bad; *b; b++) {
            ck_assert_msg(dtq_redis_url_parse(*b, &u, err, sizeof(err)) != 0, "accepted %s", *b);
            ck_assert(strlen(err) > 0);
        }
    }
}
END_TEST

START_TEST(test_url_cluster) {
    dtq_redis_url u, c;
    char err[256], buf[64];
    ck_assert_int_eq(dtq_redis_url_parse("redis-cluster://127.0.0.1:7000,h2.example,[::1]:7002", &u,
                                         err, sizeof(err)),
                     0);
    ck_assert(u.cluster);
    ck_assert(!u.tls);
    ck_assert(!u.sentinel);
    ck_assert_ptr_null(u.host);
    ck_assert_int_eq(u.db, 0);
    ck_assert_int_eq(u.nseeds, 3);
    ck_assert_str_eq(u.seeds[0].host, "127.0.0.1");
    ck_assert_int_eq(u.seeds[0].port, 7000);
    ck_assert_str_eq(u.seeds[1].host, "h2.example");
    ck_assert_int_eq(u.seeds[1].port, 6379);
    ck_assert_str_eq(u.seeds[2].host, "::1");
    ck_assert_int_eq(u.seeds[2].port, 7002);
    ck_assert_ptr_null(u.password);
    ck_assert_str_eq(dtq_redis_url_where(&u, buf, sizeof(buf)), "127.0.0.1:7000");
    dtq_redis_url_copy(&c, &u);
    dtq_redis_url_deinit(&u);
    ck_assert(c.cluster);
    ck_assert_int_eq(c.nseeds, 3);
    ck_assert_str_eq(c.seeds[2].host, "::1");
    ck_assert_int_eq(c.seeds[2].port, 7002);
    dtq_redis_url_deinit(&c);

    /* TLS, credentials (a password with '/' and '@'), a trailing '/' */
    ck_assert_int_eq(
        dtq_redis_url_parse("rediss-cluster://alice:p/w@d@n1:7000/", &u, err, sizeof(err)), 0);
    ck_assert(u.cluster);
    ck_assert(u.tls);
    ck_assert_str_eq(u.user, "alice");
    ck_assert_str_eq(u.password, "p/w@d");
    ck_assert_int_eq(u.nseeds, 1);
    ck_assert_str_eq(u.seeds[0].host, "n1");
    ck_assert_int_eq(u.seeds[0].port, 7000);
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("redis-cluster://:pw@n1", &u, err, sizeof(err)), 0);
    ck_assert_ptr_null(u.user);
    ck_assert_str_eq(u.password, "pw");
    dtq_redis_url_deinit(&u);

    /* no database number: a cluster has db 0 only */
    ck_assert_int_ne(dtq_redis_url_parse("redis-cluster://n1:7000/0", &u, err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(strstr(err, "database 0 only"));
    ck_assert_int_ne(dtq_redis_url_parse("redis-cluster://n1:7000,n2:7001/3", &u, err, sizeof(err)),
                     0);
    ck_assert_ptr_nonnull(strstr(err, "no database number"));
    {
        const char *bad[] = {
            "redis-cluster://",     "redis-cluster:///",         "redis-cluster://n1,,n2",
            "redis-cluster://n1,",  "redis-cluster://,n1",       "redis-cluster://n1:0",
            "redis-cluster://n1:x", "redis-cluster://[::1:7000", "rediss-cluster://",
            "redis-cluster://n1/x", "redis-clusters://n1:7000",  NULL};
        for (const char **b = bad; *b; b++) {
            ck_assert_msg(dtq_redis_url_parse(*b, &u, err, sizeof(err)) != 0, "accepted %s", *b);
            ck_assert(strlen(err) > 0);
        }
    }
}
END_TEST

START_TEST(test_url_errors) {
    dtq_redis_url u;
    char err[128];
    const char *bad[] = {"http://x",
                         "redis://",
                         "redis://h:0",
                         "redis://h:99999",
                         "redis://h:p",
                         "redis://h/x",
                         "unix://relative.sock",
                         "unix:///s.sock?db=x",
                         "redis://[::1",
                         "",
                         NULL};
    for (const char **b = bad; *b; b++) {
        ck_assert_msg(dtq_redis_url_parse(*b, &u, err, sizeof(err)) != 0, "accepted %s", *b);
        ck_assert(strlen(err) > 0);
    }
}
END_TEST

START_TEST(test_url_where) {
    dtq_redis_url u;
    char err[128], buf[64];
    ck_assert_int_eq(dtq_redis_url_parse("redis://alice:pw@10.0.0.1:7000/1", &u, err, sizeof(err)),
                     0);
    ck_assert_str_eq(dtq_redis_url_where(&u, buf, sizeof(buf)), "10.0.0.1:7000");
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("rediss://:pw@[::1]:6390", &u, err, sizeof(err)), 0);
    ck_assert_str_eq(dtq_redis_url_where(&u, buf, sizeof(buf)), "[::1]:6390");
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("unix:///run/r.sock?db=1", &u, err, sizeof(err)), 0);
    ck_assert_str_eq(dtq_redis_url_where(&u, buf, sizeof(buf)), "/run/r.sock");
    dtq_redis_url_deinit(&u);
    ck_assert_str_eq(dtq_redis_hostport(buf, sizeof(buf), "fe80::1", 26379), "[fe80::1]:26379");
    ck_assert_str_eq(dtq_redis_hostport(buf, sizeof(buf), "s1.example", 1), "s1.example:1");
}
END_TEST

int main(void) {
    Suite *s = suite_create("redis_url");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_url_tcp);
    tcase_add_test(tc, test_url_tls);
    tcase_add_test(tc, test_url_unix);
    tcase_add_test(tc, test_url_sentinel);
    tcase_add_test(tc, test_url_cluster);
    tcase_add_test(tc, test_url_errors);
    tcase_add_test(tc, test_url_where);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
