/* keys.c: key and Function names. */
#include "keys.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

char *dtq_keys_prefix(const char *ns, int cluster_hash_tag) {
    return cluster_hash_tag ? dtq_xasprintf("{%s}", ns) : dtq_xstrdup(ns);
}

char *dtq_keys_queue_prefix(const char *ns, const char *queue) {
    return dtq_xasprintf("{%s:%s}", ns, queue);
}

char *dtq_keys_global_prefix(const char *ns) {
    return dtq_xasprintf("{%s}", ns);
}

char *dtq_keyv(const char *prefix, const char *fmt, va_list ap) {
    char *suffix = NULL, *key;
    if (vasprintf(&suffix, fmt, ap) < 0) abort();
    key = dtq_xasprintf("%s:%s", prefix, suffix);
    free(suffix);
    return key;
}

char *dtq_key(const char *prefix, const char *fmt, ...) {
    va_list ap;
    char *key;
    va_start(ap, fmt);
    key = dtq_keyv(prefix, fmt, ap);
    va_end(ap);
    return key;
}

char *dtq_keys_function(const char *ns, const char *name) {
    return dtq_xasprintf("%s_%s", ns, name);
}

char *dtq_key_stream(const char *prefix, const char *queue, int band) {
    return dtq_xasprintf("%s:stream:%s:p%d", prefix, queue, band);
}

char *dtq_key_paused(const char *prefix, const char *queue) {
    return dtq_xasprintf("%s:queue:%s:paused", prefix, queue);
}

char *dtq_key_task(const char *prefix, const char *task_id) {
    return dtq_xasprintf("%s:task:%s", prefix, task_id);
}

char *dtq_key_result(const char *prefix, const char *task_id) {
    return dtq_xasprintf("%s:result:%s", prefix, task_id);
}

char *dtq_key_worker(const char *prefix, const char *worker_id) {
    return dtq_xasprintf("%s:worker:%s", prefix, worker_id);
}

static char *fixed(const char *prefix, const char *suffix) {
    return dtq_xasprintf("%s:%s", prefix, suffix);
}

char *dtq_key_dead_letter(const char *prefix) {
    return fixed(prefix, "stream:dead-letter");
}

char *dtq_key_events_stream(const char *prefix) {
    return fixed(prefix, "stream:events");
}

char *dtq_key_events_channel(const char *prefix) {
    return fixed(prefix, "events");
}

char *dtq_key_retry_schedule(const char *prefix) {
    return fixed(prefix, "retry:schedule");
}

char *dtq_key_retry_claimed(const char *prefix) {
    return fixed(prefix, "retry:claimed");
}

char *dtq_key_queues(const char *prefix) {
    return fixed(prefix, "queues");
}

char *dtq_key_workers(const char *prefix) {
    return fixed(prefix, "workers");
}

char *dtq_key_pool_restart(const char *prefix) {
    return fixed(prefix, "pool_restart");
}

char *dtq_key_cancelled(const char *prefix) {
    return fixed(prefix, "cancelled");
}

char *dtq_key_config(const char *prefix) {
    return fixed(prefix, "config");
}

char *dtq_key_scheduler_lock(const char *prefix) {
    return fixed(prefix, "lock:scheduler");
}

char *dtq_key_layout(const char *prefix) {
    return fixed(prefix, "layout");
}
