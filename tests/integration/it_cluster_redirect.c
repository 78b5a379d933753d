/* it_cluster_redirect: a cluster node's redirection is followed only to a node of the
 * cluster's own slot map (issue 27.7); TRYAGAIN is sent again within the timeout (issue
 * 27.11); both by dtqctl (rsync.c) and by the daemon's router (rcluster.c), which drive the
 * same decision (cluster.c's dtq_route_decide, issue 26.3). A fake node gives the map (every slot
 * its own) and answers every other command with MOVED (or ASK) to another port of this machine,
 * where a listener writes down any connection it gets; dtqctl over redis-cluster://, with a
 * password in the URL, must refuse the redirection, say why, and never connect there (so no
 * AUTH with the password reaches it). No redis-server: the servers are a forked child. */
#include <check.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#include "rcluster.h"

#define MAX_CONNS 32

static th_redis R; /* only its directory: where th_run_dtqctl writes the output */
static pid_t server_pid;
static int node_port, foreign_port;
static char seen_path[320];  /* written when the foreign listener is connected to */
static char tries_path[320]; /* a line per command the node answered with TRYAGAIN */

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

/* The child. The node answers CLUSTER SLOTS with a map that gives it every slot, +OK to the
 * handshake's commands, and to anything else a redirection to the foreign port (MOVED, or
 * ASK when the node was started with mode 1), or TRYAGAIN (mode 2, a line appended to
 * tries_path each time). The foreign listener writes seen_path at every connection and
 * closes it. */
static void answer(int fd, const char *cmd, int ask) {
    char out[160];
    int len;
    if (strstr(cmd, "SLOTS"))
        len = snprintf(out, sizeof(out),
                       "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", node_port);
    else if (strstr(cmd, "AUTH") || strstr(cmd, "SELECT") || strstr(cmd, "CLIENT"))
        len = snprintf(out, sizeof(out), "+OK\r\n");
    else if (strstr(cmd, "PING"))
        len = snprintf(out, sizeof(out), "+PONG\r\n");
    else if (ask == 2) {
        FILE *g = fopen(tries_path, "a");
        if (g) {
            fputs("try\n", g);
            fclose(g);
        }
        len = snprintf(out, sizeof(out), "-TRYAGAIN the slot is being moved\r\n");
    } else
        len = snprintf(out, sizeof(out), "-%s 1234 127.0.0.1:%d\r\n", ask ? "ASK" : "MOVED",
                       foreign_port);
    if (write(fd, out, (size_t)len) < 0) return;
}

static void serve(int node, int foreign, int ask) {
    struct pollfd p[2 + MAX_CONNS];
    int n = 2;
    p[0].fd = node;
    p[1].fd = foreign;
    p[0].events = p[1].events = POLLIN;
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0) continue;
        if (p[1].revents & POLLIN) {
            int c = accept(foreign, NULL, NULL), f = open(seen_path, O_WRONLY | O_CREAT, 0600);
            if (f >= 0) close(f);
            if (c >= 0) close(c);
        }
        if ((p[0].revents & POLLIN) && n < 2 + MAX_CONNS) {
            int c = accept(node, NULL, NULL);
            if (c >= 0) {
                p[n].fd = c;
                p[n].events = POLLIN;
                p[n].revents = 0;
                n++;
            }
        }
        for (int i = 2; i < n; i++) {
            char buf[4096];
            ssize_t r;
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            r = read(p[i].fd, buf, sizeof(buf) - 1);
            if (r <= 0) {
                close(p[i].fd);
                p[i--] = p[--n];
                continue;
            }
            buf[r] = '\0';
            /* a reply to each command of the read (a pipeline comes in one) */
            for (char *cmd = buf; cmd && *cmd;) {
                char *next = strstr(cmd + 1, "\r\n*");
                if (next) *(next += 2) = '\0';
                answer(p[i].fd, cmd, ask);
                if (next) *next = '*';
                cmd = next;
            }
        }
    }
}

static void start(int ask) {
    int nd, fg;
    char tmpl[] = "/tmp/dtq-redirect-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    memset(&R, 0, sizeof(R));
    snprintf(R.dir, sizeof(R.dir), "%s", tmpl);
    snprintf(seen_path, sizeof(seen_path), "%s/foreign-connected", R.dir);
    snprintf(tries_path, sizeof(tries_path), "%s/tries", R.dir);
    nd = listen_tcp(&node_port);
    fg = listen_tcp(&foreign_port);
    server_pid = fork();
    ck_assert_int_ge(server_pid, 0);
    if (server_pid == 0) {
        serve(nd, fg, ask);
        _exit(0);
    }
    close(nd);
    close(fg);
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

/* dtqctl with the password in the cluster URL: refused, the reason named, and nothing
 * connected to the address the redirection named. */
static void expect_refused(void) {
    char args[300], want[200], *out;
    int rc;
    snprintf(args, sizeof(args), "-t 5 -u redis-cluster://app:s3cret@127.0.0.1:%d stats",
             node_port);
    rc = th_run_dtqctl(&R, &out, "", args);
    snprintf(want, sizeof(want),
             "cluster redirection to 127.0.0.1:%d, not a node of the cluster's slot map; not "
             "followed",
             foreign_port);
    ck_assert_msg(rc == 1 && strstr(out, want), "exit %d: %s", rc, out);
    ck_assert_msg(access(seen_path, F_OK) != 0, "the foreign address was connected to: %s", out);
    free(out);
}

START_TEST(test_moved_to_a_foreign_address_refused) {
    start(0);
    expect_refused();
}
END_TEST

START_TEST(test_ask_to_a_foreign_address_refused) {
    start(1);
    expect_refused();
}
END_TEST

/* A node that answers TRYAGAIN (a slot being moved): dtqctl sends the command again until
 * its timeout (-t 2), not once; then the TRYAGAIN is its answer (exit 1). */
START_TEST(test_tryagain_sent_again_within_the_timeout) {
    char args[300], *out, *tries;
    int rc, n = 0;
    int64_t t0;
    start(2);
    snprintf(args, sizeof(args), "-t 2 -u redis-cluster://127.0.0.1:%d stats", node_port);
    t0 = th_now_ms();
    rc = th_run_dtqctl(&R, &out, "", args);
    ck_assert_msg(rc == 1 && strstr(out, "TRYAGAIN"), "exit %d: %s", rc, out);
    ck_assert_msg(th_now_ms() - t0 >= 1500, "gave up after %lld ms", (long long)(th_now_ms() - t0));
    free(out);
    tries = th_read_file(tries_path);
    for (const char *p = tries; (p = strstr(p, "try\n")) != NULL; p++) n++;
    ck_assert_msg(n >= 4, "TRYAGAIN answered %d times", n);
    free(tries);
}
END_TEST

/* ---- the same through the daemon's router (rcluster.c) */

typedef struct async_answer {
    int done, null, type;
    char str[256];
} async_answer;

static void on_async(redisAsyncContext *ctx, void *reply, void *priv) {
    async_answer *a = priv;
    redisReply *r = reply;
    (void)ctx;
    a->done = 1;
    a->null = !r;
    if (r) {
        a->type = r->type;
        if (r->str) snprintf(a->str, sizeof(a->str), "%s", r->str);
    }
}

static void on_up(dtq_rcluster *rc, int up, void *arg) {
    (void)rc;
    if (up) *(int *)arg = 1;
}

static int loop_until(struct event_base *base, const int *flag, int64_t ms) {
    int64_t end = th_now_ms() + ms;
    while (!*flag && th_now_ms() < end) event_base_loop(base, EVLOOP_ONCE);
    return *flag;
}

/* GET k through a router on the scripted node, with a password in the URL; max_wait_ms
 * bounds TRYAGAIN's resends. */
static async_answer async_get(int64_t max_wait_ms, dtq_rcluster_stats *st) {
    struct event_base *base = event_base_new();
    dtq_redis_url u;
    dtq_rcluster *rc;
    char url[200], err[300];
    const char *argv[] = {"GET", "k"};
    async_answer a;
    int up = 0;
    memset(&a, 0, sizeof(a));
    snprintf(url, sizeof(url), "redis-cluster://app:s3cret@127.0.0.1:%d", node_port);
    ck_assert_msg(dtq_redis_url_parse(url, &u, err, sizeof(err)) == 0, "%s", err);
    rc = dtq_rcluster_new(base, &u, 1000, "redirect", on_up, &up);
    dtq_redis_url_deinit(&u);
    dtq_rcluster_set_max_wait(rc, max_wait_ms);
    dtq_rcluster_start(rc);
    ck_assert_msg(loop_until(base, &up, 5000), "the router did not come up");
    ck_assert_int_eq(dtq_rcluster_command(rc, on_async, &a, 2, argv, NULL), DTQ_OK);
    ck_assert_msg(loop_until(base, &a.done, 10000), "no answer");
    dtq_rcluster_stats_get(rc, st);
    dtq_rcluster_free(rc);
    event_base_free(base);
    return a;
}

/* A redirection to an address not in the map: the map read again (a node new to the
 * router would be followed then), then refused with dtqctl's words, an error reply (the
 * command did not run), and nothing connected there. */
static void expect_async_refused(void) {
    dtq_rcluster_stats st;
    async_answer a = async_get(5000, &st);
    char want[200];
    snprintf(want, sizeof(want),
             "cluster redirection to 127.0.0.1:%d, not a node of the cluster's slot map; not "
             "followed",
             foreign_port);
    ck_assert_msg(!a.null && a.type == REDIS_REPLY_ERROR && !strcmp(a.str, want), "%s",
                  a.null ? "(NULL)" : a.str);
    ck_assert_int_ge(st.refreshes, 2); /* the first map, and the one read for the address */
    ck_assert_int_eq(st.moved + st.ask, 0);
    ck_assert_msg(access(seen_path, F_OK) != 0, "the foreign address was connected to");
}

START_TEST(test_async_moved_to_a_foreign_address_refused) {
    start(0);
    expect_async_refused();
}
END_TEST

START_TEST(test_async_ask_to_a_foreign_address_refused) {
    start(1);
    expect_async_refused();
}
END_TEST

/* TRYAGAIN: sent again (50 ms doubling to 500 ms) for max_wait_ms, then the answer. */
START_TEST(test_async_tryagain_sent_again) {
    dtq_rcluster_stats st;
    async_answer a;
    char *tries;
    int n = 0;
    int64_t t0;
    start(2);
    t0 = th_now_ms();
    a = async_get(1500, &st);
    ck_assert_msg(!a.null && a.type == REDIS_REPLY_ERROR && !strncmp(a.str, "TRYAGAIN ", 9), "%s",
                  a.null ? "(NULL)" : a.str);
    ck_assert_msg(th_now_ms() - t0 >= 1000, "gave up after %lld ms", (long long)(th_now_ms() - t0));
    tries = th_read_file(tries_path);
    for (const char *p = tries; (p = strstr(p, "try\n")) != NULL; p++) n++;
    ck_assert_msg(n >= 4, "TRYAGAIN answered %d times", n);
    free(tries);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cluster_redirect");
    TCase *tc = tcase_create("redirect");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_moved_to_a_foreign_address_refused);
    tcase_add_test(tc, test_ask_to_a_foreign_address_refused);
    tcase_add_test(tc, test_tryagain_sent_again_within_the_timeout);
    tcase_add_test(tc, test_async_moved_to_a_foreign_address_refused);
    tcase_add_test(tc, test_async_ask_to_a_foreign_address_refused);
    tcase_add_test(tc, test_async_tryagain_sent_again);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
