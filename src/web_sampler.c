/* web_sampler.c: one sample for the history (web_history.h) every [web] sample_interval_s:
 * each queue's depth and pending count from <ns>_stats, and each live worker's outcome
 * counters per queue from <ns>_workers (the read model's worker objects, docs/reference.md
 * 5.5), in one pipelined step (the cluster layout: <ns>_stats per queue of the index, and
 * <ns>_workers with {ns}). A sample is taken even when a reply is an error (no
 * Functions loaded yet, a refusal): what it lacks is left out, as when there is nothing. */
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "keys.h"
#include "rcluster.h"
#include "scope.h"
#include "util.h"
#include "web_api.h"

typedef struct smp {
    dtq_web_job h;
    int64_t ts;
    cJSON *gauges;  /* {queue: [depth, pending]} */
    cJSON *workers; /* <ns>_workers' answer; NULL when it failed */
} smp;

static void smp_free(void *p) {
    smp *s = p;
    cJSON_Delete(s->gauges);
    cJSON_Delete(s->workers);
    free(s);
}

static long long reply_int(const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING) return strtoll(r->str, NULL, 10);
    return 0;
}

/* <ns>_stats: the queue:<q>:depth and queue:<q>:pending pairs. */
static void smp_stats(dtq_rsteps *j, redisReply *r, int a, int b) {
    smp *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type != REDIS_REPLY_ARRAY) return; /* no Functions yet: no gauges */
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        const char *last;
        char *q;
        cJSON *pair;
        int which;
        if (k->type != REDIS_REPLY_STRING || strncmp(k->str, "queue:", 6)) continue;
        last = strrchr(k->str, ':');
        if (!strcmp(last, ":depth"))
            which = 0;
        else if (!strcmp(last, ":pending"))
            which = 1;
        else
            continue;
        q = dtq_xstrndup(k->str + 6, (size_t)(last - k->str - 6));
        pair = cJSON_GetObjectItemCaseSensitive(s->gauges, q);
        if (!pair) {
            pair = cJSON_CreateIntArray((const int[]){0, 0}, 2);
            cJSON_AddItemToObject(s->gauges, q, pair);
        }
        cJSON_ReplaceItemInArray(pair, which,
                                 cJSON_CreateNumber((double)reply_int(r->element[i + 1])));
        free(q);
    }
}

static void smp_workers(dtq_rsteps *j, redisReply *r, int a, int b) {
    smp *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_STRING) s->workers = cJSON_ParseWithLength(r->str, r->len);
}

static int64_t count_of(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* One worker object: itself, then its counters per queue, into the history. */
static void sample_worker(dtq_web_history *h, const cJSON *wo) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(wo, "id"), *q;
    int64_t started_at = count_of(wo, "started_at");
    if (!cJSON_IsString(id)) return;
    dtq_web_history_worker(h, id->valuestring, started_at, NULL, NULL);
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(wo, "queues")) {
        dtq_web_counts c;
        c.succeeded = count_of(q, "succeeded");
        c.failed = count_of(q, "failed");
        c.retried = count_of(q, "retried");
        dtq_web_history_worker(h, id->valuestring, started_at, q->string, &c);
    }
}

static void smp_commit(dtq_rsteps *j) {
    smp *s = dtq_rsteps_state(j);
    dtq_web *w = s->h.w;
    const cJSON *it;
    dtq_web_history_begin(w->history, s->ts);
    cJSON_ArrayForEach(it, s->gauges) {
        dtq_web_history_gauge(w->history, it->string,
                              (int64_t)cJSON_GetArrayItem(it, 0)->valuedouble,
                              (int64_t)cJSON_GetArrayItem(it, 1)->valuedouble);
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(s->workers, "workers")) {
        sample_worker(w->history, it);
    }
    dtq_web_history_end(w->history);
    w->sampling = 0;
    dtq_rsteps_end(j);
}

/* Sends <ns>_stats about `queue` (the cluster layout; NULL: the single layout's one call)
 * and, with workers, <ns>_workers. */
static void smp_send(dtq_rsteps *j, const char *queue, int workers) {
    dtq_web *w = ((smp *)dtq_rsteps_state(j))->h.w;
    dtq_argv a;
    dtq_web_fcall_argv(w, &a, 1, w->fn.stats, queue);
    dtq_rsteps_send(j, smp_stats, 0, 0, &a);
    dtq_argv_deinit(&a);
    if (!workers) return;
    dtq_web_fcall_argv(w, &a, 1, w->fn.workers, NULL);
    dtq_rsteps_send(j, smp_workers, 0, 0, &a);
    dtq_argv_deinit(&a);
}

/* The cluster layout: SMEMBERS {ns}:queues, kept as w's index (/readyz names the queues of
 * it whose slot cannot be reached), then <ns>_stats per queue, pipelined. */
static void smp_index(dtq_rsteps *j, redisReply *r, int a, int b) {
    smp *s = dtq_rsteps_state(j);
    char **q;
    int n = 0;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    q = dtq_scope_index_names(r, &n, NULL);
    if (q) dtq_web_set_index(s->h.w, q, n);
}

static void smp_queues(dtq_rsteps *j) {
    smp *s = dtq_rsteps_state(j);
    dtq_web *w = s->h.w;
    for (int i = 0; i < w->nindex; i++) {
        /* a queue whose slot cannot be reached now is left out of this sample */
        char *tag = dtq_keys_queue_prefix(w->cfg->ns, w->index[i]);
        int up = dtq_rcluster_slot_up(w->rc, dtq_cluster_keyslot(tag, strlen(tag)));
        free(tag);
        if (up) smp_send(j, w->index[i], 0);
    }
    smp_send(j, NULL, 1);
    dtq_rsteps_wait(j, smp_commit);
}

void dtq_web_api_sample(dtq_web *w) {
    smp *s;
    dtq_rsteps *j;
    if (!w->redis_up || w->sampling || (w->rc && w->layout != 1)) return;
    s = dtq_xcalloc(1, sizeof(*s));
    s->h.w = w;
    s->ts = dtq_now_ms();
    s->gauges = cJSON_CreateObject();
    w->sampling = 1;
    j = dtq_web_job_new(&s->h, s, smp_free);
    if (w->rc) {
        dtq_web_index_read(w, j, smp_index);
        dtq_rsteps_wait(j, smp_queues);
        return;
    }
    smp_send(j, NULL, 1);
    dtq_rsteps_wait(j, smp_commit);
}
