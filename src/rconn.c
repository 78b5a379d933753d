/* rconn.c: connection lifecycle for one hiredis async context.
 * States: idle -> connecting -> handshake (AUTH/SELECT in flight) -> up -> (lost) -> idle,
 * with a backoff timer between idle and connecting. */
#include "rconn.h"

#include <event2/event.h>
#include <fcntl.h>
#include <hiredis/adapters/libevent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "retry.h"
#include "util.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

struct dtq_rconn {
    struct event_base *base;
    dtq_redis_url url;
    int64_t connect_timeout_ms;
    char *name;
    dtq_rconn_state_fn *fn;
    void *arg;
    redisAsyncContext *ac;
    int up;
    int handshake_pending; /* replies still expected before up */
    int stopping;
    int64_t backoff_ms;
    int failures;
    struct event *retry_ev;
    struct event *timeout_ev;
    struct event *liveness_ev; /* PING every connect_timeout_ms while up */
    int64_t ping_sent_ms;      /* monotonic; 0 = no PING outstanding */
    int unavailable;           /* dropped for READONLY/LOADING/MASTERDOWN: keep backing off */
};

/* What a command's callback is wrapped in, so every reply is seen here first. */
typedef struct reply_hook {
    redisCallbackFn *cb;
    void *priv;
} reply_hook;

static void rconn_connect(dtq_rconn *rc);

/* ----------------------------------------------------------------- URL parsing */

static int url_fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return DTQ_ERR;
}

int dtq_redis_url_parse(const char *url, dtq_redis_url *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (!strncmp(url, "unix://", 7)) {
        const char *path = url + 7, *q = strchr(path, '?');
        int64_t db;
        if (*path != '/') return url_fail(err, errlen, "unix URL needs an absolute path");
        out->is_unix = 1;
        out->path = q ? dtq_xstrndup(path, (size_t)(q - path)) : dtq_xstrdup(path);
        if (q) {
            if (strncmp(q, "?db=", 4) || dtq_parse_int64(q + 4, 0, 100000, &db) != DTQ_OK) {
                dtq_redis_url_deinit(out);
                return url_fail(err, errlen, "unix URL query must be ?db=N");
            }
            out->db = (int)db;
        }
        if (strlen(out->path) < 2) {
            dtq_redis_url_deinit(out);
            return url_fail(err, errlen, "unix URL has an empty path");
        }
        return DTQ_OK;
    }
    if (strncmp(url, "redis://", 8))
        return url_fail(err, errlen, "URL must start with redis:// or unix://");
    const char *p = url + 8, *at = strrchr(p, '@'), *slash;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p) out->user = dtq_xstrndup(p, (size_t)(colon - p));
            out->password = dtq_xstrndup(colon + 1, (size_t)(at - colon - 1));
        } else {
            out->password = dtq_xstrndup(p, (size_t)(at - p));
        }
        p = at + 1;
    }
    slash = strchr(p, '/');
    {
        size_t hostlen = slash ? (size_t)(slash - p) : strlen(p);
        char *hostport = dtq_xstrndup(p, hostlen), *colon;
        if (hostport[0] == '[') { /* [::1]:6379 */
            char *close = strchr(hostport, ']');
            if (!close) {
                free(hostport);
                dtq_redis_url_deinit(out);
                return url_fail(err, errlen, "unterminated [ in host");
            }
            *close = '\0';
            out->host = dtq_xstrdup(hostport + 1);
            colon = close[1] == ':' ? close + 1 : NULL;
        } else {
            colon = strrchr(hostport, ':');
            if (colon) *colon = '\0';
            out->host = dtq_xstrdup(hostport);
        }
        if (colon) {
            int64_t port;
            if (dtq_parse_int64(colon + 1, 1, 65535, &port) != DTQ_OK) {
                free(hostport);
                dtq_redis_url_deinit(out);
                return url_fail(err, errlen, "port must be an integer in [1, 65535]");
            }
            out->port = (int)port;
        }
        free(hostport);
    }
    if (!*out->host) {
        dtq_redis_url_deinit(out);
        return url_fail(err, errlen, "URL has no host");
    }
    if (slash && slash[1]) {
        int64_t db;
        if (dtq_parse_int64(slash + 1, 0, 100000, &db) != DTQ_OK) {
            dtq_redis_url_deinit(out);
            return url_fail(err, errlen, "database must be a non-negative integer");
        }
        out->db = (int)db;
    }
    return DTQ_OK;
}

void dtq_redis_url_deinit(dtq_redis_url *u) {
    free(u->host);
    free(u->path);
    free(u->user);
    free(u->password);
    memset(u, 0, sizeof(*u));
}

static void url_copy(dtq_redis_url *dst, const dtq_redis_url *src) {
    *dst = *src;
    dst->host = src->host ? dtq_xstrdup(src->host) : NULL;
    dst->path = src->path ? dtq_xstrdup(src->path) : NULL;
    dst->user = src->user ? dtq_xstrdup(src->user) : NULL;
    dst->password = src->password ? dtq_xstrdup(src->password) : NULL;
}

/* ----------------------------------------------------------------- lifecycle */

static void schedule_retry(dtq_rconn *rc) {
    struct timeval tv;
    int64_t delay;
    if (rc->stopping) return;
    rc->backoff_ms = rc->backoff_ms ? rc->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (rc->backoff_ms > BACKOFF_MAX_MS) rc->backoff_ms = BACKOFF_MAX_MS;
    /* Up to 25% jitter so a fleet does not reconnect in lockstep after a Redis restart. */
    delay = rc->backoff_ms - (int64_t)(dtq_retry_uniform() * (double)(rc->backoff_ms / 4));
    tv.tv_sec = delay / 1000;
    tv.tv_usec = (delay % 1000) * 1000;
    evtimer_add(rc->retry_ev, &tv);
}

static void set_down(dtq_rconn *rc, const char *why) {
    int was_up = rc->up;
    rc->up = 0;
    rc->handshake_pending = 0;
    if (rc->failures++ == 0 || was_up)
        dtq_warn("redis %s: %s; reconnecting", rc->name, why);
    else
        dtq_debug("redis %s: %s; reconnecting", rc->name, why);
    if (was_up && rc->fn) rc->fn(rc, 0, rc->arg);
    schedule_retry(rc);
}

static void handshake_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_rconn *rc = ac->data;
    redisReply *reply = r;
    DTQ_UNUSED(priv);
    if (!rc || !reply) return; /* the disconnect callback reports the loss */
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("redis %s: handshake refused: %s", rc->name, reply->str);
        redisAsyncDisconnect(ac);
        return;
    }
    if (--rc->handshake_pending == 0) {
        evtimer_del(rc->timeout_ev);
        rc->up = 1;
        /* A server that answers the handshake but refuses work (a replica, still loading)
         * keeps the backoff growing until a command succeeds: no reconnect busy loop. */
        if (!rc->unavailable) rc->backoff_ms = 0;
        rc->ping_sent_ms = 0;
        if (rc->failures) dtq_info("redis %s: connected", rc->name);
        rc->failures = 0;
        if (rc->fn) rc->fn(rc, 1, rc->arg);
    }
}

static void connect_cb(const redisAsyncContext *cac, int status) {
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    dtq_rconn *rc = ac->data;
    if (!rc) return;
    if (status != REDIS_OK) {
        char why[200];
        snprintf(why, sizeof(why), "connect failed: %s", ac->errstr);
        rc->ac = NULL; /* hiredis frees the context after this callback */
        evtimer_del(rc->timeout_ev);
        set_down(rc, why);
        return;
    }
    /* Always finish with a PING so "up" is one code path with or without AUTH/SELECT. */
    if (rc->url.password) {
        const char *argv[3] = {"AUTH", rc->url.user ? rc->url.user : rc->url.password,
                               rc->url.password};
        int argc = rc->url.user ? 3 : 2;
        rc->handshake_pending++;
        redisAsyncCommandArgv(ac, handshake_cb, NULL, argc, argv, NULL);
    }
    if (rc->url.db) {
        char db[16];
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", rc->url.db);
        rc->handshake_pending++;
        redisAsyncCommandArgv(ac, handshake_cb, NULL, 2, argv, NULL);
    }
    rc->handshake_pending++;
    {
        const char *argv[1] = {"PING"};
        redisAsyncCommandArgv(ac, handshake_cb, NULL, 1, argv, NULL);
    }
}

static void disconnect_cb(const redisAsyncContext *cac, int status) {
    dtq_rconn *rc = cac->data;
    if (!rc) return;
    rc->ac = NULL;
    evtimer_del(rc->timeout_ev);
    set_down(rc, status == REDIS_OK ? "disconnected" : (cac->errstr[0] ? cac->errstr : "lost"));
}

static void ping_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_rconn *rc = ac->data;
    DTQ_UNUSED(r);
    DTQ_UNUSED(priv);
    if (rc) rc->ping_sent_ms = 0;
}

/* hiredis 0.14 cannot time out a command, so a Redis that stops answering (hung, or a
 * half-open TCP connection) is noticed here: no PING reply within three periods drops the
 * link, which fails every pending command (their callbacks see NULL) and reconnects. */
static void liveness_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_rconn *rc = arg;
    int64_t now = dtq_monotonic_ms();
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!rc->up || !rc->ac) return;
    if (rc->ping_sent_ms && now - rc->ping_sent_ms > 3 * rc->connect_timeout_ms) {
        redisAsyncContext *ac = rc->ac;
        dtq_warn("redis %s: no reply for %lld ms; dropping the connection", rc->name,
                 (long long)(now - rc->ping_sent_ms));
        rc->ping_sent_ms = 0;
        redisAsyncFree(ac); /* disconnect_cb runs and schedules the reconnect */
        return;
    }
    if (!rc->ping_sent_ms) {
        const char *argv[1] = {"PING"};
        if (redisAsyncCommandArgv(rc->ac, ping_cb, NULL, 1, argv, NULL) == REDIS_OK)
            rc->ping_sent_ms = now;
    }
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    rconn_connect(arg);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_rconn *rc = arg;
    redisAsyncContext *ac = rc->ac;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!ac || rc->up) return;
    /* Freed, not disconnected: a graceful disconnect would wait for the handshake replies
     * of a server that accepted the connection but never answers. */
    if (ac->c.flags & REDIS_CONNECTED) {
        dtq_warn("redis %s: no answer to the handshake within %lld ms", rc->name,
                 (long long)rc->connect_timeout_ms);
        redisAsyncFree(ac); /* disconnect_cb runs and schedules the reconnect */
    } else {
        /* hiredis gives a context that never connected no disconnect callback */
        ac->data = NULL;
        rc->ac = NULL;
        redisAsyncFree(ac);
        set_down(rc, "connect timed out");
    }
}

static void rconn_connect(dtq_rconn *rc) {
    struct timeval tv;
    redisAsyncContext *ac;
    if (rc->stopping || rc->ac) return;
    ac = rc->url.is_unix ? redisAsyncConnectUnix(rc->url.path)
                         : redisAsyncConnect(rc->url.host, rc->url.port);
    if (!ac || ac->err) {
        char why[200];
        snprintf(why, sizeof(why), "connect failed: %s", ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        set_down(rc, why);
        return;
    }
    /* hiredis makes its socket without SOCK_CLOEXEC; no child may inherit the connection */
    fcntl(ac->c.fd, F_SETFD, fcntl(ac->c.fd, F_GETFD) | FD_CLOEXEC);
    ac->data = rc;
    rc->ac = ac;
    redisLibeventAttach(ac, rc->base);
    redisAsyncSetConnectCallback(ac, connect_cb);
    redisAsyncSetDisconnectCallback(ac, disconnect_cb);
    tv.tv_sec = rc->connect_timeout_ms / 1000;
    tv.tv_usec = (rc->connect_timeout_ms % 1000) * 1000;
    evtimer_add(rc->timeout_ev, &tv);
}

dtq_rconn *dtq_rconn_new(struct event_base *base, const dtq_redis_url *url,
                         int64_t connect_timeout_ms, const char *name, dtq_rconn_state_fn *fn,
                         void *arg) {
    dtq_rconn *rc = dtq_xcalloc(1, sizeof(*rc));
    rc->base = base;
    url_copy(&rc->url, url);
    rc->connect_timeout_ms = connect_timeout_ms;
    rc->name = dtq_xstrdup(name);
    rc->fn = fn;
    rc->arg = arg;
    rc->retry_ev = evtimer_new(base, retry_cb, rc);
    rc->timeout_ev = evtimer_new(base, timeout_cb, rc);
    rc->liveness_ev = event_new(base, -1, EV_PERSIST, liveness_cb, rc);
    {
        struct timeval tv = {connect_timeout_ms / 1000, (connect_timeout_ms % 1000) * 1000};
        evtimer_add(rc->liveness_ev, &tv);
    }
    return rc;
}

void dtq_rconn_start(dtq_rconn *rc) {
    rconn_connect(rc);
}

int dtq_rconn_is_up(const dtq_rconn *rc) {
    return rc && rc->up && rc->ac;
}

int dtq_rconn_error_is_unavailable(const char *err) {
    static const char *const words[] = {"READONLY", "LOADING", "MASTERDOWN", NULL};
    for (const char *const *w = words; *w; w++) {
        size_t n = strlen(*w);
        if (!strncmp(err, *w, n) && (err[n] == ' ' || err[n] == '\0')) return 1;
    }
    return 0;
}

/* A demoted primary (READONLY), a server loading its data (LOADING) or a replica without
 * its primary (MASTERDOWN) cannot serve dtq: that is a connection failure, not an error of
 * the command, so the link is dropped (pending callbacks see NULL, as on any loss) and
 * re-made with backoff, and /readyz says not ready meanwhile. */
static void reply_hook_cb(redisAsyncContext *ac, void *r, void *priv) {
    reply_hook *h = priv;
    redisReply *reply = r;
    dtq_rconn *rc = ac->data;
    if (rc && reply && reply->type == REDIS_REPLY_ERROR &&
        dtq_rconn_error_is_unavailable(reply->str)) {
        if (rc->up) {
            dtq_warn("redis %s: server cannot serve (%s); reconnecting", rc->name, reply->str);
            rc->unavailable = 1;
            rc->ping_sent_ms = 0;
            redisAsyncFree(ac); /* deferred by hiredis while in a callback */
        }
    }
    if (h->cb) h->cb(ac, r, h->priv);
    free(h);
}

int dtq_rconn_command(dtq_rconn *rc, redisCallbackFn *cb, void *priv, int argc, const char **argv,
                      const size_t *lens) {
    reply_hook *h;
    if (!dtq_rconn_is_up(rc)) return DTQ_ERR;
    h = dtq_xmalloc(sizeof(*h));
    h->cb = cb;
    h->priv = priv;
    if (redisAsyncCommandArgv(rc->ac, reply_hook_cb, h, argc, argv, lens) != REDIS_OK) {
        free(h);
        return DTQ_ERR;
    }
    return DTQ_OK;
}

void dtq_rconn_serving(dtq_rconn *rc) {
    rc->unavailable = 0;
    rc->backoff_ms = 0;
}

void dtq_rconn_free(dtq_rconn *rc) {
    if (!rc) return;
    rc->stopping = 1;
    rc->fn = NULL;
    if (rc->ac) {
        redisAsyncContext *ac = rc->ac;
        rc->ac = NULL;
        ac->data = NULL;    /* our callbacks ignore a context without an owner */
        redisAsyncFree(ac); /* pending command callbacks still run, with NULL replies */
    }
    event_free(rc->retry_ev);
    event_free(rc->timeout_ev);
    event_free(rc->liveness_ev);
    dtq_redis_url_deinit(&rc->url);
    free(rc->name);
    free(rc);
}
