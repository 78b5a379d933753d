/* cron.h: what a periodic task's spec means and when it fires next. Pure: no Redis, no
 * libevent, no logging; the one owner of the spec syntax and of the time-zone rules.
 *
 * Specs (at most DTQ_CRON_SPEC_MAX bytes; fields separated by blanks):
 *   - five cron fields, minute hour day-of-month month day-of-week, or six with a LEADING
 *     seconds field: second minute hour day-of-month month day-of-week. Ranges: second and
 *     minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or
 *     SUN-SAT (0 and 7 are Sunday; names are case-insensitive).
 *     Each field is a list of at most DTQ_CRON_LIST_MAX items `a,b,c` (no empty item),
 *     an item being `*`, `a`, `a-b`, `*` or `a-b` with a step `/n`, or `a/n` (= `a-max/n`,
 *     max being the field's top: 59, 23, 31, 12, 7). A step is 1 up to the field's size
 *     (60, 24, 31, 12, 8). A reversed range (`5-1`) is refused, except in day-of-week
 *     where a range ending at 0 or SUN ends at 7 (`FRI-SUN` = 5-7).
 *     Day-of-month and day-of-week: a field is restricted when it does not cover its whole
 *     range (`*`, `1-31`, `0-6`, `*` with step 1 are unrestricted; `*` with step 2 is
 *     restricted, unlike in Vixie cron where any field starting with `*` is not). When
 *     both are restricted a day matches if EITHER matches (Vixie cron, croniter);
 *     otherwise the restricted one (if any) decides.
 *   - `@hourly` (0 * * * *), `@daily` = `@midnight` (0 0 * * *), `@weekly` (0 0 * * 0),
 *     `@monthly` (0 0 1 * *), `@yearly` = `@annually` (0 0 1 1 *), case-insensitive.
 *   - `@every <duration>`: Go-style whole units h, m, s in that order, each at most once
 *     (`30s`, `5m`, `1h30m`, `90m`), from 1s to 366 days (8784h). No fractions, no ms.
 *
 * Fire times. A cron spec is read as wall-clock times in the task's IANA zone (glibc's
 * zone rules, the TZif files under $TZDIR or /usr/share/zoneinfo). A matching wall time w
 * fires at the first instant at which the zone's clock reads w or later:
 *   - a wall time that does not exist (the gap of a spring-forward day: 02:30 on the US
 *     spring day) fires at the transition instant (03:00 EDT), and all the nonexistent
 *     times of that gap map to that one instant, which fires ONCE;
 *   - a wall time that exists twice (a fall-back day) fires once, at its first
 *     occurrence: a spec matching every minute fires through 01:59 EDT, then at 02:00
 *     EST; the repeated 01:xx EST are not fired again.
 * Fire times are whole seconds. `@every d` is absolute time, no zone involved: it fires
 * at anchor + k*d for k >= 1 (the first run is one period after the anchor).
 *
 * Not thread-safe: dtq_cron_next sets the process's TZ while it asks glibc and restores
 * the previous value (set or unset) before it returns; it keeps a small static cache of
 * each zone's current UTC offset interval, so calls with a zone seen recently do not
 * switch TZ (nor make glibc re-read the zone file) at all; the cache is not refreshed when
 * the zone files change (new tzdata is seen after a restart). Single-threaded callers only
 * (the leader's fire pass, dtqctl). */
#ifndef DTQ_CRON_H
#define DTQ_CRON_H

#include <stddef.h>
#include <stdint.h>

#define DTQ_CRON_SPEC_MAX 256 /* bytes of a spec */
#define DTQ_CRON_LIST_MAX 64  /* items of one field's list */
#define DTQ_CRON_ZONE_MAX 64  /* bytes of a zone name */
#define DTQ_CRON_EVERY_MAX_MS (366LL * 86400 * 1000)
/* How far dtq_cron_next looks: the calendar years after_ms's year ... +8 (Feb 29 on a
 * given weekday and the like); a spec with no fire time in them never fires. */
#define DTQ_CRON_HORIZON_YEARS 8

/* A parsed spec: a plain value (copy it, no heap, nothing to free). Bit n of a set is
 * value n. */
typedef struct dtq_cron {
    int every;        /* 1: `@every`, every_ms the period; 0: the calendar sets below */
    int64_t every_ms; /* @every's period, ms */
    uint64_t sec;     /* seconds 0-59 (a five-field spec: {0}) */
    uint64_t min;     /* minutes 0-59 */
    uint32_t hour;    /* hours 0-23 */
    uint32_t dom;     /* days of the month 1-31 */
    uint16_t mon;     /* months 1-12 */
    uint8_t dow;      /* days of the week 0-6, 0 = Sunday (7 is stored as 0) */
    uint8_t dom_any;  /* day-of-month covers 1-31: unrestricted */
    uint8_t dow_any;  /* day-of-week covers every day: unrestricted */
} dtq_cron;

/* Parses spec. 0 on success; -1 with a message in err naming the field, e.g.
 * "field 2 (hour): 25 is out of range 0-23", "expected 5 or 6 fields, got 4",
 * "@every: '0s' is not a duration of at least 1s". Fields are numbered from 1 in the
 * spec's own order (in a six-field spec, field 1 is the seconds). */
int dtq_cron_parse(const char *spec, dtq_cron *out, char *err, size_t errlen);

/* 0 when tz names an IANA zone this host knows (a TZif file under $TZDIR or
 * /usr/share/zoneinfo; "UTC" always), -1 with a message otherwise. Refuses "..",
 * a leading '/', empty, over 64 bytes, and characters other than A-Z a-z 0-9 / _ + - . */
int dtq_cron_zone_valid(const char *tz, char *err, size_t errlen);

/* The first fire time strictly after after_ms (epoch ms) in zone tz, in *next_ms (a whole
 * second). anchor_ms is the origin of `@every` schedules (fire times anchor_ms + k*d,
 * k >= 1; tz is then not used); cron specs ignore it. 0 on success; -1 when the spec
 * never fires within the search horizon (DTQ_CRON_HORIZON_YEARS: e.g. "0 0 30 2 *"),
 * when tz is not a valid zone (dtq_cron_zone_valid), when after_ms is outside
 * [0, 9999-12-31] for a cron spec, or when an `@every` time would overflow. Takes
 * microseconds: the calendar is searched field by field, not minute by minute. */
int dtq_cron_next(const dtq_cron *c, const char *tz, int64_t anchor_ms, int64_t after_ms,
                  int64_t *next_ms);

/* 0 when the spec fires after now_ms in zone tz (a valid zone: dtq_cron_zone_valid) within
 * the search horizon; -1 with the reason in err otherwise, e.g. "never fires: day 30 does
 * not occur in February". What refuses a schedule that would wait forever (dtqctl cron add,
 * [cron:NAME] sections). */
int dtq_cron_fires(const dtq_cron *c, const char *tz, int64_t now_ms, char *err, size_t errlen);

#endif
