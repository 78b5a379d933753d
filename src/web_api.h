/* web_api.h: the JSON API behind dtq-web's page, and the sampler. Every handler answers
 * its request itself, now (bad input) or once its Redis replies are in. The reads
 * (web_read.c) are the library's read Functions (FCALL_RO, docs/reference.md 5.5) with
 * what only dtq-web knows added; the writes (web_write.c) are the admin Functions with the
 * token's actor, so they are audited like redis-cli's; the sampler (web_sampler.c) feeds
 * the history (web_history.h). Each request that needs Redis is a job of steps (rsteps.h)
 * on the one connection; web_api.c holds what they share. Shapes and error codes:
 * docs/reference.md, "dtq-web". */
#ifndef DTQ_WEB_API_H
#define DTQ_WEB_API_H

#include <cjson/cJSON.h>

#include "rsteps.h"
#include "web_core.h"

struct evhttp_request;
struct evkeyvalq;

#define DTQ_WEB_PAGE_MAX 500    /* count= of /api/dlq and /api/audit: more is 400 */
#define DTQ_WEB_LIST_MAX 200    /* count= of /api/queues/<q>: more is 400 */
#define DTQ_WEB_SCAN_MAX 10000  /* entries one request examines for a filter */
#define DTQ_WEB_QUEUES_MAX 1000 /* queues and workers one overview reports */
#define DTQ_WEB_FIELD_MAX 2048  /* bytes of a payload or error shown in a list */
#define DTQ_WEB_IDS_MAX 500     /* task ids of one bulk write */

/* What the router hands a handler; everything is borrowed for the call only. */
typedef struct dtq_web_args {
    const char *arg;               /* the path's parameter (queue, task id), decoded */
    const char *action;            /* the path's last segment (requeue, pause, ...) */
    const char *actor;             /* writes: the token's audit actor */
    const cJSON *body;             /* writes: the JSON object sent, NULL for no body */
    const struct evkeyvalq *query; /* the query string's parameters */
} dtq_web_args;

void dtq_web_api_info(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_overview(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_history(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_queue(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_task(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* GET /api/batches: <ns>_batch_list, the newest batches (reference 4.5) */
void dtq_web_api_batches(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* GET /api/batches/<id>: <ns>_batch_show (reference 4.5) */
void dtq_web_api_batch(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_dlq(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_audit(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* GET /api/scheduled: a page of the schedule (<ns>_scheduled, reference 5.6) */
void dtq_web_api_scheduled(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* GET /api/cron and /api/cron/<name>: <ns>_cron_list's answer as it is (reference 5.8) */
void dtq_web_api_cron(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* POST /api/cron/<name>/pause|resume|run: <ns>_cron_pause, _cron_resume, _cron_run */
void dtq_web_api_cron_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* GET /api/limits: <ns>_limit_list's array as {"limits": [...]} (reference 5.7) */
void dtq_web_api_limits(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* POST /api/limits/<queue>/remove, body {"task_type": ...} optional: <ns>_limit_remove */
void dtq_web_api_limit_remove(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* A periodic schedule's name: [A-Za-z0-9._-]{1,64}. */
int dtq_web_valid_cron_name(const char *s);
/* POST /api/queues/<q>/pause|resume, /api/tasks/<id>/requeue|discard|cancel */
void dtq_web_api_queue_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_task_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_dlq_requeue_all(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_dlq_purge(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* What a read answers instead of the Function's JSON: body is the Function's answer,
 * parsed (borrowed). */
typedef void dtq_web_read_answer_fn(dtq_web *w, struct evhttp_request *req, const cJSON *body);
/* FCALL_RO fn 0 <args...> (NULL-terminated) on w->redis; an error reply, or an answer that
 * is not a JSON object, is answered as the other reads answer it, else answer() answers. */
void dtq_web_read_function(dtq_web *w, struct evhttp_request *req, const char *fn,
                           dtq_web_read_answer_fn *answer, ...);
/* GET /metrics: Prometheus' text format (web_metrics.c) */
void dtq_web_metrics(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* Bulk writes with a body {"ids": [...]} (1-DTQ_WEB_IDS_MAX task ids), answered
 * {ok, action, actor, results: {id: word}, counts: {word: n}}: POST /api/scheduled/run-now
 * and /delete (one <ns>_sched_run_now or <ns>_sched_delete call), POST /api/dlq/requeue and
 * /discard (one <ns>_requeue or <ns>_discard per id, pipelined). */
void dtq_web_api_sched_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_dlq_bulk(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);

/* One sample for the history (web_history.h): <ns>_stats and <ns>_workers. Sets
 * w->sampling until its replies are in. */
void dtq_web_api_sample(dtq_web *w);

/* ------------------------------------------------- shared by the handlers (web_api.c) */

/* What every job of the API keeps first in its state. */
typedef struct dtq_web_job {
    dtq_web *w;
    struct evhttp_request *req; /* NULL: the sampler */
} dtq_web_job;

/* A job (rsteps.h) on w->redis whose state is `state`, a struct that starts with h (freed
 * with state_free). A lost link answers the request 503 redis_unavailable (the sampler:
 * the sample is dropped). */
dtq_rsteps *dtq_web_job_new(dtq_web_job *h, void *state, void (*state_free)(void *));
/* Sends the read of the queue index (dtq_scope_index_read) as a step of j, its reply to
 * fn (whose dtq_scope_index_names gives the queues). */
void dtq_web_index_read(dtq_web *w, dtq_rsteps *j, dtq_rsteps_reply_fn *fn);
/* 1 when Redis is connected (the cluster layout: and the namespace's layout checked);
 * else 0 after answering 503 (or the layout check's error). */
int dtq_web_redis_up(dtq_web *w, struct evhttp_request *req);
/* The queue of a call by task id or schedule name, ?queue=Q: required in the cluster layout
 * (those are unique per queue only; the call goes to its slot), not used in the single
 * layout (NULL). NULL
 * with *bad set after answering 400 (missing on a cluster, or not a queue name). */
const char *dtq_web_call_queue(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a,
                               int *bad);
/* ?queue=Q as a read over every queue takes it: NULL when absent or empty, Q when a queue
 * name, else NULL with *bad set after answering 400. */
const char *dtq_web_query_queue(struct evhttp_request *req, const dtq_web_args *a, int *bad);
/* The query parameter `name`, NULL when absent. */
const char *dtq_web_query(const dtq_web_args *a, const char *name);
/* The integer parameter `name` (def when absent or empty) in [min, max]: 0, or -1 after
 * answering 400. */
int dtq_web_query_int(struct evhttp_request *req, const dtq_web_args *a, const char *name,
                      int64_t def, int64_t min, int64_t max, int64_t *out);
/* A task id as a path may carry it (derived ids of raw entries included). */
int dtq_web_valid_task_id(const char *s);

/* The pure parts of reading a request (fuzzed by tests/fuzz/fuzz_web_input.c). */
/* A query parameter's integer: def when absent or empty; 0, or -1 when not in [min, max]. */
int dtq_web_query_int_value(const char *v, int64_t def, int64_t min, int64_t max, int64_t *out);
/* A request body: 0 with *out a JSON object, or NULL for an empty (or blank) body; -1 with
 * *why ("is not valid JSON", "must be a JSON object") otherwise. */
int dtq_web_parse_body(const char *text, size_t len, cJSON **out, const char **why);
/* The bulk writes' {"ids": [...]}: the number of ids, -1 when not 1 to max of them, -2 when
 * one is not a task id. */
int dtq_web_body_ids(const cJSON *body, int max);
/* Splits "/a/b%2Fc" into decoded segments (caller frees each). -1 when a segment does not
 * decode to a string (a NUL byte) or the path does not start with '/'; -2 when there are
 * more than max. (web.c, the router) */
int dtq_web_split_path(const char *path, char **seg, int max);

#endif
