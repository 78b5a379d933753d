/* retry.h: the backoff formula of SPEC 7 and the retryable classification. Pure. */
#ifndef DTQ_RETRY_H
#define DTQ_RETRY_H

#include <stdint.h>

enum dtq_jitter_mode { DTQ_JITTER_SPREAD, DTQ_JITTER_FULL, DTQ_JITTER_NONE };

typedef struct dtq_retry_policy {
    double base_delay_s; /* delay after the first failed attempt, seconds */
    double max_delay_s;  /* cap, seconds */
    double jitter;       /* spread fraction, 0..1 */
    enum dtq_jitter_mode jitter_mode;
} dtq_retry_policy;

int dtq_retry_jitter_mode_from_string(const char *s, enum dtq_jitter_mode *out);

/* Delay in ms after attempt `attempt` (1-based, the one that just failed) failed.
 * `uniform01` is a draw from [0,1); passing it in keeps the function testable. */
int64_t dtq_retry_delay_ms(const dtq_retry_policy *p, int64_t attempt, double uniform01);

/* A random draw in [0,1) for dtq_retry_delay_ms. */
double dtq_retry_uniform(void);

/* Failure classes. Only HANDLER_RETRY, TIMEOUT, SIGNAL and HANDLER_CRASHED are retryable
 * (a closed allowlist). */
enum dtq_failure_class {
    DTQ_FAIL_HANDLER_RETRY,   /* handler said: try again */
    DTQ_FAIL_TIMEOUT,         /* attempt exceeded timeout_ms */
    DTQ_FAIL_HANDLER,         /* handler said: permanent */
    DTQ_FAIL_SIGNAL,          /* exec handler killed by a signal the daemon did not send */
    DTQ_FAIL_BAD_RESULT,      /* result was not JSON */
    DTQ_FAIL_UNKNOWN_TYPE,    /* no handler for task_type */
    DTQ_FAIL_INVALID_PAYLOAD, /* payload failed validation */
    DTQ_FAIL_HANDLER_CRASHED, /* a pool process died or broke the protocol holding it */
    DTQ_FAIL_POOL_UNAVAILABLE /* its pool had no process: deferred, never a failure */
};

int dtq_retry_is_retryable(enum dtq_failure_class c);
const char *dtq_retry_class_to_string(enum dtq_failure_class c);

/* The retry gate: retry only a retryable failure of an attempt below max_attempts. */
int dtq_retry_should_retry(enum dtq_failure_class c, int64_t attempt, int64_t max_attempts);

#endif
