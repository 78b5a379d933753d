/* metrics.c: the (queue, task_type) cells and their Prometheus text. */
#include "metrics.h"

#include <stdlib.h>
#include <string.h>

#include "retry.h"
#include "util.h"

/* 1 ms to 1 h: the default buckets of Prometheus' clients, and longer ones for long tasks
 * and deep queues. */
const int64_t dtq_metrics_bucket_us[DTQ_METRICS_NBUCKETS] = {
    1000,    5000,    10000,    25000,    50000,    100000,    250000,    500000,      1000000,
    2500000, 5000000, 10000000, 30000000, 60000000, 300000000, 900000000, 3600000000LL};

typedef struct mqueue {
    char *name;
    int configured; /* 0 for DTQ_METRICS_OTHER: rendered only once counted */
    dtq_histogram wait;
    dtq_metrics_cell **cells; /* by task type index; NULL until counted */
    int ncells;
} mqueue;

struct dtq_metrics {
    mqueue **queues; /* [0] is DTQ_METRICS_OTHER; then in the order first configured */
    int nqueues;
    char **types; /* [0] is DTQ_METRICS_OTHER; then handler task types */
    int ntypes;
    int *entry_type; /* registry entry index -> type index, of the last configure */
    int nentries;
};

static const char *const outcome_names[DTQ_MO_COUNT] = {"succeeded", "retried",   "dead_lettered",
                                                        "failed",    "cancelled", "handed_back",
                                                        "deferred",  "stale"};

const char *dtq_metric_outcome_name(enum dtq_metric_outcome o) {
    return (int)o >= 0 && o < DTQ_MO_COUNT ? outcome_names[o] : "?";
}

int dtq_metric_outcome_from_verdict(const char *w, int handback) {
    if (handback) {
        if (!strcmp(w, "queued")) return DTQ_MO_HANDED_BACK;
        if (!strcmp(w, "stale") || !strcmp(w, "quarantined")) return DTQ_MO_STALE;
        return -1;
    }
    if (!strcmp(w, "succeeded")) return DTQ_MO_SUCCEEDED;
    if (!strcmp(w, "retrying")) return DTQ_MO_RETRIED;
    if (!strcmp(w, "dead_lettered")) return DTQ_MO_DEAD_LETTERED;
    if (!strcmp(w, "failed")) return DTQ_MO_FAILED;
    if (!strcmp(w, "cancelled")) return DTQ_MO_CANCELLED;
    if (!strcmp(w, "pending")) return DTQ_MO_DEFERRED; /* outcome defer, within its grace */
    if (!strcmp(w, "stale") || !strcmp(w, "gone") || !strcmp(w, "quarantined")) return DTQ_MO_STALE;
    return -1;
}

const char *dtq_metrics_class_name(int i) {
    if (i < 0 || i >= DTQ_METRICS_NCLASSES - 1) return DTQ_METRICS_OTHER;
    return dtq_retry_class_to_string((enum dtq_failure_class)i);
}

int dtq_metrics_class_index(const char *cls) {
    for (int i = 0; cls && i < DTQ_METRICS_NCLASSES - 1; i++)
        if (!strcmp(cls, dtq_metrics_class_name(i))) return i;
    return DTQ_METRICS_NCLASSES - 1;
}

void dtq_histogram_observe(dtq_histogram *h, int64_t us) {
    int i = 0;
    if (us < 0) us = 0;
    while (i < DTQ_METRICS_NBUCKETS && us > dtq_metrics_bucket_us[i]) i++;
    h->buckets[i]++;
    h->sum_us += (uint64_t)us;
    h->count++;
}

static int find(char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

static mqueue *add_queue(dtq_metrics *m, const char *name, int configured) {
    mqueue *q = dtq_xcalloc(1, sizeof(*q));
    q->name = dtq_xstrdup(name);
    q->configured = configured;
    m->queues = dtq_xrealloc(m->queues, sizeof(*m->queues) * (size_t)(m->nqueues + 1));
    m->queues[m->nqueues++] = q;
    return q;
}

static void add_type(dtq_metrics *m, const char *name) {
    m->types = dtq_xrealloc(m->types, sizeof(*m->types) * (size_t)(m->ntypes + 1));
    m->types[m->ntypes++] = dtq_xstrdup(name);
}

dtq_metrics *dtq_metrics_new(void) {
    dtq_metrics *m = dtq_xcalloc(1, sizeof(*m));
    add_queue(m, DTQ_METRICS_OTHER, 0);
    add_type(m, DTQ_METRICS_OTHER);
    return m;
}

void dtq_metrics_free(dtq_metrics *m) {
    if (!m) return;
    for (int i = 0; i < m->nqueues; i++) {
        for (int j = 0; j < m->queues[i]->ncells; j++) free(m->queues[i]->cells[j]);
        free(m->queues[i]->cells);
        free(m->queues[i]->name);
        free(m->queues[i]);
    }
    for (int i = 0; i < m->ntypes; i++) free(m->types[i]);
    free(m->queues);
    free(m->types);
    free(m->entry_type);
    free(m);
}

void dtq_metrics_configure(dtq_metrics *m, const dtq_config *cfg, const dtq_handler_registry *reg) {
    for (int i = 0; i < cfg->nqueues; i++) {
        int found = -1;
        for (int j = 1; j < m->nqueues && found < 0; j++)
            if (!strcmp(m->queues[j]->name, cfg->queues[i])) found = j;
        if (found < 0) add_queue(m, cfg->queues[i], 1);
    }
    free(m->entry_type);
    m->nentries = reg ? reg->n : 0;
    m->entry_type = dtq_xcalloc((size_t)(m->nentries ? m->nentries : 1), sizeof(int));
    for (int i = 0; i < m->nentries; i++) {
        int t = find(m->types + 1, m->ntypes - 1, reg->entries[i].task_type);
        if (t < 0) {
            add_type(m, reg->entries[i].task_type);
            t = m->ntypes - 2;
        }
        m->entry_type[i] = t + 1;
    }
}

static dtq_metrics_cell *cell_at(dtq_metrics *m, const char *queue, int ti);

dtq_metrics_cell *dtq_metrics_cell_for(dtq_metrics *m, const char *queue, int entry) {
    return cell_at(m, queue, entry >= 0 && entry < m->nentries ? m->entry_type[entry] : 0);
}

dtq_metrics_cell *dtq_metrics_cell_for_type(dtq_metrics *m, const char *queue,
                                            const char *task_type) {
    int t = find(m->types + 1, m->ntypes - 1, task_type);
    if (t < 0) {
        add_type(m, task_type);
        t = m->ntypes - 2;
    }
    return cell_at(m, queue, t + 1);
}

static dtq_metrics_cell *cell_at(dtq_metrics *m, const char *queue, int ti) {
    int qi = 0;
    mqueue *q;
    dtq_metrics_cell *c;
    for (int i = 1; i < m->nqueues && !qi; i++)
        if (!strcmp(m->queues[i]->name, queue)) qi = i;
    q = m->queues[qi];
    if (ti >= q->ncells) {
        q->cells = dtq_xrealloc(q->cells, sizeof(*q->cells) * (size_t)m->ntypes);
        memset(q->cells + q->ncells, 0, sizeof(*q->cells) * (size_t)(m->ntypes - q->ncells));
        q->ncells = m->ntypes;
    }
    c = q->cells[ti];
    if (!c) {
        c = q->cells[ti] = dtq_xcalloc(1, sizeof(*c));
        c->queue = q->name;
        c->task_type = m->types[ti];
        c->wait = &q->wait;
    }
    return c;
}

void dtq_metrics_each_cell(dtq_metrics *m, void (*fn)(dtq_metrics_cell *c, void *arg), void *arg) {
    for (int i = 0; i < m->nqueues; i++)
        for (int j = 0; j < m->queues[i]->ncells; j++)
            if (m->queues[i]->cells[j]) fn(m->queues[i]->cells[j], arg);
}

/* A label value in the text format: backslash, double quote and newline escaped. The
 * values are configured names, which never hold them; this is the format's rule anyway. */
static void put_label(FILE *out, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', out), fputc(*v, out);
        else if (*v == '\n')
            fputs("\\n", out);
        else
            fputc(*v, out);
    }
}

static void put_us(FILE *out, uint64_t us) {
    fprintf(out, "%llu.%06llu", (unsigned long long)(us / 1000000),
            (unsigned long long)(us % 1000000));
}

/* The cell of (queue i, type j) to render, a zero cell for a configured pair not yet
 * counted, or NULL when there is nothing to show. */
static const dtq_metrics_cell *render_cell(const dtq_metrics *m, int i, int j) {
    static const dtq_metrics_cell zero;
    const mqueue *q = m->queues[i];
    if (j < q->ncells && q->cells[j]) return q->cells[j];
    return q->configured && j > 0 ? &zero : NULL;
}

static void put_labels(FILE *out, const dtq_metrics *m, int i, int j) {
    fputs("{queue=\"", out);
    put_label(out, m->queues[i]->name);
    fputs("\",task_type=\"", out);
    put_label(out, m->types[j]);
    fputc('"', out);
}

static void put_histogram(FILE *out, const char *name, const dtq_histogram *h,
                          void (*labels)(FILE *out, const dtq_metrics *m, int i, int j),
                          const dtq_metrics *m, int i, int j) {
    uint64_t cum = 0;
    for (int b = 0; b <= DTQ_METRICS_NBUCKETS; b++) {
        cum += h->buckets[b];
        fprintf(out, "%s_bucket", name);
        labels(out, m, i, j);
        if (b < DTQ_METRICS_NBUCKETS)
            fprintf(out, ",le=\"%g\"} %llu\n", (double)dtq_metrics_bucket_us[b] / 1e6,
                    (unsigned long long)cum);
        else
            fprintf(out, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    fprintf(out, "%s_sum", name);
    labels(out, m, i, j);
    fputs("} ", out);
    put_us(out, h->sum_us);
    fprintf(out, "\n%s_count", name);
    labels(out, m, i, j);
    fprintf(out, "} %llu\n", (unsigned long long)h->count);
}

static void put_queue_label(FILE *out, const dtq_metrics *m, int i, int j) {
    DTQ_UNUSED(j);
    fputs("{queue=\"", out);
    put_label(out, m->queues[i]->name);
    fputc('"', out);
}

void dtq_metrics_render(const dtq_metrics *m, FILE *out) {
    const dtq_metrics_cell *c;
    fputs("# HELP dtq_tasks_total Attempts ended by this worker, by the outcome Redis recorded "
          "(succeeded, retried, dead_lettered, failed, cancelled, handed_back, deferred, stale).\n"
          "# TYPE dtq_tasks_total counter\n",
          out);
    for (int i = 0; i < m->nqueues; i++)
        for (int j = 0; j < m->ntypes; j++)
            if ((c = render_cell(m, i, j)) != NULL)
                for (int o = 0; o < DTQ_MO_COUNT; o++) {
                    fputs("dtq_tasks_total", out);
                    put_labels(out, m, i, j);
                    fprintf(out, ",outcome=\"%s\"} %llu\n", outcome_names[o],
                            (unsigned long long)c->outcomes[o]);
                }
    fputs("# HELP dtq_task_failures_total Failed attempts (retried, dead-lettered or failed) "
          "by failure class.\n"
          "# TYPE dtq_task_failures_total counter\n",
          out);
    for (int i = 0; i < m->nqueues; i++)
        for (int j = 0; j < m->ntypes; j++)
            if ((c = render_cell(m, i, j)) != NULL)
                for (int k = 0; k < DTQ_METRICS_NCLASSES; k++) {
                    fputs("dtq_task_failures_total", out);
                    put_labels(out, m, i, j);
                    fprintf(out, ",class=\"%s\"} %llu\n", dtq_metrics_class_name(k),
                            (unsigned long long)c->failures[k]);
                }
    fputs("# HELP dtq_task_duration_seconds Handler run time of attempts that ended with an "
          "outcome.\n"
          "# TYPE dtq_task_duration_seconds histogram\n",
          out);
    for (int i = 0; i < m->nqueues; i++)
        for (int j = 0; j < m->ntypes; j++)
            if ((c = render_cell(m, i, j)) != NULL)
                put_histogram(out, "dtq_task_duration_seconds", &c->duration, put_labels, m, i, j);
    fputs("# HELP dtq_task_wait_seconds Time from a task's stream entry (enqueue, or the "
          "promotion of a delayed task or retry when due) to the start of its attempt here.\n"
          "# TYPE dtq_task_wait_seconds histogram\n",
          out);
    for (int i = 0; i < m->nqueues; i++)
        if (m->queues[i]->configured || m->queues[i]->wait.count)
            put_histogram(out, "dtq_task_wait_seconds", &m->queues[i]->wait, put_queue_label, m, i,
                          0);
}
