/* ctl_read.c: dtqctl's read verbs. Each renders a read Function's reply (one JSON text,
 * docs/reference.md 5.5), called with FCALL_RO: show (<ns>_task_view), queues
 * (<ns>_overview), workers (<ns>_workers), dlq list (<ns>_dead_letters, page by page);
 * stats renders <ns>_stats and events follows the events channel. --json prints numbers
 * as JSON numbers (docs/reference.md 14 gives the shapes); show's text gives times in
 * ISO 8601 UTC and indents the continuation lines of a value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "keys.h"
#include "util.h"
#include "view_merge.h"

static cJSON *member(const cJSON *o, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

/* A member's string, or `dflt`. */
static const char *str_of(const cJSON *o, const char *name, const char *dflt) {
    const cJSON *v = member(o, name);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static long long num_of(const cJSON *o, const char *name) {
    const cJSON *v = member(o, name);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
}

/* ----------------------------------------------------------------- show */

/* The end of the JSON value that starts at p (before end), or NULL. Only for the reply of
 * a read Function, which cJSON has already taken as valid JSON. */
static const char *value_end(const char *p, const char *end) {
    int depth = 0;
    do {
        if (p >= end) return NULL;
        if (*p == '"') {
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\') p++;
            if (p >= end) return NULL;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        } else if (depth == 0) { /* a number, true, false or null */
            while (p + 1 < end && !strchr(",}] \t\r\n", p[1])) p++;
        }
        p++;
    } while (depth > 0);
    return p;
}

static const char *skip_space(const char *p, const char *end) {
    while (p < end && strchr(" \t\r\n", *p)) p++;
    return p;
}

/* The text of the top-level member `name` of the JSON object text (a member whose name
 * holds no escape), *vlen its length; NULL when there is none. */
static const char *member_text(const char *text, size_t len, const char *name, size_t *vlen) {
    const char *p = skip_space(text, text + len), *end = text + len;
    size_t nlen = strlen(name);
    if (p >= end || *p != '{') return NULL;
    p++;
    for (;;) {
        const char *k, *kend, *vend;
        p = skip_space(p, end);
        if (p >= end || *p != '"') return NULL;
        k = p + 1;
        kend = value_end(p, end);
        if (!kend) return NULL;
        p = skip_space(kend, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_space(p + 1, end);
        vend = value_end(p, end);
        if (!vend) return NULL;
        if ((size_t)(kend - 1 - k) == nlen && !memcmp(k, name, nlen)) {
            *vlen = (size_t)(vend - p);
            return p;
        }
        p = skip_space(vend, end);
        if (p >= end || *p != ',') return NULL;
        p++;
    }
}

/* The task hash fields in the order of docs/reference.md 3.2; others follow these, in
 * the order of the reply. */
static const char *const task_fields[] = {"id",
                                          "queue",
                                          "task_type",
                                          "payload",
                                          "status",
                                          "attempt",
                                          "max_attempts",
                                          "timeout_ms",
                                          "priority",
                                          "created_at",
                                          "updated_at",
                                          "started_at",
                                          "finished_at",
                                          "worker_id",
                                          "last_error",
                                          "last_error_class",
                                          "idempotency_key",
                                          "ttl_seconds",
                                          "cancel_requested",
                                          "metadata",
                                          "result_truncated",
                                          "own_max_attempts",
                                          "own_timeout_ms",
                                          "carrier",
                                          "source",
                                          "dlq_entry",
                                          NULL};

static int known_field(const char *name) {
    for (const char *const *f = task_fields; *f; f++)
        if (!strcmp(*f, name)) return 1;
    return 0;
}

static int in_list(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return 1;
    return 0;
}

/* The task fields that hold integers (reference 3.2): JSON numbers in show --json. */
static const char *const task_numbers[] = {
    "attempt",          "max_attempts",     "timeout_ms",     "priority",    "created_at",
    "updated_at",       "started_at",       "finished_at",    "ttl_seconds", "cancel_requested",
    "result_truncated", "own_max_attempts", "own_timeout_ms", NULL};

/* The task fields that hold times (epoch ms): ISO 8601 UTC in show's text. */
static const char *const task_times[] = {"created_at", "updated_at", "started_at", "finished_at",
                                         NULL};

/* The dead-letter entry fields that hold integers (reference 8). */
static const char *const dlq_numbers[] = {
    "attempt",      "max_attempts",  "priority",  "timeout_ms",
    "failed_at_ms", "attempts_made", "retryable", NULL};

#define MAX_SAFE_INT 9007199254740992.0 /* 2^53: every integer up to it is exact in JSON */

/* Whether s is an integer as JSON writes it (no sign but '-', no leading zero) whose
 * magnitude is at most 2^53; *v its value. */
static int plain_int(const char *s, long long *v) {
    const char *p = s + (*s == '-');
    size_t n = strspn(p, "0123456789");
    if (n == 0 || n > 16 || p[n] || (p[0] == '0' && n > 1)) return 0;
    *v = strtoll(s, NULL, 10);
    return (double)llabs(*v) <= MAX_SAFE_INT;
}

/* A stored value of an integer field as JSON: the number, null when empty, else the
 * string as it is (a value dtq did not write). */
static cJSON *json_int_field(const char *value) {
    long long v;
    if (plain_int(value, &v)) return cJSON_CreateRaw(value);
    if (!*value) return cJSON_CreateNull();
    return cJSON_CreateString(value);
}

const char *ctl_iso_time(const char *value, char *buf, size_t size) {
    long long ms;
    struct tm tm;
    time_t secs;
    char date[32];
    if (!plain_int(value, &ms) || ms < 0) return NULL;
    secs = (time_t)(ms / 1000);
    if (!gmtime_r(&secs, &tm) || !strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm))
        return NULL;
    snprintf(buf, size, "%s.%03lldZ (%lld)", date, ms % 1000, ms);
    return buf;
}

#define SHOW_COLUMN 19 /* where show's values start */

/* "name  value": a value of several lines goes on under its first (continuation lines
 * indented to the value's column). */
static void show_line(const char *name, const char *value, size_t len) {
    printf("%-18s ", name);
    for (size_t i = 0; i < len; i++) {
        putchar(value[i]);
        if (value[i] == '\n' && i + 1 < len && value[i + 1] != '\n') printf("%*s", SHOW_COLUMN, "");
    }
    putchar('\n');
}

/* One field of the task: a "field value" line (times as ISO 8601 UTC and epoch ms), or a
 * member of `out` (--json; the integer fields as numbers). */
static void show_field(cJSON *out, const char *name, const char *value) {
    char buf[96];
    const char *t;
    if (out) {
        cJSON_AddItemToObject(out, name,
                              in_list(task_numbers, name) ? json_int_field(value)
                                                          : cJSON_CreateString(value));
        return;
    }
    t = in_list(task_times, name) ? ctl_iso_time(value, buf, sizeof(buf)) : NULL;
    show_line(name, t ? t : value, strlen(t ? t : value));
}

/* due_at: when a delayed (pending) or retrying task is due, from the view's due_ms (in
 * the schedule; due_claimed: a scheduler pass is enqueueing it, due_ms the claim time). */
static void show_due(cJSON *out, const cJSON *view) {
    const cJSON *due = member(view, "due_ms");
    int claimed = cJSON_IsTrue(member(view, "due_claimed"));
    char ms[32], buf[160];
    if (!cJSON_IsNumber(due)) return;
    snprintf(ms, sizeof(ms), "%lld", (long long)due->valuedouble);
    if (out) {
        cJSON_AddItemToObject(out, "due_at", cJSON_CreateRaw(ms));
        cJSON_AddBoolToObject(out, "due_claimed", claimed);
        return;
    }
    if (!ctl_iso_time(ms, buf, sizeof(buf))) snprintf(buf, sizeof(buf), "%s", ms);
    if (claimed)
        snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), ", claimed by the scheduler");
    show_line("due_at", buf, strlen(buf));
}

void ctl_show_task(ctl *x, const char *text, size_t len) {
    cJSON *view = cJSON_ParseWithLength(text, len), *fields, *f;
    cJSON *out = x->json ? cJSON_CreateObject() : NULL;
    const cJSON *result, *is_json;
    fields = member(view, "fields");
    if (!cJSON_IsObject(fields)) ctl_refused("unexpected reply to %s_task_view", x->ns);
    for (const char *const *k = task_fields; *k; k++) {
        const char *v = str_of(fields, *k, NULL);
        if (v) show_field(out, *k, v);
        if (!strcmp(*k, "status")) show_due(out, view);
    }
    cJSON_ArrayForEach(f, fields) {
        if (cJSON_IsString(f) && !known_field(f->string))
            show_field(out, f->string, f->valuestring);
    }
    /* the result: JSON (--json: the value; text: as stored), else text (--json: null) */
    result = member(view, "result");
    is_json = member(view, "result_is_json");
    if (out) {
        cJSON_AddItemToObject(
            out, "result", cJSON_IsTrue(is_json) ? cJSON_Duplicate(result, 1) : cJSON_CreateNull());
        ctl_print_json(out);
        cJSON_Delete(out);
    } else if (cJSON_IsTrue(is_json)) {
        size_t vlen;
        const char *v = member_text(text, len, "result", &vlen);
        if (!v) ctl_refused("unexpected reply to %s_task_view", x->ns);
        show_line("result", v, vlen);
    } else {
        const char *v = cJSON_IsString(result) ? result->valuestring : "null";
        show_line("result", v, strlen(v));
    }
    cJSON_Delete(view);
}

/* show <id> [--queue Q]: <ns>_task_view without its events. */
int ctl_show(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *queue = ctl_take_queue(v->name, &argc, argv), *a[2] = {argv[0], "0"};
    redisReply *r;
    if (argc != 1) ctl_verb_usage(v);
    a[0] = argv[0];
    r = ctl_fcall(x, 1, ctl_id_queue(x, queue), "task_view", 2, a);
    if (r->type != REDIS_REPLY_STRING) ctl_refused("unexpected reply to %s_task_view", x->ns);
    ctl_show_task(x, r->str, r->len);
    freeReplyObject(r);
    return 0;
}

/* ----------------------------------------------------------------- queues, workers */

/* A list the read model cut at its cap (queues_truncated, workers_truncated): said on
 * stderr, so that a table is not taken for the whole. */
static void note_truncated(const cJSON *o, const char *flag, const char *what) {
    if (cJSON_IsTrue(member(o, flag)))
        fprintf(stderr, "dtqctl: only the first %d %s (by name) are listed\n",
                cJSON_GetArraySize(member(o, what)), what);
}

/* The rows of one <ns>_overview's queues: a line each, or into arr. */
static void queue_rows(const cJSON *ov, cJSON *arr) {
    const cJSON *q;
    cJSON_ArrayForEach(q, member(ov, "queues")) {
        const char *name = str_of(q, "name", "?"), *mode = str_of(q, "mode", "full");
        int paused = cJSON_IsTrue(member(q, "paused")), lean = !strcmp(mode, "lean");
        if (arr) {
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "queue", name);
            cJSON_AddNumberToObject(row, "depth", (double)num_of(q, "depth"));
            cJSON_AddNumberToObject(row, "pending", (double)num_of(q, "pending"));
            cJSON_AddNumberToObject(row, "scheduled", (double)num_of(q, "scheduled"));
            cJSON_AddBoolToObject(row, "paused", paused);
            cJSON_AddStringToObject(row, "mode", mode);
            cJSON_AddItemToArray(arr, row);
        } else { /* the last column: paused, lean, both (space separated) or nothing */
            printf("%-24s %10lld %10lld %10lld %s%s%s\n", name, num_of(q, "depth"),
                   num_of(q, "pending"), num_of(q, "scheduled"), paused ? "paused" : "",
                   paused && lean ? " " : "", lean ? "lean" : "");
        }
    }
}

/* The overview's merge with no cap of its own (each call's cap is said by its
 * queues_truncated). */
static cJSON *merge_overview(cJSON *const *parts, int n) {
    return dtq_view_merge_overview(parts, n, -1);
}

/* queues: the queues of <ns>_overview (the cluster layout: of one call per queue of the
 * index, merged by view_merge.c's rule: by name). */
int ctl_queues(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *arr = x->json ? cJSON_CreateArray() : NULL;
    cJSON *ov;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    if (!x->json) printf("%-24s %10s %10s %10s %s\n", "QUEUE", "DEPTH", "PENDING", "SCHEDULED", "");
    ov = ctl_read_merged(x, "overview", 0, NULL, 0, NULL, merge_overview);
    queue_rows(ov, arr);
    note_truncated(ov, "queues_truncated", "queues");
    cJSON_Delete(ov);
    if (arr) {
        ctl_print_json(arr);
        cJSON_Delete(arr);
    }
    return 0;
}

/* The members of a worker object in the order workers --json gives them; others follow,
 * then queues. */
static const char *const worker_order[] = {"hostname",
                                           "pid",
                                           "status",
                                           "version",
                                           "started_at",
                                           "last_heartbeat",
                                           "heartbeat_age_ms",
                                           "concurrency",
                                           "active_tasks",
                                           "tasks_processed",
                                           "tasks_failed",
                                           "tasks_retried",
                                           NULL};

/* A worker object of the read model as workers --json prints it: worker_id (the model's
 * id), the members in worker_order (numbers stay numbers), any others, then queues
 * ({"<queue>": {"succeeded": n, ...}}). */
static cJSON *worker_json(const cJSON *w) {
    cJSON *o = cJSON_CreateObject(), *f;
    const cJSON *q = member(w, "queues");
    cJSON_AddStringToObject(o, "worker_id", str_of(w, "id", ""));
    for (const char *const *k = worker_order; *k; k++)
        if (member(w, *k)) cJSON_AddItemToObject(o, *k, cJSON_Duplicate(member(w, *k), 1));
    cJSON_ArrayForEach(f, w) {
        if (strcmp(f->string, "id") && strcmp(f->string, "queues") &&
            !in_list(worker_order, f->string))
            cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, 1));
    }
    cJSON_AddItemToObject(o, "queues",
                          cJSON_IsObject(q) ? cJSON_Duplicate(q, 1) : cJSON_CreateObject());
    return o;
}

/* workers: <ns>_workers, sorted by id. */
int ctl_workers(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *ws = ctl_read_model(x, NULL, "workers", 0, NULL), *w, *pool;
    cJSON *arr = x->json ? cJSON_CreateArray() : NULL;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    if (!x->json)
        printf("%-28s %-20s %8s %8s %10s %-10s %s\n", "WORKER", "HOST", "PID", "ACTIVE", "AGE_S",
               "STATUS", "POOLS");
    cJSON_ArrayForEach(w, member(ws, "workers")) {
        const cJSON *age = member(w, "heartbeat_age_ms");
        char pid[32] = "?", active[32] = "?";
        if (arr) {
            cJSON_AddItemToArray(arr, worker_json(w));
            continue;
        }
        if (cJSON_IsNumber(member(w, "pid"))) snprintf(pid, sizeof(pid), "%lld", num_of(w, "pid"));
        if (cJSON_IsNumber(member(w, "active_tasks")))
            snprintf(active, sizeof(active), "%lld", num_of(w, "active_tasks"));
        printf(member(w, "pools") ? "%-28s %-20s %8s %8s %10.1f %-10s"
                                  : "%-28s %-20s %8s %8s %10.1f %s",
               str_of(w, "id", "?"), str_of(w, "hostname", "?"), pid, active,
               cJSON_IsNumber(age) ? age->valuedouble / 1000.0 : -1.0, str_of(w, "status", "?"));
        /* its pools, ready/wanted: "py 2/2 js 0/2" */
        cJSON_ArrayForEach(pool, member(w, "pools")) {
            printf(" %s %lld/%lld", pool->string, num_of(pool, "ready"), num_of(pool, "wanted"));
        }
        printf("\n");
    }
    if (arr) {
        ctl_print_json(arr);
        cJSON_Delete(arr);
    }
    note_truncated(ws, "workers_truncated", "workers");
    cJSON_Delete(ws);
    return 0;
}

/* ----------------------------------------------------------------- stats */

/* A <ns>_stats reply's name/value pairs as an object (name -> number, or for
 * queue:<q>:mode a word, lean or full), in their order. */
static cJSON *stats_part(ctl *x, const char *queue, const char *fn, int argc, const char **args) {
    redisReply *r = ctl_fcall(x, 1, queue, fn, argc, args);
    cJSON *o = cJSON_CreateObject();
    if (r->type != REDIS_REPLY_ARRAY) ctl_refused("unexpected reply to %s_%s", x->ns, fn);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *name = r->element[i], *val = r->element[i + 1];
        if (name->type != REDIS_REPLY_STRING ||
            (val->type != REDIS_REPLY_INTEGER && val->type != REDIS_REPLY_STRING))
            ctl_refused("unexpected reply to %s_%s", x->ns, fn);
        if (cJSON_GetObjectItemCaseSensitive(o, name->str)) continue;
        if (val->type == REDIS_REPLY_STRING)
            cJSON_AddStringToObject(o, name->str, val->str);
        else
            cJSON_AddNumberToObject(o, name->str, (double)val->integer);
    }
    freeReplyObject(r);
    return o;
}

/* The stats as --json prints them: every queue:<q>:<field> pair under "queues", by queue
 * (a name may hold ':', a field does not), then the namespace's counters as they are. */
static cJSON *stats_nested(const cJSON *flat) {
    cJSON *out = cJSON_CreateObject(), *queues = cJSON_AddObjectToObject(out, "queues");
    const cJSON *f;
    cJSON_ArrayForEach(f, flat) {
        const char *last = strrchr(f->string, ':');
        if (!strncmp(f->string, "queue:", 6) && last && last > f->string + 6) {
            char q[DTQ_NAME_MAX + 1];
            cJSON *one;
            snprintf(q, sizeof(q), "%.*s", (int)(last - f->string - 6), f->string + 6);
            one = cJSON_GetObjectItemCaseSensitive(queues, q);
            if (!one) one = cJSON_AddObjectToObject(queues, q);
            cJSON_AddItemToObject(one, last + 1, cJSON_Duplicate(f, 1));
        } else {
            cJSON_AddItemToObject(out, f->string, cJSON_Duplicate(f, 1));
        }
    }
    return out;
}

/* stats: <ns>_stats's name/value pairs; in the cluster layout one call per queue of the
 * index and one for the global parts (the live workers), merged by view_merge.c's rule.
 * --json: nested per queue (stats_nested). */
int ctl_stats(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *o = ctl_read_merged(x, "stats", 0, NULL, 1, stats_part, dtq_view_merge_stats), *f;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    if (x->json) {
        cJSON *nested = stats_nested(o);
        ctl_print_json(nested);
        cJSON_Delete(nested);
    } else {
        cJSON_ArrayForEach(f, o) {
            if (cJSON_IsString(f))
                printf("%-32s %s\n", f->string, f->valuestring);
            else
                printf("%-32s %.0f\n", f->string, f->valuedouble);
        }
    }
    cJSON_Delete(o);
    return 0;
}

/* ----------------------------------------------------------------- dlq list */

#define DLQ_PAGE_MAX 500 /* <ns>_dead_letters' count cap */

/* One dead letter: a line, or its JSON with the integer fields as numbers. */
static void dlq_entry(ctl *x, cJSON *e, void *arg) {
    DTQ_UNUSED(arg);
    if (x->json) {
        char *out;
        for (cJSON *f = e->child, *after; f; f = after) { /* integers as numbers */
            after = f->next;
            if (cJSON_IsString(f) && in_list(dlq_numbers, f->string))
                cJSON_ReplaceItemInObjectCaseSensitive(e, f->string,
                                                       json_int_field(f->valuestring));
        }
        out = cJSON_PrintUnformatted(e);
        printf("%s", out);
        free(out);
    } else {
        /* the queue: what --queue (cluster layout) and a requeue by redis-cli need */
        printf("%s  %s  %s  attempts=%s  %s\n", str_of(e, "task_id", "?"), str_of(e, "queue", "?"),
               str_of(e, "task_type", "?"), str_of(e, "attempts_made", "?"),
               str_of(e, "last_error", ""));
    }
}

/* Dead-letter pages merged oldest first (view_merge.c's rule). */
static cJSON *merge_oldest(cJSON *const *parts, int n, int count) {
    return dtq_view_merge_stream_pages(parts, n, count, 1);
}

/* dlq list [--count N] [--class C]: the N oldest dead letters (of failure class C alone
 * when given), whole (field_max 0), through <ns>_dead_letters' pages of at most
 * DLQ_PAGE_MAX, each after the cursor of the one before. --json: one array, printed as the
 * pages come. */
int ctl_dlq_list(ctl *x, const ctl_verb *v, int argc, char **argv) {
    long long want = 20;
    const char *cls = "";
    DTQ_UNUSED(v);
    for (int i = 0; i < argc; i++) {
        int64_t n;
        if (!strcmp(argv[i], "--count") && i + 1 < argc &&
            dtq_parse_int64(argv[i + 1], 1, 1000000, &n) == DTQ_OK) {
            want = n;
            i++;
        } else if (!strcmp(argv[i], "--class") && i + 1 < argc) {
            cls = argv[++i];
        } else {
            ctl_usage_error("dlq list: bad argument '%s'", argv[i]);
        }
    }
    {
        const char *a[5] = {NULL, NULL, "oldest", cls, "0"};
        int n;
        char **scopes = ctl_scopes(x, &n);
        ctl_list_merged(x, scopes, n, "dead_letters", 5, a, want, DLQ_PAGE_MAX, merge_oldest,
                        dlq_entry, NULL);
        dtq_scope_names_free(scopes, n);
    }
    return 0;
}

/* ----------------------------------------------------------------- events */

/* events: SUBSCRIBE to the events channel, one event per line until the connection ends
 * (exit 1) or dtqctl is stopped. The cluster layout's channel is {ns}:events, on any node
 * (a cluster's PUBLISH reaches the subscribers of every node). */
int ctl_events(ctl *x, const ctl_verb *v, int argc, char **argv) {
    char *g = x->cluster ? dtq_keys_global_prefix(x->ns) : NULL;
    char *ch = dtq_key_events_channel(g ? g : x->prefix);
    const char *a[2] = {"SUBSCRIBE", ch};
    redisReply *r = ctl_command(x, 2, a);
    free(g);
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    freeReplyObject(r);
    free(ch);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        r = ctl_read(x);
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[2]->str)
            printf("%s\n", r->element[2]->str);
        freeReplyObject(r);
    }
    return 0; /* not reached: ctl_read exits when the connection ends */
}
