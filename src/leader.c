/* leader.c: the scheduler leader's lock and the state it gives (leader.h). */
#include "leader.h"

#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "keys.h"
#include "log.h"
#include "scope.h"
#include "util.h"

typedef struct subscriber {
    dtq_leader_change_fn *fn;
    void *arg;
} subscriber;

struct dtq_leader {
    dtq_ctx *ctx;
    int leading; /* the lock is ours, as its last take or refresh said */
    char *lock_key;
    dtq_leader_try_fn *done; /* the try in flight (one at a time) */
    void *done_arg;
    int forget; /* released while a try was in flight: its reply changes nothing */
    subscriber subs[DTQ_LEADER_MAX_SUBSCRIBERS];
    int nsubs;
};

/* The one place leadership changes: the log line, /metrics' gauge, the subscribers. */
static void set_leading(dtq_leader *l, int leading, const char *why) {
    if (l->leading == leading) return;
    if (leading)
        dtq_info("scheduler: this worker is now the leader");
    else if (why)
        dtq_warn("scheduler: no longer leader (%s)", why);
    l->leading = leading;
    l->ctx->gauges.scheduler_leader = leading;
    for (int i = 0; i < l->nsubs; i++) l->subs[i].fn(l->subs[i].arg, leading);
}

static void lock_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_leader *l = priv;
    redisReply *reply = r;
    dtq_leader_try_fn *done = l->done;
    void *arg = l->done_arg;
    enum dtq_leader_outcome out;
    DTQ_UNUSED(ac);
    l->done = NULL;
    if (l->forget) {
        l->forget = 0;
        out = reply ? DTQ_LEADER_FOLLOWS : DTQ_LEADER_NO_REPLY;
    } else if (!reply) {
        if (dtq_ctx_cluster(l->ctx)) set_leading(l, 0, "lock node lost");
        out = DTQ_LEADER_NO_REPLY;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("scheduler: lock command failed: %s", reply->str);
        set_leading(l, 0, "lock error");
        out = DTQ_LEADER_FOLLOWS;
    } else if ((reply->type == REDIS_REPLY_STATUS && !strcmp(reply->str, "OK")) ||
               (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)) {
        /* SET NX answers OK or nil; the refresh Function answers 1 or 0. */
        set_leading(l, 1, NULL);
        out = DTQ_LEADER_LEADS;
    } else {
        set_leading(l, 0, "lock held by another worker");
        out = DTQ_LEADER_FOLLOWS;
    }
    if (done) done(arg, out);
}

dtq_leader *dtq_leader_new(dtq_ctx *ctx) {
    dtq_leader *l = dtq_xcalloc(1, sizeof(*l));
    l->ctx = ctx;
    l->lock_key = dtq_key_scheduler_lock(ctx->prefix);
    return l;
}

void dtq_leader_free(dtq_leader *l) {
    if (!l) return;
    free(l->lock_key);
    free(l);
}

void dtq_leader_subscribe(dtq_leader *l, dtq_leader_change_fn *fn, void *arg) {
    if (l->nsubs >= DTQ_LEADER_MAX_SUBSCRIBERS) abort(); /* a wiring mistake */
    l->subs[l->nsubs].fn = fn;
    l->subs[l->nsubs].arg = arg;
    l->nsubs++;
}

int dtq_leader_leads(const dtq_leader *l) {
    return l->leading;
}

int dtq_leader_try(dtq_leader *l, dtq_leader_try_fn *done, void *arg) {
    dtq_ctx *ctx = l->ctx;
    dtq_argv a;
    int rc;
    if (l->leading) {
        dtq_call_lock_refresh(&a, ctx->fn.lock_refresh, l->lock_key, ctx->cfg->worker_id,
                              ctx->cfg->leader_lock_ms);
        dtq_scope_tag_call(&a, ctx->gtag);
    } else {
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "SET");
        dtq_argv_adds(&a, l->lock_key);
        dtq_argv_adds(&a, ctx->cfg->worker_id);
        dtq_argv_adds(&a, "NX");
        dtq_argv_adds(&a, "PX");
        dtq_argv_addll(&a, ctx->cfg->leader_lock_ms);
    }
    rc = dtq_ctx_command(ctx, lock_cb, l, &a);
    dtq_argv_deinit(&a);
    if (rc == DTQ_OK) {
        l->done = done;
        l->done_arg = arg;
    }
    return rc;
}

void dtq_leader_release(dtq_leader *l) {
    dtq_ctx *ctx = l->ctx;
    if (l->leading && dtq_ctx_is_up(ctx)) {
        dtq_argv a;
        dtq_call_lock_release(&a, ctx->fn.lock_release, l->lock_key, ctx->cfg->worker_id);
        dtq_scope_tag_call(&a, ctx->gtag);
        dtq_ctx_command(ctx, NULL, NULL, &a);
        dtq_argv_deinit(&a);
        dtq_info("scheduler: leader lock released");
    }
    if (l->done) l->forget = 1;
    set_leading(l, 0, NULL);
}

void dtq_leader_lost(dtq_leader *l, const char *why) {
    set_leading(l, 0, why);
}
