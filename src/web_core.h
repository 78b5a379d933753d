/* web_core.h: what dtq-web's server (web.c) and its handlers (web_api.h, web_events.c)
 * share, below them all: struct dtq_web, the Function names, the answer helpers and the
 * map of Redis error replies to HTTP statuses (web_core.c).
 *
 * dtq-web, the operator's dashboard: one evhttp server on the event loop that
 * serves the page (web/, embedded at build time) and the JSON API behind it, over one
 * Redis connection of its own (rconn.c: the daemon's URL forms, TLS and reconnects), or on
 * a Redis Cluster over the daemon's router (rcluster.c, one link per primary).
 *
 * This module owns the server: listening, routing (method and path to a handler of
 * web_api.h or web_events.c, 404 and 405 answered here), the Host check of every request
 * (421), the bearer-token gate of every write and, with read tokens, of every read
 * (web_auth.h), request bodies, the answer helpers, the static files and the
 * sampling timer. Reads never write; writes are the admin Functions, nothing else.
 *
 * struct dtq_web is what the handlers share, like ctx.h for the daemon. */
#ifndef DTQ_WEB_CORE_H
#define DTQ_WEB_CORE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "rconn.h"
#include "util.h"
#include "conn_guard.h"
#include "web_auth.h"
#include "web_history.h"

struct event_base;
struct event;
struct evhttp;
struct evhttp_request;
struct evhttp_bound_socket;
struct dtq_tls;
struct dtq_web_events;
struct dtq_rcluster;

#define DTQ_WEB_MAX_BODY 65536      /* bytes of a request body; more is 413 */
#define DTQ_WEB_MAX_HEADERS 16384   /* bytes of request headers; more is 400 */
#define DTQ_WEB_TIMEOUT_S 30        /* evhttp's per-connection read/write timeout */
#define DTQ_WEB_MAX_CONNECTIONS 256 /* open at once (less under a low RLIMIT_NOFILE) */
#define DTQ_WEB_DEADLINE_MS 10000   /* from accept, or the last answer, to a whole request */
#define DTQ_WEB_HISTORY_SAMPLES 720 /* samples kept: an hour at the default 5 s */
#define DTQ_WEB_ACTOR_READONLY NULL

/* Function names "<ns>_<name>": the admin calls, and the reads (docs/reference.md 5.5). */
typedef struct dtq_web_functions {
    char *requeue, *requeue_dlq, *discard, *purge_dlq, *cancel, *pause, *resume;
    char *stats, *overview, *workers, *queue_view, *task_view, *dead_letters, *audit_page;
    char *scheduled, *sched_run_now, *sched_delete;        /* reference 5.6 */
    char *metrics;                                         /* GET /metrics */
    char *cron_list, *cron_pause, *cron_resume, *cron_run; /* reference 5.8 */
    char *limit_list, *limit_remove;                       /* reference 5.7 */
    char *batch_show, *batch_list;                         /* reference 4.5 */
} dtq_web_functions;

void dtq_web_functions_init(dtq_web_functions *f, const char *ns);
void dtq_web_functions_deinit(dtq_web_functions *f);

struct evhttp_connection;
typedef void dtq_web_closecb(struct evhttp_connection *evcon, void *arg);

typedef struct dtq_web {
    struct event_base *base;
    dtq_config *cfg; /* owned: [redis], [web], [log] are used */
    char *prefix;    /* key prefix: ns or {ns} */
    dtq_web_functions fn;
    dtq_rconn *redis; /* every read and write of the API and the sampler (single layout) */
    int redis_up;     /* connected, authenticated, on the right db (cluster: the router up) */
    /* The cluster layout (a redis-cluster:// URL): the router replaces `redis`, every call
     * takes the tag of its slot ({ns:q}, or gtag), and the reads over every queue ask each
     * queue of the index {ns}:queues (web_read.c). */
    struct dtq_rcluster *rc; /* NULL: the single layout */
    char *gtag;              /* "{ns}" in the cluster layout, else NULL */
    int layout;       /* cluster: <ns>_layout answered 1 ok, -1 refused (layout_err), 0 not yet */
    char *layout_err; /* the error reply of <ns>_layout (WRONG_LAYOUT ...), or NULL */
    int layout_checking; /* a <ns>_layout call is in flight */
    char **index;        /* cluster: the queue index as last read (the sampler reads it) */
    int nindex;
    struct dtq_tls *tls; /* rediss:// settings, shared with the events connection */
    dtq_redis_url url;
    dtq_web_tokens *tokens;      /* owned; NULL: read-only, every write is refused */
    dtq_web_tokens *read_tokens; /* owned; NULL: reads need no token */
    dtq_web_hosts *hosts;        /* owned: the names a request's Host may carry */
    int loopback;                /* the listener's address is a loopback one */
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    char *listen; /* as bound, for logs and /api/info */
    dtq_web_history *history;
    struct event *sample_ev; /* every [web] sample_interval_s */
    int sampling;            /* a sample is in flight: the next tick skips */
    struct dtq_web_events *events;
    int64_t started_ms;
    struct dtq_guard *guard; /* the connection limits, shared with http.c (conn_guard.h) */
    struct web_conn *conns;  /* every connection evhttp has, to find one from a request */
    /* web.c's: puts a close callback behind its own, on a connection it holds */
    void (*chain_closecb)(struct dtq_web *w, struct evhttp_connection *evcon, dtq_web_closecb *cb,
                          void *arg);
    dtq_ratelog wrong_tokens; /* 401s for a token that is not in the files */
} dtq_web;

/* ------------------------------------------------------------- routing (web.c) */

/* The start of a Function call: FCALL or FCALL_RO (ro) fn, then in the single layout 0
 * keys, in the cluster layout 1 key, the tag {ns:queue} (queue NULL: {ns}). The caller adds
 * the arguments. */
void dtq_web_fcall_argv(const dtq_web *w, dtq_argv *a, int ro, const char *fn, const char *queue);
/* A command on the connection (single layout) or routed by its key (cluster). DTQ_ERR, and
 * cb is never called, when it cannot be sent. */
int dtq_web_command(dtq_web *w, redisCallbackFn *cb, void *priv, int argc, const char **argv);
/* The names of the queues of the index whose slot has no reachable primary now, as
 * "q4 (slot 13859), ..." into buf; returns how many (0 in the single layout). */
int dtq_web_unreachable(const dtq_web *w, char *buf, size_t size);
/* Replaces the queue index kept in w (the cluster layout's {ns}:queues, sorted). */
void dtq_web_set_index(dtq_web *w, char **queues, int n);

/* ------------------------------------------------------------- answers (web_api, events) */

/* evhttp has one close callback per connection and web.c keeps it for the connection
 * limits (w->chain_closecb): web_events.c sets its own through this (NULL clears it). */
void dtq_web_conn_set_closecb(dtq_web *w, struct evhttp_connection *evcon, dtq_web_closecb *cb,
                              void *arg);

/* Answers with the JSON of body (taken and freed) and the API's headers. */
void dtq_web_reply_json(struct evhttp_request *req, int code, cJSON *body);
/* The API's and the page's common headers, and an answer with a body (HEAD: its length
 * only). */
void dtq_web_common_headers(struct evhttp_request *req, const char *content_type);
/* "GET", "POST", ... for logs and 405 messages. */
const char *dtq_web_method_name(int evhttp_cmd);
void dtq_web_send(struct evhttp_request *req, int code, const char *body, size_t len);
/* Answers {"error": error, "message": <fmt...>} with code. */
void dtq_web_reply_error(struct evhttp_request *req, int code, const char *error, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
/* The HTTP status and error word for an error reply of Redis, a Function's or a command's
 * (the one place that maps them): NOT_FOUND 404, WRONG_STATE 409, INVALID_ARGUMENT 400, a
 * missing Function 503, a namespace laid out the other way (<ns>_layout's WRONG_LAYOUT) 503
 * wrong_layout, an ACL refusal (NOPERM, or a Function's command refused to its
 * caller) 403 redis_permission, others 502 redis_error. */
int dtq_web_function_error(const char *err, const char **error_word);
/* Answers the error reply err as dtq_web_function_error maps it; the message is the reply,
 * and says it is a permission error for a 403. */
void dtq_web_reply_redis_error(struct evhttp_request *req, const char *err);

#endif
