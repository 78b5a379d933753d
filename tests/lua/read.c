/* read.c: the read model (FCALL_RO <ns>_overview, _workers, _queue_view, _task_view,
 * _dead_letters, _audit_page) against a real redis-server, after known work done through
 * the Functions: the JSON each one answers (depths per band and in total, equal to what
 * <ns>_stats says; a raw entry's task id equal to the one fetch gives it; running entries;
 * a dead letter; worker objects; paging with a cursor; empty arrays as []), NOT_FOUND, and
 * <ns>_requeue_dlq's cursor form. Every read is an FCALL_RO: the Functions are no-writes. */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finisher.h"
#include "harness.h"
#include "util.h"

static th_redis R;
static redisContext *C;

#define POLICY "{\"d\":[5,30000],\"t\":{}}"

static void setup(void) {
    th_redis_start(&R, 0);
    C = th_connect(&R);
    th_load_library(C);
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 1000"));
}

static void teardown(void) {
    redisFree(C);
    th_redis_stop(&R);
}

/* ----------------------------------------------------------------- helpers */

/* FCALL_RO <call> must be refused with an error reply starting with `prefix`. */
static void read_error(const char *call, const char *prefix) {
    char cmd[512];
    redisReply *r;
    snprintf(cmd, sizeof(cmd), "FCALL_RO %s", call);
    r = th_cmd(C, cmd);
    ck_assert_msg(r->type == REDIS_REPLY_ERROR, "%s: not refused", cmd);
    ck_assert_msg(!strncmp(r->str, prefix, strlen(prefix)), "%s: %s, want %s", cmd, r->str, prefix);
    freeReplyObject(r);
}

static int is_true(const cJSON *o, const char *path) {
    return cJSON_IsTrue(th_json_at(o, path));
}

/* The value of `name` in the flat reply of <ns>_stats. */
static long long stat_of(const char *name) {
    redisReply *r = th_cmd(C, "FCALL_RO dtq_stats 0");
    long long v = -1;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, name)) v = r->element[i + 1]->integer;
    freeReplyObject(r);
    ck_assert_msg(v >= 0, "no %s in stats", name);
    return v;
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

static redisReply *fetch(const char *worker, int count, const char *queue) {
    th_queue_groups(C, queue);
    return th_fetch(C, worker, count, queue, POLICY);
}

/* Fetches `count` tasks of `queue` as `worker` and finishes the ones named in `dead` as
 * dead letters of class `cls` and the ones in `ok` as succeeded with `result`; the others
 * stay running. */
static void work(const char *worker, const char *queue, int count, const char *ok,
                 const char *result, const char *dead, const char *cls) {
    redisReply *r = fetch(worker, count, queue);
    for (size_t i = 0; i < r->element[0]->elements; i++) {
        const redisReply *t = r->element[0]->element[i];
        dtq_finish_record rec = th_finish_record(t);
        const char *id = t->element[2]->str;
        redisReply *f;
        if (ok && strstr(ok, id)) {
            rec.result_state = DTQ_RESULT_FULL;
            rec.result = (char *)result;
            rec.result_len = strlen(result);
        } else if (dead && strstr(dead, id)) {
            rec.outcome = DTQ_OUTCOME_DEAD_LETTER;
            rec.error = (char *)"card declined";
            rec.error_class = cls;
        } else {
            continue;
        }
        f = th_finish(C, worker, &rec, 1);
        freeReplyObject(f);
    }
    freeReplyObject(r);
}

/* A worker hash as the daemon's heartbeat writes it, and its membership. */
static void heartbeat(const char *id) {
    long long now = dtq_now_ms();
    freeReplyObject(th_cmd(C,
                           "HSET dtq:worker:%s worker_id %s hostname vm pid 4242 started_at %lld "
                           "last_heartbeat %lld active_tasks 1 concurrency 4 tasks_processed 3 "
                           "tasks_failed 1 tasks_retried 0 status running version 9.9 "
                           "q:default:succeeded 2 q:default:failed 1 q:default:retried 0",
                           id, id, now - 5000, now));
    freeReplyObject(th_cmd(C, "SADD dtq:workers %s", id));
}

/* ----------------------------------------------------------------- empty */

/* Nothing there yet: every list is an empty array ([]), not {}. */
START_TEST(test_empty_arrays) {
    char *text;
    cJSON *o = th_read_json(C, &text, "dtq_overview 0");
    ck_assert_ptr_nonnull(strstr(text, "\"queues\":[]"));
    ck_assert_ptr_nonnull(strstr(text, "\"workers\":[]"));
    ck_assert_int_eq(th_json_size(o, "queues"), 0);
    ck_assert_int_eq(th_json_size(o, "workers"), 0);
    ck_assert(cJSON_IsNull(th_json_at(o, "scheduler.leader")));
    ck_assert_int_eq(th_json_int(o, "dlq.length"), 0);
    ck_assert(is_true(o, "events.stream")); /* events_stream_maxlen > 0 */
    ck_assert_str_eq(th_json_str(o, "events.level"), "all");
    ck_assert(cJSON_IsFalse(th_json_at(o, "queues_truncated")));
    cJSON_Delete(o);
    free(text);
    o = th_read_json(C, &text, "dtq_workers 0");
    ck_assert_ptr_nonnull(strstr(text, "\"workers\":[]"));
    ck_assert_int_eq(th_json_int(o, "workers_gone"), 0);
    cJSON_Delete(o);
    free(text);
    o = th_read_json(C, &text, "dtq_dead_letters 0 -");
    ck_assert_ptr_nonnull(strstr(text, "\"entries\":[]"));
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    ck_assert_int_eq(th_json_int(o, "total"), 0);
    cJSON_Delete(o);
    free(text);
    o = th_read_json(C, &text, "dtq_audit_page 0 -");
    ck_assert_ptr_nonnull(strstr(text, "\"entries\":[]"));
    cJSON_Delete(o);
    free(text);
    /* a queue with nothing waiting or running; a task without events */
    freeReplyObject(th_cmd(C, "DEL dtq:config"));
    enqueue("q1", "t1", "delay_ms 600000");
    o = th_read_json(C, &text, "dtq_queue_view 0 q1");
    ck_assert_ptr_nonnull(strstr(text, "\"waiting\":[]"));
    ck_assert_ptr_nonnull(strstr(text, "\"running\":[]"));
    ck_assert_int_eq(th_json_size(o, "bands"), 10);
    cJSON_Delete(o);
    free(text);
    o = th_read_json(C, &text, "dtq_task_view 0 t1");
    ck_assert_ptr_nonnull(strstr(text, "\"events\":[]"));
    ck_assert(cJSON_IsFalse(th_json_at(o, "events_stream")));
    ck_assert(is_true(o, "events_complete"));
    ck_assert_str_eq(th_json_str(o, "status"), "pending");
    cJSON_Delete(o);
    free(text);
    /* a scheduled task counts for its queue */
    o = th_read_json(C, NULL, "dtq_overview 0");
    ck_assert_int_eq(th_json_int(th_overview_queue(o, "q1"), "scheduled"), 1);
    ck_assert_int_eq(th_json_int(o, "scheduler.scheduled"), 1);
    ck_assert(is_true(o, "scheduler.by_queue_complete"));
    ck_assert(cJSON_IsFalse(th_json_at(o, "events.stream")));
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- overview */

START_TEST(test_overview_depths_and_workers) {
    cJSON *o;
    const cJSON *q, *w;
    redisReply *r;
    long long t0 = dtq_now_ms();
    /* mail: two tasks at p7 and a producer's raw entry at p2, paused */
    enqueue("mail", "m1", "priority 7");
    enqueue("mail", "m2", "priority 7");
    freeReplyObject(th_cmd(C, "XADD dtq:stream:mail:p2 * task_type echo payload [1]"));
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 mail tester"));
    /* default: three tasks fetched, one succeeds, one is dead-lettered, one runs */
    enqueue("default", "ok1", NULL);
    enqueue("default", "dead1", NULL);
    enqueue("default", "run1", NULL);
    work("w1", "default", 3, "ok1", "{\"n\":1}", "dead1", "permanent");
    /* clamp: p9 has a pending entry whose stream entry is gone (length 0, pending 1) and
     * p3 one waiting entry: per band 0 + 1, where clamping the sums would say 0 */
    enqueue("clamp", "c1", "priority 9");
    r = fetch("w1", 1, "clamp");
    freeReplyObject(
        th_cmd(C, "XDEL dtq:stream:clamp:p9 %s", r->element[0]->element[0]->element[1]->str));
    freeReplyObject(r);
    enqueue("clamp", "c2", "priority 3");
    heartbeat("w1");
    freeReplyObject(th_cmd(C, "SADD dtq:workers gone1")); /* a member whose hash expired */
    freeReplyObject(th_cmd(C, "SET dtq:lock:scheduler w1"));

    o = th_read_json(C, NULL, "dtq_overview 0");
    ck_assert(th_json_int(o, "time_ms") >= t0 - 60000 &&
              th_json_int(o, "time_ms") <= dtq_now_ms() + 60000);
    ck_assert_int_eq(th_json_size(o, "queues"), 3);
    ck_assert_str_eq(th_json_str(o, "queues.0.name"), "clamp"); /* sorted by name */
    ck_assert_str_eq(th_json_str(o, "queues.2.name"), "mail");
    q = th_overview_queue(o, "mail");
    ck_assert(is_true(q, "paused"));
    ck_assert_int_eq(th_json_int(q, "depth"), 3);
    ck_assert_int_eq(th_json_int(q, "length"), 3);
    ck_assert_int_eq(th_json_int(q, "pending"), 0);
    ck_assert_int_eq(th_json_size(q, "depth_by_band"), 10);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.7"), 2);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.2"), 1);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.5"), 0);
    ck_assert_int_eq(th_json_int(q, "scheduled"), 0);
    q = th_overview_queue(o, "default");
    ck_assert(!is_true(q, "paused"));
    ck_assert_int_eq(th_json_int(q, "depth"), 0);
    ck_assert_int_eq(th_json_int(q, "pending"), 1);
    ck_assert_int_eq(th_json_int(q, "length"), 1);
    ck_assert_int_eq(th_json_int(q, "pending_by_band.5"), 1);
    q = th_overview_queue(o, "clamp");
    ck_assert_int_eq(th_json_int(q, "depth"), 1);
    ck_assert_int_eq(th_json_int(q, "pending"), 1);
    ck_assert_int_eq(th_json_int(q, "length"), 1);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.9"), 0);
    ck_assert_int_eq(th_json_int(q, "pending_by_band.9"), 1);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.3"), 1);
    /* <ns>_stats counts the same way */
    ck_assert_int_eq(stat_of("queue:clamp:depth"), 1);
    ck_assert_int_eq(stat_of("queue:mail:depth"), 3);
    ck_assert_int_eq(stat_of("queue:default:pending"), 1);
    /* workers: typed numbers, counters under queues, the age from the Redis clock */
    ck_assert_int_eq(th_json_size(o, "workers"), 1);
    ck_assert_int_eq(th_json_int(o, "workers_gone"), 1);
    ck_assert(cJSON_IsFalse(th_json_at(o, "workers_truncated")));
    w = th_json_at(o, "workers.0");
    ck_assert_str_eq(th_json_str(w, "id"), "w1");
    ck_assert_ptr_null(cJSON_GetObjectItem(w, "worker_id"));
    ck_assert_str_eq(th_json_str(w, "hostname"), "vm");
    ck_assert_str_eq(th_json_str(w, "status"), "running");
    ck_assert_str_eq(th_json_str(w, "version"), "9.9");
    ck_assert_int_eq(th_json_int(w, "pid"), 4242);
    ck_assert_int_eq(th_json_int(w, "concurrency"), 4);
    ck_assert_int_eq(th_json_int(w, "active_tasks"), 1);
    ck_assert_int_eq(th_json_int(w, "tasks_processed"), 3);
    ck_assert_int_eq(th_json_int(w, "last_heartbeat") - th_json_int(w, "started_at"), 5000);
    ck_assert(th_json_int(w, "heartbeat_age_ms") >= -1000 &&
              th_json_int(w, "heartbeat_age_ms") < 60000);
    ck_assert_int_eq(th_json_int(w, "queues.default.succeeded"), 2);
    ck_assert_int_eq(th_json_int(w, "queues.default.failed"), 1);
    ck_assert_int_eq(th_json_int(w, "queues.default.retried"), 0);
    /* the rest */
    ck_assert_str_eq(th_json_str(o, "scheduler.leader"), "w1");
    ck_assert_int_eq(th_json_int(o, "scheduler.scheduled"), 0);
    ck_assert_int_eq(th_json_int(o, "scheduler.claimed"), 0);
    ck_assert_int_eq(th_json_int(o, "dlq.length"), 1);
    ck_assert(is_true(o, "events.stream"));
    cJSON_Delete(o);
    /* <ns>_workers: the same objects */
    o = th_read_json(C, NULL, "dtq_workers 0");
    ck_assert_int_eq(th_json_size(o, "workers"), 1);
    ck_assert_int_eq(th_json_int(o, "workers_gone"), 1);
    ck_assert_int_eq(th_json_int(o, "workers.0.queues.default.succeeded"), 2);
    ck_assert_int_eq(th_json_int(o, "workers.0.pid"), 4242);
    ck_assert_ptr_null(cJSON_GetObjectItem(th_json_at(o, "workers.0"), "pools")); /* none */
    cJSON_Delete(o);
    /* its pools ("NAME:ready/wanted ..."): an object of numbers; a malformed entry is left out */
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w1 pools %s", "py:1/2 js:0/3 bad"));
    o = th_read_json(C, NULL, "dtq_workers 0");
    ck_assert_int_eq(th_json_int(o, "workers.0.pools.py.ready"), 1);
    ck_assert_int_eq(th_json_int(o, "workers.0.pools.py.wanted"), 2);
    ck_assert_int_eq(th_json_int(o, "workers.0.pools.js.ready"), 0);
    ck_assert_int_eq(th_json_int(o, "workers.0.pools.js.wanted"), 3);
    ck_assert_int_eq(cJSON_GetArraySize(th_json_at(o, "workers.0.pools")), 2);
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- queue view */

START_TEST(test_queue_view) {
    cJSON *o;
    redisReply *r;
    char raw_id[128], own_id[] = "own-1", bad_raw[128];
    const char *fetched[8];
    int nf = 0;
    enqueue("mail", "m1", "priority 7");
    enqueue("mail", "m2", "priority 7");
    r = th_cmd(C, "XADD dtq:stream:mail:p2 * task_type echo payload [1]");
    snprintf(raw_id, sizeof(raw_id), "mail:p2:%s", r->str);
    freeReplyObject(r);
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:mail:p2 * task_type echo payload [2] task_id %s", own_id));
    r = th_cmd(C, "XADD dtq:stream:mail:p2 * task_type echo payload [3] task_id %s", "bad/id");
    snprintf(bad_raw, sizeof(bad_raw), "mail:p2:%s", r->str);
    freeReplyObject(r);
    /* waiting: p7 first, then the raw entries at p2, oldest first within a band */
    o = th_read_json(C, NULL, "dtq_queue_view 0 mail 10");
    ck_assert_str_eq(th_json_str(o, "name"), "mail");
    ck_assert(!is_true(o, "paused"));
    ck_assert_int_eq(th_json_int(o, "count"), 10);
    ck_assert_int_eq(th_json_int(o, "depth"), 5);
    ck_assert_int_eq(th_json_int(o, "length"), 5);
    ck_assert_int_eq(th_json_int(o, "bands.0.band"), 9); /* p9 first */
    ck_assert_int_eq(th_json_int(o, "bands.2.band"), 7);
    ck_assert_int_eq(th_json_int(o, "bands.2.depth"), 2);
    ck_assert_int_eq(th_json_int(o, "bands.7.depth"), 3);
    ck_assert_int_eq(th_json_size(o, "waiting"), 5);
    ck_assert_str_eq(th_json_str(o, "waiting.0.task_id"), "m1");
    ck_assert_str_eq(th_json_str(o, "waiting.0.status"), "queued");
    ck_assert_str_eq(th_json_str(o, "waiting.0.task_type"), "echo");
    ck_assert_int_eq(th_json_int(o, "waiting.0.attempt"), 1);
    ck_assert_int_eq(th_json_int(o, "waiting.0.band"), 7);
    ck_assert(!is_true(o, "waiting.0.raw"));
    ck_assert_str_eq(th_json_str(o, "waiting.1.task_id"), "m2");
    ck_assert_str_eq(th_json_str(o, "waiting.2.task_id"), raw_id);
    ck_assert(is_true(o, "waiting.2.raw"));
    ck_assert_ptr_null(cJSON_GetObjectItem(th_json_at(o, "waiting.2"), "status")); /* no task yet */
    ck_assert_str_eq(th_json_str(o, "waiting.3.task_id"), own_id);
    ck_assert_str_eq(th_json_str(o, "waiting.4.task_id"), bad_raw);
    ck_assert_int_eq(th_json_int(o, "waiting.2.enqueued_ms"), atoll(raw_id + strlen("mail:p2:")));
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_queue_view 0 mail 1");
    ck_assert_int_eq(th_json_size(o, "waiting"), 1);
    cJSON_Delete(o);
    /* the ids fetch gives the raw entries are the ones shown */
    r = fetch("w1", 5, "mail");
    for (size_t i = 0; i < r->element[0]->elements; i++)
        fetched[nf++] = r->element[0]->element[i]->element[2]->str;
    ck_assert_int_eq(nf, 4); /* the entry with a bad task_id is dead-lettered, not run */
    ck_assert_str_eq(fetched[2], raw_id);
    ck_assert_str_eq(fetched[3], own_id);
    th_assert_field(C, bad_raw, "status", "dead_lettered");
    /* running: delivered, not acknowledged, with the worker that holds them */
    o = th_read_json(C, NULL, "dtq_queue_view 0 mail");
    ck_assert_int_eq(th_json_int(o, "pending"), 4);
    ck_assert_int_eq(th_json_int(o, "depth"), 0);
    ck_assert_int_eq(th_json_size(o, "waiting"), 0);
    ck_assert_int_eq(th_json_size(o, "running"), 4);
    ck_assert_str_eq(th_json_str(o, "running.0.task_id"), "m1");
    ck_assert_str_eq(th_json_str(o, "running.0.worker_id"), "w1");
    ck_assert_str_eq(th_json_str(o, "running.0.status"), "running");
    ck_assert_int_eq(th_json_int(o, "running.0.deliveries"), 1);
    ck_assert_int_eq(th_json_int(o, "running.0.band"), 7);
    ck_assert(th_json_int(o, "running.0.idle_ms") >= 0);
    ck_assert_str_eq(th_json_str(o, "running.2.task_id"), raw_id);
    ck_assert_str_eq(th_json_str(o, "running.2.status"), "running");
    ck_assert_str_eq(th_json_str(o, "running.2.entry_id"), raw_id + strlen("mail:p2:"));
    freeReplyObject(r);
    cJSON_Delete(o);
    /* refusals */
    read_error("dtq_queue_view 0 nosuch", "NOT_FOUND");
    read_error("dtq_queue_view 0 bad/name", "INVALID_ARGUMENT");
    read_error("dtq_queue_view 0 mail 201", "INVALID_ARGUMENT");
    read_error("dtq_queue_view 0 mail 0", "INVALID_ARGUMENT");
}
END_TEST

/* ----------------------------------------------------------------- task view */

START_TEST(test_task_view) {
    cJSON *o;
    char *text, *dlq_entry;
    const char *want[] = {"TASK_QUEUED", "TASK_STARTED", "TASK_SUCCEEDED"};
    enqueue("default", "ok1", NULL);
    enqueue("default", "dead1", NULL);
    work("w1", "default", 2, "ok1", "{\"n\":[],\"m\":{}}", "dead1", "permanent");
    o = th_read_json(C, &text, "dtq_task_view 0 ok1");
    ck_assert_str_eq(th_json_str(o, "id"), "ok1");
    ck_assert_str_eq(th_json_str(o, "status"), "succeeded");
    ck_assert_str_eq(th_json_str(o, "fields.queue"), "default");
    ck_assert_str_eq(th_json_str(o, "fields.worker_id"), "w1");
    ck_assert_str_eq(th_json_str(o, "fields.attempt"), "1"); /* hash fields as Redis holds them */
    ck_assert_str_eq(th_json_str(o, "fields.payload"), "{}");
    /* the result as it was written: its empty array stays one */
    ck_assert(is_true(o, "result_is_json"));
    ck_assert(cJSON_IsArray(th_json_at(o, "result.n")));
    ck_assert(cJSON_IsObject(th_json_at(o, "result.m")));
    ck_assert_ptr_nonnull(strstr(text, "\"result\":{\"n\":[],\"m\":{}}"));
    ck_assert(th_json_int(o, "ttl_ms") > 0);
    ck_assert(cJSON_IsNull(th_json_at(o, "dead_letter")));
    ck_assert(is_true(o, "events_stream"));
    ck_assert(is_true(o, "events_complete"));
    ck_assert_int_eq(th_json_size(o, "events"), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *ev = cJSON_GetArrayItem(th_json_at(o, "events"), i);
        ck_assert_str_eq(th_json_str(ev, "type"), want[i]);
        ck_assert_str_eq(th_json_str(ev, "task_id"), "ok1");
        ck_assert(strchr(th_json_str(ev, "stream_id"), '-') != NULL);
    }
    ck_assert(th_json_int(o, "events_scanned") >= 3);
    cJSON_Delete(o);
    free(text);
    /* events_max bounds the search */
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1 0");
    ck_assert_int_eq(th_json_size(o, "events"), 0);
    ck_assert_int_eq(th_json_int(o, "events_scanned"), 0);
    ck_assert(!is_true(o, "events_complete"));
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1 1");
    ck_assert_int_eq(th_json_int(o, "events_scanned"), 1);
    ck_assert(!is_true(o, "events_complete"));
    cJSON_Delete(o);
    /* a dead letter: its record */
    o = th_read_json(C, NULL, "dtq_task_view 0 dead1");
    dlq_entry = th_task_field(C, "dead1", "dlq_entry");
    ck_assert_str_eq(th_json_str(o, "status"), "dead_lettered");
    ck_assert_str_eq(th_json_str(o, "fields.last_error"), "card declined");
    ck_assert_str_eq(th_json_str(o, "dead_letter.task_id"), "dead1");
    ck_assert_str_eq(th_json_str(o, "dead_letter.last_error_class"), "permanent");
    ck_assert_str_eq(th_json_str(o, "dead_letter.entry_id"), dlq_entry);
    ck_assert_str_eq(th_json_str(o, "dead_letter.attempts_made"), "1");
    ck_assert(cJSON_IsNull(th_json_at(o, "result")));
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "result_is_json"));
    ck_assert(th_json_int(o, "ttl_ms") > 0); /* task_retention_s */
    cJSON_Delete(o);
    free(dlq_entry);
    /* results that are not JSON, or not as JSON writes it, come back as valid JSON */
    freeReplyObject(th_cmd(C, "SET dtq:result:ok1 %s", "not json"));
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1");
    ck_assert_str_eq(th_json_str(o, "result"), "not json");
    ck_assert(!is_true(o, "result_is_json"));
    cJSON_Delete(o);
    freeReplyObject(th_cmd(C, "SET dtq:result:ok1 %s", "0x10"));
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1");
    ck_assert_str_eq(th_json_str(o, "result"), "0x10");
    cJSON_Delete(o);
    freeReplyObject(th_cmd(C, "SET dtq:result:ok1 %s", "{\"a\":\"x\ny\",\"b\":1.}"));
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1");
    ck_assert(is_true(o, "result_is_json"));
    ck_assert_str_eq(th_json_str(o, "result.a"), "x\ny");
    ck_assert_int_eq(th_json_int(o, "result.b"), 1);
    cJSON_Delete(o);
    freeReplyObject(th_cmd(C, "SET dtq:result:ok1 %s", "[1, 2.5, \"\\u00e9\"]\n"));
    o = th_read_json(C, NULL, "dtq_task_view 0 ok1");
    ck_assert_int_eq(th_json_size(o, "result"), 3);
    ck_assert_str_eq(th_json_str(o, "result.2"), "\xc3\xa9");
    cJSON_Delete(o);
    /* no such task (also a key of another type), or a bad id */
    read_error("dtq_task_view 0 nosuch", "NOT_FOUND task nosuch");
    freeReplyObject(th_cmd(C, "SET dtq:task:strange 1"));
    read_error("dtq_task_view 0 strange", "NOT_FOUND task strange");
    read_error("dtq_task_view 0 bad/id", "INVALID_ARGUMENT");
    read_error("dtq_task_view 0 ok1 10001", "INVALID_ARGUMENT");
}
END_TEST

/* ----------------------------------------------------------------- pages */

START_TEST(test_dead_letter_pages) {
    char ids[5][8], cursor[64] = "-", *big;
    int seen = 0;
    cJSON *o;
    redisReply *r;
    for (int i = 0; i < 5; i++) {
        snprintf(ids[i], sizeof(ids[i]), "d%d", i);
        enqueue("default", ids[i], NULL);
        work("w1", "default", 1, NULL, NULL, ids[i], i % 2 ? "timeout" : "permanent");
        th_assert_field(C, ids[i], "status", "dead_lettered");
    }
    /* newest first, two per page, following next_cursor to the end */
    for (int page = 0; page < 4; page++) {
        const cJSON *e;
        o = th_read_json(C, NULL, "dtq_dead_letters 0 %s 2", cursor);
        ck_assert_int_eq(th_json_int(o, "total"), 5);
        ck_assert_str_eq(th_json_str(o, "order"), "newest");
        cJSON_ArrayForEach(e, th_json_at(o, "entries")) {
            ck_assert_str_eq(th_json_str(e, "task_id"), ids[4 - seen]);
            ck_assert(th_json_int(e, "entry_ms") > 0);
            seen++;
        }
        if (cJSON_IsNull(th_json_at(o, "next_cursor"))) {
            cJSON_Delete(o);
            break;
        }
        ck_assert_int_eq(th_json_size(o, "entries"), 2);
        snprintf(cursor, sizeof(cursor), "%s", th_json_str(o, "next_cursor"));
        cJSON_Delete(o);
    }
    ck_assert_int_eq(seen, 5);
    /* oldest first is the stream's order */
    o = th_read_json(C, NULL, "dtq_dead_letters 0 - 500 oldest");
    r = th_cmd(C, "XRANGE dtq:stream:dead-letter - +");
    ck_assert_int_eq(th_json_size(o, "entries"), (int)r->elements);
    for (size_t i = 0; i < r->elements; i++) {
        char p[64];
        snprintf(p, sizeof(p), "entries.%zu.entry_id", i);
        ck_assert_str_eq(th_json_str(o, p), r->element[i]->element[0]->str);
    }
    freeReplyObject(r);
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    ck_assert_int_eq(th_json_int(o, "scanned"), 5);
    cJSON_Delete(o);
    /* a class filter, paged too */
    o = th_read_json(C, NULL, "dtq_dead_letters 0 - 1 newest timeout");
    ck_assert_str_eq(th_json_str(o, "filter"), "timeout");
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "d3");
    snprintf(cursor, sizeof(cursor), "%s", th_json_str(o, "next_cursor"));
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_dead_letters 0 %s 1 newest timeout", cursor);
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "d1");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_dead_letters 0 - 50 newest nosuchclass");
    ck_assert_int_eq(th_json_size(o, "entries"), 0);
    ck_assert(cJSON_IsNull(th_json_at(o, "next_cursor")));
    cJSON_Delete(o);
    /* long values are cut at field_max (2048 by default; 0: whole) */
    big = calloc(1, 5000);
    memset(big, 'x', 4000);
    freeReplyObject(th_cmd(C, "XADD dtq:stream:dead-letter * task_id big payload %s", big));
    o = th_read_json(C, NULL, "dtq_dead_letters 0 - 1");
    ck_assert_int_eq((int)strlen(th_json_str(o, "entries.0.payload")), 2048);
    ck_assert(is_true(o, "entries.0.payload_truncated"));
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_dead_letters 0 - 1 newest %s 0", "");
    ck_assert_str_eq(th_json_str(o, "entries.0.payload"), big);
    ck_assert_ptr_null(cJSON_GetObjectItem(th_json_at(o, "entries.0"), "payload_truncated"));
    cJSON_Delete(o);
    free(big);
    /* refusals */
    read_error("dtq_dead_letters 0 - 501", "INVALID_ARGUMENT");
    read_error("dtq_dead_letters 0 - 0", "INVALID_ARGUMENT");
    read_error("dtq_dead_letters 0 yesterday 5", "INVALID_ARGUMENT");
    read_error("dtq_dead_letters 0 - 5 sideways", "INVALID_ARGUMENT");
    read_error("dtq_dead_letters 0 - 5 newest a/b", "INVALID_ARGUMENT");
    /* the audit stream pages the same way, filtered by task */
    freeReplyObject(th_cmd(C, "FCALL dtq_requeue 0 d0 tester"));
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 default tester"));
    o = th_read_json(C, NULL, "dtq_audit_page 0 - 10");
    ck_assert_int_eq(th_json_int(o, "total"), 2);
    ck_assert_str_eq(th_json_str(o, "entries.0.action"), "pause");
    ck_assert_str_eq(th_json_str(o, "entries.1.action"), "requeue");
    ck_assert_str_eq(th_json_str(o, "entries.1.actor"), "tester");
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_audit_page 0 - 10 oldest d0");
    ck_assert_int_eq(th_json_size(o, "entries"), 1);
    ck_assert_str_eq(th_json_str(o, "entries.0.task_id"), "d0");
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- requeue-all */

/* <ns>_requeue_dlq with a cursor: a loop until the cursor is nil requeues what was there at
 * its start, knowing nothing of the chunk size; with a class, that class alone. */
START_TEST(test_requeue_dlq_cursor) {
    char cursor[128] = "-", id[16];
    long long requeued = 0;
    int calls = 0;
    redisReply *r;
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "d%d", i);
        enqueue("default", id, NULL);
        work("w1", "default", 1, NULL, NULL, id, i % 2 ? "timeout" : "permanent");
    }
    /* by class, two per call: d1 and d3 only */
    for (;;) {
        r = th_cmd(C, "FCALL dtq_requeue_dlq 0 1 tester %s timeout", cursor);
        ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == 3, "reply type %d %s", r->type,
                      r->str ? r->str : "");
        requeued += r->element[0]->integer;
        ck_assert_int_eq(r->element[2]->integer, 0);
        calls++;
        if (r->element[1]->type == REDIS_REPLY_NIL) {
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[1]->str);
        freeReplyObject(r);
        ck_assert_int_lt(calls, 10);
    }
    ck_assert_int_eq(requeued, 2);
    th_assert_field(C, "d1", "status", "queued");
    th_assert_field(C, "d3", "status", "queued");
    th_assert_field(C, "d0", "status", "dead_lettered");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 3);
    /* all, one per call; a dead letter added meanwhile is not part of this loop */
    snprintf(cursor, sizeof(cursor), "-");
    requeued = 0;
    calls = 0;
    for (;;) {
        r = th_cmd(C, "FCALL dtq_requeue_dlq 0 1 tester %s", cursor);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        requeued += r->element[0]->integer;
        if (calls++ == 0) { /* d1 fails again */
            work("w1", "default", 5, NULL, NULL, "d0 d1", "timeout");
        }
        if (r->element[1]->type == REDIS_REPLY_NIL) {
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[1]->str);
        freeReplyObject(r);
        ck_assert_int_lt(calls, 10);
    }
    ck_assert_int_eq(requeued, 3);
    ck_assert_int_eq(calls, 3);
    /* d0 requeued and dead-lettered again by the fetch above, d1 too: both after the loop's
     * last entry, left for the next loop */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 2);
    /* the old form still answers an integer */
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0");
    ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
    ck_assert_int_eq(r->integer, 2);
    freeReplyObject(r);
    /* an empty stream: done at once */
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0 5 tester -");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->element[0]->integer, 0);
    ck_assert_int_eq(r->element[1]->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    /* refusals */
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0 5 tester yesterday");
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert(!strncmp(r->str, "INVALID_ARGUMENT", 16));
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0 5 tester %s timeout", "");
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}
END_TEST

/* task_view's due_ms: the task's score in the schedule (due_claimed false), its claim time
 * once a scheduler pass took it (due_claimed true), null otherwise. */
START_TEST(test_task_view_due) {
    cJSON *o;
    redisReply *r;
    long long due;
    enqueue("default", "later1", "delay_ms 600000");
    enqueue("default", "now1", NULL);
    r = th_cmd(C, "ZSCORE dtq:retry:schedule later1");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    due = atoll(r->str);
    freeReplyObject(r);
    ck_assert(due > dtq_now_ms() + 500000);
    o = th_read_json(C, NULL, "dtq_task_view 0 later1 0");
    ck_assert_int_eq(th_json_int(o, "due_ms"), due);
    ck_assert(!is_true(o, "due_claimed"));
    ck_assert(cJSON_IsFalse(th_json_at(o, "due_claimed")));
    cJSON_Delete(o);
    /* taken by a scheduler pass: the claimed set's score */
    freeReplyObject(th_cmd(C, "ZREM dtq:retry:schedule later1"));
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:claimed 1796159654123 later1"));
    o = th_read_json(C, NULL, "dtq_task_view 0 later1 0");
    ck_assert_int_eq(th_json_int(o, "due_ms"), 1796159654123LL);
    ck_assert(is_true(o, "due_claimed"));
    cJSON_Delete(o);
    o = th_read_json(C, NULL, "dtq_task_view 0 now1 0");
    ck_assert(cJSON_IsNull(th_json_at(o, "due_ms")));
    ck_assert(cJSON_IsFalse(th_json_at(o, "due_claimed")));
    cJSON_Delete(o);
    /* a schedule of another type reads as none */
    freeReplyObject(th_cmd(C, "DEL dtq:retry:claimed"));
    freeReplyObject(th_cmd(C, "SET dtq:retry:claimed x"));
    o = th_read_json(C, NULL, "dtq_task_view 0 later1 0");
    ck_assert(cJSON_IsNull(th_json_at(o, "due_ms")));
    cJSON_Delete(o);
}
END_TEST

/* ----------------------------------------------------------------- audit */

/* Every admin Function's audit entry names its actor (redis-cli when none or empty is
 * given) and the task (with the task's queue) or the queue it acted on; purge_dlq, which
 * acts on the dead-letter stream, says how many entries it removed. pause / resume refuse
 * a queue nobody has used unless given `create`, and a refusal writes no audit entry. */
START_TEST(test_audit_names_target_and_actor) {
    static const struct {
        const char *action, *task, *queue, *actor;
    } want[] = {
        {"requeue", "m1", "mail", "tester"}, {"requeue_dlq", "m2", "mail", "redis-cli"},
        {"discard", "m3", "mail", "tester"}, {"cancel", "c1", "mail", "redis-cli"},
        {"purge_dlq", "", "", "tester"},     {"pause", "", "ghost", "tester"},
        {"resume", "", "ghost", "tester"},   {"resume", "", "legacy", "redis-cli"},
        {"pause", "", "mail", "ops"},
    };
    size_t n = sizeof(want) / sizeof(want[0]);
    redisReply *r;
    for (int i = 1; i <= 4; i++) {
        char id[8];
        snprintf(id, sizeof(id), "m%d", i);
        enqueue("mail", id, NULL);
    }
    work("w1", "mail", 4, NULL, NULL, "m1 m2 m3 m4", "permanent");
    enqueue("mail", "c1", "delay_ms 600000");
    th_expect_str(th_cmd(C, "FCALL dtq_requeue 0 m1 tester"), "queued");
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0 1 %s", "");
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    th_expect_str(th_cmd(C, "FCALL dtq_discard 0 m3 tester"), "discarded");
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 c1"), "cancelled");
    r = th_cmd(C, "FCALL dtq_purge_dlq 0 tester");
    ck_assert_int_eq(r->integer, 1); /* m4 */
    freeReplyObject(r);
    /* a queue nobody has used: refused without `create`, nothing written */
    th_expect_refused(th_cmd(C, "FCALL dtq_pause 0 ghost tester"),
                      "NOT_FOUND queue ghost is not in dtq:queues");
    th_expect_refused(th_cmd(C, "FCALL dtq_resume 0 ghost"), "NOT_FOUND queue ghost");
    th_expect_refused(th_cmd(C, "FCALL dtq_pause 0 ghost tester yes"), "INVALID_ARGUMENT");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:ghost:paused")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues ghost")), 0);
    th_expect_str(th_cmd(C, "FCALL dtq_pause 0 ghost tester create"), "paused");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:ghost:paused")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues ghost")), 1);
    th_expect_str(th_cmd(C, "FCALL dtq_resume 0 ghost tester"), "resumed");
    /* paused by hand (the documented key), never used: it can be resumed */
    freeReplyObject(th_cmd(C, "SET dtq:queue:legacy:paused 1"));
    th_expect_str(th_cmd(C, "FCALL dtq_resume 0 legacy"), "resumed");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:legacy:paused")), 0);
    th_expect_str(th_cmd(C, "FCALL dtq_pause 0 mail ops"), "paused"); /* enqueue made it known */

    r = th_cmd(C, "XRANGE dtq:stream:audit - +");
    ck_assert_int_eq(r->elements, n);
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = r->element[i];
        const char *ts = th_entry_field(e, "ts");
        ck_assert_str_eq(th_entry_field(e, "action"), want[i].action);
        ck_assert_str_eq(th_entry_field(e, "task_id"), want[i].task);
        ck_assert_msg(th_entry_field(e, "queue") != NULL, "%s: no queue field", want[i].action);
        ck_assert_str_eq(th_entry_field(e, "queue"), want[i].queue);
        ck_assert_str_eq(th_entry_field(e, "actor"), want[i].actor);
        ck_assert(ts && atoll(ts) > 0);
        if (!strcmp(want[i].action, "purge_dlq"))
            ck_assert_str_eq(th_entry_field(e, "removed"), "1");
        else
            ck_assert_ptr_null(th_entry_field(e, "removed"));
    }
    freeReplyObject(r);
    /* audit_page gives the queue too */
    {
        cJSON *o = th_read_json(C, NULL, "dtq_audit_page 0 - 1");
        ck_assert_str_eq(th_json_str(o, "entries.0.queue"), "mail");
        cJSON_Delete(o);
    }
}
END_TEST

/* ----------------------------------------------------------------- flags */

/* The read Functions are registered no-writes (FCALL_RO takes them). */
START_TEST(test_read_functions_are_no_writes) {
    static const char *const names[] = {
        "dtq_overview",   "dtq_workers", "dtq_queue_view", "dtq_task_view", "dtq_dead_letters",
        "dtq_audit_page", "dtq_stats",   "dtq_scheduled",  "dtq_metrics",   NULL};
    redisReply *r = th_cmd(C, "FUNCTION LIST LIBRARYNAME dtq");
    const redisReply *fns = NULL;
    int found = 0;
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i + 1 < r->element[0]->elements; i += 2)
        if (!strcmp(r->element[0]->element[i]->str, "functions"))
            fns = r->element[0]->element[i + 1];
    ck_assert_ptr_nonnull(fns);
    for (size_t f = 0; f < fns->elements; f++) {
        const redisReply *fn = fns->element[f];
        const char *name = NULL;
        int no_writes = 0;
        for (size_t i = 0; i + 1 < fn->elements; i += 2) {
            const redisReply *k = fn->element[i], *v = fn->element[i + 1];
            if (!strcmp(k->str, "name")) name = v->str;
            if (!strcmp(k->str, "flags"))
                for (size_t j = 0; j < v->elements; j++)
                    no_writes |= !strcmp(v->element[j]->str, "no-writes");
        }
        for (const char *const *n = names; *n; n++)
            if (name && !strcmp(name, *n)) {
                ck_assert_msg(no_writes, "%s is not no-writes", name);
                found++;
            }
    }
    ck_assert_int_eq(found, 9);
    freeReplyObject(r);
}
END_TEST

/* <ns>_metrics: per queue the depth per band, pending, paused, the oldest waiting entry's
 * age and the scheduled tasks (delayed and retrying); dead letters by queue and class;
 * workers by status; the leader; the truncation flags. */
START_TEST(test_metrics) {
    cJSON *o;
    const cJSON *q, *e;
    long long before, after;
    redisReply *r;
    int found = 0;
    /* alpha: two waiting at band 5 (the default), one at 9; one delayed */
    enqueue("alpha", "a1", NULL);
    enqueue("alpha", "a2", NULL);
    enqueue("alpha", "a9", "priority 9");
    enqueue("alpha", "a-later", "delay_ms 600000");
    /* beta: three fetched, one stays running, one retrying, one dead letter of class timeout;
     * then a dead letter of class permanent; paused */
    enqueue("beta", "b1", NULL);
    enqueue("beta", "b2", NULL);
    enqueue("beta", "b3", NULL);
    r = fetch("w1", 3, "beta");
    ck_assert_int_eq(r->element[0]->elements, 3);
    for (size_t i = 0; i < 3; i++) {
        const redisReply *t = r->element[0]->element[i];
        dtq_finish_record rec = th_finish_record(t);
        const char *id = t->element[2]->str;
        if (!strcmp(id, "b1")) continue; /* running */
        if (!strcmp(id, "b2")) {
            rec.outcome = DTQ_OUTCOME_RETRY;
            rec.error = (char *)"try later";
            rec.error_class = "transient";
            rec.delay_ms = 600000;
        } else {
            rec.outcome = DTQ_OUTCOME_DEAD_LETTER;
            rec.error = (char *)"slow";
            rec.error_class = "timeout";
        }
        freeReplyObject(th_finish(C, "w1", &rec, 1));
    }
    freeReplyObject(r);
    th_assert_field(C, "b2", "status", "retrying");
    enqueue("beta", "b4", NULL);
    work("w1", "beta", 1, NULL, NULL, "b4", "permanent");
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 beta"));
    heartbeat("w1");
    heartbeat("w2");
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w2 status draining"));
    freeReplyObject(th_cmd(C, "SET dtq:lock:scheduler w1"));
    /* an entry enqueued 3 s ago by its id: the oldest waiting of gamma */
    before = dtq_now_ms();
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:gamma:p3 %lld-0 task_type echo payload {}", before - 3000));
    freeReplyObject(th_cmd(C, "SADD dtq:queues gamma"));

    o = th_read_json(C, NULL, "dtq_metrics 0");
    after = dtq_now_ms();
    ck_assert_int_eq(th_json_size(o, "queues"), 3);
    q = th_overview_queue(o, "alpha");
    ck_assert_int_eq(th_json_int(q, "depth_by_band.5"), 2);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.9"), 1);
    ck_assert_int_eq(th_json_int(q, "depth_by_band.0"), 0);
    ck_assert_int_eq(th_json_int(q, "pending"), 0);
    ck_assert_int_eq(th_json_int(q, "scheduled"), 1);
    ck_assert(!is_true(q, "paused"));
    ck_assert(th_json_int(q, "oldest_waiting_ms") >= 0 &&
              th_json_int(q, "oldest_waiting_ms") < 60000);
    q = th_overview_queue(o, "beta");
    ck_assert_int_eq(th_json_int(q, "depth_by_band.5"), 0);
    ck_assert_int_eq(th_json_int(q, "pending"), 1);
    ck_assert_int_eq(th_json_int(q, "scheduled"), 1);
    ck_assert_int_eq(th_json_int(q, "oldest_waiting_ms"), 0);
    ck_assert(is_true(q, "paused"));
    q = th_overview_queue(o, "gamma");
    ck_assert_int_eq(th_json_int(q, "depth_by_band.3"), 1);
    ck_assert(th_json_int(q, "oldest_waiting_ms") >= 3000);
    ck_assert(th_json_int(q, "oldest_waiting_ms") <= after - before + 3000);
    ck_assert_int_eq(th_json_int(o, "scheduled.total"), 2);
    ck_assert(is_true(o, "scheduled.by_queue_complete"));
    ck_assert_int_eq(th_json_int(o, "dead_letters.length"), 2);
    ck_assert_int_eq(th_json_int(o, "dead_letters.scanned"), 2);
    ck_assert(is_true(o, "dead_letters.complete"));
    cJSON_ArrayForEach(e, th_json_at(o, "dead_letters.by_queue_class")) {
        ck_assert_str_eq(th_json_str(e, "queue"), "beta");
        ck_assert_int_eq(th_json_int(e, "count"), 1);
        ck_assert_str_eq(th_json_str(e, "class"), found++ ? "timeout" : "permanent"); /* sorted */
    }
    ck_assert_int_eq(found, 2);
    ck_assert_int_eq(th_json_int(o, "workers.running"), 1);
    ck_assert_int_eq(th_json_int(o, "workers.draining"), 1);
    ck_assert_int_eq(th_json_int(o, "workers.stopped"), 0);
    ck_assert_str_eq(th_json_str(o, "leader"), "w1");
    ck_assert(!is_true(o, "queues_truncated"));
    ck_assert(!is_true(o, "workers_truncated"));
    cJSON_Delete(o);

    /* the same counts as the overview and stats */
    o = th_read_json(C, NULL, "dtq_overview 0");
    ck_assert_int_eq(th_json_int(th_overview_queue(o, "alpha"), "depth"), 3);
    ck_assert_int_eq(stat_of("queue:alpha:depth"), 3);
    cJSON_Delete(o);

    /* more dead letters than the scan: counted up to its cap, the total exact */
    for (int i = 0; i < 1100; i++)
        freeReplyObject(th_cmd(C, "XADD dtq:stream:dead-letter * queue delta last_error_class x"));
    freeReplyObject(th_cmd(C, "DEL dtq:lock:scheduler"));
    o = th_read_json(C, NULL, "dtq_metrics 0");
    ck_assert_int_eq(th_json_int(o, "dead_letters.length"), 1102);
    ck_assert_int_eq(th_json_int(o, "dead_letters.scanned"), 1000);
    ck_assert(!is_true(o, "dead_letters.complete"));
    ck_assert_int_eq(th_json_size(o, "dead_letters.by_queue_class"),
                     1); /* the newest are delta's */
    ck_assert_int_eq(th_json_int(o, "dead_letters.by_queue_class.0.count"), 1000);
    ck_assert(cJSON_IsNull(th_json_at(o, "leader")));
    cJSON_Delete(o);
}
END_TEST

/* The reply of FCALL_RO dtq_served 0 <q> as "serving silent live". */
static void served_is(const char *q, const char *want) {
    redisReply *r = th_cmd(C, "FCALL_RO dtq_served 0 %s", q);
    char got[64];
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == 3, "served %s: %s", q,
                  r->str ? r->str : "");
    snprintf(got, sizeof(got), "%lld %lld %lld", r->element[0]->integer, r->element[1]->integer,
             r->element[2]->integer);
    ck_assert_msg(!strcmp(got, want), "served %s: %s, want %s", q, got, want);
    freeReplyObject(r);
}

/* <ns>_served: the live workers (their hash there) that serve a queue, that do not say
 * (no serves field), and all of them; a member without a hash is not live. */
START_TEST(test_served) {
    served_is("mail", "0 0 0");
    freeReplyObject(th_cmd(C, "SADD dtq:workers w1 w2 w3 gone"));
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w1 last_heartbeat 1 serves %s", "mail mail.eu"));
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w2 last_heartbeat 1 serves reports"));
    served_is("mail", "1 0 2");
    served_is("mail.e", "0 0 2"); /* a whole name, not a part of one */
    served_is("reports", "1 0 2");
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w3 last_heartbeat 1")); /* older than serves */
    served_is("other", "0 1 3");
    th_expect_refused(th_cmd(C, "FCALL_RO dtq_served 0 {bad}"), "INVALID_ARGUMENT");
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_read");
    TCase *tc = tcase_create("read model");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_empty_arrays);
    tcase_add_test(tc, test_served);
    tcase_add_test(tc, test_overview_depths_and_workers);
    tcase_add_test(tc, test_queue_view);
    tcase_add_test(tc, test_task_view);
    tcase_add_test(tc, test_dead_letter_pages);
    tcase_add_test(tc, test_requeue_dlq_cursor);
    tcase_add_test(tc, test_read_functions_are_no_writes);
    tcase_add_test(tc, test_task_view_due);
    tcase_add_test(tc, test_audit_names_target_and_actor);
    tcase_add_test(tc, test_metrics);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
