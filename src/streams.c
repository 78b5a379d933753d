/* streams.c: building the stream table. */
#include "streams.h"

#include <stdlib.h>

#include "keys.h"

void dtq_streams_build(dtq_streams *t, const char *prefix, char *const *queues, int nqueues) {
    dtq_streams_clear(t);
    t->nqueues = nqueues;
    t->queues = dtq_xcalloc((size_t)nqueues, sizeof(char *));
    t->keys = dtq_xcalloc((size_t)nqueues * DTQ_BANDS, sizeof(char *));
    t->paused_keys = dtq_xcalloc((size_t)nqueues, sizeof(char *));
    for (int q = 0; q < nqueues; q++) {
        t->queues[q] = dtq_xstrdup(queues[q]);
        t->paused_keys[q] = dtq_key_paused(prefix, queues[q]);
        for (int band = 0; band < DTQ_BANDS; band++)
            t->keys[dtq_streams_index(q, band)] = dtq_key_stream(prefix, queues[q], band);
    }
}

void dtq_streams_clear(dtq_streams *t) {
    for (int q = 0; q < t->nqueues; q++) {
        free(t->queues[q]);
        free(t->paused_keys[q]);
    }
    for (int i = 0; i < dtq_streams_count(t); i++) free(t->keys[i]);
    free(t->queues);
    free(t->keys);
    free(t->paused_keys);
    t->queues = t->keys = t->paused_keys = NULL;
    t->nqueues = 0;
}

void dtq_streams_fetch_keys(const dtq_streams *t, dtq_argv *a) {
    for (int q = 0; q < t->nqueues; q++) {
        dtq_argv_adds(a, t->paused_keys[q]);
        for (int band = DTQ_BANDS - 1; band >= 0; band--)
            dtq_argv_adds(a, t->keys[dtq_streams_index(q, band)]);
    }
}
