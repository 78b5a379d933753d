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
} dtq_streams;

void dtq_streams_build(dtq_streams *t, const char *prefix, char *const *queues, int nqueues);
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

/* Appends the KEYS of <ns>_fetch: per queue its paused key, then its streams p9..p0
 * (lua/dtq.lua's fetch_paused_key / fetch_stream_key read this layout). */
void dtq_streams_fetch_keys(const dtq_streams *t, dtq_argv *a);

#endif
