/* calls.h: the argument layout of every Function call the daemon makes, one builder per
 * Function, so that each layout is spelled once on the C side (lua/lib/scope.lua reads the same
 * layouts; docs/reference.md 5.4 describes them). Each builder starts `a` (dtq_argv_init)
 * with FCALL, the Function's name `fn` (ctx->fn), numkeys and the KEYS, then the ARGV; the
 * caller scopes it in the cluster layout (dtq_scope_tag_call), sends it and frees it
 * (dtq_argv_deinit). Strings are copied: nothing is kept. */
#ifndef DTQ_CALLS_H
#define DTQ_CALLS_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "config.h"
#include "streams.h"
#include "util.h"

/* <ns>_fetch: per served queue its paused key and streams p9..p0; worker_id, count,
 * policy-json, the queue names. */
void dtq_call_fetch(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id,
                    int count, const char *policy_json);

/* <ns>_reap: every served stream; worker_id, min-idle, free slots, the minimum examined,
 * policy-json, then per stream its queue, band and XAUTOCLAIM cursor (cursors[i] for
 * st->keys[i]). */
void dtq_call_reap(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id,
                   int64_t min_idle_ms, int free_slots, int min_count, const char *policy_json,
                   char *const *cursors);

/* <ns>_recover: every served stream; worker_id, "crashed" or "lost", policy-json, the
 * entries this process still holds (<stream>/<entry-id>, as `known`), then per stream its
 * queue and band. */
void dtq_call_recover(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id,
                      int predecessor_crashed, const char *policy_json, const dtq_argv *known);

/* <ns>_deregister: every served stream; worker_id. */
void dtq_call_deregister(dtq_argv *a, const char *fn, const dtq_streams *st, const char *worker_id);

/* <ns>_progress: no keys; worker_id, task_id, attempt, fraction ("" when < 0), message. */
void dtq_call_progress(dtq_argv *a, const char *fn, const char *worker_id, const char *task_id,
                       int64_t attempt, double fraction, const char *message);

/* <ns>_worker_event: no keys; worker_id, the event type (WORKER_STARTED, ...). */
void dtq_call_worker_event(dtq_argv *a, const char *fn, const char *worker_id, const char *type);

/* <ns>_finish and <ns>_handback: no keys; worker_id and the number of records that the
 * caller appends next (dtq_finish_record_encode, dtq_handback_record_encode). */
void dtq_call_finish(dtq_argv *a, const char *fn, const char *worker_id, int nrecords);

/* <ns>_sched_claim: the schedule and claimed sets; batch, claim-timeout (0: every claim
 * goes back to the schedule). */
void dtq_call_sched_claim(dtq_argv *a, const char *fn, const char *schedule_key,
                          const char *claimed_key, int64_t batch, int64_t claim_timeout_ms);

/* <ns>_sched_claim's reply: the claimed ids (strings), then four integers: the schedule's
 * and the claimed set's sizes as the call found them (before its moves), the schedule's
 * soonest due time after them (nil when it is empty) and the Redis time the claim used
 * (epoch ms). */
typedef struct dtq_sched_claim_reply {
    size_t nids;         /* the ids: the reply's first nids elements */
    int64_t scheduled;   /* ZCARD of the schedule, before the moves */
    int64_t claimed;     /* ZCARD of the claimed set, before the moves */
    int has_next;        /* 0: the schedule is empty */
    int64_t next_due_ms; /* its soonest due time (score) */
    int64_t now_ms;      /* the claim's time */
} dtq_sched_claim_reply;

/* 1 when r has that shape (out filled), else 0. The reply is borrowed. */
int dtq_sched_claim_reply_parse(const redisReply *r, dtq_sched_claim_reply *out);

/* <ns>_sched_promote: the claimed set; worker_id, then the ids <ns>_sched_claim answered
 * (the first `n` elements of `claimed`, strings). */
void dtq_call_sched_promote(dtq_argv *a, const char *fn, const char *claimed_key,
                            const char *worker_id, const redisReply *claimed, size_t n);

/* <ns>_lock_refresh: the lock key; worker_id, the lock's new lifetime. */
void dtq_call_lock_refresh(dtq_argv *a, const char *fn, const char *lock_key, const char *worker_id,
                           int64_t lock_ms);

/* <ns>_lock_release: the lock key; worker_id. */
void dtq_call_lock_release(dtq_argv *a, const char *fn, const char *lock_key,
                           const char *worker_id);

/* <ns>_cron_due (FCALL_RO): no keys, no arguments. */
void dtq_call_cron_due(dtq_argv *a, const char *fn);

/* <ns>_cron_fire: no keys; worker_id, the schedule's name, queue and generation (as
 * <ns>_cron_due answered them), grace_ms, the next fire time (next_ms < 0: "", none),
 * the error ("" when it plans); the caller appends the fire times, oldest first. */
void dtq_call_cron_fire(dtq_argv *a, const char *fn, const char *worker_id, const char *name,
                        const char *queue, const char *gen, int64_t grace_ms, int64_t next_ms,
                        const char *error);

/* <ns>_cron_set: no keys; the actor, then a [cron:NAME] section as its arguments and
 * options, with `origin`. */
void dtq_call_cron_set(dtq_argv *a, const char *fn, const char *actor, const dtq_cron_conf *c,
                       const char *origin);

/* <ns>_cron_sync: no keys; the actor, the origin, the names of cfg's [cron:NAME] sections
 * (queue NULL), or of those whose queue is `queue` (the cluster layout's call per queue). */
void dtq_call_cron_sync(dtq_argv *a, const char *fn, const char *actor, const char *origin,
                        const dtq_config *cfg, const char *queue);

#endif
