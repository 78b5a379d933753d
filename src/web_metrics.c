/* web_metrics.c: GET /metrics, the whole system in Prometheus' text format (0.0.4) for
 * whoever scrapes once: one FCALL_RO <ns>_metrics (docs/reference.md 5.5: bounded, no
 * keyspace SCAN, whatever the number of task hashes), rendered as gauges, and dtq-web's
 * own link to Redis. While Redis is unreachable the answer is 200 with
 * dtq_redis_connected 0 alone, so an alert can tell that from a dtq-web that is down; an
 * error reply of the Function is answered as the other reads answer it (web_core.c), so
 * the scrape fails. Series and labels: docs/reference.md 15. */
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "web_api.h"

/* A label value in the text format: backslash, double quote and newline escaped; other
 * control bytes, which the format has no escape for, written as '?'. */
static void put_label(FILE *out, const char *v) {
    for (; *v; v++) {
        unsigned char ch = (unsigned char)*v;
        if (ch == '\\')
            fputs("\\\\", out);
        else if (ch == '"')
            fputs("\\\"", out);
        else if (ch == '\n')
            fputs("\\n", out);
        else if (ch < 0x20 || ch == 0x7f)
            fputc('?', out);
        else
            fputc(ch, out);
    }
}

static void put_head(FILE *out, const char *name, const char *help) {
    fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

/* name{l1="v1"[,l2="v2"]} value; l1 NULL: no labels. */
static void put_sample(FILE *out, const char *name, const char *l1, const char *v1, const char *l2,
                       const char *v2, double value) {
    fputs(name, out);
    if (l1) {
        fprintf(out, "{%s=\"", l1);
        put_label(out, v1);
        if (l2) {
            fprintf(out, "\",%s=\"", l2);
            put_label(out, v2);
        }
        fputs("\"}", out);
    }
    fprintf(out, " %.17g\n", value);
}

static double num(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static double flag(const cJSON *o, const char *name) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, name)) ? 1 : 0;
}

static const char *str(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* One gauge per queue, the field `field` of each queue object (scale: ms to s). */
static void put_per_queue(FILE *out, const cJSON *queues, const char *name, const char *help,
                          const char *field, double scale) {
    const cJSON *q;
    put_head(out, name, help);
    cJSON_ArrayForEach(q, queues) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, field);
        double x = cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? 1 : 0) : num(q, field) * scale;
        put_sample(out, name, "queue", str(q, "name"), NULL, NULL, x);
    }
}

static void render(FILE *out, const cJSON *b) {
    const cJSON *queues = cJSON_GetObjectItemCaseSensitive(b, "queues");
    const cJSON *sched = cJSON_GetObjectItemCaseSensitive(b, "scheduled");
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(b, "dead_letters");
    const cJSON *workers = cJSON_GetObjectItemCaseSensitive(b, "workers");
    const cJSON *leader = cJSON_GetObjectItemCaseSensitive(b, "leader");
    const cJSON *q, *e;

    put_head(out, "dtq_queue_depth",
             "Entries waiting to be read, per queue and priority band (XLEN minus pending).");
    cJSON_ArrayForEach(q, queues) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(q, "depth_by_band");
        int band = 0;
        cJSON_ArrayForEach(e, d) {
            char p[16];
            snprintf(p, sizeof(p), "%d", band++);
            put_sample(out, "dtq_queue_depth", "queue", str(q, "name"), "priority", p,
                       cJSON_IsNumber(e) ? e->valuedouble : 0);
        }
    }
    put_per_queue(out, queues, "dtq_queue_pending",
                  "Entries delivered to a worker and not yet acknowledged.", "pending", 1);
    put_per_queue(out, queues, "dtq_queue_oldest_waiting_seconds",
                  "Age of the oldest entry waiting to be read (0: none waits).",
                  "oldest_waiting_ms", 0.001);
    put_per_queue(out, queues, "dtq_queue_paused", "1 when the queue is paused.", "paused", 1);
    put_per_queue(out, queues, "dtq_scheduled_tasks",
                  "Delayed and retrying tasks of the queue, among the 1000 soonest due.",
                  "scheduled", 1);

    put_head(out, "dtq_schedule_length", "Members of the schedule (delayed and retrying tasks).");
    put_sample(out, "dtq_schedule_length", NULL, NULL, NULL, NULL, num(sched, "total"));

    put_head(out, "dtq_dead_letters",
             "Dead letters per queue and error class, among the 1000 newest entries.");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(dl, "by_queue_class")) {
        put_sample(out, "dtq_dead_letters", "queue", str(e, "queue"), "class", str(e, "class"),
                   num(e, "count"));
    }
    put_head(out, "dtq_dead_letter_length", "Entries of the dead-letter stream (XLEN).");
    put_sample(out, "dtq_dead_letter_length", NULL, NULL, NULL, NULL, num(dl, "length"));

    put_head(out, "dtq_workers", "Live workers (heartbeat hash present) per status.");
    cJSON_ArrayForEach(e, workers) {
        if (cJSON_IsNumber(e))
            put_sample(out, "dtq_workers", "status", e->string, NULL, NULL, e->valuedouble);
    }

    put_head(out, "dtq_scheduler_leader",
             "1 with the worker holding the scheduler lock; worker=\"\" 0 when none does.");
    if (cJSON_IsString(leader))
        put_sample(out, "dtq_scheduler_leader", "worker", leader->valuestring, NULL, NULL, 1);
    else
        put_sample(out, "dtq_scheduler_leader", "worker", "", NULL, NULL, 0);

    put_head(out, "dtq_metrics_truncated",
             "1 when a part of this answer was cut at its bound (docs/reference.md 5.5).");
    put_sample(out, "dtq_metrics_truncated", "part", "queues", NULL, NULL,
               flag(b, "queues_truncated"));
    put_sample(out, "dtq_metrics_truncated", "part", "scheduled", NULL, NULL,
               1 - flag(sched, "by_queue_complete"));
    put_sample(out, "dtq_metrics_truncated", "part", "dead_letters", NULL, NULL,
               1 - flag(dl, "complete"));
    put_sample(out, "dtq_metrics_truncated", "part", "workers", NULL, NULL,
               flag(b, "workers_truncated"));

    /* Redis Cluster: the parts of this answer whose slot's primary was down (a queue, or
     * the shared slot {ns}): their series are missing above, not zero */
    put_head(out, "dtq_part_unreachable",
             "1 per queue (or the shared slot {ns}) whose shard was down: not in this answer.");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(b, "unreachable")) {
        if (cJSON_IsString(e))
            put_sample(out, "dtq_part_unreachable", "part", e->valuestring, NULL, NULL, 1);
    }
}

/* Answers the text: dtq-web's own series, then the Function's (body NULL: none). */
static void answer(struct evhttp_request *req, int connected, const cJSON *body) {
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out) abort();
    put_head(out, "dtq_redis_connected", "1 when dtq-web is connected to Redis, else 0.");
    put_sample(out, "dtq_redis_connected", NULL, NULL, NULL, NULL, connected);
    if (body) render(out, body);
    fclose(out);
    dtq_web_common_headers(req, "text/plain; version=0.0.4; charset=utf-8");
    dtq_web_send(req, 200, buf, len);
    free(buf);
}

static void metrics_answer(dtq_web *w, struct evhttp_request *req, const cJSON *body) {
    DTQ_UNUSED(w);
    answer(req, 1, body);
}

void dtq_web_metrics(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    DTQ_UNUSED(a);
    if (!w->redis_up) {
        answer(req, 0, NULL);
        return;
    }
    dtq_web_read_function(w, req, w->fn.metrics, metrics_answer, NULL);
}
