/* log.h: one line per event on stderr, as text or JSON, filtered by level. Control
 * characters are escaped; callers never pass payloads or passwords. */
#ifndef DTQ_LOG_H
#define DTQ_LOG_H

#include <stddef.h>

enum dtq_log_level { DTQ_LOG_DEBUG, DTQ_LOG_INFO, DTQ_LOG_WARN, DTQ_LOG_ERROR };
enum dtq_log_format { DTQ_LOG_TEXT, DTQ_LOG_JSON };

void dtq_log_setup(enum dtq_log_level level, enum dtq_log_format format);
int dtq_log_level_from_string(const char *s, enum dtq_log_level *out);
int dtq_log_format_from_string(const char *s, enum dtq_log_format *out);
int dtq_log_enabled(enum dtq_log_level level);
void dtq_log(enum dtq_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Escapes control characters, quotes and backslashes of src into a caller-owned string;
 * a byte that is not part of valid UTF-8 becomes \ufffd. */
char *dtq_log_escape(const char *src);

/* One field of a structured line: a string (`str` not NULL) or an integer (`num`). */
typedef struct dtq_log_field {
    const char *key;
    const char *str;
    long long num;
} dtq_log_field;
static inline const char *dtq_log_nonnull(const char *s) {
    return s ? s : "";
}
#define DTQ_LOG_STR(k, v)                                                                          \
    { (k), dtq_log_nonnull(v), 0 }
#define DTQ_LOG_INT(k, v)                                                                          \
    { (k), NULL, (long long)(v) }

/* A line of fields after the message. json: {"ts", "level", "msg", then the fields in
 * order: strings as JSON strings, integers as numbers}; text: `<ts> <level> <msg>
 * key=value ...`, a value in double quotes (with \" and \\ escaped) when it is empty or
 * holds a blank, a control character, '=', '"' or '\\'. Escaped as dtq_log_escape. */
void dtq_log_fields(enum dtq_log_level level, const char *msg, const dtq_log_field *fields,
                    size_t n);

#define dtq_debug(...) dtq_log(DTQ_LOG_DEBUG, __VA_ARGS__)
#define dtq_info(...) dtq_log(DTQ_LOG_INFO, __VA_ARGS__)
#define dtq_warn(...) dtq_log(DTQ_LOG_WARN, __VA_ARGS__)
#define dtq_error(...) dtq_log(DTQ_LOG_ERROR, __VA_ARGS__)

#endif
