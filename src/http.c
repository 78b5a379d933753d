/* http.c: the optional HTTP endpoint, a small HTTP/1.1 responder on an evconnlistener and
 * bufferevents. Every answer is computed from in-memory state, so a request never waits on
 * Redis.
 *
 * The port is open to whatever can reach it, so this file bounds what one client can cost.
 * libevent 2.1's evhttp (Debian 12) cannot: it has no cap on connections
 * (evhttp_set_max_connections came in 2.2) and no hook that fires when a connection it
 * accepted closes, so a cap cannot be kept beside it either; its timeout restarts on every
 * read, so a client sending a byte every few seconds holds a connection for hours; and it
 * answers a method it is told to refuse with 501, not 405. Three read-only GET paths need
 * none of its features (bodies, keep-alive, chunked transfers), so the connections are
 * handled here. The connection limits are conn_guard.c's, shared with dtq-web:
 *
 *  - at most DTQ_HTTP_MAX_CONNECTIONS at once. At the cap a new connection takes the place
 *    of the oldest one that has not sent a whole request yet: a flood of idle connections
 *    then cannot starve a health check, whose request comes at once. Only when every open
 *    connection is being answered is the new one closed at accept. The count is exact
 *    (accept_cb adds, conn_free subtracts);
 *  - one deadline per connection, DTQ_HTTP_TIMEOUT_MS from accept to close, whatever the
 *    client does: sends nothing, trickles bytes, or does not read the answer;
 *  - after an accept error (out of descriptors) the listener pauses for a second;
 *  - a request head (request line and headers) of at most DTQ_HTTP_MAX_HEAD bytes, else 431;
 *    headers are counted, not kept, and a body is never buffered (see written_cb);
 *  - GET and HEAD only, anything else 405 with Allow;
 *  - one request per connection (Connection: close), so no connection idles between
 *    requests.
 *
 * /metrics (and any path but the probes) answers only a Host that names the endpoint, by
 * dtq-web's rule (web_auth.h's dtq_web_hosts_request, [http] allowed_hosts for other
 * names): else a page of any site could read it through DNS rebinding. */
#include "http.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "conn_guard.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "rcluster.h"
#include "util.h"
#include "web_auth.h"

typedef struct http_conn http_conn;

struct dtq_http {
    dtq_ctx *ctx;
    struct evconnlistener *listener;
    dtq_guard *guard;     /* the cap, the deadlines, the accept-error pause (conn_guard.h) */
    dtq_web_hosts *hosts; /* the names a request's Host may carry ([http] allowed_hosts) */
    int serving;          /* pushed by the lifecycle: running, not starting or draining */
};

struct http_conn {
    dtq_http *h;
    dtq_guard_conn *gc;
    struct bufferevent *bev;
    size_t head_bytes; /* of the request head consumed so far */
    char *method;      /* from the request line, once read */
    char *target;
    char *host;      /* the first Host header's value */
    int nhost;       /* how many Host headers came */
    int http10;      /* an HTTP/1.0 request */
    int head_only;   /* HEAD: the headers of the answer, not its body */
    int answered;    /* the answer is queued; input is discarded from now on */
    int peer_closed; /* the client closed its side while the answer was being written */
};

/* One unlabelled series with its HELP and TYPE lines. */
static void put_series(FILE *out, const char *name, const char *type, const char *help,
                       long long value) {
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name, value);
}

char *dtq_http_render_metrics(const dtq_ctx *ctx) {
    const dtq_counters *c = &ctx->counters;
    const dtq_gauges *g = &ctx->gauges;
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out) abort();
    put_series(out, "dtq_tasks_processed_total", "counter",
               "Attempts finished by this worker, any outcome (counted when decided).",
               (long long)c->processed);
    put_series(out, "dtq_tasks_succeeded_total", "counter", "Attempts that succeeded.",
               (long long)c->succeeded);
    put_series(out, "dtq_tasks_failed_total", "counter",
               "Attempts that failed permanently (dead-lettered, or failed without a DLQ).",
               (long long)c->failed);
    put_series(out, "dtq_tasks_retried_total", "counter", "Attempts that failed with a retry.",
               (long long)c->retried);
    put_series(out, "dtq_finish_batches_total", "counter",
               "Finish and handback batches Redis accepted.", (long long)c->finish_batches);
    put_series(out, "dtq_active_tasks", "gauge", "Attempts running now.", g->active_tasks);
    put_series(out, "dtq_concurrency", "gauge", "Attempts this worker runs at most at once.",
               (long long)ctx->cfg->concurrency);
    put_series(out, "dtq_redis_connected", "gauge", "1 when Redis is connected and set up, else 0.",
               dtq_ctx_is_up(ctx));
    put_series(out, "dtq_scheduler_leader", "gauge",
               "1 while this worker holds the scheduler's leader lock, else 0.",
               g->scheduler_leader);
    put_series(out, "dtq_scheduler_scheduled", "gauge",
               "Entries of the schedule (delayed tasks and retries) at the last pass.",
               (long long)g->scheduled);
    put_series(out, "dtq_scheduler_claimed", "gauge",
               "Entries of the scheduler's claimed set at the last pass.", (long long)g->claimed);
    put_series(out, "dtq_scheduler_promoted_total", "counter",
               "Due entries this worker's scheduler passes moved to their queues.",
               (long long)g->promoted);
    if (ctx->pools) dtq_pools_render_metrics(ctx->pools, out);
    if (ctx->rc) {
        /* the cluster layout: what the router followed, and what it cannot reach now */
        dtq_rcluster_stats st;
        char unreachable[8];
        dtq_rcluster_stats_get(ctx->rc, &st);
        fprintf(out,
                "# HELP dtq_redis_cluster_redirections_total Cluster redirections followed "
                "(MOVED: a slot's owner changed; ASK: a slot being moved).\n"
                "# TYPE dtq_redis_cluster_redirections_total counter\n"
                "dtq_redis_cluster_redirections_total{kind=\"moved\"} %lld\n"
                "dtq_redis_cluster_redirections_total{kind=\"ask\"} %lld\n",
                st.moved, st.ask);
        put_series(out, "dtq_redis_cluster_map_reads_total", "counter",
                   "Cluster slot maps read (CLUSTER SLOTS), the first included.", st.refreshes);
        put_series(out, "dtq_redis_cluster_links_lost_total", "counter",
                   "Links to cluster nodes lost, or not up within connect_timeout_ms.",
                   st.node_downs);
        put_series(out, "dtq_redis_cluster_unreachable_queues", "gauge",
                   "Served queues whose slot has no reachable primary now.",
                   dtq_ctx_unreachable(ctx, unreachable, sizeof(unreachable)));
    }
    dtq_metrics_render(ctx->metrics, out);
    if (fclose(out) != 0 || !buf) abort();
    return buf;
}

static void conn_free(http_conn *c) {
    dtq_guard_remove(c->gc);
    bufferevent_free(c->bev); /* closes the socket */
    free(c->method);
    free(c->target);
    free(c->host);
    free(c);
}

static void read_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);

/* The answer is out: half-close, so the client sees the end, and go on reading (and
 * discarding) until the client closes or the deadline passes. Closing at once would make
 * the kernel reset the connection if more of the request (a body) is still arriving, and a
 * reset can destroy the answer before the client has read it. */
static void written_cb(struct bufferevent *bev, void *arg) {
    http_conn *c = arg;
    if (c->peer_closed) {
        conn_free(c);
        return;
    }
    shutdown(bufferevent_getfd(bev), SHUT_WR);
    bufferevent_setcb(bev, read_cb, NULL, event_cb, c);
}

static void answer(http_conn *c, int code, const char *reason, const char *body,
                   const char *extra_headers) {
    struct evbuffer *out = bufferevent_get_output(c->bev);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nDate: %s\r\n"
                        "Content-Type: text/plain; version=0.0.4\r\nContent-Length: %zu\r\n"
                        "%sConnection: close\r\n\r\n",
                        code, reason, date, strlen(body), extra_headers ? extra_headers : "");
    if (!c->head_only) evbuffer_add(out, body, strlen(body));
    c->answered = 1;
    dtq_guard_answering(c->gc, 0); /* not evicted now; the deadline still holds */
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_setcb(c->bev, read_cb, written_cb, event_cb, c);
}

int dtq_http_parse_request_line(const char *line, char **method, char **target) {
    const char *sp1 = strchr(line, ' '), *sp2, *version;
    if (!sp1 || sp1 == line) return DTQ_ERR;
    sp2 = strchr(sp1 + 1, ' ');
    if (!sp2 || sp2 == sp1 + 1) return DTQ_ERR;
    version = sp2 + 1;
    if (strlen(version) != 8 || strncmp(version, "HTTP/1.", 7) || version[7] < '0' ||
        version[7] > '9')
        return DTQ_ERR;
    *method = dtq_xstrndup(line, (size_t)(sp1 - line));
    *target = dtq_xstrndup(sp1 + 1, (size_t)(sp2 - sp1 - 1));
    return DTQ_OK;
}

const char *dtq_http_target_path(char *target) {
    char *p = target;
    if (!strncmp(p, "http://", 7) || !strncmp(p, "https://", 8)) {
        p = strchr(strstr(p, "//") + 2, '/');
        if (!p) return "/";
    }
    p[strcspn(p, "?#")] = '\0';
    return p;
}

/* The Host check (dtq_web_hosts_request): 1 to answer; else 0 after answering 400 or 421. */
static int check_host(http_conn *c) {
    const char *refused, *why;
    char *authority = NULL;
    int code;
    if (!strncmp(c->target, "http://", 7) || !strncmp(c->target, "https://", 8)) {
        const char *a = strstr(c->target, "//") + 2;
        authority = dtq_xstrndup(a, strcspn(a, "/?#"));
    }
    code =
        dtq_web_hosts_request(c->h->hosts, c->host, c->nhost, authority, c->http10, &refused, &why);
    if (code == 400) {
        char body[200];
        snprintf(body, sizeof(body), "bad request: %s\n", why);
        answer(c, 400, "Bad Request", body, NULL);
    } else if (code == 421) {
        char *shown = dtq_log_escape(refused), *body;
        body = dtq_xasprintf("this endpoint does not answer for the host '%s' (a name of its "
                             "own goes in [http] allowed_hosts)\n",
                             shown);
        answer(c, 421, "Misdirected Request", body, NULL);
        free(body);
        free(shown);
    }
    free(authority);
    return code == 0;
}

static void respond(http_conn *c) {
    dtq_http *h = c->h;
    const char *path;
    c->head_only = !strcmp(c->method, "HEAD");
    path = dtq_http_target_path(c->target);
    if (!c->head_only && strcmp(c->method, "GET")) {
        answer(c, 405, "Method Not Allowed", "method not allowed\n", "Allow: GET, HEAD\r\n");
    } else if (!strcmp(path, "/healthz")) {
        answer(c, 200, "OK", "ok\n", NULL);
    } else if (!strcmp(path, "/readyz")) {
        char slots[512], body[600];
        if (!dtq_ctx_is_up(h->ctx) || !h->serving) {
            answer(c, 503, "Service Unavailable", "not ready\n", NULL);
        } else if (dtq_ctx_unreachable(h->ctx, slots, sizeof(slots)) > 0) {
            /* the cluster layout: a served queue's slot has no reachable primary */
            snprintf(body, sizeof(body), "not ready: cannot reach %s\n", slots);
            answer(c, 503, "Service Unavailable", body, NULL);
        } else if (h->ctx->pools && dtq_pools_unready(h->ctx->pools, slots, sizeof(slots)) > 0) {
            /* a pool whose processes keep failing: its tasks wait in the schedule */
            snprintf(body, sizeof(body), "not ready: %s\n", slots);
            answer(c, 503, "Service Unavailable", body, NULL);
        } else {
            answer(c, 200, "OK", "ready\n", NULL);
        }
    } else if (!check_host(c)) {
        /* answered: 400 or 421; the probes above say nothing and need no Host */
    } else if (!strcmp(path, "/metrics")) {
        char *m = dtq_http_render_metrics(h->ctx);
        answer(c, 200, "OK", m, NULL);
        free(m);
    } else {
        answer(c, 404, "Not Found", "not found\n", NULL);
    }
}

/* A header line: a Host is kept (the first) and counted; the others are ignored. */
static void note_host(http_conn *c, const char *line) {
    const char *v;
    if (strncasecmp(line, "Host:", 5)) return;
    if (c->nhost++) return;
    v = line + 5 + strspn(line + 5, " \t");
    c->host = dtq_xstrndup(v, strlen(v));
    for (size_t n = strlen(c->host); n > 0 && strchr(" \t", c->host[n - 1]); n--)
        c->host[n - 1] = '\0';
}

/* Reads the request head line by line; the headers are counted against the limit, and
 * only Host is kept (note_host). */
static void read_cb(struct bufferevent *bev, void *arg) {
    http_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char *line;
    size_t n;
    if (c->answered) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF)) != NULL) {
        int bad = 0, end = n == 0 && c->method;
        c->head_bytes += n + 2;
        /* Empty lines before the request line are allowed (RFC 9112 2.2). */
        if (c->head_bytes <= DTQ_HTTP_MAX_HEAD && !c->method && n > 0) {
            bad = dtq_http_parse_request_line(line, &c->method, &c->target) != DTQ_OK;
            c->http10 = !bad && !strcmp(line + n - 8, "HTTP/1.0");
        } else if (c->head_bytes <= DTQ_HTTP_MAX_HEAD && c->method && n > 0) {
            note_host(c, line);
        }
        free(line);
        if (c->head_bytes > DTQ_HTTP_MAX_HEAD) {
            answer(c, 431, "Request Header Fields Too Large", "request head too large\n", NULL);
            return;
        }
        if (bad) {
            answer(c, 400, "Bad Request", "bad request\n", NULL);
            return;
        }
        if (end) {
            respond(c);
            return;
        }
    }
    /* An unfinished line counts too, or one endless line would be read forever. */
    if (c->head_bytes + evbuffer_get_length(in) > DTQ_HTTP_MAX_HEAD)
        answer(c, 431, "Request Header Fields Too Large", "request head too large\n", NULL);
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
    http_conn *c = arg;
    /* The client half-closed after its request: the answer still goes out (written_cb). */
    if ((what & BEV_EVENT_EOF) && c->answered &&
        evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
        c->peer_closed = 1;
        return;
    }
    conn_free(c);
}

/* Asked by the guard (the deadline, or a newer connection at the cap). */
static void close_cb(void *arg) {
    conn_free(arg);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg) {
    dtq_http *h = arg;
    struct bufferevent *bev;
    http_conn *c;
    DTQ_UNUSED(l);
    DTQ_UNUSED(sa);
    DTQ_UNUSED(salen);
    bev = bufferevent_socket_new(h->ctx->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        evutil_closesocket(fd);
        return;
    }
    c = dtq_xcalloc(1, sizeof(*c));
    c->h = h;
    c->bev = bev;
    /* at the cap the oldest connection without a whole request is closed for this one;
     * NULL when every open one is being answered */
    c->gc = dtq_guard_add(h->guard, close_cb, c);
    if (!c->gc) {
        bufferevent_free(bev);
        free(c);
        return;
    }
    bufferevent_setcb(bev, read_cb, NULL, event_cb, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

void dtq_http_set_serving(dtq_http *h, int serving) {
    if (h) h->serving = serving;
}

dtq_http *dtq_http_new(dtq_ctx *ctx, const char *listen, char *err, size_t errlen) {
    struct addrinfo hints, *ai = NULL;
    char *host, portstr[8];
    int port, rc;
    dtq_http *h;
    if (dtq_split_hostport(listen, &host, &port) != DTQ_OK) {
        snprintf(err, errlen, "[http] listen: '%s' is not host:port, :port or [IPv6]:port", listen);
        return NULL;
    }
    snprintf(portstr, sizeof(portstr), "%d", port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* An empty host is every IPv4 address, as before: "::" would need IPv6 on the host. */
    rc = getaddrinfo(*host ? host : "0.0.0.0", portstr, &hints, &ai);
    free(host);
    if (rc != 0) {
        snprintf(err, errlen, "[http] listen: cannot resolve %s: %s", listen, gai_strerror(rc));
        return NULL;
    }
    h = dtq_xcalloc(1, sizeof(*h));
    h->ctx = ctx;
    /* config.c checked [http] allowed_hosts */
    h->hosts = dtq_web_hosts_new(listen, ctx->cfg->http_allowed_hosts, err, errlen);
    if (!h->hosts) {
        freeaddrinfo(ai);
        free(h);
        return NULL;
    }
    /* CLOSE_ON_EXEC: exec handlers must not inherit the listening socket (accepted sockets
     * get SOCK_CLOEXEC from the same flag). */
    h->listener = evconnlistener_new_bind(
        ctx->base, accept_cb, h, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
        -1, ai->ai_addr, (int)ai->ai_addrlen);
    freeaddrinfo(ai);
    if (!h->listener) {
        snprintf(err, errlen, "[http] listen: cannot bind %s: %s", listen, strerror(errno));
        dtq_web_hosts_free(h->hosts);
        free(h);
        return NULL;
    }
    h->guard = dtq_guard_new(ctx->base, "http", DTQ_HTTP_MAX_CONNECTIONS, DTQ_HTTP_TIMEOUT_MS);
    dtq_guard_watch_listener(h->guard, h->listener);
    return h;
}

void dtq_http_free(dtq_http *h) {
    if (!h) return;
    dtq_guard_watch_listener(h->guard, NULL);
    dtq_guard_close_all(h->guard);
    evconnlistener_free(h->listener);
    dtq_guard_free(h->guard);
    dtq_web_hosts_free(h->hosts);
    free(h);
}
