/* cron.c: periodic task specs: the parser, the field-by-field calendar search, and the
 * mapping of wall-clock times to instants in an IANA zone through glibc (cron.h has the
 * rules). Pure apart from the process's TZ, which it sets and restores around glibc. */
#include "cron.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------ */
/* Parsing                                                                               */
/* ------------------------------------------------------------------------------------ */

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

static const struct cron_field {
    const char *name;
    int lo, hi;
} cron_fields[F_COUNT] = {
    {"second", 0, 59},       {"minute", 0, 59}, {"hour", 0, 23},
    {"day-of-month", 1, 31}, {"month", 1, 12},  {"day-of-week", 0, 7},
};

static const char *const cron_months[12] = {"jan", "feb", "mar", "apr", "may", "jun",
                                            "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const cron_days[7] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static void cron_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void cron_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    if (!err || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Where a field's error is reported: "field 2 (hour): ". */
typedef struct cron_where {
    int pos; /* 1-based position in the spec */
    int f;   /* F_* */
    char *err;
    size_t errlen;
} cron_where;

#define CRON_ECHO 32 /* bytes of the user's text quoted in a message */

static void field_err(const cron_where *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void field_err(const cron_where *w, const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cron_err(w->err, w->errlen, "field %d (%s): %s", w->pos, cron_fields[w->f].name, msg);
}

/* One value at s[*i..]: digits, or a three-letter name in month and day-of-week. */
static int parse_value(const cron_where *w, const char *s, size_t len, size_t *i, int *out) {
    size_t start = *i, n = 0;
    const struct cron_field *fd = &cron_fields[w->f];
    if (*i < len && isdigit((unsigned char)s[*i])) {
        long v = 0;
        while (*i < len && isdigit((unsigned char)s[*i])) {
            if (v < 100000) v = v * 10 + (s[*i] - '0');
            (*i)++;
        }
        if (v < fd->lo || v > fd->hi) {
            field_err(w, "%.*s is out of range %d-%d",
                      (int)(*i - start > CRON_ECHO ? CRON_ECHO : *i - start), s + start, fd->lo,
                      fd->hi);
            return -1;
        }
        *out = (int)v;
        return 0;
    }
    while (*i < len && isalpha((unsigned char)s[*i])) (*i)++, n++;
    if (n == 3 && (w->f == F_MON || w->f == F_DOW)) {
        const char *const *names = w->f == F_MON ? cron_months : cron_days;
        int count = w->f == F_MON ? 12 : 7;
        for (int k = 0; k < count; k++)
            if (strncasecmp(s + start, names[k], 3) == 0) {
                *out = w->f == F_MON ? k + 1 : k;
                return 0;
            }
    }
    if (n == 0) {
        if (start < len)
            field_err(w, "unexpected '%c' in '%.*s'", s[start],
                      (int)(len > CRON_ECHO ? CRON_ECHO : len), s);
        else
            field_err(w, "a value is missing in '%.*s'", (int)(len > CRON_ECHO ? CRON_ECHO : len),
                      s);
        return -1;
    }
    field_err(w, "'%.*s' is not a %s", (int)(n > CRON_ECHO ? CRON_ECHO : n), s + start,
              w->f == F_MON   ? "month (1-12 or JAN-DEC)"
              : w->f == F_DOW ? "day of the week (0-7 or SUN-SAT)"
                              : "number");
    return -1;
}

/* One list item (s, len): `*`, `a`, `a-b`, each with an optional `/n`, or `a/n`. */
static int parse_item(const cron_where *w, const char *s, size_t len, uint64_t *bits) {
    const struct cron_field *fd = &cron_fields[w->f];
    int a, b, step = 1, size = fd->hi - fd->lo + 1;
    size_t i = 0;
    if (len == 0) {
        field_err(w, "empty list item");
        return -1;
    }
    if (s[0] == '*') {
        a = fd->lo;
        b = fd->hi;
        i = 1;
        if (i < len && s[i] != '/') {
            field_err(w, "unexpected '%c' after '*'", s[i]);
            return -1;
        }
    } else {
        if (parse_value(w, s, len, &i, &a) < 0) return -1;
        b = a;
        if (i < len && s[i] == '-') {
            i++;
            if (parse_value(w, s, len, &i, &b) < 0) return -1;
            /* FRI-SUN: a day-of-week range ending at Sunday ends at 7 */
            if (w->f == F_DOW && b == 0 && a > 0) b = 7;
            if (a > b) {
                field_err(w, "range %d-%d is reversed", a, b);
                return -1;
            }
        } else if (i < len && s[i] == '/') {
            b = fd->hi; /* a/n = a-max/n */
        }
    }
    if (i < len && s[i] == '/') {
        long v = 0;
        size_t start = ++i;
        while (i < len && isdigit((unsigned char)s[i])) {
            if (v < 100000) v = v * 10 + (s[i] - '0');
            i++;
        }
        if (i == start) {
            field_err(w, "a step needs a number after '/'");
            return -1;
        }
        if (v < 1 || v > size) {
            field_err(w, "step %.*s is out of range 1-%d",
                      (int)(i - start > CRON_ECHO ? CRON_ECHO : i - start), s + start, size);
            return -1;
        }
        step = (int)v;
    }
    if (i < len) {
        field_err(w, "unexpected '%c' in '%.*s'", s[i], (int)(len > CRON_ECHO ? CRON_ECHO : len),
                  s);
        return -1;
    }
    for (int v = a; v <= b; v += step) *bits |= 1ULL << v;
    return 0;
}

static int parse_field(const cron_where *w, const char *s, size_t len, uint64_t *bits) {
    size_t start = 0;
    int items = 0;
    *bits = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != ',') continue;
        if (++items > DTQ_CRON_LIST_MAX) {
            field_err(w, "more than %d list items", DTQ_CRON_LIST_MAX);
            return -1;
        }
        if (parse_item(w, s + start, i - start, bits) < 0) return -1;
        start = i + 1;
    }
    if (w->f == F_DOW && (*bits & (1ULL << 7))) *bits = (*bits & ~(1ULL << 7)) | 1ULL;
    return 0;
}

/* `@every`'s duration: whole h, m, s in that order, each at most once. */
static int parse_every(const char *s, size_t len, int64_t *ms, char *err, size_t errlen) {
    static const char units[] = "hms";
    static const int64_t unit_s[] = {3600, 60, 1};
    int64_t total = 0;
    size_t i = 0;
    int next_unit = 0;
    int elen = (int)(len > CRON_ECHO ? CRON_ECHO : len);
    if (len == 0) {
        cron_err(err, errlen, "@every: a duration is missing (e.g. 30s, 5m, 1h30m)");
        return -1;
    }
    while (i < len) {
        int64_t v = 0;
        size_t start = i;
        const char *u;
        while (i < len && isdigit((unsigned char)s[i])) {
            if (v < 100000000000LL) v = v * 10 + (s[i] - '0');
            i++;
        }
        u = i < len ? memchr(units + next_unit, s[i], 3 - (size_t)next_unit) : NULL;
        if (i == start || !u || s[i] == '\0') {
            cron_err(err, errlen,
                     "@every: '%.*s' is not a duration (whole h, m, s in that order, e.g. 1h30m)",
                     elen, s);
            return -1;
        }
        next_unit = (int)(u - units) + 1;
        total += v * unit_s[u - units];
        if (total > DTQ_CRON_EVERY_MAX_MS / 1000) total = DTQ_CRON_EVERY_MAX_MS / 1000 + 1;
        i++;
    }
    if (total < 1) {
        cron_err(err, errlen, "@every: '%.*s' is not a duration of at least 1s", elen, s);
        return -1;
    }
    if (total * 1000 > DTQ_CRON_EVERY_MAX_MS) {
        cron_err(err, errlen, "@every: '%.*s' is longer than 366 days", elen, s);
        return -1;
    }
    *ms = total * 1000;
    return 0;
}

static int is_blank(char ch) {
    return ch == ' ' || ch == '\t';
}

static const struct cron_macro {
    const char *name, *spec;
} cron_macros[] = {
    {"hourly", "0 * * * *"},   {"daily", "0 0 * * *"},   {"midnight", "0 0 * * *"},
    {"weekly", "0 0 * * 0"},   {"monthly", "0 0 1 * *"}, {"yearly", "0 0 1 1 *"},
    {"annually", "0 0 1 1 *"},
};

static int parse_macro(const char *s, size_t len, dtq_cron *out, char *err, size_t errlen) {
    size_t n = 0, i;
    while (n < len && !is_blank(s[n])) n++;
    for (i = n; i < len && is_blank(s[i]); i++) {
    }
    if (n == 6 && strncasecmp(s, "@every", 6) == 0) {
        size_t d = i, e = i;
        while (e < len && !is_blank(s[e])) e++;
        for (i = e; i < len && is_blank(s[i]); i++) {
        }
        if (i < len) {
            cron_err(err, errlen, "@every: unexpected '%.*s' after the duration",
                     (int)(len - i > CRON_ECHO ? CRON_ECHO : len - i), s + i);
            return -1;
        }
        memset(out, 0, sizeof(*out));
        out->every = 1;
        return parse_every(s + d, e - d, &out->every_ms, err, errlen);
    }
    for (size_t k = 0; k < sizeof(cron_macros) / sizeof(cron_macros[0]); k++) {
        if (n - 1 != strlen(cron_macros[k].name) ||
            strncasecmp(s + 1, cron_macros[k].name, n - 1) != 0)
            continue;
        if (i < len) {
            cron_err(err, errlen, "@%s takes no fields, got '%.*s'", cron_macros[k].name,
                     (int)(len - i > CRON_ECHO ? CRON_ECHO : len - i), s + i);
            return -1;
        }
        return dtq_cron_parse(cron_macros[k].spec, out, err, errlen);
    }
    cron_err(err, errlen,
             "unknown '%.*s' (@hourly, @daily, @midnight, @weekly, @monthly, @yearly, "
             "@annually, @every <duration>)",
             (int)(n > CRON_ECHO ? CRON_ECHO : n), s);
    return -1;
}

int dtq_cron_parse(const char *spec, dtq_cron *out, char *err, size_t errlen) {
    const char *tok[F_COUNT + 1];
    size_t toklen[F_COUNT + 1], len, i = 0;
    int ntok = 0, first;
    uint64_t bits[F_COUNT];
    dtq_cron c;
    if (!spec) {
        cron_err(err, errlen, "empty spec");
        return -1;
    }
    len = strnlen(spec, DTQ_CRON_SPEC_MAX + 1);
    if (len > DTQ_CRON_SPEC_MAX) {
        cron_err(err, errlen, "spec is longer than %d bytes", DTQ_CRON_SPEC_MAX);
        return -1;
    }
    while (len > 0 && is_blank(spec[len - 1])) len--;
    while (i < len && is_blank(spec[i])) i++;
    if (i == len) {
        cron_err(err, errlen, "empty spec");
        return -1;
    }
    if (spec[i] == '@') return parse_macro(spec + i, len - i, out, err, errlen);
    while (i < len) {
        size_t start = i;
        while (i < len && !is_blank(spec[i])) i++;
        if (ntok < F_COUNT + 1) {
            tok[ntok] = spec + start;
            toklen[ntok] = i - start;
        }
        ntok++;
        while (i < len && is_blank(spec[i])) i++;
    }
    if (ntok != 5 && ntok != 6) {
        cron_err(err, errlen, "expected 5 or 6 fields, got %d", ntok);
        return -1;
    }
    first = ntok == 6 ? F_SEC : F_MIN;
    bits[F_SEC] = 1; /* five fields: second 0 */
    for (int k = 0; k < ntok; k++) {
        cron_where w = {k + 1, first + k, err, errlen};
        if (parse_field(&w, tok[k], toklen[k], &bits[first + k]) < 0) return -1;
    }
    memset(&c, 0, sizeof(c));
    c.sec = bits[F_SEC];
    c.min = bits[F_MIN];
    c.hour = (uint32_t)bits[F_HOUR];
    c.dom = (uint32_t)bits[F_DOM];
    c.mon = (uint16_t)bits[F_MON];
    c.dow = (uint8_t)bits[F_DOW];
    c.dom_any = c.dom == 0xFFFFFFFEu;
    c.dow_any = c.dow == 0x7F;
    *out = c;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Calendar arithmetic (proleptic Gregorian; days since 1970-01-01)                      */
/* ------------------------------------------------------------------------------------ */

static int64_t days_from_civil(int64_t y, int m, int d) {
    int64_t era, yoe, doy, doe;
    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    int64_t era, doe, yoe, doy, mp;
    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m) {
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) return 29;
    return dim[m - 1];
}

static int64_t floor_div(int64_t a, int64_t b) {
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* The smallest n >= from with bit n set, or -1. */
static int next_bit(uint64_t bits, int from) {
    if (from > 63) return -1;
    bits &= ~0ULL << from;
    return bits ? __builtin_ctzll(bits) : -1;
}

static int day_matches(const dtq_cron *c, int64_t days, int d) {
    int wd = (int)(((days % 7) + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
    int dom = (c->dom >> d) & 1, dow = (c->dow >> wd) & 1;
    if (!c->dom_any && !c->dow_any) return dom || dow;
    return dom && dow;
}

/* The first wall time (local seconds: a wall clock read as if it were UTC) at or after
 * `from` that the spec matches, searching field by field up to the end of year ylimit.
 * 0 and *out, or -1. */
static int next_match(const dtq_cron *c, int64_t from, int64_t ylimit, int64_t *out) {
    int64_t y, days = floor_div(from, 86400), sod = from - days * 86400;
    int mo, d, h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60), v;
    civil_from_days(days, &y, &mo, &d);
    for (;;) {
        /* carry what the steps below pushed past a field's top */
        if (s > 59) s = 0, mi++;
        if (mi > 59) mi = 0, h++;
        if (h > 23) h = 0, d++;
        if (mo <= 12 && d > days_in_month(y, mo)) d = 1, mo++;
        if (mo > 12) mo = 1, y++;
        if (y > ylimit) return -1;
        if ((v = next_bit(c->mon, mo)) != mo) {
            if (v < 0)
                mo = 13;
            else
                mo = v;
            d = 1, h = mi = s = 0;
            continue;
        }
        days = days_from_civil(y, mo, d);
        if (!day_matches(c, days, d)) {
            d++, h = mi = s = 0;
            continue;
        }
        if ((v = next_bit(c->hour, h)) != h) {
            if (v < 0)
                h = 24;
            else
                h = v;
            mi = s = 0;
            continue;
        }
        if ((v = next_bit(c->min, mi)) != mi) {
            if (v < 0)
                mi = 60;
            else
                mi = v;
            s = 0;
            continue;
        }
        if ((v = next_bit(c->sec, s)) != s) {
            s = v < 0 ? 60 : v;
            continue;
        }
        *out = days * 86400 + h * 3600 + mi * 60 + s;
        return 0;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Zones: UTC offsets from glibc, cached as intervals of constant offset                 */
/* ------------------------------------------------------------------------------------ */

/* glibc answers for one zone while TZ names it; an interval [lo, hi) of instants whose
 * offset is known to be off is kept, a few per zone, so a call whose instants fall in
 * known intervals asks glibc nothing. An interval is learned by probing every
 * CRON_PROBE_S seconds up to CRON_LEARN_S each way and bisecting a change to the
 * second: zones do not change their offset twice within 12 hours. */
#define CRON_ZONES 8
#define CRON_SPANS 4
#define CRON_PROBE_S (12 * 3600)
#define CRON_LEARN_S (183LL * 86400)

typedef struct cron_span {
    int64_t lo, hi; /* [lo, hi); hi == lo: unused */
    long off;
    uint64_t used;
} cron_span;

typedef struct cron_zone {
    char name[DTQ_CRON_ZONE_MAX + 1]; /* "" = free slot */
    cron_span spans[CRON_SPANS];
    uint64_t used;
} cron_zone;

static cron_zone cron_zones[CRON_ZONES];
static uint64_t cron_clock;

/* One dtq_cron_next call's view of its zone. */
typedef struct cron_ctx {
    cron_zone *z; /* NULL: UTC, offset 0 */
    int switched; /* TZ names z for now; restore it at the end */
    int had_tz;
    char *saved; /* the previous TZ (saved_buf or heap) */
    char saved_buf[128];
    int failed; /* glibc could not convert an instant */
} cron_ctx;

static void ctx_switch(cron_ctx *x) {
    char tz[DTQ_CRON_ZONE_MAX + 2];
    const char *old = getenv("TZ");
    x->had_tz = old != NULL;
    if (old) {
        size_t n = strlen(old);
        x->saved = n < sizeof(x->saved_buf) ? x->saved_buf : malloc(n + 1);
        if (!x->saved) abort();
        memcpy(x->saved, old, n + 1);
    }
    snprintf(tz, sizeof(tz), ":%s", x->z->name);
    setenv("TZ", tz, 1);
    tzset();
    x->switched = 1;
}

static void ctx_end(cron_ctx *x) {
    if (!x->switched) return;
    if (x->had_tz) {
        setenv("TZ", x->saved, 1);
        if (x->saved != x->saved_buf) free(x->saved);
    } else {
        unsetenv("TZ");
    }
    tzset();
    x->switched = 0;
}

/* glibc's UTC offset at t (TZ already names the zone). */
static long glibc_off(cron_ctx *x, int64_t t, int *ok) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm)) {
        *ok = 0;
        x->failed = 1;
        return 0;
    }
    return tm.tm_gmtoff;
}

/* Between a and b = a + n (one of them with offset off, the other not), the first instant
 * at or after which the offset is what b's is. */
static int64_t bisect_change(cron_ctx *x, int64_t a, int64_t b, long off, int *ok) {
    int a_is_off = glibc_off(x, a, ok) == off;
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if ((glibc_off(x, mid, ok) == off) == a_is_off)
            a = mid;
        else
            b = mid;
    }
    return b;
}

static long learn_span(cron_ctx *x, int64_t t) {
    cron_zone *z = x->z;
    cron_span *sp = &z->spans[0];
    int ok = 1;
    long off;
    int64_t lo = t - CRON_LEARN_S, hi = t + CRON_LEARN_S;
    if (!x->switched) ctx_switch(x);
    off = glibc_off(x, t, &ok);
    for (int64_t p = t + CRON_PROBE_S; ok && p <= t + CRON_LEARN_S; p += CRON_PROBE_S)
        if (glibc_off(x, p, &ok) != off) {
            hi = bisect_change(x, p - CRON_PROBE_S, p, off, &ok);
            break;
        }
    for (int64_t p = t - CRON_PROBE_S; ok && p >= t - CRON_LEARN_S; p -= CRON_PROBE_S)
        if (glibc_off(x, p, &ok) != off) {
            lo = bisect_change(x, p, p + CRON_PROBE_S, off, &ok);
            break;
        }
    if (!ok) return 0;
    for (int k = 1; k < CRON_SPANS; k++)
        if (z->spans[k].used < sp->used) sp = &z->spans[k];
    sp->lo = lo;
    sp->hi = hi;
    sp->off = off;
    sp->used = ++cron_clock;
    return off;
}

static long off_at(cron_ctx *x, int64_t t) {
    if (!x->z) return 0;
    for (int k = 0; k < CRON_SPANS; k++) {
        cron_span *sp = &x->z->spans[k];
        if (t >= sp->lo && t < sp->hi) {
            sp->used = ++cron_clock;
            return sp->off;
        }
    }
    return learn_span(x, t);
}

/* The first instant at which the clock reads wall time w or later: w itself when it
 * exists once, its first occurrence when twice, the transition ending a gap it is in.
 * Candidates are verified by converting back (t + offset(t) == w). */
static int resolve(cron_ctx *x, int64_t w, int64_t *out) {
    long oa = off_at(x, w - 86400), ob = off_at(x, w + 86400);
    int64_t cand[4] = {w - oa, w - ob, 0, 0}, best = INT64_MAX;
    cand[2] = w - off_at(x, cand[0]);
    cand[3] = w - off_at(x, cand[1]);
    for (int k = 0; k < 4; k++)
        if (cand[k] + off_at(x, cand[k]) == w && cand[k] < best) best = cand[k];
    if (x->failed) return -1;
    if (best != INT64_MAX) {
        *out = best;
        return 0;
    }
    if (oa < ob) { /* a gap: the wall clock jumps over w between w - ob and w - oa */
        int64_t a = w - ob, b = w - oa;
        if (a + off_at(x, a) >= w || b + off_at(x, b) < w) return -1;
        while (b - a > 1) {
            int64_t mid = a + (b - a) / 2;
            if (mid + off_at(x, mid) >= w)
                b = mid;
            else
                a = mid;
        }
        *out = b;
        return x->failed ? -1 : 0;
    }
    return -1;
}

/* A zone slot for tz (a valid name), reusing the least recently used one. */
static cron_zone *zone_slot(const char *tz) {
    cron_zone *z = &cron_zones[0];
    for (int k = 0; k < CRON_ZONES; k++)
        if (strcmp(cron_zones[k].name, tz) == 0) {
            cron_zones[k].used = ++cron_clock;
            return &cron_zones[k];
        }
    if (dtq_cron_zone_valid(tz, NULL, 0) < 0) return NULL;
    for (int k = 1; k < CRON_ZONES; k++)
        if (cron_zones[k].used < z->used) z = &cron_zones[k];
    memset(z, 0, sizeof(*z));
    strcpy(z->name, tz); /* dtq_cron_zone_valid bounded it */
    z->used = ++cron_clock;
    return z;
}

int dtq_cron_zone_valid(const char *tz, char *err, size_t errlen) {
    const char *dir = getenv("TZDIR");
    char path[4200], magic[4];
    struct stat st;
    size_t n;
    int fd, ok;
    if (!tz || !*tz) {
        cron_err(err, errlen, "time zone is empty");
        return -1;
    }
    n = strnlen(tz, DTQ_CRON_ZONE_MAX + 1);
    if (n > DTQ_CRON_ZONE_MAX) {
        cron_err(err, errlen, "time zone is longer than %d bytes", DTQ_CRON_ZONE_MAX);
        return -1;
    }
    if (strcmp(tz, "UTC") == 0) return 0;
    if (tz[0] == '/' || strstr(tz, "..")) {
        cron_err(err, errlen, "time zone '%s' is not a zone name (no leading '/', no '..')", tz);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)tz[i];
        if (!isalnum(ch) && ch != '/' && ch != '_' && ch != '+' && ch != '-' && ch != '.') {
            cron_err(err, errlen, "time zone '%s' has a character a zone name has not", tz);
            return -1;
        }
    }
    if (!dir || !*dir) dir = "/usr/share/zoneinfo";
    snprintf(path, sizeof(path), "%s/%s", dir, tz);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, magic, 4) == 4 &&
         memcmp(magic, "TZif", 4) == 0;
    if (fd >= 0) close(fd);
    if (!ok) {
        cron_err(err, errlen, "unknown time zone '%s' (no zone file %s)", tz, path);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Next fire time                                                                        */
/* ------------------------------------------------------------------------------------ */

#define CRON_AFTER_MAX_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z */

static int next_every(const dtq_cron *c, int64_t anchor_ms, int64_t after_ms, int64_t *next_ms) {
    int64_t d = c->every_ms, k = 1, diff, step, r;
    if (d < 1) return -1;
    if (after_ms >= anchor_ms) {
        if (__builtin_sub_overflow(after_ms, anchor_ms, &diff)) return -1;
        k = diff / d + 1;
    }
    if (__builtin_mul_overflow(k, d, &step) || __builtin_add_overflow(anchor_ms, step, &r))
        return -1;
    *next_ms = r;
    return 0;
}

/* After a wall time w resolved to an instant r <= after (the clock went back between r
 * and after: after is in a repeated hour), the highest wall time the clock showed up to
 * after: the last second before the transition. */
static int64_t wall_before_fallback(cron_ctx *x, int64_t r, int64_t after, int64_t w) {
    long o1 = off_at(x, r);
    int64_t a = r, b = after, m;
    if (off_at(x, b) == o1) return w;
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if (off_at(x, mid) == o1)
            a = mid;
        else
            b = mid;
    }
    m = a + o1; /* the wall time of the transition's last second */
    return m > w ? m : w;
}

int dtq_cron_next(const dtq_cron *c, const char *tz, int64_t anchor_ms, int64_t after_ms,
                  int64_t *next_ms) {
    cron_ctx x;
    int64_t after, m, w, r, y, ylimit;
    int mo, d, rc = -1;
    if (c->every) return next_every(c, anchor_ms, after_ms, next_ms);
    if (!tz || after_ms < 0 || after_ms > CRON_AFTER_MAX_MS) return -1;
    if (!c->sec || !c->min || !c->hour || !c->dom || !c->mon || !c->dow) return -1;
    memset(&x, 0, sizeof(x));
    if (strcmp(tz, "UTC") != 0 && !(x.z = zone_slot(tz))) return -1;
    after = after_ms / 1000; /* fire times are whole seconds: the first one > after */
    m = after + off_at(&x, after);
    civil_from_days(floor_div(m, 86400), &y, &mo, &d);
    ylimit = y + DTQ_CRON_HORIZON_YEARS;
    for (int iter = 0; iter < 8 && !x.failed; iter++) {
        if (next_match(c, m + 1, ylimit, &w) < 0 || resolve(&x, w, &r) < 0) break;
        if (r > after) {
            *next_ms = r * 1000;
            rc = 0;
            break;
        }
        m = wall_before_fallback(&x, r, after, w);
    }
    if (x.failed) rc = -1;
    ctx_end(&x);
    return rc;
}

int dtq_cron_fires(const dtq_cron *c, const char *tz, int64_t now_ms, char *err, size_t errlen) {
    static const char *const month_names[13] = {
        "",     "January", "February",  "March",   "April",    "May",     "June",
        "July", "August",  "September", "October", "November", "December"};
    static const int month_days[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int64_t next;
    int first_day = 0, occurs = 0;
    size_t n;
    if (dtq_cron_next(c, tz, now_ms, now_ms, &next) == 0) return 0;
    /* the usual cause: the days of the month listed exceed every listed month's length
     * (day of the week unrestricted; restricted, it fires on those days as well) */
    for (int d = 1; d <= 31 && !first_day; d++)
        if (c->dom & (1u << d)) first_day = d;
    for (int m = 1; m <= 12; m++)
        if ((c->mon & (1u << m)) && month_days[m] >= first_day) occurs = 1;
    if (c->every || c->dom_any || !c->dow_any || !first_day || occurs) {
        snprintf(err, errlen, "never fires: no fire time in the next %d years",
                 DTQ_CRON_HORIZON_YEARS);
        return -1;
    }
    n = (size_t)snprintf(err, errlen, "never fires: day %d does not occur in", first_day);
    for (int m = 1, k = 0; m <= 12 && n < errlen; m++)
        if (c->mon & (1u << m))
            n += (size_t)snprintf(err + n, errlen - n, "%s %s", k++ ? " or" : "", month_names[m]);
    return -1;
}
