/* it_ctl_timeout: dtqctl against a Redis that accepts and never answers, or stalls in
 * the middle of a reply (issue 27.6). Every URL kind (redis://, rediss://, unix://,
 * redis-sentinel://, redis-cluster://) must give up within -t/--timeout (plus a margin)
 * with exit 4 and "dtqctl: redis at X did not answer within N s". No redis-server: the
 * servers are a forked child of this suite, listening on two TCP ports and a socket. */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include "harness.h"

#define MARGIN_MS 4000 /* generous: a shared machine */
#define MAX_CONNS 64

static th_redis R; /* only its directory: where th_run_dtqctl writes the output */
static pid_t server_pid;
static int mute_port, stall_port;
static char mute_sock[320];

static int listen_tcp(int *port) {
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static int listen_unix(const char *path) {
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ck_assert_int_lt(strlen(path), sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    return fd;
}

/* The child: the mute listeners accept and never read or write; the stalling one answers
 * CLUSTER SLOTS with a map that gives it every slot, +OK to the handshake's commands (AUTH,
 * SELECT, CLIENT) and, to the first other command (a verb's), the head of a bulk string it
 * never finishes. */
static void serve(int mute_tcp, int mute_unix, int stall) {
    struct pollfd p[3 + MAX_CONNS];
    int stalling[MAX_CONNS] = {0};
    int n = 3;
    p[0].fd = mute_tcp;
    p[1].fd = mute_unix;
    p[2].fd = stall;
    for (int i = 0; i < 3; i++) p[i].events = POLLIN;
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0) continue;
        for (int i = 0; i < 3; i++) {
            int c;
            if (!(p[i].revents & POLLIN)) continue;
            c = accept(p[i].fd, NULL, NULL);
            if (c < 0) continue;
            if (n == 3 + MAX_CONNS) {
                close(c);
                continue;
            }
            p[n].fd = c;
            p[n].revents = 0; /* polled from the next round on */
            /* the mute ones are polled for nothing: never read */
            p[n].events = i == 2 ? POLLIN : 0;
            stalling[n - 3] = 0;
            n++;
        }
        for (int i = 3; i < n; i++) {
            char buf[4096];
            ssize_t r;
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            /* a mute connection is never read: closed once its client hung up */
            r = p[i].events ? read(p[i].fd, buf, sizeof(buf) - 1) : 0;
            if (r <= 0) {
                close(p[i].fd);
                p[i] = p[n - 1];
                stalling[i - 3] = stalling[n - 4];
                n--;
                i--;
                continue;
            }
            buf[r] = '\0';
            if (stalling[i - 3]) continue;
            if (strstr(buf, "SLOTS")) {
                char map[128];
                int len = snprintf(map, sizeof(map),
                                   "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
                                   stall_port);
                if (write(p[i].fd, map, (size_t)len) < 0) continue;
            } else if (strstr(buf, "AUTH") || strstr(buf, "SELECT") || strstr(buf, "CLIENT")) {
                if (write(p[i].fd, "+OK\r\n", 5) < 0) continue;
            } else {
                stalling[i - 3] = 1;
                if (write(p[i].fd, "$100\r\nthe first", 15) < 0) continue;
            }
        }
    }
}

static void setup(void) {
    int mt, mu, st;
    char tmpl[] = "/tmp/dtq-ctl-timeout-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    memset(&R, 0, sizeof(R));
    snprintf(R.dir, sizeof(R.dir), "%s", tmpl);
    snprintf(mute_sock, sizeof(mute_sock), "%s/mute.sock", R.dir);
    mt = listen_tcp(&mute_port);
    st = listen_tcp(&stall_port);
    mu = listen_unix(mute_sock);
    server_pid = fork();
    ck_assert_int_ge(server_pid, 0);
    if (server_pid == 0) {
        serve(mt, mu, st);
        _exit(0);
    }
    close(mt);
    close(mu);
    close(st);
}

static void teardown(void) {
    char cmd[400];
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = 0;
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", R.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", R.dir);
}

/* Runs dtqctl with args; asserts exit 4 within timeout_ms + MARGIN_MS, one line naming
 * where (and N s) on its last line. */
static void expect_no_answer(const char *args, const char *where, const char *within,
                             int64_t timeout_ms) {
    char *out, want[512];
    int64_t t0 = th_now_ms(), took;
    int rc = th_run_dtqctl(&R, &out, "", args);
    took = th_now_ms() - t0;
    ck_assert_msg(rc == 4, "dtqctl %s: exit %d, not 4: %s", args, rc, out);
    ck_assert_msg(took < timeout_ms + MARGIN_MS, "dtqctl %s took %lld ms", args, (long long)took);
    snprintf(want, sizeof(want), "dtqctl: redis at %s did not answer within %s s\n", where, within);
    ck_assert_msg(strstr(out, want) != NULL, "dtqctl %s said: %s (wanted %s)", args, out, want);
    free(out);
}

/* dtqctl `timeout` `-u scheme://127.0.0.1:port<path>` `verb` gives up as expect_no_answer
 * says; timeout is -t's text ("-t 1", "--timeout 0.5"). */
static void expect_tcp(const char *timeout, const char *scheme, int port, const char *path,
                       const char *verb, const char *within, int64_t timeout_ms) {
    char args[600], where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    snprintf(args, sizeof(args), "%s -u %s://%s%s %s", timeout, scheme, where, path, verb);
    expect_no_answer(args, where, within, timeout_ms);
}

START_TEST(test_mute_redis) {
    expect_tcp("-t 1", "redis", mute_port, "/0", "stats", "1", 1000);
    /* the long form, and a fraction of a second */
    expect_tcp("--timeout 0.5", "redis", mute_port, "/0", "show x", "0.5", 500);
}
END_TEST

START_TEST(test_stall_mid_reply) {
    expect_tcp("-t 1", "redis", stall_port, "/0", "stats", "1", 1000);
    expect_tcp("-t 1", "redis", stall_port, "/0", "show x", "1", 1000);
}
END_TEST

START_TEST(test_every_url_kind) {
    char args[900];
    snprintf(args, sizeof(args), "-t 1 -u unix://%s stats", mute_sock);
    expect_no_answer(args, mute_sock, "1", 1000);
    /* the TLS handshake is never answered */
    expect_tcp("-t 1", "rediss", mute_port, "/0", "stats", "1", 1000);
    /* the sentinel never says where the master is */
    expect_tcp("-t 1", "redis-sentinel", mute_port, "/mymaster", "stats", "1", 1000);
    /* the seed never gives the slot map */
    expect_tcp("-t 1", "redis-cluster", mute_port, "", "stats", "1", 1000);
    /* a cluster node that gives the map (every slot its own) and stalls mid-reply */
    expect_tcp("-t 1", "redis-cluster", stall_port, "", "stats", "1", 1000);
}
END_TEST

/* Without -t: 10 s for the reply. */
START_TEST(test_default_timeout) {
    expect_tcp("", "redis", mute_port, "/0", "stats", "10", 10000);
}
END_TEST

START_TEST(test_bad_timeout) {
    const char *bad[] = {"-t 0 stats", "-t -1 stats", "-t abc stats", "--timeout 1e9 stats",
                         "-t stats"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out;
        int rc = th_run_dtqctl(&R, &out, "", bad[i]);
        ck_assert_msg(rc == 2, "dtqctl %s: exit %d: %s", bad[i], rc, out);
        free(out);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("ctl_timeout");
    TCase *tc = tcase_create("timeout");
    SRunner *sr;
    int failed;
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mute_redis);
    tcase_add_test(tc, test_stall_mid_reply);
    tcase_add_test(tc, test_every_url_kind);
    tcase_add_test(tc, test_default_timeout);
    tcase_add_test(tc, test_bad_timeout);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
