/* check_view_merge.c: the cluster layout's merges of the read views (view_merge.c), on
 * hand-made parts: pages cut at the nearest horizon of a part that has more, entries with
 * the same key in two parts kept together, cursors that walk every entry once; the
 * overview's and metrics' sums; the orders of the keys. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "view_merge.h"

/* A dead-letter page of queue q: entries with the given ids (NULL-terminated), next. */
static cJSON *page(const char *q, const char *next, const char *const *ids) {
    cJSON *p = cJSON_CreateObject(), *e = cJSON_AddArrayToObject(p, "entries");
    int n = 0;
    for (; *ids; ids++, n++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "entry_id", *ids);
        cJSON_AddStringToObject(x, "queue", q);
        cJSON_AddItemToArray(e, x);
    }
    cJSON_AddNumberToObject(p, "total", 10);
    cJSON_AddNumberToObject(p, "scanned", n);
    cJSON_AddStringToObject(p, "order", "newest");
    cJSON_AddNullToObject(p, "filter");
    if (next)
        cJSON_AddStringToObject(p, "next_cursor", next);
    else
        cJSON_AddNullToObject(p, "next_cursor");
    return p;
}

/* "id@queue,..." of a merged page's entries, and its next_cursor ("null"). */
static void describe(const cJSON *m, char *buf, size_t size) {
    const cJSON *e, *nc = cJSON_GetObjectItem(m, "next_cursor");
    buf[0] = '\0';
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "entries")) {
        snprintf(buf + strlen(buf), size - strlen(buf), "%s@%s,", th_json_str(e, "entry_id"),
                 th_json_str(e, "queue"));
    }
    snprintf(buf + strlen(buf), size - strlen(buf), " next=%s",
             cJSON_IsString(nc) ? nc->valuestring : "null");
}

START_TEST(test_stream_ids_compare_as_numbers) {
    ck_assert_int_lt(dtq_view_cmp_stream_id("999-5", "1000-0"), 0);
    ck_assert_int_lt(dtq_view_cmp_stream_id("1000-9", "1000-10"), 0);
    ck_assert_int_eq(dtq_view_cmp_stream_id("1000-1", "1000-1"), 0);
    ck_assert_int_lt(dtq_view_cmp_sched_key("900:z", "1000:a"), 0);
    ck_assert_int_lt(dtq_view_cmp_sched_key("1000:a", "1000:b"), 0);
}
END_TEST

/* Newest first: A has more after 500-0 (its horizon), B is complete. The page holds what
 * both examined down to 500-0 and no more, even under count. */
START_TEST(test_page_stops_at_the_nearest_horizon) {
    const char *a[] = {"900-0", "700-0", "500-0", NULL}, *b[] = {"800-0", "400-0", NULL};
    cJSON *parts[2] = {page("a", "500-0", a), page("b", NULL, b)};
    cJSON *m = dtq_view_merge_stream_pages(parts, 2, 10, 0);
    char buf[512];
    describe(m, buf, sizeof(buf));
    ck_assert_str_eq(buf, "900-0@a,800-0@b,700-0@a,500-0@a, next=500-0");
    ck_assert_int_eq(th_json_int(m, "total"), 20);
    ck_assert_int_eq(th_json_int(m, "count"), 4);
    cJSON_Delete(m);
    /* count cuts first: the cursor is the last entry's id */
    m = dtq_view_merge_stream_pages(parts, 2, 2, 0);
    describe(m, buf, sizeof(buf));
    ck_assert_str_eq(buf, "900-0@a,800-0@b, next=800-0");
    cJSON_Delete(m);
    cJSON_Delete(parts[0]);
    cJSON_Delete(parts[1]);
}
END_TEST

/* The same id in two queues at the cut: both come in this page (one over count), so the
 * next page, after that id in every queue, misses neither. */
START_TEST(test_page_keeps_equal_keys_together) {
    const char *a[] = {"100-0", "300-0", NULL}, *b[] = {"300-0", "400-0", NULL};
    cJSON *parts[2] = {page("a", NULL, a), page("b", NULL, b)};
    cJSON *m = dtq_view_merge_stream_pages(parts, 2, 2, 1); /* oldest first */
    char buf[512];
    describe(m, buf, sizeof(buf));
    ck_assert_str_eq(buf, "100-0@a,300-0@a,300-0@b, next=300-0");
    cJSON_Delete(m);
    m = dtq_view_merge_stream_pages(parts, 2, 4, 1);
    describe(m, buf, sizeof(buf));
    ck_assert_str_eq(buf, "100-0@a,300-0@a,300-0@b,400-0@b, next=null");
    cJSON_Delete(m);
    cJSON_Delete(parts[0]);
    cJSON_Delete(parts[1]);
}
END_TEST

/* The schedule: due time, then id; a part's horizon is a "<due>:<id>" cursor. */
START_TEST(test_schedule_pages) {
    cJSON *parts[2], *m;
    const char *sa = "{\"total\":3,\"claimed\":1,\"scanned\":2,\"time_ms\":5,\"filter\":{},"
                     "\"entries\":[{\"task_id\":\"x\",\"due_ms\":10},{\"task_id\":\"y\","
                     "\"due_ms\":30}],\"next_cursor\":\"30:y\"}";
    const char *sb = "{\"total\":2,\"claimed\":0,\"scanned\":2,\"time_ms\":7,\"filter\":{},"
                     "\"entries\":[{\"task_id\":\"a\",\"due_ms\":30},{\"task_id\":\"b\","
                     "\"due_ms\":40}],\"next_cursor\":null}";
    parts[0] = cJSON_Parse(sa);
    parts[1] = cJSON_Parse(sb);
    m = dtq_view_merge_scheduled(parts, 2, 50);
    ck_assert_int_eq(th_json_size(m, "entries"), 3); /* b (40) is past a's horizon 30:y */
    ck_assert_str_eq(th_json_str(m, "entries.0.task_id"), "x");
    ck_assert_str_eq(th_json_str(m, "entries.1.task_id"), "a");
    ck_assert_str_eq(th_json_str(m, "entries.2.task_id"), "y");
    ck_assert_str_eq(th_json_str(m, "next_cursor"), "30:y");
    ck_assert_int_eq(th_json_int(m, "total"), 5);
    ck_assert_int_eq(th_json_int(m, "claimed"), 1);
    ck_assert_int_eq(th_json_int(m, "time_ms"), 7);
    cJSON_Delete(m);
    cJSON_Delete(parts[0]);
    cJSON_Delete(parts[1]);
}
END_TEST

/* The overview: queues by name, counts summed, the leader and workers from {ns}'s part,
 * by_queue_complete only when every part's is. */
START_TEST(test_overview_and_metrics) {
    cJSON *parts[3], *m;
    parts[0] = cJSON_Parse("{\"time_ms\":5,\"queues\":[{\"name\":\"b\",\"depth\":2}],"
                           "\"queues_truncated\":false,\"workers\":[],\"workers_gone\":0,"
                           "\"scheduler\":{\"leader\":null,\"scheduled\":3,\"claimed\":1,"
                           "\"by_queue_complete\":false},\"dlq\":{\"length\":4},"
                           "\"events\":{\"level\":\"terminal\",\"stream\":false}}");
    parts[1] = cJSON_Parse("{\"time_ms\":9,\"queues\":[],\"workers\":[{\"id\":\"w1\"}],"
                           "\"workers_gone\":2,\"scheduler\":{\"leader\":\"w1\",\"scheduled\":0,"
                           "\"claimed\":0,\"by_queue_complete\":true},\"dlq\":{\"length\":0},"
                           "\"events\":{\"level\":\"all\",\"stream\":true}}");
    parts[2] = cJSON_Parse("{\"time_ms\":6,\"queues\":[{\"name\":\"a\",\"depth\":1}],"
                           "\"scheduler\":{\"leader\":null,\"scheduled\":2,\"claimed\":0,"
                           "\"by_queue_complete\":true},\"dlq\":{\"length\":1},"
                           "\"events\":{\"level\":\"terminal\",\"stream\":false}}");
    m = dtq_view_merge_overview(parts, 3, 1000);
    ck_assert_str_eq(th_json_str(m, "queues.0.name"), "a");
    ck_assert_str_eq(th_json_str(m, "queues.1.name"), "b");
    ck_assert_int_eq(th_json_int(m, "time_ms"), 9);
    ck_assert_int_eq(th_json_int(m, "scheduler.scheduled"), 5);
    ck_assert_int_eq(th_json_int(m, "scheduler.claimed"), 1);
    ck_assert(cJSON_IsFalse(th_json_at(m, "scheduler.by_queue_complete")));
    ck_assert_str_eq(th_json_str(m, "scheduler.leader"), "w1");
    ck_assert_int_eq(th_json_int(m, "dlq.length"), 5);
    ck_assert_str_eq(th_json_str(m, "workers.0.id"), "w1");
    ck_assert_int_eq(th_json_int(m, "workers_gone"), 2);
    ck_assert_str_eq(th_json_str(m, "events.level"), "terminal"); /* a queue's config */
    ck_assert(cJSON_IsTrue(th_json_at(m, "events.stream")));
    cJSON_Delete(m);
    m = dtq_view_merge_overview(parts, 3, 1); /* the cap */
    ck_assert_int_eq(th_json_size(m, "queues"), 1);
    ck_assert(cJSON_IsTrue(th_json_at(m, "queues_truncated")));
    cJSON_Delete(m);
    for (int i = 0; i < 3; i++) cJSON_Delete(parts[i]);

    parts[0] = cJSON_Parse("{\"queues\":[{\"name\":\"q\"}],\"scheduled\":{\"total\":2,"
                           "\"claimed\":0,\"by_queue_complete\":true},\"dead_letters\":{"
                           "\"length\":3,\"scanned\":3,\"complete\":true,\"by_queue_class\":[{"
                           "\"queue\":\"q\",\"class\":\"timeout\",\"count\":3}]},\"workers\":{"
                           "\"running\":0,\"draining\":0,\"stopped\":0},\"leader\":null}");
    parts[1] = cJSON_Parse("{\"queues\":[],\"scheduled\":{\"total\":0,\"claimed\":0,"
                           "\"by_queue_complete\":true},\"dead_letters\":{\"length\":0,"
                           "\"scanned\":0,\"complete\":true,\"by_queue_class\":[]},\"workers\":{"
                           "\"running\":2,\"draining\":1,\"stopped\":0},\"leader\":\"w2\"}");
    m = dtq_view_merge_metrics(parts, 2, 1000);
    ck_assert_int_eq(th_json_int(m, "dead_letters.length"), 3);
    ck_assert_int_eq(th_json_int(m, "dead_letters.by_queue_class.0.count"), 3);
    ck_assert_int_eq(th_json_int(m, "workers.running"), 2);
    ck_assert_int_eq(th_json_int(m, "workers.draining"), 1);
    ck_assert_str_eq(th_json_str(m, "leader"), "w2");
    ck_assert_int_eq(th_json_int(m, "scheduled.total"), 2);
    cJSON_Delete(m);
    cJSON_Delete(parts[0]);
    cJSON_Delete(parts[1]);
}
END_TEST

/* <ns>_stats parts (one per queue, and {ns}'s): every name once in the order first seen,
 * the namespace's counters summed, a queue's own pairs and words as its part gave them. */
START_TEST(test_stats) {
    cJSON *parts[3], *m;
    const cJSON *f;
    const char *order[] = {"queue:a:depth", "queue:a:mode", "scheduled", "dlq",
                           "queue:b:depth", "queue:b:mode", "workers",   NULL};
    int i = 0;
    parts[0] = cJSON_Parse("{\"queue:a:depth\":3,\"queue:a:mode\":\"lean\",\"scheduled\":1,"
                           "\"dlq\":2}");
    parts[1] = cJSON_Parse("{\"queue:b:depth\":4,\"queue:b:mode\":\"full\",\"scheduled\":5,"
                           "\"dlq\":0}");
    parts[2] = cJSON_Parse("{\"workers\":2}");
    m = dtq_view_merge_stats(parts, 3);
    ck_assert_int_eq(th_json_int(m, "queue:a:depth"), 3);
    ck_assert_int_eq(th_json_int(m, "queue:b:depth"), 4);
    ck_assert_str_eq(th_json_str(m, "queue:a:mode"), "lean");
    ck_assert_str_eq(th_json_str(m, "queue:b:mode"), "full");
    ck_assert_int_eq(th_json_int(m, "scheduled"), 6);
    ck_assert_int_eq(th_json_int(m, "dlq"), 2);
    ck_assert_int_eq(th_json_int(m, "workers"), 2);
    cJSON_ArrayForEach(f, m) {
        ck_assert_ptr_nonnull(order[i]);
        ck_assert_str_eq(f->string, order[i++]);
    }
    ck_assert_ptr_null(order[i]);
    cJSON_Delete(m);
    for (i = 0; i < 3; i++) cJSON_Delete(parts[i]);
}
END_TEST

/* <ns>_limit_list parts: by queue, each queue's limits in their own order; no parts, []. */
START_TEST(test_limits) {
    cJSON *parts[2], *m;
    parts[0] = cJSON_Parse("[{\"queue\":\"b\",\"kind\":\"rate\"},{\"queue\":\"b\","
                           "\"kind\":\"concurrency\"}]");
    parts[1] = cJSON_Parse("[{\"queue\":\"a\",\"kind\":\"rate\"}]");
    m = dtq_view_merge_limits(parts, 2);
    ck_assert_int_eq(cJSON_GetArraySize(m), 3);
    ck_assert_str_eq(th_json_str(m, "0.queue"), "a");
    ck_assert_str_eq(th_json_str(m, "1.kind"), "rate");
    ck_assert_str_eq(th_json_str(m, "2.kind"), "concurrency");
    cJSON_Delete(m);
    m = dtq_view_merge_limits(parts, 0);
    ck_assert_int_eq(cJSON_GetArraySize(m), 0);
    cJSON_Delete(m);
    cJSON_Delete(parts[0]);
    cJSON_Delete(parts[1]);
}
END_TEST

START_TEST(test_batches) {
    cJSON *parts[3], *m;
    parts[0] = cJSON_Parse("{\"batches\":[{\"id\":\"b2\",\"created_at\":30},"
                           "{\"id\":\"b1\",\"created_at\":10}],\"more\":false}");
    parts[1] = cJSON_Parse("{\"batches\":[{\"id\":\"a\",\"created_at\":20},"
                           "{\"id\":\"c\",\"created_at\":30}],\"more\":false}");
    parts[2] = cJSON_Parse("{\"batches\":[],\"more\":false}"); /* {ns}'s: none */
    m = dtq_view_merge_batches(parts, 3, 10);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(m, "batches")), 4);
    ck_assert_str_eq(th_json_str(m, "batches.0.id"), "c"); /* newest; ties by id, descending */
    ck_assert_str_eq(th_json_str(m, "batches.1.id"), "b2");
    ck_assert_str_eq(th_json_str(m, "batches.2.id"), "a");
    ck_assert_str_eq(th_json_str(m, "batches.3.id"), "b1");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(m, "more")));
    cJSON_Delete(m);
    m = dtq_view_merge_batches(parts, 3, 3); /* one left out: more */
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(m, "batches")), 3);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(m, "more")));
    cJSON_Delete(m);
    cJSON_Delete(parts[2]);
    parts[2] = cJSON_Parse("{\"batches\":[],\"more\":true}"); /* a part had more */
    m = dtq_view_merge_batches(parts, 3, 10);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(m, "more")));
    cJSON_Delete(m);
    for (int i = 0; i < 3; i++) cJSON_Delete(parts[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("view_merge");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_stream_ids_compare_as_numbers);
    tcase_add_test(tc, test_page_stops_at_the_nearest_horizon);
    tcase_add_test(tc, test_page_keeps_equal_keys_together);
    tcase_add_test(tc, test_schedule_pages);
    tcase_add_test(tc, test_overview_and_metrics);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_batches);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
