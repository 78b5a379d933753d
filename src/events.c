/* events.c: event JSON with cJSON, so every string is escaped correctly. */
#include "events.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char *terminal_types[] = {
    "TASK_SUCCEEDED", "TASK_FAILED",    "TASK_DEAD_LETTERED", "TASK_CANCELLED",
    "TASK_EXPIRED",   "WORKER_STARTED", "WORKER_STOPPED",     NULL};

int dtq_events_wanted(enum dtq_events_level level, const char *type) {
    if (level == DTQ_EVENTS_OFF) return 0;
    if (level == DTQ_EVENTS_ALL) return 1;
    for (const char **t = terminal_types; *t; t++)
        if (!strcmp(*t, type)) return 1;
    return 0;
}

char *dtq_events_build(enum dtq_events_level level, int64_t ts_ms, const char *type,
                       const char *task_id, const char *queue, const char *task_type,
                       int64_t attempt, const char *worker_id, const char *metadata_json) {
    char uuid[37], ts[32];
    cJSON *ev;
    char *out;
    if (!dtq_events_wanted(level, type)) return NULL;
    dtq_uuid4(uuid);
    dtq_format_iso8601(ts_ms, ts, sizeof(ts));
    ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event_id", uuid);
    cJSON_AddStringToObject(ev, "ts", ts);
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddStringToObject(ev, "task_id", task_id ? task_id : "");
    cJSON_AddStringToObject(ev, "queue", queue ? queue : "");
    cJSON_AddStringToObject(ev, "task_type", task_type ? task_type : "");
    cJSON_AddNumberToObject(ev, "attempt", (double)attempt);
    cJSON_AddStringToObject(ev, "worker_id", worker_id ? worker_id : "");
    if (metadata_json) {
        cJSON *meta = cJSON_Parse(metadata_json);
        if (meta) cJSON_AddItemToObject(ev, "metadata", meta);
    }
    out = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (!out) abort();
    return out;
}
