/* lua_suite.h: what the Lua-level suites (the .c files of tests/lua) share: each runs the Functions
 * library against its own redis-server without a daemon (TH_LIBRARY_FIXTURE: the static
 * R, C, setup and teardown), and the helpers below read that C, so they are static here
 * and marked unused for the suites that need only some. */
#ifndef DTQ_LUA_SUITE_H
#define DTQ_LUA_SUITE_H

#include <cjson/cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "finisher.h"
#include "harness.h"
#include "keys.h"
#include "scripts.h"
#include "streams.h"
#include "util.h"

#define DTQ_LUA_SUITE_UNUSED __attribute__((unused))

TH_LIBRARY_FIXTURE();

#define POLICY "{\"d\":[5,30000],\"t\":{\"echo\":[3,1000]}}"

static DTQ_LUA_SUITE_UNUSED redisReply *fetch(const char *worker, int count, const char *q) {
    return th_fetch(C, worker, count, q, POLICY);
}

static DTQ_LUA_SUITE_UNUSED redisReply *enqueue(const char *type, const char *payload) {
    return th_cmd(C, "FCALL dtq_enqueue 0 default %s %s", type, payload);
}

static DTQ_LUA_SUITE_UNUSED char *field(const char *id, const char *f) {
    return th_task_field(C, id, f);
}

/* The newest dead-letter entry has every field of SPEC 8 and the expected error. */
static DTQ_LUA_SUITE_UNUSED void assert_dead_lettered_with(const char *err_frag) {
    redisReply *d = th_cmd(C, "XREVRANGE dtq:stream:dead-letter + - COUNT 1");
    ck_assert_int_eq(d->elements, 1);
    redisReply *f = d->element[0]->element[1];
    const char *want[] = {
        "task_id",        "queue",      "task_type",        "payload",         "attempt",
        "max_attempts",   "priority",   "timeout_ms",       "idempotency_key", "failed_at_ms",
        "attempts_made",  "last_error", "last_error_class", "retryable",       "worker_id",
        "original_queue", NULL};
    for (const char **w = want; *w; w++) {
        int found = 0;
        for (size_t i = 0; i + 1 < f->elements; i += 2)
            if (!strcmp(f->element[i]->str, *w)) found = 1;
        ck_assert_msg(found, "dead-letter entry lacks %s", *w);
    }
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (!strcmp(f->element[i]->str, "last_error"))
            ck_assert_msg(strstr(f->element[i + 1]->str, err_frag) != NULL,
                          "last_error '%s' lacks '%s'", f->element[i + 1]->str, err_frag);
        if (!strcmp(f->element[i]->str, "retryable")) ck_assert_str_eq(f->element[i + 1]->str, "0");
    }
    freeReplyObject(d);
}

/* Finishes one claimed task (th_finish: through the daemon's own encoder). */
static DTQ_LUA_SUITE_UNUSED redisReply *finish_one(const char *worker, redisReply *claimed,
                                                   enum dtq_outcome_kind outcome,
                                                   const char *result,
                                                   enum dtq_result_state state) {
    dtq_finish_record rec = th_finish_record(claimed);
    rec.outcome = outcome;
    rec.result_state = state;
    rec.result = (char *)result;
    rec.result_len = strlen(result);
    rec.error = (char *)"boom";
    rec.error_class = "retryable";
    rec.delay_ms = 1500;
    return th_finish(C, worker, &rec, 1);
}

#define OK_ DTQ_OUTCOME_SUCCEEDED

#define RETRY_ DTQ_OUTCOME_RETRY

#define DEAD_ DTQ_OUTCOME_DEAD_LETTER

/* The stream entry id of the newest entry of `stream` whose `field` is `value`, into out. */
static DTQ_LUA_SUITE_UNUSED void entry_id_of(const char *stream, const char *fld, const char *value,
                                             char *out, size_t outlen) {
    redisReply *r = th_cmd(C, "XRANGE %s - +", stream);
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++) {
        const char *v = th_entry_field(r->element[i], fld);
        if (v && !strcmp(v, value)) snprintf(out, outlen, "%s", r->element[i]->element[0]->str);
    }
    freeReplyObject(r);
    ck_assert_msg(out[0], "no entry with %s = %s in %s", fld, value, stream);
}

/* Fails unless quarantine entry `idx` (oldest first) is for `key`, from `source`, with a
 * reason naming the key's type. */
static DTQ_LUA_SUITE_UNUSED void assert_quarantined(size_t idx, const char *key, const char *source,
                                                    const char *type) {
    redisReply *q = th_cmd(C, "XRANGE dtq:stream:quarantine - +");
    char want[256];
    ck_assert_int_gt(q->elements, idx);
    snprintf(want, sizeof(want), "wrong type: %s is a %s, not a hash", key, type);
    ck_assert_str_eq(th_entry_field(q->element[idx], "reason"), want);
    ck_assert_str_eq(th_entry_field(q->element[idx], "key"), key);
    ck_assert_str_eq(th_entry_field(q->element[idx], "source"), source);
    ck_assert_int_gt(strtoll(th_entry_field(q->element[idx], "ts"), NULL, 10), 0);
    freeReplyObject(q);
}

/* Fails unless `id` is dead-lettered as poisoned because of `why`, with its dead-letter entry
 * and a retention TTL. */
static DTQ_LUA_SUITE_UNUSED void assert_poisoned(const char *id, const char *why) {
    char err[160], entry[64];
    snprintf(err, sizeof(err), "poisoned record: %s", why);
    th_assert_field(C, id, "status", "dead_lettered");
    th_assert_field(C, id, "last_error", err);
    th_assert_field(C, id, "last_error_class", "poisoned");
    entry_id_of("dtq:stream:dead-letter", "task_id", id, entry, sizeof(entry));
    th_assert_field(C, id, "dlq_entry", entry);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:%s", id)), 0);
}

static DTQ_LUA_SUITE_UNUSED void assert_string_key(const char *key, const char *want) {
    redisReply *r = th_cmd(C, "GET %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, want);
    freeReplyObject(r);
}

static DTQ_LUA_SUITE_UNUSED long long pending_count(const char *stream) {
    redisReply *r = th_cmd(C, "XPENDING %s workers", stream);
    long long n = r->element[0]->integer;
    freeReplyObject(r);
    return n;
}

#endif
