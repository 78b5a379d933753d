/* web_api.h: the JSON API behind dtq-web's page, and the sampler. Every handler answers
 * its request itself, now (bad input) or once its Redis replies are in; the reads follow
 * known keys only (<p>:queues, <p>:workers, the streams of a queue, one task), never a
 * keyspace SCAN, and page with COUNT; the writes are the admin Functions with the token's
 * actor, so they are audited like redis-cli's. Shapes and error codes: docs/reference.md,
 * "dtq-web". */
#ifndef DTQ_WEB_API_H
#define DTQ_WEB_API_H

#include <cjson/cJSON.h>

#include "web_core.h"

struct evhttp_request;
struct evkeyvalq;

#define DTQ_WEB_PAGE_MAX 500    /* count= of /api/dlq and /api/audit: more is 400 */
#define DTQ_WEB_LIST_MAX 200    /* count= of /api/queues/<q>: more is 400 */
#define DTQ_WEB_SCAN_MAX 10000  /* entries one request examines for a filter */
#define DTQ_WEB_QUEUES_MAX 1000 /* queues and workers one overview reports */
#define DTQ_WEB_FIELD_MAX 2048  /* bytes of a payload or error shown in a list */

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
void dtq_web_api_dlq(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_audit(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
/* POST /api/queues/<q>/pause|resume, /api/tasks/<id>/requeue|discard|cancel */
void dtq_web_api_queue_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_task_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_dlq_requeue_all(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);
void dtq_web_api_dlq_purge(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a);

/* One sample for the history (web_history.h): <ns>_stats and every live worker's hash.
 * Sets w->sampling until its replies are in. */
void dtq_web_api_sample(dtq_web *w);

#endif
