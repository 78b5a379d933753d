/* outcome.h: the decision for one ended attempt, as a pure function: success (with the
 * result to keep), a retry after a backoff, a dead letter, a cancellation, or (a task type
 * this worker has no handler for, with [worker] unknown_task_type = hand_back) a deferral
 * that gives the task back without using an attempt. The one owner of that decision;
 * lua/fn/finish.lua applies it (and [limits] dlq_enabled, and the deferral's grace). */
#ifndef DTQ_OUTCOME_H
#define DTQ_OUTCOME_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "retry.h"

/* A deferred task comes back after this long, spread by +-20%: long enough not to spin
 * between workers that do not know its type, short enough for one that does. */
#define DTQ_DEFER_DELAY_MS 1000

enum dtq_outcome_kind {
    DTQ_OUTCOME_SUCCEEDED,
    DTQ_OUTCOME_RETRY,
    DTQ_OUTCOME_DEAD_LETTER,
    DTQ_OUTCOME_CANCELLED,
    DTQ_OUTCOME_DEFER /* not run here: back to the schedule at the same attempt */
};

/* Private statuses, beyond the plugin ABI's (the executor accepts them from exec jobs and
 * pools only). FAIL_SIGNAL: an exec child was killed by a signal the daemon did not send
 * (class signal). OK_TRUNCATED: exit 0 with more stdout than result_max_bytes; the result
 * is its first result_max_bytes bytes. FAIL_CRASHED: the pool process holding the task
 * died or broke the protocol (class handler_crashed, retryable). FAIL_INVALID: the handler
 * refused the payload, or it is no JSON text (class invalid_payload, permanent). DEFER:
 * the pool has no process to run it (class pool_unavailable): back to the schedule at the
 * same attempt, with no grace to run out. */
#define DTQ_HANDLER_FAIL_SIGNAL 64
#define DTQ_HANDLER_OK_TRUNCATED 65
#define DTQ_HANDLER_FAIL_CRASHED 66
#define DTQ_HANDLER_FAIL_INVALID 67
#define DTQ_HANDLER_DEFER 68

enum dtq_result_state { DTQ_RESULT_NONE, DTQ_RESULT_FULL, DTQ_RESULT_TRUNCATED };

/* How an attempt ended, as the executor saw it. */
typedef struct dtq_attempt_end {
    int status;         /* DTQ_HANDLER_OK, _RETRY, _FAIL, DTQ_HANDLER_FAIL_SIGNAL, _OK_TRUNCATED */
    int timed_out;      /* the timeout stopped it */
    int cancelled;      /* dtq_cancel stopped it */
    int handler_known;  /* the task type has a handler */
    const char *result; /* handler output or NULL: JSON text, or exec stdout as result_mode says */
    size_t result_len;
    const char *error;                /* handler's message or NULL */
    int64_t attempt;                  /* the attempt that ended */
    int64_t max_attempts;             /* as resolved at claim and carried in the task hash */
    enum dtq_result_mode result_mode; /* exec handlers' `result`; JSON for every other */
} dtq_attempt_end;

typedef struct dtq_outcome_limits {
    const dtq_retry_policy *retry; /* the task type's policy */
    int64_t result_max_bytes;
    int64_t error_max_bytes;
    int unknown_hand_back;    /* [worker] unknown_task_type = hand_back */
    int64_t unknown_grace_ms; /* ... unknown_task_type_grace_s, in ms */
} dtq_outcome_limits;

typedef struct dtq_outcome {
    enum dtq_outcome_kind kind;
    enum dtq_result_state result_state;
    size_t result_len;       /* bytes of the result to record (FULL or TRUNCATED) */
    char *result;            /* owned: the result to record when it is not end->result's
                              * head (result = text: the JSON string made of stdout) */
    char *error;             /* owned, NULL on success */
    const char *error_class; /* a dtq_retry_class_to_string() name, NULL on success */
    int64_t delay_ms;        /* RETRY and DEFER */
    int64_t grace_ms;        /* DEFER: dead-lettered instead once created_at + grace_ms
                              * passed; -1: never */
} dtq_outcome;

/* `uniform01` is the jitter draw (dtq_retry_uniform()), passed in to keep this testable. */
void dtq_outcome_decide(const dtq_attempt_end *end, const dtq_outcome_limits *lim, double uniform01,
                        dtq_outcome *out);
void dtq_outcome_deinit(dtq_outcome *out);

/* The words of the finish record (lua/fn/finish.lua FINISH_OUTCOMES and RESULT_STATES). */
const char *dtq_outcome_kind_name(enum dtq_outcome_kind k);
const char *dtq_result_state_name(enum dtq_result_state s);

#endif
