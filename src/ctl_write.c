/* ctl_write.c: dtqctl's write verbs, each one a Function: enqueue, enqueue-bulk, cancel,
 * pause, resume, dlq requeue | requeue-all | discard | purge, and functions install (the
 * library itself). The admin Functions get the actor "dtqctl". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "reply_class.h"
#include "scripts.h"
#include "task.h"
#include "util.h"

/* A flag of enqueue / enqueue-bulk and the Function option it becomes. */
typedef struct flag_opt {
    const char *flag, *opt;
} flag_opt;

static const flag_opt task_opts[] = {{"--priority", "priority"},
                                     {"--delay-ms", "delay_ms"},
                                     {"--max-attempts", "max_attempts"},
                                     {"--timeout-ms", "timeout_ms"},
                                     {"--ttl-seconds", "ttl_seconds"},
                                     {"--limit-key", "limit_key"},
                                     /* enqueue only: */
                                     {"--idempotency-key", "idempotency_key"},
                                     {"--id", "task_id"},
                                     {"--after", "after"},
                                     {"--on-failure", "on_failure"},
                                     {"--batch", "batch"},
                                     {"--unique-for", "unique_for"},
                                     {"--unique-key", "unique_key"},
                                     {"--unique-mode", "unique_mode"}};
#define NBULK_OPTS 6 /* enqueue-bulk takes the first six */
#define NTASK_OPTS (sizeof(task_opts) / sizeof(task_opts[0]))

/* The option of a flag among the first n, or NULL. */
static const char *flag_option(const char *flag, size_t n) {
    for (size_t j = 0; j < n; j++)
        if (!strcmp(flag, task_opts[j].flag)) return task_opts[j].opt;
    return NULL;
}

/* The one-word replies (queued, cancelled, paused, counts...). */
static void print_simple(ctl *x, const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) {
        printf("%lld\n", r->integer);
    } else if (x->json) {
        cJSON *s = cJSON_CreateString(r->str ? r->str : "");
        ctl_print_json(s);
        cJSON_Delete(s);
    } else {
        printf("%s\n", r->str ? r->str : "");
    }
}

/* cancel | dlq requeue | dlq discard <id> [--queue Q]: the row's Function about the id (in
 * the cluster layout, in the slot of Q). */
int ctl_simple(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *queue = ctl_take_queue(v->name, &argc, argv), *a[2];
    redisReply *r;
    if (argc != 1) ctl_verb_usage(v);
    queue = ctl_id_queue(x, queue);
    a[0] = argv[0];
    a[1] = CTL_ACTOR;
    r = ctl_fcall(x, 0, queue, v->fn, 2, a);
    print_simple(x, r);
    freeReplyObject(r);
    return 0;
}

/* `<verb> N <what>` (`purged 3 dead letters`), or under --json {"<verb>": N}: what a verb
 * that counts did, never a bare number. */
static void print_count(ctl *x, const char *verb, long long n, const char *what) {
    if (x->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, verb, (double)n);
        ctl_print_json(o);
        cJSON_Delete(o);
    } else {
        printf("%s %lld %s%s\n", verb, n, what, n == 1 ? "" : "s");
    }
}

/* dlq purge: <ns>_purge_dlq, the dead letters of every queue (the cluster layout: one call
 * per queue of the index); prints how many it deleted. */
int ctl_purge_dlq(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[1] = {CTL_ACTOR};
    long long total = 0;
    int n;
    char **scopes = ctl_scopes(x, &n);
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    for (int i = 0; i < n; i++) {
        redisReply *r = ctl_fcall(x, 0, scopes[i], "purge_dlq", 1, a);
        if (r->type != REDIS_REPLY_INTEGER) ctl_refused("unexpected reply to %s_purge_dlq", x->ns);
        total += r->integer;
        freeReplyObject(r);
    }
    dtq_scope_names_free(scopes, n);
    print_count(x, "purged", total, "dead letter");
    return 0;
}

/* pause|resume <queue> [--create]: <ns>_pause / <ns>_resume with the actor, and `create`
 * with --create (a queue no task has used is refused without it: NOT_FOUND, exit 1). */
int ctl_pause_resume(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[3] = {NULL, CTL_ACTOR, "create"}, *queue = NULL;
    int create = 0;
    redisReply *r;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--create"))
            create = 1;
        else if (!queue && argv[i][0] != '-')
            queue = argv[i];
        else
            ctl_usage_error("%s: bad argument '%s'", v->name, argv[i]);
    }
    if (!queue) ctl_usage_error("usage: dtqctl %s <queue> [options]", v->name);
    a[0] = queue;
    r = ctl_fcall_reply(x, 0, queue, v->fn, create ? 3 : 2, a);
    /* reply-text: the Function's NOT_FOUND says which thing is missing only in its text */
    if (r->type == REDIS_REPLY_ERROR && dtq_reply_class_of(r->str) == DTQ_REPLY_NOT_FOUND &&
        !strncmp(dtq_reply_detail(r->str), "queue ", 6)) {
        const char *cut = strstr(r->str, " (pass create"); /* reply-text: the hint is ours */
        ctl_refused("%.*s: no task has used it; 'dtqctl %s --create %s' %ss it anyway",
                    cut ? (int)(cut - r->str) : (int)strlen(r->str), r->str, v->name, queue,
                    v->name);
    }
    if (r->type == REDIS_REPLY_ERROR) ctl_refused("%s", r->str);
    if (create) ctl_queue_index_add(x, queue);
    print_simple(x, r);
    freeReplyObject(r);
    return 0;
}

/* The requeue-all loop of one queue's dead letters (NULL: the namespace's); how many it
 * requeued. */
static long long requeue_all_of(ctl *x, const char *queue) {
    char *cursor = dtq_xstrdup("-");
    long long total = 0;
    while (cursor) {
        const char *a[3] = {"", CTL_ACTOR, cursor};
        redisReply *r = ctl_fcall(x, 0, queue, "requeue_dlq", 3, a);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
            r->element[0]->type != REDIS_REPLY_INTEGER)
            ctl_refused("requeue_dlq: unexpected reply");
        total += r->element[0]->integer;
        free(cursor);
        cursor = r->element[1]->type == REDIS_REPLY_STRING ? dtq_xstrdup(r->element[1]->str) : NULL;
        freeReplyObject(r);
    }
    return total;
}

/* dlq requeue-all: <ns>_requeue_dlq's cursor loop ([requeued, next_cursor|nil, skipped]),
 * over the entries the stream held when it began (a task that fails again at once is
 * left for the next loop); in the cluster layout the loop of each queue of the index. */
int ctl_requeue_all(ctl *x, const ctl_verb *v, int argc, char **argv) {
    long long total = 0;
    int n;
    char **scopes = ctl_scopes(x, &n);
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    for (int i = 0; i < n; i++) total += requeue_all_of(x, scopes[i]);
    dtq_scope_names_free(scopes, n);
    print_count(x, "requeued", total, "dead letter");
    return 0;
}

/* After an enqueue into `queue`: a warning on stderr when no live worker serves it
 * (<ns>_served), for the task waits until one does; also with no live worker at all.
 * Nothing when a live worker does not say what it serves (one older than the field: it may
 * serve the queue), or when the call is refused: the enqueue succeeded either way. */
static void warn_unserved(ctl *x, const char *queue) {
    const char *a[1] = {queue};
    redisReply *r = ctl_fcall_reply(x, 1, NULL, "served", 1, a);
    if (!r) return; /* the shared slot did not answer (warned) */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 0 &&
        r->element[1]->integer == 0)
        fprintf(stderr,
                "dtqctl: warning: no live worker serves queue '%s' (%lld worker%s live): the "
                "task waits until one does\n",
                queue, r->element[2]->integer, r->element[2]->integer == 1 ? "" : "s");
    freeReplyObject(r);
}

/* WAIT n after a write: how many replicas have it (timeout: [redis] wait_timeout_ms). */
static long long wait_replicas(ctl *x, long long n, int64_t timeout_ms) {
    char ns[32], ts[32];
    const char *argv[3] = {"WAIT", ns, ts};
    redisReply *r;
    long long got;
    snprintf(ns, sizeof(ns), "%lld", n);
    snprintf(ts, sizeof(ts), "%lld", (long long)timeout_ms);
    /* WAIT blocks in Redis for up to timeout_ms: --timeout counts on top of it */
    dtq_rsync_set_reply_timeout(x->conn, x->timeout_ms + timeout_ms);
    r = ctl_command(x, 3, argv);
    dtq_rsync_set_reply_timeout(x->conn, x->timeout_ms);
    if (r->type != REDIS_REPLY_INTEGER)
        ctl_refused("WAIT: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    got = r->integer;
    freeReplyObject(r);
    return got;
}

/* enqueue --wait: <ns>_task_view (no events) until the task is terminal, then printed as
 * `show` prints it. Exit 1 unless it succeeded; with a timeout (timeout_ms > 0) that runs
 * out first, a line on stderr and CTL_EXIT_TIMEOUT. */
static int wait_task(ctl *x, const char *queue, const char *id, int64_t timeout_ms,
                     const char *timeout_s) {
    const char *a[2] = {id, "0"};
    int64_t end = timeout_ms > 0 ? dtq_monotonic_ms() + timeout_ms : 0;
    for (;;) {
        redisReply *r = ctl_fcall_reply(x, 1, queue, "task_view", 2, a);
        cJSON *view, *st;
        if (r->type == REDIS_REPLY_ERROR) {
            if (dtq_reply_class_of(r->str) == DTQ_REPLY_NOT_FOUND)
                ctl_refused("task %s disappeared", id);
            ctl_refused("%s", r->str);
        }
        view = r->type == REDIS_REPLY_STRING ? cJSON_ParseWithLength(r->str, r->len) : NULL;
        st = cJSON_GetObjectItemCaseSensitive(view, "status");
        if (!cJSON_IsString(st)) ctl_refused("unexpected reply to %s_task_view", x->ns);
        if (dtq_task_status_is_terminal(st->valuestring)) {
            int failed = strcmp(st->valuestring, "succeeded") != 0;
            ctl_show_task(x, r->str, r->len);
            cJSON_Delete(view);
            freeReplyObject(r);
            return failed;
        }
        if (end && dtq_monotonic_ms() >= end) {
            fflush(stdout);
            fprintf(stderr, "dtqctl: task %s is still %s after --timeout %s s\n", id,
                    st->valuestring, timeout_s);
            cJSON_Delete(view);
            freeReplyObject(r);
            return CTL_EXIT_TIMEOUT;
        }
        cJSON_Delete(view);
        freeReplyObject(r);
        usleep(50000);
    }
}

int ctl_enqueue(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char **args = dtq_xcalloc((size_t)argc * 2 + 4, sizeof(char *));
    x->shared_optional = 1; /* an enqueue into a healthy queue needs no shared slot */
    char uuid[37];
    int n = 0, wait = 0, have_id = 0, short_of_replicas = 0, failed = 0;
    int64_t want_replicas = 0, timeout_ms = 0;
    const char *timeout_s = NULL;
    long long replicas = -1;
    redisReply *r;
    DTQ_UNUSED(v);
    args[n++] = argv[0];
    args[n++] = argv[1];
    args[n++] = argv[2];
    for (int i = 3; i < argc; i++) {
        const char *opt;
        if (!strcmp(argv[i], "--wait")) {
            wait = 1;
            continue;
        }
        if (!strcmp(argv[i], "--timeout")) {
            if (i + 1 >= argc) ctl_usage_error("enqueue: --timeout needs a value");
            timeout_s = argv[++i];
            timeout_ms = ctl_parse_seconds("enqueue: --timeout", timeout_s, 31536000.0);
            continue;
        }
        if (!strcmp(argv[i], "--wait-replicas")) {
            if (i + 1 >= argc || dtq_parse_int64(argv[i + 1], 1, 64, &want_replicas) != DTQ_OK)
                ctl_usage_error("enqueue: --wait-replicas needs a number of replicas in [1, 64]");
            i++;
            continue;
        }
        opt = flag_option(argv[i], NTASK_OPTS);
        if (!opt) ctl_usage_error("enqueue: unknown option '%s'", argv[i]);
        if (i + 1 >= argc) ctl_usage_error("enqueue: %s needs a value", argv[i]);
        if (!strcmp(opt, "task_id")) have_id = 1;
        args[n++] = opt;
        args[n++] = argv[++i];
    }
    if (timeout_s && !wait) ctl_usage_error("enqueue: --timeout goes with --wait");
    if (!have_id) { /* ids minted by dtqctl are UUIDv4 (SPEC 3) */
        dtq_uuid4(uuid);
        args[n++] = "task_id";
        args[n++] = uuid;
    }
    r = ctl_fcall(x, 0, argv[0], "enqueue", n, args);
    free(args);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        ctl_refused("unexpected reply to enqueue");
    if (want_replicas) { /* on the same connection (node), right after the FCALL */
        replicas = wait_replicas(x, want_replicas, x->wait_timeout_ms);
        short_of_replicas = replicas < want_replicas;
    }
    /* the id at once, --wait or not, and flushed: a pipe sees it before the wait ends */
    if (x->json) {
        if (replicas >= 0)
            printf("{\"task_id\":\"%s\",\"result\":\"%s\",\"replicas\":%lld}\n", r->element[0]->str,
                   r->element[1]->str, replicas);
        else
            printf("{\"task_id\":\"%s\",\"result\":\"%s\"}\n", r->element[0]->str,
                   r->element[1]->str);
    } else {
        printf("%s %s\n", r->element[0]->str, r->element[1]->str);
    }
    fflush(stdout);
    ctl_queue_index_add(x, argv[0]); /* after the WAIT: that goes where the FCALL went */
    warn_unserved(x, argv[0]);
    if (short_of_replicas) {
        fprintf(stderr,
                "dtqctl: the enqueue reached %lld of %lld replica(s) within %lld ms: a failover "
                "now could lose it\n",
                replicas, (long long)want_replicas, (long long)x->wait_timeout_ms);
    }
    if (wait) failed = wait_task(x, argv[0], r->element[0]->str, timeout_ms, timeout_s);
    freeReplyObject(r);
    if (failed == CTL_EXIT_TIMEOUT) return CTL_EXIT_TIMEOUT;
    return failed || short_of_replicas ? CTL_EXIT_REFUSED : 0;
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
    r = ctl_fcall(x, 0, args[0], "enqueue_bulk", 3 + n + nopts, a);
    free(a);
    if (r->type != REDIS_REPLY_ARRAY || (int)r->elements != n)
        ctl_refused("unexpected reply to enqueue_bulk");
    for (int i = 0; i < n; i++) {
        /* the reply is flat: the id of the task created, or that payload's error */
        const redisReply *e = r->element[i];
        int ok = e->type == REDIS_REPLY_STRING;
        if (!ok) refusedn++;
        if (json_out) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "line", (double)lines[i]);
            if (ok) {
                cJSON_AddStringToObject(o, "task_id", e->str);
                cJSON_AddStringToObject(o, "result", "created");
            } else {
                cJSON_AddStringToObject(o, "error", e->str ? e->str : "?");
            }
            cJSON_AddItemToArray(json_out, o);
        } else if (ok) {
            printf("%s created\n", e->str);
        } else {
            fprintf(stderr, "dtqctl: line %ld: %s\n", lines[i], e->str ? e->str : "?");
        }
    }
    freeReplyObject(r);
    return refusedn;
}

/* enqueue-bulk <queue> <task_type> [options]: one JSON payload per line of stdin, sent in
 * chunks of BULK_CHUNK through <ns>_enqueue_bulk (one Function call per chunk). */
int ctl_enqueue_bulk(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char **args = dtq_xcalloc((size_t)argc * 2 + 2, sizeof(char *));
    x->shared_optional = 1; /* as enqueue: the shared slot is not needed */
    char **payloads = dtq_xcalloc(BULK_CHUNK, sizeof(char *));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, lines[BULK_CHUNK];
    int nargs = 2, n = 0, refusedn = 0;
    cJSON *json_out = x->json ? cJSON_CreateArray() : NULL;
    DTQ_UNUSED(v);
    args[0] = argv[0];
    args[1] = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *opt = flag_option(argv[i], NBULK_OPTS);
        if (!opt) ctl_usage_error("enqueue-bulk: unknown option '%s'", argv[i]);
        if (i + 1 >= argc) ctl_usage_error("enqueue-bulk: %s needs a value", argv[i]);
        args[nargs++] = opt;
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
    if (lineno) {
        ctl_queue_index_add(x, argv[0]);
        warn_unserved(x, argv[0]);
    }
    if (json_out) {
        ctl_print_json(json_out);
        cJSON_Delete(json_out);
    }
    free(line);
    free(payloads);
    free(args);
    return refusedn ? CTL_EXIT_REFUSED : 0;
}

/* functions install: the library the daemon would load, for this namespace and key prefix,
 * and the namespace's layout marker. For deployments whose workers may not FUNCTION LOAD (dtqctl
 * acl worker): they check that the installed library's <ns>_version is their own. */
/* FUNCTION LOAD REPLACE of `lib` on the node that serves `slot` (-1: the one connection). */
static void load_library(ctl *x, const char *lib, int slot) {
    const char *a[4] = {"FUNCTION", "LOAD", "REPLACE", lib};
    char why[512];
    redisReply *r = slot < 0 ? ctl_command(x, 4, a) /* the library text holds no NUL */
                             : dtq_rsync_command_slot(x->conn, slot, 4, a, NULL, why, sizeof(why));
    if (!r) ctl_link_failed(x, why);
    if (r->type == REDIS_REPLY_ERROR) ctl_refused("FUNCTION LOAD: %s", r->str);
    freeReplyObject(r);
}

/* functions install: the library on the one Redis, or on every primary of a cluster (a
 * Function runs on the node that serves its keys; a replica gets it by replication). */
int ctl_functions_install(ctl *x, const ctl_verb *v, int argc, char **argv) {
    size_t len;
    char *lib = dtq_scripts_library(x->ns, x->prefix, &len);
    int nodes = 1;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    DTQ_UNUSED(len);
    if (dtq_rsync_is_cluster(x->conn)) {
        const dtq_cluster_map *m = dtq_rsync_cluster_map(x->conn);
        nodes = 0;
        for (int p = 0; m && p < m->nprimaries; p++)
            for (int i = 0; i < m->nranges; i++)
                if (m->ranges[i].primary == m->primaries[p]) {
                    load_library(x, lib, m->ranges[i].start);
                    nodes++;
                    break;
                }
        if (!nodes)
            ctl_refused("the cluster serves no slot yet: no primary to load the library on");
    } else {
        load_library(x, lib, -1);
    }
    free(lib);
    /* the layout marker, which only the daemon and admins may write: a producer, who may
     * only read it, then finds it in place. A single Redis only: on a cluster the library
     * serves both layouts (the single one with cluster_hash_tag), the first client decides */
    if (!x->cluster) ctl_check_layout(x);
    if (x->json)
        printf("{\"library\":\"%s\",\"version\":\"%s\",\"primaries\":%d}\n", x->ns,
               dtq_scripts_version(), nodes);
    else if (dtq_rsync_is_cluster(x->conn))
        printf("installed library %s version %s on %d primaries\n", x->ns, dtq_scripts_version(),
               nodes);
    else
        printf("installed library %s version %s\n", x->ns, dtq_scripts_version());
    return 0;
}

/* pool restart NAME: <ns>_pool_restart stores the request's time; every daemon with a
 * [pool:NAME] replaces its processes one at a time at its next heartbeat. */
int ctl_pool_restart(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[2] = {CTL_ACTOR, argv[0]};
    redisReply *r;
    DTQ_UNUSED(argc);
    r = ctl_fcall(x, 0, NULL, v->fn, 2, a);
    if (x->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "pool", argv[0]);
        cJSON_AddNumberToObject(o, "requested_ms", (double)r->integer);
        ctl_print_json(o);
        cJSON_Delete(o);
    } else {
        printf("restart of pool %s requested: every daemon running it replaces its processes one "
               "at a time within a heartbeat interval\n",
               argv[0]);
    }
    freeReplyObject(r);
    return 0;
}
