/* it_cluster_redirect: a cluster node's redirection is followed only to a node of the
 * cluster's own slot map (issue 27.7); TRYAGAIN is sent again within the timeout (issue
 * 27.11). A fake node gives the map (every slot its own) and
 * answers every other command with MOVED (or ASK) to another port of this machine, where a
 * listener writes down any connection it gets; dtqctl over redis-cluster://, with a
 * password in the URL, must refuse the redirection, say why, and never connect there (so no
 * AUTH with the password reaches it). No redis-server: the servers are a forked child. */
#include <check.h>
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
            char buf[4096], out[160];
            ssize_t r;
            int len;
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            r = read(p[i].fd, buf, sizeof(buf) - 1);
            if (r <= 0) {
                close(p[i].fd);
                p[i--] = p[--n];
                continue;
            }
            buf[r] = '\0';
            if (strstr(buf, "SLOTS"))
                len = snprintf(out, sizeof(out),
                               "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
                               node_port);
            else if (strstr(buf, "AUTH") || strstr(buf, "SELECT") || strstr(buf, "CLIENT"))
                len = snprintf(out, sizeof(out), "+OK\r\n");
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
            if (write(p[i].fd, out, (size_t)len) < 0) continue;
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

int main(void) {
    Suite *s = suite_create("cluster_redirect");
    TCase *tc = tcase_create("redirect");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_moved_to_a_foreign_address_refused);
    tcase_add_test(tc, test_ask_to_a_foreign_address_refused);
    tcase_add_test(tc, test_tryagain_sent_again_within_the_timeout);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
