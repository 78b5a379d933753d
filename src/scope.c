/* scope.c: the scopes of a Function call (see scope.h). */
#include "scope.h"

#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "reply_class.h"

char *dtq_scope_tag(const char *ns, int cluster, const char *queue) {
    if (!cluster) return NULL;
    return queue ? dtq_keys_queue_prefix(ns, queue) : dtq_keys_global_prefix(ns);
}

void dtq_scope_fcall(dtq_argv *a, int ro, const char *fn, const char *tag) {
    dtq_argv_init(a);
    dtq_argv_adds(a, ro ? "FCALL_RO" : "FCALL");
    dtq_argv_adds(a, fn);
    dtq_argv_adds(a, "0");
    dtq_scope_tag_call(a, tag);
}

void dtq_scope_tag_call(dtq_argv *a, const char *tag) {
    dtq_argv t;
    if (!tag) return;
    dtq_argv_init(&t);
    dtq_argv_add(&t, a->argv[0], a->lens[0]);
    dtq_argv_add(&t, a->argv[1], a->lens[1]);
    dtq_argv_addll(&t, strtoll(a->argv[2], NULL, 10) + 1);
    dtq_argv_adds(&t, tag);
    for (int i = 3; i < a->argc; i++) dtq_argv_add(&t, a->argv[i], a->lens[i]);
    dtq_argv_deinit(a);
    *a = t;
}

void dtq_scope_index_read(dtq_argv *a, const char *ns) {
    char *g = dtq_keys_global_prefix(ns), *key = dtq_key_queues(g);
    dtq_argv_init(a);
    dtq_argv_adds(a, "SMEMBERS");
    dtq_argv_adds(a, key);
    free(key);
    free(g);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **dtq_scope_index_names(const redisReply *r, int *n, char **error) {
    char **q;
    *n = 0;
    if (r->type == REDIS_REPLY_ERROR && error) *error = dtq_xstrndup(r->str, r->len);
    if (r->type != REDIS_REPLY_ARRAY) return NULL;
    q = dtq_xcalloc(r->elements + 1, sizeof(char *));
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING && dtq_valid_queue_name(r->element[i]->str))
            q[(*n)++] = dtq_xstrndup(r->element[i]->str, r->element[i]->len);
    qsort(q, (size_t)*n, sizeof(char *), cmp_name);
    return q;
}

void dtq_scope_names_free(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

void dtq_scope_layout_call(dtq_argv *a, const char *ns, int cluster) {
    char *fn = dtq_keys_function(ns, "layout"), *tag = dtq_scope_tag(ns, cluster, NULL);
    dtq_scope_fcall(a, 0, fn, tag);
    dtq_argv_adds(a, cluster ? "cluster" : "single");
    free(tag);
    free(fn);
}

dtq_scope_layout dtq_scope_layout_verdict(const redisReply *r, int cluster) {
    if (r->type != REDIS_REPLY_ERROR) return DTQ_SCOPE_LAYOUT_OK;
    switch (dtq_reply_class_of(r->str)) {
    case DTQ_REPLY_WRONG_LAYOUT: return DTQ_SCOPE_LAYOUT_WRONG;
    case DTQ_REPLY_NOPERM: return DTQ_SCOPE_LAYOUT_UNCHECKED;
    case DTQ_REPLY_NO_FUNCTION:
        return cluster ? DTQ_SCOPE_LAYOUT_NOT_LOADED : DTQ_SCOPE_LAYOUT_UNCHECKED;
    default: return DTQ_SCOPE_LAYOUT_FAILED;
    }
}
