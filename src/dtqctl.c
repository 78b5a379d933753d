/* dtqctl: the admin and producer CLI. Synchronous; every write is one of the Functions (so
 * dtqctl and redis-cli do exactly the same thing) and every read renders a read Function
 * (docs/reference.md 5.5). The connection is rsync.c's blocking client (TCP, unix socket
 * or TLS; Sentinel; the shared handshake). The [redis] settings come from the daemon's
 * loader (defaults, -c FILE, DTQ_REDIS_*), then -u and -n; key and Function names come
 * from keys.h, as the daemon's do.
 *
 * This file: the options, the configuration, the verb table and the dispatch; the verbs
 * are in ctl_read.c and ctl_write.c (ctl.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "config.h"
#include "ctl.h"
#include "keys.h"
#include "redis_url.h"
#include "scripts.h"
#include "task.h"
#include "tls.h"
#include "util.h"

/* ----------------------------------------------------------------- shared (ctl.h) */

/* --json given: errors are written as JSON too (error_exit). */
static int json_errors;

/* The error `msg` on stderr, then exit with `code`: a line (`dtqctl: msg`, and the hint for
 * a usage error), or under --json one object {"error": msg, "exit": code}. */
static void error_exit(int code, const char *msg) __attribute__((noreturn));

static void error_exit(int code, const char *msg) {
    fflush(stdout); /* what was printed before comes before the error */
    if (json_errors) {
        cJSON *o = cJSON_CreateObject();
        char *out;
        cJSON_AddStringToObject(o, "error", msg);
        cJSON_AddNumberToObject(o, "exit", code);
        out = cJSON_PrintUnformatted(o);
        fprintf(stderr, "%s\n", out);
        free(out);
        cJSON_Delete(o);
    } else {
        fprintf(stderr, "dtqctl: %s\n%s", msg,
                code == CTL_EXIT_USAGE ? "Try 'dtqctl --help'.\n" : "");
    }
    exit(code);
}

int64_t ctl_parse_seconds(const char *option, const char *s, double max_s) {
    char *end;
    double d;
    errno = 0;
    d = strtod(s, &end);
    if (errno || end == s || *end || !(d > 0) || d > max_s)
        ctl_usage_error("%s needs seconds in (0, %.0f], not '%s'", option, max_s, s);
    return (int64_t)(d * 1000.0 + 0.5) > 0 ? (int64_t)(d * 1000.0 + 0.5) : 1;
}

void ctl_usage_error(const char *fmt, ...) {
    va_list ap;
    char msg[2048];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    error_exit(CTL_EXIT_USAGE, msg);
}

void ctl_refused(const char *fmt, ...) {
    va_list ap;
    char msg[2048];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    error_exit(CTL_EXIT_REFUSED, msg);
}

/* "redis at <where> did not answer within N s" on stderr, exit 4. */
static void no_answer(const char *where, int64_t timeout_ms) __attribute__((noreturn));

static void no_answer(const char *where, int64_t timeout_ms) {
    char msg[512];
    snprintf(msg, sizeof(msg), "redis at %s did not answer within %g s", where,
             (double)timeout_ms / 1000.0);
    error_exit(CTL_EXIT_NO_ANSWER, msg);
}

void ctl_link_failed(ctl *x, const char *why) {
    if (dtq_rsync_timed_out(x->conn)) no_answer(dtq_rsync_where(x->conn), x->timeout_ms);
    ctl_refused("redis: %s", why);
}

redisReply *ctl_command(ctl *x, int argc, const char **argv) {
    char why[512];
    redisReply *r = dtq_rsync_command(x->conn, argc, argv, NULL, why, sizeof(why));
    if (!r) ctl_link_failed(x, why);
    return r;
}

redisReply *ctl_try_command(ctl *x, int argc, const char **argv, char *why, size_t whylen) {
    return dtq_rsync_command(x->conn, argc, argv, NULL, why, whylen);
}

void ctl_shared_skipped(const char *what, const char *why) {
    fprintf(stderr, "dtqctl: warning: %s skipped: the shared slot did not answer (%s)\n", what,
            why);
}

redisReply *ctl_read(ctl *x) {
    char why[512];
    redisReply *r = dtq_rsync_read(x->conn, why, sizeof(why));
    if (!r) ctl_refused("redis: %s", why);
    return r;
}

void ctl_print_json(const cJSON *v) {
    char *out = cJSON_PrintUnformatted(v);
    printf("%s\n", out);
    free(out);
}

/* ----------------------------------------------------------------- the verb table */

static ctl_run_fn ctl_acl;

#define ANY -1
/* Listed in --help in this order; the rows of one name next to each other. */
/* clang-format off */
static const ctl_verb verbs[] = {
    {.name = "enqueue", .args = "<queue> <task_type> <payload>",
     .opts = "[--priority N] [--delay-ms N]\n"
             "[--max-attempts N] [--timeout-ms N] [--ttl-seconds N]\n"
             "[--limit-key K] [--idempotency-key K] [--id ID]\n"
             "[--after ID[,ID...] [--on-failure cancel|run|dead_letter]]\n"
             "[--batch ID]\n"
             "[--unique-for S [--unique-key K]\n"
             " [--unique-mode until_started|until_finished|debounce]]\n"
             "[--wait [--timeout S]] [--wait-replicas N]",
     .min = 3, .max = ANY, .run = ctl_enqueue, .connects = 1},
    {.name = "enqueue-bulk", .args = "<queue> <task_type>",
     .opts = "[--priority N] [--delay-ms N]\n"
             "[--max-attempts N] [--timeout-ms N] [--ttl-seconds N]\n"
             "[--limit-key K]",
     .help = "one JSON payload per line of stdin",
     .min = 2, .max = ANY, .run = ctl_enqueue_bulk, .connects = 1},
    {.name = "chain", .args = "<queue>",
     .opts = "[--after ID[,ID...]] [--on-failure cancel|run|dead_letter]\n"
             "[--priority N] [--max-attempts N] [--timeout-ms N]\n"
             "[--ttl-seconds N] [--limit-key K]",
     .help = "tasks from stdin ('<task_type> <payload>' per line),\neach after the one before",
     .min = 1, .max = ANY, .run = ctl_chain, .connects = 1},
    {.name = "batch", .sub = "create", .args = "<queue>",
     .opts = "[--id ID] [--on-success TYPE [--on-success-payload JSON]]\n"
             "[--on-complete TYPE [--on-complete-payload JSON]]\n"
             "[--open] [--description TEXT] [--priority N] [--delay-ms N]\n"
             "[--max-attempts N] [--timeout-ms N] [--ttl-seconds N] [--limit-key K]",
     .help = "a batch of the tasks of stdin ('<task_type> <payload>'\nper line); the callbacks go to <queue>",
     .min = 1, .max = ANY, .run = ctl_batch, .connects = 1},
    {.name = "batch", .sub = "add", .args = "<batch_id> <queue>",
     .opts = "[--priority N] [--delay-ms N] [--max-attempts N]\n[--timeout-ms N] [--ttl-seconds N] [--limit-key K]",
     .help = "more members, from stdin, to a batch not yet complete",
     .min = 2, .max = ANY, .run = ctl_batch, .connects = 1},
    {.name = "batch", .sub = "close", .args = "<batch_id>", .opts = "[--queue Q]",
     .help = "no more members: complete once none is pending",
     .min = 1, .max = 3, .run = ctl_batch, .connects = 1},
    {.name = "batch", .sub = "list", .opts = "[--queue Q] [--json]",
     .help = "the newest " DTQ_STR(DTQ_BATCH_LIST_MAX) " batches with their counts (a cluster:\nevery queue's merged, or Q's)",
     .min = 0, .max = 3, .run = ctl_batch, .connects = 1},
    {.name = "batch", .sub = "show", .args = "<batch_id>", .opts = "[--queue Q] [--json]",
     .help = "counts, callbacks and failed members (Q: the\nbatch's queue, needed on a cluster)",
     .min = 1, .max = 4, .run = ctl_batch, .connects = 1},
    {.name = "show", .args = "<id>", .opts = "[--queue Q]",
     .help = "the task hash and its result (Q: the task's\nqueue, needed on a cluster)",
     .min = 1, .max = 3, .run = ctl_show, .connects = 1},
    {.name = "cancel", .args = "<id>", .opts = "[--queue Q]",
     .min = 1, .max = 3, .run = ctl_simple, .connects = 1, .fn = "cancel"},
    {.name = "dlq", .sub = "list", .opts = "[--count N] [--class C]",
     .help = "dead letters, oldest first (N: 20 unless given;\nC: of that failure class alone)",
     .min = 0, .max = ANY, .run = ctl_dlq_list, .connects = 1},
    {.name = "dlq", .sub = "requeue", .args = "<id>", .opts = "[--queue Q]",
     .min = 1, .max = 3, .run = ctl_simple, .connects = 1, .fn = "requeue"},
    {.name = "dlq", .sub = "requeue-all", .help = "requeue every dead letter",
     .min = 0, .max = 0, .run = ctl_requeue_all, .connects = 1},
    {.name = "dlq", .sub = "discard", .args = "<id>", .opts = "[--queue Q]",
     .min = 1, .max = 3, .run = ctl_simple, .connects = 1, .fn = "discard"},
    {.name = "dlq", .sub = "purge", .help = "delete every dead letter",
     .min = 0, .max = 0, .run = ctl_purge_dlq, .connects = 1},
    {.name = "scheduled", .sub = "list", .opts = "[--queue Q] [--kind delayed|retrying|all]\n"
                                                "[--count N]",
     .help = "delayed and retrying tasks, soonest due first\n(N: 100 unless given)",
     .min = 0, .max = ANY, .run = ctl_scheduled_list, .connects = 1},
    {.name = "scheduled", .sub = "run-now", .args = "<id>", .opts = "[--queue Q]",
     .help = "queue it at once",
     .min = 1, .max = 3, .run = ctl_scheduled_act, .connects = 1, .fn = "sched_run_now"},
    {.name = "scheduled", .sub = "delete", .args = "<id>", .opts = "[--queue Q]",
     .help = "take it out of the schedule; it ends cancelled",
     .min = 1, .max = 3, .run = ctl_scheduled_act, .connects = 1, .fn = "sched_delete"},
    {.name = "queues", .help = "depth, pending and scheduled per queue",
     .min = 0, .max = 0, .run = ctl_queues, .connects = 1},
    {.name = "queue", .sub = "clear", .args = "<queue>", .opts = "[--delete]",
     .help = "dead-letter its waiting tasks (class cleared),\nor delete them",
     .min = 1, .max = 2, .run = ctl_queue_clear, .connects = 1},
    {.name = "queue", .sub = "remove", .args = "<queue>",
     .help = "forget a queue that holds nothing",
     .min = 1, .max = 1, .run = ctl_queue_remove, .connects = 1},
    {.name = "queue", .sub = "mode", .args = "<queue> lean|full",
     .help = "lean: tasks kept as stream entries alone,\nno status or result by id after success",
     .min = 2, .max = 2, .run = ctl_queue_mode, .connects = 1},
    {.name = "pause", .args = "<queue>", .opts = "[--create]",
     .help = "--create: also a queue no task has used",
     .min = 1, .max = 2, .run = ctl_pause_resume, .connects = 1, .fn = "pause"},
    {.name = "resume", .args = "<queue>", .opts = "[--create]",
     .min = 1, .max = 2, .run = ctl_pause_resume, .connects = 1, .fn = "resume"},
    {.name = "cron", .sub = "add", .args = "NAME SPEC QUEUE TASK_TYPE PAYLOAD",
     .opts = "[--tz ZONE] [--catch-up skip|none|all]\n"
             "[--priority N] [--max-attempts N] [--timeout-ms N]\n"
             "[--ttl-seconds N] [--paused]",
     .help = "a periodic task (replaces one of that name)",
     .min = 5, .max = ANY, .run = ctl_cron_add, .connects = 1},
    {.name = "cron", .sub = "list", .opts = "[--json]",
     .help = "periodic tasks with next and last fire time",
     .min = 0, .max = 1, .run = ctl_cron_list, .connects = 1},
    {.name = "cron", .sub = "remove", .args = "NAME", .opts = "[--queue Q]",
     .help = "Q: the schedule's queue, on a cluster where\ntwo queues have one of that name",
     .min = 1, .max = 3, .run = ctl_cron_act, .connects = 1, .fn = "cron_remove"},
    {.name = "cron", .sub = "pause", .args = "NAME", .opts = "[--queue Q]",
     .min = 1, .max = 3, .run = ctl_cron_act, .connects = 1, .fn = "cron_pause"},
    {.name = "cron", .sub = "resume", .args = "NAME", .opts = "[--queue Q]",
     .help = "fire times missed while paused are not caught up",
     .min = 1, .max = 3, .run = ctl_cron_act, .connects = 1, .fn = "cron_resume"},
    {.name = "cron", .sub = "run", .args = "NAME", .opts = "[--queue Q]",
     .help = "enqueue its task now",
     .min = 1, .max = 3, .run = ctl_cron_act, .connects = 1, .fn = "cron_run"},
    {.name = "limit", .sub = "set", .args = "<target>",
     .opts = "[--rate N/PERIOD] [--burst N]\n[--concurrency N] [--per-key]",
     .help = "target: queue or queue:task_type; PERIOD: s, m,\nh, or a duration (10s, 500ms)",
     .min = 1, .max = ANY, .run = ctl_limit_set, .connects = 1},
    {.name = "limit", .sub = "list", .opts = "[--json]", .help = "the limits with their current use",
     .min = 0, .max = 1, .run = ctl_limit_list, .connects = 1},
    {.name = "limit", .sub = "remove", .args = "<target>",
     .min = 1, .max = 1, .run = ctl_limit_remove, .connects = 1},
    {.name = "pool", .sub = "restart", .args = "NAME",
     .help = "replace the processes of [pool:NAME] on every\ndaemon, one at a time (a deploy of new code)",
     .min = 1, .max = 1, .run = ctl_pool_restart, .connects = 1, .fn = "pool_restart"},
    {.name = "workers", .help = "live workers with heartbeat age",
     .min = 0, .max = 0, .run = ctl_workers, .connects = 1},
    {.name = "events", .help = "follow the event channel",
     .min = 0, .max = 0, .run = ctl_events, .connects = 1},
    {.name = "stats", .help = "the counters of <ns>_stats",
     .min = 0, .max = 0, .run = ctl_stats, .connects = 1},
    {.name = "functions", .sub = "install",
     .help = "load the Functions library (FUNCTION LOAD REPLACE)",
     .min = 0, .max = 0, .run = ctl_functions_install, .connects = 1},
    {.name = "acl", .args = "ROLE...",
     .help = "the ACL rules of the roles for ACL SETUSER, on one line\n"
             "(no Redis connection); roles: producer, producer-raw,\n"
             "worker, admin, monitor. Apply them without a shell\n"
             "glob: dtqctl acl producer | xargs redis-cli ACL SETUSER\n"
             "app reset on '>PASSWORD'",
     .min = 1, .max = ANY, .run = ctl_acl, .connects = 0},
};
/* clang-format on */
#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

/* acl ROLE...: the rules printed, not applied (no connection). */
static int ctl_acl(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *bad = NULL;
    dtq_redis_url url;
    char err[1024], *line;
    int cluster = 0;
    DTQ_UNUSED(v);
    /* the layout follows the URL (a redis-cluster:// URL: the cluster layout's patterns);
     * nothing is connected to */
    if (x->url && dtq_redis_url_parse(x->url, &url, err, sizeof(err)) == DTQ_OK) {
        cluster = url.cluster;
        dtq_redis_url_deinit(&url);
    }
    line = dtq_acl_tokens((const char *const *)argv, argc, x->ns, x->prefix, cluster, &bad);
    if (!line)
        ctl_usage_error("unknown role '%s' (producer, producer-raw, worker, admin, monitor)", bad);
    printf("%s\n", line);
    free(line);
    return 0;
}

#define HELP_COLUMN 28      /* where a verb's description starts */
#define HELP_OPTS_INDENT 10 /* where the options go on after a '\n' */

/* Prints text, each '\n' followed by `indent` spaces; returns the column it ends at. */
static int print_indented(const char *text, int col, int indent) {
    for (const char *p = text; *p; p++) {
        if (*p == '\n') {
            col = printf("\n%*s", indent, "") - 1;
        } else {
            putchar(*p);
            col++;
        }
    }
    return col;
}

/* A row of the table in --help: the synopsis, then what it does. */
static void help_verb(const ctl_verb *v) {
    int col = printf("  %s", v->name);
    if (v->sub) col += printf(" %s", v->sub);
    if (v->args) col += printf(" %s", v->args);
    if (v->opts) col = print_indented(v->opts, col + printf(" "), HELP_OPTS_INDENT);
    if (v->help) {
        if (col >= HELP_COLUMN)
            printf("\n%*s", HELP_COLUMN, "");
        else
            printf("%*s", HELP_COLUMN - col, "");
        print_indented(v->help, HELP_COLUMN, HELP_COLUMN);
    }
    putchar('\n');
}

static void help(void) {
    printf("usage: dtqctl [-c FILE] [-u REDIS_URL] [-n NAMESPACE] [-t SECONDS] [--json] COMMAND\n"
           "              [ARGS]\n"
           "       dtqctl --help | --version\n\n"
           "options:\n"
           "  -c, --config FILE     the daemon's INI file: dtqctl uses its [redis] url,\n"
           "                        namespace, cluster_hash_tag, connect_timeout_ms,\n"
           "                        wait_timeout_ms, tls_* and sentinel_* keys\n"
           "  -u, --url REDIS_URL   overrides the configured url (redis://, rediss:// for\n"
           "                        TLS, unix://, redis-sentinel://h:p[,h:p...]/master[/db],\n"
           "                        rediss-sentinel://..., redis-cluster://h:p[,h:p...],\n"
           "                        rediss-cluster://...)\n"
           "  -n, --namespace NS    overrides the configured namespace\n"
           "  -t, --timeout SECONDS\n"
           "                        how long Redis may take to answer each command\n"
           "                        (default 10; fractions allowed), and to accept the\n"
           "                        connection with its TLS and handshake (default: [redis]\n"
           "                        connect_timeout_ms); exit 4 when it runs out\n"
           "  -j, --json            machine-readable output\n"
           "  -h, --help            this text\n"
           "  -V, --version         print dtqctl's version\n\n"
           "commands:\n");
    for (size_t i = 0; i < NVERBS; i++) help_verb(&verbs[i]);
    printf("\nSettings are loaded as dtq-worker loads them: defaults (redis://127.0.0.1:6379/0,\n"
           "namespace dtq), then FILE, then the DTQ_<SECTION>_<KEY> environment variables\n"
           "(DTQ_REDIS_URL, DTQ_REDIS_NAMESPACE, DTQ_REDIS_CLUSTER_HASH_TAG=true,\n"
           "DTQ_REDIS_TLS_CA_FILE, ...), then\n"
           "-u and -n.\n\n"
           "exit codes: 0 ok; 1 Redis refused, not found or unreachable; 2 usage error, or a\n"
           "configuration (FILE or environment) that does not load; 3 enqueue --wait\n"
           "--timeout S ran out before the task ended; 4 Redis did not answer within -t.\n");
}

void ctl_verb_usage(const ctl_verb *v) {
    ctl_usage_error("usage: dtqctl %s%s%s%s%s%s", v->name, v->sub ? " " : "", v->sub ? v->sub : "",
                    v->args ? " " : "", v->args ? v->args : "", v->opts ? " [options]" : "");
}

/* The edit distance of a and b (insertions, deletions, substitutions), at most 9. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int row[33];
    if (la > 32 || lb > 32) return 9;
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb] > 9 ? 9 : row[lb];
}

/* The verb (name, or a sub-verb of `name`) closest to `word`, within two edits; NULL when
 * none is. */
static const char *closest_verb(const char *word, const char *name) {
    const char *best = NULL;
    int dist = 3;
    for (size_t i = 0; i < NVERBS; i++) {
        const char *cand = name ? verbs[i].sub : verbs[i].name;
        int d;
        if (!cand || (name && strcmp(verbs[i].name, name))) continue;
        d = edit_distance(word, cand);
        if (d < dist) {
            dist = d;
            best = cand;
        }
    }
    return best;
}

/* The row of `cmd` and its sub-verb (taken from the arguments), or a usage error (exit 2):
 * an unknown command or sub-verb (with the closest one as a suggestion), or an argument
 * count outside the row's arity. */
static const ctl_verb *find_verb(const char *cmd, int *argc, char ***argv) {
    const ctl_verb *v = NULL;
    int has_subs = 0;
    for (size_t i = 0; i < NVERBS; i++) {
        if (strcmp(verbs[i].name, cmd)) continue;
        if (!verbs[i].sub) {
            v = &verbs[i];
            break;
        }
        has_subs = 1;
        if (*argc > 0 && !strcmp(verbs[i].sub, (*argv)[0])) {
            v = &verbs[i];
            break;
        }
    }
    if (!v && !has_subs) {
        const char *near = closest_verb(cmd, NULL);
        if (near) ctl_usage_error("unknown command '%s'; did you mean '%s'?", cmd, near);
        ctl_usage_error("unknown command '%s'", cmd);
    }
    if (!v && *argc == 0) { /* "usage: dtqctl dlq list|requeue|..." */
        char subs[256] = "";
        for (size_t i = 0; i < NVERBS; i++)
            if (!strcmp(verbs[i].name, cmd))
                snprintf(subs + strlen(subs), sizeof(subs) - strlen(subs), "%s%s", *subs ? "|" : "",
                         verbs[i].sub);
        ctl_usage_error("usage: dtqctl %s %s", cmd, subs);
    }
    if (!v) {
        const char *near = closest_verb((*argv)[0], cmd);
        if (near)
            ctl_usage_error("unknown %s command '%s'; did you mean '%s %s'?", cmd, (*argv)[0], cmd,
                            near);
        ctl_usage_error("unknown %s command '%s'", cmd, (*argv)[0]);
    }
    if (v->sub) {
        (*argc)--;
        (*argv)++;
    }
    if (*argc < v->min || (v->max != ANY && *argc > v->max)) ctl_verb_usage(v);
    return v;
}

/* ----------------------------------------------------------------- configuration */

/* A configuration that cannot be loaded: one line on stderr, exit 2 (as for usage). */
static void config_error(const char *err) __attribute__((noreturn));

static void config_error(const char *err) {
    fputs("dtqctl: config error: ", stderr);
    for (const char *p = err; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    fputc('\n', stderr);
    exit(CTL_EXIT_USAGE);
}

/* The TLS settings of rediss:// and rediss-sentinel://, loaded once. */
static dtq_tls *ctl_tls(const dtq_config *cfg) {
    static dtq_tls *tls;
    char err[512];
    if (tls) return tls;
    tls = dtq_tls_from_config(cfg, err, sizeof(err));
    if (!tls) config_error(err);
    if (!cfg->tls_verify)
        fprintf(stderr, "dtqctl: warning: [redis] tls_verify = false: the server's certificate "
                        "is not verified\n");
    return tls;
}

static void note_cb(const char *line, void *arg) {
    DTQ_UNUSED(arg);
    fprintf(stderr, "dtqctl: %s\n", line);
}

/* The connection of rsync.c: connect_timeout_ms over connect, TLS and handshake (per
 * sentinel or cluster seed asked), --timeout over each command's reply; with a sentinel URL each
 * sentinel asked in turn (one that fails is named on stderr). Exit 1 when Redis cannot be reached,
 * 4 when it did not answer in time, 2 for a bad URL. */
static void connect_ctl(ctl *x, const char *url_s, const dtq_config *cfg,
                        int64_t connect_timeout_ms) {
    dtq_redis_url url;
    dtq_rsync_opts o;
    char err[1024];
    if (dtq_redis_url_parse(url_s, &url, err, sizeof(err)) != DTQ_OK)
        ctl_usage_error("bad Redis URL: %s", err);
    int timed_out = 0;
    memset(&o, 0, sizeof(o));
    o.connect_timeout_ms = connect_timeout_ms;
    o.reply_timeout_ms = x->timeout_ms;
    o.timed_out = &timed_out;
    o.tls = url.tls ? ctl_tls(cfg) : NULL;
    o.sentinel_user = cfg->sentinel_user;
    o.sentinel_password = cfg->sentinel_password;
    o.note = note_cb;
    x->conn = dtq_rsync_connect(&url, &o, err, sizeof(err));
    if (!x->conn && timed_out) {
        char where[300];
        dtq_redis_url_where(&url, where, sizeof(where));
        dtq_redis_url_deinit(&url);
        fprintf(stderr, "dtqctl: %s\n", err);
        no_answer(where, connect_timeout_ms);
    }
    dtq_redis_url_deinit(&url);
    if (!x->conn) ctl_refused("%s", err);
    x->cluster = dtq_rsync_is_cluster(x->conn); /* the cluster layout (ctl_route.c) */
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"url", required_argument, NULL, 'u'},
                                         {"namespace", required_argument, NULL, 'n'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    ctl x = {0};
    const char *timeout = NULL;
    const char *path = NULL, *url = NULL, *ns = NULL;
    const ctl_verb *v;
    dtq_config *cfg;
    char err[1024];
    int opt, rc;
    while ((opt = getopt_long(argc, argv, "+c:u:n:t:jhV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': path = optarg; break;
        case 'u': url = optarg; break;
        case 'n': ns = optarg; break;
        case 't': timeout = optarg; break;
        case 'j': x.json = json_errors = 1; break;
        case 'h': help(); return 0;
        case 'V': printf("dtqctl %s\n", DTQ_VERSION); return 0;
        default: fprintf(stderr, "Try 'dtqctl --help'.\n"); return CTL_EXIT_USAGE;
        }
    }
    if (optind >= argc) ctl_usage_error("no command given");
    argc -= optind;
    argv += optind;
    {
        /* --json after the verb too (`dtqctl queues --json`): no verb takes it as a value */
        int kept = 0;
        for (int i = 0; i < argc; i++) {
            if (i > 0 && !strcmp(argv[i], "--json"))
                x.json = json_errors = 1;
            else
                argv[kept++] = argv[i];
        }
        argc = kept;
    }
    {
        const char *cmd = argv[0];
        argc--;
        argv++;
        v = find_verb(cmd, &argc, &argv);
    }
    cfg = dtq_config_load(path, err, sizeof(err));
    if (!cfg) config_error(err);
    x.ns = ns ? ns : cfg->ns;
    /* the loader's rule for [redis] namespace, so -n names what a daemon could use */
    if (!dtq_namespace_valid(x.ns)) ctl_usage_error("bad namespace '%s'", x.ns);
    x.prefix = dtq_keys_prefix(x.ns, cfg->cluster_hash_tag);
    x.wait_timeout_ms = cfg->wait_timeout_ms;
    x.timeout_ms = timeout ? ctl_parse_seconds("--timeout", timeout, CTL_MAX_TIMEOUT_S)
                           : CTL_DEFAULT_TIMEOUT_MS;
    x.url = url ? url : cfg->redis_url;
    if (v->connects) {
        signal(SIGPIPE, SIG_IGN); /* SSL_write to a closed connection: an error, not a signal */
        /* -t bounds the connect too; without it [redis] connect_timeout_ms does */
        connect_ctl(&x, url ? url : cfg->redis_url, cfg,
                    timeout ? x.timeout_ms : cfg->connect_timeout_ms);
    }
    rc = v->run(&x, v, argc, argv);
    dtq_rsync_close(x.conn);
    free(x.prefix);
    dtq_config_free(cfg);
    return rc;
}
