/* check_web_auth.c: dtq-web's token files and the bearer check (src/web_auth.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "web_auth.h"

#define TOK1 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TOK2 "s3cret-token-for-alice-Zm9vYmFyYmF6cXV4cXV1eA"

START_TEST(test_parse_and_check) {
    char err[256];
    dtq_web_tokens *t = dtq_web_tokens_parse(
        "# dashboard tokens\n\n" TOK1 "\n  alice   " TOK2 "  \r\n", err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_int_eq(dtq_web_tokens_count(t), 2);
    ck_assert_str_eq(dtq_web_tokens_check(t, "Bearer " TOK1), "dtq-web");
    ck_assert_str_eq(dtq_web_tokens_check(t, "bearer   " TOK2 " "), "dtq-web:alice");
    ck_assert_ptr_null(dtq_web_tokens_check(t, NULL));
    ck_assert_ptr_null(dtq_web_tokens_check(t, ""));
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer"));
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer "));
    ck_assert_ptr_null(dtq_web_tokens_check(t, TOK1));                      /* no scheme */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Basic " TOK1));             /* another scheme */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer " TOK1 "x"));        /* longer */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer 0123456789abcdef")); /* a prefix */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer alice " TOK2));
    ck_assert_ptr_null(dtq_web_tokens_check(NULL, "Bearer " TOK1)); /* read-only */
    dtq_web_tokens_free(t);
}
END_TEST

static void expect_refused(const char *text, const char *want) {
    char err[256] = "";
    dtq_web_tokens *t = dtq_web_tokens_parse(text, err, sizeof(err));
    ck_assert_msg(t == NULL, "accepted: %s", text);
    ck_assert_msg(strstr(err, want) != NULL, "'%s': error '%s' lacks '%s'", text, err, want);
}

START_TEST(test_refused_files) {
    expect_refused("", "no token");
    expect_refused("# only a comment\n\n", "no token");
    expect_refused("short\n", "line 1: the token is 5 characters; a token needs 32 random bytes");
    expect_refused(TOK1 "\nbob short\n", "line 2: the token is 5 characters");
    /* hex digits carry 4 bits each: 63 are too few, 64 are enough */
    expect_refused("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n",
                   "line 1: the token is 63 characters; a token needs 32 random bytes: 64 hex "
                   "digits, or at least 43 characters (make one with: openssl rand -hex 32)");
    /* other characters (base64) carry 6: 42 are too few, 43 are enough */
    expect_refused("x23456789abcdef0123456789abcdef0123456789a\n", "the token is 42 characters");
    expect_refused("a b c\n", "line 1: expected");
    expect_refused("bad/name " TOK1 "\n", "the name must match");
    expect_refused("tab\ttoken\x01xxxxxxxxxxxxxxxx\n", "printable");
}
END_TEST

START_TEST(test_load_file) {
    char path[] = "/tmp/dtq-test-token-XXXXXX", err[512];
    int fd = mkstemp(path);
    dtq_web_tokens *t;
    ck_assert(fd >= 0);
    ck_assert_int_eq(write(fd, TOK1 "\n", strlen(TOK1) + 1), (ssize_t)strlen(TOK1) + 1);
    close(fd);
    t = dtq_web_tokens_load(path, err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_str_eq(dtq_web_tokens_check(t, "Bearer " TOK1), "dtq-web");
    dtq_web_tokens_free(t);
    unlink(path);
    ck_assert_ptr_null(dtq_web_tokens_load(path, err, sizeof(err)));
    ck_assert_msg(strstr(err, "cannot read") != NULL, "%s", err);
    ck_assert_ptr_null(dtq_web_tokens_load("/tmp", err, sizeof(err)));
    ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);
}
END_TEST

/* The Host check (DNS rebinding): the listen address and localhost with the listen port or
 * none, allowed_hosts entries with any port; everything else, malformed values included,
 * is refused. */
START_TEST(test_hosts) {
    char err[256];
    dtq_web_hosts *h =
        dtq_web_hosts_new("127.0.0.1:8080", "Dash.Example, [fd00::1] 10.0.0.5", err, sizeof(err));
    static const char *ok[] = {"127.0.0.1",        "127.0.0.1:8080",    "localhost",
                               "localhost:8080",   "LOCALHOST",         "dash.example",
                               "dash.example:443", "DASH.EXAMPLE:8080", "[fd00::1]",
                               "[fd00:0::1]:9",    "10.0.0.5:1"};
    static const char *refused[] = {"evil.example",
                                    "evil.example:8080",
                                    "127.0.0.1:8081",
                                    "127.0.0.2",
                                    "localhost:8081",
                                    "localhost.",
                                    "evil.localhost",
                                    "www.dash.example",
                                    "dash.example.evil",
                                    "dash.example:",
                                    "dash.example:0",
                                    "dash.example:65536",
                                    "dash.example:123456",
                                    "dash.example:80x",
                                    "[::1]",
                                    "fd00::1",
                                    "[fd00::1",
                                    "[fd00::1]x",
                                    "10.0.0.6",
                                    "",
                                    ":8080",
                                    "127.0.0.1 ",
                                    "a b"};
    ck_assert_msg(h != NULL, "%s", err);
    ck_assert_int_eq(dtq_web_hosts_any(h), 0);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        ck_assert_msg(dtq_web_hosts_check(h, ok[i]), "refused: %s", ok[i]);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_msg(!dtq_web_hosts_check(h, refused[i]), "answered: %s", refused[i]);
    ck_assert_int_eq(dtq_web_hosts_check(h, NULL), 0);
    dtq_web_hosts_free(h);

    /* every address: any IP address with the listen port or none, no name but localhost */
    h = dtq_web_hosts_new(":8080", "", err, sizeof(err));
    ck_assert_msg(h != NULL, "%s", err);
    ck_assert(dtq_web_hosts_check(h, "192.0.2.1:8080"));
    ck_assert(dtq_web_hosts_check(h, "[2001:db8::1]"));
    ck_assert(!dtq_web_hosts_check(h, "192.0.2.1:8081"));
    ck_assert(!dtq_web_hosts_check(h, "evil.example:8080"));
    dtq_web_hosts_free(h);
    h = dtq_web_hosts_new("[::]:8080", NULL, err, sizeof(err));
    ck_assert(h && dtq_web_hosts_check(h, "10.1.1.1"));
    dtq_web_hosts_free(h);
    h = dtq_web_hosts_new("0.0.0.0:8080", NULL, err, sizeof(err));
    ck_assert(h && dtq_web_hosts_check(h, "[::1]:8080"));
    dtq_web_hosts_free(h);

    /* an IPv6 listen address compares as an address; a listen name as written */
    h = dtq_web_hosts_new("[::1]:8080", NULL, err, sizeof(err));
    ck_assert(h && dtq_web_hosts_check(h, "[0:0::1]:8080"));
    ck_assert(!dtq_web_hosts_check(h, "127.0.0.1:8080"));
    dtq_web_hosts_free(h);
    h = dtq_web_hosts_new("queue-box:9000", NULL, err, sizeof(err));
    ck_assert(h && dtq_web_hosts_check(h, "Queue-Box:9000"));
    ck_assert(!dtq_web_hosts_check(h, "queue-box:9001"));
    dtq_web_hosts_free(h);

    /* "*": every Host */
    h = dtq_web_hosts_new("127.0.0.1:8080", "dash.example *", err, sizeof(err));
    ck_assert(h && dtq_web_hosts_any(h));
    ck_assert(dtq_web_hosts_check(h, "evil.example"));
    dtq_web_hosts_free(h);
}
END_TEST

START_TEST(test_hosts_refused_lists) {
    char err[256];
    ck_assert_ptr_null(dtq_web_hosts_new("nowhere", "", err, sizeof(err)));
    ck_assert_msg(strstr(err, "'nowhere' is not host:port") != NULL, "%s", err);
    ck_assert_ptr_null(dtq_web_hosts_new("127.0.0.1:1", "ok dash.example:80", err, sizeof(err)));
    ck_assert_msg(strstr(err, "'dash.example:80' is not an IPv6 address") != NULL, "%s", err);
    ck_assert_ptr_null(dtq_web_hosts_new("127.0.0.1:1", "*.example", err, sizeof(err)));
    ck_assert_msg(strstr(err, "'*.example': a wildcard is '*' alone") != NULL, "%s", err);
    ck_assert_ptr_null(dtq_web_hosts_new("127.0.0.1:1", "a/b", err, sizeof(err)));
    ck_assert_msg(strstr(err, "'a/b' is not a host name, an IP address or *") != NULL, "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("web_auth");
    TCase *tc = tcase_create("tokens");
    tcase_add_test(tc, test_parse_and_check);
    tcase_add_test(tc, test_refused_files);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_hosts);
    tcase_add_test(tc, test_hosts_refused_lists);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
