/* outcome.c: the retry / dead-letter decision for an ended attempt. */
#include "outcome.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "dtq/handler.h"
#include "handler_exec.h"
#include "util.h"

/* A whole JSON text (RFC 8259): one value and nothing but blanks after it. cJSON stops
 * after the first value and takes whatever follows it ("{} x", JSON lines, a NUL byte and
 * more), which is no JSON text. */
static cJSON *parse_json_text(const char *s, size_t len) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    for (; j && end < s + len; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(j);
            return NULL;
        }
    }
    return j;
}

/* Keeps the last `max` bytes of an error: the end of a message says what finally broke. */
static char *error_tail(const char *err, int64_t max) {
    size_t n = strlen(err);
    if ((int64_t)n <= max) return dtq_xstrdup(err);
    return dtq_xstrdup(err + n - (size_t)max);
}

static enum dtq_failure_class failure_class(const dtq_attempt_end *end) {
    if (end->timed_out) return DTQ_FAIL_TIMEOUT;
    if (end->status == DTQ_HANDLER_RETRY) return DTQ_FAIL_HANDLER_RETRY;
    if (end->status == DTQ_HANDLER_FAIL_SIGNAL) return DTQ_FAIL_SIGNAL;
    if (!end->handler_known) return DTQ_FAIL_UNKNOWN_TYPE;
    return DTQ_FAIL_HANDLER;
}

void dtq_outcome_decide(const dtq_attempt_end *end, const dtq_outcome_limits *lim, double uniform01,
                        dtq_outcome *out) {
    enum dtq_failure_class cls;
    const char *error = end->error;
    memset(out, 0, sizeof(*out));
    if (end->cancelled) {
        out->kind = DTQ_OUTCOME_CANCELLED;
        out->error = dtq_xstrdup("cancelled");
        return;
    }
    if (end->status == DTQ_HANDLER_OK_TRUNCATED && !end->timed_out) {
        /* exec output already cut while it was read: only its head was kept, which is no
         * longer a JSON text, so it is recorded as it is, like any cut result. */
        out->kind = DTQ_OUTCOME_SUCCEEDED;
        out->result_state = DTQ_RESULT_TRUNCATED;
        out->result_len = end->result_len;
        if ((int64_t)out->result_len > lim->result_max_bytes)
            out->result_len = (size_t)lim->result_max_bytes;
        return;
    }
    if (end->status == DTQ_HANDLER_OK && !end->timed_out) {
        cJSON *parsed = NULL;
        if (!end->result || !end->result_len) {
            out->kind = DTQ_OUTCOME_SUCCEEDED;
            return;
        }
        parsed = parse_json_text(end->result, end->result_len);
        if (parsed) {
            out->kind = DTQ_OUTCOME_SUCCEEDED;
            if (!cJSON_IsNull(parsed)) {
                out->result_state = DTQ_RESULT_FULL;
                out->result_len = end->result_len;
                if ((int64_t)out->result_len > lim->result_max_bytes) {
                    out->result_len = (size_t)lim->result_max_bytes;
                    out->result_state = DTQ_RESULT_TRUNCATED;
                }
            }
            cJSON_Delete(parsed);
            return;
        }
        cls = DTQ_FAIL_BAD_RESULT;
        error = "result is not valid JSON";
    } else {
        cls = failure_class(end);
    }
    out->error = error_tail(error ? error : "handler failed", lim->error_max_bytes);
    out->error_class = dtq_retry_class_to_string(cls);
    if (dtq_retry_should_retry(cls, end->attempt, end->max_attempts)) {
        out->kind = DTQ_OUTCOME_RETRY;
        out->delay_ms = dtq_retry_delay_ms(lim->retry, end->attempt, uniform01);
    } else {
        out->kind = DTQ_OUTCOME_DEAD_LETTER;
    }
}

void dtq_outcome_deinit(dtq_outcome *out) {
    free(out->error);
    out->error = NULL;
}

const char *dtq_outcome_kind_name(enum dtq_outcome_kind k) {
    switch (k) {
    case DTQ_OUTCOME_SUCCEEDED: return "succeeded";
    case DTQ_OUTCOME_RETRY: return "retry";
    case DTQ_OUTCOME_DEAD_LETTER: return "dead_letter";
    case DTQ_OUTCOME_CANCELLED: return "cancelled";
    }
    return "?";
}

const char *dtq_result_state_name(enum dtq_result_state s) {
    switch (s) {
    case DTQ_RESULT_NONE: return "none";
    case DTQ_RESULT_FULL: return "full";
    case DTQ_RESULT_TRUNCATED: return "truncated";
    }
    return "?";
}
