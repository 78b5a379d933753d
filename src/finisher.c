/* finisher.c: the finish queue and its batches. */
#include "finisher.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "log.h"
#include "scope.h"
#include "tasklog.h"
#include "util.h"

#define FINISH_BATCH_MAX 256

/* The records sent together; in the cluster layout one FCALL per queue among them (each
 * a `batch` of this round). The next round leaves once every batch of this one is over. */
typedef struct round {
    int left;   /* batches not over yet */
    int failed; /* one of them did not land */
} round;

typedef struct batch {
    struct batch *prev, *next;
    dtq_finisher *f;
    round *r;
    char *tag;               /* the cluster layout: the tag of its records' queue */
    dtq_finish_record *list; /* NULL once written (or queued again) */
    int wait_pending;        /* a WAIT was pipelined behind its FCALL, no reply yet */
    int failed;              /* the FCALL did not land */
} batch;

struct dtq_finisher {
    dtq_ctx *ctx;
    dtq_finish_record *pending, *pending_tail;
    int npending;
    batch *batches; /* batches awaiting replies, so their entries' claims can be kept */
    int refused;    /* the last batch came back with an error: Redis refuses writes */
    struct event *retry_ev;
    dtq_tasklog *log; /* counts and logs each end once Redis answered */
};

static void batch_link(dtq_finisher *f, batch *b) {
    b->prev = NULL;
    b->next = f->batches;
    if (f->batches) f->batches->prev = b;
    f->batches = b;
}

static void batch_unlink(dtq_finisher *f, batch *b) {
    if (b->prev)
        b->prev->next = b->next;
    else
        f->batches = b->next;
    if (b->next) b->next->prev = b->prev;
}

static void free_list(dtq_finish_record *list) {
    while (list) {
        dtq_finish_record *next = list->next;
        dtq_finish_record_free(list);
        list = next;
    }
}

/* Puts a batch that did not make it back at the head of the queue, keeping order. */
static void prepend_list(dtq_finisher *f, dtq_finish_record *list) {
    dtq_finish_record *tail = list;
    int n = 1;
    if (!list) return;
    while (tail->next) {
        tail = tail->next;
        n++;
    }
    tail->next = f->pending;
    if (!f->pending) f->pending_tail = tail;
    f->pending = list;
    f->npending += n;
}

/* A batch is over (failed: its records are queued again); the round's last one lets the
 * next round leave. */
static void batch_over(dtq_finisher *f, batch *b, int failed) {
    round *r = b->r;
    batch_unlink(f, b);
    free(b->tag);
    free(b);
    if (failed) r->failed = 1;
    if (--r->left > 0) return;
    failed = r->failed;
    free(r);
    if (failed) {
        /* Sent again after the reconnect (flush from setup) or by the retry timer; in the
         * cluster layout a node lost does not take the router down: the timer. */
        struct timeval tv = {1, 0};
        if (dtq_ctx_cluster(f->ctx)) evtimer_add(f->retry_ev, &tv);
        return;
    }
    dtq_finisher_flush(f);
    if (f->refused) {
        dtq_info("finish batches accepted again; taking new work");
        f->refused = 0;
        dtq_ctx_slots_freed(f->ctx);
    }
    dtq_ctx_settled(f->ctx);
}

static void batch_cb(redisAsyncContext *ac, void *r, void *priv) {
    batch *b = priv;
    dtq_finisher *f = b->f;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
        if (reply) {
            /* Refused while connected (OOM, NOPERM, a missing Function): the results are
             * kept and their entries stay claimed (lease.c), nothing new is taken until
             * Redis accepts them, and they are sent again every second. */
            struct timeval tv = {1, 0};
            if (!f->refused)
                dtq_error("finish batch refused by Redis; holding %d result(s), taking no new "
                          "work, retrying every 1s: %s",
                          f->npending + 1, reply->str);
            f->refused = 1;
            evtimer_add(f->retry_ev, &tv);
        }
        prepend_list(f, b->list);
        b->list = NULL;
        b->failed = 1;
        if (b->wait_pending) return; /* its WAIT reply (or NULL) still comes: wait_cb ends it */
        batch_over(f, b, 1);
        return;
    }
    if (reply->type == REDIS_REPLY_ARRAY) dtq_tasklog_verdicts(f->log, b->list, reply);
    free_list(b->list);
    b->list = NULL;
    f->ctx->counters.finish_batches++;
    if (b->wait_pending) return; /* the WAIT pipelined behind it ends the batch */
    batch_over(f, b, 0);
}

/* WAIT's reply, always after the FCALL's on the same connection: how many replicas have
 * everything written so far, this batch included. Until it comes no other batch leaves,
 * so the daemon's results never run more than one batch ahead of the replicas. */
static void wait_cb(redisAsyncContext *ac, void *r, void *priv) {
    batch *b = priv;
    dtq_finisher *f = b->f;
    redisReply *reply = r;
    const dtq_config *cfg = f->ctx->cfg;
    DTQ_UNUSED(ac);
    b->wait_pending = 0;
    if (b->failed) { /* the FCALL did not land: its records are queued again */
        batch_over(f, b, 1);
        return;
    }
    if (reply && (reply->type != REDIS_REPLY_INTEGER || reply->integer < cfg->wait_replicas))
        dtq_warn("a finish batch reached %lld of %lld replica(s) within %lld ms (%s): a "
                 "failover now could lose its results",
                 reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0LL,
                 (long long)cfg->wait_replicas, (long long)cfg->wait_timeout_ms,
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "timed out");
    batch_over(f, b, 0);
}

/* The lean lane (reference 4.3): the successes of lean tasks go in the finish call's lean
 * section, after its records, as an acknowledgement each. lean_last puts them at the end of
 * the list (the reply's words are the other records', in order); count_lean counts them,
 * and with `any` set tells whether any record is of a lean task (a lean task's failure is
 * materialised with the policy the section carries). */
static dtq_finish_record *lean_last(dtq_finish_record *list) {
    dtq_finish_record *full = NULL, **ft = &full, *lean = NULL, **lt = &lean;
    while (list) {
        dtq_finish_record *rec = list;
        list = rec->next;
        rec->next = NULL;
        if (rec->lean) {
            *lt = rec;
            lt = &rec->next;
        } else {
            *ft = rec;
            ft = &rec->next;
        }
    }
    *ft = lean;
    return full;
}

static int count_lean(const dtq_finish_record *list, int *any) {
    int m = 0;
    for (; list; list = list->next) {
        if (list->lean) m++;
        if (any && list->task && list->task->lean) *any = 1;
    }
    return m;
}

static void encode_lean(dtq_argv *a, const char *policy_json, const dtq_finish_record *list) {
    int any = 0, m = count_lean(list, &any);
    if (!any && m == 0) return;
    dtq_finish_lean_head(a, policy_json, m);
    for (; list; list = list->next)
        if (list->lean)
            dtq_finish_lean_encode(a, list->stream, list->entry_id,
                                   list->task ? list->task->task_type : "", list->attempt);
}

/* The tag of a record's queue: its stream key up to the closing brace ("{ns:q}"). */
static char *record_tag(const dtq_finish_record *rec) {
    const char *end = strchr(rec->stream, '}');
    return dtq_xstrndup(rec->stream, end ? (size_t)(end - rec->stream + 1) : strlen(rec->stream));
}

/* Sends list (n records of one kind) as one FCALL, tagged in the cluster layout, as a
 * batch of round r; the records are queued again when it cannot be sent. */
static int send_one(dtq_finisher *f, round *r, int handback, dtq_finish_record *list, int n,
                    char *tag) {
    dtq_ctx *ctx = f->ctx;
    dtq_argv a;
    batch *b;
    if (!handback) list = lean_last(list);
    dtq_call_finish(&a, handback ? ctx->fn.handback : ctx->fn.finish, ctx->cfg->worker_id,
                    handback ? n : n - count_lean(list, NULL));
    for (dtq_finish_record *rec = list; rec; rec = rec->next) {
        if (handback)
            dtq_handback_record_encode(&a, rec);
        else if (!rec->lean)
            dtq_finish_record_encode(&a, rec);
    }
    if (!handback) encode_lean(&a, ctx->policy_json, list);
    dtq_scope_tag_call(&a, tag);
    b = dtq_xcalloc(1, sizeof(*b));
    b->f = f;
    b->r = r;
    b->tag = tag;
    b->list = list;
    if (dtq_ctx_command(ctx, batch_cb, b, &a) != DTQ_OK) {
        prepend_list(f, list);
        free(b->tag);
        free(b);
        dtq_argv_deinit(&a);
        return DTQ_ERR;
    }
    r->left++;
    batch_link(f, b);
    dtq_argv_deinit(&a);
    if (ctx->cfg->wait_replicas > 0) {
        /* after the FCALL on its node (the cluster layout routes WAIT by the tag) */
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "WAIT");
        dtq_argv_addll(&a, ctx->cfg->wait_replicas);
        dtq_argv_addll(&a, ctx->cfg->wait_timeout_ms);
        if (dtq_ctx_command_at(ctx, tag, wait_cb, b, &a) == DTQ_OK) b->wait_pending = 1;
        dtq_argv_deinit(&a);
    }
    return DTQ_OK;
}

/* Sends one round of records of one kind (finish or handback) from the queue head: one
 * batch, or in the cluster layout one per queue among them. There the records of a queue
 * whose slot cannot be reached (a shard down) stay queued, in place, so that they hold up
 * neither the round nor the others' results (their batch would wait for the node's link);
 * the retry timer looks again. DTQ_ERR when nothing could be sent. */
static int send_batch(dtq_finisher *f) {
    int handback = f->pending->handback, n = 0, rc = DTQ_OK, held = 0;
    dtq_finish_record *list = NULL, **tailp = &list, **pp = &f->pending, *kept = NULL;
    round *r;

    while (*pp && n < FINISH_BATCH_MAX && (*pp)->handback == handback) {
        dtq_finish_record *rec = *pp;
        if (dtq_ctx_cluster(f->ctx) && !dtq_ctx_key_up(f->ctx, rec->stream)) {
            kept = rec;
            pp = &rec->next;
            held++;
            continue;
        }
        *pp = rec->next;
        rec->next = NULL;
        *tailp = rec;
        tailp = &rec->next;
        n++;
    }
    if (!*pp) f->pending_tail = kept; /* the list's end was reached: its last kept record */
    f->npending -= n;
    if (n == 0) {
        struct timeval tv = {1, 0};
        if (held) evtimer_add(f->retry_ev, &tv);
        return DTQ_ERR;
    }
    r = dtq_xcalloc(1, sizeof(*r));

    if (!dtq_ctx_cluster(f->ctx)) {
        rc = send_one(f, r, handback, list, n, NULL);
    } else {
        /* Split by queue, each part in the order of the list. */
        r->left = 1; /* held while the parts leave: a reply cannot end the round early */
        while (list) {
            char *tag = record_tag(list);
            dtq_finish_record *part = NULL, **ptail = &part, *rest = NULL, **rtail = &rest;
            int m = 0;
            size_t tl = strlen(tag);
            while (list) {
                dtq_finish_record *rec = list;
                list = rec->next;
                rec->next = NULL;
                if (!strncmp(rec->stream, tag, tl)) {
                    *ptail = rec;
                    ptail = &rec->next;
                    m++;
                } else {
                    *rtail = rec;
                    rtail = &rec->next;
                }
            }
            list = rest;
            if (rc != DTQ_OK) { /* the link is gone: what is left is queued again */
                prepend_list(f, part);
                free(tag);
                continue;
            }
            rc = send_one(f, r, handback, part, m, tag);
        }
        if (--r->left > 0) return DTQ_OK;
    }
    if (r->left == 0) free(r);
    return rc;
}

void dtq_finisher_flush(dtq_finisher *f) {
    if (!dtq_ctx_is_up(f->ctx)) return;
    while (!f->batches && f->pending)
        if (send_batch(f) != DTQ_OK) break;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    dtq_finisher_flush(arg);
}

void dtq_finisher_add(dtq_finisher *f, dtq_finish_record *rec) {
    rec->next = NULL;
    if (f->pending_tail)
        f->pending_tail->next = rec;
    else
        f->pending = rec;
    f->pending_tail = rec;
    f->npending++;
    dtq_finisher_flush(f);
}

int dtq_finisher_refused(const dtq_finisher *f) {
    return f->refused;
}

void dtq_finisher_each_entry(const dtq_finisher *f,
                             void (*fn)(const char *stream, const char *entry_id, void *arg),
                             void *arg) {
    for (const dtq_finish_record *r = f->pending; r; r = r->next) fn(r->stream, r->entry_id, arg);
    for (const batch *b = f->batches; b; b = b->next)
        for (const dtq_finish_record *r = b->list; r; r = r->next) fn(r->stream, r->entry_id, arg);
}

int dtq_finisher_idle(const dtq_finisher *f) {
    return f->npending == 0 && !f->batches;
}

dtq_finisher *dtq_finisher_new(dtq_ctx *ctx) {
    dtq_finisher *f = dtq_xcalloc(1, sizeof(*f));
    f->ctx = ctx;
    f->retry_ev = evtimer_new(ctx->base, retry_cb, f);
    f->log = dtq_tasklog_new(ctx);
    return f;
}

void dtq_finisher_free(dtq_finisher *f) {
    if (!f) return;
    free_list(f->pending);
    event_free(f->retry_ev);
    dtq_tasklog_free(f->log);
    free(f);
}
