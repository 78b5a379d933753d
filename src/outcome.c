/* outcome.c: the retry / dead-letter decision for an ended attempt. */
#include "outcome.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtq/handler.h"
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

/* The length of the UTF-8 character at s[0..n): 1-4 when it is well formed (no overlong
 * form, no surrogate, nothing above U+10FFFF), 0 when it is not, -1 when s ends inside a
 * character that could still be well formed. */
static int utf8_char(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len;
    unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0; /* overlong */
        if (c == 0xed) hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90; /* overlong */
        if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else
        return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf)) return 0;
    }
    return len;
}

/* result = text: stdout as a JSON string, cut (at a character) to fit result_max_bytes
 * with its quotes. Output already cut while it was read may end inside a character: that
 * partial character is dropped. Returns 0, or the offset + 1 of the first byte that is not
 * UTF-8 (out untouched). */
static size_t text_result(const dtq_attempt_end *end, const dtq_outcome_limits *lim,
                          dtq_outcome *out) {
    const unsigned char *s = (const unsigned char *)(end->result ? end->result : "");
    size_t n = end->result ? end->result_len : 0, i = 0, len = 0;
    size_t max = lim->result_max_bytes > 0 ? (size_t)lim->result_max_bytes : 0;
    int cut = end->status == DTQ_HANDLER_OK_TRUNCATED;
    char *json;
    while (i < n) { /* validate first: an invalid text is refused whatever its length */
        int c = utf8_char(s + i, n - i);
        if (c == -1 && cut) break;
        if (c <= 0) return i + 1;
        i += (size_t)c;
    }
    n = i;
    json = dtq_xmalloc(max + 1);
    if (max >= 2) json[len++] = '"';
    for (i = 0; i < n && max >= 2;) {
        char esc[8];
        const char *piece = esc;
        size_t plen;
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            plen = 2;
        } else if (c < 0x20) {
            static const char short_esc[] = {'b', 't', 'n', 0, 'f', 'r'};
            if (c >= '\b' && c <= '\r' && short_esc[c - '\b']) {
                esc[0] = '\\';
                esc[1] = short_esc[c - '\b'];
                plen = 2;
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                plen = 6;
            }
        } else {
            piece = (const char *)s + i;
            plen = (size_t)utf8_char(s + i, n - i);
        }
        if (len + plen + 1 > max) break; /* + 1: the closing quote */
        memcpy(json + len, piece, plen);
        len += plen;
        i += c < 0x80 ? 1 : plen;
    }
    if (max >= 2) json[len++] = '"';
    json[len] = '\0';
    out->kind = DTQ_OUTCOME_SUCCEEDED;
    out->result = json;
    out->result_len = len;
    out->result_state = cut || i < n || max < 2 ? DTQ_RESULT_TRUNCATED : DTQ_RESULT_FULL;
    return 0;
}

static enum dtq_failure_class failure_class(const dtq_attempt_end *end) {
    if (end->timed_out) return DTQ_FAIL_TIMEOUT;
    if (end->status == DTQ_HANDLER_RETRY) return DTQ_FAIL_HANDLER_RETRY;
    if (end->status == DTQ_HANDLER_FAIL_SIGNAL) return DTQ_FAIL_SIGNAL;
    if (end->status == DTQ_HANDLER_FAIL_CRASHED) return DTQ_FAIL_HANDLER_CRASHED;
    if (end->status == DTQ_HANDLER_FAIL_INVALID) return DTQ_FAIL_INVALID_PAYLOAD;
    if (!end->handler_known) return DTQ_FAIL_UNKNOWN_TYPE;
    return DTQ_FAIL_HANDLER;
}

void dtq_outcome_decide(const dtq_attempt_end *end, const dtq_outcome_limits *lim, double uniform01,
                        dtq_outcome *out) {
    enum dtq_failure_class cls;
    const char *error = end->error;
    char msg[96];
    memset(out, 0, sizeof(*out));
    if (end->cancelled) {
        out->kind = DTQ_OUTCOME_CANCELLED;
        out->error = dtq_xstrdup("cancelled");
        return;
    }
    if (end->status == DTQ_HANDLER_DEFER && !end->timed_out) {
        out->kind = DTQ_OUTCOME_DEFER;
        out->error = error_tail(error ? error : "pool_unavailable", lim->error_max_bytes);
        out->error_class = dtq_retry_class_to_string(DTQ_FAIL_POOL_UNAVAILABLE);
        out->delay_ms = (int64_t)(DTQ_DEFER_DELAY_MS * (0.8 + 0.4 * uniform01));
        out->grace_ms = -1;
        return;
    }
    if (!end->handler_known && lim->unknown_hand_back) {
        out->kind = DTQ_OUTCOME_DEFER;
        out->error = error_tail(error ? error : "unknown_task_type", lim->error_max_bytes);
        out->error_class = dtq_retry_class_to_string(DTQ_FAIL_UNKNOWN_TYPE);
        out->delay_ms = (int64_t)(DTQ_DEFER_DELAY_MS * (0.8 + 0.4 * uniform01));
        out->grace_ms = lim->unknown_grace_ms;
        return;
    }
    if ((end->status == DTQ_HANDLER_OK || end->status == DTQ_HANDLER_OK_TRUNCATED) &&
        !end->timed_out && end->result_mode != DTQ_RESULT_MODE_JSON) {
        size_t bad;
        if (end->result_mode == DTQ_RESULT_MODE_IGNORE) {
            out->kind = DTQ_OUTCOME_SUCCEEDED; /* whatever it printed */
            return;
        }
        if (!(bad = text_result(end, lim, out))) return;
        snprintf(msg, sizeof(msg), "result is not UTF-8 text (byte %zu of stdout)", bad);
        cls = DTQ_FAIL_BAD_RESULT;
        error = msg;
    } else if (end->status == DTQ_HANDLER_OK_TRUNCATED && !end->timed_out) {
        /* exec output already cut while it was read: only its head was kept, which is no
         * longer a JSON text, so it is recorded as it is, like any cut result. */
        out->kind = DTQ_OUTCOME_SUCCEEDED;
        out->result_state = DTQ_RESULT_TRUNCATED;
        out->result_len = end->result_len;
        if ((int64_t)out->result_len > lim->result_max_bytes)
            out->result_len = (size_t)lim->result_max_bytes;
        return;
    } else if (end->status == DTQ_HANDLER_OK && !end->timed_out) {
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
    free(out->result);
    out->result = NULL;
}

const char *dtq_outcome_kind_name(enum dtq_outcome_kind k) {
    switch (k) {
    case DTQ_OUTCOME_SUCCEEDED: return "succeeded";
    case DTQ_OUTCOME_RETRY: return "retry";
    case DTQ_OUTCOME_DEAD_LETTER: return "dead_letter";
    case DTQ_OUTCOME_CANCELLED: return "cancelled";
    case DTQ_OUTCOME_DEFER: return "defer";
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
