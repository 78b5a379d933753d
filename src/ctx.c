/* ctx.c: building and swapping the shared context. */
#include "ctx.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "metrics.h"
#include "rcluster.h"
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

static void free_qstate(dtq_qstate *st, int n) {
    for (int q = 0; q < n; q++) free(st[q].queue);
    free(st);
}

/* The per-queue states of the new table, each kept from the old one by name. */
static void rebuild_qstate(dtq_ctx *ctx, dtq_qstate *old, int nold) {
    int n = ctx->streams.nqueues;
    ctx->qstate = dtq_xcalloc((size_t)n + 1, sizeof(*ctx->qstate));
    for (int q = 0; q < n; q++) {
        for (int i = 0; i < nold; i++)
            if (!strcmp(old[i].queue, ctx->streams.queues[q])) ctx->qstate[q] = old[i];
        ctx->qstate[q].queue = dtq_xstrdup(ctx->streams.queues[q]);
    }
}

static void derive(dtq_ctx *ctx) {
    dtq_qstate *old = ctx->qstate;
    int nold = ctx->streams.nqueues;
    free(ctx->policy_json);
    ctx->policy_json = build_policy_json(ctx->cfg);
    if (ctx->gtag)
        dtq_streams_build_cluster(&ctx->streams, ctx->cfg->ns, ctx->cfg->queues, ctx->cfg->nqueues);
    else
        dtq_streams_build(&ctx->streams, ctx->prefix, ctx->cfg->queues, ctx->cfg->nqueues);
    rebuild_qstate(ctx, old, old ? nold : 0);
    free_qstate(old, old ? nold : 0);
    ctx->streams_gen++;
    dtq_metrics_configure(ctx->metrics, ctx->cfg, ctx->handlers);
}

dtq_ctx *dtq_ctx_new(dtq_config *cfg, dtq_handler_registry *reg, struct event_base *base,
                     int cluster) {
    dtq_ctx *ctx = dtq_xcalloc(1, sizeof(*ctx));
    const char *ns = cfg->ns;
    ctx->cfg = cfg;
    ctx->handlers = reg;
    ctx->base = base;
    if (cluster) {
        ctx->gtag = dtq_keys_global_prefix(ns);
        ctx->prefix = dtq_xstrdup(ctx->gtag);
    } else {
        ctx->prefix = dtq_config_prefix(cfg);
    }
    ctx->fn.fetch = dtq_keys_function(ns, "fetch");
    ctx->fn.reap = dtq_keys_function(ns, "reap");
    ctx->fn.recover = dtq_keys_function(ns, "recover");
    ctx->fn.deregister = dtq_keys_function(ns, "deregister");
    ctx->fn.finish = dtq_keys_function(ns, "finish");
    ctx->fn.handback = dtq_keys_function(ns, "handback");
    ctx->fn.worker_event = dtq_keys_function(ns, "worker_event");
    ctx->fn.progress = dtq_keys_function(ns, "progress");
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
    dtq_rcluster_free(ctx->rc);
    free_qstate(ctx->qstate, ctx->streams.nqueues);
    dtq_streams_clear(&ctx->streams);
    free(ctx->policy_json);
    free(ctx->prefix);
    free(ctx->gtag);
    free(f->fetch);
    free(f->reap);
    free(f->recover);
    free(f->deregister);
    free(f->finish);
    free(f->handback);
    free(f->worker_event);
    free(f->progress);
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
    if (ctx->rc) return ctx->ready && dtq_rcluster_is_up(ctx->rc);
    return ctx->ready && dtq_rconn_is_up(ctx->cmd);
}

int dtq_ctx_command(dtq_ctx *ctx, redisCallbackFn *cb, void *priv, const dtq_argv *a) {
    if (!ctx->ready) return DTQ_ERR;
    if (ctx->rc)
        return dtq_rcluster_command(ctx->rc, cb, priv, a->argc, (const char **)a->argv, a->lens);
    return dtq_rconn_command(ctx->cmd, cb, priv, a->argc, (const char **)a->argv, a->lens);
}

int dtq_ctx_command_at(dtq_ctx *ctx, const char *key, redisCallbackFn *cb, void *priv,
                       const dtq_argv *a) {
    if (!ctx->ready) return DTQ_ERR;
    if (ctx->rc)
        return dtq_rcluster_command_at(ctx->rc, key, cb, priv, a->argc, (const char **)a->argv,
                                       a->lens);
    return dtq_rconn_command(ctx->cmd, cb, priv, a->argc, (const char **)a->argv, a->lens);
}

char *dtq_ctx_queue_prefix(const dtq_ctx *ctx, const char *queue) {
    return ctx->gtag ? dtq_keys_queue_prefix(ctx->cfg->ns, queue) : dtq_xstrdup(ctx->prefix);
}

int dtq_ctx_queue_up(const dtq_ctx *ctx, int q) {
    if (!ctx->rc) return 1;
    return dtq_rcluster_slot_up(ctx->rc, ctx->streams.slots[q]);
}

int dtq_ctx_queue_node(const dtq_ctx *ctx, int q) {
    if (!ctx->rc) return 0;
    return dtq_rcluster_slot_node(ctx->rc, ctx->streams.slots[q]);
}

int dtq_ctx_key_up(const dtq_ctx *ctx, const char *key) {
    if (!ctx->rc) return 1;
    return dtq_rcluster_slot_up(ctx->rc, dtq_cluster_keyslot(key, strlen(key)));
}

dtq_qstate *dtq_ctx_qstate(dtq_ctx *ctx, const char *queue) {
    for (int q = 0; q < ctx->streams.nqueues; q++)
        if (!strcmp(ctx->qstate[q].queue, queue)) return &ctx->qstate[q];
    return NULL;
}

int dtq_ctx_queue_fetchable(const dtq_ctx *ctx, int q) {
    const dtq_qstate *st = &ctx->qstate[q];
    return dtq_ctx_queue_up(ctx, q) && !st->need_recover && !st->recovering;
}

int dtq_ctx_unreachable(const dtq_ctx *ctx, char *buf, size_t size) {
    size_t len = 0;
    int n = 0;
    if (size) buf[0] = '\0';
    if (!ctx->rc) return 0;
    for (int q = 0; q < ctx->streams.nqueues; q++) {
        int w;
        if (dtq_ctx_queue_up(ctx, q)) continue;
        w = snprintf(buf + len, len < size ? size - len : 0, "%s%s (slot %d)", n ? ", " : "",
                     ctx->streams.queues[q], ctx->streams.slots[q]);
        if (w > 0 && len + (size_t)w < size) len += (size_t)w;
        n++;
    }
    return n;
}
