/* http.c: evhttp handlers; every answer is computed from in-memory state, so a request
 * never waits on Redis. */
#include "http.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct dtq_http {
    dtq_ctx *ctx;
    struct evhttp *http;
    int serving; /* pushed by the lifecycle: running, not starting or draining */
};

char *dtq_http_render_metrics(const dtq_ctx *ctx) {
    const dtq_counters *c = &ctx->counters;
    const dtq_gauges *g = &ctx->gauges;
    return dtq_xasprintf("# HELP dtq_tasks_processed_total Attempts finished by this worker.\n"
                         "# TYPE dtq_tasks_processed_total counter\n"
                         "dtq_tasks_processed_total %llu\n"
                         "# TYPE dtq_tasks_succeeded_total counter\n"
                         "dtq_tasks_succeeded_total %llu\n"
                         "# TYPE dtq_tasks_failed_total counter\n"
                         "dtq_tasks_failed_total %llu\n"
                         "# TYPE dtq_tasks_retried_total counter\n"
                         "dtq_tasks_retried_total %llu\n"
                         "# TYPE dtq_finish_batches_total counter\n"
                         "dtq_finish_batches_total %llu\n"
                         "# TYPE dtq_active_tasks gauge\n"
                         "dtq_active_tasks %d\n"
                         "# TYPE dtq_concurrency gauge\n"
                         "dtq_concurrency %lld\n"
                         "# TYPE dtq_redis_connected gauge\n"
                         "dtq_redis_connected %d\n"
                         "# TYPE dtq_scheduler_leader gauge\n"
                         "dtq_scheduler_leader %d\n"
                         "# TYPE dtq_scheduler_scheduled gauge\n"
                         "dtq_scheduler_scheduled %lld\n"
                         "# TYPE dtq_scheduler_claimed gauge\n"
                         "dtq_scheduler_claimed %lld\n"
                         "# TYPE dtq_scheduler_promoted_total counter\n"
                         "dtq_scheduler_promoted_total %llu\n",
                         (unsigned long long)c->processed, (unsigned long long)c->succeeded,
                         (unsigned long long)c->failed, (unsigned long long)c->retried,
                         (unsigned long long)c->finish_batches, g->active_tasks,
                         (long long)ctx->cfg->concurrency, dtq_ctx_is_up(ctx), g->scheduler_leader,
                         (long long)g->scheduled, (long long)g->claimed,
                         (unsigned long long)g->promoted);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text) {
    struct evbuffer *buf = evbuffer_new();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4");
    evbuffer_add(buf, text, strlen(text));
    evhttp_send_reply(req, code, reason, buf);
    evbuffer_free(buf);
}

static void request_cb(struct evhttp_request *req, void *arg) {
    dtq_http *h = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path) path = "/";
    if (!strcmp(path, "/healthz")) {
        reply_text(req, 200, "OK", "ok\n");
    } else if (!strcmp(path, "/readyz")) {
        if (dtq_ctx_is_up(h->ctx) && h->serving)
            reply_text(req, 200, "OK", "ready\n");
        else
            reply_text(req, 503, "Service Unavailable", "not ready\n");
    } else if (!strcmp(path, "/metrics")) {
        char *m = dtq_http_render_metrics(h->ctx);
        reply_text(req, 200, "OK", m);
        free(m);
    } else {
        reply_text(req, 404, "Not Found", "not found\n");
    }
}

void dtq_http_set_serving(dtq_http *h, int serving) {
    if (h) h->serving = serving;
}

dtq_http *dtq_http_new(dtq_ctx *ctx, const char *listen, char *err, size_t errlen) {
    dtq_http *h;
    const char *colon = strrchr(listen, ':');
    char *host;
    int64_t port;
    if (!colon || dtq_parse_int64(colon + 1, 1, 65535, &port) != DTQ_OK) {
        snprintf(err, errlen, "[http] listen: '%s' is not host:port", listen);
        return NULL;
    }
    host = dtq_xstrndup(listen, (size_t)(colon - listen));
    h = dtq_xcalloc(1, sizeof(*h));
    h->ctx = ctx;
    h->http = evhttp_new(ctx->base);
    evhttp_set_gencb(h->http, request_cb, h);
    if (evhttp_bind_socket(h->http, *host ? host : "0.0.0.0", (unsigned short)port) != 0) {
        snprintf(err, errlen, "[http] listen: cannot bind %s", listen);
        free(host);
        dtq_http_free(h);
        return NULL;
    }
    free(host);
    return h;
}

void dtq_http_free(dtq_http *h) {
    if (!h) return;
    evhttp_free(h->http);
    free(h);
}
