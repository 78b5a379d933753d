/* view_merge.c: the read views' parts put together (view_merge.h). */
#include "view_merge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ----------------------------------------------------------------- keys */

int dtq_view_cmp_stream_id(const char *a, const char *b) {
    unsigned long long ma = strtoull(a, NULL, 10), mb = strtoull(b, NULL, 10), sa, sb;
    if (ma != mb) return ma < mb ? -1 : 1;
    sa = strchr(a, '-') ? strtoull(strchr(a, '-') + 1, NULL, 10) : 0;
    sb = strchr(b, '-') ? strtoull(strchr(b, '-') + 1, NULL, 10) : 0;
    return (sa > sb) - (sa < sb);
}

int dtq_view_cmp_sched_key(const char *a, const char *b) {
    unsigned long long da = strtoull(a, NULL, 10), db = strtoull(b, NULL, 10);
    const char *ia = strchr(a, ':'), *ib = strchr(b, ':');
    if (da != db) return da < db ? -1 : 1;
    return strcmp(ia ? ia + 1 : "", ib ? ib + 1 : "");
}

const char *dtq_view_sched_key(const cJSON *e, char *buf, size_t size) {
    const cJSON *due = cJSON_GetObjectItemCaseSensitive(e, "due_ms");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "task_id");
    snprintf(buf, size, "%.0f:%s", cJSON_IsNumber(due) ? due->valuedouble : 0.0,
             cJSON_IsString(id) ? id->valuestring : "");
    return buf;
}

/* ----------------------------------------------------------------- helpers */

static cJSON *member(const cJSON *o, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

static double num(const cJSON *o, const char *name) {
    const cJSON *v = member(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* dst.name = the sum of the parts' (each part's sub-object `sub`, or the part itself). */
static void put_sum(cJSON *dst, cJSON *const *parts, int n, const char *sub, const char *name) {
    double t = 0;
    for (int i = 0; i < n; i++) t += num(sub ? member(parts[i], sub) : parts[i], name);
    cJSON_AddNumberToObject(dst, name, t);
}

static void put_max(cJSON *dst, cJSON *const *parts, int n, const char *name) {
    double t = 0;
    for (int i = 0; i < n; i++)
        if (num(parts[i], name) > t) t = num(parts[i], name);
    cJSON_AddNumberToObject(dst, name, t);
}

/* all: every part's is true (a part without it counts as true); else any part's is. */
static void put_bool(cJSON *dst, cJSON *const *parts, int n, const char *sub, const char *name,
                     int all) {
    int v = all;
    for (int i = 0; i < n; i++) {
        const cJSON *b = member(sub ? member(parts[i], sub) : parts[i], name);
        if (!cJSON_IsBool(b)) continue;
        if (all)
            v &= cJSON_IsTrue(b);
        else
            v |= cJSON_IsTrue(b);
    }
    cJSON_AddBoolToObject(dst, name, v);
}

/* The first string the parts hold at sub.name (NULL: none) as a string, else null. */
static void put_first_string(cJSON *dst, cJSON *const *parts, int n, const char *sub,
                             const char *name) {
    for (int i = 0; i < n; i++) {
        const cJSON *v = member(sub ? member(parts[i], sub) : parts[i], name);
        if (cJSON_IsString(v)) {
            cJSON_AddStringToObject(dst, name, v->valuestring);
            return;
        }
    }
    cJSON_AddNullToObject(dst, name);
}

/* The items of every part's array `name` (the part itself when name is NULL), copied. */
static cJSON *concat(cJSON *const *parts, int n, const char *name) {
    cJSON *out = cJSON_CreateArray(), *it;
    for (int i = 0; i < n; i++) {
        const cJSON *arr = name ? member(parts[i], name) : parts[i];
        cJSON_ArrayForEach(it, arr) {
            cJSON_AddItemToArray(out, cJSON_Duplicate(it, 1));
        }
    }
    return out;
}

typedef int item_cmp(const cJSON *a, const cJSON *b);
typedef struct ranked {
    cJSON *item;
    int order;
} ranked;
static item_cmp *sort_by; /* qsort has no argument for it (single-threaded) */

static int cmp_ranked(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    int c = sort_by(a->item, b->item);
    return c ? c : (a->order > b->order) - (a->order < b->order);
}

/* Sorts the array in place by cmp, stable; keeps the first max (max < 0: all). Returns 1
 * when some were dropped. */
static int sort_array(cJSON *arr, item_cmp *cmp, int max) {
    int n = cJSON_GetArraySize(arr), k = 0, dropped = 0;
    ranked *r = dtq_xcalloc((size_t)n + 1, sizeof(*r));
    while (cJSON_GetArraySize(arr) > 0) {
        r[k].item = cJSON_DetachItemFromArray(arr, 0);
        r[k].order = k;
        k++;
    }
    sort_by = cmp;
    qsort(r, (size_t)n, sizeof(*r), cmp_ranked);
    for (int i = 0; i < n; i++) {
        if (max >= 0 && i >= max) {
            cJSON_Delete(r[i].item);
            dropped = 1;
        } else {
            cJSON_AddItemToArray(arr, r[i].item);
        }
    }
    free(r);
    return dropped;
}

static const char *str_of(const cJSON *o, const char *name) {
    const cJSON *v = member(o, name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int cmp_name(const cJSON *a, const cJSON *b) {
    return strcmp(str_of(a, "name"), str_of(b, "name"));
}

/* queues of every part, sorted by name, at most max; queues_truncated. */
static void put_queues(cJSON *o, cJSON *const *parts, int n, int max) {
    cJSON *q = concat(parts, n, "queues");
    int cut = sort_array(q, cmp_name, max);
    int truncated = cut;
    cJSON_AddItemToObject(o, "queues", q);
    for (int i = 0; i < n; i++) truncated |= cJSON_IsTrue(member(parts[i], "queues_truncated"));
    cJSON_AddBoolToObject(o, "queues_truncated", truncated);
}

/* ----------------------------------------------------------------- overview, metrics */

cJSON *dtq_view_merge_overview(cJSON *const *parts, int n, int queues_max) {
    cJSON *o = cJSON_CreateObject(), *sch, *dlq, *ev;
    const cJSON *events = NULL;
    int stream = 0;
    put_max(o, parts, n, "time_ms");
    put_queues(o, parts, n, queues_max);
    cJSON_AddItemToObject(o, "workers", concat(parts, n, "workers"));
    put_bool(o, parts, n, NULL, "workers_truncated", 0);
    put_sum(o, parts, n, NULL, "workers_gone");
    sch = cJSON_AddObjectToObject(o, "scheduler");
    put_first_string(sch, parts, n, "scheduler", "leader");
    put_sum(sch, parts, n, "scheduler", "scheduled");
    put_sum(sch, parts, n, "scheduler", "claimed");
    put_bool(sch, parts, n, "scheduler", "by_queue_complete", 1);
    dlq = cJSON_AddObjectToObject(o, "dlq");
    put_sum(dlq, parts, n, "dlq", "length");
    /* the events settings are each queue's config copy's: the first queue's part says */
    for (int i = 0; i < n; i++) {
        const cJSON *e = member(parts[i], "events");
        if (!events && cJSON_GetArraySize(member(parts[i], "queues")) > 0) events = e;
        stream |= cJSON_IsTrue(member(e, "stream"));
    }
    if (!events && n > 0) events = member(parts[0], "events");
    ev = events ? cJSON_Duplicate(events, 1) : cJSON_CreateObject();
    if (member(ev, "stream")) cJSON_DeleteItemFromObjectCaseSensitive(ev, "stream");
    cJSON_AddBoolToObject(ev, "stream", stream);
    cJSON_AddItemToObject(o, "events", ev);
    return o;
}

static int cmp_queue_class(const cJSON *a, const cJSON *b) {
    int c = strcmp(str_of(a, "queue"), str_of(b, "queue"));
    return c ? c : strcmp(str_of(a, "class"), str_of(b, "class"));
}

cJSON *dtq_view_merge_metrics(cJSON *const *parts, int n, int queues_max) {
    cJSON *o = cJSON_CreateObject(), *sch, *dl, *w, *by;
    put_max(o, parts, n, "time_ms");
    put_queues(o, parts, n, queues_max);
    sch = cJSON_AddObjectToObject(o, "scheduled");
    put_sum(sch, parts, n, "scheduled", "total");
    put_sum(sch, parts, n, "scheduled", "claimed");
    put_bool(sch, parts, n, "scheduled", "by_queue_complete", 1);
    dl = cJSON_AddObjectToObject(o, "dead_letters");
    put_sum(dl, parts, n, "dead_letters", "length");
    put_sum(dl, parts, n, "dead_letters", "scanned");
    put_bool(dl, parts, n, "dead_letters", "complete", 1);
    by = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, member(member(parts[i], "dead_letters"), "by_queue_class")) {
            cJSON_AddItemToArray(by, cJSON_Duplicate(it, 1));
        }
    }
    sort_array(by, cmp_queue_class, -1);
    cJSON_AddItemToObject(dl, "by_queue_class", by);
    w = cJSON_AddObjectToObject(o, "workers");
    for (int i = 0; i < n; i++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, member(parts[i], "workers")) {
            cJSON *had = member(w, it->string);
            if (!cJSON_IsNumber(it)) continue;
            if (had)
                cJSON_SetNumberValue(had, had->valuedouble + it->valuedouble);
            else
                cJSON_AddNumberToObject(w, it->string, it->valuedouble);
        }
    }
    put_bool(o, parts, n, NULL, "workers_truncated", 0);
    put_sum(o, parts, n, NULL, "workers_gone");
    put_first_string(o, parts, n, NULL, "leader");
    return o;
}

/* ----------------------------------------------------------------- pages */

typedef const char *key_fn(const cJSON *entry, char *buf, size_t size);
typedef int key_cmp(const char *a, const char *b);

static key_fn *page_key;
static key_cmp *page_cmp;
static int page_sign; /* 1: ascending keys; -1: descending */

static int cmp_entry(const cJSON *a, const cJSON *b) {
    char ka[320], kb[320];
    return page_sign * page_cmp(page_key(a, ka, sizeof(ka)), page_key(b, kb, sizeof(kb)));
}

/* The entries and next_cursor of a merged page into o (see view_merge.h). */
static void put_page(cJSON *o, cJSON *const *parts, int n, int count, key_fn *key, key_cmp *cmp,
                     int sign) {
    cJSON *all = concat(parts, n, "entries"), *entries = cJSON_CreateArray();
    const char *horizon = NULL; /* the nearest next_cursor of a part: nothing seen beyond */
    char last[320] = "", k[320];
    int taken = 0, cut = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *nc = member(parts[i], "next_cursor");
        if (cJSON_IsString(nc) && (!horizon || sign * cmp(nc->valuestring, horizon) < 0))
            horizon = nc->valuestring;
    }
    page_key = key;
    page_cmp = cmp;
    page_sign = sign;
    sort_array(all, cmp_entry, -1);
    while (cJSON_GetArraySize(all) > 0) {
        cJSON *e = cJSON_DetachItemFromArray(all, 0);
        key(e, k, sizeof(k));
        if ((horizon && sign * cmp(k, horizon) > 0) || (taken >= count && strcmp(k, last))) {
            cut = taken >= count;
            cJSON_Delete(e);
            break;
        }
        snprintf(last, sizeof(last), "%s", k);
        cJSON_AddItemToArray(entries, e);
        taken++;
    }
    cJSON_Delete(all);
    cJSON_AddNumberToObject(o, "count", taken);
    cJSON_AddItemToObject(o, "entries", entries);
    if (cut)
        cJSON_AddStringToObject(o, "next_cursor", last);
    else if (horizon)
        cJSON_AddStringToObject(o, "next_cursor", horizon);
    else
        cJSON_AddNullToObject(o, "next_cursor");
}

static const char *stream_key(const cJSON *e, char *buf, size_t size) {
    snprintf(buf, size, "%s", str_of(e, "entry_id"));
    return buf;
}

/* The first part's member as it is (null when none has it). */
static void put_first(cJSON *o, cJSON *const *parts, int n, const char *name) {
    const cJSON *v = n > 0 ? member(parts[0], name) : NULL;
    cJSON_AddItemToObject(o, name, v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
}

cJSON *dtq_view_merge_stream_pages(cJSON *const *parts, int n, int count, int oldest_first) {
    cJSON *o = cJSON_CreateObject();
    put_sum(o, parts, n, NULL, "total");
    cJSON_AddStringToObject(o, "order", oldest_first ? "oldest" : "newest");
    put_first(o, parts, n, "filter");
    put_sum(o, parts, n, NULL, "scanned");
    put_page(o, parts, n, count, stream_key, dtq_view_cmp_stream_id, oldest_first ? 1 : -1);
    return o;
}

cJSON *dtq_view_merge_scheduled(cJSON *const *parts, int n, int count) {
    cJSON *o = cJSON_CreateObject();
    put_max(o, parts, n, "time_ms");
    put_sum(o, parts, n, NULL, "total");
    put_sum(o, parts, n, NULL, "claimed");
    put_first(o, parts, n, "filter");
    put_sum(o, parts, n, NULL, "scanned");
    put_page(o, parts, n, count, dtq_view_sched_key, dtq_view_cmp_sched_key, 1);
    return o;
}

/* ----------------------------------------------------------------- cron, limits */

static int cmp_cron(const cJSON *a, const cJSON *b) {
    int c = strcmp(str_of(a, "name"), str_of(b, "name"));
    return c ? c : strcmp(str_of(a, "queue"), str_of(b, "queue"));
}

cJSON *dtq_view_merge_cron(cJSON *const *parts, int n) {
    cJSON *o = cJSON_CreateObject(), *s = concat(parts, n, "schedules");
    put_max(o, parts, n, "now_ms");
    sort_array(s, cmp_cron, -1);
    cJSON_AddItemToObject(o, "schedules", s);
    return o;
}

static int cmp_queue(const cJSON *a, const cJSON *b) {
    return strcmp(str_of(a, "queue"), str_of(b, "queue"));
}

cJSON *dtq_view_merge_limits(cJSON *const *parts, int n) {
    cJSON *a = concat(parts, n, NULL);
    sort_array(a, cmp_queue, -1);
    return a;
}

/* The newest first (created_at, a number of ms), ties by id, also descending: the order of
 * one part's ZREVRANGE. */
static int cmp_batch(const cJSON *a, const cJSON *b) {
    double x = num(a, "created_at"), y = num(b, "created_at");
    if (x != y) return x > y ? -1 : 1;
    return strcmp(str_of(b, "id"), str_of(a, "id"));
}

cJSON *dtq_view_merge_batches(cJSON *const *parts, int n, int count) {
    cJSON *o = cJSON_CreateObject(), *b = concat(parts, n, "batches");
    int more = sort_array(b, cmp_batch, count);
    for (int i = 0; i < n; i++) more |= cJSON_IsTrue(member(parts[i], "more"));
    cJSON_AddItemToObject(o, "batches", b);
    cJSON_AddBoolToObject(o, "more", more);
    return o;
}

cJSON *dtq_view_merge_stats(cJSON *const *parts, int n) {
    cJSON *o = cJSON_CreateObject();
    const cJSON *f;
    for (int i = 0; i < n; i++) {
        cJSON_ArrayForEach(f, parts[i]) {
            cJSON *had = cJSON_GetObjectItemCaseSensitive(o, f->string);
            if (!had)
                cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, 0));
            else if (cJSON_IsNumber(had) && cJSON_IsNumber(f))
                cJSON_SetNumberValue(had, had->valuedouble + f->valuedouble);
        }
    }
    return o;
}
