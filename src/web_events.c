/* web_events.c: the event streams and their subscriber connection.
 *
 * The subscriber is an rconn with a push handler (rconn.h): the messages published to
 * <p>:events go to push_cb, not to the FIFO of command callbacks, where SUBSCRIBE's own
 * reply and rconn's liveness PING (answered ["pong", ""] on a subscribed connection) are
 * answered as on any connection. A lost link is made again by rconn, and the state
 * callback subscribes again. */
#include "web_events.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "util.h"

typedef struct client {
    struct client *prev, *next;
    dtq_web_events *ev;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    int backlog_pending; /* the backlog read is in flight: live events wait in `held` */
    int closed;          /* the client went away while the backlog read was in flight */
    struct evbuffer *held;
} client;

struct dtq_web_events {
    dtq_web *w;
    client *clients;
    int nclients;
    char *channel;
    dtq_rconn *sub; /* while a stream is open */
    struct event *keepalive_ev;
};

/* ----------------------------------------------------------------- streams */

static void client_write(client *c, const char *data, size_t len) {
    struct evbuffer *buf;
    if (c->backlog_pending) {
        evbuffer_add(c->held, data, len);
        return;
    }
    buf = evbuffer_new();
    if (!buf) abort();
    evbuffer_add(buf, data, len);
    evhttp_send_reply_chunk(c->req, buf);
    evbuffer_free(buf);
}

/* Unlinks and frees c; ends its response unless the client is gone (then evhttp has
 * detached the request, and ending it only frees it). */
static void client_end(client *c) {
    dtq_web_events *ev = c->ev;
    if (c->prev)
        c->prev->next = c->next;
    else
        ev->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    ev->nclients--;
    dtq_web_conn_set_closecb(c->ev->w, c->evcon, NULL, NULL);
    evhttp_send_reply_end(c->req);
    evbuffer_free(c->held);
    free(c);
    if (ev->nclients == 0 && ev->sub) { /* nobody listens: unsubscribe */
        dtq_rconn_free(ev->sub);
        ev->sub = NULL;
    }
}

static void client_closed_cb(struct evhttp_connection *evcon, void *arg) {
    client *c = arg;
    DTQ_UNUSED(evcon);
    if (c->backlog_pending) { /* freed when the read answers */
        c->closed = 1;
        dtq_web_conn_set_closecb(c->ev->w, c->evcon, NULL, NULL);
        return;
    }
    client_end(c);
}

/* Bytes queued towards the client that it has not read yet. */
static size_t client_buffered(const client *c) {
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* Sends "data: <json>\n\n" to every stream; drops a client that stopped reading. */
static void broadcast(dtq_web_events *ev, const char *json, size_t len) {
    struct evbuffer *msg = evbuffer_new();
    size_t n;
    char *flat;
    if (!msg) abort();
    evbuffer_add(msg, "data: ", 6);
    evbuffer_add(msg, json, len);
    evbuffer_add(msg, "\n\n", 2);
    n = evbuffer_get_length(msg);
    flat = (char *)evbuffer_pullup(msg, -1);
    for (size_t i = 6; i < n - 2; i++) /* a line break would end the SSE field early */
        if (flat[i] == '\n' || flat[i] == '\r' || flat[i] == '\0') flat[i] = ' ';
    for (client *c = ev->clients, *next; c; c = next) {
        next = c->next;
        if (c->closed) continue;
        if (client_buffered(c) > DTQ_WEB_EVENTS_BUFFERED_MAX) {
            dtq_warn("web: an event stream stopped reading; closing it");
            client_end(c);
            continue;
        }
        client_write(c, flat, n);
    }
    evbuffer_free(msg);
}

/* ----------------------------------------------------------------- the subscriber */

/* A message on <p>:events: ["message", channel, payload]. */
static void push_cb(dtq_rconn *rc, const redisReply *msg, void *arg) {
    dtq_web_events *ev = arg;
    const redisReply *payload = msg->element[msg->elements - 1];
    DTQ_UNUSED(rc);
    if (payload->type == REDIS_REPLY_STRING) broadcast(ev, payload->str, payload->len);
}

static void subscribed_cb(redisAsyncContext *ac, void *reply, void *priv) {
    redisReply *r = reply;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(priv);
    if (r && r->type == REDIS_REPLY_ERROR)
        dtq_error("web: redis refused the events subscription: %s", r->str);
}

static void sub_state_cb(dtq_rconn *rc, int up, void *arg) {
    dtq_web_events *ev = arg;
    const char *argv[2] = {"SUBSCRIBE", ev->channel};
    if (!up) return;
    dtq_rconn_command(rc, subscribed_cb, ev, 2, argv, NULL);
    dtq_rconn_serving(rc);
}

static void sub_open(dtq_web_events *ev) {
    dtq_web *w = ev->w;
    ev->sub =
        dtq_rconn_new(w->base, &w->url, w->cfg->connect_timeout_ms, "web-events", sub_state_cb, ev);
    dtq_rconn_set_liveness(ev->sub, w->cfg->liveness_timeout_ms);
    dtq_rconn_set_tls(ev->sub, w->tls);
    dtq_rconn_set_push_handler(ev->sub, push_cb, ev);
    dtq_rconn_start(ev->sub);
}

/* A comment line on every stream, so proxies and browsers keep idle ones open. */
static void keepalive_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_web_events *ev = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    for (client *c = ev->clients, *next; c; c = next) {
        next = c->next;
        if (!c->closed) client_write(c, ": keep-alive\n\n", 14);
    }
}

/* ----------------------------------------------------------------- serving */

/* The backlog: XREVRANGE of the events stream, sent oldest first, then what was held. */
static void backlog_cb(redisAsyncContext *ac, void *reply, void *priv) {
    client *c = priv;
    redisReply *r = reply;
    DTQ_UNUSED(ac);
    c->backlog_pending = 0;
    if (c->closed) {
        c->closed = 0; /* client_end frees the detached request */
        client_end(c);
        return;
    }
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = r->elements; i-- > 0;) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2) continue;
            for (size_t k = 0; k + 1 < e->element[1]->elements; k += 2) {
                const redisReply *f = e->element[1]->element[k], *v = e->element[1]->element[k + 1];
                if (f->type == REDIS_REPLY_STRING && !strcmp(f->str, "event") &&
                    v->type == REDIS_REPLY_STRING) {
                    char *line = dtq_xasprintf("data: %s\n\n", v->str);
                    for (char *p = line + 6; p[2]; p++)
                        if (*p == '\n' || *p == '\r') *p = ' ';
                    client_write(c, line, strlen(line));
                    free(line);
                }
            }
        }
    }
    if (evbuffer_get_length(c->held) > 0) {
        size_t n = evbuffer_get_length(c->held);
        client_write(c, (const char *)evbuffer_pullup(c->held, -1), n);
        evbuffer_drain(c->held, n);
    }
}

/* Streams are put at the head of the list, so the oldest is the last one there. One whose
 * backlog read is in flight is left alone (its reply callback owns it). */
static client *oldest_stream(dtq_web_events *ev) {
    client *found = NULL;
    for (client *c = ev->clients; c; c = c->next)
        if (!c->backlog_pending && !c->closed) found = c;
    return found;
}

void dtq_web_events_serve(dtq_web_events *ev, struct evhttp_request *req,
                          const struct evkeyvalq *query) {
    const char *b = evhttp_find_header(query, "backlog");
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    int64_t backlog = 0;
    client *c;
    if (b && *b && dtq_parse_int64(b, 0, DTQ_WEB_EVENTS_BACKLOG_MAX, &backlog) != DTQ_OK) {
        dtq_web_reply_error(req, 400, "bad_request", "backlog must be an integer in [0, %d]",
                            DTQ_WEB_EVENTS_BACKLOG_MAX);
        return;
    }
    if (ev->nclients >= DTQ_WEB_EVENTS_CLIENTS_MAX) {
        client *oldest = oldest_stream(ev);
        if (!oldest) {
            dtq_web_reply_error(req, 503, "too_many_streams", "%d event streams are open already",
                                DTQ_WEB_EVENTS_CLIENTS_MAX);
            return;
        }
        dtq_debug("web: %d event streams open; ending the oldest for a new one", ev->nclients);
        client_end(oldest);
    }
    evhttp_add_header(out, "Content-Type", "text/event-stream; charset=utf-8");
    evhttp_add_header(out, "Cache-Control", "no-store");
    evhttp_add_header(out, "X-Accel-Buffering", "no");
    evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        evhttp_send_reply(req, 200, "OK", NULL);
        return;
    }
    c = dtq_xcalloc(1, sizeof(*c));
    c->ev = ev;
    c->req = req;
    c->evcon = evhttp_request_get_connection(req);
    c->held = evbuffer_new();
    if (!c->held) abort();
    c->next = ev->clients;
    if (ev->clients) ev->clients->prev = c;
    ev->clients = c;
    ev->nclients++;
    evhttp_send_reply_start(req, 200, "OK");
    {
        /* evhttp's timeout would end the stream: the client sends nothing more after its
         * request. Writes keep theirs: a client that does not read is dropped. */
        struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
        struct timeval wtv = {DTQ_WEB_TIMEOUT_S, 0};
        if (bev) bufferevent_set_timeouts(bev, NULL, &wtv);
    }
    dtq_web_conn_set_closecb(ev->w, c->evcon, client_closed_cb, c);
    client_write(c, "retry: 3000\n: dtq-web events\n\n", 30);
    if (!ev->sub) sub_open(ev);
    if (backlog > 0 && ev->w->redis_up) {
        char *k = dtq_key_events_stream(ev->w->prefix), count[32];
        const char *argv[6] = {"XREVRANGE", k, "+", "-", "COUNT", count};
        snprintf(count, sizeof(count), "%lld", (long long)backlog);
        if (dtq_rconn_command(ev->w->redis, backlog_cb, c, 6, argv, NULL) == DTQ_OK)
            c->backlog_pending = 1;
        free(k);
    }
}

int dtq_web_events_clients(const dtq_web_events *ev) {
    return ev->nclients;
}

dtq_web_events *dtq_web_events_new(dtq_web *w) {
    dtq_web_events *ev = dtq_xcalloc(1, sizeof(*ev));
    struct timeval tv = {DTQ_WEB_EVENTS_KEEPALIVE_MS / 1000,
                         (DTQ_WEB_EVENTS_KEEPALIVE_MS % 1000) * 1000};
    ev->w = w;
    ev->channel = dtq_key_events_channel(w->prefix);
    ev->keepalive_ev = event_new(w->base, -1, EV_PERSIST, keepalive_cb, ev);
    evtimer_add(ev->keepalive_ev, &tv);
    return ev;
}

void dtq_web_events_free(dtq_web_events *ev) {
    if (!ev) return;
    /* dtq_web_free closed the command connection first: no backlog read is in flight */
    while (ev->clients) client_end(ev->clients);
    dtq_rconn_free(ev->sub);
    event_free(ev->keepalive_ev);
    free(ev->channel);
    free(ev);
}
