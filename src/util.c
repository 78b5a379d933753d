/* util.c: the small helpers every module needs. Allocation failure aborts, because a
 * daemon under OOM should die loudly and let systemd restart it. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <time.h>
#include <uuid/uuid.h>

static void oom(size_t n) {
    fprintf(stderr, "dtq: out of memory allocating %zu bytes\n", n);
    abort();
}

void *dtq_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *dtq_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *dtq_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *dtq_xstrdup(const char *s) {
    return dtq_xstrndup(s, strlen(s));
}

char *dtq_xstrndup(const char *s, size_t n) {
    char *p = dtq_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *dtq_xasprintf(const char *fmt, ...) {
    va_list ap;
    char *out = NULL;
    va_start(ap, fmt);
    if (vasprintf(&out, fmt, ap) < 0) oom(0);
    va_end(ap);
    return out;
}

int64_t dtq_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dtq_monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dtq_uuid4(char out[37]) {
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}

int dtq_valid_name(const char *s, size_t len, size_t max) {
    if (len == 0 || len > max) return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '.' || c == '_' || c == ':' || c == '-')) return 0;
    }
    return 1;
}

int dtq_valid_queue_name(const char *s) {
    return dtq_valid_name(s, strlen(s), DTQ_NAME_MAX);
}

int dtq_valid_task_id(const char *s) {
    return dtq_valid_name(s, strlen(s), DTQ_ID_MAX);
}

int dtq_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out) {
    char *end;
    long long v;
    if (!s || !*s || isspace((unsigned char)*s)) return DTQ_ERR;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || *end != '\0' || v < min || v > max) return DTQ_ERR;
    *out = v;
    return DTQ_OK;
}

int dtq_parse_double(const char *s, double min, double max, double *out) {
    char *end;
    double v;
    if (!s || !*s || isspace((unsigned char)*s)) return DTQ_ERR;
    errno = 0;
    v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v) || v < min || v > max) return DTQ_ERR;
    *out = v;
    return DTQ_OK;
}

char **dtq_split_words(const char *s, char *err, size_t errlen) {
    size_t len = strlen(s), n = 0;
    /* At most one word per two bytes, plus one; a word is never longer than the line. */
    char **v = dtq_xcalloc(len / 2 + 2, sizeof(char *));
    char *word = dtq_xmalloc(len + 1);
    const char *p = s;
    for (;;) {
        size_t w = 0;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        while (*p && *p != ' ' && *p != '\t') {
            if (*p == '\'') {
                const char *open = p++;
                while (*p && *p != '\'') word[w++] = *p++;
                if (!*p) {
                    snprintf(err, errlen, "unterminated single quote (opened at column %zu)",
                             (size_t)(open - s) + 1);
                    goto fail;
                }
                p++;
            } else if (*p == '"') {
                const char *open = p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && (p[1] == '"' || p[1] == '\\' || p[1] == '$' || p[1] == '`'))
                        p++;
                    word[w++] = *p++;
                }
                if (!*p) {
                    snprintf(err, errlen, "unterminated double quote (opened at column %zu)",
                             (size_t)(open - s) + 1);
                    goto fail;
                }
                p++;
            } else if (*p == '\\') {
                if (!p[1]) {
                    snprintf(err, errlen, "a backslash at the end escapes nothing");
                    goto fail;
                }
                word[w++] = p[1];
                p += 2;
            } else {
                word[w++] = *p++;
            }
        }
        v[n++] = dtq_xstrndup(word, w);
    }
    free(word);
    v[n] = NULL;
    return v;
fail:
    free(word);
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    return NULL;
}

int dtq_split_hostport(const char *s, char **host, int *port) {
    const char *hb = s, *he, *colon;
    int64_t p;
    if (*s == '[') {
        hb = s + 1;
        he = strchr(hb, ']');
        if (!he || he == hb || he[1] != ':') return DTQ_ERR;
        colon = he + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || memchr(s, ':', (size_t)(colon - s))) return DTQ_ERR;
        he = colon;
    }
    if (memchr(hb, '[', (size_t)(he - hb)) || memchr(hb, ']', (size_t)(he - hb)) ||
        dtq_parse_int64(colon + 1, 1, 65535, &p) != DTQ_OK)
        return DTQ_ERR;
    *host = dtq_xstrndup(hb, (size_t)(he - hb));
    *port = (int)p;
    return DTQ_OK;
}

int dtq_parse_bool(const char *s, int *out) {
    if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcmp(s, "1") ||
        !strcasecmp(s, "on")) {
        *out = 1;
        return DTQ_OK;
    }
    if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcmp(s, "0") ||
        !strcasecmp(s, "off")) {
        *out = 0;
        return DTQ_OK;
    }
    return DTQ_ERR;
}

void dtq_format_iso8601(int64_t ms, char *out, size_t outlen) {
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

void dtq_argv_init(dtq_argv *a) {
    memset(a, 0, sizeof(*a));
}

void dtq_argv_deinit(dtq_argv *a) {
    for (int i = 0; i < a->argc; i++) free(a->argv[i]);
    free(a->argv);
    free(a->lens);
    memset(a, 0, sizeof(*a));
}

void dtq_argv_add(dtq_argv *a, const char *s, size_t len) {
    if (a->argc == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->argv = dtq_xrealloc(a->argv, sizeof(char *) * (size_t)a->cap);
        a->lens = dtq_xrealloc(a->lens, sizeof(size_t) * (size_t)a->cap);
    }
    a->argv[a->argc] = dtq_xstrndup(s, len);
    a->lens[a->argc] = len;
    a->argc++;
}

void dtq_argv_adds(dtq_argv *a, const char *s) {
    dtq_argv_add(a, s, strlen(s));
}

void dtq_argv_addf(dtq_argv *a, const char *fmt, ...) {
    va_list ap;
    char *out = NULL;
    int n;
    va_start(ap, fmt);
    n = vasprintf(&out, fmt, ap);
    va_end(ap);
    if (n < 0) oom(0);
    dtq_argv_add(a, out, (size_t)n);
    free(out);
}

void dtq_argv_addll(dtq_argv *a, long long v) {
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%lld", v);
    dtq_argv_add(a, buf, (size_t)n);
}

extern char **environ;

void dtq_hide_credentials(void) {
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        fprintf(stderr, "prctl(PR_SET_DUMPABLE): %s\n", strerror(errno));
    /* slot by slot, so a name given twice is moved twice (putenv would find the first) */
    for (char **e = environ; e && *e; e++) {
        char *orig = *e;
        if (strncmp(orig, "DTQ_", 4)) continue;
        *e = dtq_xstrdup(orig); /* lives as long as the process, as environ does */
        explicit_bzero(orig, strlen(orig));
    }
}
