/* finish.c: <ns>_finish and <ns>_handback (lua/fn/finish.lua): every outcome, the entries
 * acknowledged and deleted, malformed records refused, poisoned records, deferral. Against a real
 * redis-server, without a daemon. */
#include "lua_suite.h"

/* The entry ids left in a stream, space-separated. */
static void stream_ids(const char *stream, char *out, size_t n) {
    redisReply *r = th_cmd(C, "XRANGE %s - +", stream);
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++) {
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%s", i ? " " : "", r->element[i]->element[0]->str);
    }
    freeReplyObject(r);
}

START_TEST(test_finish_paths) {
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id s1 idempotency_key ik"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id r1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id d1 idempotency_key ik2"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 3);
    /* the guard: another worker cannot finish w1's attempt */
    f = finish_one("w2", r->element[0]->element[0], OK_, "{\"ok\":1}", DTQ_RESULT_FULL);
    ck_assert_str_eq(f->element[0]->str, "stale");
    freeReplyObject(f);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 3);

    f = finish_one("w1", r->element[0]->element[0], OK_, "{\"ok\":1}", DTQ_RESULT_TRUNCATED);
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    th_assert_field(C, "s1", "status", "succeeded");
    th_assert_field(C, "s1", "result_truncated", "1");
    {
        redisReply *g = th_cmd(C, "GET dtq:result:s1");
        ck_assert_str_eq(g->str, "{\"ok\":1}");
        freeReplyObject(g);
        g = th_cmd(C, "GET dtq:idempotency:default:ik");
        ck_assert_ptr_nonnull(strstr(g->str, "completed"));
        freeReplyObject(g);
    }
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:s1")), 0);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:result:s1")), 0);
    /* replaying the same finish is stale and acknowledges nothing twice */
    f = finish_one("w1", r->element[0]->element[0], OK_, "{\"ok\":1}", DTQ_RESULT_FULL);
    ck_assert_str_eq(f->element[0]->str, "stale");
    freeReplyObject(f);

    f = finish_one("w1", r->element[0]->element[1], RETRY_, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, "retrying");
    freeReplyObject(f);
    th_assert_field(C, "r1", "status", "retrying");
    th_assert_field(C, "r1", "last_error", "boom");
    {
        redisReply *z = th_cmd(C, "ZSCORE dtq:retry:schedule r1");
        ck_assert_ptr_nonnull(z->str);
        freeReplyObject(z);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "TTL dtq:task:r1")), -1);

    f = finish_one("w1", r->element[0]->element[2], DEAD_, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, "dead_lettered");
    freeReplyObject(f);
    th_assert_field(C, "d1", "status", "dead_lettered");
    assert_dead_lettered_with("boom");
    {
        redisReply *g = th_cmd(C, "GET dtq:idempotency:default:ik2");
        ck_assert_ptr_nonnull(strstr(g->str, "failed"));
        freeReplyObject(g);
    }
    freeReplyObject(r);
    /* all three entries acknowledged and deleted: nothing pending, nothing left */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    r = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
    ck_assert_int_eq(r->element[0]->integer, 0);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:r1")), 0); /* null result: no key */
}
END_TEST

/* Finish deletes exactly the entries it acknowledges, whether the prefix below the oldest
 * pending entry is trimmed or single entries above it are deleted: older pending entries
 * (another worker's) and entries not yet delivered stay. */
START_TEST(test_finish_deletes_exactly_the_acknowledged_entries) {
    const char *st = "dtq:stream:default:p5";
    char ids[5][64], want[512], got[512];
    redisReply *a1, *w1, *f;
    th_queue_groups(C, "default");
    for (int i = 0; i < 5; i++) {
        redisReply *e = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id a%d", i + 1);
        freeReplyObject(e);
    }
    {
        redisReply *r = th_cmd(C, "XRANGE %s - +", st);
        ck_assert_int_eq(r->elements, 5);
        for (int i = 0; i < 5; i++)
            snprintf(ids[i], sizeof ids[i], "%s", r->element[i]->element[0]->str);
        freeReplyObject(r);
    }
    a1 = fetch("w2", 1, "default"); /* a1: the oldest pending entry, another worker's */
    w1 = fetch("w1", 3, "default"); /* a2 a3 a4; a5 stays undelivered */
    ck_assert_int_eq(w1->element[0]->elements, 3);

    f = finish_one("w1", w1->element[0]->element[1], OK_, "", DTQ_RESULT_NONE); /* a3 */
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    snprintf(want, sizeof want, "%s %s %s %s", ids[0], ids[1], ids[3], ids[4]);
    stream_ids(st, got, sizeof got);
    ck_assert_str_eq(got, want);

    f = finish_one("w2", a1->element[0]->element[0], OK_, "", DTQ_RESULT_NONE); /* a1 */
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    snprintf(want, sizeof want, "%s %s %s", ids[1], ids[3], ids[4]);
    stream_ids(st, got, sizeof got);
    ck_assert_str_eq(got, want);

    f = finish_one("w1", w1->element[0]->element[2], OK_, "", DTQ_RESULT_NONE); /* a4 */
    freeReplyObject(f);
    f = finish_one("w1", w1->element[0]->element[0], OK_, "", DTQ_RESULT_NONE); /* a2 */
    freeReplyObject(f);
    stream_ids(st, got, sizeof got);
    ck_assert_str_eq(got, ids[4]); /* nothing pending: only the undelivered a5 is left */
    th_assert_field(C, "a5", "status", "queued");
    freeReplyObject(a1);
    freeReplyObject(w1);
}
END_TEST

START_TEST(test_finish_refuses_malformed_records) {
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id m1"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 1);
    /* an unknown outcome word (the old one-letter code), a short record, a bad attempt */
    f = th_cmd(C, "FCALL dtq_finish 0 w1 1 m1 1 s dtq:stream:default:p5 %s {} full '' '' 0 0",
               r->element[0]->element[0]->element[1]->str);
    ck_assert_int_eq(f->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(f->str, "INVALID_ARGUMENT record 1: unknown outcome s"));
    freeReplyObject(f);
    f = th_cmd(C, "FCALL dtq_finish 0 w1 1 m1 1 succeeded");
    ck_assert_int_eq(f->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(f->str, "INVALID_ARGUMENT"));
    freeReplyObject(f);
    f = th_cmd(C,
               "FCALL dtq_finish 0 w1 1 m1 x succeeded dtq:stream:default:p5 %s {} full '' '' 0 0",
               r->element[0]->element[0]->element[1]->str);
    ck_assert_ptr_nonnull(strstr(f->str, "attempt is not a number"));
    freeReplyObject(f);
    /* nothing was written or acknowledged */
    th_assert_field(C, "m1", "status", "running");
    freeReplyObject(r);
    r = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
    ck_assert_int_eq(r->element[0]->integer, 1);
    freeReplyObject(r);
}
END_TEST

/* finish: one call, four records: a poisoned hash is dead-lettered whatever the outcome, a
 * task key of another type is quarantined, every entry is acknowledged. */
START_TEST(test_finish_isolates_poisoned_records) {
    redisReply *r, *f;
    char src[160];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"f1", "f2", "f3", "f4", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 4);
    /* f2: a field finish reads is damaged; f3: one it does not read (its outcome stands) */
    freeReplyObject(th_cmd(C, "HSET dtq:task:f2 attempt two"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:f3 priority high"));
    freeReplyObject(th_cmd(C, "DEL dtq:task:f4"));
    freeReplyObject(th_cmd(C, "SET dtq:task:f4 junk"));
    snprintf(src, sizeof(src), "dtq:stream:default:p5/%s",
             r->element[0]->element[3]->element[1]->str);
    {
        dtq_finish_record recs[4];
        for (size_t i = 0; i < 4; i++) {
            recs[i] = th_finish_record(r->element[0]->element[i]);
            recs[i].result_state = DTQ_RESULT_FULL;
            recs[i].result = (char *)"{\"ok\":1}";
            recs[i].result_len = strlen(recs[i].result);
        }
        f = th_finish(C, "w1", recs, 4);
    }
    freeReplyObject(r);
    ck_assert_int_eq(f->elements, 4);
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    ck_assert_str_eq(f->element[1]->str, "stale"); /* nothing written, entry kept */
    ck_assert_str_eq(f->element[2]->str, "succeeded");
    ck_assert_str_eq(f->element[3]->str, "quarantined");
    freeReplyObject(f);
    for (const char *const *g = (const char *const[]){"f1", "f3", NULL}; *g; g++) {
        char key[64];
        th_assert_field(C, *g, "status", "succeeded");
        snprintf(key, sizeof(key), "dtq:result:%s", *g);
        assert_string_key(key, "{\"ok\":1}");
    }
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:f2")), 0);
    assert_quarantined(0, "dtq:task:f4", src, "string");
    assert_string_key("dtq:task:f4", "junk");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 1);
    /* three entries acknowledged and deleted; f2's stays pending, and the reaper settles it */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1);
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 1);
    r = th_cmd(C, "FCALL dtq_reap 1 dtq:stream:default:p5 w2 0 10 16 %s default 5 0-0", POLICY);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "reap: %s", r->str);
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    assert_poisoned("f2", "attempt is not a number");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
}
END_TEST

/* handback and recover 'lost' read each task on their own: a task key of another type is
 * quarantined and its entry acknowledged, and the other records of the call go on (a raised
 * error would leave every record of the call where it was). */
START_TEST(test_handback_and_recover_isolate_a_task_key_of_another_type) {
    redisReply *r;
    char src[2][160], entry[2][32];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"h1", "h2", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    for (size_t i = 0; i < 2; i++) {
        snprintf(entry[i], sizeof(entry[i]), "%s", r->element[0]->element[i]->element[1]->str);
        snprintf(src[i], sizeof(src[i]), "dtq:stream:default:p5/%s", entry[i]);
    }
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "DEL dtq:task:h1"));
    freeReplyObject(th_cmd(C, "SET dtq:task:h1 junk"));

    r = th_cmd(C,
               "FCALL dtq_handback 0 w1 2 h1 1 dtq:stream:default:p5 %s stop "
               "h2 1 dtq:stream:default:p5 %s stop",
               entry[0], entry[1]);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "handback: %s", r->str);
    ck_assert_int_eq(r->elements, 2);
    ck_assert_str_eq(r->element[0]->str, "quarantined");
    ck_assert_str_eq(r->element[1]->str, "queued");
    freeReplyObject(r);
    assert_quarantined(0, "dtq:task:h1", src[0], "string");
    assert_string_key("dtq:task:h1", "junk");
    th_assert_field(C, "h2", "status", "queued");
    th_assert_field(C, "h2", "attempt", "2");
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1); /* h2's new entry */

    /* recover 'lost': h2 claimed again by w1, its reply "lost"; h3's key replaced */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id h3"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "DEL dtq:task:h3"));
    freeReplyObject(th_cmd(C, "SET dtq:task:h3 junk"));
    r = th_cmd(C, "FCALL dtq_recover 1 dtq:stream:default:p5 w1 lost %s 0 default 5", POLICY);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "recover: %s", r->str);
    ck_assert_int_eq(r->elements, 1);
    ck_assert_str_eq(r->element[0]->element[2]->str, "h2");
    ck_assert_int_eq(r->element[0]->element[6]->integer, 2); /* the same attempt, handed over */
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 2);
    r = th_cmd(C, "XREVRANGE dtq:stream:quarantine + - COUNT 1");
    ck_assert_str_eq(th_entry_field(r->element[0], "key"), "dtq:task:h3");
    freeReplyObject(r);
    assert_string_key("dtq:task:h3", "junk");
    th_assert_field(C, "h2", "status", "running");
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 1); /* h2's; h3's acknowledged */
}
END_TEST

/* Outcome defer: within grace_ms of created_at the task goes back to the schedule as
 * pending at the same attempt (a promotion queues that attempt again); past it, the task is
 * dead-lettered with the record's error. A defer record needs a numeric grace_ms. */
START_TEST(test_finish_defer) {
    redisReply *r, *f;
    dtq_finish_record rec;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default newtype 1 task_id df1 max_attempts 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default newtype 1 task_id df2"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    rec = th_finish_record(r->element[0]->element[0]);
    rec.outcome = DTQ_OUTCOME_DEFER;
    rec.error = (char *)"unknown_task_type:newtype";
    rec.error_class = "unknown_task_type";
    rec.delay_ms = 60000;
    rec.grace_ms = 600000;
    f = th_finish(C, "w1", &rec, 1);
    ck_assert_str_eq(f->element[0]->str, "pending");
    freeReplyObject(f);
    th_assert_field(C, "df1", "status", "pending");
    th_assert_field(C, "df1", "attempt", "1");
    th_assert_field(C, "df1", "last_error_class", "unknown_task_type");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 1);
    {
        redisReply *p = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
        ck_assert_int_eq(p->element[0]->integer, 1); /* df1's entry acknowledged, df2's not */
        freeReplyObject(p);
    }
    /* promoted: queued at attempt 1 again, claimable at attempt 1 (max_attempts 1) */
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 0 df1"));
    freeReplyObject(
        th_cmd(C, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed 10 60000"));
    freeReplyObject(th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 df1"));
    th_assert_field(C, "df1", "status", "queued");
    th_assert_field(C, "df1", "attempt", "1");
    {
        redisReply *again = fetch("w2", 10, "default");
        ck_assert_int_eq(again->element[0]->elements, 1);
        ck_assert_str_eq(again->element[0]->element[0]->element[2]->str, "df1");
        ck_assert_int_eq(again->element[0]->element[0]->element[6]->integer, 1);
        freeReplyObject(again);
    }
    /* past the grace (0 ms after created_at): dead-lettered with the record's error */
    rec = th_finish_record(r->element[0]->element[1]);
    rec.outcome = DTQ_OUTCOME_DEFER;
    rec.error = (char *)"unknown_task_type:newtype";
    rec.error_class = "unknown_task_type";
    rec.delay_ms = 1000;
    rec.grace_ms = 0;
    f = th_finish(C, "w1", &rec, 1);
    ck_assert_str_eq(f->element[0]->str, "dead_lettered");
    freeReplyObject(f);
    th_assert_field(C, "df2", "attempt", "1");
    th_assert_field(C, "df2", "last_error", "unknown_task_type:newtype");
    th_assert_field(C, "df2", "last_error_class", "unknown_task_type");
    /* grace_ms must be a number for defer */
    f = th_cmd(C, "FCALL dtq_finish 0 w2 1 df1 1 defer dtq:stream:default:p5 0-1 '' none e c 5 x");
    ck_assert_int_eq(f->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(f->str, "INVALID_ARGUMENT record 1: grace_ms is not a number"));
    freeReplyObject(f);
    freeReplyObject(r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_finish");
    TCase *tc = tcase_create("finish");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_finish_paths);
    tcase_add_test(tc, test_finish_deletes_exactly_the_acknowledged_entries);
    tcase_add_test(tc, test_finish_refuses_malformed_records);
    tcase_add_test(tc, test_finish_isolates_poisoned_records);
    tcase_add_test(tc, test_handback_and_recover_isolate_a_task_key_of_another_type);
    tcase_add_test(tc, test_finish_defer);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
