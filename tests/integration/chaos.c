/* chaos.c: a seeded chaos round against real processes, checking dtq's promise: a task is
 * never lost, runs an attempt number at most once, and only its own handler's behaviour
 * can fail it (a worker lost while running the last attempt costs that attempt, as the
 * reference says; such a task is counted apart, and only when the events show it).
 *
 * One round: a redis-server with AOF (appendfsync everysec) on a unix socket and on
 * 127.0.0.1, three dtq-worker daemons running exec handlers (a /bin/sh script written into
 * the round's temp dir, which appends "task_id attempt pid ppid" to handler.log in one
 * O_APPEND write before it does anything), the third one behind a TCP relay that cuts
 * connections on command. A producer enqueues tasks (Function with explicit ids, with
 * idempotency keys and duplicate enqueues, raw XADD entries with and without task_id,
 * malformed raw entries, delayed tasks, a fifth of them into the lean queue ql, where
 * a success leaves no hash and its TASK_SUCCEEDED event stands for it, and members of one
 * batch, made open at the start and closed once the producer is done (about 1,000 of qa's
 * and qb's tasks in a full round; duplicate enqueues sent into it must not join it again),
 * whose on_complete callback must run exactly once with the batch's counts) while a fault
 * schedule runs: SIGKILL, SIGSTOP +
 * SIGCONT and SIGTERM of daemons with replacements (same or new worker id), connection
 * cuts (CLIENT KILL TYPE normal, and the relay cutting right after a chosen command so its
 * reply is lost), one Redis restart (SIGTERM, then start again on the same dir) and one
 * spell of refused writes (CONFIG SET maxmemory 1). Then the faults stop, everything
 * settles, the daemons stop, and every check prints one line with its count.
 *
 * Everything random comes from --seed. Only 127.0.0.1 and unix sockets are used. The
 * program is a child subreaper, so the handler programs of killed daemons are reaped here
 * and waited for before the checks; on exit (or SIGINT/SIGTERM) every process it started is
 * killed. The temp dir is kept when a check fails (or with --keep), else removed.
 *
 * usage: chaos --worker PATH [--redis-server PATH] [--seed S] [--rounds R] [--tasks N]
 *              [--short] [--keep] [--verbose]
 * Exit 0 when every check of every round is 0, 1 otherwise, 2 on a usage error. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proxy.h"

#define NSLOTS 3
#define NQUEUES 3 /* qa and qb full, ql lean (reference 4.3) */
#define LEAN_QUEUE 2
#define CONCURRENCY 16
#define HANDLER_TIMEOUT_MS 20000
#define MAX_DUPS 2

static const char *const QUEUES[NQUEUES] = {"qa", "qb", "ql"};

/* ------------------------------------------------------------------ small utilities */

static volatile sig_atomic_t interrupted;
static int verbose;

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR && !interrupted) {
    }
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "chaos: out of memory\n");
        exit(1);
    }
    return p;
}

static void *xrealloc(void *p, size_t size) {
    p = realloc(p, size ? size : 1);
    if (!p) {
        fprintf(stderr, "chaos: out of memory\n");
        exit(1);
    }
    return p;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s ? s : "");
    if (!d) {
        fprintf(stderr, "chaos: out of memory\n");
        exit(1);
    }
    return d;
}

static int64_t round_t0;
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    va_list ap;
    if (!verbose) return;
    fprintf(stderr, "[%7.2f] ", (double)(th_now_ms() - round_t0) / 1000.0);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* out = a + b + c, which must fit (paths of the round's temp dir). */
static void path_of(char *out, size_t outlen, const char *a, const char *b, const char *c) {
    int n = snprintf(out, outlen, "%s%s%s", a, b, c);
    if (n < 0 || (size_t)n >= outlen) {
        fprintf(stderr, "chaos: path too long: %s%s%s\n", a, b, c);
        exit(1);
    }
}

/* xoshiro256** seeded by splitmix64: every random choice of a round comes from here. */
typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* uniform in [lo, hi] */
static int rng_range(rng *r, int lo, int hi) {
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

static int rng_pct(rng *r, int pct) {
    return rng_range(r, 0, 99) < pct;
}

/* A string -> int map (open addressing), for task ids and (task, attempt) pairs. */
typedef struct smap {
    char **keys;
    int *vals;
    size_t cap, n;
} smap;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void smap_grow(smap *m);

static int *smap_slot(smap *m, const char *key, int create) {
    size_t i;
    if (m->cap == 0 || (create && (m->n + 1) * 2 > m->cap)) smap_grow(m);
    for (i = hash_str(key) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], key)) return &m->vals[i];
    if (!create) return NULL;
    m->keys[i] = xstrdup(key);
    m->vals[i] = 0;
    m->n++;
    return &m->vals[i];
}

static void smap_grow(smap *m) {
    smap old = *m;
    m->cap = old.cap ? old.cap * 2 : 1024;
    m->keys = xcalloc(m->cap, sizeof(char *));
    m->vals = xcalloc(m->cap, sizeof(int));
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.keys[i]) {
            *smap_slot(m, old.keys[i], 1) = old.vals[i];
            free(old.keys[i]);
        }
    free(old.keys);
    free(old.vals);
}

static int smap_get(smap *m, const char *key, int dflt) {
    int *v = m->cap ? smap_slot(m, key, 0) : NULL;
    return v ? *v : dflt;
}

static void smap_free(smap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ the model */

typedef enum kind { K_OK, K_FLAKY, K_PERM, K_RETRY, K_NOHANDLER, K_MALFORMED } kind;
static const char *const KIND_NAMES[] = {"ok", "flaky", "perm", "retry", "missing", "malformed"};

typedef enum how {
    H_FCALL_ID,    /* dtq_enqueue with task_id (a lost reply is retried: ID_EXISTS) */
    H_FCALL_IDEM,  /* dtq_enqueue with an idempotency key, minted id, duplicate enqueues */
    H_FCALL_BOTH,  /* task_id and an idempotency key; duplicates carry other task_ids */
    H_BATCH,       /* dtq_enqueue with task_id into the round's batch (reference 4.5) */
    H_RAW_ID,      /* XADD with task_id; sometimes the same entry twice */
    H_RAW_DERIVED, /* XADD without task_id: the id is <queue>:p<band>:<entry-id> */
    H_RAW_IDEM,    /* XADD without task_id, with an idempotency key, sometimes twice */
    H_RAW_BAD,     /* a malformed raw entry, with task_id */
    H_LEAN,        /* dtq_enqueue into the lean queue ql: the id is <queue>:p<band>:<entry-id> */
    H_BATCH_SEED,  /* the batch's first member, made by <ns>_batch create at the start */
    H_BATCH_CB     /* the batch's on_complete callback: enqueued by the Functions, once */
} how;
static const char *const HOW_NAMES[] = {
    "fcall-id", "fcall-idem",    "fcall-id+idem", "fcall-batch",  "raw-id",        "raw-derived",
    "raw-idem", "raw-malformed", "fcall-lean",    "batch-create", "batch-callback"};

typedef struct task {
    int ref; /* payload {"ref":"r<ref>"} names the logical task */
    kind kind;
    how how;
    int queue, band;
    int k;            /* flaky: succeeds from attempt k */
    int max_attempts; /* 0 = the handler section's */
    int ms;           /* handler run time */
    int delay_ms;
    int bad; /* malformed flavour */
    int ndups;
    int in_batch;   /* fcall-id+idem sent with `batch`, its duplicates too (H_BATCH: by id alone) */
    int64_t due_ms; /* when the producer sends it (round time) */
    int64_t dup_due_ms[MAX_DUPS];
    int dups_done;
    /* producer state */
    int confirmed; /* an enqueue is known to have been applied */
    int ambiguous; /* a raw XADD without retry safety whose reply was lost */
    int tries;
    char **ids; /* candidate task ids (explicit, from replies, derived from entry ids) */
    int nids;
    /* results */
    int nhashes;
    int hash;       /* index in the hashes array of the (first) hash */
    int hash_score; /* 2: that hash's id is ids[0], 1: another of ids, 0: none */
} task;

typedef struct thash {
    char *id, *status, *cls, *err, *payload, *worker_id, *dlq_entry, *queue;
    int attempt, max_attempts;
    int ref; /* -1: no ref in the payload */
} thash;

typedef enum fkind {
    F_KILL,
    F_STOP,
    F_TERM,
    F_CLIENT_KILL,
    F_PROXY_CUT,
    F_PROXY_CUT_ALL,
    F_REDIS_RESTART,
    F_OOM,
    F_NKINDS
} fkind;
static const char *const FAULT_NAMES[] = {"sigkill",       "sigstop",   "sigterm",
                                          "client_kill",   "proxy_cut", "proxy_cut_all",
                                          "redis_restart", "oom"};
static const char *const CUT_MARKERS[] = {"dtq_fetch",         "dtq_finish",   "dtq_reap",
                                          "dtq_recover",       "XCLAIM",       "dtq_sched_claim",
                                          "dtq_sched_promote", "dtq_handback", "XREAD"};
static const char *const FAULT_ABBREV[] = {"kill", "stop",   "term", "ck",
                                           "cut",  "cutall", "rr",   "oom"};
#define NMARKERS ((int)(sizeof(CUT_MARKERS) / sizeof(CUT_MARKERS[0])))

typedef struct fault {
    int64_t at_ms;
    fkind kind;
    int slot;
    int dur_ms;  /* stop / oom length, redis downtime, delay before a replacement */
    int same_id; /* the replacement keeps the worker id */
    int marker;
} fault;

/* A fault that hit a worker id, for explaining a lost last attempt. */
typedef struct hit {
    char worker_id[32];
    int64_t wall_ms;
    fkind kind;
} hit;

typedef enum dstate { D_DOWN, D_RUNNING, D_STOPPED, D_DRAINING } dstate;

typedef struct daemon_slot {
    pid_t pid;
    dstate state;
    char worker_id[32];
    int gen;
    int64_t cont_at;    /* SIGCONT at (round ms) */
    int64_t restart_at; /* start a replacement at (round ms), once the old one is gone */
    int next_same_id;
    int expect_exit; /* we killed or stopped it */
} daemon_slot;

typedef struct options {
    uint64_t seed;
    int rounds, tasks, shortrun, keep, tasks_given, self_test;
    const char *worker_bin, *redis_bin;
} options;

typedef struct round_result {
    uint64_t seed;
    int tasks;
    int faults[F_NKINDS];
    int nfaults;
    long long checks[16];
    long long crash_exhausted;
    double secs;
    int failed;
    char dir[128];
} round_result;

enum {
    C_LOST,
    C_TWICE,
    C_WRONG,
    C_PENDING,
    C_STREAM_LEFT,
    C_SCHEDULE,
    C_CLAIMED,
    C_DLQ,
    C_DUP,
    C_UNEXPECTED,
    C_BEYOND_MAX,
    C_NO_RUN,
    C_DAEMON_EXIT,
    C_LOG_BAD,
    C_BATCH,
    C_NCHECKS
};
static const char *const CHECK_NAMES[C_NCHECKS] = {
    "lost (enqueued, hash missing or not terminal)",
    "attempts started twice (same task_id+attempt in handler.log)",
    "wrong terminal status",
    "pending entries left in the consumer groups (XPENDING)",
    "entries left in the task streams (XLEN)",
    "schedule leftovers (ZCARD retry:schedule)",
    "claimed leftovers (ZCARD retry:claimed)",
    "dead-letter entries vs dead_lettered hashes (mismatches)",
    "duplicate enqueues that created a second task",
    "unexpected task hashes (no enqueue of ours)",
    "attempts beyond max_attempts in handler.log",
    "terminal by a handler outcome without that attempt's run",
    "daemons that exited on their own or failed",
    "malformed handler.log lines",
    "batch counts vs its members, the callback's payload (mismatches)"};
static const char *const CHECK_SHORT[C_NCHECKS] = {
    "lost", "twice", "wrong",  "pending", "xlen",  "sched",  "claimed", "dlq",
    "dup",  "unexp", "beyond", "norun",   "exits", "logbad", "batch"};

/* ----------------------------------------------------------------- the round's world */

typedef struct world {
    options *opt;
    uint64_t seed;
    char dir[128], url_unix[224], log_path[192], handler_path[192];
    th_redis redis; /* its dir is dir */
    th_proxy relay; /* 127.0.0.1:relay.port <-> 127.0.0.1:redis.port, for the last slot */
    int redis_down; /* stopped on purpose, waiting for its restart */
    int64_t redis_up_at;
    int64_t oom_end_at; /* 0 = no spell */
    daemon_slot slots[NSLOTS];
    redisContext *rc;
    task *tasks;
    int ntasks;
    fault *faults;
    int nfaults, next_fault;
    hit *hits;
    int nhits;
    int64_t fault_end_ms, enqueue_end_ms;
    round_result *res;
    int unexpected_exits;
    int producer_errors;
    int enqueue_retries, ambiguous, dups_sent;
    char batch_id[48]; /* "" when the round has no batch (fewer than 10 tasks) */
    int batch_closed;
} world;

static world *g_world; /* for the exit hook */

static void task_add_id(task *t, const char *id) {
    for (int i = 0; i < t->nids; i++)
        if (!strcmp(t->ids[i], id)) return;
    t->ids = xrealloc(t->ids, sizeof(char *) * (size_t)(t->nids + 1));
    t->ids[t->nids++] = xstrdup(id);
}

/* ------------------------------------------------------------------------ processes */

static pid_t spawn(char *const argv[], const char *log_path) {
    pid_t pid = th_spawn_child(argv, log_path);
    if (pid < 0) {
        perror("chaos: fork");
        exit(1);
    }
    return pid;
}

static int free_port(void) {
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static void redis_spawn(world *w) {
    if (th_redis_launch(&w->redis) < 0) {
        perror("chaos: fork");
        exit(1);
    }
}

static redisContext *connect_redis(world *w, int quiet) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(w->redis.sock, tv);
    if (!c || c->err) {
        if (!quiet && c) note("connect: %s", c->errstr);
        if (c) redisFree(c);
        return NULL;
    }
    tv.tv_sec = 10;
    redisSetTimeout(c, tv);
    return c;
}

/* The round's own connection, made again whenever it broke. */
static redisContext *rc(world *w) {
    if (w->rc && w->rc->err) {
        redisFree(w->rc);
        w->rc = NULL;
    }
    if (!w->rc && !w->redis_down) w->rc = connect_redis(w, 1);
    return w->rc;
}

static redisReply *cmd(world *w, const char *fmt, ...) {
    redisContext *c = rc(w);
    redisReply *r;
    va_list ap;
    if (!c) return NULL;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return r;
}

static int wait_redis_up(world *w, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end && !interrupted) {
        redisContext *c = connect_redis(w, 1);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
            freeReplyObject(r);
            redisFree(c);
            if (ok) return 1;
        }
        sleep_ms(25);
    }
    return 0;
}

static void relay_start(world *w) {
    if (th_proxy_open(&w->relay, w->redis.port, NULL, 0) != 0) {
        perror("chaos: relay");
        exit(1);
    }
}

/* The daemon's config: fast retries, visibility 3 s, heartbeat 1 s, exec handlers. */
static void write_config(world *w, int slot, char *path, size_t pathlen) {
    daemon_slot *d = &w->slots[slot];
    FILE *f;
    char url[256];
    snprintf(path, pathlen, "%s/worker-%d.ini", w->dir, slot);
    if (slot == NSLOTS - 1)
        snprintf(url, sizeof(url), "redis://127.0.0.1:%d", w->relay.port);
    else
        snprintf(url, sizeof(url), "%s", w->url_unix);
    f = fopen(path, "w");
    if (!f) {
        perror("chaos: config");
        exit(1);
    }
    fprintf(f,
            "[redis]\nurl = %s\nconnect_timeout_ms = 1000\n"
            "[worker]\nqueues = %s, %s, ql\nconcurrency = %d\nworker_id = %s\n"
            "heartbeat_interval_s = 1\nvisibility_timeout_s = 3\ndrain_timeout_s = 2\n"
            "[retry]\nbase_delay = 0.1\nmax_delay = 1.0\njitter = 0.2\ndefault_max_attempts = 5\n"
            "[scheduler]\ninterval_ms = 200\nleader_lock_ms = 2000\nclaim_timeout_ms = 5000\n"
            "[limits]\nevents_stream_maxlen = 100000000\ndlq_maxlen = 1000000\n"
            "[log]\nlevel = info\n[queue:ql]\nmode = lean\n",
            url, slot == 1 ? QUEUES[1] : QUEUES[0], slot == 1 ? QUEUES[0] : QUEUES[1], CONCURRENCY,
            d->worker_id);
    static const struct {
        const char *type;
        int max;
    } handlers[] = {{"ok", 6}, {"flaky", 8}, {"perm", 3}, {"retry", 3}};
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        fprintf(f,
                "[handler:%s]\nexec = %s %s\nenv = CHAOS_LOG=%s\ntimeout_ms = %d\n"
                "kill_grace_ms = 1000\nmax_attempts = %d\n",
                handlers[i].type, w->handler_path, handlers[i].type, w->log_path,
                HANDLER_TIMEOUT_MS, handlers[i].max);
    fclose(f);
}

static void daemon_start(world *w, int slot) {
    daemon_slot *d = &w->slots[slot];
    char cfg[256], log[224];
    if (d->gen > 0 && !d->next_same_id)
        snprintf(d->worker_id, sizeof(d->worker_id), "w%dg%d", slot, d->gen);
    d->gen++;
    write_config(w, slot, cfg, sizeof(cfg));
    snprintf(log, sizeof(log), "%s/daemon-%d.log", w->dir, slot);
    {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "---- chaos: start %s (generation %d) at %" PRId64 " ms\n", d->worker_id,
                    d->gen, th_now_ms() - round_t0);
            fclose(f);
        }
    }
    const char *argv[] = {w->opt->worker_bin, "-c", cfg, NULL};
    d->pid = spawn((char *const *)argv, log);
    d->state = D_RUNNING;
    d->expect_exit = 0;
    d->restart_at = 0;
    note("start slot %d as %s (pid %d)", slot, d->worker_id, (int)d->pid);
}

static void record_hit(world *w, const char *worker_id, fkind k) {
    w->hits = xrealloc(w->hits, sizeof(hit) * (size_t)(w->nhits + 1));
    snprintf(w->hits[w->nhits].worker_id, sizeof(w->hits[0].worker_id), "%s", worker_id);
    w->hits[w->nhits].wall_ms = wall_ms();
    w->hits[w->nhits].kind = k;
    w->nhits++;
}

/* Reaps every child that exited: daemons, redis, the relay, and orphaned handlers. */
static void reap_children(world *w) {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int s = 0; s < NSLOTS; s++) {
            daemon_slot *d = &w->slots[s];
            if (d->pid != pid) continue;
            int ok = d->expect_exit && ((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) ||
                                        (WIFEXITED(st) && WEXITSTATUS(st) == 0));
            if (!ok) {
                w->unexpected_exits++;
                fprintf(stderr, "chaos: daemon slot %d (%s, pid %d) exited on its own: %s %d\n", s,
                        d->worker_id, (int)pid, WIFEXITED(st) ? "status" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            }
            note("slot %d (%s) exited", s, d->worker_id);
            d->pid = 0;
            d->state = D_DOWN;
        }
        if (pid == w->redis.pid) {
            w->redis.pid = 0;
            if (!w->redis_down) {
                fprintf(stderr, "chaos: redis-server exited on its own\n");
                w->unexpected_exits++;
            }
        }
        if (pid == w->relay.pid) w->relay.pid = 0;
    }
}

static int daemons_ready(world *w) {
    for (int s = 0; s < NSLOTS; s++) {
        redisReply *r = cmd(w, "HGET dtq:worker:%s status", w->slots[s].worker_id);
        int ok = r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "running");
        freeReplyObject(r);
        if (!ok) return 0;
    }
    return 1;
}

/* Children of this process (a subreaper: orphaned handler programs land here). */
static int list_children(pid_t *out, int max) {
    char path[64], buf[8192];
    int n = 0;
    snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[got] = '\0';
    for (char *save = NULL, *tok = strtok_r(buf, " \n", &save); tok && n < max;
         tok = strtok_r(NULL, " \n", &save))
        out[n++] = (pid_t)atoi(tok);
    return n;
}

static void stop_everything(world *w) {
    pid_t kids[512];
    int n;
    for (int s = 0; s < NSLOTS; s++)
        if (w->slots[s].pid > 0) {
            kill(w->slots[s].pid, SIGKILL);
            kill(w->slots[s].pid, SIGCONT);
        }
    th_proxy_stop(&w->relay); /* and its command pipe */
    if (w->redis.pid > 0) kill(w->redis.pid, SIGKILL);
    n = list_children(kids, 512);
    for (int i = 0; i < n; i++) {
        kill(-kids[i], SIGKILL); /* handler programs lead their own process group */
        kill(kids[i], SIGKILL);
    }
    for (int i = 0; i < 100; i++) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (list_children(kids, 512) == 0) break;
        sleep_ms(20);
    }
    for (int s = 0; s < NSLOTS; s++) w->slots[s].pid = 0;
    w->redis.pid = 0;
}

static void exit_hook(void) {
    if (g_world) stop_everything(g_world);
}

/* ------------------------------------------------------------------------ generation */

static void gen_tasks(world *w, rng *r) {
    int n = w->ntasks;
    w->tasks = xcalloc((size_t)n, sizeof(task));
    for (int i = 0; i < n; i++) {
        task *t = &w->tasks[i];
        int p = rng_range(r, 0, 99);
        t->ref = i;
        t->queue = rng_range(r, 0, LEAN_QUEUE - 1);
        t->band = rng_range(r, 0, 9);
        if (p < 20) {
            t->how = H_LEAN;
            t->queue = LEAN_QUEUE;
        } else if (p < 50)
            t->how = H_FCALL_ID;
        else if (p < 58)
            t->how = H_FCALL_IDEM;
        else if (p < 63)
            t->how = H_FCALL_BOTH;
        else if (p < 78)
            t->how = H_RAW_ID;
        else if (p < 86)
            t->how = H_RAW_DERIVED;
        else if (p < 94)
            t->how = H_RAW_IDEM;
        else
            t->how = H_RAW_BAD;
        p = rng_range(r, 0, 99);
        if (t->how == H_RAW_BAD)
            t->kind = K_MALFORMED;
        else if (p < 55)
            t->kind = K_OK;
        else if (p < 80)
            t->kind = K_FLAKY;
        else if (p < 90)
            t->kind = K_PERM;
        else if (p < 96)
            t->kind = K_RETRY;
        else
            t->kind = K_NOHANDLER;
        p = rng_range(r, 0, 99);
        t->ms = p < 50 ? 0 : p < 92 ? rng_range(r, 5, 200) : rng_range(r, 300, 1500);
        switch (t->kind) {
        case K_OK:
            p = rng_range(r, 0, 99);
            t->max_attempts = p < 70 ? 0 : p < 90 ? 3 : 1;
            break;
        case K_FLAKY:
            t->k = rng_range(r, 2, 4);
            t->max_attempts = rng_pct(r, 40) ? t->k : t->k + 2;
            break;
        case K_RETRY: t->max_attempts = rng_pct(r, 50) ? 0 : rng_range(r, 2, 4); break;
        case K_PERM: t->max_attempts = rng_pct(r, 50) ? 0 : rng_range(r, 1, 3); break;
        default: break;
        }
        if (t->how == H_RAW_BAD) t->bad = rng_range(r, 0, 2);
        if ((t->how == H_FCALL_ID || t->how == H_FCALL_BOTH || t->how == H_FCALL_IDEM) &&
            rng_pct(r, 12))
            t->delay_ms = rng_range(r, 50, 3000);
        if (t->how == H_FCALL_IDEM || t->how == H_FCALL_BOTH)
            t->ndups = rng_pct(r, 60) ? rng_range(r, 1, MAX_DUPS) : 0;
        else if (t->how == H_RAW_IDEM || t->how == H_RAW_ID)
            t->ndups = rng_pct(r, 30) ? 1 : 0;
        /* Three in four of the tasks enqueued by id, or by id and key, that a handler ends
         * join the batch, in either queue: about 1,000 members in a full round. The latter's
         * duplicates (another id, the same key) are sent with `batch` too, and must not
         * join it again. */
        if (t->queue != LEAN_QUEUE && t->kind != K_NOHANDLER &&
            (t->how == H_FCALL_ID || t->how == H_FCALL_BOTH) && rng_pct(r, 75)) {
            if (t->how == H_FCALL_ID)
                t->how = H_BATCH;
            else
                t->in_batch = 1;
        }
        t->due_ms = (int64_t)i * w->enqueue_end_ms / n;
        for (int d = 0; d < t->ndups; d++) t->dup_due_ms[d] = t->due_ms + rng_range(r, 10, 6000);
    }
    if (n >= 10) { /* the last two: the batch's first member and its callback (no producer) */
        snprintf(w->batch_id, sizeof(w->batch_id), "chaos-%" PRIu64, w->seed);
        for (int i = n - 2; i < n; i++) {
            task *t = &w->tasks[i];
            memset(t, 0, sizeof(*t));
            t->ref = i;
            t->kind = K_OK;
            t->how = i == n - 2 ? H_BATCH_SEED : H_BATCH_CB;
            t->due_ms = w->enqueue_end_ms;
        }
    }
}

static void gen_faults(world *w, rng *r, int shortrun) {
    int64_t t = 1500, end = w->fault_end_ms;
    int gap_lo = shortrun ? 900 : 1200, gap_hi = shortrun ? 2200 : 3500, max = 4096;
    int64_t restart_at, oom_at;
    w->faults = xcalloc((size_t)max, sizeof(fault));
    /* the Redis restart in the middle third, the refused-writes spell in another third */
    restart_at = end / 3 + rng_range(r, 0, (int)(end / 3));
    oom_at = rng_pct(r, 50) ? rng_range(r, 1000, (int)(end / 3) - 3000)
                            : (2 * end / 3) + rng_range(r, 0, (int)(end / 3) - 4000);
    while (t < end && w->nfaults < max - 2) {
        fault *f = &w->faults[w->nfaults];
        int p = rng_range(r, 0, 99);
        f->at_ms = t;
        f->slot = rng_range(r, 0, NSLOTS - 1);
        f->same_id = rng_pct(r, 50);
        f->marker = rng_range(r, 0, NMARKERS - 1);
        if (p < 25) {
            f->kind = F_KILL;
            f->dur_ms = rng_range(r, 100, 2500);
        } else if (p < 45) {
            f->kind = F_STOP;
            f->dur_ms = rng_range(r, 300, 6000);
        } else if (p < 55) {
            f->kind = F_TERM;
            f->dur_ms = rng_range(r, 100, 1500);
        } else if (p < 70) {
            f->kind = F_CLIENT_KILL;
        } else if (p < 92) {
            f->kind = F_PROXY_CUT;
        } else {
            f->kind = F_PROXY_CUT_ALL;
        }
        w->nfaults++;
        t += rng_range(r, gap_lo, gap_hi);
    }
    /* insert the two singular faults in time order */
    fault extra[2] = {{restart_at, F_REDIS_RESTART, 0, rng_range(r, 0, 2000), 0, 0},
                      {oom_at, F_OOM, 0, rng_range(r, 2000, 4500), 0, 0}};
    for (int e = 0; e < 2; e++) {
        int pos = w->nfaults;
        while (pos > 0 && w->faults[pos - 1].at_ms > extra[e].at_ms) {
            w->faults[pos] = w->faults[pos - 1];
            pos--;
        }
        w->faults[pos] = extra[e];
        w->nfaults++;
    }
}

/* --------------------------------------------------------------------------- faults */

static int pick_slot(world *w, int slot, dstate want) {
    for (int i = 0; i < NSLOTS; i++) {
        int s = (slot + i) % NSLOTS;
        if (w->slots[s].state == want && w->slots[s].pid > 0) return s;
    }
    return -1;
}

static void run_fault(world *w, fault *f) {
    int64_t now = th_now_ms() - round_t0;
    int s;
    redisReply *r;
    switch (f->kind) {
    case F_KILL:
    case F_TERM:
    case F_STOP:
        s = pick_slot(w, f->slot, D_RUNNING);
        if (s < 0) {
            note("fault %s: no running daemon", FAULT_NAMES[f->kind]);
            return;
        }
        {
            daemon_slot *d = &w->slots[s];
            record_hit(w, d->worker_id, f->kind);
            d->expect_exit = 1;
            if (f->kind == F_STOP) {
                kill(d->pid, SIGSTOP);
                d->state = D_STOPPED;
                d->cont_at = now + f->dur_ms;
                note("SIGSTOP slot %d (%s) for %d ms", s, d->worker_id, f->dur_ms);
            } else {
                kill(d->pid, f->kind == F_KILL ? SIGKILL : SIGTERM);
                d->state = D_DRAINING;
                d->restart_at = now + f->dur_ms;
                d->next_same_id = f->same_id;
                note("%s slot %d (%s), replacement in %d ms (%s id)",
                     f->kind == F_KILL ? "SIGKILL" : "SIGTERM", s, d->worker_id, f->dur_ms,
                     f->same_id ? "same" : "new");
            }
        }
        break;
    case F_CLIENT_KILL:
        r = cmd(w, "CLIENT KILL TYPE normal");
        note("CLIENT KILL TYPE normal: %lld",
             r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1);
        if (!r || r->type != REDIS_REPLY_INTEGER) { /* Redis is down: nothing to cut */
            freeReplyObject(r);
            return;
        }
        freeReplyObject(r);
        break;
    case F_PROXY_CUT:
        if (th_proxy_arm(&w->relay, CUT_MARKERS[f->marker]) != 0) note("relay command failed");
        note("relay: cut after %s", CUT_MARKERS[f->marker]);
        break;
    case F_PROXY_CUT_ALL:
        if (th_proxy_cut_all(&w->relay) != 0) note("relay command failed");
        note("relay: cut all");
        break;
    case F_REDIS_RESTART:
        if (w->oom_end_at) { /* never together: a restart would end the spell early */
            freeReplyObject(cmd(w, "CONFIG SET maxmemory 0"));
            w->oom_end_at = 0;
        }
        note("redis: SIGTERM, down for %d ms", f->dur_ms);
        if (w->rc) {
            redisFree(w->rc);
            w->rc = NULL;
        }
        w->redis_down = 1;
        kill(w->redis.pid, SIGTERM);
        {
            int st;
            int64_t end = th_now_ms() + 20000;
            while (w->redis.pid > 0 && th_now_ms() < end) {
                pid_t p = waitpid(w->redis.pid, &st, WNOHANG);
                if (p == w->redis.pid) {
                    w->redis.pid = 0;
                    break;
                }
                sleep_ms(10);
            }
            if (w->redis.pid > 0) {
                fprintf(stderr, "chaos: redis-server did not stop on SIGTERM; killed\n");
                kill(w->redis.pid, SIGKILL);
                waitpid(w->redis.pid, NULL, 0);
                w->redis.pid = 0;
                w->unexpected_exits++;
            }
        }
        w->redis_up_at = now + f->dur_ms;
        break;
    case F_OOM:
        if (w->redis_down) return;
        r = cmd(w, "CONFIG SET maxmemory 1");
        if (!r || r->type != REDIS_REPLY_STATUS) {
            note("maxmemory 1 failed");
            freeReplyObject(r);
            return;
        }
        w->oom_end_at = now + f->dur_ms;
        note("maxmemory 1 for %d ms", f->dur_ms);
        freeReplyObject(r);
        break;
    default: break;
    }
    w->res->faults[f->kind]++;
    w->res->nfaults++;
}

/* Timed follow-ups: SIGCONT, replacements, the Redis start, the end of the spell. */
static void run_followups(world *w, int faults_over) {
    int64_t now = th_now_ms() - round_t0;
    if (w->redis_down && (now >= w->redis_up_at || faults_over)) {
        redis_spawn(w);
        if (!wait_redis_up(w, 30000)) {
            fprintf(stderr, "chaos: redis-server did not come back\n");
            w->unexpected_exits++;
        }
        w->redis_down = 0;
        note("redis: started again (pid %d)", (int)w->redis.pid);
    }
    if (w->oom_end_at && (now >= w->oom_end_at || faults_over)) {
        redisReply *r = cmd(w, "CONFIG SET maxmemory 0");
        if (r && r->type == REDIS_REPLY_STATUS) {
            w->oom_end_at = 0;
            note("maxmemory 0");
        }
        freeReplyObject(r);
    }
    for (int s = 0; s < NSLOTS; s++) {
        daemon_slot *d = &w->slots[s];
        if (d->state == D_STOPPED && (now >= d->cont_at || faults_over)) {
            kill(d->pid, SIGCONT);
            d->state = D_RUNNING;
            d->expect_exit = 0;
            note("SIGCONT slot %d (%s)", s, d->worker_id);
        }
        if (d->state == D_DOWN && d->restart_at && (now >= d->restart_at || faults_over))
            daemon_start(w, s);
    }
}

/* ------------------------------------------------------------------------- producer */

static void payload_of(const task *t, char *out, size_t outlen) {
    if (t->how == H_RAW_BAD && t->bad == 0) /* not JSON */
        snprintf(out, outlen, "{\"ref\":\"r%d\",\"ms\":", t->ref);
    else
        snprintf(out, outlen, "{\"ref\":\"r%d\",\"ms\":%d,\"k\":%d}", t->ref, t->ms, t->k);
}

static const char *type_of(const task *t) {
    switch (t->kind) {
    case K_OK: return "ok";
    case K_FLAKY: return "flaky";
    case K_PERM: return "perm";
    case K_RETRY: return "retry";
    case K_NOHANDLER: return "missing";
    case K_MALFORMED: return "ok";
    }
    return "ok";
}

typedef enum sent { SENT_OK, SENT_RETRY, SENT_AMBIGUOUS, SENT_VIOLATION } sent;

/* An error reply that says the command was not applied (and may be sent again). */
static int refused_error(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR &&
           (!strncmp(r->str, "OOM", 3) || !strncmp(r->str, "LOADING", 7) ||
            !strncmp(r->str, "ERR Function not found", 22) || !strncmp(r->str, "BUSY", 4) ||
            !strncmp(r->str, "MASTERDOWN", 10));
}

/* One enqueue of task t; dup >= 0 sends its dup-th duplicate. */
static sent send_task(world *w, task *t, int dup) {
    char payload[128], id[96], mx[16], key[64], stream[64], prio[4], delay[16];
    const char *argv[32];
    size_t argc = 0;
    redisContext *c = rc(w);
    redisReply *r;
    sent res;
    if (!c) return SENT_RETRY;
    payload_of(t, payload, sizeof(payload));
    snprintf(key, sizeof(key), "idem-%d", t->ref);
    snprintf(mx, sizeof(mx), "%d", t->max_attempts);
    snprintf(stream, sizeof(stream), "dtq:stream:%s:p%d", QUEUES[t->queue], t->band);
    if (t->how == H_FCALL_BOTH && dup >= 0)
        snprintf(id, sizeof(id), "c%" PRIu64 "-%d-d%d", w->seed, t->ref, dup);
    else
        snprintf(id, sizeof(id), "c%" PRIu64 "-%d", w->seed, t->ref);
    if (t->how == H_LEAN) {
        snprintf(prio, sizeof(prio), "%d", t->band);
        argv[argc++] = "FCALL";
        argv[argc++] = "dtq_enqueue";
        argv[argc++] = "0";
        argv[argc++] = QUEUES[t->queue];
        argv[argc++] = type_of(t);
        argv[argc++] = payload;
        argv[argc++] = "priority";
        argv[argc++] = prio;
        if (t->max_attempts) {
            argv[argc++] = "max_attempts";
            argv[argc++] = mx;
        }
    } else if (t->how == H_BATCH_SEED || t->how == H_BATCH_CB) {
        return SENT_OK; /* made by batch_create */
    } else if (t->how <= H_BATCH) {
        snprintf(prio, sizeof(prio), "%d", t->band);
        snprintf(delay, sizeof(delay), "%d", t->delay_ms);
        argv[argc++] = "FCALL";
        argv[argc++] = "dtq_enqueue";
        argv[argc++] = "0";
        argv[argc++] = QUEUES[t->queue];
        argv[argc++] = type_of(t);
        argv[argc++] = payload;
        argv[argc++] = "priority";
        argv[argc++] = prio;
        if (t->max_attempts) {
            argv[argc++] = "max_attempts";
            argv[argc++] = mx;
        }
        if (t->delay_ms) {
            argv[argc++] = "delay_ms";
            argv[argc++] = delay;
        }
        if (t->how != H_FCALL_IDEM) {
            argv[argc++] = "task_id";
            argv[argc++] = id;
        }
        if (t->how == H_FCALL_IDEM || t->how == H_FCALL_BOTH) {
            argv[argc++] = "idempotency_key";
            argv[argc++] = key;
        }
        if (t->how == H_BATCH || t->in_batch) {
            argv[argc++] = "batch";
            argv[argc++] = w->batch_id;
        }
    } else {
        argv[argc++] = "XADD";
        argv[argc++] = stream;
        argv[argc++] = "*";
        if (!(t->how == H_RAW_BAD && t->bad == 2)) { /* bad 2: no task_type */
            argv[argc++] = "task_type";
            argv[argc++] = type_of(t);
        }
        argv[argc++] = "payload";
        argv[argc++] = payload;
        if (t->how == H_RAW_ID || t->how == H_RAW_BAD) {
            argv[argc++] = "task_id";
            argv[argc++] = id;
        }
        if (t->how == H_RAW_BAD && t->bad == 1) {
            argv[argc++] = "max_attempts";
            argv[argc++] = "0"; /* out of bounds */
        } else if (t->max_attempts) {
            argv[argc++] = "max_attempts";
            argv[argc++] = mx;
        }
        if (t->how == H_RAW_IDEM) {
            argv[argc++] = "idempotency_key";
            argv[argc++] = key;
        }
    }
    r = redisCommandArgv(c, (int)argc, argv, NULL);
    if (!r) {
        note("enqueue r%d: connection error (%s)", t->ref, c->errstr);
        /* A raw entry without task_id or key cannot be sent again safely. */
        return t->how == H_RAW_DERIVED || t->how == H_LEAN ? SENT_AMBIGUOUS : SENT_RETRY;
    }
    res = SENT_OK;
    if (t->how == H_LEAN) { /* a lean task's id names its entry: no retry is safe either */
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            task_add_id(t, r->element[0]->str);
        } else if (refused_error(r)) {
            res = SENT_RETRY;
        } else {
            fprintf(stderr, "chaos: lean enqueue r%d: unexpected reply: %s\n", t->ref,
                    r->type == REDIS_REPLY_ERROR ? r->str : "(not an array)");
            w->producer_errors++;
            res = SENT_RETRY;
        }
    } else if (t->how <= H_BATCH) {
        const char *got = NULL;
        int created = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            got = r->element[0]->str;
            created = !strcmp(r->element[1]->str, "created");
        } else if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ID_EXISTS", 9)) {
            got = id;
        } else if (r->type == REDIS_REPLY_ERROR &&
                   !strncmp(r->str, "IDEMPOTENCY_IN_PROGRESS ", 24)) {
            got = r->str + 24;
        } else if (refused_error(r)) {
            res = SENT_RETRY;
        } else {
            fprintf(stderr, "chaos: enqueue r%d: unexpected reply: %s\n", t->ref,
                    r->type == REDIS_REPLY_ERROR ? r->str : "(not an array)");
            w->producer_errors++;
            res = SENT_RETRY;
        }
        if (got) {
            if (dup >= 0 && t->nids > 0 && strcmp(got, t->ids[0])) {
                fprintf(stderr, "chaos: duplicate enqueue of r%d (key %s) answered %s %s, not %s\n",
                        t->ref, key, got, created ? "created" : "", t->ids[0]);
                res = SENT_VIOLATION;
            }
            if (dup < 0 || res == SENT_VIOLATION) task_add_id(t, got);
        }
    } else {
        if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
            char derived[160];
            if (t->how == H_RAW_ID || t->how == H_RAW_BAD) {
                task_add_id(t, id);
            } else {
                snprintf(derived, sizeof(derived), "%s:p%d:%s", QUEUES[t->queue], t->band, r->str);
                task_add_id(t, derived);
            }
        } else if (refused_error(r)) {
            res = SENT_RETRY;
        } else {
            fprintf(stderr, "chaos: XADD r%d: unexpected reply: %s\n", t->ref,
                    r->type == REDIS_REPLY_ERROR ? r->str : "?");
            w->producer_errors++;
            res = SENT_RETRY;
        }
    }
    freeReplyObject(r);
    return res;
}

/* Sends what is due; stops at the first refusal (the order is kept) and tries again later. */
static int produce(world *w, int *next) {
    int64_t now = th_now_ms() - round_t0;
    int sent_now = 0;
    while (*next < w->ntasks && w->tasks[*next].due_ms <= now && sent_now < 400) {
        task *t = &w->tasks[*next];
        sent s = send_task(w, t, -1);
        t->tries++;
        if (s == SENT_RETRY) {
            w->enqueue_retries++;
            return 0;
        }
        if (s == SENT_AMBIGUOUS)
            t->ambiguous = 1, w->ambiguous++;
        else
            t->confirmed = 1;
        (*next)++;
        sent_now++;
    }
    /* duplicates, once the original is confirmed */
    for (int i = 0; i < *next; i++) {
        task *t = &w->tasks[i];
        while (t->dups_done < t->ndups && t->confirmed && t->dup_due_ms[t->dups_done] <= now) {
            sent s = send_task(w, t, t->dups_done);
            if (s == SENT_RETRY) {
                w->enqueue_retries++;
                return 0;
            }
            w->dups_sent++;
            if (s == SENT_VIOLATION) w->res->checks[C_DUP]++;
            t->dups_done++;
        }
    }
    return 1;
}

static int producer_done(world *w, int next) {
    if (next < w->ntasks) return 0;
    for (int i = 0; i < w->ntasks; i++)
        if (w->tasks[i].dups_done < w->tasks[i].ndups) return 0;
    return 1;
}

/* The round's batch (reference 4.5), made open before the producer starts, with its first
 * member (ntasks-2) and an on_complete callback of type ok whose payload names ntasks-1:
 * exactly one task hash must carry that ref. 0 when made (or when there is no batch). */
static int batch_create(world *w) {
    task *seed = &w->tasks[w->ntasks - 2], *cb = &w->tasks[w->ntasks - 1];
    char seed_payload[128], cb_payload[128];
    if (!w->batch_id[0]) return 0;
    payload_of(seed, seed_payload, sizeof(seed_payload));
    payload_of(cb, cb_payload, sizeof(cb_payload));
    for (int tries = 0; tries < 100 && !interrupted; tries++) {
        redisReply *r = cmd(w,
                            "FCALL dtq_batch 0 create qa 1 ok %s batch_id %s open 1 on_complete ok "
                            "on_complete_payload %s",
                            seed_payload, w->batch_id, cb_payload);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            task_add_id(seed, r->element[1]->str);
            seed->confirmed = cb->confirmed = 1;
            freeReplyObject(r);
            return 0;
        }
        if (r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ID_EXISTS", 9)) {
            /* applied, its reply lost (no fault runs this early): the seed's id is unknown */
            fprintf(stderr, "chaos: batch create answered again: %s\n", r->str);
            freeReplyObject(r);
            break;
        }
        if (r && r->type == REDIS_REPLY_ERROR) fprintf(stderr, "chaos: batch create: %s\n", r->str);
        freeReplyObject(r);
        sleep_ms(100);
    }
    w->producer_errors++;
    return -1;
}

/* Closes the batch once every member was sent (a close sent again answers as the first). */
static void batch_close(world *w) {
    redisReply *r;
    if (!w->batch_id[0] || w->batch_closed) return;
    r = cmd(w, "FCALL dtq_batch 0 close %s", w->batch_id);
    if (r && r->type == REDIS_REPLY_STATUS) r->type = REDIS_REPLY_STRING;
    if (r && r->type == REDIS_REPLY_STRING &&
        (!strcmp(r->str, "closed") || !strcmp(r->str, "complete"))) {
        w->batch_closed = 1;
        note("batch %s closed: %s", w->batch_id, r->str);
    } else if (r && r->type == REDIS_REPLY_ERROR && !refused_error(r)) {
        fprintf(stderr, "chaos: batch close: %s\n", r->str);
        w->producer_errors++;
        w->batch_closed = 1;
    }
    freeReplyObject(r);
}

/* ---------------------------------------------------------------------- settle, read */

static int is_terminal(const char *s) {
    return s && (!strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "dead_lettered") ||
                 !strcmp(s, "cancelled") || !strcmp(s, "expired"));
}

static long long stream_sum(world *w, int pending) {
    long long sum = 0;
    for (int q = 0; q < NQUEUES; q++)
        for (int b = 0; b < 10; b++) {
            redisReply *r = pending ? cmd(w, "XPENDING dtq:stream:%s:p%d workers", QUEUES[q], b)
                                    : cmd(w, "XLEN dtq:stream:%s:p%d", QUEUES[q], b);
            if (!r) return -1;
            if (pending && r->type == REDIS_REPLY_ARRAY && r->elements > 0)
                sum += r->element[0]->integer;
            else if (!pending && r->type == REDIS_REPLY_INTEGER)
                sum += r->integer;
            freeReplyObject(r);
        }
    return sum;
}

static long long zcard(world *w, const char *key) {
    redisReply *r = cmd(w, "ZCARD %s", key);
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* How many confirmed tasks have no terminal hash among their ids yet (-1: no Redis); a
 * lean task with no hash counts as settled (its entry, while there, is in the streams). */
static long long unsettled_tasks(world *w) {
    redisContext *c = rc(w);
    long long open = 0;
    if (!c) return -1;
    if (w->batch_id[0] && w->tasks[w->ntasks - 1].nids == 0) { /* the callback, once made */
        redisReply *r = cmd(w, "HGET dtq:batch:%s complete_task", w->batch_id);
        if (r && r->type == REDIS_REPLY_STRING) task_add_id(&w->tasks[w->ntasks - 1], r->str);
        freeReplyObject(r);
        if (!(c = rc(w))) return -1;
    }
    for (int i = 0; i < w->ntasks; i++)
        for (int j = 0; j < w->tasks[i].nids; j++)
            redisAppendCommand(c, "HGET dtq:task:%s status", w->tasks[i].ids[j]);
    for (int i = 0; i < w->ntasks; i++) {
        int done = 0;
        for (int j = 0; j < w->tasks[i].nids; j++) {
            redisReply *r = NULL;
            if (redisGetReply(c, (void **)&r) != REDIS_OK) return -1;
            if (r->type == REDIS_REPLY_STRING && is_terminal(r->str)) done = 1;
            /* a lean task without a hash is its entry: the stream sums below wait for it */
            if (r->type == REDIS_REPLY_NIL && w->tasks[i].how == H_LEAN) done = 1;
            freeReplyObject(r);
        }
        if (w->tasks[i].confirmed && !done) open++;
    }
    return open;
}

static int settled(world *w, char *why, size_t whylen) {
    long long open = unsettled_tasks(w), pend = stream_sum(w, 1), len = stream_sum(w, 0),
              sched = zcard(w, "dtq:retry:schedule"), claimed = zcard(w, "dtq:retry:claimed");
    snprintf(why, whylen,
             "open tasks %lld, pending %lld, stream entries %lld, scheduled %lld, claimed %lld",
             open, pend, len, sched, claimed);
    return open == 0 && pend == 0 && len == 0 && sched == 0 && claimed == 0;
}

static char *field_dup(redisReply *r, const char *name) {
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, name)) return xstrdup(r->element[i + 1]->str);
    return NULL;
}

static int ref_of(const char *payload) {
    const char *p = payload ? strstr(payload, "\"ref\":\"r") : NULL;
    return p ? atoi(p + 8) : -1;
}

/* Every task hash of the namespace (SCAN), read with pipelined HGETALLs. */
static thash *read_hashes(world *w, int *nout) {
    redisContext *c = rc(w);
    char **keys = NULL, cursor[64] = "0";
    size_t nkeys = 0;
    thash *hs;
    if (!c) {
        *nout = 0;
        return NULL;
    }
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH dtq:task:* COUNT 1000", cursor);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "chaos: SCAN failed\n");
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            keys = xrealloc(keys, sizeof(char *) * (nkeys + 1));
            keys[nkeys++] = xstrdup(r->element[1]->element[i]->str);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0"));
    hs = xcalloc(nkeys, sizeof(thash));
    for (size_t i = 0; i < nkeys; i++) redisAppendCommand(c, "HGETALL %s", keys[i]);
    for (size_t i = 0; i < nkeys; i++) {
        redisReply *r = NULL;
        thash *h = &hs[i];
        char *s;
        if (redisGetReply(c, (void **)&r) != REDIS_OK) break;
        h->id = xstrdup(keys[i] + strlen("dtq:task:"));
        h->status = field_dup(r, "status");
        h->cls = field_dup(r, "last_error_class");
        h->err = field_dup(r, "last_error");
        h->payload = field_dup(r, "payload");
        h->worker_id = field_dup(r, "worker_id");
        h->dlq_entry = field_dup(r, "dlq_entry");
        h->queue = field_dup(r, "queue");
        s = field_dup(r, "attempt");
        h->attempt = s ? atoi(s) : 0;
        free(s);
        s = field_dup(r, "max_attempts");
        h->max_attempts = s ? atoi(s) : 0;
        free(s);
        h->ref = ref_of(h->payload);
        freeReplyObject(r);
        free(keys[i]);
    }
    free(keys);
    *nout = (int)nkeys;
    return hs;
}

typedef struct event_rec {
    char *task_id, *type, *worker_id;
    int attempt;
    int64_t ms;
    char *json;
} event_rec;

static event_rec *read_events(world *w, int *nout) {
    char start[64] = "-";
    event_rec *ev = NULL;
    int n = 0;
    for (;;) {
        redisReply *r = cmd(w, "XRANGE dtq:stream:events %s + COUNT 2000", start);
        size_t got;
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            break;
        }
        got = r->elements;
        for (size_t i = 0; i < got; i++) {
            redisReply *e = r->element[i], *f = e->element[1];
            snprintf(start, sizeof(start), "(%s", e->element[0]->str);
            for (size_t j = 0; j + 1 < f->elements; j += 2) {
                cJSON *js;
                if (strcmp(f->element[j]->str, "event")) continue;
                js = cJSON_Parse(f->element[j + 1]->str);
                if (!js) continue;
                ev = xrealloc(ev, sizeof(event_rec) * (size_t)(n + 1));
                event_rec *x = &ev[n++];
                cJSON *id = cJSON_GetObjectItem(js, "event_id");
                x->task_id = xstrdup(cJSON_GetStringValue(cJSON_GetObjectItem(js, "task_id")));
                x->type = xstrdup(cJSON_GetStringValue(cJSON_GetObjectItem(js, "type")));
                x->worker_id = xstrdup(cJSON_GetStringValue(cJSON_GetObjectItem(js, "worker_id")));
                x->attempt = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(js, "attempt"));
                x->ms = id && id->valuestring ? strtoll(id->valuestring + 4, NULL, 10) : 0;
                x->json = xstrdup(f->element[j + 1]->str);
                cJSON_Delete(js);
            }
        }
        freeReplyObject(r);
        if (got < 2000) break;
    }
    *nout = n;
    return ev;
}

/* ---------------------------------------------------------------------------- checks */

typedef struct logline {
    char *id;
    int attempt;
    int pid, ppid;
} logline;

static logline *read_log(world *w, int *nout, long long *bad) {
    FILE *f = fopen(w->log_path, "r");
    char line[512];
    logline *ls = NULL;
    int n = 0;
    *bad = 0;
    if (!f) {
        *nout = 0;
        return NULL;
    }
    while (fgets(line, sizeof(line), f)) {
        char id[256];
        int a, pid, ppid;
        char extra;
        if (sscanf(line, "%255s %d %d %d %c", id, &a, &pid, &ppid, &extra) != 4 ||
            line[strlen(line) - 1] != '\n') {
            (*bad)++;
            fprintf(stderr, "chaos: malformed handler.log line: %s", line);
            continue;
        }
        ls = xrealloc(ls, sizeof(logline) * (size_t)(n + 1));
        ls[n].id = xstrdup(id);
        ls[n].attempt = a;
        ls[n].pid = pid;
        ls[n].ppid = ppid;
        n++;
    }
    fclose(f);
    *nout = n;
    return ls;
}

static int details_left = 12;

static void show_task(world *w, const char *why, const thash *h, logline *ls, int nls,
                      event_rec *ev, int nev) {
    (void)w;
    if (details_left <= 0) return;
    details_left--;
    fprintf(stderr, "chaos: -- %s: task %s status %s attempt %d/%d class %s error %s worker %s\n",
            why, h->id, h->status ? h->status : "(none)", h->attempt, h->max_attempts,
            h->cls ? h->cls : "", h->err ? h->err : "", h->worker_id ? h->worker_id : "");
    for (int i = 0; i < nls; i++)
        if (!strcmp(ls[i].id, h->id))
            fprintf(stderr, "chaos:    run: attempt %d pid %d daemon pid %d\n", ls[i].attempt,
                    ls[i].pid, ls[i].ppid);
    for (int i = 0; i < nev; i++)
        if (!strcmp(ev[i].task_id, h->id)) fprintf(stderr, "chaos:    event: %s\n", ev[i].json);
}

/* A lost last attempt is the documented cost of a crash when the worker that started it
 * was killed, stopped or drained while it held that attempt: after the attempt's
 * TASK_STARTED and before the task's TASK_DEAD_LETTERED. */
static int explained_by_fault(world *w, const thash *h, event_rec *ev, int nev) {
    int64_t started = -1, ended = -1;
    const char *by = NULL;
    for (int i = 0; i < nev; i++) {
        if (strcmp(ev[i].task_id, h->id)) continue;
        if (!strcmp(ev[i].type, "TASK_STARTED") && ev[i].attempt == h->attempt) {
            started = ev[i].ms;
            by = ev[i].worker_id;
        }
        if (!strcmp(ev[i].type, "TASK_DEAD_LETTERED")) ended = ev[i].ms;
    }
    if (!by || ended < 0) return 0;
    for (int j = 0; j < w->nhits; j++)
        if (!strcmp(w->hits[j].worker_id, by) && w->hits[j].wall_ms >= started - 50 &&
            w->hits[j].wall_ms <= ended + 50)
            return 1;
    return 0;
}

/* One mismatch of the batch check: counted and said. */
static void batch_mismatch(world *w, const char *what, long long got, long long want) {
    if (got == want) return;
    w->res->checks[C_BATCH]++;
    fprintf(stderr, "chaos: batch %s: %s is %lld, want %lld\n", w->batch_id, what, got, want);
}

static long long json_num(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
}

/* The batch's counts (<ns>_batch_show) against its members' hashes, and its callback's
 * payload against the counts: each a mismatch. The callback ran exactly once is the
 * lost and duplicate checks' (it is a task of the round, ref ntasks-1). */
static void check_batch(world *w, const thash *hs) {
    long long members = 0, ok = 0, failed = 0, dead = 0;
    redisReply *r;
    cJSON *show, *cb_payload;
    const task *cb;
    if (!w->batch_id[0]) return;
    for (int i = 0; i < w->ntasks; i++) {
        const task *t = &w->tasks[i];
        const char *st;
        if (!(t->how == H_BATCH || t->how == H_BATCH_SEED || t->in_batch) || !t->confirmed)
            continue;
        members++;
        st = t->hash >= 0 ? hs[t->hash].status : NULL;
        if (!st || !is_terminal(st)) continue; /* counted as lost already */
        if (!strcmp(st, "succeeded"))
            ok++;
        else if (!strcmp(st, "dead_lettered"))
            dead++;
        else
            failed++;
    }
    r = cmd(w, "FCALL_RO dtq_batch_show 0 %s", w->batch_id);
    show = r && r->type == REDIS_REPLY_STRING ? cJSON_Parse(r->str) : NULL;
    if (!show) {
        w->res->checks[C_BATCH]++;
        fprintf(stderr, "chaos: batch %s: batch_show: %s\n", w->batch_id,
                r && r->type == REDIS_REPLY_ERROR ? r->str : "no JSON");
        freeReplyObject(r);
        return;
    }
    freeReplyObject(r);
    batch_mismatch(w, "total", json_num(show, "total"), members);
    batch_mismatch(w, "pending", json_num(show, "pending"), 0);
    batch_mismatch(w, "succeeded", json_num(show, "succeeded"), ok);
    batch_mismatch(w, "failed", json_num(show, "failed"), failed);
    batch_mismatch(w, "dead_lettered", json_num(show, "dead_lettered"), dead);
    cb = &w->tasks[w->ntasks - 1];
    cb_payload = cb->hash >= 0 && hs[cb->hash].payload ? cJSON_Parse(hs[cb->hash].payload) : NULL;
    if (cb_payload) { /* none: the lost check has counted it */
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(cb_payload, "batch");
        batch_mismatch(w, "the callback's batch.total", json_num(b, "total"), members);
        batch_mismatch(w, "the callback's batch.succeeded", json_num(b, "succeeded"), ok);
        batch_mismatch(w, "the callback's failed_ids",
                       cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(b, "failed_ids")),
                       failed + dead < 1000 ? failed + dead : 1000);
        cJSON_Delete(cb_payload);
    }
    printf("info  batch %s: %lld members (%lld succeeded, %lld failed, %lld dead-lettered), "
           "callback %s\n",
           w->batch_id, members, ok, failed, dead, cb->nids > 0 ? cb->ids[0] : "(none)");
    cJSON_Delete(show);
}

static void run_checks(world *w) {
    round_result *res = w->res;
    int nh = 0, nls = 0, nev = 0;
    long long bad_lines = 0;
    thash *hs = read_hashes(w, &nh);
    logline *ls = read_log(w, &nls, &bad_lines);
    event_rec *ev = read_events(w, &nev);
    smap runs = {0}, hidx = {0}, dlq = {0}, outcomes = {0}, lean_ok = {0};
    char key[320];

    res->checks[C_LOG_BAD] = bad_lines;
    res->checks[C_DAEMON_EXIT] = w->unexpected_exits;
    for (int sl = 0; sl < NSLOTS; sl++) { /* a sanitizer report counts, whatever the exit */
        char path[256], line[1024];
        FILE *f;
        snprintf(path, sizeof(path), "%s/daemon-%d.log", w->dir, sl);
        if (!(f = fopen(path, "r"))) continue;
        while (fgets(line, sizeof(line), f))
            if (strstr(line, "Sanitizer") || strstr(line, "runtime error:")) {
                res->checks[C_DAEMON_EXIT]++;
                fprintf(stderr, "chaos: sanitizer report in %s: %s", path, line);
            }
        fclose(f);
    }
    for (int i = 0; i < nls; i++) {
        snprintf(key, sizeof(key), "%s#%d", ls[i].id, ls[i].attempt);
        (*smap_slot(&runs, key, 1))++;
    }
    for (int i = 0; i < nh; i++) *smap_slot(&hidx, hs[i].id, 1) = i;
    /* A lean task that succeeded has no hash (reference 4.3): its TASK_SUCCEEDED event, at
     * the attempt that succeeded, stands for it. */
    for (int i = 0; i < nev; i++)
        if (!strncmp(ev[i].task_id, "ql:", 3) && !strcmp(ev[i].type, "TASK_SUCCEEDED") &&
            smap_get(&hidx, ev[i].task_id, -1) < 0)
            *smap_slot(&lean_ok, ev[i].task_id, 1) = ev[i].attempt;

    /* attempts started twice, attempts beyond the limit */
    for (size_t i = 0; i < runs.cap; i++)
        if (runs.keys[i] && runs.vals[i] > 1) {
            res->checks[C_TWICE]++;
            char id[300];
            snprintf(id, sizeof(id), "%s", runs.keys[i]);
            *strrchr(id, '#') = '\0';
            int hi = smap_get(&hidx, id, -1);
            fprintf(stderr, "chaos: attempt started %d times: %s\n", runs.vals[i], runs.keys[i]);
            if (hi >= 0) show_task(w, "started twice", &hs[hi], ls, nls, ev, nev);
        }
    for (int i = 0; i < nls; i++) {
        int hi = smap_get(&hidx, ls[i].id, -1);
        if (hi < 0 && smap_get(&lean_ok, ls[i].id, 0) > 0) {
            if (ls[i].attempt > smap_get(&lean_ok, ls[i].id, 0)) { /* ran after its success */
                res->checks[C_BEYOND_MAX]++;
                fprintf(stderr, "chaos: lean task %s ran attempt %d after its success\n", ls[i].id,
                        ls[i].attempt);
            }
        } else if (hi < 0) {
            fprintf(stderr, "chaos: handler ran for %s, which has no hash\n", ls[i].id);
            res->checks[C_UNEXPECTED]++;
        } else if (hs[hi].max_attempts > 0 && ls[i].attempt > hs[hi].max_attempts) {
            res->checks[C_BEYOND_MAX]++;
            show_task(w, "attempt beyond max_attempts", &hs[hi], ls, nls, ev, nev);
        }
    }

    /* tasks by ref */
    for (int i = 0; i < w->ntasks; i++) w->tasks[i].hash = -1, w->tasks[i].hash_score = 0;
    for (int i = 0; i < nh; i++) {
        thash *h = &hs[i];
        if (h->ref < 0 || h->ref >= w->ntasks) {
            res->checks[C_UNEXPECTED]++;
            fprintf(stderr, "chaos: unexpected task hash %s (payload %s)\n", h->id,
                    h->payload ? h->payload : "(none)");
            continue;
        }
        task *t = &w->tasks[h->ref];
        t->nhashes++;
        /* the hash under the id the producer was first given wins, then any id it was
         * given; another one is a duplicate */
        int score = 0;
        for (int j = t->nids - 1; j >= 0; j--)
            if (!strcmp(t->ids[j], h->id)) score = j == 0 ? 2 : 1;
        if (t->hash < 0 || score > t->hash_score) t->hash = i, t->hash_score = score;
    }
    for (int i = 0; i < w->ntasks; i++) {
        task *t = &w->tasks[i];
        thash *h;
        int ok;
        if (t->nhashes > 1) {
            res->checks[C_DUP]++;
            fprintf(stderr, "chaos: r%d (%s, %s) has %d task hashes:", t->ref, HOW_NAMES[t->how],
                    KIND_NAMES[t->kind], t->nhashes);
            for (int j = 0; j < nh; j++)
                if (hs[j].ref == t->ref) fprintf(stderr, " %s", hs[j].id);
            fputc('\n', stderr);
        }
        if (t->hash < 0 && t->how == H_LEAN && t->nids > 0 &&
            smap_get(&lean_ok, t->ids[0], 0) > 0) {
            int at = smap_get(&lean_ok, t->ids[0], 0);
            (*smap_slot(&outcomes, "succeeded (lean) ", 1))++;
            snprintf(key, sizeof(key), "%s#%d", t->ids[0], at);
            if (!(t->kind == K_OK || (t->kind == K_FLAKY && at >= t->k))) {
                res->checks[C_WRONG]++;
                fprintf(stderr, "chaos: wrong status for r%d (lean, %s, k %d): succeeded at %d\n",
                        t->ref, KIND_NAMES[t->kind], t->k, at);
            } else if (smap_get(&runs, key, 0) == 0) {
                res->checks[C_NO_RUN]++;
                fprintf(stderr, "chaos: lean r%d succeeded at %d without that run\n", t->ref, at);
            }
            continue;
        }
        if (t->hash < 0) {
            if (t->confirmed) {
                res->checks[C_LOST]++;
                fprintf(stderr, "chaos: lost: r%d (%s, %s) ids", t->ref, HOW_NAMES[t->how],
                        KIND_NAMES[t->kind]);
                for (int j = 0; j < t->nids; j++) fprintf(stderr, " %s", t->ids[j]);
                fprintf(stderr, ": no task hash\n");
            }
            continue;
        }
        h = &hs[t->hash];
        if (!is_terminal(h->status)) {
            res->checks[C_LOST]++;
            show_task(w, "not terminal", h, ls, nls, ev, nev);
            continue;
        }
        snprintf(key, sizeof(key), "%s %s", h->status,
                 h->cls && strcmp(h->status, "succeeded") ? h->cls : "");
        (*smap_slot(&outcomes, key, 1))++;
        snprintf(key, sizeof(key), "%s#%d", h->id, h->attempt);
        int ran_last = smap_get(&runs, key, 0) > 0;
        const char *st = h->status, *cls = h->cls ? h->cls : "";
        switch (t->kind) {
        case K_OK: ok = !strcmp(st, "succeeded"); break;
        case K_FLAKY: ok = !strcmp(st, "succeeded") && h->attempt >= t->k; break;
        case K_PERM: ok = !strcmp(st, "dead_lettered") && !strcmp(cls, "permanent"); break;
        case K_RETRY:
            ok = !strcmp(st, "dead_lettered") && !strcmp(cls, "retryable") &&
                 h->attempt == h->max_attempts;
            break;
        case K_NOHANDLER:
            ok = !strcmp(st, "dead_lettered") && !strcmp(cls, "unknown_task_type");
            break;
        default: ok = !strcmp(st, "dead_lettered") && !strcmp(cls, "invalid_entry"); break;
        }
        if (!ok && t->kind != K_MALFORMED && !strcmp(st, "dead_lettered") &&
            (!strcmp(cls, "worker_lost") || !strcmp(cls, "interrupted")) &&
            h->attempt == h->max_attempts && explained_by_fault(w, h, ev, nev)) {
            res->crash_exhausted++;
            if (verbose)
                show_task(w, "last attempt lost to an injected fault", h, ls, nls, ev, nev);
        } else if (!ok) {
            res->checks[C_WRONG]++;
            char why[96];
            snprintf(why, sizeof(why), "wrong status for r%d (%s, %s, k %d)", t->ref,
                     HOW_NAMES[t->how], KIND_NAMES[t->kind], t->k);
            show_task(w, why, h, ls, nls, ev, nev);
        } else if (!ran_last && (!strcmp(st, "succeeded") || !strcmp(cls, "permanent") ||
                                 !strcmp(cls, "retryable"))) {
            res->checks[C_NO_RUN]++;
            show_task(w, "outcome without a run of that attempt", h, ls, nls, ev, nev);
        }
    }

    check_batch(w, hs);

    /* the dead-letter stream against the hashes */
    {
        char start[64] = "-";
        for (;;) {
            redisReply *r = cmd(w, "XRANGE dtq:stream:dead-letter %s + COUNT 2000", start);
            size_t got;
            if (!r || r->type != REDIS_REPLY_ARRAY) {
                freeReplyObject(r);
                break;
            }
            got = r->elements;
            for (size_t i = 0; i < got; i++) {
                redisReply *e = r->element[i];
                char *tid = field_dup(e->element[1], "task_id");
                snprintf(start, sizeof(start), "(%s", e->element[0]->str);
                snprintf(key, sizeof(key), "%s", tid ? tid : "");
                int *slot = smap_slot(&dlq, key, 1);
                (*slot)++;
                int hi = smap_get(&hidx, key, -1);
                if (hi < 0 || !hs[hi].status || strcmp(hs[hi].status, "dead_lettered") ||
                    !hs[hi].dlq_entry || strcmp(hs[hi].dlq_entry, e->element[0]->str)) {
                    res->checks[C_DLQ]++;
                    fprintf(stderr, "chaos: dead-letter entry %s for %s: hash %s, dlq_entry %s\n",
                            e->element[0]->str, key, hi < 0 ? "missing" : hs[hi].status,
                            hi < 0 || !hs[hi].dlq_entry ? "(none)" : hs[hi].dlq_entry);
                }
                free(tid);
            }
            freeReplyObject(r);
            if (got < 2000) break;
        }
        for (int i = 0; i < nh; i++)
            if (hs[i].status && !strcmp(hs[i].status, "dead_lettered") &&
                smap_get(&dlq, hs[i].id, 0) != 1) {
                res->checks[C_DLQ]++;
                fprintf(stderr, "chaos: %s is dead_lettered with %d dead-letter entries\n",
                        hs[i].id, smap_get(&dlq, hs[i].id, 0));
            }
    }

    res->checks[C_PENDING] = stream_sum(w, 1);
    res->checks[C_STREAM_LEFT] = stream_sum(w, 0);
    res->checks[C_SCHEDULE] = zcard(w, "dtq:retry:schedule");
    res->checks[C_CLAIMED] = zcard(w, "dtq:retry:claimed");

    for (int i = 0; i < nh; i++) {
        thash *h = &hs[i];
        free(h->id), free(h->status), free(h->cls), free(h->err), free(h->payload);
        free(h->worker_id), free(h->dlq_entry), free(h->queue);
    }
    free(hs);
    for (int i = 0; i < nls; i++) free(ls[i].id);
    free(ls);
    for (int i = 0; i < nev; i++) {
        free(ev[i].task_id), free(ev[i].type), free(ev[i].worker_id), free(ev[i].json);
    }
    free(ev);
    printf("info  outcomes:");
    for (size_t i = 0; i < outcomes.cap; i++)
        if (outcomes.keys[i]) printf(" [%s] %d", outcomes.keys[i], outcomes.vals[i]);
    printf("\ninfo  handler runs %d, task hashes %d, events %d; producer: %d enqueue retries, "
           "%d raw entries of unknown fate, %d duplicate enqueues\n",
           nls, nh, nev, w->enqueue_retries, w->ambiguous, w->dups_sent);
    smap_free(&outcomes);
    smap_free(&runs);
    smap_free(&hidx);
    smap_free(&dlq);
    smap_free(&lean_ok);
}

/* Self-test: after the round, plant one fault of each kind the checks look for, so that
 * each check must count exactly 1 (the daemons-exited check 0): a check that cannot fail
 * proves nothing. */
static void self_test_inject(world *w, long long *expect) {
    int picked[6], np = 0;
    FILE *f;
    for (int i = 0; i < w->ntasks && np < 6; i++) {
        task *t = &w->tasks[i];
        redisReply *r;
        if (t->how != H_FCALL_ID || t->kind != K_OK || t->nids != 1) continue;
        r = cmd(w, "HGET dtq:task:%s status", t->ids[0]);
        if (r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "succeeded")) picked[np++] = i;
        freeReplyObject(r);
    }
    for (int c = 0; c < C_NCHECKS; c++) expect[c] = 1;
    expect[C_DAEMON_EXIT] = 0;
    if (np < 6) {
        fprintf(stderr, "chaos: self-test: too few succeeded tasks to plant faults in\n");
        expect[0] = -1;
        return;
    }
    const char *a = w->tasks[picked[0]].ids[0], *b = w->tasks[picked[1]].ids[0],
               *c = w->tasks[picked[2]].ids[0], *d = w->tasks[picked[3]].ids[0],
               *e = w->tasks[picked[4]].ids[0], *fd = w->tasks[picked[5]].ids[0];
    redisReply *r = cmd(w, "HGET dtq:task:%s attempt", a);
    f = fopen(w->log_path, "a");
    if (f && r && r->type == REDIS_REPLY_STRING) {
        fprintf(f, "%s %s 1 1\n", a, r->str); /* attempt started twice */
        fprintf(f, "%s 99 1 1\n", d);         /* beyond max_attempts */
        fprintf(f, "garbage\n");              /* malformed line */
    }
    if (f) fclose(f);
    freeReplyObject(r);
    freeReplyObject(cmd(w, "HSET dtq:task:%s status running", b)); /* lost */
    freeReplyObject(cmd(w, "HINCRBY dtq:task:%s attempt 1", c));   /* no run */
    freeReplyObject(cmd(w, "HSET dtq:task:%s status failed", e));  /* wrong */
    r = cmd(w, "DUMP dtq:task:%s", fd);                            /* duplicate */
    if (r && r->type == REDIS_REPLY_STRING)
        freeReplyObject(cmd(w, "RESTORE dtq:task:%s-selftest 0 %b", fd, r->str, r->len));
    freeReplyObject(r);
    freeReplyObject(cmd(w, "HSET dtq:task:selftest-stray status succeeded attempt 1 payload {}"));
    freeReplyObject(cmd(w, "ZADD dtq:retry:schedule 0 selftest-s"));
    freeReplyObject(cmd(w, "ZADD dtq:retry:claimed 0 selftest-c"));
    freeReplyObject(cmd(w, "XADD dtq:stream:qa:p0 * task_id selftest-p attempt 1"));
    freeReplyObject(
        cmd(w, "XREADGROUP GROUP workers selftest COUNT 10 STREAMS dtq:stream:qa:p0 >"));
    freeReplyObject(cmd(w, "XADD dtq:stream:dead-letter * task_id selftest-d"));
    if (w->batch_id[0]) /* a member's end counted twice */
        freeReplyObject(cmd(w, "HINCRBY dtq:batch:%s succeeded 1", w->batch_id));
    else
        expect[C_BATCH] = 0;
}

/* ------------------------------------------------------------------------- the round */

static const char HANDLER_SH[] =
    "#!/bin/sh\n"
    "# chaos handler: $1 = ok | flaky | perm | retry; payload {\"ref\":..,\"ms\":N,\"k\":K}\n"
    "printf '%s %s %s %s\\n' \"$DTQ_TASK_ID\" \"$DTQ_ATTEMPT\" \"$$\" \"$PPID\" >>\"$CHAOS_LOG\"\n"
    "IFS= read -r p || true\n"
    "ms=${p#*\\\"ms\\\":}; ms=${ms%%[,\\}]*}\n"
    "k=${p#*\\\"k\\\":}; k=${k%%[,\\}]*}\n"
    "if [ \"$ms\" -gt 0 ] 2>/dev/null; then sleep \"$((ms / 1000)).$(printf %03d $((ms % "
    "1000)))\"; fi\n"
    "case $1 in\n"
    "ok) echo '{\"ok\":true}'; exit 0 ;;\n"
    "flaky) if [ \"$DTQ_ATTEMPT\" -ge \"$k\" ]; then echo \"{\\\"attempt\\\":$DTQ_ATTEMPT}\"; exit "
    "0; fi\n"
    "       echo \"flaky: attempt $DTQ_ATTEMPT of $k fails\" >&2; exit 75 ;;\n"
    "perm) echo 'permanent failure' >&2; exit 1 ;;\n"
    "retry) echo 'retryable failure' >&2; exit 75 ;;\n"
    "esac\n"
    "exit 2\n";

static void print_result(const round_result *res) {
    printf("chaos: seed %" PRIu64 ": %d tasks, %d faults (", res->seed, res->tasks, res->nfaults);
    for (int k = 0; k < F_NKINDS; k++)
        printf("%s%s %d", k ? ", " : "", FAULT_NAMES[k], res->faults[k]);
    printf("), %.1f s\n", res->secs);
    for (int c = 0; c < C_NCHECKS; c++)
        printf("check %-62s %lld\n", CHECK_NAMES[c], res->checks[c]);
    printf("info  last attempt lost to an injected crash/stop/drain (documented cost) %lld\n",
           res->crash_exhausted);
    printf("chaos: seed %" PRIu64 ": %s\n", res->seed, res->failed ? "FAILED" : "ok");
    fflush(stdout);
}

static int run_round(options *opt, uint64_t seed, round_result *res) {
    world W = {0}, *w = &W;
    rng rtasks, rfaults;
    int next = 0, started = 0, ok_settle = 0;
    char why[256] = "";
    int64_t settle_deadline, hard_deadline;

    memset(res, 0, sizeof(*res));
    res->seed = seed;
    w->opt = opt;
    w->seed = seed;
    w->res = res;
    w->relay.cmd_fd = -1;
    w->ntasks = opt->tasks_given ? opt->tasks : opt->shortrun ? 400 : 5000;
    res->tasks = w->ntasks;
    round_t0 = th_now_ms();
    if (opt->shortrun) {
        w->fault_end_ms = 22000;
        w->enqueue_end_ms = 15000;
    } else {
        w->fault_end_ms = 20000 + (int64_t)w->ntasks * 18; /* 110 s for 5000 tasks */
        w->enqueue_end_ms = w->fault_end_ms * 3 / 4;
    }
    rng_seed(&rtasks, seed * 2 + 1);
    rng_seed(&rfaults, seed * 2 + 2);
    gen_tasks(w, &rtasks);
    gen_faults(w, &rfaults, opt->shortrun);

    snprintf(w->dir, sizeof(w->dir), "/tmp/dtq-chaos-%" PRIu64 "-XXXXXX", seed);
    if (!mkdtemp(w->dir)) {
        perror("chaos: mkdtemp");
        return 1;
    }
    path_of(res->dir, sizeof(res->dir), "", w->dir, "");
    path_of(w->redis.dir, sizeof(w->redis.dir), "", w->dir, "");
    path_of(w->redis.sock, sizeof(w->redis.sock), "", w->dir, "/redis.sock");
    path_of(w->url_unix, sizeof(w->url_unix), "unix://", w->redis.sock, "");
    path_of(w->log_path, sizeof(w->log_path), "", w->dir, "/handler.log");
    path_of(w->handler_path, sizeof(w->handler_path), "", w->dir, "/handler.sh");
    {
        FILE *f = fopen(w->handler_path, "w");
        if (!f || fputs(HANDLER_SH, f) < 0 || fclose(f) != 0 || chmod(w->handler_path, 0755)) {
            perror("chaos: handler.sh");
            return 1;
        }
    }
    g_world = w;
    w->redis.bin = opt->redis_bin;
    w->redis.persist = 1; /* AOF, fsync every second, no eviction: see the top */
    snprintf(w->redis.extra, sizeof(w->redis.extra),
             "--appendfsync everysec --maxmemory-policy noeviction --loglevel notice");
    w->redis.port = free_port();
    redis_spawn(w);
    if (!wait_redis_up(w, 20000)) {
        fprintf(stderr, "chaos: redis-server did not start (see %s/redis.log)\n", w->dir);
        stop_everything(w);
        return 1;
    }
    relay_start(w);
    for (int s = 0; s < NSLOTS; s++) {
        snprintf(w->slots[s].worker_id, sizeof(w->slots[s].worker_id), "w%dg0", s);
        daemon_start(w, s);
    }
    for (int i = 0; i < 1000 && !daemons_ready(w) && !interrupted; i++) {
        reap_children(w);
        sleep_ms(20);
    }
    if (!daemons_ready(w)) {
        fprintf(stderr, "chaos: the daemons did not become ready (logs in %s)\n", w->dir);
        stop_everything(w);
        return 1;
    }
    round_t0 = th_now_ms(); /* the schedules count from here */
    batch_create(w);
    note("seed %" PRIu64 ": %d tasks, %d faults, fault window %" PRId64 " ms, dir %s", seed,
         w->ntasks, w->nfaults, w->fault_end_ms, w->dir);

    /* the fault window: produce, inject, follow up */
    hard_deadline = round_t0 + w->fault_end_ms + (opt->shortrun ? 60000 : 300000);
    while (!interrupted) {
        int64_t now = th_now_ms() - round_t0;
        int over = now >= w->fault_end_ms;
        reap_children(w);
        while (!over && w->next_fault < w->nfaults && w->faults[w->next_fault].at_ms <= now)
            run_fault(w, &w->faults[w->next_fault++]);
        run_followups(w, over);
        produce(w, &next);
        if (producer_done(w, next)) batch_close(w);
        if (over && producer_done(w, next) && (w->batch_closed || !w->batch_id[0])) break;
        if (th_now_ms() > hard_deadline) {
            fprintf(stderr, "chaos: the producer did not finish in time\n");
            break;
        }
        sleep_ms(20);
    }
    run_followups(w, 1);
    started = 1;
    note("faults over; settling");

    /* settle: everything terminal, nothing pending, nothing scheduled (twice in a row) */
    settle_deadline = th_now_ms() + (opt->shortrun ? 60000 : 240000);
    for (int stable = 0; !interrupted && th_now_ms() < settle_deadline;) {
        reap_children(w);
        for (int s = 0; s < NSLOTS; s++) /* a daemon that died on its own is replaced */
            if (w->slots[s].state == D_DOWN) daemon_start(w, s);
        if (settled(w, why, sizeof(why))) {
            if (++stable >= 2) {
                ok_settle = 1;
                break;
            }
        } else {
            stable = 0;
        }
        sleep_ms(500);
    }
    note("settled: %s (%s)", ok_settle ? "yes" : "NO", why);
    if (!ok_settle) fprintf(stderr, "chaos: did not settle: %s\n", why);

    /* stop the daemons (a drain), then wait for orphaned handler programs */
    for (int s = 0; s < NSLOTS; s++)
        if (w->slots[s].pid > 0) {
            w->slots[s].expect_exit = 1;
            kill(w->slots[s].pid, SIGTERM);
        }
    for (int i = 0; i < 1500; i++) {
        pid_t kids[512];
        int n, others = 0;
        reap_children(w);
        n = list_children(kids, 512);
        for (int k = 0; k < n; k++)
            if (kids[k] != w->redis.pid && kids[k] != w->relay.pid) others++;
        if (others == 0) break;
        if (i == 1000)
            for (int s = 0; s < NSLOTS; s++)
                if (w->slots[s].pid > 0) kill(w->slots[s].pid, SIGKILL);
        sleep_ms(20);
    }
    (void)started;

    long long expect[C_NCHECKS] = {0};
    if (!interrupted && opt->self_test) self_test_inject(w, expect);
    if (!interrupted) run_checks(w);
    res->secs = (double)(th_now_ms() - round_t0) / 1000.0;
    res->failed = interrupted || !ok_settle || w->producer_errors > 0;
    for (int c = 0; c < C_NCHECKS; c++)
        if (res->checks[c] != expect[c]) {
            res->failed = 1;
            if (opt->self_test)
                fprintf(stderr, "chaos: self-test: check \"%s\" counted %lld, want %lld\n",
                        CHECK_NAMES[c], res->checks[c], expect[c]);
        }
    if (opt->self_test)
        printf("chaos: self-test: %s\n",
               res->failed ? "a planted fault was missed" : "every planted fault was counted");
    if (!ok_settle) fprintf(stderr, "chaos: the round did not settle within its time\n");
    if (w->producer_errors)
        fprintf(stderr, "chaos: %d unexpected producer replies\n", w->producer_errors);
    print_result(res);

    stop_everything(w);
    g_world = NULL;
    if (w->rc) redisFree(w->rc);
    if (res->failed || opt->keep) {
        fprintf(stderr, "chaos: round files kept in %s\n", w->dir);
    } else {
        char rm[256];
        path_of(rm, sizeof(rm), "rm -rf '", w->dir, "'");
        if (system(rm) != 0) fprintf(stderr, "chaos: could not remove %s\n", w->dir);
    }
    for (int i = 0; i < w->ntasks; i++) {
        for (int j = 0; j < w->tasks[i].nids; j++) free(w->tasks[i].ids[j]);
        free(w->tasks[i].ids);
    }
    free(w->tasks);
    free(w->faults);
    free(w->hits);
    return res->failed;
}

static void usage(FILE *f) {
    fprintf(f, "usage: chaos --worker PATH [--redis-server PATH] [--seed S] [--rounds R] "
               "[--tasks N] [--short] [--keep] [--verbose] [--self-test]\n"
               "  rounds use seeds S, S+1, ...; --short: 400 tasks, a 22 s fault window;\n"
               "  --self-test plants one fault per check after the round: each must count 1\n");
}

int main(int argc, char **argv) {
    options opt = {.seed = 1, .rounds = 1, .redis_bin = "/usr/bin/redis-server"};
    round_result *results;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--short")) {
            opt.shortrun = 1;
        } else if (!strcmp(a, "--self-test")) {
            opt.self_test = 1;
        } else if (!strcmp(a, "--keep")) {
            opt.keep = 1;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            verbose = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--seed")) {
            opt.seed = strtoull(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--rounds")) {
            opt.rounds = atoi(v), i++;
        } else if (v && !strcmp(a, "--tasks")) {
            opt.tasks = atoi(v), opt.tasks_given = 1, i++;
        } else if (v && !strcmp(a, "--worker")) {
            opt.worker_bin = v, i++;
        } else if (v && !strcmp(a, "--redis-server")) {
            opt.redis_bin = v, i++;
        } else {
            fprintf(stderr, "chaos: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!opt.worker_bin || opt.rounds < 1 || opt.rounds > 1000 ||
        (opt.tasks_given && (opt.tasks < 1 || opt.tasks > 1000000))) {
        usage(stderr);
        return 2;
    }
    if (access(opt.worker_bin, X_OK) || access(opt.redis_bin, X_OK)) {
        fprintf(stderr, "chaos: %s or %s is not executable\n", opt.worker_bin, opt.redis_bin);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    signal(SIGPIPE, SIG_IGN);
    {
        struct sigaction sa = {0};
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    }
    atexit(exit_hook);
    results = xcalloc((size_t)opt.rounds, sizeof(round_result));
    for (int r = 0; r < opt.rounds && !interrupted; r++) {
        failed |= run_round(&opt, opt.seed + (uint64_t)r, &results[r]);
        if (results[r].failed) failed = 1;
    }
    if (opt.rounds > 1) {
        printf("\n| seed | tasks | faults | ");
        for (int c = 0; c < C_NCHECKS; c++) printf("%s | ", CHECK_SHORT[c]);
        printf("crash-cost | s | result |\n|");
        for (int c = 0; c < C_NCHECKS + 6; c++) printf("---|");
        printf("\n");
        for (int r = 0; r < opt.rounds; r++) {
            round_result *x = &results[r];
            if (x->tasks == 0) continue;
            printf("| %" PRIu64 " | %d | %d:", x->seed, x->tasks, x->nfaults);
            for (int k = 0; k < F_NKINDS; k++) printf(" %s %d", FAULT_ABBREV[k], x->faults[k]);
            printf(" | ");
            for (int c = 0; c < C_NCHECKS; c++) printf("%lld | ", x->checks[c]);
            printf("%lld | %.0f | %s |\n", x->crash_exhausted, x->secs,
                   x->failed ? "FAILED" : "ok");
        }
    }
    free(results);
    if (interrupted) {
        fprintf(stderr, "chaos: interrupted\n");
        return 1;
    }
    return failed ? 1 : 0;
}
