/* dtqctl: the admin and producer CLI. Synchronous; every action is one of the Functions
 * (so dtqctl and redis-cli do exactly the same thing) or a plain read. The connection is
 * rsync.c's blocking client (TCP, unix socket or TLS; Sentinel; the shared handshake).
 * The [redis] settings come from the daemon's loader (defaults, -c FILE, DTQ_REDIS_*),
 * then -u and -n; key and Function names come from keys.h, as the daemon's do.
 * Exit codes: 0 ok, 1 Redis refused / not found / unreachable, 2 usage or configuration. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "acl.h"
#include "config.h"
#include "keys.h"
#include "redis_url.h"
#include "rsync.h"
#include "scripts.h"
#include "task.h"
#include "tls.h"
#include "util.h"

#define EXIT_REFUSED 1
#define EXIT_USAGE 2

typedef struct ctl {
    dtq_rsync *conn;
    const char *ns;
    char *prefix;
    int json;
    int64_t wait_timeout_ms; /* [redis] wait_timeout_ms, for --wait-replicas */
} ctl;

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "dtqctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'dtqctl --help'.\n");
    exit(EXIT_USAGE);
}

static void refused(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void refused(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "dtqctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(EXIT_REFUSED);
}

/* A configuration that cannot be loaded: one line on stderr, exit 2 (as for usage). */
static void config_error(const char *err) __attribute__((noreturn));

static void config_error(const char *err) {
    fputs("dtqctl: config error: ", stderr);
    for (const char *p = err; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    fputc('\n', stderr);
    exit(EXIT_USAGE);
}

static void help(void) {
    printf("usage: dtqctl [-c FILE] [-u REDIS_URL] [-n NAMESPACE] [--json] COMMAND [ARGS]\n\n"
           "options:\n"
           "  -c, --config FILE     the daemon's INI file: dtqctl uses its [redis] url,\n"
           "                        namespace, cluster_hash_tag, connect_timeout_ms,\n"
           "                        wait_timeout_ms, tls_* and sentinel_* keys\n"
           "  -u, --url REDIS_URL   overrides the configured url (redis://, rediss:// for\n"
           "                        TLS, unix://, redis-sentinel://h:p[,h:p...]/master[/db],\n"
           "                        rediss-sentinel://...)\n"
           "  -n, --namespace NS    overrides the configured namespace\n"
           "  -j, --json            machine-readable output\n\n"
           "commands:\n"
           "  enqueue <queue> <task_type> <payload> [--priority N] [--delay-ms N]\n"
           "          [--max-attempts N] [--timeout-ms N] [--ttl-seconds N]\n"
           "          [--idempotency-key K] [--id ID] [--wait] [--wait-replicas N]\n"
           "  enqueue-bulk <queue> <task_type> [--priority N] [--delay-ms N]\n"
           "          [--max-attempts N] [--timeout-ms N] [--ttl-seconds N]\n"
           "                            one JSON payload per line of stdin\n"
           "  show <id>                 the task hash and its result\n"
           "  cancel <id>\n"
           "  dlq list [--count N] | dlq requeue <id> | dlq requeue-all | dlq discard <id>\n"
           "  dlq purge\n"
           "  queues                    depth, pending and scheduled per queue\n"
           "  pause <queue> | resume <queue>\n"
           "  workers                   live workers with heartbeat age\n"
           "  events                    follow the event channel\n"
           "  stats\n"
           "  functions install         load the Functions library (FUNCTION LOAD REPLACE)\n"
           "  acl ROLE...               the ACL rules of the roles for ACL SETUSER, on one line\n"
           "                            (no Redis connection); roles: producer, producer-raw,\n"
           "                            worker, admin, monitor. Apply them without a shell\n"
           "                            glob: dtqctl acl producer | xargs redis-cli ACL SETUSER\n"
           "                            app reset on '>PASSWORD'\n\n"
           "Settings are loaded as dtq-worker loads them: defaults (redis://127.0.0.1:6379/0,\n"
           "namespace dtq), then FILE, then the DTQ_<SECTION>_<KEY> environment variables\n"
           "(DTQ_REDIS_URL, DTQ_REDIS_NAMESPACE, DTQ_REDIS_CLUSTER_HASH_TAG=true,\n"
           "DTQ_REDIS_TLS_CA_FILE, ...), then\n"
           "-u and -n.\n\n"
           "exit codes: 0 ok; 1 Redis refused, not found or unreachable; 2 usage error, or a\n"
           "configuration (FILE or environment) that does not load.\n");
}

/* One command and its reply (an error reply included); a lost connection exits 1. */
static redisReply *ctl_command(ctl *x, int argc, const char **argv) {
    char why[512];
    redisReply *r = dtq_rsync_command(x->conn, argc, argv, NULL, why, sizeof(why));
    if (!r) refused("redis: %s", why);
    return r;
}

/* The next reply without a command (`events`); a lost connection exits 1. */
static redisReply *conn_reply(ctl *x) {
    char why[512];
    redisReply *r = dtq_rsync_read(x->conn, why, sizeof(why));
    if (!r) refused("redis: %s", why);
    return r;
}

static redisReply *cmdv(ctl *x, int argc, const char **argv) {
    return ctl_command(x, argc, argv);
}

/* Runs FCALL <ns>_<name> 0 args...; a Redis error reply ends the program with exit 1. */
static redisReply *fcall(ctl *x, const char *name, int argc, const char **args) {
    const char **argv = dtq_xcalloc((size_t)argc + 3, sizeof(char *));
    char *fn = dtq_keys_function(x->ns, name);
    redisReply *r;
    argv[0] = strcmp(name, "stats") ? "FCALL" : "FCALL_RO";
    argv[1] = fn;
    argv[2] = "0";
    for (int i = 0; i < argc; i++) argv[3 + i] = args[i];
    r = cmdv(x, argc + 3, argv);
    free(argv);
    free(fn);
    if (r->type == REDIS_REPLY_ERROR) {
        if (dtq_scripts_error_code(r->str) == DTQ_SCRIPT_ERR_NO_FUNCTION)
            refused("the dtq Functions are not loaded in this Redis (namespace %s); install "
                    "them with 'dtqctl -n %s functions install' (an admin's step), or start "
                    "dtq-worker once as a user allowed to FUNCTION LOAD",
                    x->ns, x->ns);
        refused("%s", r->str);
    }
    return r;
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

/* The connection of rsync.c: connect_timeout_ms over connect, TLS and handshake; with a
 * sentinel URL each sentinel asked in turn (one that fails is named on stderr). Exit 1
 * when Redis cannot be reached, 2 for a bad URL. */
static void connect_ctl(ctl *x, const char *url_s, const dtq_config *cfg) {
    dtq_redis_url url;
    dtq_rsync_opts o;
    char err[1024];
    if (dtq_redis_url_parse(url_s, &url, err, sizeof(err)) != DTQ_OK)
        usage_error("bad Redis URL: %s", err);
    memset(&o, 0, sizeof(o));
    o.connect_timeout_ms = cfg->connect_timeout_ms;
    o.tls = url.tls ? ctl_tls(cfg) : NULL;
    o.sentinel_user = cfg->sentinel_user;
    o.sentinel_password = cfg->sentinel_password;
    o.note = note_cb;
    x->conn = dtq_rsync_connect(&url, &o, err, sizeof(err));
    dtq_redis_url_deinit(&url);
    if (!x->conn) refused("%s", err);
}

static void disconnect_ctl(ctl *x) {
    dtq_rsync_close(x->conn);
}

static void print_reply_json(const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER)
        printf("%lld\n", r->integer);
    else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        cJSON *s = cJSON_CreateString(r->str);
        char *out = cJSON_PrintUnformatted(s);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(s);
    }
}

/* The one-word replies (queued, cancelled, paused, counts...). */
static int simple(ctl *x, const char *fn, int argc, const char **args) {
    redisReply *r = fcall(x, fn, argc, args);
    if (x->json)
        print_reply_json(r);
    else if (r->type == REDIS_REPLY_INTEGER)
        printf("%lld\n", r->integer);
    else
        printf("%s\n", r->str ? r->str : "");
    freeReplyObject(r);
    return 0;
}

/* dlq requeue-all: <ns>_requeue_dlq requeues one chunk per call, so call it until it
 * requeues nothing, or until it has requeued as many tasks as the dead-letter stream held
 * at the start (tasks that fail again at once come back to it: no endless loop). */
static int cmd_requeue_all(ctl *x) {
    const char *a[2] = {"", "dtqctl"};
    char *key = dtq_key(x->prefix, "stream:dead-letter");
    const char *xlen[2] = {"XLEN", key};
    redisReply *r = cmdv(x, 2, xlen);
    long long start = r->type == REDIS_REPLY_INTEGER ? r->integer : 0, total = 0, n;
    freeReplyObject(r);
    free(key);
    do {
        r = fcall(x, "requeue_dlq", 2, a);
        if (r->type != REDIS_REPLY_INTEGER) refused("requeue_dlq: unexpected reply");
        n = r->integer;
        total += n;
        freeReplyObject(r);
    } while (n > 0 && total < start);
    printf("%lld\n", total);
    return 0;
}

static cJSON *hash_to_json(const redisReply *r) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        cJSON_AddStringToObject(o, r->element[i]->str, r->element[i + 1]->str);
    return o;
}

static char *task_status(ctl *x, const char *id) {
    char *key = dtq_key(x->prefix, "task:%s", id);
    const char *argv[3] = {"HGET", key, "status"};
    redisReply *r = cmdv(x, 3, argv);
    char *s = r->type == REDIS_REPLY_STRING ? dtq_xstrdup(r->str) : NULL;
    freeReplyObject(r);
    free(key);
    return s;
}

static int cmd_show(ctl *x, const char *id) {
    char *key = dtq_key(x->prefix, "task:%s", id);
    char *rkey = dtq_key(x->prefix, "result:%s", id);
    const char *argv[2] = {"HGETALL", key};
    const char *rargv[2] = {"GET", rkey};
    redisReply *r = cmdv(x, 2, argv), *res;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) refused("NOT_FOUND task %s", id);
    res = cmdv(x, 2, rargv);
    if (x->json) {
        cJSON *o = hash_to_json(r);
        cJSON *result = res->type == REDIS_REPLY_STRING ? cJSON_Parse(res->str) : NULL;
        char *out;
        cJSON_AddItemToObject(o, "result", result ? result : cJSON_CreateNull());
        out = cJSON_PrintUnformatted(o);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(o);
    } else {
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            printf("%-18s %s\n", r->element[i]->str, r->element[i + 1]->str);
        printf("%-18s %s\n", "result", res->type == REDIS_REPLY_STRING ? res->str : "null");
    }
    freeReplyObject(r);
    freeReplyObject(res);
    free(key);
    free(rkey);
    return 0;
}

/* WAIT n after a write: how many replicas have it (timeout: [redis] wait_timeout_ms). */
static long long wait_replicas(ctl *x, long long n, int64_t timeout_ms) {
    char ns[32], ts[32];
    const char *argv[3] = {"WAIT", ns, ts};
    redisReply *r;
    long long got;
    snprintf(ns, sizeof(ns), "%lld", n);
    snprintf(ts, sizeof(ts), "%lld", (long long)timeout_ms);
    r = cmdv(x, 3, argv);
    if (r->type != REDIS_REPLY_INTEGER)
        refused("WAIT: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    got = r->integer;
    freeReplyObject(r);
    return got;
}

static int cmd_enqueue(ctl *x, int argc, char **argv) {
    static const struct {
        const char *flag, *opt;
    } map[] = {{"--priority", "priority"},
               {"--delay-ms", "delay_ms"},
               {"--max-attempts", "max_attempts"},
               {"--timeout-ms", "timeout_ms"},
               {"--ttl-seconds", "ttl_seconds"},
               {"--idempotency-key", "idempotency_key"},
               {"--id", "task_id"}};
    const char **args = dtq_xcalloc((size_t)argc * 2 + 4, sizeof(char *));
    char uuid[37];
    int n = 0, wait = 0, have_id = 0, short_of_replicas = 0;
    int64_t want_replicas = 0;
    long long replicas = -1;
    redisReply *r;
    if (argc < 3) usage_error("enqueue needs <queue> <task_type> <payload>");
    args[n++] = argv[0];
    args[n++] = argv[1];
    args[n++] = argv[2];
    for (int i = 3; i < argc; i++) {
        size_t j;
        if (!strcmp(argv[i], "--wait")) {
            wait = 1;
            continue;
        }
        if (!strcmp(argv[i], "--wait-replicas")) {
            if (i + 1 >= argc || dtq_parse_int64(argv[i + 1], 1, 64, &want_replicas) != DTQ_OK)
                usage_error("enqueue: --wait-replicas needs a number of replicas in [1, 64]");
            i++;
            continue;
        }
        for (j = 0; j < sizeof(map) / sizeof(map[0]); j++)
            if (!strcmp(argv[i], map[j].flag)) break;
        if (j == sizeof(map) / sizeof(map[0])) usage_error("enqueue: unknown option '%s'", argv[i]);
        if (i + 1 >= argc) usage_error("enqueue: %s needs a value", argv[i]);
        if (!strcmp(map[j].opt, "task_id")) have_id = 1;
        args[n++] = map[j].opt;
        args[n++] = argv[++i];
    }
    if (!have_id) { /* ids minted by dtqctl are UUIDv4 (SPEC 3) */
        dtq_uuid4(uuid);
        args[n++] = "task_id";
        args[n++] = uuid;
    }
    r = fcall(x, "enqueue", n, args);
    free(args);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) refused("unexpected reply to enqueue");
    if (want_replicas) { /* on the same connection, right after the FCALL */
        replicas = wait_replicas(x, want_replicas, x->wait_timeout_ms);
        short_of_replicas = replicas < want_replicas;
    }
    if (x->json && !wait) {
        if (replicas >= 0)
            printf("{\"task_id\":\"%s\",\"result\":\"%s\",\"replicas\":%lld}\n", r->element[0]->str,
                   r->element[1]->str, replicas);
        else
            printf("{\"task_id\":\"%s\",\"result\":\"%s\"}\n", r->element[0]->str,
                   r->element[1]->str);
    } else if (!x->json) {
        printf("%s %s\n", r->element[0]->str, r->element[1]->str);
    }
    if (short_of_replicas) {
        fflush(stdout);
        fprintf(stderr,
                "dtqctl: the enqueue reached %lld of %lld replica(s) within %lld ms: a failover "
                "now could lose it\n",
                replicas, (long long)want_replicas, (long long)x->wait_timeout_ms);
    }
    if (wait) {
        char *id = dtq_xstrdup(r->element[0]->str);
        for (;;) {
            char *st = task_status(x, id);
            if (!st) refused("task %s disappeared", id);
            if (dtq_task_status_is_terminal(st)) {
                int failed = strcmp(st, "succeeded") != 0;
                free(st);
                freeReplyObject(r);
                cmd_show(x, id);
                free(id);
                return failed || short_of_replicas ? EXIT_REFUSED : 0;
            }
            free(st);
            usleep(50000);
        }
    }
    freeReplyObject(r);
    return short_of_replicas ? EXIT_REFUSED : 0;
}

#define BULK_CHUNK 1000

/* Sends one chunk of payloads with <ns>_enqueue_bulk and prints a line per task; returns
 * how many were refused. lines[i] is the input line number of payloads[i]. */
static int bulk_chunk(ctl *x, const char **args, int nopts, char **payloads, const long *lines,
                      int n, cJSON *json_out) {
    const char **a = dtq_xcalloc((size_t)(3 + n + nopts), sizeof(char *));
    char count[16];
    int refusedn = 0;
    redisReply *r;
    snprintf(count, sizeof(count), "%d", n);
    a[0] = args[0];
    a[1] = args[1];
    a[2] = count;
    for (int i = 0; i < n; i++) a[3 + i] = payloads[i];
    for (int i = 0; i < nopts; i++) a[3 + n + i] = args[2 + i];
    r = fcall(x, "enqueue_bulk", 3 + n + nopts, a);
    free(a);
    if (r->type != REDIS_REPLY_ARRAY || (int)r->elements != n)
        refused("unexpected reply to enqueue_bulk");
    for (int i = 0; i < n; i++) {
        const redisReply *e = r->element[i];
        int ok = e->type == REDIS_REPLY_ARRAY && e->elements == 2;
        if (!ok) refusedn++;
        if (json_out) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "line", (double)lines[i]);
            if (ok) {
                cJSON_AddStringToObject(o, "task_id", e->element[0]->str);
                cJSON_AddStringToObject(o, "result", e->element[1]->str);
            } else {
                cJSON_AddStringToObject(o, "error", e->str ? e->str : "?");
            }
            cJSON_AddItemToArray(json_out, o);
        } else if (ok) {
            printf("%s %s\n", e->element[0]->str, e->element[1]->str);
        } else {
            fprintf(stderr, "dtqctl: line %ld: %s\n", lines[i], e->str ? e->str : "?");
        }
    }
    freeReplyObject(r);
    return refusedn;
}

/* enqueue-bulk <queue> <task_type> [options]: one JSON payload per line of stdin, sent in
 * chunks of BULK_CHUNK through <ns>_enqueue_bulk (one Function call per chunk). */
static int cmd_enqueue_bulk(ctl *x, int argc, char **argv) {
    static const struct {
        const char *flag, *opt;
    } map[] = {{"--priority", "priority"},
               {"--delay-ms", "delay_ms"},
               {"--max-attempts", "max_attempts"},
               {"--timeout-ms", "timeout_ms"},
               {"--ttl-seconds", "ttl_seconds"}};
    const char **args = dtq_xcalloc((size_t)argc * 2 + 2, sizeof(char *));
    char **payloads = dtq_xcalloc(BULK_CHUNK, sizeof(char *));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, lines[BULK_CHUNK];
    int nargs = 2, n = 0, refusedn = 0;
    cJSON *json_out = x->json ? cJSON_CreateArray() : NULL;
    if (argc < 2) usage_error("enqueue-bulk needs <queue> <task_type> (payloads on stdin)");
    args[0] = argv[0];
    args[1] = argv[1];
    for (int i = 2; i < argc; i++) {
        size_t j;
        for (j = 0; j < sizeof(map) / sizeof(map[0]); j++)
            if (!strcmp(argv[i], map[j].flag)) break;
        if (j == sizeof(map) / sizeof(map[0]))
            usage_error("enqueue-bulk: unknown option '%s'", argv[i]);
        if (i + 1 >= argc) usage_error("enqueue-bulk: %s needs a value", argv[i]);
        args[nargs++] = map[j].opt;
        args[nargs++] = argv[++i];
    }
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue; /* blank lines separate nothing */
        lines[n] = lineno;
        payloads[n++] = dtq_xstrdup(line);
        if (n == BULK_CHUNK) {
            refusedn += bulk_chunk(x, args, nargs - 2, payloads, lines, n, json_out);
            for (int i = 0; i < n; i++) free(payloads[i]);
            n = 0;
        }
    }
    if (n) refusedn += bulk_chunk(x, args, nargs - 2, payloads, lines, n, json_out);
    for (int i = 0; i < n; i++) free(payloads[i]);
    if (json_out) {
        char *out = cJSON_PrintUnformatted(json_out);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(json_out);
    }
    free(line);
    free(payloads);
    free(args);
    return refusedn ? EXIT_REFUSED : 0;
}

static int cmd_dlq_list(ctl *x, int argc, char **argv) {
    long long count = 20;
    char *key = dtq_key(x->prefix, "stream:dead-letter"), cnt[32];
    const char *a[6] = {"XRANGE", key, "-", "+", "COUNT", cnt};
    redisReply *r;
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < argc; i++) {
        int64_t v;
        if (!strcmp(argv[i], "--count") && i + 1 < argc &&
            dtq_parse_int64(argv[i + 1], 1, 1000000, &v) == DTQ_OK) {
            count = v;
            i++;
        } else {
            usage_error("dlq list: bad argument '%s'", argv[i]);
        }
    }
    snprintf(cnt, sizeof(cnt), "%lld", count);
    r = cmdv(x, 6, a);
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        cJSON *o = hash_to_json(e->element[1]);
        cJSON_AddStringToObject(o, "entry_id", e->element[0]->str);
        if (x->json)
            cJSON_AddItemToArray(arr, o);
        else {
            cJSON *tid = cJSON_GetObjectItem(o, "task_id"),
                  *err = cJSON_GetObjectItem(o, "last_error"),
                  *tt = cJSON_GetObjectItem(o, "task_type"),
                  *att = cJSON_GetObjectItem(o, "attempts_made");
            printf("%s  %s  attempts=%s  %s\n", tid ? tid->valuestring : "?",
                   tt ? tt->valuestring : "?", att ? att->valuestring : "?",
                   err ? err->valuestring : "");
            cJSON_Delete(o);
        }
    }
    if (x->json) {
        char *out = cJSON_PrintUnformatted(arr);
        printf("%s\n", out);
        free(out);
    }
    cJSON_Delete(arr);
    freeReplyObject(r);
    free(key);
    return 0;
}

static redisReply *stats_reply(ctl *x) {
    return fcall(x, "stats", 0, NULL);
}

static int cmd_stats(ctl *x, int queues_only) {
    redisReply *r = stats_reply(x);
    cJSON *o = cJSON_CreateObject();
    char *sched_key = dtq_key(x->prefix, "retry:schedule");
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        cJSON_AddNumberToObject(o, r->element[i]->str, (double)r->element[i + 1]->integer);
    if (queues_only) {
        /* scheduled per queue: the schedule holds ids; count them by their task's queue. */
        const char *a[4] = {"ZRANGE", sched_key, "0", "-1"};
        redisReply *z = cmdv(x, 4, a);
        cJSON *per = cJSON_CreateObject();
        for (size_t i = 0; z->type == REDIS_REPLY_ARRAY && i < z->elements; i++) {
            char *tk = dtq_key(x->prefix, "task:%s", z->element[i]->str);
            const char *h[3] = {"HGET", tk, "queue"};
            redisReply *q = cmdv(x, 3, h);
            if (q->type == REDIS_REPLY_STRING) {
                cJSON *cur = cJSON_GetObjectItem(per, q->str);
                if (cur)
                    cJSON_SetNumberValue(cur, cur->valuedouble + 1);
                else
                    cJSON_AddNumberToObject(per, q->str, 1);
            }
            freeReplyObject(q);
            free(tk);
        }
        freeReplyObject(z);
        if (!x->json)
            printf("%-24s %10s %10s %10s %s\n", "QUEUE", "DEPTH", "PENDING", "SCHEDULED", "");
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i + 1 < r->elements; i += 6) {
            const char *name = r->element[i]->str;
            if (strncmp(name, "queue:", 6) || !strstr(name, ":depth")) break;
            char *q = dtq_xstrndup(name + 6, strlen(name) - 6 - 6);
            cJSON *sc = cJSON_GetObjectItem(per, q);
            long long scheduled = sc ? (long long)sc->valuedouble : 0;
            if (x->json) {
                cJSON *row = cJSON_CreateObject();
                cJSON_AddStringToObject(row, "queue", q);
                cJSON_AddNumberToObject(row, "depth", (double)r->element[i + 1]->integer);
                cJSON_AddNumberToObject(row, "pending", (double)r->element[i + 3]->integer);
                cJSON_AddNumberToObject(row, "scheduled", (double)scheduled);
                cJSON_AddBoolToObject(row, "paused", r->element[i + 5]->integer != 0);
                cJSON_AddItemToArray(arr, row);
            } else {
                printf("%-24s %10lld %10lld %10lld %s\n", q, r->element[i + 1]->integer,
                       r->element[i + 3]->integer, scheduled,
                       r->element[i + 5]->integer ? "paused" : "");
            }
            free(q);
        }
        if (x->json) {
            char *out = cJSON_PrintUnformatted(arr);
            printf("%s\n", out);
            free(out);
        }
        cJSON_Delete(arr);
        cJSON_Delete(per);
    } else if (x->json) {
        char *out = cJSON_PrintUnformatted(o);
        printf("%s\n", out);
        free(out);
    } else {
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            printf("%-32s %lld\n", r->element[i]->str, r->element[i + 1]->integer);
    }
    cJSON_Delete(o);
    free(sched_key);
    freeReplyObject(r);
    return 0;
}

static int cmd_workers(ctl *x) {
    char *set = dtq_key(x->prefix, "workers");
    const char *a[2] = {"SMEMBERS", set};
    redisReply *r = cmdv(x, 2, a);
    cJSON *arr = cJSON_CreateArray();
    long long now = dtq_now_ms();
    if (!x->json)
        printf("%-28s %-20s %8s %8s %10s %s\n", "WORKER", "HOST", "PID", "ACTIVE", "AGE_S",
               "STATUS");
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        char *key = dtq_key(x->prefix, "worker:%s", r->element[i]->str);
        const char *h[2] = {"HGETALL", key};
        redisReply *w = cmdv(x, 2, h);
        if (w->type == REDIS_REPLY_ARRAY && w->elements) {
            cJSON *o = hash_to_json(w);
            cJSON *hb = cJSON_GetObjectItem(o, "last_heartbeat");
            double age = hb ? (double)(now - atoll(hb->valuestring)) / 1000.0 : -1;
            cJSON_AddNumberToObject(o, "heartbeat_age_s", age);
            if (x->json)
                cJSON_AddItemToArray(arr, o);
            else {
#define F(n) (cJSON_GetObjectItem(o, n) ? cJSON_GetObjectItem(o, n)->valuestring : "?")
                printf("%-28s %-20s %8s %8s %10.1f %s\n", F("worker_id"), F("hostname"), F("pid"),
                       F("active_tasks"), age, F("status"));
#undef F
                cJSON_Delete(o);
            }
        }
        freeReplyObject(w);
        free(key);
    }
    if (x->json) {
        char *out = cJSON_PrintUnformatted(arr);
        printf("%s\n", out);
        free(out);
    }
    cJSON_Delete(arr);
    freeReplyObject(r);
    free(set);
    return 0;
}

/* functions install: the library the daemon would load, for this namespace and key prefix.
 * For deployments whose workers may not FUNCTION LOAD (dtqctl acl worker): they check that
 * the installed library's <ns>_version is their own. */
static int cmd_functions_install(ctl *x) {
    size_t len;
    char *lib = dtq_scripts_library(x->ns, x->prefix, &len);
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", lib};
    redisReply *r = ctl_command(x, 4, argv); /* the library text holds no NUL */
    DTQ_UNUSED(len);
    free(lib);
    if (r->type == REDIS_REPLY_ERROR) refused("FUNCTION LOAD: %s", r->str);
    freeReplyObject(r);
    if (x->json)
        printf("{\"library\":\"%s\",\"version\":\"%s\"}\n", x->ns, dtq_scripts_version());
    else
        printf("installed library %s version %s\n", x->ns, dtq_scripts_version());
    return 0;
}

static int cmd_events(ctl *x) {
    char *ch = dtq_key(x->prefix, "events");
    const char *a[2] = {"SUBSCRIBE", ch};
    redisReply *r = cmdv(x, 2, a);
    freeReplyObject(r);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        r = conn_reply(x);
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[2]->str)
            printf("%s\n", r->element[2]->str);
        freeReplyObject(r);
    }
    return 0; /* not reached: conn_reply exits when the connection ends */
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"url", required_argument, NULL, 'u'},
                                         {"namespace", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    ctl x = {0};
    const char *path = NULL, *url = NULL, *ns = NULL;
    const char *cmd;
    dtq_config *cfg;
    char err[1024];
    int opt, rc;
    while ((opt = getopt_long(argc, argv, "+c:u:n:jh", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': path = optarg; break;
        case 'u': url = optarg; break;
        case 'n': ns = optarg; break;
        case 'j': x.json = 1; break;
        case 'h': help(); return 0;
        default: fprintf(stderr, "Try 'dtqctl --help'.\n"); return EXIT_USAGE;
        }
    }
    if (optind >= argc) usage_error("no command given");
    cmd = argv[optind];
    argc -= optind + 1;
    argv += optind + 1;
    {
        static const char *known[] = {"enqueue", "enqueue-bulk", "show",      "cancel",  "dlq",
                                      "queues",  "pause",        "resume",    "workers", "events",
                                      "stats",   "acl",          "functions", NULL};
        int ok = 0;
        for (const char **k = known; *k; k++) ok |= !strcmp(*k, cmd);
        if (!ok) usage_error("unknown command '%s'", cmd);
    }
#define NEED(n, what)                                                                              \
    do {                                                                                           \
        if (argc != (n)) usage_error("%s", what);                                                  \
    } while (0)
    if (!strcmp(cmd, "show") || !strcmp(cmd, "cancel")) NEED(1, "usage: dtqctl show|cancel <id>");
    if (!strcmp(cmd, "pause") || !strcmp(cmd, "resume"))
        NEED(1, "usage: dtqctl pause|resume <queue>");
    if (!strcmp(cmd, "queues") || !strcmp(cmd, "workers") || !strcmp(cmd, "events") ||
        !strcmp(cmd, "stats"))
        NEED(0, "this command takes no arguments");
    if (!strcmp(cmd, "dlq")) {
        if (argc < 1) usage_error("usage: dtqctl dlq list|requeue|requeue-all|discard|purge");
        if (strcmp(argv[0], "list") && strcmp(argv[0], "requeue") &&
            strcmp(argv[0], "requeue-all") && strcmp(argv[0], "discard") &&
            strcmp(argv[0], "purge"))
            usage_error("unknown dlq command '%s'", argv[0]);
        if ((!strcmp(argv[0], "requeue") || !strcmp(argv[0], "discard")) && argc != 2)
            usage_error("usage: dtqctl dlq %s <id>", argv[0]);
        if ((!strcmp(argv[0], "requeue-all") || !strcmp(argv[0], "purge")) && argc != 1)
            usage_error("usage: dtqctl dlq %s", argv[0]);
    }
    if (!strcmp(cmd, "functions") && (argc != 1 || strcmp(argv[0], "install")))
        usage_error("usage: dtqctl functions install");
    if (!strcmp(cmd, "acl") && argc < 1)
        usage_error("usage: dtqctl acl ROLE... (producer, producer-raw, worker, admin, monitor)");
    cfg = dtq_config_load(path, err, sizeof(err));
    if (!cfg) config_error(err);
    x.ns = ns ? ns : cfg->ns;
    /* the loader's rule for [redis] namespace, so -n names what a daemon could use */
    if (!dtq_namespace_valid(x.ns)) usage_error("bad namespace '%s'", x.ns);
    x.prefix = dtq_keys_prefix(x.ns, cfg->cluster_hash_tag);
    x.wait_timeout_ms = cfg->wait_timeout_ms;
    if (!strcmp(cmd, "acl")) { /* printed, not applied: no connection */
        const char *bad = NULL;
        char *line = dtq_acl_tokens((const char *const *)argv, argc, x.ns, x.prefix, &bad);
        if (!line)
            usage_error("unknown role '%s' (producer, producer-raw, worker, admin, monitor)", bad);
        printf("%s\n", line);
        free(line);
        free(x.prefix);
        dtq_config_free(cfg);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN); /* SSL_write to a closed connection: an error, not a signal */
    connect_ctl(&x, url ? url : cfg->redis_url, cfg);
    if (!strcmp(cmd, "enqueue"))
        rc = cmd_enqueue(&x, argc, argv);
    else if (!strcmp(cmd, "enqueue-bulk"))
        rc = cmd_enqueue_bulk(&x, argc, argv);
    else if (!strcmp(cmd, "show"))
        rc = cmd_show(&x, argv[0]);
    else if (!strcmp(cmd, "cancel")) {
        const char *a[2] = {argv[0], "dtqctl"};
        rc = simple(&x, "cancel", 2, a);
    } else if (!strcmp(cmd, "pause") || !strcmp(cmd, "resume")) {
        const char *a[2] = {argv[0], "dtqctl"};
        rc = simple(&x, cmd, 2, a);
    } else if (!strcmp(cmd, "dlq")) {
        if (!strcmp(argv[0], "list"))
            rc = cmd_dlq_list(&x, argc - 1, argv + 1);
        else if (!strcmp(argv[0], "requeue") || !strcmp(argv[0], "discard")) {
            const char *a[2] = {argv[1], "dtqctl"};
            rc = simple(&x, argv[0], 2, a);
        } else if (!strcmp(argv[0], "requeue-all")) {
            rc = cmd_requeue_all(&x);
        } else {
            const char *a[1] = {"dtqctl"};
            rc = simple(&x, "purge_dlq", 1, a);
        }
    } else if (!strcmp(cmd, "queues"))
        rc = cmd_stats(&x, 1);
    else if (!strcmp(cmd, "stats"))
        rc = cmd_stats(&x, 0);
    else if (!strcmp(cmd, "workers"))
        rc = cmd_workers(&x);
    else if (!strcmp(cmd, "functions"))
        rc = cmd_functions_install(&x);
    else
        rc = cmd_events(&x);
    disconnect_ctl(&x);
    free(x.prefix);
    dtq_config_free(cfg);
    return rc;
}
