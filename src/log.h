/* log.h: one line per event on stderr, as text or JSON, filtered by level. Control
 * characters are escaped; callers never pass payloads or passwords. */
#ifndef DTQ_LOG_H
#define DTQ_LOG_H

enum dtq_log_level { DTQ_LOG_DEBUG, DTQ_LOG_INFO, DTQ_LOG_WARN, DTQ_LOG_ERROR };
enum dtq_log_format { DTQ_LOG_TEXT, DTQ_LOG_JSON };

void dtq_log_setup(enum dtq_log_level level, enum dtq_log_format format);
int dtq_log_level_from_string(const char *s, enum dtq_log_level *out);
int dtq_log_format_from_string(const char *s, enum dtq_log_format *out);
int dtq_log_enabled(enum dtq_log_level level);
void dtq_log(enum dtq_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Escapes control characters, quotes and backslashes of src into a caller-owned string. */
char *dtq_log_escape(const char *src);

#define dtq_debug(...) dtq_log(DTQ_LOG_DEBUG, __VA_ARGS__)
#define dtq_info(...) dtq_log(DTQ_LOG_INFO, __VA_ARGS__)
#define dtq_warn(...) dtq_log(DTQ_LOG_WARN, __VA_ARGS__)
#define dtq_error(...) dtq_log(DTQ_LOG_ERROR, __VA_ARGS__)

#endif
