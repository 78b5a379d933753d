/* keys.h: the one place that names dtq's Redis keys and Functions, for the daemon, dtqctl
 * and (through the prefix it hands to scripts.c) the Functions library. A key is
 * "<prefix>:<suffix>"; the prefix is the namespace, or "{namespace}" with
 * cluster_hash_tag so that every key hashes to one Redis Cluster slot.
 *
 * Every key the C side reads or writes is built by one of the dtq_key_* constructors
 * below (caller-owned strings); lua/lib/scope.lua's k() builds the same names. */
#ifndef DTQ_KEYS_H
#define DTQ_KEYS_H

#include <stdarg.h>

/* The consumer group of every band's stream (the Functions get it from scripts.c). */
#define DTQ_GROUP "workers"

/* "ns" or "{ns}". Caller-owned. */
char *dtq_keys_prefix(const char *ns, int cluster_hash_tag);

/* The cluster layout (redis-cluster:// URLs; docs/reference.md "Redis Cluster"): every key
 * of queue q has the prefix "{ns:q}", its hash tag, so that one queue is one slot and
 * queues spread over the shards by their names; the worker registry, the scheduler lock,
 * the queue index and the layout marker have the prefix "{ns}". A Function call names the
 * slot with its first key, the bare prefix itself (lua/lib/call.lua's wrapper). The suffixes are
 * the single layout's: "{ns:q}:stream:q:p9", "{ns:q}:task:<id>", "{ns}:workers". */
char *dtq_keys_queue_prefix(const char *ns, const char *queue); /* "{ns:q}" */
char *dtq_keys_global_prefix(const char *ns);                   /* "{ns}" */
/* "<prefix>:<suffix>" with the suffix formatted from fmt. Caller-owned. Prefer the named
 * constructors below: this is for callers that keep a prefix of their own (dtq-web). */
char *dtq_key(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dtq_key with a va_list, for the wrappers that know their prefix (dtq-web). */
char *dtq_keyv(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* "<ns>_<name>", the registered name of a Function. Caller-owned. */
char *dtq_keys_function(const char *ns, const char *name);

/* Per queue. */
char *dtq_key_stream(const char *prefix, const char *queue, int band); /* stream:<q>:p<band> */
char *dtq_key_paused(const char *prefix, const char *queue);           /* queue:<q>:paused */
/* Per task and per worker. */
char *dtq_key_task(const char *prefix, const char *task_id);     /* task:<id>, a hash */
char *dtq_key_result(const char *prefix, const char *task_id);   /* result:<id> */
char *dtq_key_worker(const char *prefix, const char *worker_id); /* worker:<id>, a hash */
/* One per namespace. */
char *dtq_key_dead_letter(const char *prefix);    /* stream:dead-letter */
char *dtq_key_events_stream(const char *prefix);  /* stream:events */
char *dtq_key_events_channel(const char *prefix); /* events, the pub/sub channel */
char *dtq_key_retry_schedule(const char *prefix); /* retry:schedule, a zset */
char *dtq_key_retry_claimed(const char *prefix);  /* retry:claimed, a zset */
char *dtq_key_queues(const char *prefix);         /* queues, a set */
char *dtq_key_workers(const char *prefix);        /* workers, a set */
/* <p>:pool_restart: a hash, pool name -> the time (ms) of the last `dtqctl pool restart`. */
char *dtq_key_pool_restart(const char *prefix);
char *dtq_key_cancelled(const char *prefix);      /* cancelled, a set */
char *dtq_key_config(const char *prefix);         /* config, a hash (worker.c publishes it) */
char *dtq_key_scheduler_lock(const char *prefix); /* lock:scheduler */
char *dtq_key_layout(const char *prefix);         /* layout: "single" or "cluster" */

#endif
