/* lease.c: claim renewal and cancel probes for running attempts. */
#include "lease.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "util.h"

struct dtq_lease {
    dtq_ctx *ctx;
    dtq_executor *ex;
    dtq_finisher *fin;
    struct event *tick_ev;
};

/* One XCLAIM per stream, built up as entries are collected. Streams are taken from each
 * entry itself, not from the served-stream table: a reload may stop serving a queue whose
 * tasks still run here, and their claims must be kept all the same. */
typedef struct claim_batch {
    dtq_argv *per_stream; /* XCLAIM <stream> <group> <worker> 0 <ids...> */
    int n;
    const char *worker_id;
} claim_batch;

static void add_entry(claim_batch *b, const char *stream, const char *entry_id) {
    dtq_argv *a = NULL;
    for (int i = 0; i < b->n && !a; i++)
        if (!strcmp(b->per_stream[i].argv[1], stream)) a = &b->per_stream[i];
    if (!a) {
        b->per_stream = dtq_xrealloc(b->per_stream, sizeof(dtq_argv) * (size_t)(b->n + 1));
        a = &b->per_stream[b->n++];
        dtq_argv_init(a);
        dtq_argv_adds(a, "XCLAIM");
        dtq_argv_adds(a, stream);
        dtq_argv_adds(a, DTQ_GROUP);
        dtq_argv_adds(a, b->worker_id);
        dtq_argv_adds(a, "0");
    }
    dtq_argv_adds(a, entry_id);
}

static void add_task(const dtq_task *t, void *arg) {
    add_entry(arg, t->stream, t->entry_id);
}

static void add_unwritten(const char *stream, const char *entry_id, void *arg) {
    add_entry(arg, stream, entry_id);
}

static void renew_claims(dtq_lease *l) {
    claim_batch b = {NULL, 0, l->ctx->cfg->worker_id};
    dtq_executor_each_task(l->ex, add_task, &b);
    dtq_finisher_each_entry(l->fin, add_unwritten, &b);
    for (int i = 0; i < b.n; i++) {
        dtq_argv_adds(&b.per_stream[i], "IDLE");
        dtq_argv_adds(&b.per_stream[i], "0");
        dtq_argv_adds(&b.per_stream[i], "JUSTID");
        dtq_ctx_command(l->ctx, NULL, NULL, &b.per_stream[i]);
        dtq_argv_deinit(&b.per_stream[i]);
    }
    free(b.per_stream);
}

typedef struct cancel_probe {
    dtq_lease *l;
    char *task_id;
    int64_t attempt;
} cancel_probe;

static void cancel_probe_cb(redisAsyncContext *ac, void *reply_ptr, void *priv) {
    cancel_probe *p = priv;
    redisReply *reply = reply_ptr;
    DTQ_UNUSED(ac);
    if (reply && reply->type == REDIS_REPLY_STRING && !strcmp(reply->str, "1"))
        dtq_executor_cancel(p->l->ex, p->task_id, p->attempt);
    free(p->task_id);
    free(p);
}

static void probe_cancel(const dtq_task *t, void *arg) {
    dtq_lease *l = arg;
    cancel_probe *p = dtq_xcalloc(1, sizeof(*p));
    char *prefix = dtq_ctx_queue_prefix(l->ctx, t->queue);
    char *key = dtq_key_task(prefix, t->id);
    dtq_argv a;
    p->l = l;
    p->task_id = dtq_xstrdup(t->id);
    p->attempt = t->attempt;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HGET");
    dtq_argv_adds(&a, key);
    dtq_argv_adds(&a, "cancel_requested");
    if (dtq_ctx_command(l->ctx, cancel_probe_cb, p, &a) != DTQ_OK) {
        free(p->task_id);
        free(p);
    }
    dtq_argv_deinit(&a);
    free(key);
    free(prefix);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_lease *l = arg;
    struct timeval tv = {l->ctx->cfg->heartbeat_interval_s, 0};
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (dtq_ctx_is_up(l->ctx)) {
        renew_claims(l);
        dtq_executor_each_task(l->ex, probe_cancel, l);
    }
    evtimer_add(l->tick_ev, &tv);
}

dtq_lease *dtq_lease_new(dtq_ctx *ctx, dtq_executor *ex, dtq_finisher *fin) {
    dtq_lease *l = dtq_xcalloc(1, sizeof(*l));
    l->ctx = ctx;
    l->ex = ex;
    l->fin = fin;
    l->tick_ev = evtimer_new(ctx->base, tick_cb, l);
    return l;
}

void dtq_lease_start(dtq_lease *l) {
    evtimer_del(l->tick_ev); /* renews now, not at the next tick of the old schedule */
    tick_cb(-1, 0, l);
}

void dtq_lease_free(dtq_lease *l) {
    if (!l) return;
    event_free(l->tick_ev);
    free(l);
}
