/* proxy.c: a TCP relay between the daemon and redis-server that can cut a connection
 * right after forwarding a chosen command, so that Redis runs it and its reply is lost:
 * the fault of a liveness drop or a network cut at the worst moment. One process, poll()
 * over every pair of sockets and its command pipe; it dies with the test
 * (PR_SET_PDEATHSIG) or when the pipe closes. Only th_proxy_start uses Check. */
#include "proxy.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
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

/* The command pipe: "c <marker>\n" arms one cut after marker (replacing an armed one),
 * "a\n" cuts every connection now. */
static int read_commands(int cmdfd, char *line, size_t *linelen, size_t cap, char *armed,
                         size_t armedlen, int *cuts) {
    ssize_t got = read(cmdfd, line + *linelen, cap - 1 - *linelen);
    int cut_all = 0;
    char *nl;
    if (got <= 0) _exit(0); /* the test, or the program, is done with the relay */
    *linelen += (size_t)got;
    line[*linelen] = '\0';
    while ((nl = strchr(line, '\n'))) {
        *nl = '\0';
        if (line[0] == 'a') {
            cut_all = 1;
        } else if (line[0] == 'c' && line[1] == ' ') {
            snprintf(armed, armedlen, "%.*s", (int)armedlen - 1, line + 2);
            *cuts = 1;
        }
        *linelen -= (size_t)(nl + 1 - line);
        memmove(line, nl + 1, *linelen + 1);
    }
    return cut_all;
}

static void relay(int lfd, int cmdfd, int target_port, const char *cut_after, int cuts) {
    pair pairs[MAX_PAIRS];
    int npairs = 0;
    char buf[65536], armed[128], line[256];
    size_t linelen = 0;
    snprintf(armed, sizeof(armed), "%s", cut_after ? cut_after : "");
    for (;;) {
        struct pollfd pfd[2 + 2 * MAX_PAIRS];
        int n = 0, npolled = npairs, cut_all = 0;
        long long now;
        pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
        pfd[n++] = (struct pollfd){cmdfd, POLLIN, 0};
        for (int i = 0; i < npairs; i++) {
            pfd[n++] = (struct pollfd){pairs[i].client, POLLIN, 0};
            pfd[n++] = (struct pollfd){pairs[i].server, POLLIN, 0};
        }
        poll(pfd, (nfds_t)n, 50);
        now = mono_ms();
        if (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))
            cut_all =
                read_commands(cmdfd, line, &linelen, sizeof(line), armed, sizeof(armed), &cuts);
        /* Only the pairs that were polled, each with its own revents (pfd[2 + 2i] and
         * pfd[3 + 2i]); a pair accepted below waits for the next poll. Removals come after
         * the loop, so no pair is judged by another's revents. Reads never block. */
        for (int i = 0; i < npolled; i++) {
            pair *pr = &pairs[i];
            short cre = pfd[2 + 2 * i].revents, sre = pfd[3 + 2 * i].revents;
            int dead = cut_all;
            if (!dead && pr->close_server_at == 0 && (cre & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t got = recv(pr->client, buf, sizeof(buf), MSG_DONTWAIT);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                    dead = 1;
                } else if (got > 0) {
                    if (write(pr->server, buf, (size_t)got) != got) dead = 1;
                    if (cuts > 0 && armed[0] && memmem(buf, (size_t)got, armed, strlen(armed))) {
                        if (--cuts == 0) armed[0] = '\0';
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
        if (pfd[0].revents & POLLIN) { /* accepted even when full (then closed): never stuck */
            int c = accept(lfd, NULL, NULL), s;
            if (c >= 0) {
                s = npairs < MAX_PAIRS ? connect_target(target_port) : -1;
                if (s < 0)
                    close(c);
                else
                    pairs[npairs++] = (pair){c, s, 0};
            }
        }
    }
}

int th_proxy_open(th_proxy *p, int target_port, const char *cut_after, int cuts) {
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fds[2];
    p->pid = 0;
    p->cmd_fd = -1;
    if (lfd < 0) return -1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) != 0 || pipe(fds) != 0) {
        close(lfd);
        return -1;
    }
    p->port = ntohs(sa.sin_port);
    p->pid = fork();
    if (p->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_IGN);
        signal(SIGINT, SIG_IGN); /* stopped by its owner, not by a terminal's ^C */
        close(fds[1]);
        relay(lfd, fds[0], target_port, cut_after, cuts);
        _exit(0);
    }
    close(lfd);
    close(fds[0]);
    if (p->pid < 0) {
        close(fds[1]);
        p->pid = 0;
        return -1;
    }
    p->cmd_fd = fds[1];
    fcntl(p->cmd_fd, F_SETFD, FD_CLOEXEC); /* the daemons must not hold the pipe open */
    return 0;
}

void th_proxy_start(th_proxy *p, int target_port, const char *cut_after, int cuts) {
    ck_assert_msg(th_proxy_open(p, target_port, cut_after, cuts) == 0, "proxy: %s",
                  strerror(errno));
}

static int proxy_command(th_proxy *p, const char *line) {
    size_t n = strlen(line);
    return p->cmd_fd > 0 && write(p->cmd_fd, line, n) == (ssize_t)n ? 0 : -1;
}

int th_proxy_arm(th_proxy *p, const char *marker) {
    char line[140];
    snprintf(line, sizeof(line), "c %.127s\n", marker);
    return proxy_command(p, line);
}

int th_proxy_cut_all(th_proxy *p) {
    return proxy_command(p, "a\n");
}

void th_proxy_stop(th_proxy *p) {
    if (p->cmd_fd > 0) close(p->cmd_fd); /* 0: a zeroed th_proxy that never started */
    p->cmd_fd = -1;
    if (p->pid <= 0) return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}
