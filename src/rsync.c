/* rsync.c: see rsync.h. The socket stays non-blocking; every wait is a poll() against a
 * deadline (the connect timeout while connecting, the reply timeout for a command once
 * connected; none for a subscriber, which waits for ever). */
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

#include "cluster.h"
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
    int timed_out;   /* its last failure was a deadline passed (no answer in time) */
} rlink;

/* A node of a cluster, with its link while open (fd -1 otherwise). */
typedef struct cnode {
    char *host;
    int port;
    rlink link;
} cnode;

struct dtq_rsync {
    rlink link; /* the one node (not a cluster) */
    /* a cluster URL: the nodes known (the seeds, then every node a map or a redirection
     * named), the slot map, and the node of the last command */
    int cluster;
    dtq_redis_url url; /* credentials and tls of every node */
    int64_t connect_timeout_ms;
    int64_t reply_timeout_ms; /* a command's limit, write to last byte of reply; 0: none */
    int timed_out;            /* the last command failed for want of an answer in time */
    struct dtq_tls *tls;      /* a reference */
    char *client_name;
    cnode *nodes;
    int nnodes;
    dtq_cluster_map *map;
    int last;
    dtq_rsync_cluster_stats stats;
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
                l->timed_out = 1;
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
            l->timed_out = 1;
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
            l->timed_out = 1;
            snprintf(why, whylen, "write failed: no answer in time");
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
            l->timed_out = 1;
            snprintf(why, whylen, "read failed: no answer in time");
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
        if (l.timed_out && o->timed_out) *o->timed_out = 1;
        snprintf(why, whylen, "%s%s",
                 stage == ST_TLS_SETUP ? "TLS setup failed: "
                 : stage == ST_TLS     ? "TLS handshake failed: "
                                       : "",
                 reason);
        link_close(&l);
        return DTQ_SENTINEL_BAD;
    }
    if (link_handshake(&l, &su, &hs, deadline, &kind, &res, reason, sizeof(reason)) != DTQ_OK) {
        if (l.timed_out && o->timed_out) *o->timed_out = 1;
        snprintf(why, whylen, "%s%s%s", res ? dtq_handshake_step_name(kind) : "", res ? ": " : "",
                 reason);
        link_close(&l);
        return DTQ_SENTINEL_BAD;
    }
    dtq_sentinel_question(url->master_name, argv);
    r = link_send(&l, DTQ_SENTINEL_QUESTION_ARGC, argv, NULL, deadline, why, whylen) == DTQ_OK
            ? link_read(&l, deadline, why, whylen)
            : NULL;
    if (!r && l.timed_out && o->timed_out) *o->timed_out = 1;
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

/* ----------------------------------------------------------------- a cluster */

/* The index of host:port among the known nodes, added (closed) when new. */
static int node_add(dtq_rsync *c, const char *host, int port) {
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && !strcmp(c->nodes[i].host, host)) return i;
    c->nodes = dtq_xrealloc(c->nodes, sizeof(*c->nodes) * (size_t)(c->nnodes + 1));
    memset(&c->nodes[c->nnodes], 0, sizeof(*c->nodes));
    c->nodes[c->nnodes].host = dtq_xstrdup(host);
    c->nodes[c->nnodes].port = port;
    c->nodes[c->nnodes].link.fd = -1;
    dtq_redis_hostport(c->nodes[c->nnodes].link.where, sizeof(c->nodes[0].link.where), host, port);
    return c->nnodes++;
}

/* An idle link the server has closed (EOF, an error, or anything readable: nothing comes
 * unasked on a connection that is not subscribed) is closed here, before a command is
 * written to it: a node restarted or killed since the last command is reconnected to, or
 * found down, with nothing sent. */
static void node_check_idle(cnode *n) {
    struct pollfd p = {n->link.fd, POLLIN, 0};
    if (n->link.fd < 0) return;
    if (n->link.ssl && SSL_pending(n->link.ssl) > 0) {
        link_close(&n->link);
        return;
    }
    if (poll(&p, 1, 0) > 0) link_close(&n->link);
}

/* Opens node i's link (connect, TLS, AUTH, CLIENT SETNAME) if it is not open. */
static int node_open(dtq_rsync *c, int i, char *why, size_t whylen) {
    cnode *n = &c->nodes[i];
    dtq_redis_url u;
    dtq_hs_opts hs = {0, c->client_name, 0};
    char reason[600];
    enum stage stage;
    dtq_hs_kind kind;
    int res;
    int64_t deadline = dtq_monotonic_ms() + c->connect_timeout_ms;
    node_check_idle(n);
    if (n->link.fd >= 0) return DTQ_OK;
    memset(&u, 0, sizeof(u));
    u.tls = c->url.tls;
    u.host = n->host;
    u.port = n->port;
    u.user = c->url.user;
    u.password = c->url.password;
    c->stats.connects++;
    if (link_open(&n->link, &u, c->tls, deadline, &stage, reason, sizeof(reason)) != DTQ_OK) {
        c->timed_out = n->link.timed_out;
        snprintf(why, whylen, "%s Redis at %s%s %s",
                 stage == ST_TLS_SETUP ? "TLS setup for"
                 : stage == ST_TLS     ? "TLS handshake with"
                                       : "cannot connect to",
                 n->link.where, stage == ST_CONNECT ? ":" : " failed:", reason);
        link_close(&n->link);
        return DTQ_ERR;
    }
    if (link_handshake(&n->link, &u, &hs, deadline, &kind, &res, reason, sizeof(reason)) !=
        DTQ_OK) {
        c->timed_out = n->link.timed_out;
        if (res)
            snprintf(why, whylen, "redis %s at %s: %s", dtq_handshake_step_name(kind),
                     n->link.where, reason);
        else
            snprintf(why, whylen, "redis at %s: %s", n->link.where, reason);
        link_close(&n->link);
        return DTQ_ERR;
    }
    return DTQ_OK;
}

/* CLUSTER SLOTS on node i (opened if need be) becomes the map. DTQ_ERR with why; a reply
 * that is not a map (cluster support disabled) sets *refused. */
static int map_from_node(dtq_rsync *c, int i, int *refused, char *why, size_t whylen) {
    static const char *argv[] = {"CLUSTER", "SLOTS"};
    char reason[600];
    redisReply *r;
    dtq_cluster_map *m;
    int64_t deadline;
    *refused = 0;
    if (node_open(c, i, why, whylen) != DTQ_OK) return DTQ_ERR;
    deadline = dtq_monotonic_ms() + c->connect_timeout_ms;
    r = link_send(&c->nodes[i].link, 2, argv, NULL, deadline, reason, sizeof(reason)) == DTQ_OK
            ? link_read(&c->nodes[i].link, deadline, reason, sizeof(reason))
            : NULL;
    if (!r) {
        c->timed_out = c->nodes[i].link.timed_out;
        snprintf(why, whylen, "redis at %s: %.300s", c->nodes[i].link.where, reason);
        link_close(&c->nodes[i].link);
        return DTQ_ERR;
    }
    m = dtq_cluster_map_from_slots(r, c->nodes[i].host, reason, sizeof(reason));
    freeReplyObject(r);
    if (!m) {
        *refused = 1;
        snprintf(why, whylen, "Redis at %s gave no slot map (%.300s): is it a cluster node?",
                 c->nodes[i].link.where, reason);
        return DTQ_ERR;
    }
    if (!dtq_cluster_map_covered(m)) {
        dtq_cluster_map_free(m);
        snprintf(why, whylen, "Redis at %s: no slot of the cluster is assigned yet",
                 c->nodes[i].link.where);
        return DTQ_ERR;
    }
    dtq_cluster_map_free(c->map);
    c->map = m;
    c->stats.refreshes++;
    for (int k = 0; k < m->nnodes; k++) node_add(c, m->nodes[k].host, m->nodes[k].port);
    return DTQ_OK;
}

/* A new map from any node but `skip` (-1: none), those with an open link first. The old
 * map stays when none answers. */
static int refresh_map(dtq_rsync *c, int skip, char *why, size_t whylen) {
    char reason[700] = "no other node known";
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->nnodes; i++) {
            int refused;
            if (i == skip || (c->nodes[i].link.fd >= 0) != (pass == 0)) continue;
            if (map_from_node(c, i, &refused, reason, sizeof(reason)) == DTQ_OK) return DTQ_OK;
        }
    snprintf(why, whylen, "cannot refresh the cluster's slot map: %s", reason);
    return DTQ_ERR;
}

static int node_open_up(void *arg, int map_node);

/* The node for slot (-1: keyless: cluster.c's rule, dtq_cluster_keyless_node, with the node
 * of the previous command); -1 when the map has no primary for it. */
static int node_for(dtq_rsync *c, int slot) {
    const dtq_redis_endpoint *e = NULL;
    if (!c->map) return -1;
    if (slot < 0) {
        int last = c->last >= 0 ? dtq_cluster_map_find(c->map, c->nodes[c->last].host,
                                                       c->nodes[c->last].port)
                                : -1,
            k = dtq_cluster_keyless_node(c->map, last, node_open_up, c);
        if (k >= 0) e = &c->map->nodes[k];
    } else {
        e = dtq_cluster_map_primary(c->map, (uint16_t)slot);
    }
    return e ? node_add(c, e->host, e->port) : -1;
}

/* A node of the map "up" for the keyless rule: its link is open. */
static int node_open_up(void *arg, int map_node) {
    dtq_rsync *c = arg;
    const dtq_redis_endpoint *e = &c->map->nodes[map_node];
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == e->port && !strcmp(c->nodes[i].host, e->host))
            return c->nodes[i].link.fd >= 0;
    return 0;
}

/* A command's deadline: reply_timeout_ms from now (none when 0). */
static int64_t reply_deadline(const dtq_rsync *c) {
    return c->reply_timeout_ms > 0 ? dtq_monotonic_ms() + c->reply_timeout_ms : NO_DEADLINE;
}

/* One command on node i (ASKING first when asking); *sent once the command may have left. */
static redisReply *node_call(dtq_rsync *c, int i, int asking, int argc, const char **argv,
                             const size_t *lens, int *sent, char *why, size_t whylen) {
    static const char *ask[] = {"ASKING"};
    char reason[600];
    rlink *l;
    redisReply *r;
    int64_t deadline;
    *sent = 0;
    if (node_open(c, i, why, whylen) != DTQ_OK) return NULL;
    l = &c->nodes[i].link;
    deadline = reply_deadline(c);
    if (asking && link_send(l, 1, ask, NULL, deadline, reason, sizeof(reason)) != DTQ_OK) goto fail;
    *sent = 1;
    if (link_send(l, argc, argv, lens, deadline, reason, sizeof(reason)) != DTQ_OK) goto fail;
    if (asking) {
        r = link_read(l, deadline, reason, sizeof(reason)); /* +OK */
        if (!r) goto fail;
        freeReplyObject(r);
    }
    r = link_read(l, deadline, reason, sizeof(reason));
    if (r) return r;
fail:
    c->timed_out = l->timed_out;
    snprintf(why, whylen, "cluster node %s: %s", l->where, reason);
    return NULL;
}

/* Sends a command to the node of slot (-1: keyless) and does what cluster.c's
 * dtq_route_decide says of each reply (the redirections, TRYAGAIN, the cap, the map
 * reads; cluster.h): this router only carries it out, the map read at once where the
 * decision asks for one (a blocking client has no background). TRYAGAIN's window is the
 * command's reply timeout (10 s when none). A GIVE_UP is answered as an error reply. A node
 * that cannot be reached before the command is sent: a new map from another node and one
 * more try. A link lost after the command was sent: NULL (the command may have run; it is
 * not sent twice), the map refreshed for the next command. */
static redisReply *route(dtq_rsync *c, int slot, int argc, const char **argv, const size_t *lens,
                         char *why, size_t whylen) {
    int target = node_for(c, slot), retried = 0, asking = 0;
    dtq_route rt;
    dtq_route_start(&rt, c->reply_timeout_ms > 0 ? c->reply_timeout_ms : 10000);
    c->timed_out = 0;
    for (;;) {
        dtq_route_step st;
        dtq_route_action act;
        redisReply *r;
        char ignored[200];
        int sent;
        if (target < 0) {
            if (!retried && refresh_map(c, -1, ignored, sizeof(ignored)) == DTQ_OK) {
                retried = 1;
                target = node_for(c, slot);
                continue;
            }
            snprintf(why, whylen, "no node of the cluster serves slot %d", slot);
            return NULL;
        }
        r = node_call(c, target, asking, argc, argv, lens, &sent, why, whylen);
        asking = 0;
        if (!r) {
            c->stats.node_failures++;
            link_close(&c->nodes[target].link);
            if (c->last == target) c->last = -1;
            refresh_map(c, target, ignored, sizeof(ignored));
            if (sent || retried) return NULL;
            retried = 1;
            target = node_for(c, slot);
            continue;
        }
        c->last = target;
        while ((act = dtq_route_decide(&rt, c->map, c->nodes[target].host, c->nodes[target].port, r,
                                       dtq_monotonic_ms(), &st)) == DTQ_ROUTE_REREAD)
            refresh_map(c, -1, ignored, sizeof(ignored)); /* a node new to us? */
        if (st.moved) dtq_cluster_map_move(c->map, (uint16_t)st.slot, st.host, st.port);
        if (st.reread) refresh_map(c, -1, ignored, sizeof(ignored));
        if (act == DTQ_ROUTE_DONE) return r;
        freeReplyObject(r);
        if (act == DTQ_ROUTE_GIVE_UP) return dtq_cluster_error_reply(st.why);
        if (st.followed == DTQ_REDIRECT_MOVED) c->stats.moved++;
        if (st.followed == DTQ_REDIRECT_ASK) c->stats.ask++;
        if (st.pause_ms > 0) usleep((useconds_t)(st.pause_ms * 1000));
        target = node_add(c, st.host, st.port);
        asking = st.asking;
    }
}

/* A cluster URL: the first seed that answers gives the map. */
static dtq_rsync *cluster_connect(const dtq_redis_url *url, const dtq_rsync_opts *o, char *why,
                                  size_t whylen) {
    dtq_rsync *c = dtq_xcalloc(1, sizeof(*c));
    char reason[700] = "";
    c->cluster = 1;
    c->link.fd = -1;
    c->last = -1;
    dtq_redis_url_copy(&c->url, url);
    c->connect_timeout_ms = o->connect_timeout_ms;
    c->reply_timeout_ms = o->reply_timeout_ms;
    c->tls = url->tls ? dtq_tls_ref(o->tls) : NULL;
    c->client_name = o->client_name ? dtq_xstrdup(o->client_name) : NULL;
    for (int i = 0; i < url->nseeds; i++) node_add(c, url->seeds[i].host, url->seeds[i].port);
    for (int i = 0; i < url->nseeds; i++) {
        int refused, k = node_add(c, url->seeds[i].host, url->seeds[i].port);
        if (map_from_node(c, k, &refused, reason, sizeof(reason)) == DTQ_OK) {
            c->last = k;
            return c;
        }
        if (refused) break; /* a node that is not in a cluster: the URL is wrong */
        /* the reason names the node */
        note(o, "%s%s", reason, i + 1 < url->nseeds ? "; trying the next" : "");
    }
    if (c->timed_out && o->timed_out) *o->timed_out = 1;
    snprintf(why, whylen, "%s", reason);
    dtq_rsync_close(c);
    return NULL;
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
    if (url->cluster) return cluster_connect(url, o, why, whylen);
    if (url->sentinel) {
        if (sentinel_lookup(url, o, &at, why, whylen) != DTQ_OK) return NULL;
    } else {
        dtq_redis_url_copy(&at, url);
    }
    c = dtq_xcalloc(1, sizeof(*c));
    c->reply_timeout_ms = o->reply_timeout_ms;
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
    if (c->link.timed_out && o->timed_out) *o->timed_out = 1;
    dtq_redis_url_deinit(&at);
    dtq_rsync_close(c);
    return NULL;
}

redisReply *dtq_rsync_command(dtq_rsync *c, int argc, const char **argv, const size_t *lens,
                              char *why, size_t whylen) {
    int k;
    if (!c->cluster) {
        int64_t deadline = reply_deadline(c);
        redisReply *r = NULL;
        if (link_send(&c->link, argc, argv, lens, deadline, why, whylen) == DTQ_OK)
            r = link_read(&c->link, deadline, why, whylen);
        c->timed_out = !r && c->link.timed_out;
        return r;
    }
    k = dtq_cluster_key_index(argc, argv, lens);
    return route(c, k < 0 ? -1 : dtq_cluster_keyslot(argv[k], lens ? lens[k] : strlen(argv[k])),
                 argc, argv, lens, why, whylen);
}

redisReply *dtq_rsync_command_at(dtq_rsync *c, const char *slot_key, int argc, const char **argv,
                                 const size_t *lens, char *why, size_t whylen) {
    if (!c->cluster) return dtq_rsync_command(c, argc, argv, lens, why, whylen);
    return route(c, slot_key ? dtq_cluster_keyslot(slot_key, strlen(slot_key)) : -1, argc, argv,
                 lens, why, whylen);
}

redisReply *dtq_rsync_command_slot(dtq_rsync *c, int slot, int argc, const char **argv,
                                   const size_t *lens, char *why, size_t whylen) {
    if (!c->cluster) return dtq_rsync_command(c, argc, argv, lens, why, whylen);
    if (slot >= DTQ_CLUSTER_SLOTS) slot = -1;
    return route(c, slot, argc, argv, lens, why, whylen);
}

redisReply *dtq_rsync_read(dtq_rsync *c, char *why, size_t whylen) {
    if (c->cluster) {
        if (c->last < 0 || c->nodes[c->last].link.fd < 0) {
            snprintf(why, whylen, "read failed: not connected");
            return NULL;
        }
        return link_read(&c->nodes[c->last].link, NO_DEADLINE, why, whylen);
    }
    return link_read(&c->link, NO_DEADLINE, why, whylen);
}

const char *dtq_rsync_where(const dtq_rsync *c) {
    if (c->cluster) return c->nodes[c->last >= 0 ? c->last : 0].link.where;
    return c->link.where;
}

int dtq_rsync_timed_out(const dtq_rsync *c) {
    return c->timed_out;
}

int64_t dtq_rsync_reply_timeout(const dtq_rsync *c) {
    return c->reply_timeout_ms;
}

void dtq_rsync_set_reply_timeout(dtq_rsync *c, int64_t ms) {
    c->reply_timeout_ms = ms;
}

int dtq_rsync_is_cluster(const dtq_rsync *c) {
    return c->cluster;
}

const dtq_cluster_map *dtq_rsync_cluster_map(const dtq_rsync *c) {
    return c->cluster ? c->map : NULL;
}

void dtq_rsync_cluster_stats_get(const dtq_rsync *c, dtq_rsync_cluster_stats *st) {
    if (c->cluster)
        *st = c->stats;
    else
        memset(st, 0, sizeof(*st));
}

int dtq_rsync_cluster_refresh(dtq_rsync *c, char *why, size_t whylen) {
    if (!c->cluster) return DTQ_OK;
    return refresh_map(c, -1, why, whylen);
}

void dtq_rsync_close(dtq_rsync *c) {
    if (!c) return;
    link_close(&c->link);
    for (int i = 0; i < c->nnodes; i++) {
        link_close(&c->nodes[i].link);
        free(c->nodes[i].host);
    }
    free(c->nodes);
    dtq_cluster_map_free(c->map);
    dtq_redis_url_deinit(&c->url);
    dtq_tls_unref(c->tls);
    free(c->client_name);
    free(c);
}
