/* rconn.h: one Redis connection on the event loop: connect with a timeout, TLS for
 * rediss://, the handshake (redis_proto.h), liveness, and reconnect with capped backoff.
 * hiredis 0.14 has no TLS, so the transport is a libevent bufferevent (a socket one, or
 * an OpenSSL one over it) and hiredis is only the protocol: commands are formatted with
 * redisFormatCommandArgv and replies parsed by a redisReader, answered in order from a
 * FIFO of callbacks. The callbacks keep hiredis's redisCallbackFn type; their
 * redisAsyncContext argument is always NULL (there is none). */
#ifndef DTQ_RCONN_H
#define DTQ_RCONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>

#include "redis_url.h"

struct event_base;

typedef struct dtq_rconn dtq_rconn;
struct dtq_tls;

/* Called with up=1 once connected, authenticated and on the right db; up=0 when lost. */
typedef void dtq_rconn_state_fn(dtq_rconn *rc, int up, void *arg);

/* Borrows url (copied) and base. `name` labels log lines. Call dtq_rconn_start next. */
dtq_rconn *dtq_rconn_new(struct event_base *base, const dtq_redis_url *url,
                         int64_t connect_timeout_ms, const char *name, dtq_rconn_state_fn *fn,
                         void *arg);
/* rediss:// only: the TLS settings (tls.h) to connect with; takes a reference. Without
 * it a rediss:// connection verifies against the system store. Call before start. */
void dtq_rconn_set_tls(dtq_rconn *rc, struct dtq_tls *tls);
/* A PING unanswered for liveness_ms drops the link (a hung server, a half-open TCP
 * connection); one is sent every liveness_ms / 3. Default: 3 x connect_timeout_ms. */
void dtq_rconn_set_liveness(dtq_rconn *rc, int64_t liveness_ms);
void dtq_rconn_start(dtq_rconn *rc);
int dtq_rconn_is_up(const dtq_rconn *rc);
/* Sends a command. DTQ_ERR when not up; then cb is never called. Replies are borrowed
 * for the callback's duration; a NULL reply means the connection died. */
int dtq_rconn_command(dtq_rconn *rc, redisCallbackFn *cb, void *priv, int argc, const char **argv,
                      const size_t *lens);
/* READONLY, LOADING or MASTERDOWN: the server cannot serve; the connection treats such a
 * reply as its own failure (drop, reconnect with backoff) before the callback sees it. */
/* The caller's setup (writes included) succeeded on this connection: the server serves,
 * so the reconnect backoff starts from its minimum again. */
void dtq_rconn_serving(dtq_rconn *rc);
/* Drops the link and stops reconnecting; pending callbacks run with NULL. NULL-safe.
 * Called from one of this connection's callbacks, it takes effect when that callback
 * returns (the remaining callbacks then run with NULL). */
void dtq_rconn_free(dtq_rconn *rc);

/* ---- for Sentinel (sentinel.h): all optional; without them nothing above changes. */

/* An address resolver: asked for host:port before each connect (the connect timeout
 * starts after its answer). resolve() answers, now or later, with dtq_rconn_resolved();
 * cancel() is called instead when the connection stops waiting (freed or dropped). */
typedef struct dtq_rconn_resolver {
    void (*resolve)(dtq_rconn *rc, void *arg);
    void (*cancel)(dtq_rconn *rc, void *arg);
    void *arg;
} dtq_rconn_resolver;
/* Call before start; NULL removes it. */
void dtq_rconn_set_resolver(dtq_rconn *rc, const dtq_rconn_resolver *r);
/* The resolver's answer: host NULL = no address (`why`), then the usual backoff. Ignored
 * when rc does not wait for one. */
void dtq_rconn_resolved(dtq_rconn *rc, const char *host, int port, const char *why);
/* on: the handshake also sends ROLE and refuses a server that is not a master (a failed
 * connect: backoff, and the resolver is asked again). */
void dtq_rconn_set_role_check(dtq_rconn *rc, int on);
/* Pub/sub: a reply that is a message (["message", channel, payload] or "pmessage") goes
 * to fn instead of answering a command; borrowed for the call. */
typedef void dtq_rconn_push_fn(dtq_rconn *rc, const redisReply *msg, void *arg);
void dtq_rconn_set_push_handler(dtq_rconn *rc, dtq_rconn_push_fn *fn, void *arg);
/* Drops the link (pending callbacks see NULL, the state callback up=0 if it was up) and
 * reconnects soon, from the minimum backoff (resolving again); one waiting to reconnect
 * does so soon. Why is logged. From a callback of rc it takes effect when that returns. */
void dtq_rconn_drop(dtq_rconn *rc, const char *why);
/* 1 while a connect is under way (resolving, connecting, TLS or handshake). */
int dtq_rconn_is_connecting(const dtq_rconn *rc);
const char *dtq_rconn_name(const dtq_rconn *rc);

#endif
