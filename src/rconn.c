/* rconn.c: one Redis connection: its own transport (a libevent bufferevent, plain or
 * OpenSSL), hiredis as the protocol only (redisFormatCommandArgv, redisReader), and a
 * FIFO of callbacks answered in order.
 * Phases: idle -> [resolving (a resolver, i.e. Sentinel, is asked for the address)] ->
 * connecting (non-blocking connect) -> tls (rediss:// only: the TLS handshake) ->
 * handshake (AUTH/[ROLE]/SELECT/PING in flight: redis_proto.c's plan) -> up -> (lost) -> idle, with
 * a backoff timer between idle and connecting, and one timeout over connecting..handshake.
 *
 * Re-entrancy: replies are dispatched with `dispatching` raised. A callback may send
 * commands (appended to the FIFO), ask for the link to be dropped (READONLY, a refused
 * handshake: recorded in drop_why) or free the connection (free_requested); both take
 * effect in leave(), once the outermost dispatch returns. Callbacks run from libevent's
 * deferred queue (BEV_OPT_DEFER_CALLBACKS), so no bufferevent call made here runs one of
 * ours synchronously. */
#include "rconn.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "redis_proto.h"
#include "reply_class.h"
#include "retry.h"
#include "tls.h"
#include "util.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

enum phase { PH_IDLE, PH_RESOLVING, PH_CONNECTING, PH_TLS, PH_HANDSHAKE, PH_UP };
enum kind { K_USER, K_HANDSHAKE, K_PING };

/* One sent command waiting for its reply. */
typedef struct pending {
    redisCallbackFn *cb;
    void *priv;
    enum kind kind;
    dtq_hs_kind step; /* K_HANDSHAKE: which step of the handshake */
} pending;

typedef struct fifo {
    pending *v;
    size_t head, len, cap;
} fifo;

struct dtq_rconn {
    struct event_base *base;
    dtq_redis_url url;
    dtq_tls *tls; /* rediss:// */
    int64_t connect_timeout_ms;
    char *name;
    dtq_rconn_state_fn *fn;
    void *arg;
    /* the link */
    enum phase phase;
    int fd;                   /* while connecting; the bufferevent owns it afterwards */
    struct event *connect_ev; /* the socket became writable: the connect ended */
    struct bufferevent *bev;
    redisReader *reader;
    fifo q;
    int up;
    int handshake_pending; /* replies still expected before up */
    /* re-entrancy (see the top of the file) */
    int dispatching;
    int free_requested;
    char *drop_why;
    int drop_loud;
    int stopping;
    int64_t backoff_ms;
    int failures;
    struct event *retry_ev;
    struct event *timeout_ev;
    struct event *liveness_ev; /* PING every liveness_ms / 3 while up */
    int64_t liveness_ms;       /* no PING reply for this long drops the link */
    int64_t ping_sent_ms;      /* monotonic; 0 = no PING outstanding */
    int unavailable;           /* dropped for READONLY/LOADING/MASTERDOWN: keep backing off */
    /* Sentinel (rconn.h, the last section) */
    dtq_rconn_resolver resolver;
    int has_resolver;
    int role_check;
    dtq_rconn_push_fn *push_fn;
    void *push_arg;
};

static void rconn_connect(dtq_rconn *rc);
static int link_down(dtq_rconn *rc, const char *why, int loud);
static void destroy(dtq_rconn *rc);

/* ----------------------------------------------------------------- the FIFO */

static void fifo_push(fifo *f, redisCallbackFn *cb, void *priv, enum kind kind, dtq_hs_kind step) {
    if (f->len == f->cap) {
        size_t ncap = f->cap ? f->cap * 2 : 16;
        pending *nv = dtq_xcalloc(ncap, sizeof(*nv));
        for (size_t i = 0; i < f->len; i++) nv[i] = f->v[(f->head + i) % f->cap];
        free(f->v);
        f->v = nv;
        f->cap = ncap;
        f->head = 0;
    }
    f->v[(f->head + f->len) % f->cap] = (pending){cb, priv, kind, step};
    f->len++;
}

static pending fifo_pop(fifo *f) {
    pending p = f->v[f->head];
    f->head = (f->head + 1) % f->cap;
    f->len--;
    return p;
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

/* After a lost or failed link. A loud reason (a TLS failure: usually configuration) is an
 * error line every time; others are a warning the first time, then debug. */
static void set_down(dtq_rconn *rc, const char *why, int was_up, int loud) {
    if (loud)
        dtq_error("redis %s: %s; reconnecting", rc->name, why);
    else if (rc->failures == 0 || was_up)
        dtq_warn("redis %s: %s; reconnecting", rc->name, why);
    else
        dtq_debug("redis %s: %s; reconnecting", rc->name, why);
    rc->failures++;
    if (was_up && rc->fn) rc->fn(rc, 0, rc->arg);
    schedule_retry(rc);
}

static void enter(dtq_rconn *rc) {
    rc->dispatching++;
}

/* Ends a dispatch; the outermost one carries out a requested free or drop. Returns 1
 * when rc was freed (the caller must not touch it). */
static int leave(dtq_rconn *rc) {
    if (--rc->dispatching > 0) return 0;
    if (rc->free_requested) {
        destroy(rc);
        return 1;
    }
    if (rc->drop_why) {
        char *why = rc->drop_why;
        int r;
        rc->drop_why = NULL;
        r = link_down(rc, why, rc->drop_loud);
        free(why);
        return r;
    }
    return 0;
}

/* Closes the transport; the FIFO is left to the caller. */
static void teardown(dtq_rconn *rc) {
    if (rc->phase == PH_RESOLVING) {
        rc->phase = PH_IDLE;
        if (rc->resolver.cancel) rc->resolver.cancel(rc, rc->resolver.arg);
    }
    if (rc->connect_ev) {
        event_free(rc->connect_ev);
        rc->connect_ev = NULL;
    }
    if (rc->bev) {
        bufferevent_free(rc->bev); /* closes the socket, frees the SSL */
        rc->bev = NULL;
    } else if (rc->fd >= 0) {
        close(rc->fd);
    }
    rc->fd = -1;
    if (rc->reader) {
        redisReaderFree(rc->reader);
        rc->reader = NULL;
    }
    evtimer_del(rc->timeout_ev);
    rc->phase = PH_IDLE;
    rc->up = 0;
    rc->handshake_pending = 0;
    rc->ping_sent_ms = 0;
    free(rc->drop_why);
    rc->drop_why = NULL;
}

/* Every pending callback runs with NULL, in order (the caller has raised dispatching). */
static void fail_pending(fifo *f) {
    while (f->len) {
        pending p = fifo_pop(f);
        if (p.kind == K_USER && p.cb) p.cb(NULL, NULL, p.priv);
    }
    free(f->v);
    memset(f, 0, sizeof(*f));
}

/* The link is gone (or never came): pending callbacks see NULL, then the state callback
 * hears of it, and a reconnect is scheduled. Returns 1 when rc was freed meanwhile. */
static int link_down(dtq_rconn *rc, const char *why, int loud) {
    int was_up = rc->up;
    fifo f = rc->q;
    char *reason = dtq_xstrdup(why);
    memset(&rc->q, 0, sizeof(rc->q));
    teardown(rc);
    enter(rc);
    fail_pending(&f);
    if (!rc->stopping) set_down(rc, reason, was_up, loud);
    free(reason);
    return leave(rc);
}

/* Drops the link now, or when the current dispatch ends. Returns 1 when rc was freed. */
static int request_drop(dtq_rconn *rc, const char *why, int loud) {
    if (rc->phase == PH_IDLE) return 0;
    if (rc->dispatching) {
        if (!rc->drop_why) {
            rc->drop_why = dtq_xstrdup(why);
            rc->drop_loud = loud;
        }
        return 0;
    }
    return link_down(rc, why, loud);
}

static int send_argv(dtq_rconn *rc, enum kind kind, dtq_hs_kind step, redisCallbackFn *cb,
                     void *priv, int argc, const char **argv, const size_t *lens) {
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    int r;
    if (len < 0) return DTQ_ERR;
    r = bufferevent_write(rc->bev, cmd, (size_t)len);
    redisFreeCommand(cmd);
    if (r != 0) return DTQ_ERR;
    fifo_push(&rc->q, cb, priv, kind, step);
    return DTQ_OK;
}

static void became_up(dtq_rconn *rc) {
    evtimer_del(rc->timeout_ev);
    rc->phase = PH_UP;
    rc->up = 1;
    /* A server that answers the handshake but refuses work (a replica, still loading)
     * keeps the backoff growing until a command succeeds: no reconnect busy loop. */
    if (!rc->unavailable) rc->backoff_ms = 0;
    rc->ping_sent_ms = 0;
    if (rc->failures) dtq_info("redis %s: connected", rc->name);
    rc->failures = 0;
    if (rc->fn) rc->fn(rc, 1, rc->arg);
}

/* A reply to a step of the handshake, checked as redis_proto.c says; the last one brings
 * the link up. */
static void handshake_reply(dtq_rconn *rc, dtq_hs_kind step, redisReply *reply) {
    char why[300], msg[400];
    int r;
    if (rc->drop_why) return;
    r = dtq_handshake_check(step, reply, why, sizeof(why));
    if (r == DTQ_HS_REFUSED) {
        dtq_error("redis %s: handshake refused: %s: %s", rc->name, dtq_handshake_step_name(step),
                  why);
        request_drop(rc, "disconnected", 0);
        return;
    }
    if (r != DTQ_HS_OK) {
        if (step == DTQ_HS_ROLE)
            snprintf(msg, sizeof(msg), "%s:%d is %s", rc->url.host, rc->url.port, why);
        else
            snprintf(msg, sizeof(msg), "handshake failed: %s", why);
        request_drop(rc, msg, 0);
        return;
    }
    if (--rc->handshake_pending == 0) became_up(rc);
}

/* A pub/sub message (push_fn set): ["message", channel, payload] or the pmessage form. */
static int is_message(const redisReply *r) {
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
           r->element[0]->type == REDIS_REPLY_STRING &&
           (!strcmp(r->element[0]->str, "message") || !strcmp(r->element[0]->str, "pmessage"));
}

/* A demoted primary (READONLY), a server loading its data (LOADING) or a replica without
 * its primary (MASTERDOWN) cannot serve dtq: that is a connection failure, not an error of
 * the command, so the link is dropped (pending callbacks see NULL, as on any loss) and
 * re-made with backoff, and /readyz says not ready meanwhile. The callback still sees
 * the reply first. */
static void user_reply(dtq_rconn *rc, const pending *p, redisReply *reply) {
    if (reply->type == REDIS_REPLY_ERROR &&
        dtq_reply_class_unavailable(dtq_reply_class_of(reply->str)) && rc->up && !rc->drop_why) {
        dtq_warn("redis %s: server cannot serve (%s); reconnecting", rc->name, reply->str);
        rc->unavailable = 1;
        rc->ping_sent_ms = 0;
        request_drop(rc, "disconnected", 0);
    }
    if (p->cb) p->cb(NULL, reply, p->priv);
}

/* Feeds what arrived to the reader and answers complete replies in order. Returns 1 when
 * rc was freed. */
static int process_input(dtq_rconn *rc) {
    struct evbuffer *in = bufferevent_get_input(rc->bev);
    size_t n;
    enter(rc);
    while ((n = evbuffer_get_contiguous_space(in)) > 0) {
        const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
        if (redisReaderFeed(rc->reader, data, n) != REDIS_OK) break;
        evbuffer_drain(in, n);
    }
    while (!rc->drop_why && !rc->free_requested) {
        void *r = NULL;
        pending p;
        if (redisReaderGetReply(rc->reader, &r) != REDIS_OK) {
            char why[200];
            snprintf(why, sizeof(why), "protocol error: %s", rc->reader->errstr);
            request_drop(rc, why, 0);
            break;
        }
        if (!r) break;
        if (rc->push_fn && is_message(r)) {
            rc->push_fn(rc, r, rc->push_arg);
            freeReplyObject(r);
            continue;
        }
        if (!rc->q.len) {
            freeReplyObject(r);
            request_drop(rc, "a reply to no command", 0);
            break;
        }
        p = fifo_pop(&rc->q);
        if (p.kind == K_PING)
            rc->ping_sent_ms = 0;
        else if (p.kind == K_HANDSHAKE)
            handshake_reply(rc, p.step, r);
        else
            user_reply(rc, &p, r);
        freeReplyObject(r);
    }
    return leave(rc);
}

static void read_cb(struct bufferevent *bev, void *arg) {
    DTQ_UNUSED(bev);
    process_input(arg);
}

/* The plan of redis_proto.c, always ending with a PING so "up" is one code path with or
 * without AUTH/SELECT. */
static void start_handshake(dtq_rconn *rc) {
    dtq_handshake h;
    dtq_hs_opts o = {rc->role_check, NULL, 1};
    rc->phase = PH_HANDSHAKE;
    dtq_handshake_plan(&h, &rc->url, &o);
    for (int i = 0; i < h.n; i++) {
        dtq_hs_step *st = &h.steps[i];
        if (send_argv(rc, K_HANDSHAKE, st->kind, NULL, NULL, st->argc, st->argv, NULL) != DTQ_OK) {
            request_drop(rc, "cannot send the handshake", 0);
            return;
        }
        rc->handshake_pending++;
    }
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
    dtq_rconn *rc = arg;
    char reason[300], why[512];
    int tls_failed = 0;
    if (what & BEV_EVENT_CONNECTED) { /* rediss://: the TLS handshake is complete */
        if (dtq_tls_peer_ok(rc->tls, bufferevent_openssl_get_ssl(bev), reason, sizeof(reason)) !=
            DTQ_OK) {
            snprintf(why, sizeof(why), "TLS handshake failed: %s", reason);
            request_drop(rc, why, 1);
            return;
        }
        start_handshake(rc);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
    /* what arrived before the end is answered first (e.g. an error, then a close) */
    if (rc->phase >= PH_HANDSHAKE && (process_input(rc) || rc->bev != bev)) return;
    if (rc->tls) {
        /* libevent keeps OpenSSL's error codes, and for an I/O error the SSL_get_error
         * code itself (no library part): then errno says what happened */
        unsigned long e, best = 0;
        SSL *ssl = bufferevent_openssl_get_ssl(bev);
        long vr =
            SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER ? SSL_get_verify_result(ssl) : X509_V_OK;
        while ((e = bufferevent_get_openssl_error(bev)) != 0)
            if (ERR_GET_LIB(e)) best = e;
        if (best || vr != X509_V_OK) {
            dtq_tls_describe(ssl, best, "TLS error", reason, sizeof(reason));
            tls_failed = 1;
        }
    }
    if (!tls_failed) {
        int err = EVUTIL_SOCKET_ERROR();
        if ((what & BEV_EVENT_EOF) || !err)
            snprintf(reason, sizeof(reason), "Server closed the connection");
        else
            snprintf(reason, sizeof(reason), "%s", strerror(err));
    }
    /* Until the first reply a TLS link may still be refused: with TLS 1.3 a server that
     * requires a client certificate says so (an alert, or a reset) only after the
     * client's side of the handshake is done. */
    if (rc->tls && rc->phase != PH_UP) {
        /* the alert may be lost to a reset: a closed link right after our side of the
         * handshake is most often a server that wants a client certificate */
        int hint = !tls_failed && rc->phase == PH_HANDSHAKE && !dtq_tls_has_client_cert(rc->tls);
        snprintf(why, sizeof(why), "TLS handshake failed: %s%s", reason,
                 hint ? " (does the server require a client certificate? see tls_cert_file)" : "");
        request_drop(rc, why, 1);
    } else {
        request_drop(rc, reason, 0);
    }
}

/* The socket is connected: wrap it in a bufferevent (with TLS for rediss://). */
static void connected(dtq_rconn *rc) {
    int fd = rc->fd;
    rc->reader = redisReaderCreate();
    if (!rc->reader) abort();
    if (rc->tls) {
        char err[256], why[300];
        SSL *ssl = dtq_tls_ssl_new(rc->tls, rc->url.host, err, sizeof(err));
        if (!ssl) {
            snprintf(why, sizeof(why), "TLS setup failed: %s", err);
            request_drop(rc, why, 1);
            return;
        }
        rc->bev = bufferevent_openssl_socket_new(rc->base, fd, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                 BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (!rc->bev) abort();
        rc->fd = -1;
        /* a close without close_notify is an end of stream, not a TLS error */
        bufferevent_openssl_set_allow_dirty_shutdown(rc->bev, 1);
        rc->phase = PH_TLS;
    } else {
        rc->bev =
            bufferevent_socket_new(rc->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (!rc->bev) abort();
        rc->fd = -1;
    }
    bufferevent_setcb(rc->bev, read_cb, NULL, event_cb, rc);
    bufferevent_enable(rc->bev, EV_READ | EV_WRITE);
    if (!rc->tls) start_handshake(rc);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_rconn *rc = arg;
    int err = 0;
    socklen_t len = sizeof(err);
    DTQ_UNUSED(what);
    event_free(rc->connect_ev);
    rc->connect_ev = NULL;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err) {
        char why[200];
        snprintf(why, sizeof(why), "connect failed: %s", strerror(err));
        request_drop(rc, why, 0);
        return;
    }
    connected(rc);
}

/* The address is known (the URL's, or the resolver's answer): connect to it. */
static void connect_address(dtq_rconn *rc) {
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    struct timeval tv;
    char why[300];
    int fd, one = 1;
    if (dtq_redis_url_address(&rc->url, &ss, &sslen, why, sizeof(why)) != DTQ_OK) {
        link_down(rc, why, 0);
        return;
    }
    /* close-on-exec from the start: no child may inherit the connection */
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, sizeof(why), "connect failed: %s", strerror(errno));
        link_down(rc, why, 0);
        return;
    }
    if (!rc->url.is_unix) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    rc->fd = fd;
    rc->phase = PH_CONNECTING;
    tv.tv_sec = rc->connect_timeout_ms / 1000;
    tv.tv_usec = (rc->connect_timeout_ms % 1000) * 1000;
    evtimer_add(rc->timeout_ev, &tv);
    if (connect(fd, (struct sockaddr *)&ss, sslen) == 0) {
        connected(rc);
        return;
    }
    if (errno != EINPROGRESS) {
        snprintf(why, sizeof(why), "connect failed: %s", strerror(errno));
        link_down(rc, why, 0);
        return;
    }
    rc->connect_ev = event_new(rc->base, fd, EV_WRITE, connect_cb, rc);
    event_add(rc->connect_ev, NULL);
}

static void rconn_connect(dtq_rconn *rc) {
    if (rc->stopping || rc->phase != PH_IDLE) return;
    if (rc->url.tls && !rc->tls) {
        dtq_tls_conf conf = {NULL, NULL, NULL, NULL, 1};
        char err[256], why[300];
        rc->tls = dtq_tls_new(&conf, err, sizeof(err));
        if (!rc->tls) {
            snprintf(why, sizeof(why), "TLS setup failed: %s", err);
            link_down(rc, why, 1);
            return;
        }
    }
    if (rc->has_resolver) {
        /* the answer may come from inside resolve(): nothing of rc is used after it */
        rc->phase = PH_RESOLVING;
        rc->resolver.resolve(rc, rc->resolver.arg);
        return;
    }
    connect_address(rc);
}

void dtq_rconn_resolved(dtq_rconn *rc, const char *host, int port, const char *why) {
    if (rc->phase != PH_RESOLVING || rc->stopping) return;
    rc->phase = PH_IDLE;
    if (!host) {
        set_down(rc, why ? why : "no address", 0, 0);
        return;
    }
    free(rc->url.host);
    rc->url.host = dtq_xstrdup(host);
    rc->url.port = port;
    connect_address(rc);
}

void dtq_rconn_set_resolver(dtq_rconn *rc, const dtq_rconn_resolver *r) {
    rc->has_resolver = r != NULL;
    if (r) rc->resolver = *r;
}

void dtq_rconn_set_role_check(dtq_rconn *rc, int on) {
    rc->role_check = on;
}

void dtq_rconn_set_push_handler(dtq_rconn *rc, dtq_rconn_push_fn *fn, void *arg) {
    rc->push_fn = fn;
    rc->push_arg = arg;
}

void dtq_rconn_drop(dtq_rconn *rc, const char *why) {
    if (!rc || rc->stopping) return;
    rc->backoff_ms = 0;
    rc->unavailable = 0;
    if (rc->phase == PH_IDLE) { /* waiting to reconnect: soon */
        if (evtimer_pending(rc->retry_ev, NULL)) {
            evtimer_del(rc->retry_ev);
            schedule_retry(rc);
        }
        return;
    }
    request_drop(rc, why, 0); /* logged by set_down, with why */
}

int dtq_rconn_is_connecting(const dtq_rconn *rc) {
    return rc && !rc->stopping && rc->phase != PH_IDLE && rc->phase != PH_UP;
}

const char *dtq_rconn_name(const dtq_rconn *rc) {
    return rc->name;
}

/* hiredis 0.14 cannot time out a command, so a Redis that stops answering (hung, or a
 * half-open TCP connection) is noticed here: no PING reply within three periods drops the
 * link, which fails every pending command (their callbacks see NULL) and reconnects. */
static void liveness_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_rconn *rc = arg;
    int64_t now = dtq_monotonic_ms();
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!dtq_rconn_is_up(rc)) return;
    if (rc->ping_sent_ms && now - rc->ping_sent_ms > rc->liveness_ms) {
        dtq_warn("redis %s: no reply for %lld ms; dropping the connection", rc->name,
                 (long long)(now - rc->ping_sent_ms));
        rc->ping_sent_ms = 0;
        request_drop(rc, "disconnected", 0);
        return;
    }
    if (!rc->ping_sent_ms) {
        const char *argv[1] = {"PING"};
        if (send_argv(rc, K_PING, DTQ_HS_PING, NULL, NULL, 1, argv, NULL) == DTQ_OK)
            rc->ping_sent_ms = now;
    }
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    rconn_connect(arg);
}

/* One limit over the connect, the TLS handshake and AUTH/SELECT/PING. */
static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_rconn *rc = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (rc->phase == PH_IDLE || rc->phase == PH_UP) return;
    if (rc->phase == PH_CONNECTING) {
        request_drop(rc, "connect timed out", 0);
        return;
    }
    dtq_warn("redis %s: no answer to the %shandshake within %lld ms", rc->name,
             rc->phase == PH_TLS ? "TLS " : "", (long long)rc->connect_timeout_ms);
    request_drop(rc, "disconnected", 0);
}

dtq_rconn *dtq_rconn_new(struct event_base *base, const dtq_redis_url *url,
                         int64_t connect_timeout_ms, const char *name, dtq_rconn_state_fn *fn,
                         void *arg) {
    dtq_rconn *rc = dtq_xcalloc(1, sizeof(*rc));
    rc->base = base;
    dtq_redis_url_copy(&rc->url, url);
    rc->connect_timeout_ms = connect_timeout_ms;
    rc->name = dtq_xstrdup(name);
    rc->fn = fn;
    rc->arg = arg;
    rc->fd = -1;
    rc->retry_ev = evtimer_new(base, retry_cb, rc);
    rc->timeout_ev = evtimer_new(base, timeout_cb, rc);
    rc->liveness_ev = event_new(base, -1, EV_PERSIST, liveness_cb, rc);
    dtq_rconn_set_liveness(rc, 3 * connect_timeout_ms);
    return rc;
}

void dtq_rconn_set_liveness(dtq_rconn *rc, int64_t liveness_ms) {
    int64_t period = liveness_ms / 3 > 0 ? liveness_ms / 3 : 1;
    struct timeval tv = {period / 1000, (period % 1000) * 1000};
    rc->liveness_ms = liveness_ms;
    evtimer_add(rc->liveness_ev, &tv);
}

void dtq_rconn_set_tls(dtq_rconn *rc, struct dtq_tls *tls) {
    dtq_tls_unref(rc->tls);
    rc->tls = dtq_tls_ref(tls);
}

void dtq_rconn_start(dtq_rconn *rc) {
    rconn_connect(rc);
}

int dtq_rconn_is_up(const dtq_rconn *rc) {
    return rc && rc->up && !rc->drop_why && !rc->stopping;
}

int dtq_rconn_command(dtq_rconn *rc, redisCallbackFn *cb, void *priv, int argc, const char **argv,
                      const size_t *lens) {
    if (!dtq_rconn_is_up(rc)) return DTQ_ERR;
    return send_argv(rc, K_USER, DTQ_HS_PING, cb, priv, argc, argv, lens);
}

void dtq_rconn_serving(dtq_rconn *rc) {
    rc->unavailable = 0;
    rc->backoff_ms = 0;
}

/* The real free: pending callbacks run with NULL first, while everything still lives. */
static void destroy(dtq_rconn *rc) {
    fifo f = rc->q;
    rc->stopping = 1;
    rc->fn = NULL;
    memset(&rc->q, 0, sizeof(rc->q));
    teardown(rc);
    rc->dispatching++; /* a dtq_rconn_free from a callback below only marks */
    fail_pending(&f);
    fail_pending(&rc->q); /* nothing can be sent without a link, but be sure */
    event_free(rc->retry_ev);
    event_free(rc->timeout_ev);
    event_free(rc->liveness_ev);
    dtq_tls_unref(rc->tls);
    dtq_redis_url_deinit(&rc->url);
    free(rc->name);
    free(rc);
}

void dtq_rconn_free(dtq_rconn *rc) {
    if (!rc) return;
    rc->stopping = 1;
    rc->fn = NULL;
    evtimer_del(rc->retry_ev);
    if (rc->dispatching) { /* inside one of our callbacks: when it returns */
        rc->free_requested = 1;
        return;
    }
    destroy(rc);
}
