/* finisher.h: writes the ends of attempts to Redis. Finish records (and, on a drain,
 * hand-back records) queue up here and leave in batches, one FCALL <ns>_finish or
 * <ns>_handback per batch and one batch in flight at a time, so batches grow under load
 * and stay small when idle. A batch that does not make it (no reply, or an error) goes
 * back to the head of the queue and is sent again: the Functions guard on the attempt,
 * so a batch that did land answers 'stale' the second time and acknowledges nothing. */
#ifndef DTQ_FINISHER_H
#define DTQ_FINISHER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "ctx.h"
#include "outcome.h"
#include "task.h"

struct dtq_metrics_cell;

/* The values of one record of <ns>_finish, in the order lua/dtq.lua's
 * decode_finish_record() reads them. */
#define DTQ_FINISH_RECORD_FIELDS 11

typedef struct dtq_finish_record {
    struct dtq_finish_record *next;
    int handback; /* 1: an interrupted attempt handed back (drain), not a finish */
    char *task_id;
    int64_t attempt;
    char *stream;   /* the entry that carries the attempt */
    char *entry_id; /* ... and its id: acknowledged once the end is written */
    enum dtq_outcome_kind outcome;
    enum dtq_result_state result_state;
    char *result; /* result_len bytes when result_state is not NONE */
    size_t result_len;
    char *error;             /* owned; the reason for a hand-back */
    const char *error_class; /* static */
    int64_t delay_ms;
    int64_t grace_ms; /* defer only */
    /* For counting and logging the end once Redis answered (tasklog.c); NULL and -1 when
     * the record comes from elsewhere (tests). */
    dtq_task *task;                /* owned: the claimed task, without its payload */
    struct dtq_metrics_cell *cell; /* its metrics cell */
    int64_t duration_us;           /* handler run time; -1: no handler ran */
} dtq_finish_record;

/* Appends the DTQ_FINISH_RECORD_FIELDS values of a finish record. */
void dtq_finish_record_encode(dtq_argv *a, const dtq_finish_record *rec);
/* Appends the five values of a hand-back record: task_id attempt stream entry_id reason. */
void dtq_handback_record_encode(dtq_argv *a, const dtq_finish_record *rec);
void dtq_finish_record_free(dtq_finish_record *rec);

typedef struct dtq_finisher dtq_finisher;

dtq_finisher *dtq_finisher_new(dtq_ctx *ctx);
void dtq_finisher_free(dtq_finisher *f);
/* Queues a record (takes ownership) and sends what can be sent. */
void dtq_finisher_add(dtq_finisher *f, dtq_finish_record *rec);
/* Sends queued records (after a reconnect, or when a batch returns). */
void dtq_finisher_flush(dtq_finisher *f);
/* True while Redis refuses finish batches (the last one came back with an error and its
 * records wait): take no new work meanwhile. */
int dtq_finisher_refused(const dtq_finisher *f);
/* Calls fn for the entry of every record not yet written (queued or in flight): their
 * claims must be kept until Redis has the results. */
void dtq_finisher_each_entry(const dtq_finisher *f,
                             void (*fn)(const char *stream, const char *entry_id, void *arg),
                             void *arg);
/* True when nothing is queued or in flight. */
int dtq_finisher_idle(const dtq_finisher *f);

#endif
