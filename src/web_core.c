/* web_core.c: dtq-web's answer helpers and key names, shared by the server and its
 * handlers. */
#include "web_core.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "keys.h"
#include "log.h"
#include "cluster.h"
#include "rcluster.h"
#include "reply_class.h"
#include "scope.h"

/* ----------------------------------------------------------------- answers */

const char *dtq_web_method_name(int m) {
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    }
    return "?";
}

void dtq_web_common_headers(struct evhttp_request *req, const char *content_type) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", content_type);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
}

void dtq_web_send(struct evhttp_request *req, int code, const char *body, size_t len) {
    struct evbuffer *buf = evbuffer_new();
    if (!buf) abort();
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* 2.1's evhttp would send the body of a HEAD answer: the length only */
        char n[32];
        snprintf(n, sizeof(n), "%zu", len);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Length", n);
    } else {
        evbuffer_add(buf, body, len);
    }
    if (dtq_log_enabled(DTQ_LOG_DEBUG)) {
        char *uri = dtq_log_escape(evhttp_request_get_uri(req));
        dtq_debug("web: %s %s -> %d", dtq_web_method_name(evhttp_request_get_command(req)), uri,
                  code);
        free(uri);
    }
    /* evhttp has no phrase for 421 (it would say "Client Error") */
    evhttp_send_reply(req, code, code == 421 ? "Misdirected Request" : NULL, buf);
    evbuffer_free(buf);
}

void dtq_web_reply_json(struct evhttp_request *req, int code, cJSON *body) {
    char *text = cJSON_PrintUnformatted(body);
    if (!text) abort();
    cJSON_Delete(body);
    dtq_web_common_headers(req, "application/json; charset=utf-8");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    dtq_web_send(req, code, text, strlen(text));
    free(text);
}

void dtq_web_reply_error(struct evhttp_request *req, int code, const char *error, const char *fmt,
                         ...) {
    cJSON *o = cJSON_CreateObject();
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0) abort();
    va_end(ap);
    cJSON_AddStringToObject(o, "error", error);
    cJSON_AddStringToObject(o, "message", msg);
    free(msg);
    dtq_web_reply_json(req, code, o);
}

int dtq_web_function_error(const char *err, const char **error_word) {
    switch (dtq_reply_class_of(err)) {
    case DTQ_REPLY_NOT_FOUND: *error_word = "not_found"; return 404;
    case DTQ_REPLY_WRONG_STATE: *error_word = "wrong_state"; return 409;
    case DTQ_REPLY_QUEUE_FULL: *error_word = "queue_full"; return 409;
    case DTQ_REPLY_INVALID_ARGUMENT: *error_word = "bad_request"; return 400;
    case DTQ_REPLY_NO_FUNCTION: *error_word = "functions_not_loaded"; return 503;
    case DTQ_REPLY_WRONG_LAYOUT: *error_word = "wrong_layout"; return 503;
    case DTQ_REPLY_NOPERM:
    case DTQ_REPLY_NOPERM_IN_SCRIPT: /* a command of a Function refused to its caller */
        *error_word = "redis_permission";
        return 403;
    default: *error_word = "redis_error"; return 502;
    }
}

void dtq_web_reply_redis_error(struct evhttp_request *req, const char *err) {
    const char *word;
    int code = dtq_web_function_error(err, &word);
    if (code == 403)
        dtq_web_reply_error(req, code, word,
                            "permission denied: the Redis user of dtq-web may not do this "
                            "(ACL): %s",
                            err);
    else
        dtq_web_reply_error(req, code, word, "%s", err);
}

/* ----------------------------------------------------------------- Function names */

#define FN(name)                                                                                   \
    { #name, offsetof(dtq_web_functions, name) }
static const struct {
    const char *name;
    size_t off;
} FUNCTIONS[] = {FN(requeue),      FN(requeue_dlq),  FN(discard),    FN(purge_dlq),
                 FN(cancel),       FN(pause),        FN(resume),     FN(stats),
                 FN(overview),     FN(workers),      FN(queue_view), FN(task_view),
                 FN(dead_letters), FN(audit_page),   FN(scheduled),  FN(sched_run_now),
                 FN(metrics),      FN(sched_delete), FN(cron_list),  FN(cron_pause),
                 FN(cron_resume),  FN(cron_run),     FN(limit_list), FN(limit_remove),
                 FN(batch_show),   FN(batch_list)};
#undef FN

void dtq_web_functions_init(dtq_web_functions *f, const char *ns) {
    for (size_t i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++)
        *(char **)((char *)f + FUNCTIONS[i].off) = dtq_keys_function(ns, FUNCTIONS[i].name);
}

void dtq_web_functions_deinit(dtq_web_functions *f) {
    for (size_t i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++) {
        char **p = (char **)((char *)f + FUNCTIONS[i].off);
        free(*p);
        *p = NULL;
    }
}

void dtq_web_conn_set_closecb(dtq_web *w, struct evhttp_connection *evcon, dtq_web_closecb *cb,
                              void *arg) {
    if (w->chain_closecb)
        w->chain_closecb(w, evcon, cb, arg);
    else
        evhttp_connection_set_closecb(evcon, cb, arg);
}

/* ---- the cluster layout: the calls' tags, the router or the connection, the queue index */

void dtq_web_fcall_argv(const dtq_web *w, dtq_argv *a, int ro, const char *fn, const char *queue) {
    char *tag = dtq_scope_tag(w->cfg->ns, w->rc != NULL, queue);
    dtq_scope_fcall(a, ro, fn, tag);
    free(tag);
}

int dtq_web_command(dtq_web *w, redisCallbackFn *cb, void *priv, int argc, const char **argv) {
    if (w->rc) return dtq_rcluster_command(w->rc, cb, priv, argc, argv, NULL);
    return dtq_rconn_command(w->redis, cb, priv, argc, argv, NULL);
}

void dtq_web_set_index(dtq_web *w, char **queues, int n) {
    for (int i = 0; i < w->nindex; i++) free(w->index[i]);
    free(w->index);
    w->index = queues;
    w->nindex = n;
}

int dtq_web_unreachable(const dtq_web *w, char *buf, size_t size) {
    size_t len = 0;
    int n = 0;
    if (size) buf[0] = '\0';
    if (!w->rc) return 0;
    for (int i = 0; i < w->nindex; i++) {
        char *tag = dtq_keys_queue_prefix(w->cfg->ns, w->index[i]);
        int slot = dtq_cluster_keyslot(tag, strlen(tag)), k;
        free(tag);
        if (dtq_rcluster_slot_up(w->rc, slot)) continue;
        k = snprintf(buf + len, len < size ? size - len : 0, "%s%s (slot %d)", n ? ", " : "",
                     w->index[i], slot);
        if (k > 0 && len + (size_t)k < size) len += (size_t)k;
        n++;
    }
    return n;
}
