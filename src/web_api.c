/* web_api.c: what the API's handlers share: their jobs on the one Redis connection, and
 * the parsing of query parameters. The reads are in web_read.c, the writes in web_write.c,
 * the sampler in web_sampler.c. A request may have been closed by its client while its
 * job runs: evhttp keeps it until it is answered. */
#include "web_api.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <string.h>

#include "scope.h"
#include "util.h"

static void job_lost(dtq_rsteps *j) {
    dtq_web_job *h = dtq_rsteps_state(j);
    if (h->req)
        dtq_web_reply_error(h->req, 503, "redis_unavailable",
                            "the connection to Redis was lost; try again");
    else
        h->w->sampling = 0;
}

dtq_rsteps *dtq_web_job_new(dtq_web_job *h, void *state, void (*state_free)(void *)) {
    if (h->w->rc) return dtq_rsteps_new_routed(h->w->rc, state, state_free, job_lost);
    return dtq_rsteps_new(h->w->redis, state, state_free, job_lost);
}

int dtq_web_redis_up(dtq_web *w, struct evhttp_request *req) {
    if (!w->redis_up) {
        dtq_web_reply_error(req, 503, "redis_unavailable", "not connected to Redis; retrying");
        return 0;
    }
    if (w->rc && w->layout < 0) { /* WRONG_LAYOUT, or the Functions not loaded */
        dtq_web_reply_redis_error(req, w->layout_err ? w->layout_err : "ERR layout");
        return 0;
    }
    if (w->rc && w->layout == 0) {
        dtq_web_reply_error(req, 503, "redis_unavailable",
                            "checking the namespace's layout (%s_layout); retrying", w->cfg->ns);
        return 0;
    }
    return 1;
}

const char *dtq_web_query_queue(struct evhttp_request *req, const dtq_web_args *a, int *bad) {
    const char *q = dtq_web_query(a, "queue");
    *bad = 0;
    if (!q || !*q) return NULL;
    if (!dtq_valid_queue_name(q)) {
        dtq_web_reply_error(req, 400, "bad_request", "queue must match [A-Za-z0-9._:-]{1,128}");
        *bad = 1;
        return NULL;
    }
    return q;
}

const char *dtq_web_call_queue(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a,
                               int *bad) {
    const char *q = dtq_web_query_queue(req, a, bad);
    if (*bad || !w->rc) return NULL;
    if (!q) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "this namespace is laid out for Redis Cluster: name the queue with "
                            "?queue=Q (task ids and schedule names are unique per queue)");
        *bad = 1;
        return NULL;
    }
    return q;
}

const char *dtq_web_query(const dtq_web_args *a, const char *name) {
    return evhttp_find_header(a->query, name);
}

int dtq_web_query_int_value(const char *v, int64_t def, int64_t min, int64_t max, int64_t *out) {
    if (!v || !*v) {
        *out = def;
        return 0;
    }
    return dtq_parse_int64(v, min, max, out) == DTQ_OK ? 0 : -1;
}

int dtq_web_query_int(struct evhttp_request *req, const dtq_web_args *a, const char *name,
                      int64_t def, int64_t min, int64_t max, int64_t *out) {
    if (dtq_web_query_int_value(dtq_web_query(a, name), def, min, max, out) != 0) {
        dtq_web_reply_error(req, 400, "bad_request", "%s must be an integer in [%lld, %lld]", name,
                            (long long)min, (long long)max);
        return -1;
    }
    return 0;
}

int dtq_web_valid_task_id(const char *s) {
    return s && dtq_valid_name(s, strlen(s), 256);
}

int dtq_web_valid_cron_name(const char *s) {
    return s && dtq_valid_name(s, strlen(s), 64) && !strchr(s, ':');
}

int dtq_web_parse_body(const char *text, size_t len, cJSON **out, const char **why) {
    const char *p = text, *end = NULL;
    *out = NULL;
    while ((size_t)(p - text) < len && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    if ((size_t)(p - text) == len) return 0; /* empty, or blanks only */
    if (memchr(text, '\0', len) || !(*out = cJSON_ParseWithOpts(text, &end, 1))) {
        *why = "is not valid JSON";
        return -1;
    }
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        *why = "must be a JSON object";
        return -1;
    }
    return 0;
}

int dtq_web_body_ids(const cJSON *body, int max) {
    const cJSON *ids = body ? cJSON_GetObjectItemCaseSensitive(body, "ids") : NULL, *it;
    int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
    if (n < 1 || n > max) return -1;
    cJSON_ArrayForEach(it, ids) {
        if (!cJSON_IsString(it) || !dtq_web_valid_task_id(it->valuestring)) return -2;
    }
    return n;
}

void dtq_web_index_read(dtq_web *w, dtq_rsteps *j, dtq_rsteps_reply_fn *fn) {
    dtq_argv a;
    dtq_scope_index_read(&a, w->cfg->ns);
    dtq_rsteps_send(j, fn, 0, 0, &a);
    dtq_argv_deinit(&a);
}
