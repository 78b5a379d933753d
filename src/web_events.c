/* web_events.c: the event streams and their subscriber connection.
 *
 * The subscriber is an rconn with a push handler (rconn.h): the messages published to
 * <p>:events go to push_cb, not to the FIFO of command callbacks, where SUBSCRIBE's own
 * reply and rconn's liveness PING (answered ["pong", ""] on a subscribed connection) are
 * answered as on any connection. A lost link is made again by rconn, and the state
 * callback subscribes again. In the cluster layout the channel is {ns}:events on any one
 * primary (a cluster's PUBLISH reaches every node's subscribers): rconn asks a resolver
 * for the node before each connect, which picks a primary whose link is up, another than
 * the last one when it can. */
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
#include "rcluster.h"
#include "util.h"
#include "view_merge.h"

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
    char *sub_host; /* the cluster layout: the node the subscriber was last sent to */
    int sub_port;
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

/* The cluster layout: the subscriber's node, asked before each connect. A cluster delivers
 * PUBLISH to the subscribers of every node, so any primary whose link is up will do; one
 * other than the last (which just went away, or the subscriber would not ask again) first. */
static void sub_resolve(dtq_rconn *rc, void *arg) {
    dtq_web_events *ev = arg;
    dtq_rcluster_primary p[64];
    int n = dtq_rcluster_primaries(ev->w->rc, p, 64), pick = -1;
    if (n > 64) n = 64;
    for (int i = 0; i < n && pick < 0; i++)
        if (p[i].up &&
            (!ev->sub_host || p[i].port != ev->sub_port || strcmp(p[i].host, ev->sub_host)))
            pick = i;
    for (int i = 0; i < n && pick < 0; i++)
        if (p[i].up) pick = i;
    if (pick < 0 && n > 0) pick = 0;
    if (pick < 0) {
        dtq_rconn_resolved(rc, NULL, 0, "no node of the cluster is known yet");
        return;
    }
    free(ev->sub_host);
    ev->sub_host = dtq_xstrdup(p[pick].host);
    ev->sub_port = p[pick].port;
    dtq_rconn_resolved(rc, ev->sub_host, ev->sub_port, NULL);
}

static void sub_resolve_cancel(dtq_rconn *rc, void *arg) {
    DTQ_UNUSED(rc);
    DTQ_UNUSED(arg);
}

static void sub_open(dtq_web_events *ev) {
    dtq_web *w = ev->w;
    if (w->rc) {
        /* one node's address, the resolver's each time (the URL's is the seed list) */
        dtq_redis_url u;
        dtq_rconn_resolver res = {sub_resolve, sub_resolve_cancel, ev};
        memset(&u, 0, sizeof(u));
        u.tls = w->url.tls;
        u.host = w->url.seeds[0].host;
        u.port = w->url.seeds[0].port;
        u.user = w->url.user;
        u.password = w->url.password;
        ev->sub =
            dtq_rconn_new(w->base, &u, w->cfg->connect_timeout_ms, "web-events", sub_state_cb, ev);
        dtq_rconn_set_resolver(ev->sub, &res);
    } else {
        ev->sub = dtq_rconn_new(w->base, &w->url, w->cfg->connect_timeout_ms, "web-events",
                                sub_state_cb, ev);
    }
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

/* The backlog is in: its events (oldest first; NULL: none) are sent, then what was held. */
static void backlog_finish(client *c, const cJSON *events) {
    const cJSON *e;
    c->backlog_pending = 0;
    if (c->closed) {
        c->closed = 0; /* client_end frees the detached request */
        client_end(c);
        return;
    }
    cJSON_ArrayForEach(e, events) {
        char *line = dtq_xasprintf("data: %s\n\n", e->valuestring);
        for (char *p = line + 6; p[2]; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        client_write(c, line, strlen(line));
        free(line);
    }
    if (evbuffer_get_length(c->held) > 0) {
        size_t n = evbuffer_get_length(c->held);
        client_write(c, (const char *)evbuffer_pullup(c->held, -1), n);
        evbuffer_drain(c->held, n);
    }
}

/* The `event` field of each entry of an XREVRANGE reply (newest first), as [id, event]
 * pairs into out. */
static void backlog_entries(const redisReply *r, cJSON *out) {
    if (!r || r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY)
            continue;
        for (size_t k = 0; k + 1 < e->element[1]->elements; k += 2) {
            const redisReply *f = e->element[1]->element[k], *v = e->element[1]->element[k + 1];
            if (f->type == REDIS_REPLY_STRING && !strcmp(f->str, "event") &&
                v->type == REDIS_REPLY_STRING) {
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateString(e->element[0]->str));
                cJSON_AddItemToArray(pair, cJSON_CreateString(v->str));
                cJSON_AddItemToArray(out, pair);
            }
        }
    }
}

/* Of [id, event] pairs, the newest `want` events by stream id, oldest first. */
static cJSON *backlog_newest(cJSON *pairs, int want) {
    int n = cJSON_GetArraySize(pairs);
    cJSON **p = dtq_xcalloc((size_t)n + 1, sizeof(cJSON *)), *out = cJSON_CreateArray();
    int k = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, pairs) p[k++] = it;
    /* insertion sort, newest first: a backlog holds at most 500 per stream */
    for (int i = 1; i < n; i++) {
        cJSON *x = p[i];
        int j = i;
        while (j > 0 && dtq_view_cmp_stream_id(cJSON_GetArrayItem(p[j - 1], 0)->valuestring,
                                               cJSON_GetArrayItem(x, 0)->valuestring) < 0) {
            p[j] = p[j - 1];
            j--;
        }
        p[j] = x;
    }
    for (int i = (n < want ? n : want) - 1; i >= 0; i--)
        cJSON_AddItemToArray(out, cJSON_CreateString(cJSON_GetArrayItem(p[i], 1)->valuestring));
    free(p);
    return out;
}

/* The backlog: XREVRANGE of the events stream, sent oldest first, then what was held. */
static void backlog_cb(redisAsyncContext *ac, void *reply, void *priv) {
    client *c = priv;
    cJSON *pairs = cJSON_CreateArray(), *events;
    DTQ_UNUSED(ac);
    backlog_entries(reply, pairs);
    events = backlog_newest(pairs, DTQ_WEB_EVENTS_BACKLOG_MAX);
    backlog_finish(c, events);
    cJSON_Delete(events);
    cJSON_Delete(pairs);
}

/* The cluster layout: each queue's events stream and {ns}'s, read at once; the newest
 * `want` of them all by stream id. */
typedef struct backlog_fan {
    client *c;
    int left, want;
    cJSON *pairs;
} backlog_fan;

static void backlog_part_cb(redisAsyncContext *ac, void *reply, void *priv) {
    backlog_fan *b = priv;
    cJSON *events;
    DTQ_UNUSED(ac);
    backlog_entries(reply, b->pairs);
    if (--b->left > 0) return;
    events = backlog_newest(b->pairs, b->want);
    backlog_finish(b->c, events);
    cJSON_Delete(events);
    cJSON_Delete(b->pairs);
    free(b);
}

/* XREVRANGE <prefix>:stream:events + - COUNT n on the stream(s) (the cluster layout: of
 * each queue of the index and of {ns}); the client's backlog is pending until they answer. */
static void backlog_read(dtq_web_events *ev, client *c, int64_t n) {
    dtq_web *w = ev->w;
    char count[32];
    const char *argv[6] = {"XREVRANGE", NULL, "+", "-", "COUNT", count};
    backlog_fan *b;
    snprintf(count, sizeof(count), "%lld", (long long)n);
    if (!w->rc) {
        char *k = dtq_key_events_stream(w->prefix);
        argv[1] = k;
        if (dtq_web_command(w, backlog_cb, c, 6, argv) == DTQ_OK) c->backlog_pending = 1;
        free(k);
        return;
    }
    b = dtq_xcalloc(1, sizeof(*b));
    b->c = c;
    b->want = (int)n;
    b->pairs = cJSON_CreateArray();
    b->left = 1; /* held while the reads leave */
    for (int i = 0; i <= w->nindex; i++) {
        char *tag =
            i < w->nindex ? dtq_keys_queue_prefix(w->cfg->ns, w->index[i]) : dtq_xstrdup(w->gtag);
        char *k = dtq_key_events_stream(tag);
        argv[1] = k;
        b->left++;
        if (dtq_web_command(w, backlog_part_cb, b, 6, argv) != DTQ_OK) b->left--;
        free(k);
        free(tag);
    }
    c->backlog_pending = 1;
    backlog_part_cb(NULL, NULL, b); /* the hold (replies never come before this returns) */
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
    if (backlog > 0 && ev->w->redis_up) backlog_read(ev, c, backlog);
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
    free(ev->sub_host);
    free(ev);
}
