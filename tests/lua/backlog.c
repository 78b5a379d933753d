/* backlog.c: scheduled tasks and queue housekeeping against a real redis-server, through
 * the Functions alone (no daemon): FCALL_RO <ns>_scheduled (a delayed and a retrying task
 * with their due time, attempt and last error; paging by score and member, also past a
 * member that left; the filters), <ns>_sched_run_now (queued in its stream at once, out of
 * the schedule and of the scheduler's claims, never promoted twice), <ns>_sched_delete,
 * <ns>_queue_clear (waiting entries dead-lettered with class `cleared`, or deleted;
 * running ones untouched; the `more` flag; its audit entry), <ns>_queue_remove (NOT_EMPTY
 * with the counts, then removed), and the attempt history the failure paths keep in the
 * task hash (`history`, <ns>_task_view's `attempts`). */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finisher.h"
#include "harness.h"
#include "util.h"

TH_LIBRARY_FIXTURE();

#define POLICY "{\"d\":[5,30000],\"t\":{}}"

/* ----------------------------------------------------------------- helpers */

/* The call (FCALL or FCALL_RO ..., no formatting) must be refused with an error reply
 * starting with `prefix`; returns the reply's text (caller frees). */
static char *refused(const char *call, const char *prefix) {
    redisReply *r = th_cmd(C, call);
    char *text;
    ck_assert_msg(r->type == REDIS_REPLY_ERROR, "%s: not refused", call);
    ck_assert_msg(!strncmp(r->str, prefix, strlen(prefix)), "%s: %s, want %s", call, r->str,
                  prefix);
    text = strdup(r->str);
    freeReplyObject(r);
    return text;
}

static void enqueue(const char *queue, const char *id, const char *opts) {
    char cmd[256];
    redisReply *r;
    snprintf(cmd, sizeof(cmd), "FCALL dtq_enqueue 0 %s echo {} task_id %s %s", queue, id,
             opts ? opts : "");
    r = th_cmd(C, cmd);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue %s: %s", id, r->str);
    freeReplyObject(r);
}

/* Fetches one task of `queue` as w1 and finishes it with `outcome`, `error` and `cls`
 * (a retry due in delay_ms); returns the task id (caller frees). */
static char *run_once(const char *queue, enum dtq_outcome_kind outcome, const char *error,
                      const char *cls, long long delay_ms) {
    redisReply *r, *f;
    dtq_finish_record rec;
    char *id;
    th_queue_groups(C, queue);
    r = th_fetch(C, "w1", 1, queue, POLICY);
    ck_assert_int_eq((int)r->element[0]->elements, 1);
    rec = th_finish_record(r->element[0]->element[0]);
    rec.outcome = outcome;
    rec.error = (char *)error;
    rec.error_class = cls;
    rec.delay_ms = delay_ms;
    id = strdup(rec.task_id);
    f = th_finish(C, "w1", &rec, 1);
    freeReplyObject(f);
    freeReplyObject(r);
    return id;
}

/* The reply words of an FCALL that answers an array of statuses, joined by blanks. */
static void words(const char *call, const char *want) {
    redisReply *r = th_cmd(C, call);
    char got[512] = "";
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", call, r->str ? r->str : "");
    for (size_t i = 0; i < r->elements; i++) {
        if (i) strcat(got, " ");
        strncat(got, r->element[i]->str, sizeof(got) - strlen(got) - 2);
    }
    ck_assert_msg(!strcmp(got, want), "%s: %s, want %s", call, got, want);
    freeReplyObject(r);
}

static long long zscore_exists(const char *key, const char *member) {
    redisReply *r = th_cmd(C, "ZSCORE %s %s", key, member);
    long long there = r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    return there;
}

/* The newest audit entry's field `name`, caller-owned. */
static char *last_audit(const char *name) {
    redisReply *r = th_cmd(C, "XREVRANGE dtq:stream:audit + - COUNT 1");
    char *v = NULL;
    ck_assert_int_eq((int)r->elements, 1);
    for (size_t i = 0; i + 1 < r->element[0]->element[1]->elements; i += 2)
        if (!strcmp(r->element[0]->element[1]->element[i]->str, name))
            v = strdup(r->element[0]->element[1]->element[i + 1]->str);
    freeReplyObject(r);
    ck_assert_msg(v != NULL, "no %s in the last audit entry", name);
    return v;
}

static void assert_audit(const char *name, const char *want) {
    char *v = last_audit(name);
    ck_assert_msg(!strcmp(v, want), "audit %s: %s, want %s", name, v, want);
    free(v);
}

/* ----------------------------------------------------------------- scheduled */

/* A delayed task and a retrying task, listed soonest due first with what an admin needs. */
START_TEST(test_scheduled_lists_delayed_and_retrying) {
    cJSON *o;
    const cJSON *e;
    long long t0 = dtq_now_ms();
    char err[400], *id;
    enqueue("mail", "later", "delay_ms 600000");
    enqueue("mail", "r1", NULL);
    /* the retry's error: a long first line and a second one */
    memset(err, 'e', 300);
    snprintf(err + 300, sizeof(err) - 300, "\nsecond line");
    id = run_once("mail", DTQ_OUTCOME_RETRY, err, "timeout", 300000);
    ck_assert_str_eq(id, "r1");
    free(id);
    th_assert_field(C, "r1", "status", "retrying");

    o = th_read_json(C, NULL, "dtq_scheduled 0 -");
    ck_assert_int_eq(th_json_int(o, "total"), 2);
    ck_assert_int_eq(th_json_int(o, "claimed"), 0);
    ck_assert_int_eq(th_json_int(o, "count"), 50);
    ck_assert_int_eq(th_json_int(o, "scanned"), 2);
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    ck_assert_str_eq(th_json_str(o, "filter.kind"), "all");
    ck_assert(cJSON_IsNull(th_json_at(o, "filter.queue")));
    ck_assert_int_eq(th_json_size(o, "entries"), 2);
    /* soonest due first: the retry (5 min) before the delayed task (10 min) */
    e = th_json_at(o, "entries.0");
    ck_assert_str_eq(th_json_str(e, "task_id"), "r1");
    ck_assert_str_eq(th_json_str(e, "kind"), "retrying");
    ck_assert_str_eq(th_json_str(e, "status"), "retrying");
    ck_assert_str_eq(th_json_str(e, "queue"), "mail");
    ck_assert_str_eq(th_json_str(e, "task_type"), "echo");
    ck_assert_int_eq(th_json_int(e, "attempt"), 1);
    ck_assert_int_eq(th_json_int(e, "next_attempt"), 2);
    ck_assert_int_eq(th_json_int(e, "max_attempts"), 5);
    ck_assert_int_eq(th_json_int(e, "priority"), 5);
    ck_assert(th_json_int(e, "due_ms") >= t0 + 300000 - 60000 &&
              th_json_int(e, "due_ms") <= t0 + 360000);
    ck_assert_str_eq(th_json_str(e, "last_error_class"), "timeout");
    ck_assert_int_eq((int)strlen(th_json_str(e, "last_error")), 200); /* first line, capped */
    ck_assert(strchr(th_json_str(e, "last_error"), '\n') == NULL);
    ck_assert(cJSON_IsTrue(th_json_at(e, "last_error_truncated")));
    e = th_json_at(o, "entries.1");
    ck_assert_str_eq(th_json_str(e, "task_id"), "later");
    ck_assert_str_eq(th_json_str(e, "kind"), "delayed");
    ck_assert_str_eq(th_json_str(e, "status"), "pending");
    ck_assert_int_eq(th_json_int(e, "attempt"), 1);
    ck_assert_int_eq(th_json_int(e, "next_attempt"), 1);
    ck_assert(cJSON_IsNull(th_json_at(e, "max_attempts"))); /* resolved at its first claim */
    ck_assert(cJSON_IsNull(th_json_at(e, "last_error")));
    ck_assert(cJSON_IsNull(th_json_at(e, "last_error_class")));
    ck_assert(th_json_int(e, "due_ms") > th_json_int(o, "entries.0.due_ms"));
    ck_assert(th_json_int(e, "due_ms") - th_json_int(o, "time_ms") > 500000);
    ck_assert_str_eq(th_json_str(o, "entries.0.reason"), "retry");
    ck_assert_str_eq(th_json_str(e, "reason"), "delayed");
    ck_assert(cJSON_IsNull(th_json_at(e, "limited_by")));
    cJSON_Delete(o);
    /* why a pending task waits: a limit's deferral (limited_by), a hand-back of a type no
     * worker had a handler for (class unknown_task_type), or its own delay */
    freeReplyObject(th_cmd(C, "HSET dtq:task:later limited_by concurrency:mail"));
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 kind delayed");
    ck_assert_str_eq(th_json_str(o, "entries.0.reason"), "limited");
    ck_assert_str_eq(th_json_str(o, "entries.0.limited_by"), "concurrency:mail");
    cJSON_Delete(o);
    freeReplyObject(th_cmd(C, "HDEL dtq:task:later limited_by"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:later last_error_class unknown_task_type"));
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 kind delayed");
    ck_assert_str_eq(th_json_str(o, "entries.0.reason"), "handed_back");
    cJSON_Delete(o);
    freeReplyObject(th_cmd(C, "HDEL dtq:task:later last_error_class"));

    /* the filters */
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 kind delayed");
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "later");
    ck_assert_str_eq(th_json_str(o, "filter.kind"), "delayed");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 kind retrying class timeout");
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "r1");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 class permanent");
    ck_assert_int_eq(th_json_size(o, "entries"), 0);
    ck_assert_int_eq(th_json_int(o, "scanned"), 2);
    cJSON_Delete(o);
    enqueue("other", "o-1", "delay_ms 1000");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 other send {} task_id o-2 delay_ms 2000"));
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 queue other");
    ck_assert_int_eq(th_json_size(o, "entries"), 2);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "o-1");
    ck_assert_str_eq(th_json_str(o, "filter.queue"), "other");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 queue other task_type send");
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "o-2");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 id_prefix o- kind all queue %s", "");
    ck_assert_int_eq(th_json_size(o, "entries"), 2);
    ck_assert(cJSON_IsNull(th_json_at(o, "filter.queue"))); /* an empty value is no filter */
    ck_assert_str_eq(th_json_str(o, "filter.id_prefix"), "o-");
    cJSON_Delete(o);
    /* a member whose task is gone is listed as kind other */
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 1 ghost"));
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 1");
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "ghost");
    ck_assert_str_eq(th_json_str(o, "entries.0.kind"), "other");
    ck_assert(cJSON_IsNull(th_json_at(o, "entries.0.status")));
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 kind delayed");
    ck_assert_int_eq(th_json_size(o, "entries"), 3);
    cJSON_Delete(o);

    /* refusals */
    free(refused("FCALL_RO dtq_scheduled 0 - 0", "INVALID_ARGUMENT"));
    free(refused("FCALL_RO dtq_scheduled 0 - 501", "INVALID_ARGUMENT"));
    free(refused("FCALL_RO dtq_scheduled 0 yesterday", "INVALID_ARGUMENT"));
    free(refused("FCALL_RO dtq_scheduled 0 - 5 kind soon", "INVALID_ARGUMENT"));
    free(refused("FCALL_RO dtq_scheduled 0 - 5 colour red", "INVALID_ARGUMENT"));
    free(refused("FCALL_RO dtq_scheduled 0 - 5 queue", "INVALID_ARGUMENT"));
    free(refused("FCALL_RO dtq_scheduled 0 - 5 queue a/b", "INVALID_ARGUMENT"));
}
END_TEST

/* Pages follow the set's order (score, then member bytewise), also among members of one
 * score, and go on correctly when the cursor's member left meanwhile. */
START_TEST(test_scheduled_paging) {
    char cursor[128] = "-", seen[64] = "";
    redisReply *r;
    cJSON *o;
    /* six members of one due time (one bulk call: one clock), and one later */
    for (int i = 0; i < 6; i++) freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 5000 t%d", i));
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 4000 a-first"));
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 9000 z-last"));
    for (int page = 0; page < 10; page++) {
        const cJSON *e;
        o = th_read_json(C, NULL, "dtq_scheduled 0 %s 2", cursor);
        cJSON_ArrayForEach(e, th_json_at(o, "entries")) {
            strcat(seen, th_json_str(e, "task_id"));
            strcat(seen, " ");
        }
        if (cJSON_IsNull(th_json_at(o, "next_cursor"))) {
            cJSON_Delete(o);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", th_json_str(o, "next_cursor"));
        cJSON_Delete(o);
        /* after the first page, the cursor's member leaves the set */
        if (page == 1) {
            ck_assert_str_eq(cursor, "5000:t2");
            freeReplyObject(th_cmd(C, "ZREM dtq:retry:schedule t2"));
        }
    }
    ck_assert_str_eq(seen, "a-first t0 t1 t2 t3 t4 t5 z-last ");
    /* a cursor whose member moved to another score goes on after its old place too */
    o = th_read_json(C, NULL, "dtq_scheduled 0 5000:t3 2");
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "t4");
    cJSON_Delete(o);
    r = th_cmd(C, "ZADD dtq:retry:schedule 1 t3");
    freeReplyObject(r);
    o = th_read_json(C, NULL, "dtq_scheduled 0 5000:t3 2");
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "t4");
    ck_assert_str_eq(th_json_str(o, "entries.1.task_id"), "t5");
    ck_assert_str_eq(th_json_str(o, "next_cursor"), "5000:t5");
    cJSON_Delete(o);
}
END_TEST

/* A filtered page examines at most 1000 members and says where to go on. */
START_TEST(test_scheduled_scan_bound) {
    redisReply *r;
    cJSON *o;
    char cmd[64];
    /* 1200 members of tasks that do not exist, then one delayed task due after them all */
    for (int i = 0; i < 1200; i += 100) {
        dtq_argv a;
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "ZADD");
        dtq_argv_adds(&a, "dtq:retry:schedule");
        for (int j = i; j < i + 100; j++) {
            snprintf(cmd, sizeof(cmd), "g%04d", j);
            dtq_argv_adds(&a, "1000");
            dtq_argv_adds(&a, cmd);
        }
        r = redisCommandArgv(C, a.argc, (const char **)a.argv, a.lens);
        freeReplyObject(r);
        dtq_argv_deinit(&a);
    }
    enqueue("mail", "real", "delay_ms 600000");
    o = th_read_json(C, NULL, "dtq_scheduled 0 - 10 kind delayed");
    ck_assert_int_eq(th_json_size(o, "entries"), 0);
    ck_assert_int_eq(th_json_int(o, "scanned"), 1000);
    ck_assert_str_eq(th_json_str(o, "next_cursor"), "1000:g0999");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_scheduled 0 1000:g0999 10 kind delayed");
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "real");
    ck_assert_int_eq(th_json_int(o, "scanned"), 201);
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- run now, delete */

START_TEST(test_run_now) {
    char *id, *v;
    redisReply *r;
    enqueue("mail", "later", "delay_ms 600000");
    enqueue("mail", "r1", NULL);
    id = run_once("mail", DTQ_OUTCOME_RETRY, "boom", "retryable", 600000);
    free(id);
    words("FCALL dtq_sched_run_now 0 alice later r1 nosuch later",
          "done done not_found not_scheduled");
    /* queued in their stream at once, out of the schedule */
    th_assert_field(C, "later", "status", "queued");
    th_assert_field(C, "later", "attempt", "1");
    th_assert_field(C, "r1", "status", "queued");
    th_assert_field(C, "r1", "attempt", "2");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:mail:p5")), 2);
    assert_audit("action", "sched_run_now");
    assert_audit("actor", "alice");
    assert_audit("task_id", "r1");
    /* the next fetch runs them, at their attempt */
    r = th_fetch(C, "w1", 5, "mail", POLICY);
    ck_assert_int_eq((int)r->element[0]->elements, 2);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "later");
    ck_assert_str_eq(r->element[0]->element[1]->element[2]->str, "r1");
    ck_assert_int_eq(r->element[0]->element[1]->element[6]->integer, 2);
    freeReplyObject(r);
    words("FCALL dtq_sched_run_now 0 alice r1", "not_scheduled");

    /* one the scheduler had claimed already: taken from the claims, and the scheduler's
     * promote that follows writes no second entry */
    enqueue("mail", "soon", "delay_ms 1");
    th_sleep_ms(5);
    {
        size_t n;
        r = th_sched_claim(C, 10, 60000, &n);
        ck_assert_int_eq((int)n, 1);
        ck_assert_str_eq(r->element[0]->str, "soon");
        ck_assert_int_eq(r->element[1]->integer, 1);            /* found: soon */
        ck_assert_int_eq(r->element[2]->integer, 0);            /* no claims */
        ck_assert_int_eq(r->element[3]->type, REDIS_REPLY_NIL); /* left: none */
        freeReplyObject(r);
    }
    ck_assert(zscore_exists("dtq:retry:claimed", "soon"));
    words("FCALL dtq_sched_run_now 0 bob soon", "done");
    ck_assert(!zscore_exists("dtq:retry:claimed", "soon"));
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 soon")), 0);
    /* the two fetched entries (pending) and soon's one */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:mail:p5")), 3);
    v = th_task_field(C, "soon", "status");
    ck_assert_str_eq(v, "queued");
    free(v);
    /* and the claim cannot come back as stale: it is gone */
    {
        size_t n;
        r = th_sched_claim(C, 10, 0, &n);
        ck_assert_int_eq((int)n, 0);
        ck_assert_int_eq(r->element[1]->integer, 0); /* claims: none */
        ck_assert_int_eq(r->element[2]->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
    }

    /* refusals: no ids, too many, a bad id; nothing audited */
    free(refused("FCALL dtq_sched_run_now 0 alice", "INVALID_ARGUMENT"));
    free(refused("FCALL dtq_sched_run_now 0 alice a/b", "INVALID_ARGUMENT"));
    {
        dtq_argv a;
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "FCALL");
        dtq_argv_adds(&a, "dtq_sched_run_now");
        dtq_argv_adds(&a, "0");
        dtq_argv_adds(&a, "alice");
        for (int i = 0; i < 501; i++) dtq_argv_adds(&a, "x");
        r = redisCommandArgv(C, a.argc, (const char **)a.argv, a.lens);
        ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
        ck_assert_ptr_nonnull(strstr(r->str, "INVALID_ARGUMENT"));
        freeReplyObject(r);
        dtq_argv_deinit(&a);
    }
    assert_audit("task_id", "soon");
}
END_TEST

START_TEST(test_delete) {
    char *v, *id;
    enqueue("mail", "later", "delay_ms 600000 idempotency_key k1");
    enqueue("mail", "r1", NULL);
    id = run_once("mail", DTQ_OUTCOME_RETRY, "boom", "retryable", 600000);
    free(id);
    enqueue("mail", "now", NULL);
    words("FCALL dtq_sched_delete 0 carol later r1 now nosuch",
          "done done not_scheduled not_found");
    th_assert_field(C, "later", "status", "cancelled");
    th_assert_field(C, "r1", "status", "cancelled");
    th_assert_field(C, "now", "status", "queued");
    v = th_task_field(C, "later", "metadata");
    ck_assert_ptr_nonnull(strstr(v, "\"deleted\":true"));
    free(v);
    ck_assert(th_int(th_cmd(C, "TTL dtq:task:later")) > 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    v = th_task_field(C, "later", "finished_at");
    ck_assert_ptr_nonnull(v);
    free(v);
    {
        redisReply *r = th_cmd(C, "GET dtq:idempotency:mail:k1");
        ck_assert_ptr_nonnull(strstr(r->str, "\"failed\""));
        freeReplyObject(r);
    }
    assert_audit("action", "sched_delete");
    assert_audit("actor", "carol");
    assert_audit("task_id", "r1");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:audit")), 2);
    /* a deleted task is not run by the scheduler, nor deleted twice */
    words("FCALL dtq_sched_delete 0 carol later", "not_scheduled");
    words("FCALL dtq_sched_run_now 0 carol later", "not_scheduled");
    /* a stale member (its task ended) is removed all the same */
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 1 later"));
    words("FCALL dtq_sched_delete 0 carol later", "not_scheduled");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    free(refused("FCALL dtq_sched_delete 0 carol", "INVALID_ARGUMENT"));
}
END_TEST

/* ----------------------------------------------------------------- queue clear, remove */

START_TEST(test_queue_clear) {
    redisReply *r;
    char raw_id[128], *v;
    /* mail: one running task, three waiting (one of them a producer's raw entry), one at
     * p9, and one delayed (not waiting: it stays) */
    enqueue("mail", "run1", NULL);
    th_queue_groups(C, "mail");
    r = th_fetch(C, "w1", 1, "mail", POLICY);
    ck_assert_int_eq((int)r->element[0]->elements, 1);
    freeReplyObject(r);
    enqueue("mail", "w1", NULL);
    enqueue("mail", "w2", "priority 9");
    r = th_cmd(C, "XADD dtq:stream:mail:p2 * task_type echo payload [1]");
    snprintf(raw_id, sizeof(raw_id), "mail:p2:%s", r->str);
    freeReplyObject(r);
    enqueue("mail", "later", "delay_ms 600000");

    r = th_cmd(C, "FCALL dtq_queue_clear 0 dave mail");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->element[0]->integer, 3); /* cleared */
    ck_assert_int_eq(r->element[1]->integer, 0); /* dropped */
    ck_assert_int_eq(r->element[2]->integer, 0); /* more */
    freeReplyObject(r);
    th_assert_field(C, "w1", "status", "dead_lettered");
    th_assert_field(C, "w2", "status", "dead_lettered");
    th_assert_field(C, raw_id, "status", "dead_lettered");
    th_assert_field(C, "w1", "last_error_class", "cleared");
    th_assert_field(C, "run1", "status", "running"); /* pending entries stay */
    th_assert_field(C, "later", "status", "pending");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 3);
    r = th_cmd(C, "XRANGE dtq:stream:dead-letter - + COUNT 1");
    ck_assert_str_eq(r->element[0]->element[1]->element[1]->str, "w2"); /* p9 first */
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:mail:p5")), 1); /* run1's entry */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:mail:p9")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:mail:p2")), 0);
    assert_audit("action", "queue_clear");
    assert_audit("actor", "dave");
    assert_audit("queue", "mail");
    assert_audit("mode", "dead_letter");
    assert_audit("count", "3");
    /* the running task finishes normally afterwards */
    v = th_task_field(C, "run1", "worker_id");
    ck_assert_str_eq(v, "w1");
    free(v);

    /* delete: ended cancelled with metadata.deleted, no dead letter */
    enqueue("jobs", "j1", NULL);
    enqueue("jobs", "j2", NULL);
    r = th_cmd(C, "FCALL dtq_queue_clear 0 dave jobs delete");
    ck_assert_int_eq(r->element[0]->integer, 2);
    freeReplyObject(r);
    th_assert_field(C, "j1", "status", "cancelled");
    v = th_task_field(C, "j2", "metadata");
    ck_assert_ptr_nonnull(strstr(v, "\"deleted\":true"));
    free(v);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 3);
    assert_audit("mode", "delete");
    assert_audit("count", "2");

    /* a stale entry (its task moved on) is only deleted */
    enqueue("jobs", "j3", NULL);
    freeReplyObject(th_cmd(C, "HSET dtq:task:j3 status succeeded"));
    r = th_cmd(C, "FCALL dtq_queue_clear 0 dave jobs");
    ck_assert_int_eq(r->element[0]->integer, 0);
    ck_assert_int_eq(r->element[1]->integer, 1);
    freeReplyObject(r);
    th_assert_field(C, "j3", "status", "succeeded");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:jobs:p5")), 0);

    free(refused("FCALL dtq_queue_clear 0 dave a/b", "INVALID_ARGUMENT"));
    free(refused("FCALL dtq_queue_clear 0 dave jobs everything", "INVALID_ARGUMENT"));
}
END_TEST

/* A large queue is cleared in bounded calls: `more` until none is left. */
START_TEST(test_queue_clear_more) {
    dtq_argv a;
    redisReply *r;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, "dtq_enqueue_bulk");
    dtq_argv_adds(&a, "0");
    dtq_argv_adds(&a, "big");
    dtq_argv_adds(&a, "echo");
    dtq_argv_adds(&a, "1001");
    for (int i = 0; i < 1001; i++) dtq_argv_adds(&a, "{}");
    r = redisCommandArgv(C, a.argc, (const char **)a.argv, a.lens);
    ck_assert_int_eq((int)r->elements, 1001);
    freeReplyObject(r);
    dtq_argv_deinit(&a);
    r = th_cmd(C, "FCALL dtq_queue_clear 0 dave big delete");
    ck_assert_int_eq(r->element[0]->integer, 1000);
    ck_assert_int_eq(r->element[2]->integer, 1);
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_queue_clear 0 dave big delete");
    ck_assert_int_eq(r->element[0]->integer, 1);
    ck_assert_int_eq(r->element[2]->integer, 0);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:big:p5")), 0);
}
END_TEST

START_TEST(test_queue_remove) {
    redisReply *r;
    char *err, *id;
    /* waiting */
    enqueue("mail", "m1", NULL);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 mail"));
    err = refused("FCALL dtq_queue_remove 0 erin mail", "NOT_EMPTY");
    ck_assert_str_eq(err, "NOT_EMPTY queue mail holds 1 waiting, 0 pending, 0 scheduled");
    free(err);
    /* pending */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 mail"));
    th_queue_groups(C, "mail");
    r = th_fetch(C, "w1", 1, "mail", POLICY);
    freeReplyObject(r);
    err = refused("FCALL dtq_queue_remove 0 erin mail", "NOT_EMPTY");
    ck_assert_str_eq(err, "NOT_EMPTY queue mail holds 0 waiting, 1 pending, 0 scheduled");
    free(err);
    /* scheduled: m1 fails and waits for its retry */
    {
        dtq_finish_record rec;
        redisReply *claimed = th_cmd(C, "XPENDING dtq:stream:mail:p5 workers - + 1");
        char entry[64];
        snprintf(entry, sizeof(entry), "%s", claimed->element[0]->element[0]->str);
        freeReplyObject(claimed);
        rec = (dtq_finish_record){0};
        rec.task_id = (char *)"m1";
        rec.attempt = 1;
        rec.stream = (char *)"dtq:stream:mail:p5";
        rec.entry_id = entry;
        rec.outcome = DTQ_OUTCOME_RETRY;
        rec.result_state = DTQ_RESULT_NONE;
        rec.result = (char *)"";
        rec.error = (char *)"boom";
        rec.error_class = "retryable";
        rec.delay_ms = 600000;
        freeReplyObject(th_finish(C, "w1", &rec, 1));
    }
    err = refused("FCALL dtq_queue_remove 0 erin mail", "NOT_EMPTY");
    ck_assert_str_eq(err, "NOT_EMPTY queue mail holds 0 waiting, 0 pending, 1 scheduled");
    free(err);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues mail")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:audit")), 2); /* pause, resume */
    /* nothing left: removed, with its streams and paused flag */
    words("FCALL dtq_sched_delete 0 erin m1", "done");
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 mail"));
    r = th_cmd(C, "FCALL dtq_queue_remove 0 erin mail");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "removed"), "%s", r->str);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues mail")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:stream:mail:p5 dtq:stream:mail:p0")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:mail:paused")), 0);
    assert_audit("action", "queue_remove");
    assert_audit("queue", "mail");
    assert_audit("actor", "erin");
    err = refused("FCALL dtq_queue_remove 0 erin mail", "NOT_FOUND");
    free(err);
    free(refused("FCALL dtq_queue_remove 0 erin a/b", "INVALID_ARGUMENT"));
    /* a worker that serves the queue again brings it back to the index at its next fetch */
    r = th_fetch(C, "w1", 1, "mail", POLICY);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues mail")), 1);
    /* so does a task of the removed queue promoted later */
    enqueue("gone", "g1", "delay_ms 600000");
    words("FCALL dtq_sched_delete 0 erin g1", "done");
    r = th_cmd(C, "FCALL dtq_queue_remove 0 erin gone");
    ck_assert_str_eq(r->str, "removed");
    freeReplyObject(r);
    enqueue("gone", "g2", "delay_ms 600000");
    freeReplyObject(th_cmd(C, "SREM dtq:queues gone"));
    words("FCALL dtq_sched_run_now 0 erin g2", "done");
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues gone")), 1);
    id = th_task_field(C, "g2", "status");
    ck_assert_str_eq(id, "queued");
    free(id);
}
END_TEST

/* ----------------------------------------------------------------- attempt history */

START_TEST(test_history) {
    cJSON *o;
    char *id, *h, err[400];
    redisReply *r;
    /* a success leaves no history; task_view says [] */
    enqueue("mail", "ok1", NULL);
    id = run_once("mail", DTQ_OUTCOME_SUCCEEDED, "", "", 0);
    free(id);
    ck_assert_ptr_null(th_task_field(C, "ok1", "history"));
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1");
    ck_assert_int_eq(th_json_size(o, "attempts"), 0);
    cJSON_Delete(o);

    /* a retry, a handback, then a dead letter */
    enqueue("mail", "f1", NULL);
    memset(err, 'x', 300);
    snprintf(err + 300, sizeof(err) - 300, "\ntrace");
    id = run_once("mail", DTQ_OUTCOME_RETRY, err, "retryable", 0);
    free(id);
    words("FCALL dtq_sched_run_now 0 t f1", "done");
    r = th_fetch(C, "w1", 1, "mail", POLICY);
    ck_assert_int_eq(r->element[0]->element[0]->element[6]->integer, 2);
    freeReplyObject(th_cmd(
        C, "FCALL dtq_handback 0 w1 1 f1 2 %s %s %s", r->element[0]->element[0]->element[0]->str,
        r->element[0]->element[0]->element[1]->str, "interrupted: worker shut down"));
    freeReplyObject(r);
    th_assert_field(C, "f1", "attempt", "3");
    id = run_once("mail", DTQ_OUTCOME_DEAD_LETTER, "card declined", "permanent", 0);
    free(id);
    th_assert_field(C, "f1", "status", "dead_lettered");
    o = th_read_json(C, NULL, "dtq_task_view 0 f1");
    ck_assert_int_eq(th_json_size(o, "attempts"), 3);
    ck_assert_int_eq(th_json_int(o, "attempts.0.attempt"), 1);
    ck_assert_str_eq(th_json_str(o, "attempts.0.class"), "retryable");
    ck_assert_int_eq((int)strlen(th_json_str(o, "attempts.0.error")), 200);
    ck_assert_str_eq(th_json_str(o, "attempts.0.worker"), "w1");
    ck_assert(th_json_int(o, "attempts.0.ended_at") > 0);
    ck_assert_int_eq(th_json_int(o, "attempts.1.attempt"), 2);
    ck_assert_str_eq(th_json_str(o, "attempts.1.class"), "interrupted");
    ck_assert_str_eq(th_json_str(o, "attempts.1.error"), "interrupted: worker shut down");
    ck_assert_int_eq(th_json_int(o, "attempts.2.attempt"), 3);
    ck_assert_str_eq(th_json_str(o, "attempts.2.class"), "permanent");
    ck_assert_str_eq(th_json_str(o, "attempts.2.error"), "card declined");
    ck_assert(th_json_int(o, "attempts.2.ended_at") >= th_json_int(o, "attempts.0.ended_at"));
    cJSON_Delete(o);
    /* the field itself is a JSON array */
    h = th_task_field(C, "f1", "history");
    ck_assert(h[0] == '[');
    free(h);

    /* the last ten are kept */
    enqueue("mail", "many", NULL);
    for (int i = 0; i < 12; i++) {
        id = run_once("mail", DTQ_OUTCOME_RETRY, "again", "timeout", 0);
        free(id);
        words("FCALL dtq_sched_run_now 0 t many", "done");
    }
    o = th_read_json(C, NULL, "dtq_task_view 0 many");
    ck_assert_int_eq(th_json_size(o, "attempts"), 10);
    ck_assert_int_eq(th_json_int(o, "attempts.0.attempt"), 3);
    ck_assert_int_eq(th_json_int(o, "attempts.9.attempt"), 12);
    cJSON_Delete(o);

    /* the attempt of a lost worker, adopted and requeued by a recovery (mode crashed) */
    enqueue("lost", "l1", NULL);
    th_queue_groups(C, "lost");
    freeReplyObject(th_fetch(C, "w9", 1, "lost", POLICY));
    freeReplyObject(
        th_cmd(C, "FCALL dtq_recover 1 dtq:stream:lost:p5 w9 crashed %s 0 lost 5", POLICY));
    th_assert_field(C, "l1", "status", "queued");
    th_assert_field(C, "l1", "attempt", "2");
    o = th_read_json(C, NULL, "dtq_task_view 0 l1");
    ck_assert_int_eq(th_json_size(o, "attempts"), 1);
    ck_assert_int_eq(th_json_int(o, "attempts.0.attempt"), 1);
    ck_assert_str_eq(th_json_str(o, "attempts.0.class"), "worker_lost");
    ck_assert_str_eq(th_json_str(o, "attempts.0.worker"), "w9");
    cJSON_Delete(o);

    /* a cancelled outcome is recorded too; a damaged field starts a new history */
    enqueue("cancels", "c1", NULL);
    freeReplyObject(th_cmd(C, "HSET dtq:task:c1 history %s", "{\"not\": \"an array\"}"));
    id = run_once("cancels", DTQ_OUTCOME_CANCELLED, "", "", 0);
    free(id);
    th_assert_field(C, "c1", "status", "cancelled");
    o = th_read_json(C, NULL, "dtq_task_view 0 c1");
    ck_assert_int_eq(th_json_size(o, "attempts"), 1);
    ck_assert_str_eq(th_json_str(o, "attempts.0.class"), "cancelled");
    cJSON_Delete(o);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_backlog");
    TCase *tc = tcase_create("scheduled tasks");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_scheduled_lists_delayed_and_retrying);
    tcase_add_test(tc, test_scheduled_paging);
    tcase_add_test(tc, test_scheduled_scan_bound);
    tcase_add_test(tc, test_run_now);
    tcase_add_test(tc, test_delete);
    tcase_add_test(tc, test_queue_clear);
    tcase_add_test(tc, test_queue_clear_more);
    tcase_add_test(tc, test_queue_remove);
    tcase_add_test(tc, test_history);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
