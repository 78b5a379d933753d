/* streams.c: building the stream table. */
#include "streams.h"

#include <stdlib.h>

#include <string.h>

#include "cluster.h"
#include "keys.h"

/* ns NULL: every queue under prefix; else each under its own "{ns:q}". */
static void build(dtq_streams *t, const char *prefix, const char *ns, char *const *queues,
                  int nqueues) {
    dtq_streams_clear(t);
    t->nqueues = nqueues;
    t->queues = dtq_xcalloc((size_t)nqueues, sizeof(char *));
    t->keys = dtq_xcalloc((size_t)nqueues * DTQ_BANDS, sizeof(char *));
    t->paused_keys = dtq_xcalloc((size_t)nqueues, sizeof(char *));
    if (ns) {
        t->tags = dtq_xcalloc((size_t)nqueues, sizeof(char *));
        t->slots = dtq_xcalloc((size_t)nqueues, sizeof(int));
    }
    for (int q = 0; q < nqueues; q++) {
        t->queues[q] = dtq_xstrdup(queues[q]);
        if (ns) {
            t->tags[q] = dtq_keys_queue_prefix(ns, queues[q]);
            t->slots[q] = dtq_cluster_keyslot(t->tags[q], strlen(t->tags[q]));
            prefix = t->tags[q];
        }
        t->paused_keys[q] = dtq_key_paused(prefix, queues[q]);
        for (int band = 0; band < DTQ_BANDS; band++)
            t->keys[dtq_streams_index(q, band)] = dtq_key_stream(prefix, queues[q], band);
    }
}

void dtq_streams_build(dtq_streams *t, const char *prefix, char *const *queues, int nqueues) {
    build(t, prefix, NULL, queues, nqueues);
}

void dtq_streams_build_cluster(dtq_streams *t, const char *ns, char *const *queues, int nqueues) {
    build(t, NULL, ns, queues, nqueues);
}

int dtq_streams_find(const dtq_streams *t, const char *name) {
    for (int q = 0; q < t->nqueues; q++)
        if (!strcmp(t->queues[q], name)) return q;
    return -1;
}

void dtq_streams_clear(dtq_streams *t) {
    for (int q = 0; q < t->nqueues; q++) {
        free(t->queues[q]);
        free(t->paused_keys[q]);
        if (t->tags) free(t->tags[q]);
    }
    for (int i = 0; i < dtq_streams_count(t); i++) free(t->keys[i]);
    free(t->queues);
    free(t->keys);
    free(t->paused_keys);
    free(t->tags);
    free(t->slots);
    t->queues = t->keys = t->paused_keys = t->tags = NULL;
    t->slots = NULL;
    t->nqueues = 0;
}

void dtq_streams_fetch_keys(const dtq_streams *t, dtq_argv *a) {
    for (int q = 0; q < t->nqueues; q++) {
        dtq_argv_adds(a, t->paused_keys[q]);
        for (int band = DTQ_BANDS - 1; band >= 0; band--)
            dtq_argv_adds(a, t->keys[dtq_streams_index(q, band)]);
    }
}
