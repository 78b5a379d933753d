/* log.c: the single logger. The level and format are process-wide settings chosen at
 * start (and on reload); they are the only file-scope state and are not mutated from
 * callbacks other than the reload. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static enum dtq_log_level log_level = DTQ_LOG_INFO;
static enum dtq_log_format log_format = DTQ_LOG_TEXT;

static const char *level_names[] = {"debug", "info", "warn", "error"};

void dtq_log_setup(enum dtq_log_level level, enum dtq_log_format format) {
    log_level = level;
    log_format = format;
}

int dtq_log_level_from_string(const char *s, enum dtq_log_level *out) {
    for (int i = 0; i < 4; i++) {
        if (!strcmp(s, level_names[i])) {
            *out = (enum dtq_log_level)i;
            return DTQ_OK;
        }
    }
    if (!strcmp(s, "warning")) {
        *out = DTQ_LOG_WARN;
        return DTQ_OK;
    }
    return DTQ_ERR;
}

int dtq_log_format_from_string(const char *s, enum dtq_log_format *out) {
    if (!strcmp(s, "text"))
        *out = DTQ_LOG_TEXT;
    else if (!strcmp(s, "json"))
        *out = DTQ_LOG_JSON;
    else
        return DTQ_ERR;
    return DTQ_OK;
}

int dtq_log_enabled(enum dtq_log_level level) {
    return level >= log_level;
}

/* The length of the valid UTF-8 sequence at s (1-4), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s) {
    size_t n, i;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        n = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4;
    else
        return 0;
    for (i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    /* overlong forms, surrogates, and code points above U+10FFFF */
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
        return 0;
    return n;
}

/* Writes src escaped into out (room for 6 bytes per byte of src, plus one), returns the
 * end: quotes, backslashes and control characters escaped, and a byte that does not start
 * a valid UTF-8 sequence replaced by U+FFFD, so that a JSON line stays valid JSON. */
static char *escape_into(char *p, const char *src) {
    for (const unsigned char *s = (const unsigned char *)src; *s;) {
        size_t n = utf8_len(s);
        if (*s == '"' || *s == '\\') {
            *p++ = '\\';
            *p++ = (char)*s;
        } else if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else if (*s < 0x20 || *s == 0x7f) {
            p += sprintf(p, "\\u%04x", *s);
        } else if (n == 0) {
            p += sprintf(p, "\\ufffd");
            s++;
            continue;
        } else {
            memcpy(p, s, n);
            p += n;
            s += n;
            continue;
        }
        s++;
    }
    *p = '\0';
    return p;
}

char *dtq_log_escape(const char *src) {
    char *out = dtq_xmalloc(strlen(src) * 6 + 1);
    escape_into(out, src);
    return out;
}

void dtq_log(enum dtq_log_level level, const char *fmt, ...) {
    char msg[2048], ts[32];
    va_list ap;
    char *esc;
    if (level < log_level) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    esc = dtq_log_escape(msg);
    dtq_format_iso8601(dtq_now_ms(), ts, sizeof(ts));
    if (log_format == DTQ_LOG_JSON)
        fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts, level_names[level],
                esc);
    else
        fprintf(stderr, "%s %-5s %s\n", ts, level_names[level], esc);
    free(esc);
}

/* A text value goes in quotes when it is empty or a reader could not tell where it ends. */
static int needs_quotes(const char *v) {
    if (!*v) return 1;
    for (const unsigned char *s = (const unsigned char *)v; *s; s++)
        if (*s <= ' ' || *s == '=' || *s == '"' || *s == '\\' || *s == 0x7f) return 1;
    return 0;
}

void dtq_log_fields(enum dtq_log_level level, const char *msg, const dtq_log_field *fields,
                    size_t n) {
    char ts[32], *line, *p;
    size_t cap = strlen(msg) * 6 + 128;
    int json = log_format == DTQ_LOG_JSON;
    if (level < log_level) return;
    for (size_t i = 0; i < n; i++)
        cap += strlen(fields[i].key) * 6 + (fields[i].str ? strlen(fields[i].str) * 6 : 0) + 32;
    line = p = dtq_xmalloc(cap);
    dtq_format_iso8601(dtq_now_ms(), ts, sizeof(ts));
    if (json)
        p += sprintf(p, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts, level_names[level]);
    else
        p += sprintf(p, "%s %-5s ", ts, level_names[level]);
    p = escape_into(p, msg);
    if (json) *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        const dtq_log_field *f = &fields[i];
        if (json) {
            *p++ = ',';
            *p++ = '"';
            p = escape_into(p, f->key);
            p += sprintf(p, "\":");
        } else {
            *p++ = ' ';
            p = escape_into(p, f->key);
            *p++ = '=';
        }
        if (!f->str) {
            p += sprintf(p, "%lld", f->num);
        } else if (json || needs_quotes(f->str)) {
            *p++ = '"';
            p = escape_into(p, f->str);
            *p++ = '"';
        } else {
            p = escape_into(p, f->str);
        }
    }
    if (json) *p++ = '}';
    *p++ = '\n';
    fwrite(line, 1, (size_t)(p - line), stderr);
    free(line);
}
