/* check_cron.c: periodic task specs (src/cron.c): the syntax, the errors naming the field,
 * next fire times in UTC, America/New_York and Europe/Berlin across the 2026 DST days,
 * @every, never-firing specs and zone validation. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#include "cron.h"

/* Epoch ms of a UTC calendar time. */
static int64_t utc(int y, int mo, int d, int h, int mi, int s) {
    struct tm tm = {0};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    return (int64_t)timegm(&tm) * 1000;
}

static dtq_cron parse_ok(const char *spec) {
    dtq_cron c;
    char err[256] = "";
    if (dtq_cron_parse(spec, &c, err, sizeof(err)) != 0)
        ck_abort_msg("'%s' did not parse: %s", spec, err);
    return c;
}

static void parse_fails(const char *spec, const char *want) {
    dtq_cron c;
    char err[256] = "";
    ck_assert_msg(dtq_cron_parse(spec, &c, err, sizeof(err)) == -1, "'%s' parsed", spec);
    ck_assert_msg(strstr(err, want) != NULL, "'%s': error '%s' lacks '%s'", spec, err, want);
}

static int64_t next_of(const char *spec, const char *tz, int64_t after) {
    dtq_cron c = parse_ok(spec);
    int64_t n = 0;
    ck_assert_msg(dtq_cron_next(&c, tz, 0, after, &n) == 0, "'%s' in %s never fires", spec, tz);
    ck_assert_int_gt(n, after);
    return n;
}

#define BITS(lo, hi) ((~0ULL >> (63 - (hi))) & (~0ULL << (lo)))

START_TEST(test_parse_fields) {
    dtq_cron c = parse_ok("*/15 9-17 * * MON-FRI");
    ck_assert(!c.every);
    ck_assert_uint_eq(c.sec, 1);
    ck_assert_uint_eq(c.min, 1ULL | 1ULL << 15 | 1ULL << 30 | 1ULL << 45);
    ck_assert_uint_eq(c.hour, BITS(9, 17));
    ck_assert_uint_eq(c.dom, BITS(1, 31));
    ck_assert_uint_eq(c.mon, BITS(1, 12));
    ck_assert_uint_eq(c.dow, BITS(1, 5));
    ck_assert(c.dom_any);
    ck_assert(!c.dow_any);

    c = parse_ok("5,10-20/5,50/4 0 1,15 jan,Jul-sep sun");
    ck_assert_uint_eq(c.min, 1ULL << 5 | 1ULL << 10 | 1ULL << 15 | 1ULL << 20 | 1ULL << 50 |
                                 1ULL << 54 | 1ULL << 58);
    ck_assert_uint_eq(c.dom, 1u << 1 | 1u << 15);
    ck_assert_uint_eq(c.mon, 1u << 1 | 1u << 7 | 1u << 8 | 1u << 9);
    ck_assert_uint_eq(c.dow, 1);
    ck_assert(!c.dom_any && !c.dow_any);

    /* 7 is Sunday, alone, in ranges and in a/n (a-7/n); FRI-SUN is 5-7 */
    ck_assert_uint_eq(parse_ok("0 0 * * 7").dow, 1);
    ck_assert_uint_eq(parse_ok("0 0 * * 5-7").dow, 1u | 1u << 5 | 1u << 6);
    ck_assert_uint_eq(parse_ok("0 0 * * fri-SUN").dow, 1u | 1u << 5 | 1u << 6);
    ck_assert_uint_eq(parse_ok("0 0 * * 3/4").dow, 1u | 1u << 3);
    ck_assert_uint_eq(parse_ok("0 0 * * */2").dow, 1u | 1u << 2 | 1u << 4 | 1u << 6);
    ck_assert(parse_ok("0 0 * * 1-7").dow_any);
    ck_assert(parse_ok("0 0 * * 0,1,2,3,4,5,6").dow_any);
    /* full ranges are unrestricted, a step of 2 is not */
    ck_assert(parse_ok("0 0 1-31 * *").dom_any);
    ck_assert(parse_ok("0 0 */1 * *").dom_any);
    ck_assert(!parse_ok("0 0 */2 * *").dom_any);
    ck_assert_uint_eq(parse_ok("0 0 */2 * *").dom, 0xAAAAAAAAu);
    /* names are case-insensitive */
    ck_assert_uint_eq(parse_ok("0 0 * DEC,jan,FeB *").mon, 1u << 12 | 1u << 1 | 1u << 2);
    /* blanks around and between fields */
    ck_assert_uint_eq(parse_ok(" \t0  12\t* * *  ").hour, 1u << 12);
}
END_TEST

START_TEST(test_parse_six_fields) {
    dtq_cron c = parse_ok("*/20 30 2 * * *");
    ck_assert_uint_eq(c.sec, 1ULL | 1ULL << 20 | 1ULL << 40);
    ck_assert_uint_eq(c.min, 1ULL << 30);
    ck_assert_uint_eq(c.hour, 1u << 2);
    c = parse_ok("0 0 0 * * 7");
    ck_assert_uint_eq(c.sec, 1);
    ck_assert_uint_eq(c.dow, 1);
    parse_fails("60 * * * * *", "field 1 (second): 60 is out of range 0-59");
    parse_fails("0 0 24 * * *", "field 3 (hour): 24 is out of range 0-23");
}
END_TEST

START_TEST(test_parse_macros) {
    struct {
        const char *macro, *same;
    } eq[] = {
        {"@hourly", "0 * * * *"},   {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
        {"@weekly", "0 0 * * 0"},   {"@monthly", "0 0 1 * *"}, {"@yearly", "0 0 1 1 *"},
        {"@annually", "0 0 1 1 *"}, {"@DAILY", "0 0 * * *"},   {" @hourly ", "0 * * * *"},
    };
    for (size_t i = 0; i < sizeof(eq) / sizeof(eq[0]); i++) {
        dtq_cron a = parse_ok(eq[i].macro), b = parse_ok(eq[i].same);
        ck_assert_msg(memcmp(&a, &b, sizeof(a)) == 0, "%s", eq[i].macro);
    }
    ck_assert_int_eq(parse_ok("@every 30s").every_ms, 30000);
    ck_assert_int_eq(parse_ok("@every 5m").every_ms, 300000);
    ck_assert_int_eq(parse_ok("@every 1h30m").every_ms, 5400000);
    ck_assert_int_eq(parse_ok("@every 1h1m1s").every_ms, 3661000);
    ck_assert_int_eq(parse_ok("@every 90m").every_ms, 5400000);
    ck_assert_int_eq(parse_ok("@every 8784h").every_ms, 366LL * 86400 * 1000);
    ck_assert(parse_ok("@every 1s").every);
    parse_fails("@every 0s", "@every: '0s' is not a duration of at least 1s");
    parse_fails("@every 0h0m", "at least 1s");
    parse_fails("@every 8785h", "longer than 366 days");
    parse_fails("@every 999999999999999h", "longer than 366 days");
    parse_fails("@every 500ms", "'500ms' is not a duration");
    parse_fails("@every 30m1h", "not a duration");
    parse_fails("@every 1.5h", "not a duration");
    parse_fails("@every 5", "not a duration");
    parse_fails("@every h", "not a duration");
    parse_fails("@every", "a duration is missing");
    parse_fails("@every 5m 2", "unexpected '2' after the duration");
    parse_fails("@daily 0", "@daily takes no fields");
    parse_fails("@reboot", "unknown '@reboot'");
}
END_TEST

START_TEST(test_parse_errors) {
    char big[400];
    parse_fails("0 25 * * *", "field 2 (hour): 25 is out of range 0-23");
    parse_fails("* * * *", "expected 5 or 6 fields, got 4");
    parse_fails("* * * * * * *", "expected 5 or 6 fields, got 7");
    parse_fails("", "empty spec");
    parse_fails("   ", "empty spec");
    parse_fails("60 * * * *", "field 1 (minute): 60 is out of range 0-59");
    parse_fails("* * 0 * *", "field 3 (day-of-month): 0 is out of range 1-31");
    parse_fails("* * 32 * *", "field 3 (day-of-month): 32 is out of range 1-31");
    parse_fails("* * * 13 *", "field 4 (month): 13 is out of range 1-12");
    parse_fails("* * * 0 *", "field 4 (month): 0 is out of range 1-12");
    parse_fails("* * * * 8", "field 5 (day-of-week): 8 is out of range 0-7");
    parse_fails("* * * foo *", "field 4 (month): 'foo' is not a month");
    parse_fails("* * * * moon", "field 5 (day-of-week): 'moon' is not a day of the week");
    parse_fails("* * * * jan", "field 5 (day-of-week): 'jan' is not a day of the week");
    parse_fails("* mon * * *", "field 2 (hour): 'mon' is not a number");
    parse_fails("*/0 * * * *", "field 1 (minute): step 0 is out of range 1-60");
    parse_fails("*/61 * * * *", "step 61 is out of range 1-60");
    parse_fails("* */25 * * *", "field 2 (hour): step 25 is out of range 1-24");
    parse_fails("5-1 * * * *", "field 1 (minute): range 5-1 is reversed");
    parse_fails("* * * dec-jan *", "field 4 (month): range 12-1 is reversed");
    parse_fails("1,,2 * * * *", "field 1 (minute): empty list item");
    parse_fails("1, * * * *", "empty list item");
    parse_fails(",1 * * * *", "empty list item");
    parse_fails("1x * * * *", "field 1 (minute): unexpected 'x'");
    parse_fails("*x * * * *", "unexpected 'x' after '*'");
    parse_fails("1-2-3 * * * *", "unexpected '-'");
    parse_fails("1/2/3 * * * *", "unexpected '/'");
    parse_fails("*/ * * * *", "a step needs a number");
    parse_fails("1- * * * *", "a value is missing");
    parse_fails("-1 * * * *", "unexpected '-'");
    parse_fails("? * * * *", "unexpected '?'");
    parse_fails("0 0 L * *", "field 3 (day-of-month): 'L' is not a number");
    parse_fails("0 0 * * 5#2", "unexpected '#'");
    parse_fails("100000000000000000000 * * * *", "out of range 0-59");
    ck_assert_uint_eq(parse_ok("0000000000000000000007 * * * *").min, 1ULL << 7);
    memset(big, 0, sizeof(big));
    for (int i = 0; i < 65; i++) memcpy(big + i * 2, "1,", 2);
    memcpy(big + 129, " * * * *", 8);
    parse_fails(big, "field 1 (minute): more than 64 list items");
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "* * * * *", 9);
    parse_fails(big, "longer than 256 bytes");
    ck_assert_int_eq(dtq_cron_parse(NULL, &(dtq_cron){0}, NULL, 0), -1);
}
END_TEST

START_TEST(test_next_utc) {
    int64_t t = utc(2026, 1, 1, 0, 0, 0); /* a Thursday */
    ck_assert_int_eq(next_of("* * * * *", "UTC", t), utc(2026, 1, 1, 0, 1, 0));
    ck_assert_int_eq(next_of("* * * * *", "UTC", t - 1), t);
    ck_assert_int_eq(next_of("* * * * *", "UTC", t + 500), utc(2026, 1, 1, 0, 1, 0));
    ck_assert_int_eq(next_of("*/10 * * * * *", "UTC", t + 500), t + 10000);
    ck_assert_int_eq(next_of("0 0 * * 7", "UTC", t), utc(2026, 1, 4, 0, 0, 0));
    ck_assert_int_eq(next_of("0 0 * * sun", "UTC", t), utc(2026, 1, 4, 0, 0, 0));
    ck_assert_int_eq(next_of("*/15 9-17 * * mon-fri", "UTC", utc(2026, 1, 2, 17, 45, 0)),
                     utc(2026, 1, 5, 9, 0, 0));
    /* both day fields restricted: either matches (Friday 2nd before the 13th) */
    ck_assert_int_eq(next_of("0 0 13 * 5", "UTC", t), utc(2026, 1, 2, 0, 0, 0));
    ck_assert_int_eq(next_of("0 0 13 * 5", "UTC", utc(2026, 1, 9, 0, 0, 0)),
                     utc(2026, 1, 13, 0, 0, 0));
    /* day-of-month unrestricted: day-of-week alone decides */
    ck_assert_int_eq(next_of("0 0 * * 5", "UTC", utc(2026, 1, 9, 0, 0, 0)),
                     utc(2026, 1, 16, 0, 0, 0));
    ck_assert_int_eq(next_of("0 0 */2 * 5", "UTC", utc(2026, 1, 1, 12, 0, 0)),
                     utc(2026, 1, 2, 0, 0, 0));
    ck_assert_int_eq(next_of("@yearly", "UTC", t), utc(2027, 1, 1, 0, 0, 0));
    ck_assert_int_eq(next_of("@monthly", "UTC", t), utc(2026, 2, 1, 0, 0, 0));
    ck_assert_int_eq(next_of("@weekly", "UTC", t), utc(2026, 1, 4, 0, 0, 0));
    ck_assert_int_eq(next_of("@hourly", "UTC", t), utc(2026, 1, 1, 1, 0, 0));
    ck_assert_int_eq(next_of("59 23 31 12 *", "UTC", t), utc(2026, 12, 31, 23, 59, 0));
    ck_assert_int_eq(next_of("0 0 29 2 *", "UTC", t), utc(2028, 2, 29, 0, 0, 0));
    /* the longest gap: no Feb 29 in 2100 */
    ck_assert_int_eq(next_of("0 0 29 2 *", "UTC", utc(2096, 3, 1, 0, 0, 0)),
                     utc(2104, 2, 29, 0, 0, 0));
    ck_assert_int_eq(next_of("0 0 31 * *", "UTC", utc(2026, 1, 31, 0, 0, 0)),
                     utc(2026, 3, 31, 0, 0, 0));
    ck_assert_int_eq(next_of("30 59 23 31 12 *", "UTC", utc(2026, 12, 31, 23, 59, 30)),
                     utc(2027, 12, 31, 23, 59, 30));
}
END_TEST

START_TEST(test_never_fires) {
    const char *never[] = {"0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"};
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
        dtq_cron c = parse_ok(never[i]);
        int64_t n = 42;
        ck_assert_int_eq(dtq_cron_next(&c, "UTC", 0, utc(2026, 1, 1, 0, 0, 0), &n), -1);
        ck_assert_int_eq(dtq_cron_next(&c, "Europe/Berlin", 0, utc(2026, 1, 1, 0, 0, 0), &n), -1);
        ck_assert_int_eq(n, 42);
    }
    /* but with a day of the week too, either day matches */
    ck_assert_int_eq(next_of("0 0 30 2 mon", "UTC", utc(2026, 1, 1, 0, 0, 0)),
                     utc(2026, 2, 2, 0, 0, 0));
    /* out of the instants it takes, and an unknown zone */
    {
        dtq_cron c = parse_ok("* * * * *");
        int64_t n;
        ck_assert_int_eq(dtq_cron_next(&c, "UTC", 0, -1, &n), -1);
        ck_assert_int_eq(dtq_cron_next(&c, "Mars/Olympus", 0, 0, &n), -1);
        ck_assert_int_eq(dtq_cron_next(&c, "UTC", 0, 253402300799999LL, &n), 0);
        ck_assert_int_eq(n, 253402300800000LL);
    }
}
END_TEST

/* New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z). */
START_TEST(test_new_york_spring) {
    const char *ny = "America/New_York";
    int64_t jump = utc(2026, 3, 8, 7, 0, 0);
    /* 02:30 does not exist: 03:00 EDT, once; then 02:30 EDT the next day */
    ck_assert_int_eq(next_of("30 2 * * *", ny, utc(2026, 3, 8, 5, 0, 0)), jump);
    ck_assert_int_eq(next_of("30 2 * * *", ny, jump), utc(2026, 3, 9, 6, 30, 0));
    ck_assert_int_eq(next_of("30 2 * * *", ny, utc(2026, 3, 7, 12, 0, 0)), jump);
    /* every nonexistent time of the gap maps to that one instant, fired once */
    ck_assert_int_eq(next_of("*/10 2 * * *", ny, utc(2026, 3, 8, 6, 59, 59)), jump);
    ck_assert_int_eq(next_of("*/10 2 * * *", ny, jump), utc(2026, 3, 9, 6, 0, 0));
    ck_assert_int_eq(next_of("0,30 2,3 * * *", ny, utc(2026, 3, 8, 6, 0, 0)), jump);
    ck_assert_int_eq(next_of("0,30 2,3 * * *", ny, jump), utc(2026, 3, 8, 7, 30, 0));
    ck_assert_int_eq(next_of("* * * * *", ny, utc(2026, 3, 8, 6, 59, 0)), jump);
    ck_assert_int_eq(next_of("* * * * *", ny, jump), jump + 60000);
    ck_assert_int_eq(next_of("15 30 2 * * *", ny, utc(2026, 3, 8, 6, 0, 0)), jump);
    /* 09:00 is 14:00Z before, 13:00Z after */
    ck_assert_int_eq(next_of("0 9 * * *", ny, utc(2026, 3, 7, 0, 0, 0)), utc(2026, 3, 7, 14, 0, 0));
    ck_assert_int_eq(next_of("0 9 * * *", ny, utc(2026, 3, 7, 14, 0, 0)),
                     utc(2026, 3, 8, 13, 0, 0));
    ck_assert_int_eq(next_of("0 9 * * *", ny, utc(2026, 3, 8, 13, 0, 0)),
                     utc(2026, 3, 9, 13, 0, 0));
}
END_TEST

/* New York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z); 01:xx happens twice. */
START_TEST(test_new_york_fall) {
    const char *ny = "America/New_York";
    int64_t t = utc(2026, 11, 1, 4, 59, 0), want[] = {
                                                utc(2026, 11, 1, 5, 0, 0),  /* 01:00 EDT */
                                                utc(2026, 11, 1, 5, 30, 0), /* 01:30 EDT */
                                                utc(2026, 11, 1, 7, 0, 0),  /* 02:00 EST */
                                                utc(2026, 11, 1, 7, 30, 0), /* 02:30 EST */
                                            };
    for (int i = 0; i < 4; i++) {
        t = next_of("*/30 * * * *", ny, t);
        ck_assert_int_eq(t, want[i]);
    }
    /* 01:30 fires once, at its first occurrence */
    ck_assert_int_eq(next_of("30 1 * * *", ny, utc(2026, 10, 31, 16, 0, 0)),
                     utc(2026, 11, 1, 5, 30, 0));
    ck_assert_int_eq(next_of("30 1 * * *", ny, utc(2026, 11, 1, 5, 30, 0)),
                     utc(2026, 11, 2, 6, 30, 0));
    /* asked from inside the repeated hour (01:10 EST): nothing until 02:00 EST */
    ck_assert_int_eq(next_of("* * * * *", ny, utc(2026, 11, 1, 6, 10, 0)),
                     utc(2026, 11, 1, 7, 0, 0));
    ck_assert_int_eq(next_of("* * * * * *", ny, utc(2026, 11, 1, 6, 59, 59)),
                     utc(2026, 11, 1, 7, 0, 0));
    ck_assert_int_eq(next_of("* * * * *", ny, utc(2026, 11, 1, 5, 58, 0)),
                     utc(2026, 11, 1, 5, 59, 0));
    ck_assert_int_eq(next_of("* * * * *", ny, utc(2026, 11, 1, 5, 59, 0)),
                     utc(2026, 11, 1, 7, 0, 0));
    ck_assert_int_eq(next_of("30 1 * * *", ny, utc(2026, 11, 1, 6, 10, 0)),
                     utc(2026, 11, 2, 6, 30, 0));
    /* 09:00 is 14:00Z after the change again */
    ck_assert_int_eq(next_of("0 9 * * *", ny, utc(2026, 10, 31, 14, 0, 0)),
                     utc(2026, 11, 1, 14, 0, 0));
}
END_TEST

/* Berlin: 2026-03-29 02:00 CET -> 03:00 CEST, 2026-10-25 03:00 CEST -> 02:00 CET (both
 * at 01:00Z). */
START_TEST(test_berlin) {
    const char *be = "Europe/Berlin";
    ck_assert_int_eq(next_of("30 2 * * *", be, utc(2026, 3, 28, 12, 0, 0)),
                     utc(2026, 3, 29, 1, 0, 0));
    ck_assert_int_eq(next_of("30 2 * * *", be, utc(2026, 3, 29, 1, 0, 0)),
                     utc(2026, 3, 30, 0, 30, 0));
    ck_assert_int_eq(next_of("0 9 * * *", be, utc(2026, 3, 28, 12, 0, 0)),
                     utc(2026, 3, 29, 7, 0, 0));
    ck_assert_int_eq(next_of("0 9 * * *", be, utc(2026, 3, 27, 12, 0, 0)),
                     utc(2026, 3, 28, 8, 0, 0));
    ck_assert_int_eq(next_of("30 2 * * *", be, utc(2026, 10, 24, 12, 0, 0)),
                     utc(2026, 10, 25, 0, 30, 0));
    ck_assert_int_eq(next_of("30 2 * * *", be, utc(2026, 10, 25, 0, 30, 0)),
                     utc(2026, 10, 26, 1, 30, 0));
    ck_assert_int_eq(next_of("*/30 * * * *", be, utc(2026, 10, 25, 0, 30, 0)),
                     utc(2026, 10, 25, 2, 0, 0)); /* 03:00 CET; 02:xx CET skipped */
    ck_assert_int_eq(next_of("0 9 * * *", be, utc(2026, 10, 25, 0, 0, 0)),
                     utc(2026, 10, 25, 8, 0, 0));
}
END_TEST

START_TEST(test_every) {
    dtq_cron c = parse_ok("@every 90s");
    int64_t a = 1000000, n;
    ck_assert_int_eq(dtq_cron_next(&c, "UTC", a, a, &n), 0);
    ck_assert_int_eq(n, a + 90000);
    ck_assert_int_eq(dtq_cron_next(&c, "UTC", a, a + 89999, &n), 0);
    ck_assert_int_eq(n, a + 90000);
    ck_assert_int_eq(dtq_cron_next(&c, "UTC", a, a + 90000, &n), 0);
    ck_assert_int_eq(n, a + 180000);
    ck_assert_int_eq(dtq_cron_next(&c, "America/New_York", a, a + 90000 * 1000 + 1, &n), 0);
    ck_assert_int_eq(n, a + 90000 * 1001);
    /* before the anchor: the first fire is one period after it */
    ck_assert_int_eq(dtq_cron_next(&c, "UTC", a, 0, &n), 0);
    ck_assert_int_eq(n, a + 90000);
    ck_assert_int_eq(dtq_cron_next(&c, "UTC", a, INT64_MIN, &n), 0);
    ck_assert_int_eq(n, a + 90000);
    /* absolute time: no zone is involved, across a DST change too */
    a = utc(2026, 3, 8, 6, 30, 0);
    c = parse_ok("@every 1h");
    ck_assert_int_eq(dtq_cron_next(&c, "America/New_York", a, a, &n), 0);
    ck_assert_int_eq(n, a + 3600000);
    ck_assert_int_eq(dtq_cron_next(&c, "Bogus/Zone", a, a, &n), 0);
    ck_assert_int_eq(dtq_cron_next(&c, "UTC", INT64_MAX - 10, INT64_MAX - 5, &n), -1);
}
END_TEST

START_TEST(test_zone_valid) {
    char err[256];
    ck_assert_int_eq(dtq_cron_zone_valid("UTC", err, sizeof(err)), 0);
    ck_assert_int_eq(dtq_cron_zone_valid("America/New_York", err, sizeof(err)), 0);
    ck_assert_int_eq(dtq_cron_zone_valid("Europe/Berlin", err, sizeof(err)), 0);
    ck_assert_int_eq(dtq_cron_zone_valid("Etc/GMT+5", err, sizeof(err)), 0);
    ck_assert_int_eq(dtq_cron_zone_valid("Mars/Olympus", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown time zone 'Mars/Olympus'"));
    ck_assert_int_eq(dtq_cron_zone_valid("../etc/passwd", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "'..'"));
    ck_assert_int_eq(dtq_cron_zone_valid("America/../../etc/passwd", err, sizeof(err)), -1);
    ck_assert_int_eq(dtq_cron_zone_valid("/etc/localtime", err, sizeof(err)), -1);
    ck_assert_int_eq(dtq_cron_zone_valid("", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
    ck_assert_int_eq(dtq_cron_zone_valid(NULL, err, sizeof(err)), -1);
    ck_assert_int_eq(dtq_cron_zone_valid("America", err, sizeof(err)), -1);  /* a directory */
    ck_assert_int_eq(dtq_cron_zone_valid("zone.tab", err, sizeof(err)), -1); /* not TZif */
    ck_assert_int_eq(dtq_cron_zone_valid("America/New York", err, sizeof(err)), -1);
    ck_assert_int_eq(dtq_cron_zone_valid("America/New_York\n", err, sizeof(err)), -1);
    ck_assert_int_eq(
        dtq_cron_zone_valid("Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                            err, sizeof(err)),
        -1);
    ck_assert_ptr_nonnull(strstr(err, "longer than 64"));
}
END_TEST

/* A spec that never fires is refused with the reason; one that fires rarely is not. */
START_TEST(test_never_fires_refused_with_the_reason) {
    static const struct {
        const char *spec, *why; /* why NULL: fires */
    } cases[] = {
        {"0 0 30 2 *", "never fires: day 30 does not occur in February"},
        {"0 0 31 4,6 *", "never fires: day 31 does not occur in April or June"},
        {"0 0 30,31 2 *", "never fires: day 30 does not occur in February"},
        {"0 0 29 2 *", NULL},   /* leap years */
        {"0 0 30 2 MON", NULL}, /* a weekday listed too: every Monday of February */
        {"0 0 31 * *", NULL},
    };
    int64_t now = 1767225600000; /* 2026-01-01 */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        dtq_cron c;
        char err[256] = "";
        ck_assert_int_eq(dtq_cron_parse(cases[i].spec, &c, err, sizeof(err)), 0);
        if (!cases[i].why) {
            ck_assert_msg(dtq_cron_fires(&c, "UTC", now, err, sizeof(err)) == 0, "%s: %s",
                          cases[i].spec, err);
            continue;
        }
        ck_assert_int_eq(dtq_cron_fires(&c, "UTC", now, err, sizeof(err)), -1);
        ck_assert_str_eq(err, cases[i].why);
    }
}
END_TEST

/* dtq_cron_next puts TZ back as it found it, set or unset. */
START_TEST(test_tz_restored) {
    dtq_cron c = parse_ok("0 9 * * *");
    int64_t n;
    setenv("TZ", "UTC0", 1);
    ck_assert_int_eq(dtq_cron_next(&c, "Asia/Tokyo", 0, utc(2026, 1, 1, 0, 0, 0), &n), 0);
    ck_assert_int_eq(n, utc(2026, 1, 1, 0, 0, 0) + 86400000); /* 09:00 JST = 00:00Z */
    ck_assert_str_eq(getenv("TZ"), "UTC0");
    unsetenv("TZ");
    ck_assert_int_eq(dtq_cron_next(&c, "Europe/Berlin", 0, utc(2026, 1, 1, 0, 0, 0), &n), 0);
    ck_assert_int_eq(n, utc(2026, 1, 1, 8, 0, 0));
    ck_assert_ptr_null(getenv("TZ"));
}
END_TEST

/* Many zones in turn (more than the cache holds) give the same answers as fresh. */
START_TEST(test_zone_cache) {
    const char *zones[] = {"America/New_York", "Europe/Berlin",    "Asia/Tokyo",
                           "Australia/Sydney", "America/Chicago",  "Europe/London",
                           "Asia/Kolkata",     "Pacific/Auckland", "America/Sao_Paulo",
                           "Africa/Cairo",     "Asia/Kathmandu",   "Australia/Lord_Howe"};
    int64_t first[12];
    dtq_cron c = parse_ok("*/7 1-3 * * *");
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 12; i++) {
            int64_t n, after = utc(2026, 3, 29, 0, 0, 0) + i * 3600000LL;
            ck_assert_int_eq(dtq_cron_next(&c, zones[i], 0, after, &n), 0);
            if (round == 0) first[i] = n;
            ck_assert_int_eq(n, first[i]);
        }
    /* Lord Howe moves by 30 minutes on 2026-04-05 (02:00 LHDT -> 01:30 LHST) */
    ck_assert_int_eq(next_of("45 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 13, 0, 0)),
                     utc(2026, 4, 4, 14, 45, 0));
}
END_TEST

/* A next-fire computation is fast: thousands per call budget of a few hundred us. */
START_TEST(test_speed) {
    dtq_cron c = parse_ok("*/5 9-17 * * mon-fri");
    struct timespec t0, t1;
    int64_t n, after = utc(2026, 1, 1, 0, 0, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20000; i++) {
        ck_assert_int_eq(dtq_cron_next(&c, "America/New_York", 0, after, &n), 0);
        after = n;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us =
        ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / 20000;
    ck_assert_msg(us < 200, "%.1f us per next", us);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cron");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_parse_fields);
    tcase_add_test(tc, test_parse_six_fields);
    tcase_add_test(tc, test_parse_macros);
    tcase_add_test(tc, test_parse_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("next");
    tcase_add_test(tc, test_next_utc);
    tcase_add_test(tc, test_never_fires);
    tcase_add_test(tc, test_new_york_spring);
    tcase_add_test(tc, test_new_york_fall);
    tcase_add_test(tc, test_berlin);
    tcase_add_test(tc, test_every);
    tcase_add_test(tc, test_zone_valid);
    tcase_add_test(tc, test_tz_restored);
    tcase_add_test(tc, test_zone_cache);
    tcase_add_test(tc, test_speed);
    tcase_add_test(tc, test_never_fires_refused_with_the_reason);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
