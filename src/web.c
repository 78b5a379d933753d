/* web.c: dtq-web's server: listener, routing, the Host check, the read and write gates,
 * bodies, answers, the page's static files and the sampling timer. The handlers are in
 * web_read.c, web_write.c, web_sampler.c (web_api.h) and web_events.c. */
#include "reply_class.h"
#include "web.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/http_struct.h> /* the request's HTTP version */
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "keys.h"
#include "log.h"
#include "rcluster.h"
#include "scope.h"
#include "tls.h"
#include "util.h"
#include "web_api.h"
#include "web_events.h"

/* The page, embedded at build time by cmake/embed.cmake (web/). */
extern const unsigned char dtq_web_index_html[];
extern const size_t dtq_web_index_html_len;
extern const unsigned char dtq_web_app_js[];
extern const size_t dtq_web_app_js_len;
extern const unsigned char dtq_web_style_css[];
extern const size_t dtq_web_style_css_len;

#define MAX_SEGMENTS 6

/* ----------------------------------------------------------------- connections */

/* evhttp (libevent 2.1) accepts connections itself, has no hook at accept, and restarts
 * its timeout on every byte read. Public hooks are enough to put conn_guard.c's limits on
 * it anyway:
 *  - evhttp_set_bevcb: evhttp asks us for the bufferevent of each connection it accepts,
 *    so we know of every connection at accept (conn_new);
 *  - right after, in the same turn of the loop and before any byte is read (an event
 *    made active from conn_new), the bufferevent's callback argument is evhttp's
 *    connection (bufferevent_getcb): we set its close callback, which evhttp calls when it
 *    frees the connection, whatever the reason (conn_closed).
 * To close a connection (its deadline, or a newer one at the cap) we shut its socket down:
 * evhttp reads the end and frees the connection itself; we never free what it owns. */
typedef struct web_conn {
    dtq_web *w;
    dtq_guard_conn *gc;              /* NULL when refused at the cap */
    struct bufferevent *bev;         /* evhttp's, made by conn_new */
    struct evhttp_connection *evcon; /* once hooked */
    struct event *hook;              /* finds evcon, right after accept */
    dtq_web_closecb *closecb;        /* web_events.c's, chained */
    void *closecb_arg;
    struct web_conn *prev, *next;
} web_conn;

static void conn_shutdown(void *arg) {
    web_conn *wc = arg;
    evutil_socket_t fd = bufferevent_getfd(wc->bev);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

static void conn_forget(web_conn *wc) {
    dtq_web *w = wc->w;
    dtq_guard_remove(wc->gc);
    if (wc->prev)
        wc->prev->next = wc->next;
    else
        w->conns = wc->next;
    if (wc->next) wc->next->prev = wc->prev;
    event_free(wc->hook);
    free(wc);
}

/* evhttp frees the connection. */
static void conn_closed(struct evhttp_connection *evcon, void *arg) {
    web_conn *wc = arg;
    if (wc->closecb) wc->closecb(evcon, wc->closecb_arg);
    conn_forget(wc);
}

static void conn_hook(evutil_socket_t fd, short what, void *arg) {
    web_conn *wc = arg;
    void *cbarg = NULL;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    bufferevent_getcb(wc->bev, NULL, NULL, NULL, &cbarg);
    if (!cbarg) { /* evhttp gave up on it at accept: the bufferevent is gone already */
        conn_forget(wc);
        return;
    }
    wc->evcon = cbarg;
    evhttp_connection_set_closecb(wc->evcon, conn_closed, wc);
    if (!wc->gc) conn_shutdown(wc); /* refused at the cap */
}

static struct bufferevent *conn_new(struct event_base *base, void *arg) {
    dtq_web *w = arg;
    web_conn *wc = dtq_xcalloc(1, sizeof(*wc));
    /* what evhttp makes when there is no bevcb */
    wc->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!wc->bev) abort();
    wc->w = w;
    wc->next = w->conns;
    if (w->conns) w->conns->prev = wc;
    w->conns = wc;
    wc->gc = dtq_guard_add(w->guard, conn_shutdown, wc);
    wc->hook = event_new(base, -1, 0, conn_hook, wc);
    event_active(wc->hook, EV_TIMEOUT, 1); /* runs after evhttp's accept, in this turn */
    return wc->bev;
}

static web_conn *conn_of(dtq_web *w, struct evhttp_connection *evcon) {
    for (web_conn *wc = w->conns; wc && evcon; wc = wc->next)
        if (wc->evcon == evcon) return wc;
    return NULL;
}

static void chain_closecb(dtq_web *w, struct evhttp_connection *evcon, dtq_web_closecb *cb,
                          void *arg) {
    web_conn *wc = conn_of(w, evcon);
    if (wc) {
        wc->closecb = cb;
        wc->closecb_arg = arg;
    } else {
        evhttp_connection_set_closecb(evcon, cb, arg);
    }
}

/* The answer is out; on a kept-alive connection the next request has a new deadline. */
static void request_done_cb(struct evhttp_request *req, void *arg) {
    web_conn *wc = conn_of(arg, evhttp_request_get_connection(req));
    if (wc && wc->gc) dtq_guard_idle(wc->gc);
}

/* A whole request came: its connection is not evicted at the cap, and has no deadline
 * while it is answered (an answer waits on Redis; an event stream lasts: web_events.c
 * caps those). */
static void conn_answering(dtq_web *w, struct evhttp_request *req) {
    web_conn *wc = conn_of(w, evhttp_request_get_connection(req));
    if (!wc || !wc->gc) return;
    dtq_guard_answering(wc->gc, 1);
    evhttp_request_set_on_complete_cb(req, request_done_cb, w);
}

/* The cap: DTQ_WEB_MAX_CONNECTIONS, lowered under a low RLIMIT_NOFILE so that the open
 * connections, and as many evicted ones not closed yet, leave 64 descriptors for Redis, the
 * log and the listener. *max_open: the descriptors connections may hold at once. */
static int max_connections(int *max_open) {
    struct rlimit rl;
    int max = DTQ_WEB_MAX_CONNECTIONS;
    *max_open = 2 * max;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)*max_open + 64) {
        int room = rl.rlim_cur > 64 + 16 ? (int)rl.rlim_cur - 64 : 16;
        *max_open = room;
        max = room / 2 < max ? room / 2 : max;
    }
    return max;
}

/* ----------------------------------------------------------------- static files */

static void serve_static(struct evhttp_request *req, const char *type, const unsigned char *data,
                         size_t len, int is_page) {
    dtq_web_common_headers(req, type);
    /* the files change with the binary only; revalidation is cheap on loopback */
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-cache");
    if (is_page)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Security-Policy",
                          "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'");
    dtq_web_send(req, 200, (const char *)data, len);
}

/* ----------------------------------------------------------------- routing */

typedef void route_fn(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);

typedef struct route {
    const char *seg[MAX_SEGMENTS]; /* "*" is the parameter; NULL ends */
    enum evhttp_cmd_type method;   /* GET routes answer HEAD too */
    route_fn *fn;
} route;

static void api_events(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    dtq_web_events_serve(w->events, req, a->query);
}

#define GET EVHTTP_REQ_GET
#define POST EVHTTP_REQ_POST
static const route routes[] = {
    {{"api", "info"}, GET, dtq_web_api_info},
    {{"api", "overview"}, GET, dtq_web_api_overview},
    {{"api", "history"}, GET, dtq_web_api_history},
    {{"api", "queues", "*"}, GET, dtq_web_api_queue},
    {{"api", "queues", "*", "pause"}, POST, dtq_web_api_queue_write},
    {{"api", "queues", "*", "resume"}, POST, dtq_web_api_queue_write},
    {{"api", "tasks", "*"}, GET, dtq_web_api_task},
    {{"api", "tasks", "*", "requeue"}, POST, dtq_web_api_task_write},
    {{"api", "tasks", "*", "discard"}, POST, dtq_web_api_task_write},
    {{"api", "tasks", "*", "cancel"}, POST, dtq_web_api_task_write},
    {{"api", "batches"}, GET, dtq_web_api_batches},
    {{"api", "batches", "*"}, GET, dtq_web_api_batch},
    {{"api", "dlq"}, GET, dtq_web_api_dlq},
    {{"api", "dlq", "requeue-all"}, POST, dtq_web_api_dlq_requeue_all},
    {{"api", "dlq", "purge"}, POST, dtq_web_api_dlq_purge},
    {{"api", "audit"}, GET, dtq_web_api_audit},
    {{"api", "scheduled"}, GET, dtq_web_api_scheduled},
    {{"api", "scheduled", "run-now"}, POST, dtq_web_api_sched_write},
    {{"api", "scheduled", "delete"}, POST, dtq_web_api_sched_write},
    {{"api", "dlq", "requeue"}, POST, dtq_web_api_dlq_bulk},
    {{"api", "dlq", "discard"}, POST, dtq_web_api_dlq_bulk},
    {{"api", "cron"}, GET, dtq_web_api_cron},
    {{"api", "cron", "*"}, GET, dtq_web_api_cron},
    {{"api", "cron", "*", "pause"}, POST, dtq_web_api_cron_write},
    {{"api", "cron", "*", "resume"}, POST, dtq_web_api_cron_write},
    {{"api", "cron", "*", "run"}, POST, dtq_web_api_cron_write},
    {{"api", "limits"}, GET, dtq_web_api_limits},
    {{"api", "limits", "*", "remove"}, POST, dtq_web_api_limit_remove},
    {{"api", "events"}, GET, api_events},
    {{"metrics"}, GET, dtq_web_metrics},
};
#undef GET
#undef POST

int dtq_web_split_path(const char *path, char **seg, int max) {
    int n = 0;
    const char *p;
    if (!path || *path != '/') return -1;
    p = path + 1;
    for (;;) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *raw = dtq_xstrndup(p, len), *dec;
        size_t declen = 0;
        if (n == max) {
            free(raw);
            for (int i = 0; i < n; i++) free(seg[i]);
            return -2;
        }
        dec = evhttp_uridecode(raw, 0, &declen);
        free(raw);
        if (!dec || strlen(dec) != declen) {
            free(dec);
            goto fail;
        }
        seg[n++] = dec;
        if (!end) break;
        p = end + 1;
    }
    return n;
fail:
    for (int i = 0; i < n; i++) free(seg[i]);
    return -1;
}

static int route_matches(const route *r, char **seg, int n) {
    int i;
    for (i = 0; i < MAX_SEGMENTS && r->seg[i]; i++) {
        if (i >= n) return 0;
        if (strcmp(r->seg[i], "*") ? strcmp(r->seg[i], seg[i]) != 0 : !*seg[i]) return 0;
    }
    return i == n;
}

/* 0 with *out the object (NULL for an empty body); -1 after answering 400. */
static int read_body(struct evhttp_request *req, cJSON **out) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    char *text = dtq_xcalloc(1, len + 1);
    const char *why = NULL;
    int rc;
    evbuffer_copyout(in, text, len);
    rc = dtq_web_parse_body(text, len, out, &why);
    free(text);
    if (rc != 0) dtq_web_reply_error(req, 400, "bad_request", "the request body %s", why);
    return rc;
}

/* A token was sent and is in neither file: one line with the peer's address, rate-limited
 * (a guessing client must not flood the log); the rest are counted in a summary line. */
static void log_wrong_token(dtq_web *w, struct evhttp_request *req, const char *auth) {
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    char *peer = NULL;
    ev_uint16_t port = 0;
    if (!auth || !evcon || !dtq_ratelog_allow(&w->wrong_tokens)) return;
    evhttp_connection_get_peer(evcon, &peer, &port);
    dtq_warn("web: a wrong token from %s port %u: %s %s refused (401)", peer ? peer : "?",
             (unsigned)port, dtq_web_method_name(evhttp_request_get_command(req)),
             dtq_log_nonnull(evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req))));
}

/* The write gate: the actor of the request's token, or NULL after answering 403 (no token
 * configured: read-only) or 401 (no token, or a wrong one). */
static const char *authorize(dtq_web *w, struct evhttp_request *req) {
    const char *actor, *auth;
    if (!w->tokens) {
        dtq_web_reply_error(req, 403, "read_only",
                            "writes are disabled: dtq-web runs without a token file "
                            "(--token-file FILE or [web] token_file)");
        return NULL;
    }
    auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    actor = dtq_web_tokens_check(w->tokens, auth);
    if (!actor) {
        log_wrong_token(w, req, auth);
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Bearer realm=\"dtq-web\"");
        dtq_web_reply_error(req, 401, "unauthorized",
                            "a write needs the header Authorization: Bearer <token> with a "
                            "token of the token file");
        return NULL;
    }
    return actor;
}

/* The read gate, with read tokens configured: 1 when the request carries a read token or
 * a write token; else 0 after answering 401. Both sets are always checked (each check is
 * constant-time in what matched). */
static int authorize_read(dtq_web *w, struct evhttp_request *req) {
    const char *auth;
    int ok;
    if (!w->read_tokens) return 1;
    auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    ok = dtq_web_tokens_check(w->read_tokens, auth) != NULL;
    ok |= dtq_web_tokens_check(w->tokens, auth) != NULL;
    if (ok) return 1;
    log_wrong_token(w, req, auth);
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                      "Bearer realm=\"dtq-web\"");
    dtq_web_reply_error(req, 401, "unauthorized",
                        "a read needs the header Authorization: Bearer <token> with a token of "
                        "the read token file or of the token file");
    return 0;
}

static int misdirected(struct evhttp_request *req, const char *host) {
    char *shown = dtq_log_escape(host);
    dtq_web_reply_error(req, 421, "misdirected_request",
                        "dtq-web does not answer for the host '%s' (a name of its own goes in "
                        "[web] allowed_hosts)",
                        shown);
    free(shown);
    return 0;
}

/* The Host check against DNS rebinding (web_auth.h's dtq_web_hosts_request): 1 when the
 * request names dtq-web; else 0 after answering 421 (a foreign name) or 400 (HTTP/1.1
 * without Host, or Host given twice). A request target in absolute form must name dtq-web
 * too. */
static int check_host(dtq_web *w, struct evhttp_request *req) {
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *host = NULL, *uri_host = uri ? evhttp_uri_get_host(uri) : NULL;
    const char *refused, *why;
    const struct evkeyval *kv;
    char target[300];
    int count = 0, code;
    TAILQ_FOREACH(kv, in, next) {
        if (strcasecmp(kv->key, "Host")) continue;
        if (!count++) host = kv->value;
    }
    if (uri_host) {
        int port = evhttp_uri_get_port(uri);
        int brackets = strchr(uri_host, ':') && *uri_host != '[';
        snprintf(target, sizeof(target), "%s%s%s", brackets ? "[" : "", uri_host,
                 brackets ? "]" : "");
        if (port > 0)
            snprintf(target + strlen(target), sizeof(target) - strlen(target), ":%d", port);
    }
    code = dtq_web_hosts_request(w->hosts, host, count, uri_host ? target : NULL,
                                 req->major == 1 && req->minor == 0, &refused, &why);
    if (code == 400) dtq_web_reply_error(req, 400, "bad_request", "%s", why);
    if (code == 421) return misdirected(req, refused);
    return code == 0;
}

static void dispatch(dtq_web *w, struct evhttp_request *req, char **seg, int n) {
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const route *found = NULL;
    int allow_get = 0, allow_post = 0;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const route *r = &routes[i];
        if (!route_matches(r, seg, n)) continue;
        if (r->method == EVHTTP_REQ_GET) allow_get = 1;
        if (r->method == EVHTTP_REQ_POST) allow_post = 1;
        if (r->method == m || (r->method == EVHTTP_REQ_GET && m == EVHTTP_REQ_HEAD)) found = r;
    }
    if (!found) {
        if (!allow_get && !allow_post) {
            dtq_web_reply_error(req, 404, "not_found", "no such endpoint");
            return;
        }
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          allow_get ? (allow_post ? "GET, HEAD, POST" : "GET, HEAD") : "POST");
        dtq_web_reply_error(req, 405, "method_not_allowed", "%s is not allowed here; use %s",
                            dtq_web_method_name(m), allow_get ? "GET" : "POST");
        return;
    }
    {
        dtq_web_args a = {NULL, NULL, NULL, NULL, NULL};
        struct evkeyvalq query;
        const char *qs = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
        cJSON *body = NULL;
        TAILQ_INIT(&query);
        if (qs && evhttp_parse_query_str(qs, &query) != 0) {
            dtq_web_reply_error(req, 400, "bad_request", "the query string does not parse");
            evhttp_clear_headers(&query);
            return;
        }
        for (int i = 0; i < MAX_SEGMENTS && found->seg[i]; i++)
            if (!strcmp(found->seg[i], "*")) a.arg = seg[i];
        a.action = seg[n - 1];
        a.query = &query;
        if (found->method == EVHTTP_REQ_GET && !authorize_read(w, req)) {
            evhttp_clear_headers(&query);
            return;
        }
        if (found->method == EVHTTP_REQ_POST) {
            if (!(a.actor = authorize(w, req)) || read_body(req, &body) != 0) {
                evhttp_clear_headers(&query);
                return;
            }
            a.body = body;
        }
        found->fn(w, req, &a);
        cJSON_Delete(body);
        evhttp_clear_headers(&query);
    }
}

/* GET /readyz: 200 "ready" once dtq-web can answer from Redis; else 503 "not ready: <why>"
 * (not connected; in the cluster layout also the namespace's layout refused or not checked
 * yet, and the queues of the index whose slot has no reachable primary, named). */
static void readyz(dtq_web *w, struct evhttp_request *req) {
    char slots[512], body[1024];
    int code = 503;
    if (!w->redis_up)
        snprintf(body, sizeof(body), "not ready: not connected to Redis\n");
    else if (w->rc && w->layout < 0)
        snprintf(body, sizeof(body), "not ready: %s\n", w->layout_err ? w->layout_err : "?");
    else if (w->rc && w->layout == 0)
        snprintf(body, sizeof(body), "not ready: checking the namespace's layout\n");
    else if (dtq_web_unreachable(w, slots, sizeof(slots)) > 0)
        snprintf(body, sizeof(body), "not ready: cannot reach %s\n", slots);
    else {
        snprintf(body, sizeof(body), "ready\n");
        code = 200;
    }
    dtq_web_common_headers(req, "text/plain; charset=utf-8");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    dtq_web_send(req, code, body, strlen(body));
}

static void request_cb(struct evhttp_request *req, void *arg) {
    dtq_web *w = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    char *seg[MAX_SEGMENTS];
    int n;
    conn_answering(w, req);
    if (!path || !*path) path = "/";
    /* for probes: no token, no Redis, and before the Host check (it says nothing) */
    if (!strcmp(path, "/healthz")) {
        if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
            dtq_web_reply_error(req, 405, "method_not_allowed", "%s is not allowed here; use GET",
                                dtq_web_method_name(m));
            return;
        }
        dtq_web_common_headers(req, "text/plain; charset=utf-8");
        dtq_web_send(req, 200, "ok\n", 3);
        return;
    }
    if (!strcmp(path, "/readyz")) { /* for probes too: no token, before the Host check */
        if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
            dtq_web_reply_error(req, 405, "method_not_allowed", "%s is not allowed here; use GET",
                                dtq_web_method_name(m));
            return;
        }
        readyz(w, req);
        return;
    }
    if (!check_host(w, req)) return;
    if (strncmp(path, "/api/", 5) && strcmp(path, "/metrics")) {
        const char *file = path + 1;
        if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
            dtq_web_reply_error(req, 405, "method_not_allowed", "%s is not allowed here; use GET",
                                dtq_web_method_name(m));
        } else if (!*file || !strcmp(file, "index.html")) {
            serve_static(req, "text/html; charset=utf-8", dtq_web_index_html,
                         dtq_web_index_html_len, 1);
        } else if (!strcmp(file, "app.js")) {
            serve_static(req, "text/javascript; charset=utf-8", dtq_web_app_js, dtq_web_app_js_len,
                         0);
        } else if (!strcmp(file, "style.css")) {
            serve_static(req, "text/css; charset=utf-8", dtq_web_style_css, dtq_web_style_css_len,
                         0);
        } else {
            dtq_web_reply_error(req, 404, "not_found", "no such page");
        }
        return;
    }
    n = dtq_web_split_path(path, seg, MAX_SEGMENTS);
    if (n == -2) {
        dtq_web_reply_error(req, 404, "not_found", "no such endpoint");
        return;
    }
    if (n < 0) {
        dtq_web_reply_error(req, 400, "bad_request", "the path does not decode");
        return;
    }
    dispatch(w, req, seg, n);
    for (int i = 0; i < n; i++) free(seg[i]);
}

/* ----------------------------------------------------------------- Redis and sampling */

static void redis_state_cb(dtq_rconn *rc, int up, void *arg) {
    dtq_web *w = arg;
    DTQ_UNUSED(rc);
    w->redis_up = up;
    if (up) {
        dtq_info("web: connected to redis");
        dtq_rconn_serving(w->redis);
        dtq_web_api_sample(w); /* a baseline at once, so the first rates come one tick later */
    }
}

/* <ns>_layout 1 {ns} cluster answered: the namespace is laid out for a cluster (the
 * marker written when absent), or refused: WRONG_LAYOUT (a single-layout namespace) is the
 * answer of every request that needs Redis, and /readyz's, until a check passes; judged by
 * dtq_scope_layout_verdict (unchecked: the monitor role, NOPERM, reads on without it). */
static void layout_cb(redisAsyncContext *ac, void *reply, void *priv) {
    dtq_web *w = priv;
    redisReply *r = reply;
    dtq_scope_layout verdict;
    DTQ_UNUSED(ac);
    w->layout_checking = 0;
    if (!r) return; /* the link went: checked again at the next tick */
    verdict = dtq_scope_layout_verdict(r, 1);
    if (verdict != DTQ_SCOPE_LAYOUT_OK && verdict != DTQ_SCOPE_LAYOUT_UNCHECKED) {
        /* reply-text: the same refusal again is logged once */
        if (!w->layout_err || strcmp(w->layout_err, r->str))
            dtq_error("web: redis cluster: %s_layout: %s", w->cfg->ns, r->str);
        free(w->layout_err);
        w->layout_err = dtq_xstrdup(r->str);
        w->layout = -1;
        return;
    }
    if (verdict == DTQ_SCOPE_LAYOUT_UNCHECKED)
        dtq_warn("web: redis cluster: this redis user may not call %s_layout (%s); the "
                 "namespace's layout is not checked",
                 w->cfg->ns, r->str);
    else if (w->layout != 1)
        dtq_info("web: redis cluster: namespace %s is laid out for a cluster", w->cfg->ns);
    free(w->layout_err);
    w->layout_err = NULL;
    if (w->layout != 1) {
        w->layout = 1;
        dtq_web_api_sample(w); /* the baseline */
    }
}

static void layout_check(dtq_web *w) {
    dtq_argv a;
    if (!w->rc || w->layout_checking) return;
    dtq_scope_layout_call(&a, w->cfg->ns, 1);
    if (dtq_rcluster_command(w->rc, layout_cb, w, a.argc, (const char **)a.argv, a.lens) == DTQ_OK)
        w->layout_checking = 1;
    dtq_argv_deinit(&a);
}

static void cluster_state_cb(dtq_rcluster *rc, int up, void *arg) {
    dtq_web *w = arg;
    DTQ_UNUSED(rc);
    w->redis_up = up;
    if (up) {
        dtq_info("web: connected to the redis cluster");
        layout_check(w);
    }
}

static void sample_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_web *w = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (w->rc && w->redis_up && w->layout != 1) layout_check(w);
    if (w->redis_up && !w->sampling) dtq_web_api_sample(w);
}

/* ----------------------------------------------------------------- lifecycle */

/* 1 when the bound socket's address is a loopback one (127/8, ::1, ::ffff:127/104). */
static int bound_to_loopback(struct evhttp_bound_socket *bound) {
    struct sockaddr_storage ss = {0};
    socklen_t len = sizeof(ss);
    evutil_socket_t fd = evhttp_bound_socket_get_fd(bound);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

dtq_web *dtq_web_new(struct event_base *base, dtq_config *cfg, dtq_web_tokens *tokens,
                     dtq_web_tokens *read_tokens, char *err, size_t errlen) {
    dtq_web *w = dtq_xcalloc(1, sizeof(*w));
    w->chain_closecb = chain_closecb;
    char *host = NULL;
    int port;
    w->base = base;
    w->cfg = cfg;
    w->tokens = tokens;
    w->read_tokens = read_tokens;
    w->started_ms = dtq_now_ms();
    w->prefix = dtq_config_prefix(cfg);
    dtq_web_functions_init(&w->fn, cfg->ns);
    w->history = dtq_web_history_new(DTQ_WEB_HISTORY_SAMPLES);
    dtq_ratelog_init(&w->wrong_tokens, base, "web: wrong tokens", 5, 10000);
    {
        char herr[256];
        w->hosts = dtq_web_hosts_new(cfg->web_listen, cfg->web_allowed_hosts, herr, sizeof(herr));
        if (!w->hosts) {
            snprintf(err, errlen, "[web] allowed_hosts: %s", herr);
            goto fail;
        }
    }
    if (dtq_redis_url_parse(cfg->redis_url, &w->url, err, errlen) != DTQ_OK) goto fail;
    if (w->url.cluster) {
        w->gtag = dtq_keys_global_prefix(cfg->ns);
        free(w->prefix);
        w->prefix = dtq_xstrdup(w->gtag);
        if (cfg->cluster_hash_tag)
            dtq_warn("[redis] cluster_hash_tag is ignored with a redis-cluster:// url: every "
                     "queue has a hash tag of its own");
    }
    if (w->url.tls) {
        w->tls = dtq_tls_from_config(cfg, err, errlen);
        if (!w->tls) goto fail;
        if (!cfg->tls_verify)
            dtq_warn("[redis] tls_verify = false: the Redis server's certificate is NOT "
                     "verified");
    }
    if (w->url.cluster) {
        w->rc =
            dtq_rcluster_new(base, &w->url, cfg->connect_timeout_ms, "web", cluster_state_cb, w);
        dtq_rcluster_set_liveness(w->rc, cfg->liveness_timeout_ms);
        if (w->tls) dtq_rcluster_set_tls(w->rc, w->tls);
    } else {
        w->redis = dtq_rconn_new(base, &w->url, cfg->connect_timeout_ms, "web", redis_state_cb, w);
        dtq_rconn_set_liveness(w->redis, cfg->liveness_timeout_ms);
        dtq_rconn_set_tls(w->redis, w->tls);
    }
    w->events = dtq_web_events_new(w);

    w->http = evhttp_new(base);
    if (!w->http) abort();
    /* every method reaches request_cb, which answers 405 itself (evhttp would say 501) */
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_body_size(w->http, DTQ_WEB_MAX_BODY);
    evhttp_set_max_headers_size(w->http, DTQ_WEB_MAX_HEADERS);
    evhttp_set_timeout(w->http, DTQ_WEB_TIMEOUT_S);
    evhttp_set_gencb(w->http, request_cb, w);
    {
        int max_open, max = max_connections(&max_open);
        w->guard = dtq_guard_new(base, "web", max, DTQ_WEB_DEADLINE_MS);
        dtq_guard_set_max_open(w->guard, max_open);
    }
    evhttp_set_bevcb(w->http, conn_new, w);
    if (dtq_split_hostport(cfg->web_listen, &host, &port) != DTQ_OK) {
        snprintf(err, errlen, "[web] listen: '%s' is not host:port", cfg->web_listen);
        goto fail;
    }
    w->bound = evhttp_bind_socket_with_handle(w->http, *host ? host : "0.0.0.0", (uint16_t)port);
    if (!w->bound) {
        snprintf(err, errlen, "[web] listen: cannot listen on %s", cfg->web_listen);
        goto fail;
    }
    w->listen = dtq_xstrdup(cfg->web_listen);
    free(host);
    dtq_guard_watch_listener(w->guard, evhttp_bound_socket_get_listener(w->bound));
    w->loopback = bound_to_loopback(w->bound);
    if (!w->loopback && !w->read_tokens)
        dtq_warn("web: %s is not a loopback address and reads need no token: whoever reaches "
                 "it reads every task's payload and result; set [web] read_token_file",
                 w->listen);
    if (dtq_web_hosts_any(w->hosts))
        dtq_warn("web: [web] allowed_hosts = *: the Host check is off, so a page of any site "
                 "can read the dashboard through a name that resolves to it (DNS rebinding)");
    {
        struct timeval tv = {cfg->web_sample_interval_s, 0};
        w->sample_ev = event_new(base, -1, EV_PERSIST, sample_cb, w);
        evtimer_add(w->sample_ev, &tv);
    }
    if (w->rc)
        dtq_rcluster_start(w->rc);
    else
        dtq_rconn_start(w->redis);
    return w;
fail:
    free(host);
    w->cfg = NULL; /* the caller keeps cfg and tokens on failure */
    w->tokens = NULL;
    w->read_tokens = NULL;
    dtq_web_free(w);
    return NULL;
}

void dtq_web_set_tokens(dtq_web *w, dtq_web_tokens *tokens) {
    dtq_web_tokens_free(w->tokens);
    w->tokens = tokens;
}

void dtq_web_set_read_tokens(dtq_web *w, dtq_web_tokens *read_tokens) {
    dtq_web_tokens_free(w->read_tokens);
    w->read_tokens = read_tokens;
}

void dtq_web_free(dtq_web *w) {
    if (!w) return;
    if (w->sample_ev) event_free(w->sample_ev);
    /* first: pending API calls see NULL and answer 503, backlog reads end */
    dtq_rconn_free(w->redis);
    dtq_rcluster_free(w->rc);
    dtq_web_events_free(w->events); /* ends the streams while evhttp still lives */
    if (w->guard) dtq_guard_watch_listener(w->guard, NULL); /* evhttp_free frees it first */
    if (w->http) evhttp_free(w->http);
    /* evhttp_free closed its connections (conn_closed); what is left was not hooked yet */
    while (w->conns) conn_forget(w->conns);
    dtq_guard_free(w->guard);
    dtq_ratelog_deinit(&w->wrong_tokens);
    dtq_tls_unref(w->tls);
    dtq_redis_url_deinit(&w->url);
    dtq_web_history_free(w->history);
    dtq_web_tokens_free(w->tokens);
    dtq_web_tokens_free(w->read_tokens);
    dtq_web_hosts_free(w->hosts);
    dtq_web_functions_deinit(&w->fn);
    free(w->prefix);
    free(w->gtag);
    free(w->layout_err);
    dtq_web_set_index(w, NULL, 0);
    free(w->listen);
    dtq_config_free(w->cfg);
    free(w);
}
