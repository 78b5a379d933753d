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

char *dtq_log_escape(const char *src) {
    size_t n = strlen(src);
    char *out = dtq_xmalloc(n * 6 + 1), *p = out;
    for (const unsigned char *s = (const unsigned char *)src; *s; s++) {
        if (*s == '"' || *s == '\\') {
            *p++ = '\\';
            *p++ = (char)*s;
        } else if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else if (*s < 0x20 || *s == 0x7f) {
            p += sprintf(p, "\\u%04x", *s);
        } else {
            *p++ = (char)*s;
        }
    }
    *p = '\0';
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
