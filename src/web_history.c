/* web_history.c: per-worker deltas into per-queue samples, and a ring of samples. */
#include "web_history.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct qpoint {
    int64_t depth, pending; /* -1: no gauge in this sample */
    dtq_web_counts delta;   /* outcomes since the sample before */
} qpoint;

typedef struct sample {
    int64_t ts_ms;
    int nq; /* points for queue indexes 0..nq-1 */
    qpoint *q;
} sample;

/* What one worker process's hash said at the last sample, per queue index. */
enum track_mode {
    MODE_NORMAL,   /* counts since the last sample are the differences */
    MODE_BASELINE, /* first seen in this sample, running before it: counts are the start */
    MODE_FRESH     /* started since the last sample: every count is new */
};

typedef struct tracked {
    char *id;
    int64_t started_at_ms;
    int seen;             /* mentioned in the sample being built */
    enum track_mode mode; /* for the sample being built */
    int nq;
    dtq_web_counts *prev;
    unsigned char *have; /* prev[i] is valid */
} tracked;

struct dtq_web_history {
    int cap, len, head; /* ring: the oldest at head */
    sample *ring;
    char **names; /* queue index -> name */
    int nnames;
    dtq_web_counts *totals; /* per queue index, since the baseline */
    tracked *workers;
    int nworkers;
    int samples_taken;
    /* the sample being built */
    int building;
    int64_t ts_ms, prev_ts_ms;
    sample cur;
};

dtq_web_history *dtq_web_history_new(int capacity) {
    dtq_web_history *h = dtq_xcalloc(1, sizeof(*h));
    h->cap = capacity > 1 ? capacity : 2;
    h->ring = dtq_xcalloc((size_t)h->cap, sizeof(sample));
    return h;
}

static void tracked_clear(tracked *t) {
    free(t->id);
    free(t->prev);
    free(t->have);
}

void dtq_web_history_free(dtq_web_history *h) {
    if (!h) return;
    for (int i = 0; i < h->cap; i++) free(h->ring[i].q);
    free(h->ring);
    for (int i = 0; i < h->nnames; i++) free(h->names[i]);
    free(h->names);
    free(h->totals);
    for (int i = 0; i < h->nworkers; i++) tracked_clear(&h->workers[i]);
    free(h->workers);
    free(h->cur.q);
    free(h);
}

static int find_queue(const dtq_web_history *h, const char *queue) {
    for (int i = 0; i < h->nnames; i++)
        if (!strcmp(h->names[i], queue)) return i;
    return -1;
}

/* The queue's index, added when new; -1 past DTQ_WEB_HISTORY_QUEUES_MAX. */
static int queue_index(dtq_web_history *h, const char *queue) {
    int i = find_queue(h, queue);
    if (i >= 0) return i;
    if (h->nnames == DTQ_WEB_HISTORY_QUEUES_MAX) return -1;
    h->names = dtq_xrealloc(h->names, sizeof(char *) * (size_t)(h->nnames + 1));
    h->totals = dtq_xrealloc(h->totals, sizeof(dtq_web_counts) * (size_t)(h->nnames + 1));
    memset(&h->totals[h->nnames], 0, sizeof(dtq_web_counts));
    h->names[h->nnames] = dtq_xstrdup(queue);
    return h->nnames++;
}

/* The point of queue index i in the sample being built, grown as needed. */
static qpoint *cur_point(dtq_web_history *h, int i) {
    if (i >= h->cur.nq) {
        h->cur.q = dtq_xrealloc(h->cur.q, sizeof(qpoint) * (size_t)(i + 1));
        for (int j = h->cur.nq; j <= i; j++) {
            memset(&h->cur.q[j], 0, sizeof(qpoint));
            h->cur.q[j].depth = h->cur.q[j].pending = -1;
        }
        h->cur.nq = i + 1;
    }
    return &h->cur.q[i];
}

void dtq_web_history_begin(dtq_web_history *h, int64_t ts_ms) {
    h->building = 1;
    h->ts_ms = ts_ms;
    h->cur.ts_ms = ts_ms;
    h->cur.nq = 0;
    for (int i = 0; i < h->nworkers; i++) {
        h->workers[i].seen = 0;
        h->workers[i].mode = MODE_NORMAL;
    }
}

void dtq_web_history_gauge(dtq_web_history *h, const char *queue, int64_t depth, int64_t pending) {
    int i = queue_index(h, queue);
    qpoint *p;
    if (i < 0 || !h->building) return;
    p = cur_point(h, i);
    p->depth = depth;
    p->pending = pending;
}

static tracked *find_worker(dtq_web_history *h, const char *id) {
    for (int i = 0; i < h->nworkers; i++)
        if (!strcmp(h->workers[i].id, id)) return &h->workers[i];
    return NULL;
}

static int64_t step(int64_t cur, int64_t prev) {
    return cur >= prev ? cur - prev : cur; /* lower: counted from 0 again */
}

void dtq_web_history_worker(dtq_web_history *h, const char *worker_id, int64_t started_at_ms,
                            const char *queue, const dtq_web_counts *cumulative) {
    int qi = queue ? queue_index(h, queue) : -1;
    tracked *t;
    dtq_web_counts d = {0, 0, 0};
    int baseline = h->samples_taken == 0;
    if ((queue && qi < 0) || !h->building) return;
    t = find_worker(h, worker_id);
    if (t && t->started_at_ms != started_at_ms) { /* the same id, another process */
        memset(t->have, 0, (size_t)t->nq);
        t->started_at_ms = started_at_ms;
        t->mode = baseline ? MODE_BASELINE : MODE_FRESH; /* its counts are all new */
    } else if (!t) {
        h->workers = dtq_xrealloc(h->workers, sizeof(tracked) * (size_t)(h->nworkers + 1));
        t = &h->workers[h->nworkers++];
        memset(t, 0, sizeof(*t));
        t->id = dtq_xstrdup(worker_id);
        t->started_at_ms = started_at_ms;
        /* A process that started since the last sample: all its counts are new. One that
         * was running already (dtq-web just started, or its hash was missed) is a baseline.
         * Its clock is another host's, so allow one interval of skew. */
        t->mode = !baseline && started_at_ms > h->prev_ts_ms - (h->ts_ms - h->prev_ts_ms)
                      ? MODE_FRESH
                      : MODE_BASELINE;
    }
    t->seen = 1;
    if (!queue) return;
    if (t->mode == MODE_FRESH) {
        d = *cumulative;
    } else if (t->mode == MODE_NORMAL && qi < t->nq && t->have[qi]) {
        d.succeeded = step(cumulative->succeeded, t->prev[qi].succeeded);
        d.failed = step(cumulative->failed, t->prev[qi].failed);
        d.retried = step(cumulative->retried, t->prev[qi].retried);
    } else if (t->mode == MODE_NORMAL) {
        /* a queue this process had not counted before: everything since the last sample */
        d = *cumulative;
    }
    if (qi >= t->nq) {
        t->prev = dtq_xrealloc(t->prev, sizeof(dtq_web_counts) * (size_t)(qi + 1));
        t->have = dtq_xrealloc(t->have, (size_t)(qi + 1));
        memset(t->have + t->nq, 0, (size_t)(qi + 1 - t->nq));
        t->nq = qi + 1;
    }
    t->prev[qi] = *cumulative;
    t->have[qi] = 1;
    {
        qpoint *p = cur_point(h, qi);
        p->delta.succeeded += d.succeeded;
        p->delta.failed += d.failed;
        p->delta.retried += d.retried;
    }
}

void dtq_web_history_end(dtq_web_history *h) {
    sample *slot;
    int w = 0;
    if (!h->building) return;
    h->building = 0;
    for (int i = 0; i < h->nworkers; i++) { /* forget the workers that went away */
        if (h->workers[i].seen)
            h->workers[w++] = h->workers[i];
        else
            tracked_clear(&h->workers[i]);
    }
    h->nworkers = w;
    for (int i = 0; i < h->cur.nq; i++) {
        h->totals[i].succeeded += h->cur.q[i].delta.succeeded;
        h->totals[i].failed += h->cur.q[i].delta.failed;
        h->totals[i].retried += h->cur.q[i].delta.retried;
    }
    if (h->len == h->cap) { /* the oldest goes */
        slot = &h->ring[h->head];
        h->head = (h->head + 1) % h->cap;
    } else {
        slot = &h->ring[(h->head + h->len) % h->cap];
        h->len++;
    }
    free(slot->q);
    *slot = h->cur;
    h->cur.q = NULL;
    h->cur.nq = 0;
    h->prev_ts_ms = h->ts_ms;
    h->samples_taken++;
}

int dtq_web_history_len(const dtq_web_history *h) {
    return h->len;
}

static const sample *at(const dtq_web_history *h, int i) {
    return &h->ring[(h->head + i) % h->cap];
}

int dtq_web_history_point(const dtq_web_history *h, int i, const char *queue, int64_t *ts_ms,
                          int64_t *depth, int64_t *pending, dtq_web_counts *delta) {
    const sample *s;
    int qi = -1;
    if (i < 0 || i >= h->len) return -1;
    s = at(h, i);
    *ts_ms = s->ts_ms;
    *depth = *pending = -1;
    memset(delta, 0, sizeof(*delta));
    if (queue && (qi = find_queue(h, queue)) < 0) return 0;
    for (int j = 0; j < s->nq; j++) {
        const qpoint *p = &s->q[j];
        if (queue && j != qi) continue;
        if (p->depth >= 0) {
            *depth = (*depth < 0 ? 0 : *depth) + p->depth;
            *pending = (*pending < 0 ? 0 : *pending) + p->pending;
        }
        delta->succeeded += p->delta.succeeded;
        delta->failed += p->delta.failed;
        delta->retried += p->delta.retried;
    }
    return 0;
}

int dtq_web_history_rate(const dtq_web_history *h, const char *queue, int64_t window_ms,
                         double *succeeded, double *failed, double *retried, int64_t *span_ms) {
    int last = h->len - 1, first;
    int64_t t_last, t_first, depth, pending, span;
    dtq_web_counts sum = {0, 0, 0}, d;
    *succeeded = *failed = *retried = 0;
    if (h->len < 2) return -1;
    t_last = at(h, last)->ts_ms;
    /* the oldest sample within the window: outcomes after it happened inside the window */
    for (first = last - 1; first > 0 && t_last - at(h, first - 1)->ts_ms <= window_ms; first--) {
    }
    t_first = at(h, first)->ts_ms;
    for (int i = first + 1; i <= last; i++) {
        int64_t ts;
        if (dtq_web_history_point(h, i, queue, &ts, &depth, &pending, &d) != 0) continue;
        sum.succeeded += d.succeeded;
        sum.failed += d.failed;
        sum.retried += d.retried;
    }
    span = t_last - t_first;
    if (span <= 0) return -1;
    if (span_ms) *span_ms = span;
    *succeeded = (double)sum.succeeded * 60000.0 / (double)span;
    *failed = (double)sum.failed * 60000.0 / (double)span;
    *retried = (double)sum.retried * 60000.0 / (double)span;
    return 0;
}

void dtq_web_history_total(const dtq_web_history *h, const char *queue, dtq_web_counts *out) {
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < h->nnames; i++) {
        if (queue && strcmp(h->names[i], queue)) continue;
        out->succeeded += h->totals[i].succeeded;
        out->failed += h->totals[i].failed;
        out->retried += h->totals[i].retried;
    }
}

int dtq_web_history_knows(const dtq_web_history *h, const char *queue) {
    return find_queue(h, queue) >= 0;
}
