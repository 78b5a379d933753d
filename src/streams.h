/* streams.h: the table of served stream keys, and the one place that knows its layout.
 * Queue q (the q-th of [worker] queues) has DTQ_BANDS streams, <prefix>:stream:<q>:p<band>;
 * they sit at indices q * DTQ_BANDS .. q * DTQ_BANDS + 9 with the highest band first, the
 * order in which they are read. Every other module goes through the helpers below. */
#ifndef DTQ_STREAMS_H
#define DTQ_STREAMS_H

#include "util.h"

#define DTQ_BANDS 10 /* priorities 0..9, 9 served first */

typedef struct dtq_streams {
    int nqueues;
    char **queues;      /* queue names, in serving order */
    char **keys;        /* nqueues * DTQ_BANDS stream keys, see the layout above */
    char **paused_keys; /* <prefix>:queue:<q>:paused, one per queue */
    /* The cluster layout only (NULL in the single one): per queue its hash tag "{ns:q}",
     * the prefix of all its keys and the first key of its Function calls, and its slot. */
    char **tags;
    int *slots;
} dtq_streams;

void dtq_streams_build(dtq_streams *t, const char *prefix, char *const *queues, int nqueues);
/* The cluster layout's table: queue q's keys have the prefix "{ns:q}" (keys.h). */
void dtq_streams_build_cluster(dtq_streams *t, const char *ns, char *const *queues, int nqueues);
void dtq_streams_clear(dtq_streams *t);

static inline int dtq_streams_count(const dtq_streams *t) {
    return t->nqueues * DTQ_BANDS;
}
static inline int dtq_streams_index(int queue, int band) {
    return queue * DTQ_BANDS + (DTQ_BANDS - 1 - band);
}
static inline int dtq_streams_queue_of(int index) {
    return index / DTQ_BANDS;
}
static inline int dtq_streams_band_of(int index) {
    return DTQ_BANDS - 1 - index % DTQ_BANDS;
}

/* A table of the one queue q of t (a view into t's arrays: valid while t is, never
 * cleared), for the per-queue Function calls of the cluster layout. */
static inline dtq_streams dtq_streams_one(const dtq_streams *t, int q) {
    dtq_streams v = {1,
                     &t->queues[q],
                     &t->keys[q * DTQ_BANDS],
                     &t->paused_keys[q],
                     t->tags ? &t->tags[q] : NULL,
                     t->slots ? &t->slots[q] : NULL};
    return v;
}
/* The index of queue `name` in t, -1 when t does not serve it. */
int dtq_streams_find(const dtq_streams *t, const char *name);

/* Appends the KEYS of <ns>_fetch: per queue its paused key, then its streams p9..p0
 * (lua/fn/fetch.lua's fetch_paused_key / fetch_stream_key read this layout). */
void dtq_streams_fetch_keys(const dtq_streams *t, dtq_argv *a);

#endif
