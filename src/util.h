/* util.h: allocation that aborts on failure, clocks, ids, name validation and
 * strict number parsing. Pure helpers: no Redis, no event loop. */
#ifndef DTQ_UTIL_H
#define DTQ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define DTQ_OK 0
#define DTQ_ERR -1
#define DTQ_UNUSED(x) (void)(x)
/* A numeric constant as a string literal (help texts name the bounds they show). */
#define DTQ_STR_(x) #x
#define DTQ_STR(x) DTQ_STR_(x)

#define DTQ_NAME_MAX 128 /* queue and task type names */
#define DTQ_ID_MAX 64    /* task ids */

void *dtq_xmalloc(size_t n);
void *dtq_xcalloc(size_t n, size_t size);
void *dtq_xrealloc(void *p, size_t n);
char *dtq_xstrdup(const char *s);
char *dtq_xstrndup(const char *s, size_t n);
/* Returns a caller-owned formatted string. */
char *dtq_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t dtq_now_ms(void);       /* wall clock, epoch ms (logs and event ts only) */
int64_t dtq_monotonic_ms(void); /* for local timers */

/* Writes a canonical lower-case UUIDv4 (37 bytes with NUL) into out. */
void dtq_uuid4(char out[37]);

/* Name rules of SPEC 12 / SPEC 3: [A-Za-z0-9._:-]{1,max}. */
int dtq_valid_name(const char *s, size_t len, size_t max);
int dtq_valid_queue_name(const char *s);
int dtq_valid_task_id(const char *s);

/* Strict parsers: the whole string must be a number in [min,max]. */
int dtq_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out);
int dtq_parse_double(const char *s, double min, double max, double *out);
int dtq_parse_bool(const char *s, int *out);
/* Splits "host:port", ":port" (host "") or "[IPv6 address]:port" (host without the
 * brackets); port 1-65535. An IPv6 address must be bracketed: "::1:80" is ambiguous. On
 * success *host is caller-owned. */
int dtq_split_hostport(const char *s, char **host, int *port);
/* Splits a command line into words as a POSIX shell would, without expanding anything:
 * blanks separate words; 'single quotes' keep everything literally; "double quotes" keep
 * everything but \" \\ \$ \` (the backslash escapes these four and is literal before
 * anything else); outside quotes a backslash makes the next character literal. "" and ''
 * make an empty word. No globbing, variables or substitutions: $, `, * stay as written.
 * Returns a NULL-terminated caller-owned vector (free each word, then the vector), or
 * NULL with the reason in err (an unterminated quote names the column it opens at). */
char **dtq_split_words(const char *s, char *err, size_t errlen);

/* Formats epoch ms as 2026-11-30T01:02:03.456Z into out (at least 25 bytes). */
void dtq_format_iso8601(int64_t ms, char *out, size_t outlen);

/* A growable array of strings with lengths, for building command argv. */
typedef struct dtq_argv {
    int argc;
    int cap;
    char **argv;
    size_t *lens;
} dtq_argv;

void dtq_argv_init(dtq_argv *a);
void dtq_argv_deinit(dtq_argv *a);
void dtq_argv_add(dtq_argv *a, const char *s, size_t len);
void dtq_argv_adds(dtq_argv *a, const char *s);
void dtq_argv_addf(dtq_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dtq_argv_addll(dtq_argv *a, long long v);

/* Puts the process's credentials out of reach of other processes of its user, its exec
 * children first. The process becomes non-dumpable (PR_SET_DUMPABLE 0: /proc/PID/environ,
 * /mem and ptrace need CAP_SYS_PTRACE; no core dump unless fs.suid_dumpable says so), and
 * the DTQ_* variables (a Redis URL with its password, sentinel_password) move to the heap:
 * their bytes in the initial environment block, which /proc/PID/environ shows whatever libc
 * does with its environ, are zeroed. getenv() still finds them (a SIGHUP reload reads them
 * again). Called first thing in main(). */
void dtq_hide_credentials(void);

#endif
