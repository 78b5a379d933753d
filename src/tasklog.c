/* tasklog.c: counting and logging the ends of attempts as Redis recorded them. */
#include "tasklog.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define WINDOW_MS 1000

struct dtq_tasklog {
    dtq_ctx *ctx;
    struct event *timer; /* writes the summaries of windows that ended without a next line */
    dtq_bounce bounces[DTQ_TASKLOG_BOUNCE_TYPES];
};

static void bounce_reset(dtq_bounce *b) {
    free(b->queue);
    free(b->task_type);
    memset(b, 0, sizeof(*b));
}

int dtq_bounce_note(dtq_bounce *table, const char *queue, const char *task_type, int64_t now_ms) {
    dtq_bounce *b = NULL, *oldest = NULL;
    for (int i = 0; i < DTQ_TASKLOG_BOUNCE_TYPES; i++) {
        dtq_bounce *e = &table[i];
        if (e->queue && !strcmp(e->queue, queue) && !strcmp(e->task_type, task_type)) {
            b = e;
            break;
        }
        if (!e->queue && !b) b = e; /* the first free one, unless the pair is found */
        if (e->queue && (!oldest || e->since_ms < oldest->since_ms)) oldest = e;
    }
    if (b && b->queue) {
        if (now_ms - b->since_ms < DTQ_TASKLOG_BOUNCE_INTERVAL_MS || b->count) {
            b->count++; /* written when its interval is over (dtq_bounce_due) */
            return 0;
        }
        b->since_ms = now_ms; /* a quiet interval ended: this one is written at once */
        return 1;
    }
    if (!b) { /* full: the oldest goes (its count, if any, is lost to the log, not to metrics) */
        b = oldest;
        bounce_reset(b);
    }
    b->queue = dtq_xstrdup(queue);
    b->task_type = dtq_xstrdup(task_type);
    b->since_ms = now_ms;
    return 1;
}

int dtq_bounce_due(dtq_bounce *table, int64_t now_ms, int flush, const char **queue,
                   const char **task_type, uint64_t *count) {
    for (int i = 0; i < DTQ_TASKLOG_BOUNCE_TYPES; i++) {
        dtq_bounce *b = &table[i];
        if (!b->queue || !b->count) continue;
        if (!flush && now_ms - b->since_ms < DTQ_TASKLOG_BOUNCE_INTERVAL_MS) continue;
        *queue = b->queue;
        *task_type = b->task_type;
        *count = b->count;
        b->count = 0;
        b->since_ms = now_ms; /* the next interval starts with this line */
        return 1;
    }
    return 0;
}

void dtq_bounce_clear(dtq_bounce *table) {
    for (int i = 0; i < DTQ_TASKLOG_BOUNCE_TYPES; i++) bounce_reset(&table[i]);
}

/* The lines of the bounces whose interval is over (all of them with flush); whether some
 * interval is still open with bounces counted. */
static int write_bounces(dtq_tasklog *tl, int64_t now_ms, int flush) {
    const char *queue, *type;
    uint64_t n;
    int open = 0;
    while (dtq_bounce_due(tl->bounces, now_ms, flush, &queue, &type, &n)) {
        dtq_log_field f[] = {DTQ_LOG_STR("queue", queue), DTQ_LOG_STR("task_type", type),
                             DTQ_LOG_INT("handed_back", n),
                             DTQ_LOG_INT("interval_s", DTQ_TASKLOG_BOUNCE_INTERVAL_MS / 1000),
                             DTQ_LOG_STR("worker", tl->ctx->cfg->worker_id)};
        dtq_log_fields(DTQ_LOG_INFO,
                       "tasks of a type unknown here handed back without using an attempt "
                       "(unknown_task_type = hand_back), or deferred while their pool had no "
                       "process running",
                       f, sizeof(f) / sizeof(f[0]));
    }
    for (int i = 0; i < DTQ_TASKLOG_BOUNCE_TYPES; i++)
        if (tl->bounces[i].count) open = 1;
    return open;
}

int dtq_line_limit_admit(dtq_line_limit *l, int64_t now_ms, int64_t per_s, int level,
                         uint64_t *summary, int *summary_level) {
    *summary = 0;
    if (per_s <= 0) return 1;
    if (l->lines > 0 && now_ms - l->window_ms >= WINDOW_MS) {
        if (l->suppressed) {
            *summary = l->suppressed;
            *summary_level = l->level;
            l->suppressed = 0;
            l->level = 0;
        }
        l->lines = 0;
    }
    if (l->lines == 0) l->window_ms = now_ms;
    if (l->lines < per_s) {
        l->lines++;
        return 1;
    }
    l->suppressed++;
    if (level > l->level) l->level = level;
    return 0;
}

uint64_t dtq_line_limit_expire(dtq_line_limit *l, int64_t now_ms, int *summary_level) {
    uint64_t n = l->suppressed;
    if (!n || now_ms - l->window_ms < WINDOW_MS) return 0;
    *summary_level = l->level;
    l->suppressed = 0;
    l->level = 0;
    l->lines = 0;
    return n;
}

static const char *key_class(int key) {
    if (key == DTQ_LIMIT_CANCELLED) return "cancelled";
    if (key == DTQ_LIMIT_INTERRUPTED) return "interrupted";
    if (key == DTQ_LIMIT_STALE) return "stale";
    return dtq_metrics_class_name(key % DTQ_METRICS_NCLASSES);
}

/* The outcome the lines of a key had: retried or permanent (dead_lettered or failed) for
 * the failure classes, else the key's own. */
static const char *key_outcome(int key) {
    if (key < DTQ_LIMIT_PERMANENT) return "retried";
    if (key < DTQ_LIMIT_CANCELLED) return "permanent";
    if (key == DTQ_LIMIT_CANCELLED) return "cancelled";
    if (key == DTQ_LIMIT_INTERRUPTED) return "handed_back";
    return "stale";
}

static void log_summary(const dtq_metrics_cell *c, int key, uint64_t n, int level) {
    dtq_log_field f[] = {DTQ_LOG_STR("queue", c->queue), DTQ_LOG_STR("task_type", c->task_type),
                         DTQ_LOG_STR("class", key_class(key)),
                         DTQ_LOG_STR("outcome", key_outcome(key)), DTQ_LOG_INT("suppressed", n)};
    dtq_log_fields((enum dtq_log_level)level, "task lines suppressed by the rate limit", f,
                   sizeof(f) / sizeof(f[0]));
}

typedef struct expire_pass {
    int64_t now_ms;
    int pending; /* a window with suppressed lines is still open */
} expire_pass;

static void expire_cell(dtq_metrics_cell *c, void *arg) {
    expire_pass *p = arg;
    for (int k = 0; k < DTQ_LIMIT_KEYS; k++) {
        int level = 0;
        uint64_t n = dtq_line_limit_expire(&c->limits[k], p->now_ms, &level);
        if (n) log_summary(c, k, n, level);
        if (c->limits[k].suppressed) p->pending = 1;
    }
}

static void arm(dtq_tasklog *tl) {
    struct timeval tv = {WINDOW_MS / 1000, (WINDOW_MS % 1000) * 1000};
    if (!evtimer_pending(tl->timer, NULL)) evtimer_add(tl->timer, &tv);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_tasklog *tl = arg;
    expire_pass p = {dtq_monotonic_ms(), 0};
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    dtq_metrics_each_cell(tl->ctx->metrics, expire_cell, &p);
    if (write_bounces(tl, p.now_ms, 0)) p.pending = 1;
    if (p.pending) arm(tl);
}

/* The first line of err, at most DTQ_TASKLOG_ERROR_MAX bytes, cut between characters. */
static void first_line(const char *err, char *out, size_t outlen) {
    size_t n = strcspn(err, "\r\n"), max = DTQ_TASKLOG_ERROR_MAX;
    int cut = n > max;
    if (cut) {
        n = max;
        while (n > 0 && ((unsigned char)err[n] & 0xc0) == 0x80) n--; /* a continuation byte */
    }
    if (n > outlen - 4) n = outlen - 4;
    memcpy(out, err, n);
    strcpy(out + n, cut ? "..." : "");
}

/* One record's end, as Redis answered `word`. */
static void one(dtq_tasklog *tl, const dtq_finish_record *rec, const char *word) {
    int o = dtq_metric_outcome_from_verdict(word, rec->handback), key, level, ok;
    dtq_metrics_cell *c = rec->cell;
    const dtq_task *t = rec->task;
    const char *msg, *cls = rec->error_class ? rec->error_class : "";
    char err[DTQ_TASKLOG_ERROR_MAX + 4];
    uint64_t summary = 0;
    int summary_level = 0;
    if (o < 0) return;
    if (c) {
        c->outcomes[o]++;
        if (o == DTQ_MO_RETRIED || o == DTQ_MO_DEAD_LETTERED || o == DTQ_MO_FAILED)
            c->failures[dtq_metrics_class_index(rec->error_class)]++;
    }
    switch ((enum dtq_metric_outcome)o) {
    case DTQ_MO_SUCCEEDED:
        level = DTQ_LOG_DEBUG;
        msg = "task succeeded";
        key = -1; /* not limited */
        break;
    case DTQ_MO_RETRIED:
        level = DTQ_LOG_INFO;
        msg = "task attempt failed; retry scheduled";
        key = dtq_metrics_class_index(rec->error_class);
        break;
    case DTQ_MO_DEAD_LETTERED:
        level = DTQ_LOG_WARN;
        msg = "task dead-lettered";
        key = DTQ_LIMIT_PERMANENT + dtq_metrics_class_index(rec->error_class);
        break;
    case DTQ_MO_FAILED:
        key = DTQ_LIMIT_PERMANENT + dtq_metrics_class_index(rec->error_class);
        level = DTQ_LOG_WARN;
        msg = "task failed permanently (dlq_enabled = false: no dead-letter entry)";
        break;
    case DTQ_MO_CANCELLED:
        level = DTQ_LOG_INFO;
        msg = "task cancelled";
        key = DTQ_LIMIT_CANCELLED;
        cls = "cancelled";
        break;
    case DTQ_MO_HANDED_BACK:
        level = DTQ_LOG_INFO;
        msg = "task attempt interrupted; handed back";
        key = DTQ_LIMIT_INTERRUPTED;
        cls = "interrupted";
        break;
    case DTQ_MO_DEFERRED:
        /* a rolling deploy bounces every task of the type: one line per type and interval */
        if (!dtq_log_enabled(DTQ_LOG_INFO)) return;
        if (!dtq_bounce_note(tl->bounces,
                             t   ? t->queue
                             : c ? c->queue
                                 : "",
                             t   ? t->task_type
                             : c ? c->task_type
                                 : "",
                             dtq_monotonic_ms())) {
            arm(tl);
            return;
        }
        level = DTQ_LOG_INFO;
        msg = !strcmp(cls, "pool_unavailable")
                  ? "task's pool has no process running; deferred without using an attempt; "
                    "more of its type are counted for a minute"
                  : "task type unknown here; handed back without using an attempt "
                    "(unknown_task_type = hand_back); more of its type are counted for a minute";
        key = -1; /* the bounce gate above is its limit */
        break;
    default: /* DTQ_MO_STALE */
        level = DTQ_LOG_WARN;
        msg = "task attempt ended after its task moved on (another worker has it, or it was "
              "deleted); its outcome was not recorded";
        key = DTQ_LIMIT_STALE;
        if (rec->handback) cls = "interrupted";
        break;
    }
    /* A success at debug costs nothing more than this test when debug is off. */
    if (!dtq_log_enabled((enum dtq_log_level)level)) return;
    if (key >= 0 && c) {
        ok = dtq_line_limit_admit(&c->limits[key], dtq_monotonic_ms(),
                                  tl->ctx->cfg->log_task_lines_per_s, level, &summary,
                                  &summary_level);
        if (summary) log_summary(c, key, summary, summary_level);
        if (!ok) {
            arm(tl);
            return;
        }
    }
    first_line(rec->error ? rec->error : "", err, sizeof(err));
    {
        dtq_log_field f[] = {
            DTQ_LOG_STR("task_id", rec->task_id),
            DTQ_LOG_STR("queue", t   ? t->queue
                                 : c ? c->queue
                                     : ""),
            DTQ_LOG_STR("task_type", t   ? t->task_type
                                     : c ? c->task_type
                                         : ""),
            DTQ_LOG_INT("attempt", rec->attempt),
            DTQ_LOG_INT("max_attempts", t ? t->max_attempts : 0),
            DTQ_LOG_INT("duration_ms", rec->duration_us > 0 ? rec->duration_us / 1000 : 0),
            DTQ_LOG_STR("worker", tl->ctx->cfg->worker_id),
            DTQ_LOG_STR("outcome", dtq_metric_outcome_name((enum dtq_metric_outcome)o)),
            DTQ_LOG_STR("class", cls),
            DTQ_LOG_STR("error", err),
        };
        /* a success has no class and no error */
        dtq_log_fields((enum dtq_log_level)level, msg, f,
                       o == DTQ_MO_SUCCEEDED ? sizeof(f) / sizeof(f[0]) - 2
                                             : sizeof(f) / sizeof(f[0]));
    }
}

void dtq_tasklog_verdicts(dtq_tasklog *tl, const dtq_finish_record *list, const redisReply *reply) {
    size_t i = 0;
    for (const dtq_finish_record *rec = list; rec; rec = rec->next) {
        const redisReply *v;
        if (rec->lean) { /* a lean success: counted in the reply's last element, not a word */
            one(tl, rec, "succeeded");
            continue;
        }
        if (i >= reply->elements) break;
        v = reply->element[i++];
        if (v->type == REDIS_REPLY_STRING || v->type == REDIS_REPLY_STATUS) one(tl, rec, v->str);
    }
}

dtq_tasklog *dtq_tasklog_new(dtq_ctx *ctx) {
    dtq_tasklog *tl = dtq_xcalloc(1, sizeof(*tl));
    tl->ctx = ctx;
    tl->timer = evtimer_new(ctx->base, timer_cb, tl);
    return tl;
}

void dtq_tasklog_free(dtq_tasklog *tl) {
    expire_pass p = {INT64_MAX / 2, 0};
    if (!tl) return;
    dtq_metrics_each_cell(tl->ctx->metrics, expire_cell, &p);
    write_bounces(tl, p.now_ms, 1);
    dtq_bounce_clear(tl->bounces);
    event_free(tl->timer);
    free(tl);
}
