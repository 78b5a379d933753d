/* rsync.c: see rsync.h. The socket stays non-blocking; every wait is a poll() against a
 * deadline (the connect timeout while connecting, none once connected: a command waits
 * for its reply, a subscriber for ever). */
#include "rsync.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redis_proto.h"
#include "tls.h"
#include "util.h"

#define NO_DEADLINE (-1)

/* One connection to one node. */
typedef struct rlink {
    int fd;
    SSL *ssl; /* rediss:// */
    redisReader *reader;
    char where[300]; /* the socket path or host:port, for messages */
} rlink;

struct dtq_rsync {
    rlink link; /* the one node (a cluster router would keep one per node) */
};

/* Where link_open failed. */
enum stage { ST_CONNECT, ST_TLS_SETUP, ST_TLS };

/* Waits until fd is ready for `events` or the deadline passes (NO_DEADLINE: never); 0 on
 * time out. */
static int wait_fd(int fd, short events, int64_t deadline_ms) {
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int64_t left = deadline_ms == NO_DEADLINE ? -1 : deadline_ms - dtq_monotonic_ms();
        int r;
        if (deadline_ms != NO_DEADLINE && left <= 0) return 0;
        r = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (r > 0) return 1;
        if (r == 0) return 0;
        if (errno != EINTR) return 1; /* the next call reports the error */
    }
}

static void link_close(rlink *l) {
    if (l->ssl) {
        SSL_shutdown(l->ssl); /* close_notify; the answer is not awaited */
        SSL_free(l->ssl);
        l->ssl = NULL;
    }
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    if (l->reader) redisReaderFree(l->reader);
    l->reader = NULL;
}

/* The TLS handshake within the deadline, then the server's certificate checked (the
 * handshake already fails on a certificate that does not verify). */
static int tls_handshake(rlink *l, const char *host, const dtq_tls *tls, int64_t deadline,
                         enum stage *stage, char *why, size_t whylen) {
    *stage = ST_TLS_SETUP;
    l->ssl = dtq_tls_ssl_new(tls, host, why, whylen);
    if (!l->ssl) return DTQ_ERR;
    *stage = ST_TLS;
    SSL_set_fd(l->ssl, l->fd);
    for (;;) {
        int r, e;
        ERR_clear_error();
        errno = 0;
        r = SSL_connect(l->ssl);
        if (r == 1) break;
        e = SSL_get_error(l->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (!wait_fd(l->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
                snprintf(why, whylen, "timed out");
                return DTQ_ERR;
            }
            continue;
        }
        if (e == SSL_ERROR_SYSCALL && !ERR_peek_error())
            snprintf(why, whylen, "%s", errno ? strerror(errno) : "Server closed the connection");
        else
            dtq_tls_describe(l->ssl, 0, "TLS error", why, whylen);
        return DTQ_ERR;
    }
    return dtq_tls_peer_ok(tls, l->ssl, why, whylen);
}

/* Socket (and TLS) to u's address within the deadline. DTQ_ERR with the stage and the bare
 * reason in why. */
static int link_open(rlink *l, const dtq_redis_url *u, const dtq_tls *tls, int64_t deadline,
                     enum stage *stage, char *why, size_t whylen) {
    struct sockaddr_storage ss;
    socklen_t sslen = 0, len = sizeof(int);
    int one = 1, soerr = 0;
    memset(l, 0, sizeof(*l));
    l->fd = -1;
    dtq_redis_url_where(u, l->where, sizeof(l->where));
    *stage = ST_CONNECT;
    if (dtq_redis_url_address(u, &ss, &sslen, why, whylen) != DTQ_OK) return DTQ_ERR;
    l->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return DTQ_ERR;
    }
    if (connect(l->fd, (struct sockaddr *)&ss, sslen) != 0) {
        if (errno != EINPROGRESS) {
            snprintf(why, whylen, "%s", strerror(errno));
            return DTQ_ERR;
        }
        if (!wait_fd(l->fd, POLLOUT, deadline)) {
            snprintf(why, whylen, "Connection timed out");
            return DTQ_ERR;
        }
        if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
        if (soerr) {
            snprintf(why, whylen, "%s", strerror(soerr));
            return DTQ_ERR;
        }
    }
    if (!u->is_unix) setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (u->tls && tls_handshake(l, u->host, tls, deadline, stage, why, whylen) != DTQ_OK)
        return DTQ_ERR;
    l->reader = redisReaderCreate();
    if (!l->reader) abort();
    return DTQ_OK;
}

/* Why a read or write of n (<= 0) failed. */
static void io_failure(const rlink *l, const char *op, int n, char *why, size_t whylen) {
    char reason[256];
    if (l->ssl) {
        int e = SSL_get_error(l->ssl, n);
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && n == 0 && !errno))
            snprintf(reason, sizeof(reason), "Server closed the connection");
        else if (e == SSL_ERROR_SYSCALL && errno)
            snprintf(reason, sizeof(reason), "%s", strerror(errno));
        else
            dtq_tls_describe(l->ssl, 0, "TLS error", reason, sizeof(reason));
    } else {
        snprintf(reason, sizeof(reason), "%s",
                 n == 0 ? "Server closed the connection" : strerror(errno));
    }
    snprintf(why, whylen, "%s failed: %s", op, reason);
}

/* One I/O call: n > 0 bytes done, else 0 with *want set to POLLIN/POLLOUT to wait, or 0
 * with *want 0 for a failure (why filled). */
static int link_io(rlink *l, int writing, char *buf, size_t len, short *want, char *why,
                   size_t whylen) {
    int n;
    *want = 0;
    for (;;) {
        errno = 0;
        if (l->ssl) {
            n = writing ? SSL_write(l->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len)
                        : SSL_read(l->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
            if (n > 0) return n;
            {
                int e = SSL_get_error(l->ssl, n);
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                    *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
                    return 0;
                }
            }
        } else {
            ssize_t r = writing ? send(l->fd, buf, len, MSG_NOSIGNAL) : recv(l->fd, buf, len, 0);
            if (r > 0) return r > INT32_MAX ? INT32_MAX : (int)r;
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                *want = writing ? POLLOUT : POLLIN;
                return 0;
            }
            n = (int)r;
        }
        io_failure(l, writing ? "write" : "read", n < 0 ? -1 : 0, why, whylen);
        return 0;
    }
}

static int link_write(rlink *l, const char *cmd, size_t len, int64_t deadline, char *why,
                      size_t whylen) {
    size_t off = 0;
    while (off < len) {
        short want;
        int n = link_io(l, 1, (char *)cmd + off, len - off, &want, why, whylen);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (!want) return DTQ_ERR;
        if (!wait_fd(l->fd, want, deadline)) {
            snprintf(why, whylen, "write failed: no answer within connect_timeout_ms");
            return DTQ_ERR;
        }
    }
    return DTQ_OK;
}

/* The next reply, reading as much as it takes by the deadline. NULL with why. */
static redisReply *link_read(rlink *l, int64_t deadline, char *why, size_t whylen) {
    char buf[16384];
    for (;;) {
        void *reply = NULL;
        short want;
        int n;
        if (redisReaderGetReply(l->reader, &reply) != REDIS_OK) {
            snprintf(why, whylen, "protocol error: %s", l->reader->errstr);
            return NULL;
        }
        if (reply) return reply;
        n = link_io(l, 0, buf, sizeof(buf), &want, why, whylen);
        if (n > 0) {
            redisReaderFeed(l->reader, buf, (size_t)n);
            continue;
        }
        if (!want) return NULL;
        if (!wait_fd(l->fd, want, deadline)) {
            snprintf(why, whylen, "read failed: no answer within connect_timeout_ms");
            return NULL;
        }
    }
}

static int link_send(rlink *l, int argc, const char **argv, const size_t *lens, int64_t deadline,
                     char *why, size_t whylen) {
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens), r;
    if (len < 0) {
        snprintf(why, whylen, "cannot format the command");
        return DTQ_ERR;
    }
    r = link_write(l, cmd, (size_t)len, deadline, why, whylen);
    redisFreeCommand(cmd);
    return r;
}

/* The handshake of redis_proto.c, pipelined, each reply checked in order. DTQ_ERR with the
 * failed step's kind and result in *kind / *res (res 0: no reply) and why. */
static int link_handshake(rlink *l, const dtq_redis_url *u, const dtq_hs_opts *o, int64_t deadline,
                          dtq_hs_kind *kind, int *res, char *why, size_t whylen) {
    dtq_handshake h;
    dtq_handshake_plan(&h, u, o);
    *res = 0;
    for (int i = 0; i < h.n; i++) {
        *kind = h.steps[i].kind;
        if (link_send(l, h.steps[i].argc, h.steps[i].argv, NULL, deadline, why, whylen) != DTQ_OK)
            return DTQ_ERR;
    }
    for (int i = 0; i < h.n; i++) {
        redisReply *r = link_read(l, deadline, why, whylen);
        *kind = h.steps[i].kind;
        if (!r) return DTQ_ERR;
        *res = dtq_handshake_check(h.steps[i].kind, r, why, whylen);
        freeReplyObject(r);
        if (*res != DTQ_HS_OK) return DTQ_ERR;
    }
    return DTQ_OK;
}

static void note(const dtq_rsync_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void note(const dtq_rsync_opts *o, const char *fmt, ...) {
    char line[1200];
    va_list ap;
    if (!o->note) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    o->note(line, o->note_arg);
}

/* Asks one sentinel; DTQ_SENTINEL_ADDR with *host and *port, else why. */
static int ask_sentinel(const dtq_redis_url *url, int i, const dtq_rsync_opts *o, char **host,
                        int *port, char *why, size_t whylen) {
    dtq_redis_url su;
    dtq_hs_opts hs = {0, NULL, 0};
    int64_t deadline = dtq_monotonic_ms() + o->connect_timeout_ms;
    const char *argv[DTQ_SENTINEL_QUESTION_ARGC];
    char reason[600];
    enum stage stage;
    dtq_hs_kind kind;
    int res, a = DTQ_SENTINEL_BAD;
    rlink l;
    redisReply *r;
    memset(&su, 0, sizeof(su));
    su.tls = url->tls;
    su.host = url->sentinels[i].host;
    su.port = url->sentinels[i].port;
    su.user = o->sentinel_user && *o->sentinel_user ? (char *)o->sentinel_user : NULL;
    su.password =
        o->sentinel_password && *o->sentinel_password ? (char *)o->sentinel_password : NULL;
    if (link_open(&l, &su, o->tls, deadline, &stage, reason, sizeof(reason)) != DTQ_OK) {
        snprintf(why, whylen, "%s%s",
                 stage == ST_TLS_SETUP ? "TLS setup failed: "
                 : stage == ST_TLS     ? "TLS handshake failed: "
                                       : "",
                 reason);
        link_close(&l);
        return DTQ_SENTINEL_BAD;
    }
    if (link_handshake(&l, &su, &hs, deadline, &kind, &res, reason, sizeof(reason)) != DTQ_OK) {
        snprintf(why, whylen, "%s%s%s", res ? dtq_handshake_step_name(kind) : "", res ? ": " : "",
                 reason);
        link_close(&l);
        return DTQ_SENTINEL_BAD;
    }
    dtq_sentinel_question(url->master_name, argv);
    r = link_send(&l, DTQ_SENTINEL_QUESTION_ARGC, argv, NULL, deadline, why, whylen) == DTQ_OK
            ? link_read(&l, deadline, why, whylen)
            : NULL;
    if (r) {
        a = dtq_sentinel_answer(r, host, port, reason, sizeof(reason));
        if (a == DTQ_SENTINEL_UNKNOWN)
            snprintf(why, whylen, "does not know master %s", url->master_name);
        else if (a == DTQ_SENTINEL_BAD)
            snprintf(why, whylen, "unexpected answer: %s", reason);
        freeReplyObject(r);
    }
    link_close(&l);
    return a;
}

/* A sentinel URL: the master's address into out (a copy of url), or why. */
static int sentinel_lookup(const dtq_redis_url *url, const dtq_rsync_opts *o, dtq_redis_url *out,
                           char *why, size_t whylen) {
    int nil = 0;
    for (int i = 0; i < url->nsentinels; i++) {
        char reason[700], where[300], *host = NULL;
        int port, a = ask_sentinel(url, i, o, &host, &port, reason, sizeof(reason));
        if (a == DTQ_SENTINEL_ADDR) {
            dtq_redis_url_copy(out, url);
            free(out->host);
            out->host = host;
            out->port = port;
            return DTQ_OK;
        }
        nil += a == DTQ_SENTINEL_UNKNOWN;
        note(o, "sentinel %s: %s%s",
             dtq_redis_hostport(where, sizeof(where), url->sentinels[i].host,
                                url->sentinels[i].port),
             reason, i + 1 < url->nsentinels ? "; asking the next" : "");
    }
    if (nil)
        snprintf(why, whylen, "no sentinel knows master %s", url->master_name);
    else
        snprintf(why, whylen, "none of the %d sentinel(s) answered for master %s", url->nsentinels,
                 url->master_name);
    return DTQ_ERR;
}

dtq_rsync *dtq_rsync_connect(const dtq_redis_url *url, const dtq_rsync_opts *o, char *why,
                             size_t whylen) {
    dtq_redis_url at;
    dtq_hs_opts hs = {url->sentinel, o->client_name, 0};
    dtq_rsync *c;
    char reason[600];
    enum stage stage;
    dtq_hs_kind kind;
    int res;
    int64_t deadline;
    if (url->sentinel) {
        if (sentinel_lookup(url, o, &at, why, whylen) != DTQ_OK) return NULL;
    } else {
        dtq_redis_url_copy(&at, url);
    }
    c = dtq_xcalloc(1, sizeof(*c));
    deadline = dtq_monotonic_ms() + o->connect_timeout_ms;
    if (link_open(&c->link, &at, o->tls, deadline, &stage, reason, sizeof(reason)) != DTQ_OK) {
        if (stage == ST_TLS_SETUP)
            snprintf(why, whylen, "TLS setup for Redis at %s failed: %s", c->link.where, reason);
        else if (stage == ST_TLS)
            snprintf(why, whylen, "TLS handshake with Redis at %s failed: %s", c->link.where,
                     reason);
        else
            snprintf(why, whylen, "cannot connect to Redis at %s: %s", c->link.where, reason);
        goto fail;
    }
    if (link_handshake(&c->link, &at, &hs, deadline, &kind, &res, reason, sizeof(reason)) !=
        DTQ_OK) {
        if (res == DTQ_HS_WRONG && kind == DTQ_HS_ROLE)
            snprintf(why, whylen,
                     "Redis at %s, named master %s by the sentinels, is %s; a failover may be "
                     "under way",
                     c->link.where, at.master_name, reason);
        else if (res)
            snprintf(why, whylen, "redis %s: %s", dtq_handshake_step_name(kind), reason);
        else
            snprintf(why, whylen, "redis at %s: %s", c->link.where, reason);
        goto fail;
    }
    dtq_redis_url_deinit(&at);
    return c;
fail:
    dtq_redis_url_deinit(&at);
    dtq_rsync_close(c);
    return NULL;
}

redisReply *dtq_rsync_command(dtq_rsync *c, int argc, const char **argv, const size_t *lens,
                              char *why, size_t whylen) {
    if (link_send(&c->link, argc, argv, lens, NO_DEADLINE, why, whylen) != DTQ_OK) return NULL;
    return link_read(&c->link, NO_DEADLINE, why, whylen);
}

redisReply *dtq_rsync_read(dtq_rsync *c, char *why, size_t whylen) {
    return link_read(&c->link, NO_DEADLINE, why, whylen);
}

const char *dtq_rsync_where(const dtq_rsync *c) {
    return c->link.where;
}

void dtq_rsync_close(dtq_rsync *c) {
    if (!c) return;
    link_close(&c->link);
    free(c);
}
