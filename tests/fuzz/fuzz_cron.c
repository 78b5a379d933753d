/* fuzz_cron: a periodic task's spec through dtq_cron_parse; a spec that parses gets its
 * next fire time from a few instants (around the 2026 DST days too) in UTC,
 * America/New_York, Europe/Berlin and Australia/Lord_Howe (a 30-minute change), and must
 * fire strictly after the instant, and again at the same time when asked from 1 ms before
 * it. Up to 8 bytes after a NUL, if any, are an extra instant (and half of it the @every
 * anchor). */
#include <stdio.h>

#include "cron.h"
#include "fuzz.h"

DTQ_FUZZ_QUIET_LOGS()

static const char *const zones[] = {"UTC", "America/New_York", "Europe/Berlin",
                                    "Australia/Lord_Howe"};

static void check(const dtq_cron *c, const char *tz, int64_t anchor, int64_t after) {
    int64_t next, again;
    if (dtq_cron_next(c, tz, anchor, after, &next) < 0) return;
    if (next <= after) abort();
    if (!c->every && next % 1000 != 0) abort();
    if (dtq_cron_next(c, tz, anchor, next - 1, &again) < 0 || again != next) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *parts[2], err[256];
    dtq_cron c;
    uint64_t bytes = 0;
    int64_t extra;
    static const int64_t afters[] = {
        1767225600000LL, /* 2026-01-01 */
        1772953199500LL, /* New York, 2026-03-08 just before 03:00 EDT */
        1793509200000LL, /* New York, 2026-11-01 01:00 EDT */
        1793512800000LL, /* New York, 2026-11-01 01:00 EST */
        1792890000001LL, /* Berlin, 2026-10-25 02:00 CET */
        1774746000000LL, /* Berlin, 2026-03-29 03:00 CEST */
        1775310000000LL, /* Lord Howe, 2026-04-05 */
    };
    fuzz_split(data, size, parts, 2);
    for (size_t i = 0; i < 8 && parts[1][i]; i++) bytes = bytes << 8 | (unsigned char)parts[1][i];
    extra = (int64_t)bytes;
    if (dtq_cron_parse(parts[0], &c, err, sizeof(err)) == 0) {
        if (!c.every && (!c.sec || !c.min || !c.hour || !c.dom || !c.mon || !c.dow)) abort();
        if (c.every && (c.every_ms < 1000 || c.every_ms > DTQ_CRON_EVERY_MAX_MS)) abort();
        for (size_t z = 0; z < sizeof(zones) / sizeof(zones[0]); z++) {
            for (size_t i = 0; i < sizeof(afters) / sizeof(afters[0]); i++)
                check(&c, zones[z], afters[0], afters[i]);
            if (parts[1][0]) check(&c, zones[z], extra / 2, extra);
        }
    } else if (!err[0]) {
        abort(); /* a refusal says why */
    }
    free(parts[0]);
    free(parts[1]);
    return 0;
}
