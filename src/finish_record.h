/* finish_record.h: the end of one attempt as the daemon sends it to <ns>_finish (or, on a
 * drain, to <ns>_handback): the record, its encoders and its free. finisher.c queues and
 * batches them; tasklog.c counts and logs each once Redis answered; the tests and the fuzz
 * target encode them. */
#ifndef DTQ_FINISH_RECORD_H
#define DTQ_FINISH_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "outcome.h"
#include "task.h"
#include "util.h"

struct dtq_metrics_cell;

/* The values of one record of <ns>_finish, in the order lua/fn/finish.lua's
 * decode_finish_record() reads them. */
#define DTQ_FINISH_RECORD_FIELDS 11

typedef struct dtq_finish_record {
    struct dtq_finish_record *next;
    int handback; /* 1: an interrupted attempt handed back (drain), not a finish */
    int lean;     /* 1: a lean task's success, sent in the call's lean section */
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
/* The lean section of <ns>_finish, after its records: "lean", the policy JSON (what
 * materialises a lean task that failed in the same call), m, then m lean records. */
void dtq_finish_lean_head(dtq_argv *a, const char *policy_json, int m);
/* Appends the DTQ_LEAN_RECORD_FIELDS values of a lean success: stream entry_id task_type
 * attempt. */
#define DTQ_LEAN_RECORD_FIELDS 4
void dtq_finish_lean_encode(dtq_argv *a, const char *stream, const char *entry_id,
                            const char *task_type, int64_t attempt);
/* Appends the five values of a hand-back record: task_id attempt stream entry_id reason. */
void dtq_handback_record_encode(dtq_argv *a, const dtq_finish_record *rec);
void dtq_finish_record_free(dtq_finish_record *rec);

#endif
