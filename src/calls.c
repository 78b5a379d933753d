/* calls.c: the argument layouts of the Function calls (see calls.h). */
#include "calls.h"

#include <stdlib.h>
#include <string.h>

static void head(dtq_argv *a, const char *fn, long long numkeys) {
    dtq_argv_init(a);
    dtq_argv_adds(a, "FCALL");
    dtq_argv_adds(a, fn);
    dtq_argv_addll(a, numkeys);
}

/* Every served stream as KEYS, in table order. */
static void head_streams(dtq_argv *a, const char *fn, const dtq_streams *st) {
    head(a, fn, dtq_streams_count(st));
    for (int i = 0; i < dtq_streams_count(st); i++) dtq_argv_adds(a, st->keys[i]);
}

void dtq_call_fetch(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id,
                    int count, const char *policy_json) {
    head(a, fn, (long long)st->nqueues * (DTQ_BANDS + 1));
    dtq_streams_fetch_keys(st, a);
    dtq_argv_adds(a, worker_id);
    dtq_argv_addll(a, count);
    dtq_argv_adds(a, policy_json);
    for (int q = 0; q < st->nqueues; q++) dtq_argv_adds(a, st->queues[q]);
}

void dtq_call_reap(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id,
                   int64_t min_idle_ms, int free_slots, int min_count, const char *policy_json,
                   char *const *cursors) {
    head_streams(a, fn, st);
    dtq_argv_adds(a, worker_id);
    dtq_argv_addll(a, (long long)min_idle_ms);
    dtq_argv_addll(a, free_slots);
    dtq_argv_addll(a, min_count);
    dtq_argv_adds(a, policy_json);
    for (int i = 0; i < dtq_streams_count(st); i++) {
        dtq_argv_adds(a, st->queues[dtq_streams_queue_of(i)]);
        dtq_argv_addll(a, dtq_streams_band_of(i));
        dtq_argv_adds(a, cursors[i]);
    }
}

void dtq_call_recover(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id,
                      int predecessor_crashed, const char *policy_json, const dtq_argv *known) {
    head_streams(a, fn, st);
    dtq_argv_adds(a, worker_id);
    dtq_argv_adds(a, predecessor_crashed ? "crashed" : "lost");
    dtq_argv_adds(a, policy_json);
    dtq_argv_addll(a, known->argc);
    for (int i = 0; i < known->argc; i++) dtq_argv_add(a, known->argv[i], known->lens[i]);
    for (int i = 0; i < dtq_streams_count(st); i++) {
        dtq_argv_adds(a, st->queues[dtq_streams_queue_of(i)]);
        dtq_argv_addll(a, dtq_streams_band_of(i));
    }
}

void dtq_call_deregister(dtq_argv *a, const char *fn, const dtq_streams *st,
                         const char *worker_id) {
    head_streams(a, fn, st);
    dtq_argv_adds(a, worker_id);
}

void dtq_call_worker_event(dtq_argv *a, const char *fn, const char *worker_id, const char *type) {
    head(a, fn, 0);
    dtq_argv_adds(a, worker_id);
    dtq_argv_adds(a, type);
}

void dtq_call_progress(dtq_argv *a, const char *fn, const char *worker_id, const char *task_id,
                       int64_t attempt, double fraction, const char *message) {
    head(a, fn, 0);
    dtq_argv_adds(a, worker_id);
    dtq_argv_adds(a, task_id);
    dtq_argv_addll(a, (long long)attempt);
    if (fraction >= 0)
        dtq_argv_addf(a, "%.6g", fraction);
    else
        dtq_argv_adds(a, "");
    dtq_argv_adds(a, message ? message : "");
}

void dtq_call_finish(dtq_argv *a, const char *fn, const char *worker_id, int nrecords) {
    head(a, fn, 0);
    dtq_argv_adds(a, worker_id);
    dtq_argv_addll(a, nrecords);
}

void dtq_call_sched_claim(dtq_argv *a, const char *fn, const char *schedule_key,
                          const char *claimed_key, int64_t batch, int64_t claim_timeout_ms) {
    head(a, fn, 2);
    dtq_argv_adds(a, schedule_key);
    dtq_argv_adds(a, claimed_key);
    dtq_argv_addll(a, (long long)batch);
    dtq_argv_addll(a, (long long)claim_timeout_ms);
}

int dtq_sched_claim_reply_parse(const redisReply *r, dtq_sched_claim_reply *out) {
    redisReply *const *t;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 4) return 0;
    t = r->element + (r->elements - 4);
    if (t[0]->type != REDIS_REPLY_INTEGER || t[1]->type != REDIS_REPLY_INTEGER ||
        (t[2]->type != REDIS_REPLY_INTEGER && t[2]->type != REDIS_REPLY_NIL) ||
        t[3]->type != REDIS_REPLY_INTEGER)
        return 0;
    for (size_t i = 0; i < r->elements - 4; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING) return 0;
    out->nids = r->elements - 4;
    out->scheduled = t[0]->integer;
    out->claimed = t[1]->integer;
    out->has_next = t[2]->type == REDIS_REPLY_INTEGER;
    out->next_due_ms = out->has_next ? t[2]->integer : 0;
    out->now_ms = t[3]->integer;
    return 1;
}

void dtq_call_sched_promote(dtq_argv *a, const char *fn, const char *claimed_key,
                            const char *worker_id, const redisReply *claimed, size_t n) {
    head(a, fn, 1);
    dtq_argv_adds(a, claimed_key);
    dtq_argv_adds(a, worker_id);
    for (size_t i = 0; i < n && i < claimed->elements; i++)
        dtq_argv_add(a, claimed->element[i]->str, claimed->element[i]->len);
}

void dtq_call_lock_refresh(dtq_argv *a, const char *fn, const char *lock_key, const char *worker_id,
                           int64_t lock_ms) {
    head(a, fn, 1);
    dtq_argv_adds(a, lock_key);
    dtq_argv_adds(a, worker_id);
    dtq_argv_addll(a, (long long)lock_ms);
}

void dtq_call_lock_release(dtq_argv *a, const char *fn, const char *lock_key,
                           const char *worker_id) {
    head(a, fn, 1);
    dtq_argv_adds(a, lock_key);
    dtq_argv_adds(a, worker_id);
}

void dtq_call_cron_due(dtq_argv *a, const char *fn) {
    dtq_argv_init(a);
    dtq_argv_adds(a, "FCALL_RO");
    dtq_argv_adds(a, fn);
    dtq_argv_addll(a, 0);
}

void dtq_call_cron_fire(dtq_argv *a, const char *fn, const char *worker_id, const char *name,
                        const char *queue, const char *gen, int64_t grace_ms, int64_t next_ms,
                        const char *error) {
    head(a, fn, 0);
    dtq_argv_adds(a, worker_id);
    dtq_argv_adds(a, name);
    dtq_argv_adds(a, queue);
    dtq_argv_adds(a, gen);
    dtq_argv_addll(a, (long long)grace_ms);
    if (next_ms < 0)
        dtq_argv_adds(a, "");
    else
        dtq_argv_addll(a, (long long)next_ms);
    dtq_argv_adds(a, error);
}

static void opt_int(dtq_argv *a, const char *name, int64_t v) {
    if (v < 0) return;
    dtq_argv_adds(a, name);
    dtq_argv_addll(a, (long long)v);
}

void dtq_call_cron_set(dtq_argv *a, const char *fn, const char *actor, const dtq_cron_conf *c,
                       const char *origin) {
    head(a, fn, 0);
    dtq_argv_adds(a, actor);
    dtq_argv_adds(a, c->name);
    dtq_argv_adds(a, c->spec);
    dtq_argv_adds(a, c->queue);
    dtq_argv_adds(a, c->task_type);
    dtq_argv_adds(a, c->payload);
    dtq_argv_adds(a, "tz");
    dtq_argv_adds(a, c->tz);
    dtq_argv_adds(a, "catch_up");
    dtq_argv_adds(a, c->catch_up);
    dtq_argv_adds(a, "origin");
    dtq_argv_adds(a, origin);
    opt_int(a, "priority", c->priority);
    opt_int(a, "max_attempts", c->max_attempts);
    opt_int(a, "timeout_ms", c->timeout_ms);
    opt_int(a, "ttl_seconds", c->ttl_seconds);
    /* paused only when the file says so: an operator's pause survives a sync */
    if (c->paused) {
        dtq_argv_adds(a, "paused");
        dtq_argv_adds(a, "1");
    }
}

void dtq_call_cron_sync(dtq_argv *a, const char *fn, const char *actor, const char *origin,
                        const dtq_config *cfg, const char *queue) {
    head(a, fn, 0);
    dtq_argv_adds(a, actor);
    dtq_argv_adds(a, origin);
    for (int i = 0; i < cfg->ncrons; i++)
        if (!queue || !strcmp(cfg->crons[i].queue, queue)) dtq_argv_adds(a, cfg->crons[i].name);
}
