/* ctl.h: what dtqctl's files share: the connection state, the verb table's row, the ways
 * out (usage error, refusal), the calls to Redis and the verbs. dtqctl.c holds the table
 * and dispatches; the read verbs (which render the read Functions) are in ctl_read.c, the
 * write verbs in ctl_write.c. Exit codes: 0 ok, 1 refused / not found / unreachable,
 * 2 usage or configuration, 3 enqueue --wait --timeout ran out. */
#ifndef DTQ_CTL_H
#define DTQ_CTL_H

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <stdint.h>

#include "rsync.h"
#include "scope.h"

#define CTL_EXIT_REFUSED 1
#define CTL_EXIT_USAGE 2
#define CTL_EXIT_TIMEOUT 3
#define CTL_EXIT_NO_ANSWER 4         /* Redis did not answer within --timeout (connect or reply) */
#define CTL_DEFAULT_TIMEOUT_MS 10000 /* --timeout's default */
#define CTL_MAX_TIMEOUT_S 86400.0    /* --timeout's largest */
#define CTL_ACTOR "dtqctl"           /* the actor of every admin Function dtqctl calls */

typedef struct ctl {
    dtq_rsync *conn; /* NULL for the verbs that do not connect */
    const char *ns;
    char *prefix;
    const char *url; /* the Redis URL given or configured (borrowed) */
    int json;
    int64_t wait_timeout_ms; /* [redis] wait_timeout_ms, for --wait-replicas */
    int64_t timeout_ms;      /* --timeout: connect and reply limit for every command */
    int cluster;             /* the cluster layout: a redis-cluster:// URL (ctl_route.c) */
    int layout_checked;      /* <ns>_layout answered (once, before the first Function) */
    /* the cluster layout's shared slot {ns} may be unreachable: what the verb asks of it
     * (the layout check, the queue index, whether a worker serves the queue) is warned
     * about, not fatal; a producer's enqueue into a healthy queue goes on (issue 27.10) */
    int shared_optional;
} ctl;

typedef struct ctl_verb ctl_verb;

/* A verb's handler: argv are the words after the verb (and its sub-verb), argc of them
 * within the row's arity. Returns the exit code. */
typedef int ctl_run_fn(ctl *x, const ctl_verb *v, int argc, char **argv);

/* One row of dtqctl's verb table (dtqctl.c): --help, the unknown-command check, the arity
 * errors and the dispatch all come from it. */
struct ctl_verb {
    const char *name;
    const char *sub;  /* the sub-verb (dlq list, functions install), or NULL */
    const char *args; /* the positional arguments ("<queue>"), or NULL */
    const char *opts; /* the options, or NULL; '\n' goes on with a new line */
    const char *help; /* what it does, or NULL; '\n' goes on with a new line */
    int min, max;     /* argument count; max -1: any (the handler parses the options) */
    ctl_run_fn *run;
    int connects;   /* 0: no Redis connection (acl) */
    const char *fn; /* the Function of the one-word verbs (ctl_simple), or NULL */
};

/* "dtqctl: <message>" and "Try 'dtqctl --help'." on stderr, exit 2. */
void ctl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* The usage line of a verb's row ("usage: dtqctl cancel <id> [options]"), exit 2. */
void ctl_verb_usage(const ctl_verb *v) __attribute__((noreturn));
/* "dtqctl: <message>" on stderr, exit 1. */
void ctl_refused(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* An option's seconds (a decimal number, fractions too) in (0, max_s], as ms (at least 1);
 * else "<option> needs seconds in (0, max], not '<s>'", exit 2. */
int64_t ctl_parse_seconds(const char *option, const char *s, double max_s);
/* A command failed (rsync's why): exit 4 with "redis at <where> did not answer within N s"
 * when --timeout ran out, else as ctl_refused ("redis: <why>", exit 1). */
void ctl_link_failed(ctl *x, const char *why) __attribute__((noreturn));
/* One command and its reply (an error reply included); a lost connection exits 1, no
 * answer within --timeout exits 4. */
redisReply *ctl_command(ctl *x, int argc, const char **argv);
/* ctl_command that returns NULL (why filled) instead of exiting when the command could not
 * be answered: for what x->shared_optional allows to fail. */
redisReply *ctl_try_command(ctl *x, int argc, const char **argv, char *why, size_t whylen);
/* The shared slot's answer could not be had (x->shared_optional): a warning naming what
 * was skipped. */
void ctl_shared_skipped(const char *what, const char *why);
/* The next reply without a command (a subscriber's messages); a lost connection exits 1. */
redisReply *ctl_read(ctl *x);
/* <ns>_layout: checks the namespace's layout marker, writing it when there is none (a
 * WRONG_LAYOUT ends the program, exit 1). ctl_fcall_reply calls it before the first write. */
void ctl_check_layout(ctl *x);
/* FCALL (ro: FCALL_RO) <ns>_<name> args... about `queue` (NULL: the namespace as a whole,
 * or in the cluster layout its global state), routed as ctl_route.c says: the single layout
 * passes no key, the cluster layout the tag {ns:queue} or {ns}. Error replies are returned,
 * but for Functions that are not loaded (exit 1 naming `dtqctl functions install`) and a
 * namespace laid out the other way (<ns>_layout's WRONG_LAYOUT, exit 1). NULL only for a
 * call of the shared slot that did not answer while x->shared_optional (warned). */
redisReply *ctl_fcall_reply(ctl *x, int ro, const char *queue, const char *name, int argc,
                            const char **args);
/* ctl_fcall_reply with any error reply ending the program: exit 1, the error on stderr. */
redisReply *ctl_fcall(ctl *x, int ro, const char *queue, const char *name, int argc,
                      const char **args);
/* A read Function's reply (FCALL_RO, one JSON text) parsed; exit 1 on an error reply or
 * a reply that is not JSON. Caller-owned. */
cJSON *ctl_read_model(ctl *x, const char *queue, const char *name, int argc, const char **args);
/* The value unformatted on one line of stdout. */
void ctl_print_json(const cJSON *v);

/* A merge of the parts of a read over every queue (a rule of view_merge.c). */
typedef cJSON *ctl_merge_fn(cJSON *const *parts, int n);
/* One part of such a read: fn's answer about `queue` (NULL: {ns}) as JSON. Caller-owned. */
typedef cJSON *ctl_part_fn(ctl *x, const char *queue, const char *fn, int argc, const char **args);
/* A read over every queue: in the single layout the one call's answer as it is; in the
 * cluster layout one call per queue of ctl_scopes and, with `global`, one with {ns},
 * merged by `merge`. Each call's answer comes from `part` (NULL: ctl_read_model).
 * Caller-owned. */
cJSON *ctl_read_merged(ctl *x, const char *fn, int argc, const char **args, int global,
                       ctl_part_fn *part, ctl_merge_fn *merge);

/* One entry of a paged list: print it (entry is the page's, borrowed). */
typedef void ctl_entry_fn(ctl *x, cJSON *entry, void *arg);
/* A merge of pages of several queues into one of `count` entries (view_merge.c's
 * dtq_view_merge_stream_pages, dtq_view_merge_scheduled). */
typedef cJSON *ctl_page_merge_fn(cJSON *const *parts, int n, int count);
/* A paged read Function (<ns>_dead_letters, <ns>_scheduled) over the queues of ctl_scopes:
 * args[0] and args[1] are filled with the cursor and the count, page after page (at most
 * page_max each) until `want` entries or no next_cursor. The single layout pages its one
 * call and lists the entries in their order; the cluster layout takes up to `want`
 * entries of each queue as one page of it, merges those pages by `merge` (the queues'
 * order breaks ties) and lists the first `want`. Each listed entry goes to `each`; with
 * --json they are printed as one array (each prints an entry's JSON, entries separated
 * here). */
void ctl_list_merged(ctl *x, char **scopes, int nscopes, const char *fn, int argc,
                     const char **args, long long want, long long page_max,
                     ctl_page_merge_fn *merge, ctl_entry_fn *each, void *arg);

/* Routing (ctl_route.c). The queues a read over every queue calls its Function about, in
 * order: in the single layout one NULL (the call covers the namespace), in the cluster
 * layout the queues of the index {ns}:queues as dtq_scope_index_names gives them (valid
 * names, sorted; maybe none); *n their number. A read with global parts makes one more
 * call with NULL in the cluster layout (x->cluster). Freed with dtq_scope_names_free. */
char **ctl_scopes(ctl *x, int *n);
/* The cluster layout: SADD {ns}:queues queue (the index that the reads over every queue
 * read), after a write that makes the queue known; nothing in the single layout. */
void ctl_queue_index_add(ctl *x, const char *queue);
/* The cluster layout: SREM {ns}:queues queue, after queue remove. */
void ctl_queue_index_remove(ctl *x, const char *queue);
/* Takes "--queue Q" out of argv (*argc shrinks); returns Q or NULL. A second --queue, or
 * one without a value, is a usage error naming `verb`. */
const char *ctl_take_queue(const char *verb, int *argc, char **argv);
/* The queue of a by-id verb: in the cluster layout `queue` must be given (else the
 * INVALID_ARGUMENT refusal, exit 1); the single layout ignores it (NULL). */
const char *ctl_id_queue(ctl *x, const char *queue);

/* "2026-12-01T21:14:14.123Z (1796159654123)" for epoch ms (a plain integer text); NULL for
 * another value. */
const char *ctl_iso_time(const char *value, char *buf, size_t size);

/* Read verbs (ctl_read.c). */
ctl_run_fn ctl_show, ctl_queues, ctl_workers, ctl_stats, ctl_dlq_list, ctl_events;
/* A <ns>_task_view reply (its JSON text) as `show` prints it; enqueue --wait ends with it. */
void ctl_show_task(ctl *x, const char *text, size_t len);

/* Write verbs (ctl_write.c). ctl_simple calls the row's Function with the arguments and
 * the actor, and prints its one-word reply. */
ctl_run_fn ctl_enqueue, ctl_enqueue_bulk, ctl_simple, ctl_pause_resume, ctl_requeue_all,
    ctl_purge_dlq, ctl_functions_install, ctl_pool_restart;

/* The schedule and the queue as a whole (ctl_sched.c): scheduled list, run-now and delete
 * (<ns>_scheduled, <ns>_sched_run_now, <ns>_sched_delete), queue clear, remove and mode. */
ctl_run_fn ctl_scheduled_list, ctl_scheduled_act, ctl_queue_clear, ctl_queue_remove, ctl_queue_mode;

/* Periodic tasks (ctl_cron.c): cron add, list, and remove | pause | resume | run. */
ctl_run_fn ctl_cron_add, ctl_cron_list, ctl_cron_act;
/* Workflows (ctl_flow.c): batch create | add | close | show (<ns>_batch, <ns>_batch_show) and
 * chain (<ns>_chain). */
ctl_run_fn ctl_batch, ctl_chain;
/* Rate and concurrency limits (ctl_limit.c): limit set, list and remove (<ns>_limit_set,
 * <ns>_limit_list, <ns>_limit_remove). */
ctl_run_fn ctl_limit_set, ctl_limit_list, ctl_limit_remove;

#endif
