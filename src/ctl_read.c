/* ctl_read.c: dtqctl's read verbs. Each renders a read Function's reply (one JSON text,
 * docs/reference.md 5.5), called with FCALL_RO: show (<ns>_task_view), queues
 * (<ns>_overview), workers (<ns>_workers), dlq list (<ns>_dead_letters, page by page);
 * stats renders <ns>_stats and events follows the events channel. The text and --json
 * outputs are those dtqctl printed when it read the keys itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "keys.h"
#include "util.h"

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

/* One field of the task: a "field value" line, or a member of `out` (--json). */
static void show_field(cJSON *out, const char *name, const char *value) {
    if (out)
        cJSON_AddStringToObject(out, name, value);
    else
        printf("%-18s %s\n", name, value);
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
        printf("%-18s %.*s\n", "result", (int)vlen, v);
    } else {
        printf("%-18s %s\n", "result", cJSON_IsString(result) ? result->valuestring : "null");
    }
    cJSON_Delete(view);
}

/* show <id>: <ns>_task_view without its events. */
int ctl_show(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[2] = {argv[0], "0"};
    redisReply *r = ctl_fcall(x, 1, "task_view", 2, a);
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
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

/* queues: the queues of <ns>_overview. */
int ctl_queues(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *ov = ctl_read_model(x, "overview", 0, NULL), *q;
    cJSON *arr = x->json ? cJSON_CreateArray() : NULL;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    if (!x->json) printf("%-24s %10s %10s %10s %s\n", "QUEUE", "DEPTH", "PENDING", "SCHEDULED", "");
    cJSON_ArrayForEach(q, member(ov, "queues")) {
        const char *name = str_of(q, "name", "?");
        int paused = cJSON_IsTrue(member(q, "paused"));
        if (arr) {
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "queue", name);
            cJSON_AddNumberToObject(row, "depth", (double)num_of(q, "depth"));
            cJSON_AddNumberToObject(row, "pending", (double)num_of(q, "pending"));
            cJSON_AddNumberToObject(row, "scheduled", (double)num_of(q, "scheduled"));
            cJSON_AddBoolToObject(row, "paused", paused);
            cJSON_AddItemToArray(arr, row);
        } else {
            printf("%-24s %10lld %10lld %10lld %s\n", name, num_of(q, "depth"),
                   num_of(q, "pending"), num_of(q, "scheduled"), paused ? "paused" : "");
        }
    }
    if (arr) {
        ctl_print_json(arr);
        cJSON_Delete(arr);
    }
    note_truncated(ov, "queues_truncated", "queues");
    cJSON_Delete(ov);
    return 0;
}

/* A worker object of the read model as dtqctl --json has shown workers: the hash as it is
 * in Redis (every value a string, the per-queue counters as q:<queue>:<counter> fields)
 * plus heartbeat_age_s. */
static cJSON *worker_hash(const cJSON *w) {
    cJSON *o = cJSON_CreateObject(), *f, *q, *c;
    const cJSON *age = member(w, "heartbeat_age_ms");
    cJSON_AddStringToObject(o, "worker_id", str_of(w, "id", ""));
    cJSON_ArrayForEach(f, w) {
        char num[32];
        if (!strcmp(f->string, "id") || !strcmp(f->string, "queues") ||
            !strcmp(f->string, "heartbeat_age_ms"))
            continue;
        if (cJSON_IsString(f)) {
            cJSON_AddStringToObject(o, f->string, f->valuestring);
        } else if (cJSON_IsNumber(f)) {
            snprintf(num, sizeof(num), "%lld", (long long)f->valuedouble);
            cJSON_AddStringToObject(o, f->string, num);
        }
    }
    cJSON_ArrayForEach(q, member(w, "queues")) {
        cJSON_ArrayForEach(c, q) {
            char name[512], num[32];
            snprintf(name, sizeof(name), "q:%s:%s", q->string, c->string);
            snprintf(num, sizeof(num), "%lld", (long long)c->valuedouble);
            cJSON_AddStringToObject(o, name, num);
        }
    }
    cJSON_AddNumberToObject(o, "heartbeat_age_s",
                            cJSON_IsNumber(age) ? age->valuedouble / 1000.0 : -1);
    return o;
}

/* workers: <ns>_workers, sorted by id. */
int ctl_workers(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *ws = ctl_read_model(x, "workers", 0, NULL), *w;
    cJSON *arr = x->json ? cJSON_CreateArray() : NULL;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    if (!x->json)
        printf("%-28s %-20s %8s %8s %10s %s\n", "WORKER", "HOST", "PID", "ACTIVE", "AGE_S",
               "STATUS");
    cJSON_ArrayForEach(w, member(ws, "workers")) {
        cJSON *o = worker_hash(w);
        if (arr) {
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        printf("%-28s %-20s %8s %8s %10.1f %s\n", str_of(o, "worker_id", "?"),
               str_of(o, "hostname", "?"), str_of(o, "pid", "?"), str_of(o, "active_tasks", "?"),
               member(o, "heartbeat_age_s")->valuedouble, str_of(o, "status", "?"));
        cJSON_Delete(o);
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

/* stats: <ns>_stats's name/value pairs. */
int ctl_stats(ctl *x, const ctl_verb *v, int argc, char **argv) {
    redisReply *r = ctl_fcall(x, 1, "stats", 0, NULL);
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    DTQ_UNUSED(argv);
    if (r->type != REDIS_REPLY_ARRAY) ctl_refused("unexpected reply to %s_stats", x->ns);
    if (x->json) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            cJSON_AddNumberToObject(o, r->element[i]->str, (double)r->element[i + 1]->integer);
        ctl_print_json(o);
        cJSON_Delete(o);
    } else {
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            printf("%-32s %lld\n", r->element[i]->str, r->element[i + 1]->integer);
    }
    freeReplyObject(r);
    return 0;
}

/* ----------------------------------------------------------------- dlq list */

#define DLQ_PAGE_MAX 500 /* <ns>_dead_letters' count cap */

/* dlq list [--count N]: the N oldest dead letters, whole (field_max 0), through
 * <ns>_dead_letters' pages of at most DLQ_PAGE_MAX, each after the cursor of the one
 * before. --json: one array, printed as the pages come. */
int ctl_dlq_list(ctl *x, const ctl_verb *v, int argc, char **argv) {
    long long want = 20, listed = 0;
    char *cursor = dtq_xstrdup("-");
    DTQ_UNUSED(v);
    for (int i = 0; i < argc; i++) {
        int64_t n;
        if (!strcmp(argv[i], "--count") && i + 1 < argc &&
            dtq_parse_int64(argv[i + 1], 1, 1000000, &n) == DTQ_OK) {
            want = n;
            i++;
        } else {
            ctl_usage_error("dlq list: bad argument '%s'", argv[i]);
        }
    }
    if (x->json) putchar('[');
    while (cursor && listed < want) {
        char count[32];
        const char *a[5] = {cursor, count, "oldest", "", "0"};
        cJSON *page, *e;
        const cJSON *next;
        snprintf(count, sizeof(count), "%lld",
                 want - listed < DLQ_PAGE_MAX ? want - listed : DLQ_PAGE_MAX);
        page = ctl_read_model(x, "dead_letters", 5, a);
        cJSON_ArrayForEach(e, member(page, "entries")) {
            if (x->json) {
                char *out;
                cJSON_DeleteItemFromObjectCaseSensitive(e, "entry_ms");
                out = cJSON_PrintUnformatted(e);
                printf("%s%s", listed ? "," : "", out);
                free(out);
            } else {
                printf("%s  %s  attempts=%s  %s\n", str_of(e, "task_id", "?"),
                       str_of(e, "task_type", "?"), str_of(e, "attempts_made", "?"),
                       str_of(e, "last_error", ""));
            }
            listed++;
        }
        next = member(page, "next_cursor");
        free(cursor);
        cursor = cJSON_IsString(next) ? dtq_xstrdup(next->valuestring) : NULL;
        cJSON_Delete(page);
    }
    free(cursor);
    if (x->json) printf("]\n");
    return 0;
}

/* ----------------------------------------------------------------- events */

/* events: SUBSCRIBE to the events channel, one event per line until the connection ends
 * (exit 1) or dtqctl is stopped. */
int ctl_events(ctl *x, const ctl_verb *v, int argc, char **argv) {
    char *ch = dtq_key_events_channel(x->prefix);
    const char *a[2] = {"SUBSCRIBE", ch};
    redisReply *r = ctl_command(x, 2, a);
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
