/* check_events.c: events.c: the event JSON and the events level filter. */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "events.h"

START_TEST(test_event_json) {
    char *json = dtq_events_build(DTQ_EVENTS_ALL, 1764464523456LL, "TASK_STARTED", "t\"1",
                                  "default", "echo", 2, "w1", "{\"delay_ms\":5}");
    cJSON *ev = cJSON_Parse(json);
    ck_assert_ptr_nonnull(ev);
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "type")->valuestring, "TASK_STARTED");
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "task_id")->valuestring, "t\"1");
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "ts")->valuestring, "2025-11-30T01:02:03.456Z");
    ck_assert_int_eq(cJSON_GetObjectItem(ev, "attempt")->valueint, 2);
    ck_assert_int_eq(strlen(cJSON_GetObjectItem(ev, "event_id")->valuestring), 36);
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "metadata"), "delay_ms")->valueint,
                     5);
    cJSON_Delete(ev);
    free(json);
    ck_assert_ptr_null(
        dtq_events_build(DTQ_EVENTS_TERMINAL, 0, "TASK_STARTED", "t", "q", "x", 1, "w", NULL));
    ck_assert_ptr_null(
        dtq_events_build(DTQ_EVENTS_OFF, 0, "TASK_SUCCEEDED", "t", "q", "x", 1, "w", NULL));
    json = dtq_events_build(DTQ_EVENTS_TERMINAL, 0, "TASK_SUCCEEDED", "t", "q", "x", 1, "w", NULL);
    ck_assert_ptr_nonnull(json);
    free(json);
}
END_TEST

int main(void) {
    Suite *s = suite_create("events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_event_json);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
