/* ctl_route.c: where dtqctl's Function calls go, the one place that knows the two layouts
 * (docs/reference.md "Redis Cluster: dtqctl").
 *
 * The single layout (redis://, rediss://, unix://, Sentinel): FCALL <ns>_<fn> 0 args, as
 * ever. The cluster layout (redis-cluster://, rediss-cluster://): FCALL <ns>_<fn> 1 <tag>
 * args, the tag {ns:q} for a call about queue q (its slot) and {ns} for the namespace's
 * global state (the workers, the scheduler lock); lua/lib/call.lua's wrapper takes the tag as the
 * prefix of the call's keys. Before the first Function call <ns>_layout says whether the
 * namespace is laid out the way this client is (WRONG_LAYOUT: exit 1). The reads over
 * every queue call once per queue of the index {ns}:queues (ctl_scopes) and merge; the
 * writes that make a queue known add it to the index (ctl_queue_index_add). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "keys.h"
#include "reply_class.h"
#include "util.h"

/* The tag of a call: {ns:queue}, or {ns} for NULL. Caller-owned. */
static char *call_tag(const ctl *x, const char *queue) {
    return queue ? dtq_keys_queue_prefix(x->ns, queue) : dtq_keys_global_prefix(x->ns);
}

/* The Functions are not loaded: exit 1 naming the way to load them. */
static void not_loaded(const ctl *x) __attribute__((noreturn));
static void not_loaded(const ctl *x) {
    ctl_refused("the dtq Functions are not loaded in this Redis (namespace %s); install "
                "them with 'dtqctl -n %s functions install' (an admin's step), or start "
                "dtq-worker once as a user allowed to FUNCTION LOAD",
                x->ns, x->ns);
}

/* FCALL[_RO] <ns>_<name> with the layout's keys, the reply as it came. */
static redisReply *fcall_raw(ctl *x, int ro, const char *queue, const char *name, int argc,
                             const char **args) {
    const char **argv = dtq_xcalloc((size_t)argc + 4, sizeof(char *));
    char *fn = dtq_keys_function(x->ns, name), *tag = NULL;
    int n = 0;
    redisReply *r;
    argv[n++] = ro ? "FCALL_RO" : "FCALL";
    argv[n++] = fn;
    if (x->cluster) {
        tag = call_tag(x, queue);
        argv[n++] = "1";
        argv[n++] = tag;
    } else {
        argv[n++] = "0";
    }
    for (int i = 0; i < argc; i++) argv[n++] = args[i];
    r = ctl_command(x, n, argv);
    free(argv);
    free(fn);
    free(tag);
    return r;
}

/* <ns>_layout, once: the namespace must be laid out as this client is (the single layout
 * for one Redis, the cluster layout for a cluster URL); the answer writes the marker when
 * there is none. WRONG_LAYOUT ends the program (exit 1, its message says how to move). A
 * library without <ns>_layout (older than the cluster layout) can only hold the single
 * layout: fine for it, the not-loaded refusal for the cluster layout. NOPERM on a single
 * Redis (a role made before <ns>_layout existed) is a warning: that namespace can only be
 * single. Any other error is refused, naming the Function. */
static void check_layout(ctl *x) {
    const char *a[1] = {x->cluster ? "cluster" : "single"};
    redisReply *r;
    x->layout_checked = 1;
    r = fcall_raw(x, 0, NULL, "layout", 1, a);
    if (r->type == REDIS_REPLY_ERROR) {
        dtq_reply_class c = dtq_reply_class_of(r->str);
        if (c == DTQ_REPLY_WRONG_LAYOUT) ctl_refused("%s", r->str);
        if (c == DTQ_REPLY_NO_FUNCTION) {
            if (x->cluster) not_loaded(x);
        } else if (!x->cluster && c == DTQ_REPLY_NOPERM) {
            /* a role made by an older dtqctl acl: the single layout is the only one such a
             * namespace can have, so the check is skipped, not the write */
            fprintf(stderr,
                    "dtqctl: %s_layout not permitted (%s): layout not checked; "
                    "apply the role again (dtqctl acl)\n",
                    x->ns, r->str);
        } else {
            ctl_refused("%s_layout: %s", x->ns, r->str);
        }
    }
    freeReplyObject(r);
}

redisReply *ctl_fcall_reply(ctl *x, int ro, const char *queue, const char *name, int argc,
                            const char **args) {
    redisReply *r;
    /* the cluster layout before any call; the single layout before the first write (a read
     * of a namespace laid out the other way changes nothing, and the read-only role, which
     * holds no write Function, is not refused one) */
    if (!x->layout_checked && (x->cluster || !ro)) check_layout(x);
    r = fcall_raw(x, ro, queue, name, argc, args);
    if (r->type == REDIS_REPLY_ERROR && dtq_reply_class_of(r->str) == DTQ_REPLY_NO_FUNCTION)
        not_loaded(x);
    return r;
}

redisReply *ctl_fcall(ctl *x, int ro, const char *queue, const char *name, int argc,
                      const char **args) {
    redisReply *r = ctl_fcall_reply(x, ro, queue, name, argc, args);
    if (r->type == REDIS_REPLY_ERROR) ctl_refused("%s", r->str);
    return r;
}

cJSON *ctl_read_model(ctl *x, const char *queue, const char *name, int argc, const char **args) {
    redisReply *r = ctl_fcall(x, 1, queue, name, argc, args);
    cJSON *v = r->type == REDIS_REPLY_STRING ? cJSON_ParseWithLength(r->str, r->len) : NULL;
    if (!v) ctl_refused("unexpected reply to %s_%s", x->ns, name);
    freeReplyObject(r);
    return v;
}

/* ----------------------------------------------------------------- the queue index */

/* {ns}:queues, the cluster layout's index of the queues. Caller-owned. */
static char *index_key(const ctl *x) {
    char *g = dtq_keys_global_prefix(x->ns), *key = dtq_key_queues(g);
    free(g);
    return key;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **ctl_scopes(ctl *x, int *n) {
    char **out, *key;
    const char *a[2] = {"SMEMBERS", NULL};
    redisReply *r;
    if (!x->cluster) {
        *n = 1;
        return dtq_xcalloc(1, sizeof(char *)); /* {NULL}: the namespace */
    }
    key = index_key(x);
    a[1] = key;
    r = ctl_command(x, 2, a);
    if (r->type != REDIS_REPLY_ARRAY)
        ctl_refused("SMEMBERS %s: %s", key,
                    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    free(key);
    out = dtq_xcalloc(r->elements + 1, sizeof(char *));
    *n = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            out[(*n)++] = dtq_xstrdup(r->element[i]->str);
    freeReplyObject(r);
    qsort(out, (size_t)*n, sizeof(char *), cmp_str);
    return out;
}

void ctl_scopes_free(char **scopes, int n) {
    for (int i = 0; i < n; i++) free(scopes[i]);
    free(scopes);
}

/* SADD or SREM queue in {ns}:queues, and for SADD in the queue's own {ns:q}:queues too,
 * which the Functions' queue checks read (cluster layout only; <ns>_queue_remove SREMs
 * the queue's own). */
static void index_op(ctl *x, const char *op, const char *queue) {
    if (!x->cluster) return;
    for (int own = 0; own < (strcmp(op, "SADD") ? 1 : 2); own++) {
        char *tag = own ? dtq_keys_queue_prefix(x->ns, queue) : NULL;
        char *key = own ? dtq_key_queues(tag) : index_key(x);
        const char *a[3] = {op, key, queue};
        redisReply *r = ctl_command(x, 3, a);
        if (r->type == REDIS_REPLY_ERROR) ctl_refused("%s %s: %s", op, key, r->str);
        freeReplyObject(r);
        free(key);
        free(tag);
    }
}

void ctl_queue_index_add(ctl *x, const char *queue) {
    index_op(x, "SADD", queue);
}

void ctl_queue_index_remove(ctl *x, const char *queue) {
    index_op(x, "SREM", queue);
}

const char *ctl_take_queue(const char *verb, int *argc, char **argv) {
    const char *queue = NULL;
    int j = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--queue")) {
            argv[j++] = argv[i];
            continue;
        }
        if (queue) ctl_usage_error("%s: --queue given twice", verb);
        if (i + 1 >= *argc || !*argv[i + 1]) ctl_usage_error("%s: --queue needs a queue", verb);
        queue = argv[++i];
    }
    *argc = j;
    return queue;
}

const char *ctl_id_queue(ctl *x, const char *queue) {
    if (!x->cluster) return NULL;
    if (!queue)
        ctl_refused("INVALID_ARGUMENT this namespace is laid out for Redis Cluster: name the "
                    "task's queue with --queue Q");
    return queue;
}

/* ----------------------------------------------------------------- merged lists */

static ctl_entry_cmp *sort_cmp; /* qsort has no argument for it */

typedef struct merged {
    cJSON *e;
    int order; /* the queue's place, then the entry's: ties keep the queues' order */
} merged;

static int cmp_merged(const void *pa, const void *pb) {
    const merged *a = pa, *b = pb;
    int c = sort_cmp(a->e, b->e);
    return c ? c : (a->order > b->order) - (a->order < b->order);
}

/* Up to `want` entries of fn's pages about `queue` (args[0] and args[1]: the cursor and
 * the count), moved into `into`. */
static void collect_pages(ctl *x, const char *queue, const char *fn, int argc, const char **args,
                          long long want, long long page_max, cJSON *into) {
    long long got = 0;
    char *cursor = dtq_xstrdup("-"), count[32];
    while (cursor && got < want) {
        cJSON *page, *entries;
        const cJSON *next;
        snprintf(count, sizeof(count), "%lld", want - got < page_max ? want - got : page_max);
        args[0] = cursor;
        args[1] = count;
        page = ctl_read_model(x, queue, fn, argc, args);
        entries = cJSON_GetObjectItemCaseSensitive(page, "entries");
        while (cJSON_GetArraySize(entries) > 0) {
            cJSON_AddItemToArray(into, cJSON_DetachItemFromArray(entries, 0));
            got++;
        }
        next = cJSON_GetObjectItemCaseSensitive(page, "next_cursor");
        free(cursor);
        cursor = cJSON_IsString(next) ? dtq_xstrdup(next->valuestring) : NULL;
        cJSON_Delete(page);
    }
    free(cursor);
}

void ctl_list_merged(ctl *x, char **scopes, int nscopes, const char *fn, int argc,
                     const char **args, long long want, long long page_max, ctl_entry_cmp *cmp,
                     ctl_entry_fn *each, void *arg) {
    cJSON *all = cJSON_CreateArray(), *e;
    merged *m;
    int n = 0, k = 0;
    /* the single layout: one call's pages, in their order (nothing to merge) */
    if (!x->cluster) cmp = NULL;
    for (int i = 0; i < (x->cluster ? nscopes : 1); i++)
        collect_pages(x, x->cluster ? scopes[i] : NULL, fn, argc, args, want, page_max, all);
    m = dtq_xcalloc((size_t)cJSON_GetArraySize(all) + 1, sizeof(merged));
    cJSON_ArrayForEach(e, all) {
        m[n].e = e;
        m[n].order = n;
        n++;
    }
    sort_cmp = cmp;
    if (cmp) qsort(m, (size_t)n, sizeof(merged), cmp_merged);
    if (x->json) putchar('[');
    for (k = 0; k < n && k < want; k++) {
        if (x->json && k) putchar(',');
        each(x, m[k].e, arg);
    }
    if (x->json) printf("]\n");
    free(m);
    cJSON_Delete(all);
}
