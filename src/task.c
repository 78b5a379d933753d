/* task.c: decoding of claimed tasks. Everything is copied out of the reply, which hiredis
 * frees as soon as the callback returns. */
#include "task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "streams.h"
#include "util.h"

#define CLAIM_FIELDS 9 /* lua/lib/claim.lua claim_task(); a lean claim (LEAN.process) adds one */
#define LEAN_CLAIM_FIELDS 5 /* a task of fetch's lean-claims (LEAN.first) */
#define FULL_CLAIM_FIELDS 7 /* a task of fetch's full-claims (FULL.first) */

static int as_string(const redisReply *r, char **out, size_t *len) {
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        *out = dtq_xstrndup(r->str, r->len);
        if (len) *len = r->len;
        return DTQ_OK;
    }
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = dtq_xasprintf("%lld", r->integer);
        if (len) *len = strlen(*out);
        return DTQ_OK;
    }
    return DTQ_ERR;
}

/* An integer in [min, max], as an integer reply or a string of one. */
static int as_int(const redisReply *r, int64_t min, int64_t max, int64_t *out) {
    if (r->type == REDIS_REPLY_INTEGER) {
        if (r->integer < min || r->integer > max) return DTQ_ERR;
        *out = r->integer;
        return DTQ_OK;
    }
    if (r->type == REDIS_REPLY_STRING) return dtq_parse_int64(r->str, min, max, out);
    return DTQ_ERR;
}

dtq_task *dtq_task_from_reply(const redisReply *r, char *err, size_t errlen) {
    dtq_task *t;
    if (!r || r->type != REDIS_REPLY_ARRAY ||
        (r->elements != CLAIM_FIELDS && r->elements != CLAIM_FIELDS + 1 &&
         r->elements != CLAIM_FIELDS + 2)) {
        snprintf(err, errlen, "claimed task is not an array of %d", CLAIM_FIELDS);
        return NULL;
    }
    t = dtq_xcalloc(1, sizeof(*t));
    if (as_string(r->element[0], &t->stream, NULL) ||
        as_string(r->element[1], &t->entry_id, NULL) || as_string(r->element[2], &t->id, NULL) ||
        as_string(r->element[3], &t->queue, NULL) ||
        as_string(r->element[4], &t->task_type, NULL) ||
        as_string(r->element[5], &t->payload, &t->payload_len) ||
        as_int(r->element[6], 1, DTQ_TASK_INT_MAX, &t->attempt) ||
        as_int(r->element[7], 1, DTQ_MAX_ATTEMPTS, &t->max_attempts) ||
        as_int(r->element[8], 1, DTQ_TASK_INT_MAX, &t->timeout_ms)) {
        snprintf(err, errlen, "claimed task has a field of the wrong type or out of range");
        dtq_task_free(t);
        return NULL;
    }
    if (r->elements > CLAIM_FIELDS) {
        int64_t lean;
        if (as_int(r->element[CLAIM_FIELDS], 0, 1, &lean)) {
            snprintf(err, errlen, "claimed task has a lean flag that is not 0 or 1");
            dtq_task_free(t);
            return NULL;
        }
        t->lean = (int)lean;
    }
    if (r->elements == CLAIM_FIELDS + 2 &&
        (r->element[CLAIM_FIELDS + 1]->type != REDIS_REPLY_STRING ||
         as_string(r->element[CLAIM_FIELDS + 1], &t->parent_results, &t->parent_results_len))) {
        snprintf(err, errlen, "claimed task has parent_results that are not a string");
        dtq_task_free(t);
        return NULL;
    }
    return t;
}

/* The claim lists of a fetch reply (lean-claims, full-claims): flat groups, a head (stream,
 * queue, [band,] m) then m claims of a fixed width, decoded by the kind's claim(). */
typedef struct {
    const char *head_error; /* the message of a malformed group head */
    size_t head;            /* its elements: 4 with a band, 3 without */
    size_t fields;          /* the elements of one claim */
    /* The task of claim e (its stream, queue and a lean id come from the group), or NULL
     * with err filled. */
    dtq_task *(*claim)(redisReply *const *e, char *err, size_t errlen);
} claim_kind;

static int strings(redisReply *const *e, int n) {
    for (int i = 0; i < n; i++)
        if (e[i]->type != REDIS_REPLY_STRING) return 0;
    return 1;
}

static int claims_decode(const claim_kind *k, const redisReply *r,
                         void (*fn)(dtq_task *t, void *arg), void *arg, char *err, size_t errlen) {
    int n = 0;
    size_t i = 0;
    if (!r) return 0;
    if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "claims are not an array");
        return -1;
    }
    while (i < r->elements) {
        redisReply *const *g = r->element + i;
        int64_t band = -1, m;
        if (r->elements - i < k->head || !strings(g, 2) ||
            (k->head == 4 && as_int(g[2], 0, DTQ_BANDS - 1, &band)) ||
            as_int(g[k->head - 1], 1, (int64_t)((r->elements - i - k->head) / k->fields), &m)) {
            snprintf(err, errlen, "%s", k->head_error);
            return -1;
        }
        for (int64_t j = 0; j < m; j++) {
            dtq_task *t = k->claim(g + k->head + (size_t)j * k->fields, err, errlen);
            if (!t) return -1;
            t->stream = dtq_xstrndup(g[0]->str, g[0]->len);
            t->queue = dtq_xstrndup(g[1]->str, g[1]->len);
            if (band >= 0) t->id = dtq_xasprintf("%s:p%d:%s", t->queue, (int)band, t->entry_id);
            fn(t, arg);
            n++;
        }
        i += k->head + (size_t)m * k->fields;
    }
    return n;
}

/* entry_id, task_type, payload, max_attempts, timeout_ms: a lean task at attempt 1 */
static dtq_task *lean_claim(redisReply *const *e, char *err, size_t errlen) {
    dtq_task *t;
    if (!strings(e, 3)) {
        snprintf(err, errlen, "lean claims: a claim field of the wrong type");
        return NULL;
    }
    t = dtq_xcalloc(1, sizeof(*t));
    t->attempt = 1;
    t->lean = 1;
    if (as_int(e[3], 1, DTQ_MAX_ATTEMPTS, &t->max_attempts) ||
        as_int(e[4], 1, DTQ_TASK_INT_MAX, &t->timeout_ms)) {
        snprintf(err, errlen, "lean claims: max_attempts or timeout_ms out of range");
        free(t);
        return NULL;
    }
    t->entry_id = dtq_xstrndup(e[0]->str, e[0]->len);
    t->task_type = dtq_xstrndup(e[1]->str, e[1]->len);
    t->payload = dtq_xstrndup(e[2]->str, e[2]->len);
    t->payload_len = e[2]->len;
    return t;
}

/* entry_id, task_id, task_type, payload, attempt, max_attempts, timeout_ms */
static dtq_task *full_claim(redisReply *const *e, char *err, size_t errlen) {
    dtq_task *t;
    if (!strings(e, 4)) {
        snprintf(err, errlen, "full claims: a claim field of the wrong type");
        return NULL;
    }
    t = dtq_xcalloc(1, sizeof(*t));
    if (as_int(e[4], 1, DTQ_TASK_INT_MAX, &t->attempt) ||
        as_int(e[5], 1, DTQ_MAX_ATTEMPTS, &t->max_attempts) ||
        as_int(e[6], 1, DTQ_TASK_INT_MAX, &t->timeout_ms)) {
        snprintf(err, errlen, "full claims: attempt, max_attempts or timeout_ms out of range");
        free(t);
        return NULL;
    }
    t->entry_id = dtq_xstrndup(e[0]->str, e[0]->len);
    t->id = dtq_xstrndup(e[1]->str, e[1]->len);
    t->task_type = dtq_xstrndup(e[2]->str, e[2]->len);
    t->payload = dtq_xstrndup(e[3]->str, e[3]->len);
    t->payload_len = e[3]->len;
    return t;
}

static const claim_kind LEAN_CLAIMS = {
    "lean claims: a group head that is not stream, queue, band, m", 4, LEAN_CLAIM_FIELDS,
    lean_claim};
static const claim_kind FULL_CLAIMS = {"full claims: a group head that is not stream, queue, m", 3,
                                       FULL_CLAIM_FIELDS, full_claim};

int dtq_lean_claims_decode(const redisReply *r, void (*fn)(dtq_task *t, void *arg), void *arg,
                           char *err, size_t errlen) {
    return claims_decode(&LEAN_CLAIMS, r, fn, arg, err, errlen);
}

int dtq_full_claims_decode(const redisReply *r, void (*fn)(dtq_task *t, void *arg), void *arg,
                           char *err, size_t errlen) {
    return claims_decode(&FULL_CLAIMS, r, fn, arg, err, errlen);
}

int dtq_fetch_reply_ok(const redisReply *r) {
    const redisReply *block;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->elements > 5 ||
        r->element[0]->type != REDIS_REPLY_ARRAY || r->element[1]->type != REDIS_REPLY_ARRAY ||
        r->element[2]->type != REDIS_REPLY_INTEGER ||
        (r->elements >= 4 && r->element[3]->type != REDIS_REPLY_ARRAY) ||
        (r->elements == 5 && r->element[4]->type != REDIS_REPLY_ARRAY))
        return 0;
    block = r->element[1];
    if (block->elements % 2) return 0;
    for (size_t i = 0; i < block->elements; i++)
        if (block->element[i]->type != REDIS_REPLY_STRING) return 0;
    return 1;
}

int dtq_reap_reply_ok(const redisReply *r) {
    return r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_ARRAY && r->element[1]->type == REDIS_REPLY_ARRAY;
}

void dtq_task_free(dtq_task *t) {
    if (!t) return;
    free(t->stream);
    free(t->entry_id);
    free(t->id);
    free(t->queue);
    free(t->task_type);
    free(t->payload);
    free(t->parent_results);
    free(t);
}

const char *const dtq_task_terminal_statuses[] = {"succeeded", "failed",  "dead_lettered",
                                                  "cancelled", "expired", NULL};

int dtq_task_status_is_terminal(const char *s) {
    for (const char *const *t = dtq_task_terminal_statuses; *t; t++)
        if (!strcmp(*t, s)) return 1;
    return 0;
}
