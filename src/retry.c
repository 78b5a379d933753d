/* retry.c: backoff and classification. The exponent is clamped before pow() so any
 * attempt number, however large, yields the cap rather than an overflow. */
#include "retry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util.h"

int dtq_retry_jitter_mode_from_string(const char *s, enum dtq_jitter_mode *out) {
    if (!strcmp(s, "spread"))
        *out = DTQ_JITTER_SPREAD;
    else if (!strcmp(s, "full"))
        *out = DTQ_JITTER_FULL;
    else if (!strcmp(s, "none"))
        *out = DTQ_JITTER_NONE;
    else
        return DTQ_ERR;
    return DTQ_OK;
}

int64_t dtq_retry_delay_ms(const dtq_retry_policy *p, int64_t attempt, double u) {
    double capped, delay, exp;
    if (attempt < 1) attempt = 1;
    /* 2^62 already exceeds any sane cap; clamping keeps pow() finite. */
    exp = (double)(attempt - 1 > 62 ? 62 : attempt - 1);
    capped = p->base_delay_s * pow(2.0, exp);
    if (capped > p->max_delay_s) capped = p->max_delay_s;
    switch (p->jitter_mode) {
    case DTQ_JITTER_FULL: delay = capped * u; break;
    case DTQ_JITTER_NONE: delay = capped; break;
    case DTQ_JITTER_SPREAD:
    default: delay = capped * (1.0 + (2.0 * u - 1.0) * p->jitter); break;
    }
    delay = floor(delay * 1000.0);
    return delay > 0 ? (int64_t)delay : 0;
}

/* xorshift64* seeded once from getrandom: the draw runs for every ended attempt, and a
 * system call per attempt was a measurable part of the daemon's time per task (jitter
 * needs spread, not secrecy). Event loop thread only. */
double dtq_retry_uniform(void) {
    static uint64_t state;
    while (!state) {
        if (getrandom(&state, sizeof(state), 0) != (ssize_t)sizeof(state))
            state = (uint64_t)random() << 32 ^ (uint64_t)random();
        state |= !state; /* never 0: xorshift would stay there */
    }
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (double)((state * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0; /* [0,1) */
}

/* HANDLER_CRASHED: a pool process that died with the task says no more about the task
 * than SIGNAL does (it may have held several).
 * SIGNAL: a program killed by a signal the daemon did not send was, as far as anyone can
 * tell, stopped from outside (a unit stop, the OOM killer, an operator), which says nothing
 * about the task; one that kills itself every time still runs out of attempts. */
int dtq_retry_is_retryable(enum dtq_failure_class c) {
    return c == DTQ_FAIL_HANDLER_RETRY || c == DTQ_FAIL_TIMEOUT || c == DTQ_FAIL_SIGNAL ||
           c == DTQ_FAIL_HANDLER_CRASHED;
}

const char *dtq_retry_class_to_string(enum dtq_failure_class c) {
    switch (c) {
    case DTQ_FAIL_HANDLER_RETRY: return "retryable";
    case DTQ_FAIL_TIMEOUT: return "timeout";
    case DTQ_FAIL_HANDLER: return "permanent";
    case DTQ_FAIL_SIGNAL: return "signal";
    case DTQ_FAIL_BAD_RESULT: return "bad_result";
    case DTQ_FAIL_UNKNOWN_TYPE: return "unknown_task_type";
    case DTQ_FAIL_INVALID_PAYLOAD: return "invalid_payload";
    case DTQ_FAIL_HANDLER_CRASHED: return "handler_crashed";
    case DTQ_FAIL_POOL_UNAVAILABLE: return "pool_unavailable";
    }
    return "permanent";
}

int dtq_retry_should_retry(enum dtq_failure_class c, int64_t attempt, int64_t max_attempts) {
    return dtq_retry_is_retryable(c) && attempt < max_attempts;
}
