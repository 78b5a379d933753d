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
#include "scope.h"
#include "scripts.h"
#include "util.h"

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
    char *fn = dtq_keys_function(x->ns, name), *tag = dtq_scope_tag(x->ns, x->cluster, queue);
    dtq_argv a;
    redisReply *r;
    char why[512];
    dtq_scope_fcall(&a, ro, fn, tag);
    for (int i = 0; i < argc; i++) dtq_argv_adds(&a, args[i]);
    if (x->shared_optional && x->cluster && !queue) {
        /* the shared slot: its silence is a warning (what asked it goes without) */
        r = ctl_try_command(x, a.argc, (const char **)a.argv, why, sizeof(why));
        if (!r) ctl_shared_skipped(name, why);
    } else {
        r = ctl_command(x, a.argc, (const char **)a.argv);
    }
    dtq_argv_deinit(&a);
    free(fn);
    free(tag);
    return r;
}

/* <ns>_layout, once (and after functions install): the namespace must be laid out as this
 * client is (the single layout for one Redis, the cluster layout for a cluster URL); the
 * answer writes the marker when there is none. Judged by dtq_scope_layout_verdict:
 * WRONG_LAYOUT ends the program (exit 1, its message says how to move); unchecked goes on
 * (NOPERM with a warning); the Functions not loaded (the cluster layout) is the not-loaded
 * refusal; any other error is refused, naming the Function. */
void ctl_check_layout(ctl *x) {
    dtq_argv a;
    redisReply *r;
    x->layout_checked = 1;
    dtq_scope_layout_call(&a, x->ns, x->cluster);
    if (x->shared_optional && x->cluster) {
        char why[512];
        r = ctl_try_command(x, a.argc, (const char **)a.argv, why, sizeof(why));
        dtq_argv_deinit(&a);
        if (!r) {
            ctl_shared_skipped("the layout check", why);
            return;
        }
    } else {
        r = ctl_command(x, a.argc, (const char **)a.argv);
        dtq_argv_deinit(&a);
    }
    switch (dtq_scope_layout_verdict(r, x->cluster)) {
    case DTQ_SCOPE_LAYOUT_OK: break;
    case DTQ_SCOPE_LAYOUT_WRONG: ctl_refused("%s", r->str);
    case DTQ_SCOPE_LAYOUT_NOT_LOADED: not_loaded(x);
    case DTQ_SCOPE_LAYOUT_UNCHECKED:
        if (dtq_reply_class_of(r->str) == DTQ_REPLY_NOPERM)
            fprintf(stderr,
                    "dtqctl: %s_layout not permitted (%s): layout not checked; "
                    "apply the role again (dtqctl acl)\n",
                    x->ns, r->str);
        break;
    case DTQ_SCOPE_LAYOUT_FAILED: ctl_refused("%s_layout: %s", x->ns, r->str);
    }
    freeReplyObject(r);
}

redisReply *ctl_fcall_reply(ctl *x, int ro, const char *queue, const char *name, int argc,
                            const char **args) {
    redisReply *r;
    /* the cluster layout before any call; the single layout before the first write (a read
     * of a namespace laid out the other way changes nothing, and the read-only role, which
     * holds no write Function, is not refused one) */
    if (!x->layout_checked && (x->cluster || !ro)) ctl_check_layout(x);
    r = fcall_raw(x, ro, queue, name, argc, args);
    if (r && r->type == REDIS_REPLY_ERROR && dtq_reply_class_of(r->str) == DTQ_REPLY_NO_FUNCTION)
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

cJSON *ctl_read_merged(ctl *x, const char *fn, int argc, const char **args, int global,
                       ctl_part_fn *part, ctl_merge_fn *merge) {
    cJSON **parts, *merged;
    int n, k = 0;
    char **scopes;
    if (!part) part = ctl_read_model;
    if (!x->cluster) return part(x, NULL, fn, argc, args);
    scopes = ctl_scopes(x, &n);
    parts = dtq_xcalloc((size_t)n + 1, sizeof(cJSON *));
    for (; k < n; k++) parts[k] = part(x, scopes[k], fn, argc, args);
    if (global) parts[k++] = part(x, NULL, fn, argc, args);
    merged = merge(parts, k);
    for (int i = 0; i < k; i++) cJSON_Delete(parts[i]);
    free(parts);
    dtq_scope_names_free(scopes, n);
    return merged;
}

/* ----------------------------------------------------------------- the queue index */

/* {ns}:queues, the cluster layout's index of the queues. Caller-owned. */
static char *index_key(const ctl *x) {
    char *g = dtq_keys_global_prefix(x->ns), *key = dtq_key_queues(g);
    free(g);
    return key;
}

char **ctl_scopes(ctl *x, int *n) {
    char **out;
    dtq_argv a;
    redisReply *r;
    if (!x->cluster) {
        *n = 1;
        return dtq_xcalloc(1, sizeof(char *)); /* {NULL}: the namespace */
    }
    dtq_scope_index_read(&a, x->ns);
    r = ctl_command(x, a.argc, (const char **)a.argv);
    out = dtq_scope_index_names(r, n, NULL);
    if (!out)
        ctl_refused("SMEMBERS %s: %s", a.argv[1],
                    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    dtq_argv_deinit(&a);
    return out;
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
        char why[512];
        redisReply *r;
        if (!own && x->shared_optional) { /* {ns}:queues: the shared slot */
            r = ctl_try_command(x, 3, a, why, sizeof(why));
            if (!r) {
                ctl_shared_skipped("adding the queue to the index", why);
                free(key);
                continue;
            }
        } else {
            r = ctl_command(x, 3, a);
        }
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

/* Up to `want` entries of fn's pages about `queue` (args[0] and args[1]: the cursor and
 * the count) as one page: {"entries": [...], "next_cursor": the cursor after them, or
 * null when the pages ended}. Caller-owned. */
static cJSON *collect_pages(ctl *x, const char *queue, const char *fn, int argc, const char **args,
                            long long want, long long page_max) {
    cJSON *out = cJSON_CreateObject(), *into = cJSON_AddArrayToObject(out, "entries");
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
    if (cursor)
        cJSON_AddStringToObject(out, "next_cursor", cursor);
    else
        cJSON_AddNullToObject(out, "next_cursor");
    free(cursor);
    return out;
}

void ctl_list_merged(ctl *x, char **scopes, int nscopes, const char *fn, int argc,
                     const char **args, long long want, long long page_max,
                     ctl_page_merge_fn *merge, ctl_entry_fn *each, void *arg) {
    int n = x->cluster ? nscopes : 1, k = 0;
    cJSON **parts = dtq_xcalloc((size_t)n + 1, sizeof(cJSON *)), *page, *e;
    /* the single layout: one call's pages, in their order (nothing to merge) */
    for (int i = 0; i < n; i++)
        parts[i] = collect_pages(x, x->cluster ? scopes[i] : NULL, fn, argc, args, want, page_max);
    page = x->cluster ? merge(parts, n, (int)want) : parts[0];
    if (x->json) putchar('[');
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(page, "entries")) {
        if (k >= want) break; /* equal keys kept together may make the page longer */
        if (x->json && k) putchar(',');
        each(x, e, arg);
        k++;
    }
    if (x->json) printf("]\n");
    if (page != parts[0]) cJSON_Delete(page);
    for (int i = 0; i < n; i++) cJSON_Delete(parts[i]);
    free(parts);
}
