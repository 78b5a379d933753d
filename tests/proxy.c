/* proxy.c: a TCP relay between the daemon and redis-server that can cut a connection
 * right after forwarding a chosen command, so that Redis runs it and its reply is lost:
 * the fault of a liveness drop or a network cut at the worst moment. One process, poll()
 * over every pair of sockets; it dies with the test (PR_SET_PDEATHSIG). */
#include "proxy.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 32
#define SERVER_GRACE_MS 300 /* the server side stays open this long, so Redis runs it */

typedef struct pair {
    int client, server;
    long long close_server_at; /* ms; 0 = relaying */
} pair;

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_target(int port) {
    struct sockaddr_in sa = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

static void relay(int lfd, int target_port, const char *cut_after, int cuts) {
    pair pairs[MAX_PAIRS];
    int npairs = 0;
    char buf[65536];
    for (;;) {
        struct pollfd pfd[1 + 2 * MAX_PAIRS];
        int n = 0, npolled = npairs;
        long long now = mono_ms();
        pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < npairs; i++) {
            pfd[n++] = (struct pollfd){pairs[i].client, POLLIN, 0};
            pfd[n++] = (struct pollfd){pairs[i].server, POLLIN, 0};
        }
        poll(pfd, (nfds_t)n, 50);
        /* Only the pairs that were polled, each with its own revents (pfd[1 + 2i] and
         * pfd[2 + 2i]); a pair accepted below waits for the next poll. Removals come after
         * the loop, so no pair is judged by another's revents. Reads never block. */
        for (int i = 0; i < npolled; i++) {
            pair *pr = &pairs[i];
            short cre = pfd[1 + 2 * i].revents, sre = pfd[2 + 2 * i].revents;
            int dead = 0;
            if (pr->close_server_at == 0 && (cre & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t got = recv(pr->client, buf, sizeof(buf), MSG_DONTWAIT);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                    dead = 1;
                } else if (got > 0) {
                    if (write(pr->server, buf, (size_t)got) != got) dead = 1;
                    if (cuts > 0 && cut_after &&
                        memmem(buf, (size_t)got, cut_after, strlen(cut_after))) {
                        cuts--;
                        close(pr->client); /* the reply will never reach the daemon */
                        pr->client = -1;
                        pr->close_server_at = now + SERVER_GRACE_MS;
                    }
                }
            }
            if (!dead && (sre & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t got = recv(pr->server, buf, sizeof(buf), MSG_DONTWAIT);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
                    dead = 1;
                else if (got > 0 && pr->client >= 0 && write(pr->client, buf, (size_t)got) != got)
                    dead = 1;
            }
            if (pr->close_server_at && now >= pr->close_server_at) dead = 1;
            if (dead) {
                if (pr->client >= 0) close(pr->client);
                close(pr->server);
                pr->server = -1; /* removed below */
            }
        }
        for (int i = 0; i < npairs; i++)
            if (pairs[i].server < 0) pairs[i--] = pairs[--npairs];
        if ((pfd[0].revents & POLLIN) && npairs < MAX_PAIRS) {
            int c = accept(lfd, NULL, NULL), s;
            if (c >= 0) {
                s = connect_target(target_port);
                if (s < 0)
                    close(c);
                else
                    pairs[npairs++] = (pair){c, s, 0};
            }
        }
    }
}

void th_proxy_start(th_proxy *p, int target_port, const char *cut_after, int cuts) {
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(lfd, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(lfd, 64), 0);
    getsockname(lfd, (struct sockaddr *)&sa, &len);
    p->port = ntohs(sa.sin_port);
    p->pid = fork();
    ck_assert_int_ge(p->pid, 0);
    if (p->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_IGN);
        relay(lfd, target_port, cut_after, cuts);
        _exit(0);
    }
    close(lfd);
}

void th_proxy_stop(th_proxy *p) {
    if (p->pid <= 0) return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}
