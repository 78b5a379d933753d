/* ctx.c: building and swapping the shared context. */
#include "ctx.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "metrics.h"
#include "util.h"

/* The table <ns>_fetch and <ns>_reap resolve max_attempts and timeout_ms from at claim:
 * {"d":[default_max_attempts, default_timeout_ms], "t":{task_type:[max, timeout]}}. */
static char *build_policy_json(const dtq_config *cfg) {
    cJSON *root = cJSON_CreateObject(), *d = cJSON_CreateArray(), *t = cJSON_CreateObject();
    char *out;
    cJSON_AddItemToArray(d, cJSON_CreateNumber((double)cfg->default_max_attempts));
    cJSON_AddItemToArray(d, cJSON_CreateNumber(DTQ_DEFAULT_TIMEOUT_MS));
    for (int i = 0; i < cfg->nhandlers; i++) {
        const dtq_handler_conf *h = &cfg->handlers[i];
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(
            pair, cJSON_CreateNumber(
                      (double)(h->max_attempts ? h->max_attempts : cfg->default_max_attempts)));
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)h->timeout_ms));
        cJSON_AddItemToObject(t, h->task_type, pair);
    }
    cJSON_AddItemToObject(root, "d", d);
    cJSON_AddItemToObject(root, "t", t);
    out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!out) abort();
    return out;
}

static void derive(dtq_ctx *ctx) {
    free(ctx->policy_json);
    ctx->policy_json = build_policy_json(ctx->cfg);
    dtq_streams_build(&ctx->streams, ctx->prefix, ctx->cfg->queues, ctx->cfg->nqueues);
    ctx->streams_gen++;
    dtq_metrics_configure(ctx->metrics, ctx->cfg, ctx->handlers);
}

dtq_ctx *dtq_ctx_new(dtq_config *cfg, dtq_handler_registry *reg, struct event_base *base) {
    dtq_ctx *ctx = dtq_xcalloc(1, sizeof(*ctx));
    const char *ns = cfg->ns;
    ctx->cfg = cfg;
    ctx->handlers = reg;
    ctx->base = base;
    ctx->prefix = dtq_config_prefix(cfg);
    ctx->fn.fetch = dtq_keys_function(ns, "fetch");
    ctx->fn.reap = dtq_keys_function(ns, "reap");
    ctx->fn.recover = dtq_keys_function(ns, "recover");
    ctx->fn.deregister = dtq_keys_function(ns, "deregister");
    ctx->fn.finish = dtq_keys_function(ns, "finish");
    ctx->fn.handback = dtq_keys_function(ns, "handback");
    ctx->fn.worker_event = dtq_keys_function(ns, "worker_event");
    ctx->fn.sched_claim = dtq_keys_function(ns, "sched_claim");
    ctx->fn.sched_promote = dtq_keys_function(ns, "sched_promote");
    ctx->fn.lock_refresh = dtq_keys_function(ns, "lock_refresh");
    ctx->fn.lock_release = dtq_keys_function(ns, "lock_release");
    ctx->fn.cron_due = dtq_keys_function(ns, "cron_due");
    ctx->fn.cron_fire = dtq_keys_function(ns, "cron_fire");
    ctx->fn.cron_set = dtq_keys_function(ns, "cron_set");
    ctx->fn.cron_sync = dtq_keys_function(ns, "cron_sync");
    ctx->started_at_ms = dtq_now_ms();
    if (gethostname(ctx->hostname, sizeof(ctx->hostname) - 1) != 0)
        strcpy(ctx->hostname, "unknown");
    ctx->metrics = dtq_metrics_new();
    derive(ctx);
    return ctx;
}

void dtq_ctx_set_config(dtq_ctx *ctx, dtq_config *cfg, dtq_handler_registry *reg) {
    dtq_handler_registry_free(ctx->handlers, 0);
    dtq_config_free(ctx->cfg);
    ctx->cfg = cfg;
    ctx->handlers = reg;
    derive(ctx);
}

void dtq_ctx_free(dtq_ctx *ctx) {
    dtq_functions *f;
    if (!ctx) return;
    f = &ctx->fn;
    dtq_rconn_free(ctx->blk);
    dtq_rconn_free(ctx->cmd);
    dtq_streams_clear(&ctx->streams);
    free(ctx->policy_json);
    free(ctx->prefix);
    free(f->fetch);
    free(f->reap);
    free(f->recover);
    free(f->deregister);
    free(f->finish);
    free(f->handback);
    free(f->worker_event);
    free(f->sched_claim);
    free(f->cron_due);
    free(f->cron_fire);
    free(f->cron_set);
    free(f->cron_sync);
    free(f->sched_promote);
    free(f->lock_refresh);
    free(f->lock_release);
    for (int i = 0; i < ctx->nqcounters; i++) free(ctx->qcounters[i].queue);
    free(ctx->qcounters);
    dtq_metrics_free(ctx->metrics);
    dtq_handler_registry_free(ctx->handlers, 1);
    dtq_config_free(ctx->cfg);
    free(ctx);
}

dtq_queue_counters *dtq_ctx_queue_counters(dtq_ctx *ctx, const char *queue) {
    dtq_queue_counters *q;
    /* a daemon serves a handful of queues: a scan is cheaper than a hash */
    for (int i = 0; i < ctx->nqcounters; i++)
        if (!strcmp(ctx->qcounters[i].queue, queue)) return &ctx->qcounters[i];
    ctx->qcounters =
        dtq_xrealloc(ctx->qcounters, sizeof(*ctx->qcounters) * (size_t)(ctx->nqcounters + 1));
    q = &ctx->qcounters[ctx->nqcounters++];
    memset(q, 0, sizeof(*q));
    q->queue = dtq_xstrdup(queue);
    return q;
}

int dtq_ctx_is_up(const dtq_ctx *ctx) {
    return ctx->ready && dtq_rconn_is_up(ctx->cmd);
}

int dtq_ctx_command(dtq_ctx *ctx, redisCallbackFn *cb, void *priv, const dtq_argv *a) {
    if (!ctx->ready) return DTQ_ERR;
    return dtq_rconn_command(ctx->cmd, cb, priv, a->argc, (const char **)a->argv, a->lens);
}
