/* library.c: the library as a whole (lua/dtq.lua and lua/lib): the assembled text refused
 * alone, the C side's key names, <prefix>:config garbage ignored, the known queues, and the
 * queue length counter every Function keeps. Against a real redis-server, without a daemon. */
#include "lua_suite.h"

/* Garbage in <p>:config is not trusted: each bad field falls back to its default. */
/* A JSON string payload of exactly `len` bytes (caller frees). */
static char *json_string_of(size_t len) {
    char *p = malloc(len + 1);
    ck_assert_ptr_nonnull(p);
    memset(p, 'x', len);
    p[0] = p[len - 1] = '"';
    p[len] = '\0';
    return p;
}

/* `cmd key [a1 [a2]]`, an integer reply; frees the key. */
static long long key_cmd(const char *cmd, char *key, const char *a1, const char *a2) {
    long long n = a2   ? th_int(th_cmd(C, "%s %s %s %s", cmd, key, a1, a2))
                  : a1 ? th_int(th_cmd(C, "%s %s %s", cmd, key, a1))
                       : th_int(th_cmd(C, "%s %s", cmd, key));
    free(key);
    return n;
}

/* The queue's length counter behind QUEUE_FULL (<p>:queue:<q>:length): every path that adds
 * or deletes an entry keeps it equal to the streams' length, so a queue filled to the limit,
 * drained, fills to the limit again; damage to it heals. */
static long long qlen(void) {
    redisReply *r = th_cmd(C, "GET dtq:queue:default:length");
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return n;
}

static long long xlen_all(void) {
    long long n = 0;
    for (int b = 0; b <= 9; b++) n += th_int(th_cmd(C, "XLEN dtq:stream:default:p%d", b));
    return n;
}

/* Fetches everything there is and finishes it as `outcome`; returns how many. */
static size_t drain(enum dtq_outcome_kind outcome) {
    redisReply *r = fetch("w1", 100, "default");
    size_t n = r->element[0]->elements;
    for (size_t i = 0; i < n; i++) {
        redisReply *f = finish_one("w1", r->element[0]->element[i], outcome, "", DTQ_RESULT_NONE);
        freeReplyObject(f);
    }
    freeReplyObject(r);
    return n;
}

/* The assembled text alone (lua/dtq.lua and its modules, as the build embeds it) is a
 * template: its constants are written in by scripts.c, so a FUNCTION LOAD of the bare
 * file is refused, naming the way to install it (in the name of the global its
 * placeholder reads: Redis allows no error() while it loads a library). */
START_TEST(test_source_text_refuses_to_load) {
    char *src = th_read_file(DTQ_LUA_LIBRARY);
    redisReply *r = th_cmd(C, "FUNCTION LOAD REPLACE %s", src);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_msg(strstr(r->str, "load_with_dtqctl_functions_install") != NULL, "%s", r->str);
    freeReplyObject(r);
    free(src);
    r = th_cmd(C, "FCALL_RO dtq_version 0"); /* the loaded library stays */
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, dtq_scripts_version());
    freeReplyObject(r);
}
END_TEST

/* The C side's key constructors (keys.h) and DTQ_GROUP name what the Functions write and
 * read: a task's hash and stream entry, the queue set, the schedule, the result, the paused
 * key, the events stream (turned on through the config hash), the worker set and hash. */
START_TEST(test_c_key_names_are_the_functions_keys) {
    redisReply *r, *info;
    dtq_finish_record rec;
    int grouped = 0;
    long long live = -1;
    ck_assert_int_eq(key_cmd("HSET", dtq_key_config("dtq"), "events_stream_maxlen", "100"), 1);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 kq echo {} priority 7 task_id kt1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 kq echo {} delay_ms 600000 task_id kt2"));
    ck_assert_int_eq(key_cmd("EXISTS", dtq_key_task("dtq", "kt1"), NULL, NULL), 1);
    ck_assert_int_eq(key_cmd("XLEN", dtq_key_stream("dtq", "kq", 7), NULL, NULL), 1);
    ck_assert_int_eq(key_cmd("SISMEMBER", dtq_key_queues("dtq"), "kq", NULL), 1);
    ck_assert_int_eq(key_cmd("ZCARD", dtq_key_retry_schedule("dtq"), NULL, NULL), 1);
    ck_assert_int_ge(key_cmd("XLEN", dtq_key_events_stream("dtq"), NULL, NULL), 1);
    /* the fetch creates the group and claims kt1; its result goes to the result key */
    r = fetch("w1", 10, "kq");
    if (r->element[0]->elements == 0) { /* the group was made: read again */
        freeReplyObject(r);
        r = fetch("w1", 10, "kq");
    }
    ck_assert_int_eq(r->element[0]->elements, 1);
    rec = th_finish_record(r->element[0]->element[0]);
    rec.result_state = DTQ_RESULT_FULL;
    rec.result = (char *)"42";
    rec.result_len = 2;
    freeReplyObject(th_finish(C, "w1", &rec, 1));
    freeReplyObject(r);
    ck_assert_int_eq(key_cmd("EXISTS", dtq_key_result("dtq", "kt1"), NULL, NULL), 1);
    info = th_cmd(C, "XINFO GROUPS dtq:stream:kq:p7");
    for (size_t i = 0; i < info->elements; i++)
        grouped |= !strcmp(info->element[i]->element[1]->str, DTQ_GROUP);
    freeReplyObject(info);
    ck_assert(grouped);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 kq tester"));
    ck_assert_int_eq(key_cmd("EXISTS", dtq_key_paused("dtq", "kq"), NULL, NULL), 1);
    /* stats counts the members of the worker set whose worker hash exists */
    ck_assert_int_eq(key_cmd("SADD", dtq_key_workers("dtq"), "w1", NULL), 1);
    ck_assert_int_eq(key_cmd("HSET", dtq_key_worker("dtq", "w1"), "status", "running"), 1);
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, "workers")) live = r->element[i + 1]->integer;
    freeReplyObject(r);
    ck_assert_int_eq(live, 1);
}
END_TEST

START_TEST(test_config_garbage_ignored) {
    char *fits = json_string_of(262144), *over = json_string_of(262145); /* the default max */
    redisReply *r;
    char id[128];
    for (const char *const *v = (const char *const[]){"abc", "-5", "0", "1e3", NULL}; *v; v++) {
        freeReplyObject(th_cmd(C, "HSET dtq:config max_payload_bytes %s", *v));
        r = th_cmd(C, "FCALL dtq_enqueue 0 default echo %s", fits);
        ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", *v, r->str);
        freeReplyObject(r);
        th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo %s", over),
                          "PAYLOAD_TOO_LARGE payload is 262145 bytes, max_payload_bytes is 262144");
    }
    free(fits);
    free(over);
    /* out of range or unknown: retention, DLQ length and flag, event level */
    freeReplyObject(th_cmd(C, "DEL dtq:config"));
    freeReplyObject(th_cmd(C, "HSET dtq:config task_retention_s -1 dlq_maxlen 0 dlq_enabled 7 "
                              "events loud events_stream_maxlen 100 default_priority 12"));
    th_queue_groups(C, "default");
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_assert_field(C, "c1", "priority", "5");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:events")), 1); /* events: all */
    r = th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload {bad");
    snprintf(id, sizeof(id), "default:p5:%s", r->str);
    freeReplyObject(r);
    freeReplyObject(fetch("w1", 10, "default"));
    th_assert_field(C, id, "status", "dead_lettered"); /* dlq_enabled: 1 */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:%s", id)), 600000); /* 604800 s */
    /* a config key of another type: every field takes its default */
    freeReplyObject(th_cmd(C, "DEL dtq:config"));
    freeReplyObject(th_cmd(C, "SET dtq:config junk"));
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c2");
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue: %s", r->str);
    freeReplyObject(r);
    th_assert_field(C, "c2", "priority", "5");
}
END_TEST

/* stats reports the queues of <p>:queues (enqueue, raw-entry fetch), without a SCAN: a
 * queue that only a producer's XADD created is not listed until a fetch reads it. */
START_TEST(test_stats_lists_known_queues) {
    redisReply *r;
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 fresh echo 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 later echo 1 delay_ms 60000"));
    th_queue_groups(C, "rawq");
    freeReplyObject(th_cmd(C, "XADD dtq:stream:rawq:p5 * task_type echo payload 1"));
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues fresh")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues later")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues rawq")), 0);
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->elements, 2 * 4 * 2 + 8); /* fresh, later; four totals */
    ck_assert_str_eq(r->element[0]->str, "queue:fresh:depth");
    ck_assert_int_eq(r->element[1]->integer, 1);
    ck_assert_str_eq(r->element[6]->str, "queue:fresh:mode");
    ck_assert_str_eq(r->element[7]->str, "full");
    ck_assert_str_eq(r->element[8]->str, "queue:later:depth");
    ck_assert_int_eq(r->element[9]->integer, 0);
    freeReplyObject(r);
    freeReplyObject(fetch("w1", 10, "rawq"));
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues rawq")), 1);
    /* a listed queue whose stream key holds another type counts 0, and stats still answers */
    freeReplyObject(th_cmd(C, "SADD dtq:queues weird"));
    freeReplyObject(th_cmd(C, "SET dtq:stream:weird:p5 junk"));
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "stats: %s", r->str);
    ck_assert_int_eq(r->elements, 4 * 4 * 2 + 8);
    ck_assert_str_eq(r->element[16]->str, "queue:rawq:depth");
    ck_assert_int_eq(r->element[17]->integer, 0);
    ck_assert_str_eq(r->element[18]->str, "queue:rawq:pending");
    ck_assert_int_eq(r->element[19]->integer, 1);
    ck_assert_str_eq(r->element[24]->str, "queue:weird:depth");
    ck_assert_int_eq(r->element[25]->integer, 0);
    freeReplyObject(r);
}
END_TEST

START_TEST(test_queue_length_counter) {
    redisReply *r;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "HSET dtq:config max_queue_depth 5"));
    for (int round = 0; round < 3; round++) {
        r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 default echo 3 1 2 3 priority %d", round);
        ck_assert_int_eq(r->elements, 3);
        freeReplyObject(r);
        for (int i = 0; i < 2; i++) freeReplyObject(enqueue("echo", "1"));
        th_expect_refused(enqueue("echo", "1"), "QUEUE_FULL queue default holds 5 entries");
        /* a delayed task takes no entry, but a full queue refuses it all the same */
        th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 delay_ms 9"), "QUEUE_FULL");
        ck_assert_int_eq(qlen(), 5);
        ck_assert_int_eq(drain(OK_), 5); /* acknowledged and deleted at finish */
        ck_assert_int_eq(qlen(), 0);
        ck_assert_int_eq(xlen_all(), 0);
    }
    /* a retry leaves the stream and comes back with its promotion */
    freeReplyObject(enqueue("echo", "1"));
    freeReplyObject(enqueue("echo", "1"));
    ck_assert_int_eq(drain(RETRY_), 2);
    ck_assert_int_eq(qlen(), 0);
    r = th_cmd(C, "ZRANGE dtq:retry:schedule 0 -1");
    ck_assert_int_eq(r->elements, 2);
    freeReplyObject(
        th_cmd(C, "FCALL dtq_sched_run_now 0 t %s %s", r->element[0]->str, r->element[1]->str));
    freeReplyObject(r);
    ck_assert_int_eq(qlen(), 2);
    /* a raw producer entry counts from its first delivery; settled entries leave it */
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload 1"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload {bad"));
    ck_assert_int_eq(qlen(), 2);
    r = fetch("w1", 100, "default");
    ck_assert_int_eq(r->element[0]->elements, 3); /* the bad one is dead-lettered at once */
    freeReplyObject(r);
    ck_assert_int_eq(qlen(), 3);
    ck_assert_int_eq(xlen_all(), 3);
    /* queue_clear deletes the waiting entries, the running ones stay */
    freeReplyObject(enqueue("echo", "1"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload 2"));
    r = th_cmd(C, "FCALL dtq_queue_clear 0 t default");
    ck_assert_int_eq(r->element[0]->integer, 2);
    freeReplyObject(r);
    ck_assert_int_eq(qlen(), 3);
    ck_assert_int_eq(xlen_all(), 3);
    /* damage heals from the streams: below zero, not a number, missing */
    const char *damage[] = {"SET dtq:queue:default:length -4", "SET dtq:queue:default:length x",
                            "DEL dtq:queue:default:length", "LPUSH dtq:queue:default:length x"};
    for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) {
        freeReplyObject(th_cmd(C, "DEL dtq:queue:default:length"));
        freeReplyObject(th_cmd(C, damage[i]));
        freeReplyObject(enqueue("echo", "1"));
        ck_assert_int_eq(qlen(), xlen_all());
        ck_assert_int_eq(drain(OK_), 1);
        ck_assert_int_eq(qlen(), 3);
    }
    /* a fetch that finds nothing new sets it to the streams' length */
    freeReplyObject(th_cmd(C, "SET dtq:queue:default:length 99"));
    freeReplyObject(fetch("w1", 10, "default"));
    ck_assert_int_eq(qlen(), 3);
    /* entries trimmed by a raw XTRIM: the next idle fetch heals; the queue takes five again */
    freeReplyObject(th_cmd(C, "XTRIM dtq:stream:default:p5 MAXLEN 0"));
    freeReplyObject(fetch("w1", 10, "default"));
    ck_assert_int_eq(qlen(), 0);
    for (int i = 0; i < 5; i++) freeReplyObject(enqueue("echo", "1"));
    th_expect_refused(enqueue("echo", "1"), "QUEUE_FULL");
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_library");
    TCase *tc = tcase_create("library");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_source_text_refuses_to_load);
    tcase_add_test(tc, test_c_key_names_are_the_functions_keys);
    tcase_add_test(tc, test_config_garbage_ignored);
    tcase_add_test(tc, test_stats_lists_known_queues);
    tcase_add_test(tc, test_queue_length_counter);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
