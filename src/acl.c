/* acl.c: see acl.h. A rule is a template: "<ns>" stands for the namespace (Function names),
 * "<p>" for the key prefix (key and channel patterns). The command lists follow the code:
 * the Functions' redis.call/pcall in lua/ and the daemon's and dtqctl's own
 * commands. tests/integration/it_acl.c runs every role and fails on any denial in ACL LOG,
 * including the ones a redis.pcall would swallow. */
#include "acl.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

const char *const dtq_acl_roles[] = {"producer", "producer-raw", "worker",
                                     "admin",    "monitor",      NULL};

#define RESET "resetkeys", "resetchannels", "clearselectors", "-@all"

/* One line per purpose. */
/* clang-format off */

/* The read model (FCALL_RO, lua/fn/read.lua), and the commands it runs that the roles reading
 * through it hold for nothing else. */
#define READ_FUNCTIONS                                                                  \
    "+fcall_ro|<ns>_overview", "+fcall_ro|<ns>_workers", "+fcall_ro|<ns>_queue_view", \
    "+fcall_ro|<ns>_task_view", "+fcall_ro|<ns>_dead_letters", "+fcall_ro|<ns>_audit_page", \
    "+fcall_ro|<ns>_scheduled", "+fcall_ro|<ns>_metrics", "+fcall_ro|<ns>_cron_list", \
    "+fcall_ro|<ns>_limit_list", "+fcall_ro|<ns>_served", "+fcall_ro|<ns>_batch_show", \
    "+fcall_ro|<ns>_batch_list"
#define READ_COMMANDS "+sismember", "+xinfo|groups", "+pttl", "+zscore", "+zrank", "+zcount", \
    "+scard", "+srandmember", "+hvals", "+zrevrange"

/* <ns>_enqueue and the commands it runs; <ns>_layout, which dtqctl calls before its first
 * write. The layout marker is read-only (%R~): a producer that could SET it would stop
 * every daemon and dtqctl (WRONG_LAYOUT); the daemon and `dtqctl functions install` write
 * it. <ns>_served, which dtqctl asks after an enqueue (whether a live worker serves the
 * queue: the worker set and hashes, read-only). The task hashes, streams, schedule and
 * queue set are write-only patterns (%W~): EXISTS and XLEN need no read permission, and the
 * producer cannot read another producer's tasks with the HMGET it holds for <p>:config. */
static const char *const producer[] = {
    "+fcall|<ns>_enqueue", "+fcall|<ns>_enqueue_bulk", "+fcall|<ns>_layout", "+fcall_ro|<ns>_served",
    "+fcall|<ns>_batch", "+fcall|<ns>_chain", "+fcall_ro|<ns>_batch_show",
    "+time", "+hmget", "+get", "+mget", "+exists", "+xlen", "+incr", "+incrby", "+hset", "+sadd",
    "+set", "+zadd", "+xadd", "+publish", "+pubsub|numsub", "+pubsub|numpat", "+smembers",
    "%R~<p>:config", "%R~<p>:queue:*:mode", "%W~<p>:task:*", "%W~<p>:stream:*:p[0-9]", "%W~<p>:stream:events",
    "%R~<p>:workers", "%R~<p>:worker:*",
    "~<p>:idempotency:*", "~<p>:unique:*", "%W~<p>:queues", "~<p>:seq", "%W~<p>:retry:schedule",
    "%R~<p>:layout", "~<p>:queue:*:length", "&<p>:events",
    /* batches and chains: the batches, the waiters sets of a chain's links, and what a
     * batch complete at its close runs (its callbacks enqueued, its retention). Not `after`
     * naming an existing task: that reads the task's status, and task hashes are
     * write-only here (the enqueue answers NOPERM; reference 17) */
    "~<p>:waiters:*", "~<p>:batch:*", "~<p>:batches", "+scard", "+hincrby", "+hgetall",
    "+hexists", "+srandmember", "+expire", "+hvals", "+zrange", "+zrem", NULL};

/* A plain XADD into the priority streams, nothing else. */
static const char *const producer_raw[] = {"+xadd", "%W~<p>:stream:*:p[0-9]", NULL};

/* dtq-worker: its Functions (not FUNCTION LOAD: an admin installs the library), the
 * commands they run, and its own: the handshake PING, INFO memory (eviction policy), the
 * published config and queue set, consumer groups, the blocking XREAD, claims (XCLAIM),
 * the cancel probe (HGET), heartbeats, the scheduler's lock (SET), the layout check
 * (<ns>_layout) and, in the cluster layout, the queue index (SMEMBERS). <ns>_sched_claim
 * runs ZCARD, ZRANGE and TIME for the pass's gauges and next wake-up. */
static const char *const worker[] = {
    "+fcall|<ns>_layout", "+fcall|<ns>_fetch", "+fcall|<ns>_reap", "+fcall|<ns>_recover", "+fcall|<ns>_deregister",
    "+fcall|<ns>_finish",
    "+fcall|<ns>_handback", "+fcall|<ns>_worker_event", "+fcall|<ns>_progress",
    "+fcall|<ns>_sched_claim",
    "+fcall|<ns>_sched_promote", "+fcall|<ns>_lock_refresh", "+fcall|<ns>_lock_release",
    "+fcall_ro|<ns>_version", "+fcall_ro|<ns>_cron_due", "+fcall|<ns>_cron_fire",
    "+fcall|<ns>_cron_set", "+fcall|<ns>_cron_sync", "+fcall|<ns>_queue_mode", "+mget",
    "+ping", "+role", "+info|memory", "+xgroup|create", "+xread", "+xreadgroup", "+xautoclaim",
    "+xclaim", "+xack", "+xdel", "+xtrim", "+xadd", "+xpending", "+xrange", "+xrevrange",
    "+hset", "+hget", "+hgetall", "+hmget", "+hdel", "+sadd", "+srem", "+sismember",
    "+set", "+get", "+del", "+exists", "+expire", "+pexpire", "+incr", "+incrby", "+type", "+time",
    "+publish", "+zadd", "+zrem", "+zrangebyscore", "+zcard", "+pubsub|numsub", "+pubsub|numpat",
    "+scard", "+smembers", "+srandmember", "+xinfo|consumers", "+xgroup|delconsumer", "+wait", "+xlen", "+hlen",
    "+hincrby", "+hexists", "+hsetnx", /* batches: a member's end counted (lib/batch.lua) */
    /* limits (fetch, reap and finish under a limit): GCRA state, slot sets, their healing */
    "+zrange", "+zscore", "+zremrangebyscore",
    "~<p>:*", "&<p>:events", NULL};

/* The admin Functions, FUNCTION LOAD (dtqctl functions install), the commands the
 * Functions run, and dtqctl's reads (show, dlq list, dlq requeue-all, queues, workers,
 * events). The schedule and queue Functions also run SREM (the cancelled set, the queue
 * set) and XACK (a producer's raw entry that queue_clear materializes and settles). */
static const char *const admin[] = {
    "+fcall|<ns>_requeue", "+fcall|<ns>_requeue_dlq", "+fcall|<ns>_discard",
    "+fcall|<ns>_purge_dlq", "+fcall|<ns>_cancel", "+fcall|<ns>_pause", "+fcall|<ns>_resume",
    "+fcall|<ns>_sched_run_now", "+fcall|<ns>_sched_delete", "+fcall|<ns>_queue_clear",
    "+fcall|<ns>_queue_remove", "+fcall|<ns>_cron_set", "+fcall|<ns>_cron_remove",
    "+fcall|<ns>_cron_pause", "+fcall|<ns>_cron_resume", "+fcall|<ns>_cron_run",
    "+fcall|<ns>_queue_remove", "+fcall|<ns>_limit_set", "+fcall|<ns>_limit_remove",
    "+fcall|<ns>_queue_mode", "+fcall|<ns>_pool_restart", "+mget",
    "+fcall|<ns>_batch", "+fcall|<ns>_chain", "+hincrby", "+hexists", "+hsetnx", "+srandmember", "+zadd",
    "+fcall_ro|<ns>_stats", "+fcall_ro|<ns>_version", "+function|load", "+fcall|<ns>_layout",
    READ_FUNCTIONS,
    "+time", "+hgetall", "+hget", "+hmget", "+hset", "+hdel", "+get", "+set", "+del",
    "+exists", "+expire", "+persist", "+type", "+incr", "+incrby", "+publish", "+xadd", "+xdel",
    "+xlen", "+xrange", "+xrevrange", "+xpending", "+smembers", "+zrange", "+zrem", "+zcard",
    "+subscribe", "+pubsub|numsub", "+pubsub|numpat", "+scard", "+sadd", "+srem", "+xack",
    "+hlen", READ_COMMANDS,
    "~<p>:*", "&<p>:events", NULL};

/* Reads only: <ns>_stats, the read model and what they run, dtqctl show, dlq list, queues,
 * workers, events. Keys are read-only (%R~), so no write could pass even with a write
 * command. */
static const char *const monitor[] = {
    "+fcall_ro|<ns>_stats", "+fcall_ro|<ns>_version", READ_FUNCTIONS,
    "+hgetall", "+hget", "+get", "+exists", "+xlen", "+xrange", "+xpending", "+smembers",
    "+zrange", "+zcard", "+subscribe",
    "+ping", /* a read-only dtq-web: its handshake, and the liveness PING of every connection */
    "+time", "+hmget", "+type", "+xrevrange", READ_COMMANDS,
    "%R~<p>:*", "&<p>:events", NULL};

/* clang-format on */

static const char *const *role_rules(const char *name) {
    static const struct {
        const char *name;
        const char *const *rules;
    } table[] = {{"producer", producer},
                 {"producer-raw", producer_raw},
                 {"worker", worker},
                 {"admin", admin},
                 {"monitor", monitor}};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(table[i].name, name)) return table[i].rules;
    return NULL;
}

/* One rule with "<ns>" and "<p>" replaced. Caller-owned. */
static char *expand(const char *rule, const char *ns, const char *prefix) {
    size_t cap = strlen(rule) + 1, n = 0;
    char *out;
    for (const char *p = rule; *p; p++)
        cap += strlen(ns) + strlen(prefix); /* generous: at most one per character */
    out = dtq_xcalloc(1, cap);
    for (const char *p = rule; *p;) {
        size_t skip = !strncmp(p, "<ns>", 4) ? 4 : !strncmp(p, "<p>", 3) ? 3 : 0;
        if (skip) {
            const char *with = skip == 4 ? ns : prefix;
            memcpy(out + n, with, strlen(with));
            n += strlen(with);
            p += skip;
        } else {
            out[n++] = *p++;
        }
    }
    return out;
}

/* Appends t to the token list unless it is there already (then frees it). */
static void add_token(char ***tokens, size_t *ntokens, size_t *len, char *t) {
    for (size_t i = 0; i < *ntokens; i++)
        if (!strcmp((*tokens)[i], t)) {
            free(t);
            return;
        }
    *tokens = dtq_xrealloc(*tokens, (*ntokens + 1) * sizeof(**tokens));
    (*tokens)[(*ntokens)++] = t;
    *len += strlen(t) + 1;
}

char *dtq_acl_tokens(const char *const *roles, int nroles, const char *ns, const char *prefix,
                     int cluster, const char **bad) {
    static const char *const reset[] = {RESET, NULL};
    char **tokens = NULL, *line;
    size_t ntokens = 0, len = 0;
    char *shared = dtq_xasprintf("{%s}", ns), *queues = dtq_xasprintf("{%s:*}", ns);
    /* the cluster routers (rsync.c, rcluster.c) read the slot map and follow ASK */
    static const char *const cluster_extra[] = {"+cluster|slots", "+asking", NULL};
    for (int r = -1; r < nroles; r++) {
        const char *const *rules = r < 0 ? reset : role_rules(roles[r]);
        if (!rules) {
            for (size_t i = 0; i < ntokens; i++) free(tokens[i]);
            free(tokens);
            free(shared);
            free(queues);
            if (bad) *bad = roles[r];
            return NULL;
        }
        for (; *rules; rules++) {
            if (!cluster) {
                add_token(&tokens, &ntokens, &len, expand(*rules, ns, prefix));
                continue;
            }
            add_token(&tokens, &ntokens, &len, expand(*rules, ns, shared));
            /* a key pattern (~, %R~, %W~) also for the queues' slots */
            if (strstr(*rules, "<p>") && strchr(*rules, '~'))
                add_token(&tokens, &ntokens, &len, expand(*rules, ns, queues));
        }
        if (cluster && r >= 0) {
            for (const char *const *e = cluster_extra; *e; e++)
                add_token(&tokens, &ntokens, &len, dtq_xstrdup(*e));
            /* a Function's first key, the bare tag (it names no stored key) */
            if (strcmp(roles[r], "producer-raw")) {
                add_token(&tokens, &ntokens, &len, dtq_xasprintf("~%s", shared));
                add_token(&tokens, &ntokens, &len, dtq_xasprintf("~%s", queues));
                /* and the key no one writes, which the Functions' check of a slot being
                 * moved reads (lua/lib/call.lua's wrapper) */
                add_token(&tokens, &ntokens, &len, dtq_xasprintf("%%R~%s:moving", shared));
                add_token(&tokens, &ntokens, &len, dtq_xasprintf("%%R~%s:moving", queues));
            }
        }
    }
    free(shared);
    free(queues);
    line = dtq_xcalloc(1, len + 1);
    for (size_t i = 0; i < ntokens; i++) {
        if (i) strcat(line, " ");
        strcat(line, tokens[i]);
        free(tokens[i]);
    }
    free(tokens);
    return line;
}
