/* view_merge.h: the cluster layout's merges of the read views (docs/reference.md 5.9). A
 * read Function called with a queue's tag {ns:q} answers for that queue alone, and with
 * {ns} for the shared state alone (workers, the scheduler leader, the global audit); these
 * put such parts together into the single layout's shape, the one rule for each view.
 * dtq-web (web_read.c) and dtqctl (ctl_route.c: ctl_read_merged for queues, stats, cron
 * limits and batches; ctl_list_merged for the dead letters and the schedule) both merge here.
 * Pure: parsed answers in (borrowed), a new object out, no I/O. Parts come in any order;
 * the {ns} part is one of them when the caller asked for it (a view of the queues alone,
 * like dtqctl's queues or the limits, has none).
 *
 * Merged pages (dead letters, audit, the schedule) keep the single layout's cursors: each
 * part is one page of its stream or set after the same cursor, and the merged page holds
 * the first `count` entries in the page's order among what every part has examined (a
 * part that stopped early, at its count or its scan bound, with a next_cursor, has not
 * examined beyond it). Entries with the same key in several parts (the same stream id, or
 * due time and task id) are all taken together, so that the next page, which starts after
 * that key in every part, misses none: a page may then hold a few more than `count`. */
#ifndef DTQ_VIEW_MERGE_H
#define DTQ_VIEW_MERGE_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Stream ids "<ms>-<seq>" (or "<ms>") compared as numbers: < 0, 0, > 0. */
int dtq_view_cmp_stream_id(const char *a, const char *b);
/* Schedule cursors "<due_ms>:<task_id>": due time as a number, then the task id bytewise
 * (the schedule's order). */
int dtq_view_cmp_sched_key(const char *a, const char *b);
/* An entry of <ns>_scheduled as its cursor "<due_ms>:<task_id>", into buf. */
const char *dtq_view_sched_key(const cJSON *entry, char *buf, size_t size);

/* <ns>_overview: queues concatenated and sorted by name (at most queues_max, more sets
 * queues_truncated; queues_max < 0: all), workers concatenated, the scheduler's counts and the dead
 * letters summed, its leader the one named, by_queue_complete when every part's was; events as the
 * first queue's part says (stream: any part's). */
cJSON *dtq_view_merge_overview(cJSON *const *parts, int n, int queues_max);
/* <ns>_metrics: queues as the overview's, scheduled and dead_letters summed (complete when
 * every part was; by_queue_class concatenated, sorted by queue and class), workers summed
 * per status, the leader the one named. */
cJSON *dtq_view_merge_metrics(cJSON *const *parts, int n, int queues_max);
/* <ns>_dead_letters and <ns>_audit_page pages: entries by entry_id (newest first unless
 * oldest_first), total and scanned summed, order and filter the first part's. */
cJSON *dtq_view_merge_stream_pages(cJSON *const *parts, int n, int count, int oldest_first);
/* <ns>_scheduled pages: entries soonest due first (ties by task id), total, claimed and
 * scanned summed, filter the first part's. */
cJSON *dtq_view_merge_scheduled(cJSON *const *parts, int n, int count);
/* <ns>_cron_list: schedules by name, then queue; now_ms the latest. */
cJSON *dtq_view_merge_cron(cJSON *const *parts, int n);
/* <ns>_limit_list (arrays): the limits by queue, each queue's in its own order. */
cJSON *dtq_view_merge_limits(cJSON *const *parts, int n);
/* <ns>_batch_list: the newest `count` batches of every part (by created_at, then id, both
 * descending, as ZREVRANGE orders one part);
 * more when a part had more or some were left out. */
cJSON *dtq_view_merge_batches(cJSON *const *parts, int n, int count);
/* <ns>_stats (its name/value pairs as objects, in their order): every name once, in the
 * order first seen; numbers summed (the namespace's counters: scheduled, claimed, dlq,
 * workers; a queue's queue:<q>:* pairs come from its own part), words (queue:<q>:mode)
 * the first part's. */
cJSON *dtq_view_merge_stats(cJSON *const *parts, int n);

#endif
