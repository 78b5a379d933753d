/* heartbeat.c: periodic liveness. */
#include "heartbeat.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "pool.h"
#include "util.h"

struct dtq_heartbeat {
    dtq_ctx *ctx;
    struct event *tick_ev;
    char *key;
    char *workers_key;
    char *restart_key; /* <p>:pool_restart */
    const char *status;
};

typedef struct beat_done {
    void (*cb)(void *arg);
    void *arg;
} beat_done;

static void beat_done_cb(redisAsyncContext *ac, void *r, void *priv) {
    beat_done *d = priv;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(r);
    d->cb(d->arg);
    free(d);
}

static void beat(dtq_heartbeat *hb, void (*cb)(void *arg), void *arg) {
    dtq_ctx *ctx = hb->ctx;
    const dtq_config *cfg = ctx->cfg;
    dtq_argv a;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HSET");
    dtq_argv_adds(&a, hb->key);
    dtq_argv_adds(&a, "worker_id");
    dtq_argv_adds(&a, cfg->worker_id);
    dtq_argv_adds(&a, "hostname");
    dtq_argv_adds(&a, ctx->hostname);
    dtq_argv_adds(&a, "pid");
    dtq_argv_addll(&a, getpid());
    dtq_argv_adds(&a, "started_at");
    dtq_argv_addll(&a, ctx->started_at_ms);
    dtq_argv_adds(&a, "last_heartbeat");
    dtq_argv_addll(&a, dtq_now_ms());
    dtq_argv_adds(&a, "active_tasks");
    dtq_argv_addll(&a, ctx->gauges.active_tasks);
    dtq_argv_adds(&a, "concurrency");
    dtq_argv_addll(&a, cfg->concurrency);
    dtq_argv_adds(&a, "tasks_processed");
    dtq_argv_addll(&a, (long long)ctx->counters.processed);
    dtq_argv_adds(&a, "tasks_failed");
    dtq_argv_addll(&a, (long long)ctx->counters.failed);
    dtq_argv_adds(&a, "tasks_retried");
    dtq_argv_addll(&a, (long long)ctx->counters.retried);
    dtq_argv_adds(&a, "status");
    dtq_argv_adds(&a, hb->status);
    dtq_argv_adds(&a, "version");
    dtq_argv_adds(&a, DTQ_VERSION);
    /* the queues it serves, in serving order: what tells a producer whether anyone will run
     * its task (dtqctl enqueue warns when no live worker serves the queue) */
    dtq_argv_adds(&a, "serves");
    {
        char *joined = dtq_xstrdup("");
        for (int i = 0; i < cfg->nqueues; i++) {
            char *next = dtq_xasprintf("%s%s%s", joined, i ? " " : "", cfg->queues[i]);
            free(joined);
            joined = next;
        }
        dtq_argv_adds(&a, joined);
        free(joined);
    }
    if (ctx->pools) { /* "NAME:ready/wanted ...", or "" without pools */
        char pools[1024];
        dtq_pools_summary(ctx->pools, pools, sizeof(pools));
        dtq_argv_adds(&a, "pools");
        dtq_argv_adds(&a, pools);
    }
    /* per-queue outcomes for dashboards (dtq-web): the same HSET, nothing per task */
    for (int i = 0; i < ctx->nqcounters; i++) {
        const dtq_queue_counters *q = &ctx->qcounters[i];
        dtq_argv_addf(&a, "q:%s:succeeded", q->queue);
        dtq_argv_addll(&a, (long long)q->succeeded);
        dtq_argv_addf(&a, "q:%s:failed", q->queue);
        dtq_argv_addll(&a, (long long)q->failed);
        dtq_argv_addf(&a, "q:%s:retried", q->queue);
        dtq_argv_addll(&a, (long long)q->retried);
    }
    dtq_ctx_command(ctx, NULL, NULL, &a);
    dtq_argv_deinit(&a);

    if (strcmp(hb->status, "stopped")) { /* a stopped worker has left <prefix>:workers */
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "SADD");
        dtq_argv_adds(&a, hb->workers_key);
        dtq_argv_adds(&a, cfg->worker_id);
        dtq_ctx_command(ctx, NULL, NULL, &a);
        dtq_argv_deinit(&a);
    }

    dtq_argv_init(&a);
    dtq_argv_adds(&a, "EXPIRE");
    dtq_argv_adds(&a, hb->key);
    dtq_argv_addll(&a, cfg->heartbeat_interval_s * 3);
    if (cb) {
        beat_done *d = dtq_xcalloc(1, sizeof(*d));
        d->cb = cb;
        d->arg = arg;
        if (dtq_ctx_command(ctx, beat_done_cb, d, &a) != DTQ_OK) {
            free(d);
            cb(arg);
        }
    } else {
        dtq_ctx_command(ctx, NULL, NULL, &a);
    }
    dtq_argv_deinit(&a);
}

/* The restart stamps of the pools asked for (HMGET, in the order of the names). */
typedef struct stamps_read {
    dtq_ctx *ctx;
    char **names;
    int n;
} stamps_read;

static void stamps_cb(redisAsyncContext *ac, void *reply_ptr, void *priv) {
    stamps_read *s = priv;
    redisReply *r = reply_ptr;
    DTQ_UNUSED(ac);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)s->n && s->ctx->pools)
        for (int i = 0; i < s->n; i++)
            if (r->element[i]->type == REDIS_REPLY_STRING)
                dtq_pools_restart_stamp(s->ctx->pools, s->names[i],
                                        strtoll(r->element[i]->str, NULL, 10));
    for (int i = 0; i < s->n; i++) free(s->names[i]);
    free(s->names);
    free(s);
}

static void add_name(const char *name, void *arg) {
    stamps_read *s = arg;
    s->names = dtq_xrealloc(s->names, sizeof(char *) * (size_t)(s->n + 1));
    s->names[s->n++] = dtq_xstrdup(name);
}

/* `dtqctl pool restart` (<ns>_pool_restart) left a stamp for a pool: read at every beat. */
static void read_restart_stamps(dtq_heartbeat *hb) {
    stamps_read *s = dtq_xcalloc(1, sizeof(*s));
    dtq_argv a;
    s->ctx = hb->ctx;
    if (hb->ctx->pools) dtq_pools_each_name(hb->ctx->pools, add_name, s);
    if (!s->n) {
        free(s);
        return;
    }
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HMGET");
    dtq_argv_adds(&a, hb->restart_key);
    for (int i = 0; i < s->n; i++) dtq_argv_adds(&a, s->names[i]);
    if (dtq_ctx_command(hb->ctx, stamps_cb, s, &a) != DTQ_OK) stamps_cb(NULL, NULL, s);
    dtq_argv_deinit(&a);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_heartbeat *hb = arg;
    struct timeval tv = {hb->ctx->cfg->heartbeat_interval_s, 0};
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (dtq_ctx_is_up(hb->ctx)) {
        beat(hb, NULL, NULL);
        read_restart_stamps(hb);
    }
    evtimer_add(hb->tick_ev, &tv);
}

void dtq_heartbeat_set_status(dtq_heartbeat *hb, const char *status, void (*cb)(void *arg),
                              void *arg) {
    hb->status = status;
    if (dtq_ctx_is_up(hb->ctx))
        beat(hb, cb, arg);
    else if (cb)
        cb(arg);
}

dtq_heartbeat *dtq_heartbeat_new(dtq_ctx *ctx) {
    dtq_heartbeat *hb = dtq_xcalloc(1, sizeof(*hb));
    hb->ctx = ctx;
    hb->tick_ev = evtimer_new(ctx->base, tick_cb, hb);
    hb->key = dtq_key_worker(ctx->prefix, ctx->cfg->worker_id);
    hb->workers_key = dtq_key_workers(ctx->prefix);
    hb->restart_key = dtq_key_pool_restart(ctx->prefix);
    hb->status = "running";
    return hb;
}

void dtq_heartbeat_start(dtq_heartbeat *hb) {
    if (!evtimer_pending(hb->tick_ev, NULL)) tick_cb(-1, 0, hb);
}

void dtq_heartbeat_free(dtq_heartbeat *hb) {
    if (!hb) return;
    event_free(hb->tick_ev);
    free(hb->key);
    free(hb->workers_key);
    free(hb->restart_key);
    free(hb);
}
