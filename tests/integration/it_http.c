/* it_http.c: the HTTP endpoint ([http] listen) of a real dtq-worker, as a hostile client
 * sees it, over raw sockets: only GET and HEAD, a bounded request head, a deadline per
 * connection (also for a client that sends a byte at a time), a cap on connections, and
 * the listen address forms. After each abuse the daemon must still be alive and answer. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http.h"

static th_redis R;
static redisContext *C;

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

/* Fills sa with the loopback address of `family` and port. */
static socklen_t loopback(int family, int port, struct sockaddr_storage *sa) {
    memset(sa, 0, sizeof(*sa));
    if (family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        s6->sin6_addr = in6addr_loopback;
        return sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return sizeof(*s4);
    }
}

/* A port of the loopback address that the kernel just handed out as free. */
static int free_port(int family) {
    struct sockaddr_storage sa;
    socklen_t len = loopback(family, 0, &sa);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), port;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, len), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                              : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    close(fd);
    return port;
}

static int tcp_connect(int family, int port) {
    struct sockaddr_storage sa;
    socklen_t len = loopback(family, port, &sa);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, len) == 0, "connect to port %d: %s", port,
                  strerror(errno));
    return fd;
}

/* Sends all of buf; 0, or -1 once the daemon has closed or reset the connection. */
static int send_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads until the daemon closes (EOF or reset): returns the bytes read (at most cap - 1
 * kept, NUL-terminated), or -1 when timeout_ms passes first. */
static int read_to_close(int fd, char *buf, size_t cap, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    size_t got = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        char chunk[4096];
        int64_t left = end - th_now_ms();
        ssize_t n;
        if (left <= 0 || poll(&p, 1, (int)left) == 0) return -1;
        n = recv(fd, chunk, sizeof(chunk), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* EOF, or ECONNRESET: closed either way */
        if (got + 1 < cap) {
            size_t keep = (size_t)n < cap - 1 - got ? (size_t)n : cap - 1 - got;
            memcpy(buf + got, chunk, keep);
            got += keep;
        }
    }
    buf[got] = '\0';
    return (int)got;
}

/* The status code of a response, 0 when there is none. */
static int status_of(const char *resp) {
    int code = 0;
    if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1) return 0;
    return code;
}

/* One request on a fresh connection: the status code (0: closed without an answer), the
 * whole response in resp. */
static int exchange(int family, int port, const char *req, size_t len, char *resp, size_t cap) {
    int fd = tcp_connect(family, port), n;
    *resp = '\0';
    if (send_all(fd, req, len) == 0) {
        n = read_to_close(fd, resp, cap, 10000);
        ck_assert_msg(n >= 0, "no answer and no close within 10 s to: %.60s", req);
    }
    close(fd);
    return status_of(resp);
}

static int get(int family, int port, const char *method, const char *path, char *resp, size_t cap) {
    char req[256];
    int len =
        snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                 method, path);
    return exchange(family, port, req, (size_t)len, resp, cap);
}

typedef struct probe {
    int family, port;
} probe;

static int healthz_ok(void *arg) {
    const probe *p = arg;
    char resp[1024];
    return get(p->family, p->port, "GET", "/healthz", resp, sizeof(resp)) == 200;
}

static void assert_serving(int family, int port) {
    probe p = {family, port};
    ck_assert_msg(th_wait_until(healthz_ok, &p, 5000), "GET /healthz is not answered 200");
}

/* Still running: signal 0 reaches it and it has not exited (not reaped here on purpose:
 * a dead daemon fails the test anyway). */
static void assert_alive(const th_daemon *d) {
    ck_assert_msg(kill(d->pid, 0) == 0 && waitpid(d->pid, NULL, WNOHANG) == 0,
                  "the daemon is gone (log %s)", d->log);
}

static void start(th_daemon *d, const char *id, const char *listen) {
    char ini[512];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\n[http]\nlisten = %s\n", id,
             listen);
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

static int start_local(th_daemon *d) {
    int port = free_port(AF_INET);
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    start(d, "w-http", listen);
    return port;
}

/* The sorted key names of the Redis database, as one string. */
static char *key_names(void) {
    redisReply *r = th_cmd(C, "EVAL %s 0",
                           "local k = redis.call('KEYS', '*') table.sort(k) "
                           "return table.concat(k, ' ')");
    char *s;
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    s = strdup(r->str);
    freeReplyObject(r);
    return s;
}

START_TEST(test_only_get_and_head) {
    static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
    static const char *const paths[] = {"/healthz", "/readyz", "/metrics"};
    th_daemon d;
    char resp[8192], *keys_before, *keys_after, *body;
    int port = start_local(&d);
    keys_before = key_names();
    for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
        for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
            char req[256];
            int len = snprintf(req, sizeof(req),
                               "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: "
                               "close\r\nContent-Length: 5\r\n\r\nhello",
                               methods[m], paths[p]);
            ck_assert_msg(exchange(AF_INET, port, req, (size_t)len, resp, sizeof(resp)) == 405,
                          "%s %s answered: %.80s", methods[m], paths[p], resp);
            ck_assert_msg(strstr(resp, "\r\nAllow: GET, HEAD\r\n") != NULL, "no Allow in: %s",
                          resp);
        }
    /* HEAD: the headers of GET (Content-Length of "ok\n"), no body. */
    ck_assert_int_eq(get(AF_INET, port, "HEAD", "/healthz", resp, sizeof(resp)), 200);
    ck_assert_msg(strcasestr(resp, "\r\nContent-Length: 3\r\n") != NULL, "%s", resp);
    body = strstr(resp, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    ck_assert_msg(body[4] == '\0', "HEAD answered a body: '%s'", body + 4);
    ck_assert_int_eq(get(AF_INET, port, "GET", "/healthz?probe=1", resp, sizeof(resp)), 200);
    ck_assert_ptr_nonnull(strstr(resp, "\r\n\r\nok\n"));
    ck_assert_int_eq(get(AF_INET, port, "GET", "/metrics", resp, sizeof(resp)), 200);
    ck_assert_ptr_nonnull(strstr(resp, "dtq_tasks_processed_total 0\n"));
    /* None of it wrote anything. */
    keys_after = key_names();
    ck_assert_str_eq(keys_after, keys_before);
    free(keys_before);
    free(keys_after);
    assert_alive(&d);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_oversized_head_refused) {
    th_daemon d;
    const size_t big = 100 * 1024;
    char resp[4096], *req = malloc(big + 128);
    int port = start_local(&d), len, code;
    len = snprintf(req, 128,
                   "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Big: ");
    memset(req + len, 'a', big);
    memcpy(req + len + big, "\r\n\r\n", 4);
    code = exchange(AF_INET, port, req, (size_t)len + big + 4, resp, sizeof(resp));
    free(req);
    /* Refused with an answer, or closed; anything but served. */
    ck_assert_msg(code == 0 || code == 400 || code == 413 || code == 431, "answered %d", code);
    assert_alive(&d);
    assert_serving(AF_INET, port);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_idle_connection_dropped) {
    th_daemon d;
    char buf[256];
    int port = start_local(&d), fd;
    int64_t t0, took;
    fd = tcp_connect(AF_INET, port);
    t0 = th_now_ms();
    ck_assert_msg(read_to_close(fd, buf, sizeof(buf), DTQ_HTTP_TIMEOUT_MS + 5000) == 0,
                  "a connection that sends nothing is still open after %d ms",
                  DTQ_HTTP_TIMEOUT_MS + 5000);
    took = th_now_ms() - t0;
    /* Dropped by the deadline, not at once. */
    ck_assert_msg(took >= DTQ_HTTP_TIMEOUT_MS / 2, "dropped after %lld ms", (long long)took);
    close(fd);
    assert_alive(&d);
    assert_serving(AF_INET, port);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* Each byte arrives well within any per-read timeout, so only a deadline for the whole
 * request ends this connection. */
START_TEST(test_byte_at_a_time_dropped) {
    static const char head[] =
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Slow: ";
    th_daemon d;
    char buf[256];
    int port = start_local(&d), fd;
    int64_t t0, took = -1, limit = DTQ_HTTP_TIMEOUT_MS + 5000;
    fd = tcp_connect(AF_INET, port);
    t0 = th_now_ms();
    for (size_t i = 0; th_now_ms() - t0 < limit; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        char c = i < sizeof(head) - 1 ? head[i] : 'a';
        /* A failed send (reset) or input (EOF) within 200 ms: the daemon has closed. */
        if (send_all(fd, &c, 1) != 0 || poll(&p, 1, 200) > 0) {
            took = th_now_ms() - t0;
            break;
        }
    }
    ck_assert_msg(took >= 0, "a request sent a byte at a time is still open after %lld ms",
                  (long long)limit);
    ck_assert_int_ge(read_to_close(fd, buf, sizeof(buf), 5000), 0);
    ck_assert_msg(status_of(buf) != 200, "the slow request was served: %s", buf);
    close(fd);
    assert_alive(&d);
    assert_serving(AF_INET, port);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A flood of idle connections (300, past the cap of 64) does not starve a health check: at
 * the cap a new connection takes the place of the oldest that sent no request, so GET
 * /healthz answers within a second, the oldest idle ones are closed and the newest stay. */
#define FLOOD 300
START_TEST(test_connection_cap) {
    th_daemon d;
    char resp[1024];
    int fds[FLOOD];
    int port = start_local(&d), code;
    for (int i = 0; i < FLOOD; i++) fds[i] = tcp_connect(AF_INET, port);
    {
        int64_t t0 = th_now_ms();
        code = get(AF_INET, port, "GET", "/healthz", resp, sizeof(resp));
        ck_assert_msg(code == 200, "with %d idle connections, GET /healthz answered %d", FLOOD,
                      code);
        ck_assert_int_lt(th_now_ms() - t0, 1000);
    }
    /* Accepted in order: the first ones gave their places (EOF), the last ones hold theirs. */
    for (int i = 0; i < FLOOD - DTQ_HTTP_MAX_CONNECTIONS; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        char c;
        ck_assert_msg(poll(&p, 1, 2000) == 1 && recv(fds[i], &c, 1, 0) <= 0,
                      "idle connection %d was not closed for a newer one", i);
    }
    for (int i = FLOOD - DTQ_HTTP_MAX_CONNECTIONS + 1; i < FLOOD; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        ck_assert_msg(poll(&p, 1, 0) == 0, "recent connection %d was closed", i);
    }
    assert_alive(&d);
    for (int i = 0; i < FLOOD; i++) close(fds[i]);
    assert_serving(AF_INET, port);
    /* Connections still open do not hold up a stop, and are freed (LeakSanitizer). The
     * answer to the GET after them shows they were accepted (accepts go in order). */
    for (int i = 0; i < 3; i++) fds[i] = tcp_connect(AF_INET, port);
    assert_serving(AF_INET, port);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    for (int i = 0; i < 3; i++) close(fds[i]);
}
END_TEST

/* ":port" is every IPv4 address (reached here on 127.0.0.1); "[::1]:port" is IPv6. */
START_TEST(test_listen_forms) {
    th_daemon d;
    char listen[64], resp[1024];
    int port = free_port(AF_INET);
    snprintf(listen, sizeof(listen), ":%d", port);
    start(&d, "w-any", listen);
    ck_assert_int_eq(get(AF_INET, port, "GET", "/healthz", resp, sizeof(resp)), 200);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    port = free_port(AF_INET6);
    snprintf(listen, sizeof(listen), "[::1]:%d", port);
    start(&d, "w-v6", listen);
    ck_assert_int_eq(get(AF_INET6, port, "GET", "/healthz", resp, sizeof(resp)), 200);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* DNS rebinding: a page of another site reaches the endpoint through a name of its own and
 * its browser sends that name as Host. /metrics answers only the listen address, localhost
 * and [http] allowed_hosts (dtq-web's rule); the probes say nothing and answer any Host. */
static int request_with_host(int port, const char *path, const char *host_lines, char *resp,
                             size_t cap) {
    char req[512];
    int len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n%sConnection: close\r\n\r\n", path,
                       host_lines);
    return exchange(AF_INET, port, req, (size_t)len, resp, cap);
}

START_TEST(test_host_check) {
    th_daemon d;
    char ini[512], resp[8192];
    int port = free_port(AF_INET);
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-host\nheartbeat_interval_s = 1\n[http]\nlisten = "
             "127.0.0.1:%d\nallowed_hosts = metrics.example\n",
             port);
    th_daemon_start(&d, &R, ini);
    th_daemon_wait_ready(C, "w-host", 10000);
    ck_assert_int_eq(
        request_with_host(port, "/metrics", "Host: evil.example\r\n", resp, sizeof(resp)), 421);
    ck_assert_msg(!strstr(resp, "dtq_"), "a refused Host read the metrics: %s", resp);
    ck_assert_int_eq(request_with_host(port, "http://evil.example/metrics", "Host: localhost\r\n",
                                       resp, sizeof(resp)),
                     421);
    ck_assert_int_eq(request_with_host(port, "/metrics", "Host: localhost\r\nHost: localhost\r\n",
                                       resp, sizeof(resp)),
                     400);
    ck_assert_int_eq(request_with_host(port, "/metrics", "", resp, sizeof(resp)), 400);
    ck_assert_int_eq(
        request_with_host(port, "/healthz", "Host: evil.example\r\n", resp, sizeof(resp)), 200);
    {
        char host[64];
        snprintf(host, sizeof(host), "Host: 127.0.0.1:%d\r\n", port);
        ck_assert_int_eq(request_with_host(port, "/metrics", host, resp, sizeof(resp)), 200);
    }
    ck_assert_int_eq(
        request_with_host(port, "/metrics", "host:  Metrics.Example:9999 \r\n", resp, sizeof(resp)),
        200);
    ck_assert_ptr_nonnull(strstr(resp, "dtq_tasks_processed_total"));
    {
        const char *req = "GET /metrics HTTP/1.0\r\n\r\n";
        ck_assert_int_eq(exchange(AF_INET, port, req, strlen(req), resp, sizeof(resp)), 200);
    }
    assert_alive(&d);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("limits");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_only_get_and_head);
    tcase_add_test(tc, test_oversized_head_refused);
    tcase_add_test(tc, test_idle_connection_dropped);
    tcase_add_test(tc, test_byte_at_a_time_dropped);
    tcase_add_test(tc, test_connection_cap);
    tcase_add_test(tc, test_listen_forms);
    tcase_add_test(tc, test_host_check);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
