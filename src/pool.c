/* pool.c: a pool is a list of processes and a backlog; a process is four pipes, a list of
 * the tasks it holds and a state. Every change of a process's or a pool's state ends in
 * reconcile(), the one place that decides which processes to start and which to retire.
 * A process leaves the list only when it is reaped, so a pid is never forgotten while it
 * may be alive. */
#include "pool.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "outcome.h"
#include "util.h"

/* Back-off after failures in a row: the first restart at once, then 250 ms doubling up to
 * 30 s. A process that was ready this long before it failed starts the count again. */
#define BACKOFF_FIRST_MS 250
#define BACKOFF_MAX_MS 30000
#define HEALTHY_AFTER_MS 10000
/* Output lines logged per process per window; the rest are counted and reported once. */
#define OUTPUT_LINES 100
#define OUTPUT_WINDOW_MS 10000
#define OUTPUT_LINE_SHOWN 2048
/* A process that closed its replies descriptor gets this long to exit before SIGKILL. */
#define EOF_EXIT_GRACE_MS 1000
/* Task types one hello may announce. */
#define HELLO_TYPES_MAX 1024

enum restart_reason {
    R_CRASHED,
    R_START_FAILED,
    R_PROTOCOL_ERROR,
    R_TIMEOUT,
    R_MAX_TASKS,
    R_MAX_RSS,
    R_RESTART,
    R_RELOAD,
    R_COUNT
};
static const char *const reason_names[R_COUNT] = {"crashed", "start_failed", "protocol_error",
                                                  "timeout", "max_tasks",    "max_rss",
                                                  "restart", "reload"};

enum proc_state {
    P_STARTING, /* spawned, no hello yet */
    P_READY,    /* takes tasks */
    P_STOPPING, /* descriptor 3 closed: answers what it holds, then exits */
    P_DEAD      /* failed or killed; waits to be reaped */
};
static const char *const state_names[] = {"starting", "ready", "stopping"};

typedef struct proc proc;

/* A task of a pool: in the backlog (pr NULL) or held by a process. */
typedef struct ptask {
    struct ptask *next;
    dtq_pool *pool;
    proc *pr;
    dtq_handler_call *call; /* NULL once cancelled: its answer, if any, is dropped */
    char *id, *type;
    int64_t deadline_ms;
    struct event *grace_ev; /* cancelled: the process is killed when this fires first */
} ptask;

typedef struct pipe_in {
    int fd;
    struct event *ev;
    struct evbuffer *buf;
} pipe_in;

struct proc {
    proc *next;
    dtq_pool *pool;
    pid_t pid;
    int gen; /* the pool's generation it was started for: older ones are replaced */
    enum proc_state state;
    int tasks_fd;
    struct event *tasks_ev;
    struct evbuffer *outq;
    pipe_in replies, out, err;
    struct event *timer_ev; /* hello timeout; kill after the stop's grace or an EOF */
    char **types;
    int ntypes;
    int slots;   /* min(section inflight, hello inflight) */
    ptask *held; /* tasks sent, not answered (cancelled ones included) */
    int nheld;
    int64_t done;     /* tasks answered */
    int64_t ready_ms; /* monotonic, when its hello came */
    int64_t log_window_ms;
    int log_lines, log_dropped;
    int kill_armed;          /* stopping: the kill after kill_grace_ms is set */
    struct event *output_ev; /* the end of an output window with lines dropped */
    struct event *flush_ev;  /* the end of this loop pass: outq is written (schedule_flush) */
    int flush_scheduled;
    int exited; /* reaped: what it wrote last is being read; it takes no task */
};

struct dtq_pool {
    dtq_pool *next;
    dtq_pools *ps;
    dtq_pool_conf conf; /* a copy: its strings owned */
    dtq_program prog;
    int prog_ok;
    int gen;
    char **ctypes; /* the section's types */
    int nctypes;
    char **known; /* the types of the last hello, kept while no process is up */
    int nknown;
    proc *procs;
    ptask *backlog, *backlog_tail;
    int nbacklog;
    int failures;          /* in a row */
    int64_t next_start_ms; /* monotonic: no start before (back-off) */
    struct event *start_ev;
    int settled;
    int removed;              /* gone from the config: its processes retire */
    int64_t gen_started_wall; /* wall ms: restart stamps older than this are done */
    int64_t stamp_applied;    /* the last restart stamp acted on */
    int64_t restarts[R_COUNT];
    char last_failure[256];
};

struct dtq_pools {
    struct event_base *base;
    dtq_spawner *spawner;
    dtq_pool *pools;
    int64_t error_max_bytes;
    int stopping;
    void (*settled_fn)(void *arg);
    void *settled_arg;
    int was_settled;
    void (*stopped_fn)(void *arg);
    void *stopped_arg;
    dtq_pool_progress_fn *progress_fn;
    void *progress_arg;
};

static void reconcile(dtq_pool *p);
static void reconcile_one(dtq_pool *p);
static void pump(dtq_pool *p);
static void proc_retire(proc *pr, int why);
static void arm_stop_kill(proc *pr);

/* ----------------------------------------------------------------- small pieces */

static char **split_types(const char *s, int *n) {
    char *copy = dtq_xstrdup(s ? s : ""), *save = NULL;
    char **v = NULL;
    *n = 0;
    for (char *t = strtok_r(copy, " \t,", &save); t; t = strtok_r(NULL, " \t,", &save)) {
        v = dtq_xrealloc(v, sizeof(char *) * (size_t)(*n + 1));
        v[(*n)++] = dtq_xstrdup(t);
    }
    free(copy);
    return v;
}

static void free_types(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int has_type(char *const *v, int n, const char *t) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i], t)) return 1;
    return 0;
}

static struct timeval ms_tv(int64_t ms) {
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

static void close_in(pipe_in *in) {
    if (in->ev) event_free(in->ev);
    in->ev = NULL;
    if (in->fd >= 0) close(in->fd);
    in->fd = -1;
}

/* "exited with status 3", "killed by signal 9 (Killed)" */
static void describe_status(int status, char *buf, size_t len) {
    if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
}

/* The process's resident set in MiB (/proc/PID/statm), -1 when unknown. */
static int64_t rss_mb(pid_t pid) {
    char path[64];
    long pages = -1, resident = -1;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    if (!(f = fopen(path, "r"))) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : (int64_t)resident * sysconf(_SC_PAGESIZE) / (1024 * 1024);
}

/* A JSON string of s (task ids, types and queue names are names; escaped anyway). */
static void put_json_str(struct evbuffer *b, const char *s) {
    evbuffer_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            evbuffer_add_printf(b, "\\%c", c);
        else if (c < 0x20)
            evbuffer_add_printf(b, "\\u%04x", c);
        else
            evbuffer_add(b, s, 1);
    }
    evbuffer_add(b, "\"", 1);
}

/* ----------------------------------------------------------------- tasks */

static void ptask_free(ptask *t) {
    if (t->grace_ev) event_free(t->grace_ev);
    free(t->id);
    free(t->type);
    free(t);
}

/* Hands the outcome to the executor; the task is done here. */
static void ptask_complete(ptask *t, int status, const char *result, size_t result_len,
                           const char *error) {
    dtq_handler_call *call = t->call;
    t->call = NULL;
    if (call) call->complete(call, status, result, result_len, error);
}

static void held_remove(proc *pr, ptask *t) {
    for (ptask **pp = &pr->held; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            pr->nheld--;
            return;
        }
}

static ptask *held_find(proc *pr, const char *id) {
    for (ptask *t = pr->held; t; t = t->next)
        if (!strcmp(t->id, id)) return t;
    return NULL;
}

/* Every task the process held fails as a retryable attempt of class handler_crashed. */
static void fail_held(proc *pr, const char *why) {
    char *msg =
        dtq_xasprintf("handler_crashed: pool %s pid %d %s", pr->pool->conf.name, (int)pr->pid, why);
    while (pr->held) {
        ptask *t = pr->held;
        pr->held = t->next;
        pr->nheld--;
        ptask_complete(t, DTQ_HANDLER_FAIL_CRASHED, NULL, 0, msg);
        ptask_free(t);
    }
    free(msg);
}

/* ----------------------------------------------------------------- the channel */

static void tasks_writable_cb(evutil_socket_t fd, short what, void *arg);

static void close_tasks_fd(proc *pr) {
    if (pr->tasks_ev) event_free(pr->tasks_ev);
    pr->tasks_ev = NULL;
    if (pr->tasks_fd >= 0) close(pr->tasks_fd);
    pr->tasks_fd = -1;
}

/* Writes what the pipe takes; the rest waits for it to drain. A stopping process's
 * descriptor is closed once everything sent before the stop is written. */
static void flush_tasks(proc *pr) {
    while (pr->tasks_fd >= 0 && evbuffer_get_length(pr->outq)) {
        int n = evbuffer_write(pr->outq, pr->tasks_fd);
        if (n > 0) continue;
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!pr->tasks_ev)
                pr->tasks_ev = event_new(pr->pool->ps->base, pr->tasks_fd, EV_WRITE | EV_PERSIST,
                                         tasks_writable_cb, pr);
            event_add(pr->tasks_ev, NULL);
            return;
        }
        /* EPIPE: the process closed its end; its exit (or EOF on 4) decides the rest */
        evbuffer_drain(pr->outq, evbuffer_get_length(pr->outq));
        close_tasks_fd(pr);
        return;
    }
    if (pr->tasks_ev) event_del(pr->tasks_ev);
    if (pr->state == P_STOPPING || pr->state == P_DEAD) close_tasks_fd(pr);
}

static void tasks_writable_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    flush_tasks(arg);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    pr->flush_scheduled = 0;
    flush_tasks(pr);
}

/* The lines queued in this pass of the loop go out in one write at its end: a fetch reply
 * hands over its tasks one by one, and a write per task was a system call and a wake-up
 * of the process per task. */
static void schedule_flush(proc *pr) {
    if (pr->flush_scheduled) return;
    pr->flush_scheduled = 1;
    event_active(pr->flush_ev, EV_TIMEOUT, 0);
}

/* ----------------------------------------------------------------- failures */

static void proc_kill(proc *pr) {
    if (pr->pid > 0) kill(-pr->pid, SIGKILL);
}

/* Counts a failure of the pool (a process that crashed, broke the protocol, did not start
 * or did not answer a cancel) and sets the back-off. */
static void pool_failure(dtq_pool *p, proc *pr, enum restart_reason why, const char *text) {
    int64_t now = dtq_monotonic_ms(), delay = 0;
    int starting = 0;
    /* One that worked (answered a task, or was ready a while) ends the run of failures:
     * a process killed from outside now and then is no crash loop; one that dies on every
     * task (a poison payload) before answering any still backs off. */
    if (pr && pr->ready_ms && (pr->done > 0 || now - pr->ready_ms >= HEALTHY_AFTER_MS))
        p->failures = 0;
    p->failures++;
    p->restarts[why]++;
    if (p->failures > 1) {
        delay = BACKOFF_FIRST_MS;
        for (int i = 2; i < p->failures && delay < BACKOFF_MAX_MS; i++) delay *= 2;
        if (delay > BACKOFF_MAX_MS) delay = BACKOFF_MAX_MS;
    }
    p->next_start_ms = now + delay;
    snprintf(p->last_failure, sizeof(p->last_failure), "%s", text);
    if (!p->ps->stopping && !p->removed)
        dtq_error("pool %s: %s; starting another in %lld ms (%d failure(s) in a row)", p->conf.name,
                  text, (long long)delay, p->failures);
    /* The start gate opens on a failure only when no other process of the pool may still
     * announce its types: else a sibling's hello, coming, would have found them unknown. */
    for (const proc *o = p->procs; o; o = o->next) starting += o != pr && o->state == P_STARTING;
    if (!starting) p->settled = 1;
}

/* A process that broke its contract (protocol error, no hello in time, no answer to a
 * cancel): its tasks fail as handler_crashed, its group is killed, it waits to be reaped. */
static void proc_fault(proc *pr, enum restart_reason why, const char *what) {
    char *text;
    if (pr->state == P_DEAD) return;
    text = dtq_xasprintf("process %d %s", (int)pr->pid, what);
    if (pr->state == P_STARTING && why != R_TIMEOUT) why = R_START_FAILED;
    pool_failure(pr->pool, pr, why, text);
    pr->state = P_DEAD;
    fail_held(pr, what);
    close_tasks_fd(pr);
    proc_kill(pr);
    free(text);
    reconcile(pr->pool);
}

/* ----------------------------------------------------------------- replies */

static void on_hello(proc *pr, const cJSON *msg) {
    dtq_pool *p = pr->pool;
    const cJSON *proto = cJSON_GetObjectItemCaseSensitive(msg, "protocol");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(msg, "types");
    const cJSON *inflight = cJSON_GetObjectItemCaseSensitive(msg, "inflight");
    const cJSON *t;
    char what[160];
    if (!cJSON_IsNumber(proto) || proto->valuedouble != DTQ_POOL_PROTOCOL) {
        snprintf(what, sizeof(what), "speaks protocol %s, not %d",
                 cJSON_IsNumber(proto) ? "another" : "(none given)", DTQ_POOL_PROTOCOL);
        proc_fault(pr, R_START_FAILED, what);
        return;
    }
    if (types && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) > HELLO_TYPES_MAX)) {
        proc_fault(pr, R_PROTOCOL_ERROR, "sent a hello whose types is not an array of names");
        return;
    }
    cJSON_ArrayForEach(t, types) {
        if (!cJSON_IsString(t) || !dtq_valid_queue_name(t->valuestring)) {
            proc_fault(pr, R_PROTOCOL_ERROR,
                       "sent a hello with a type that is not a task name ([A-Za-z0-9._:-]{1,128})");
            return;
        }
    }
    pr->slots = (int)p->conf.inflight;
    if (cJSON_IsNumber(inflight) && inflight->valuedouble >= 1 && inflight->valuedouble < pr->slots)
        pr->slots = (int)inflight->valuedouble;
    free_types(pr->types, pr->ntypes);
    pr->types = NULL;
    pr->ntypes = 0;
    cJSON_ArrayForEach(t, types) {
        if (has_type(pr->types, pr->ntypes, t->valuestring)) continue;
        pr->types = dtq_xrealloc(pr->types, sizeof(char *) * (size_t)(pr->ntypes + 1));
        pr->types[pr->ntypes++] = dtq_xstrdup(t->valuestring);
    }
    free_types(p->known, p->nknown);
    p->known = dtq_xcalloc((size_t)pr->ntypes + 1, sizeof(char *));
    for (int i = 0; i < pr->ntypes; i++) p->known[i] = dtq_xstrdup(pr->types[i]);
    p->nknown = pr->ntypes;
    if (pr->timer_ev) evtimer_del(pr->timer_ev);
    pr->state = P_READY;
    pr->ready_ms = dtq_monotonic_ms();
    p->settled = 1;
    dtq_info("pool %s: process %d ready (%d type(s), inflight %d)", p->conf.name, (int)pr->pid,
             pr->ntypes, pr->slots);
    reconcile(p);
}

/* After a task's answer: the process is replaced when it has done max_tasks or grew past
 * max_rss_mb. */
static void after_answer(proc *pr) {
    const dtq_pool_conf *c = &pr->pool->conf;
    pr->done++;
    if (pr->state != P_READY) return;
    if (c->max_tasks && pr->done >= c->max_tasks) {
        dtq_info("pool %s: process %d did %lld task(s) (max_tasks); replacing it", c->name,
                 (int)pr->pid, (long long)pr->done);
        proc_retire(pr, R_MAX_TASKS);
        return;
    }
    if (c->max_rss_mb) {
        int64_t mb = rss_mb(pr->pid);
        if (mb > c->max_rss_mb) {
            dtq_info("pool %s: process %d uses %lld MiB (max_rss_mb %lld); replacing it", c->name,
                     (int)pr->pid, (long long)mb, (long long)c->max_rss_mb);
            proc_retire(pr, R_MAX_RSS);
        }
    }
}

/* The error text kept: the head (its first line says what failed), cut at a character. */
static char *error_head(const char *s, int64_t max) {
    size_t n = strlen(s);
    if ((int64_t)n <= max) return dtq_xstrdup(s);
    n = (size_t)max;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    return dtq_xstrndup(s, n);
}

static void on_answer(proc *pr, const cJSON *msg, int ok) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    ptask *t;
    char what[200];
    if (!cJSON_IsString(id) || !(t = held_find(pr, id->valuestring))) {
        snprintf(what, sizeof(what), "answered a task it does not hold (%.64s)",
                 cJSON_IsString(id) ? id->valuestring : "no id");
        proc_fault(pr, R_PROTOCOL_ERROR, what);
        return;
    }
    held_remove(pr, t);
    if (ok) {
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(msg, "result");
        char *text = res ? cJSON_PrintUnformatted(res) : NULL;
        ptask_complete(t, DTQ_HANDLER_OK, text, text ? strlen(text) : 0, NULL);
        cJSON_free(text);
    } else {
        const cJSON *retry = cJSON_GetObjectItemCaseSensitive(msg, "retryable");
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(msg, "class");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
        char *text = error_head(cJSON_IsString(err) && *err->valuestring ? err->valuestring
                                                                         : "handler failed",
                                pr->pool->ps->error_max_bytes);
        int status = cJSON_IsTrue(retry) ? DTQ_HANDLER_RETRY : DTQ_HANDLER_FAIL;
        if (cJSON_IsString(cls) && !strcmp(cls->valuestring, "invalid_payload"))
            status = DTQ_HANDLER_FAIL_INVALID;
        ptask_complete(t, status, NULL, 0, text);
        free(text);
    }
    ptask_free(t);
    after_answer(pr);
    arm_stop_kill(pr);
    reconcile(pr->pool);
}

/* A progress report of a task the process holds (one it no longer holds, or a cancelled
 * one, is ignored: it may cross the answer or the cancel). */
static void on_progress(proc *pr, const cJSON *msg) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(msg, "fraction");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(msg, "message");
    dtq_pools *ps = pr->pool->ps;
    ptask *t;
    char text[201] = "";
    double fraction = -1;
    if (!cJSON_IsString(id) || !(t = held_find(pr, id->valuestring)) || !t->call) return;
    if (cJSON_IsNumber(f) && f->valuedouble >= 0 && f->valuedouble <= 1) fraction = f->valuedouble;
    if (cJSON_IsString(m)) {
        size_t n = strlen(m->valuestring);
        if (n > sizeof(text) - 1) n = sizeof(text) - 1;
        while (n > 0 && ((unsigned char)m->valuestring[n] & 0xc0) == 0x80) n--; /* a char */
        memcpy(text, m->valuestring, n);
        text[n] = '\0';
    }
    if (ps->progress_fn)
        ps->progress_fn(t->call, fraction, cJSON_IsString(m) ? text : NULL, ps->progress_arg);
}

/* One line from descriptor 4. */
static void on_reply_line(proc *pr, const char *line, size_t n) {
    cJSON *msg;
    const cJSON *t;
    if (!n) return; /* empty lines are allowed */
    msg = cJSON_ParseWithLength(line, n);
    if (!cJSON_IsObject(msg) || !cJSON_IsString(t = cJSON_GetObjectItemCaseSensitive(msg, "t"))) {
        cJSON_Delete(msg);
        proc_fault(pr, R_PROTOCOL_ERROR, "wrote a line that is not a JSON object with a \"t\"");
        return;
    }
    if (pr->state == P_STARTING && strcmp(t->valuestring, "hello"))
        proc_fault(pr, R_PROTOCOL_ERROR, "wrote before its hello");
    else if (!strcmp(t->valuestring, "hello")) {
        if (pr->state == P_STARTING)
            on_hello(pr, msg);
        else
            proc_fault(pr, R_PROTOCOL_ERROR, "sent a second hello");
    } else if (!strcmp(t->valuestring, "ok"))
        on_answer(pr, msg, 1);
    else if (!strcmp(t->valuestring, "fail"))
        on_answer(pr, msg, 0);
    else if (!strcmp(t->valuestring, "progress"))
        on_progress(pr, msg);
    /* others: a newer peer's, ignored */
    cJSON_Delete(msg);
}

/* Reads what descriptor 4 has; 0 at its end. */
static int read_replies(proc *pr) {
    pipe_in *in = &pr->replies;
    char buf[65536];
    for (;;) {
        /* read(2) rather than evbuffer_read, which asks FIONREAD first: a system call per
         * answer saved */
        ssize_t n = read(in->fd, buf, sizeof(buf));
        char *line;
        size_t len;
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
        if (n > 0) evbuffer_add(in->buf, buf, (size_t)n);
        while (pr->state != P_DEAD &&
               (line = evbuffer_readln(in->buf, &len, EVBUFFER_EOL_LF)) != NULL) {
            on_reply_line(pr, line, len);
            free(line);
        }
        if (pr->state == P_DEAD) return 0;
        if (evbuffer_get_length(in->buf) > DTQ_POOL_LINE_MAX) {
            proc_fault(pr, R_PROTOCOL_ERROR, "wrote a line longer than 16 MiB");
            return 0;
        }
        if (n <= 0) return 0; /* end of file or an error: a partial line is dropped */
        /* a short read emptied the pipe: the next readiness brings more, and an extra read
         * here would only answer EAGAIN */
        if ((size_t)n < sizeof(buf)) return 1;
    }
}

static void eof_kill_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    proc_kill(pr);
}

static void replies_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    struct timeval tv = ms_tv(EOF_EXIT_GRACE_MS);
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (read_replies(pr)) return;
    close_in(&pr->replies);
    /* Its exit says why (the reap decides); one that lingers without its channel is
     * stopped. A stopping one may take its kill grace, armed already. */
    if (pr->state != P_STOPPING && pr->state != P_DEAD) {
        evtimer_del(pr->timer_ev);
        event_assign(pr->timer_ev, pr->pool->ps->base, -1, 0, eof_kill_cb, pr);
        evtimer_add(pr->timer_ev, &tv);
    }
}

/* ----------------------------------------------------------------- output */

/* Logs one line of the program's stdout (info) or stderr (warning), attributed. */
/* The lines of the window that were not logged, said once; a new window starts. */
static void output_window_end(proc *pr, int64_t now) {
    if (pr->log_dropped)
        dtq_warn("pool %s[pid %d]: %d line(s) of output dropped (rate limit)", pr->pool->conf.name,
                 (int)pr->pid, pr->log_dropped);
    pr->log_window_ms = now;
    pr->log_lines = 0;
    pr->log_dropped = 0;
}

static void output_window_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    output_window_end(arg, dtq_monotonic_ms());
}

static void log_output(proc *pr, int is_err, const char *line, size_t n) {
    int64_t now = dtq_monotonic_ms();
    char task[160] = "";
    if (now - pr->log_window_ms >= OUTPUT_WINDOW_MS) output_window_end(pr, now);
    if (++pr->log_lines > OUTPUT_LINES) {
        /* the first dropped line sets the notice for the window's end, quiet or not */
        if (!pr->log_dropped++) {
            struct timeval tv = ms_tv(pr->log_window_ms + OUTPUT_WINDOW_MS - now);
            evtimer_add(pr->output_ev, &tv);
        }
        return;
    }
    if (pr->nheld == 1) snprintf(task, sizeof(task), " task %s", pr->held->id);
    dtq_log(is_err ? DTQ_LOG_WARN : DTQ_LOG_INFO, "pool %s[pid %d]%s: %.*s%s", pr->pool->conf.name,
            (int)pr->pid, task, (int)(n > OUTPUT_LINE_SHOWN ? OUTPUT_LINE_SHOWN : n), line,
            n > OUTPUT_LINE_SHOWN ? "..." : "");
}

/* Reads stdout or stderr and logs its lines; at the end (or after the exit, with
 * `final`), what is left without a newline is a line too. */
static void read_output(proc *pr, pipe_in *in, int final) {
    int is_err = in == &pr->err;
    for (;;) {
        int n = in->fd >= 0 ? evbuffer_read(in->buf, in->fd, 65536) : 0;
        char *line;
        size_t len;
        while ((line = evbuffer_readln(in->buf, &len, EVBUFFER_EOL_LF)) != NULL) {
            log_output(pr, is_err, line, len);
            free(line);
        }
        /* a line without end: logged in pieces rather than buffered without bound */
        if (evbuffer_get_length(in->buf) >= 65536 || (n <= 0 && !(n < 0 && errno == EAGAIN))) {
            size_t left = evbuffer_get_length(in->buf);
            if (left) {
                char *rest = dtq_xmalloc(left + 1);
                evbuffer_remove(in->buf, rest, left);
                log_output(pr, is_err, rest, left);
                free(rest);
            }
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!final) return;
            close_in(in);
            return;
        }
        if (n <= 0) {
            close_in(in);
            return;
        }
    }
}

/* ----------------------------------------------------------------- processes */

static void out_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    read_output(pr, &pr->out, 0);
}

static void err_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    read_output(pr, &pr->err, 0);
}

static void hello_timeout_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    char what_[96];
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (pr->state != P_STARTING) return;
    snprintf(what_, sizeof(what_), "sent no hello within %lld ms (start_timeout_ms)",
             (long long)pr->pool->conf.start_timeout_ms);
    proc_fault(pr, R_START_FAILED, what_);
}

static void stop_kill_cb(evutil_socket_t fd, short what, void *arg) {
    proc *pr = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    dtq_warn("pool %s: process %d did not exit within kill_grace_ms after its stop; killing it",
             pr->pool->conf.name, (int)pr->pid);
    proc_kill(pr);
}

static void set_nonblock(int fd) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
}

static void pipe_in_init(proc *pr, pipe_in *in, int fd, event_callback_fn cb) {
    in->fd = fd;
    in->buf = evbuffer_new();
    set_nonblock(fd);
    in->ev = event_new(pr->pool->ps->base, fd, EV_READ | EV_PERSIST, cb, pr);
    event_add(in->ev, NULL);
}

static void close_pipes(int (*p)[2], int n) {
    for (int i = 0; i < n; i++)
        for (int e = 0; e < 2; e++)
            if (p[i][e] >= 0) close(p[i][e]);
}

/* Starts one process of the pool's current generation; a failure to start it counts as
 * one (back-off) and returns -1. */
static int proc_start(dtq_pool *p) {
    int pp[4][2] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}}; /* tasks, replies, out, err */
    int devnull, rc = 0, nbase = 0;
    char **env;
    pid_t pid = -1;
    proc *pr;
    struct timeval tv = ms_tv(p->conf.start_timeout_ms);
    for (int i = 0; i < 4 && !rc; i++)
        if (pipe2(pp[i], O_CLOEXEC) != 0) rc = errno;
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 && !rc) rc = errno;
    if (!rc) {
        while (p->prog.base_env[nbase]) nbase++;
        env = dtq_xcalloc((size_t)nbase + 6, sizeof(char *));
        env[0] = dtq_xstrdup("DTQ_TASKS_FD=3");
        env[1] = dtq_xstrdup("DTQ_REPLIES_FD=4");
        env[2] = dtq_xasprintf("DTQ_PROTOCOL=%d", DTQ_POOL_PROTOCOL);
        env[3] = dtq_xasprintf("DTQ_POOL=%s", p->conf.name);
        env[4] = dtq_xasprintf("DTQ_INFLIGHT=%lld", (long long)p->conf.inflight);
        memcpy(env + 5, p->prog.base_env, sizeof(char *) * (size_t)(nbase + 1));
        rc = dtq_spawn(p->ps->spawner, p->prog.argv, env, p->prog.workdir,
                       (const int[5]){devnull, pp[2][1], pp[3][1], pp[0][0], pp[1][1]}, 5, &pid);
        for (int i = 0; i < 5; i++) free(env[i]);
        free(env);
    }
    if (devnull >= 0) close(devnull);
    if (rc) {
        char *text =
            dtq_xasprintf("cannot run %s%s%s: %s", p->prog.argv[0], p->prog.workdir ? " in " : "",
                          p->prog.workdir ? p->prog.workdir : "", strerror(rc));
        close_pipes(pp, 4);
        pool_failure(p, NULL, R_START_FAILED, text);
        free(text);
        return -1;
    }
    close(pp[0][0]);
    close(pp[1][1]);
    close(pp[2][1]);
    close(pp[3][1]);
    pr = dtq_xcalloc(1, sizeof(*pr));
    pr->pool = p;
    pr->pid = pid;
    pr->gen = p->gen;
    pr->state = P_STARTING;
    pr->tasks_fd = pp[0][1];
    set_nonblock(pr->tasks_fd);
    pr->outq = evbuffer_new();
    pipe_in_init(pr, &pr->replies, pp[1][0], replies_cb);
    pipe_in_init(pr, &pr->out, pp[2][0], out_cb);
    pipe_in_init(pr, &pr->err, pp[3][0], err_cb);
    pr->timer_ev = evtimer_new(p->ps->base, hello_timeout_cb, pr);
    pr->flush_ev = event_new(p->ps->base, -1, 0, flush_cb, pr);
    pr->output_ev = evtimer_new(p->ps->base, output_window_cb, pr);
    evtimer_add(pr->timer_ev, &tv);
    pr->log_window_ms = dtq_monotonic_ms();
    pr->next = p->procs;
    p->procs = pr;
    dtq_info("pool %s: started process %d: %s", p->conf.name, (int)pid, p->conf.command);
    return 0;
}

/* A stopping process gets kill_grace_ms to exit once it holds nothing (or, when the daemon
 * stops, from then on): what it still holds ends by its timeout otherwise. */
static void arm_stop_kill(proc *pr) {
    struct timeval tv = ms_tv(pr->pool->conf.kill_grace_ms);
    if (pr->state != P_STOPPING || pr->kill_armed || (pr->nheld && !pr->pool->ps->stopping)) return;
    pr->kill_armed = 1;
    evtimer_del(pr->timer_ev);
    event_assign(pr->timer_ev, pr->pool->ps->base, -1, 0, stop_kill_cb, pr);
    evtimer_add(pr->timer_ev, &tv);
}

/* No new tasks; EOF on descriptor 3 once what was sent is written. Callers reconcile. */
static void proc_retire(proc *pr, int why) {
    if (pr->state == P_STOPPING || pr->state == P_DEAD) return;
    if (why >= 0) pr->pool->restarts[why]++;
    pr->state = P_STOPPING;
    evtimer_del(pr->timer_ev);
    flush_tasks(pr);
    arm_stop_kill(pr);
}

static void proc_free(proc *pr) {
    dtq_pool *p = pr->pool;
    for (proc **pp = &p->procs; *pp; pp = &(*pp)->next)
        if (*pp == pr) {
            *pp = pr->next;
            break;
        }
    close_tasks_fd(pr);
    close_in(&pr->replies);
    close_in(&pr->out);
    close_in(&pr->err);
    if (pr->replies.buf) evbuffer_free(pr->replies.buf);
    if (pr->out.buf) evbuffer_free(pr->out.buf);
    if (pr->err.buf) evbuffer_free(pr->err.buf);
    if (pr->outq) evbuffer_free(pr->outq);
    if (pr->timer_ev) event_free(pr->timer_ev);
    if (pr->flush_ev) event_free(pr->flush_ev);
    if (pr->output_ev) event_free(pr->output_ev);
    free_types(pr->types, pr->ntypes);
    free(pr);
}

/* The process exited: what it still wrote is read, its tasks end, it is forgotten. */
static void proc_reaped(proc *pr, int status) {
    dtq_pool *p = pr->pool;
    char how[96], *what;
    pr->exited = 1;
    if (pr->replies.fd >= 0 && pr->state != P_DEAD) {
        read_replies(pr);
        close_in(&pr->replies);
    }
    read_output(pr, &pr->out, 1);
    read_output(pr, &pr->err, 1);
    output_window_end(pr, dtq_monotonic_ms()); /* what it printed last and was not logged */
    describe_status(status, how, sizeof(how));
    if (pr->state != P_DEAD && !(pr->state == P_STOPPING && !pr->nheld)) {
        enum restart_reason why = pr->state == P_STARTING ? R_START_FAILED : R_CRASHED;
        what = dtq_xasprintf("process %d %s%s", (int)pr->pid, how,
                             pr->state == P_STARTING ? " before its hello" : "");
        pool_failure(p, pr, why, what);
        free(what);
        fail_held(pr, how);
    } else {
        fail_held(pr, how); /* a stopped process that left tasks unanswered */
        dtq_info("pool %s: process %d %s", p->conf.name, (int)pr->pid, how);
    }
    proc_free(pr);
    reconcile(p);
}

/* ----------------------------------------------------------------- the pool */

static int proc_serves(const proc *pr, const char *type) {
    return has_type(pr->pool->ctypes, pr->pool->nctypes, type) ||
           has_type(pr->types, pr->ntypes, type);
}

/* The ready process with a free slot that serves type and holds the fewest tasks. */
/* The ready process with a free slot that serves t's type and holds the fewest tasks; never
 * one that still holds a task of t's id (an attempt cancelled and not yet answered, or a
 * task of another queue with the same id on a cluster): ids are unique among the tasks a
 * process holds (sdk/PROTOCOL.md). */
static proc *pick(dtq_pool *p, const ptask *t) {
    proc *best = NULL;
    for (proc *pr = p->procs; pr; pr = pr->next)
        if (pr->state == P_READY && !pr->exited && pr->nheld < pr->slots &&
            proc_serves(pr, t->type) && (!best || pr->nheld < best->nheld) && !held_find(pr, t->id))
            best = pr;
    return best;
}

/* Whether a task of type may wait: a live process serves it or one is starting. */
static int may_wait(const dtq_pool *p, const char *type) {
    for (const proc *pr = p->procs; pr; pr = pr->next)
        if (pr->state == P_STARTING || (pr->state == P_READY && proc_serves(pr, type))) return 1;
    return 0;
}

/* A JSON text as one value of a line: null when empty, and a pretty-printed one (a newline
 * in it) printed again on one line; the caller checked that it parses (dtq_pool_run). */
static void put_json_value(struct evbuffer *b, const char *text, size_t len) {
    if (!len) {
        evbuffer_add(b, "null", 4);
    } else if (memchr(text, '\n', len) || memchr(text, '\r', len)) {
        cJSON *j = cJSON_ParseWithLength(text, len);
        char *one = j ? cJSON_PrintUnformatted(j) : NULL;
        if (one)
            evbuffer_add(b, one, strlen(one));
        else
            evbuffer_add(b, "null", 4);
        cJSON_free(one);
        cJSON_Delete(j);
    } else {
        evbuffer_add(b, text, len);
    }
}

static void send_task(proc *pr, ptask *t) {
    dtq_handler_call *call = t->call;
    struct evbuffer *b = pr->outq;
    t->pr = pr;
    t->next = pr->held;
    pr->held = t;
    pr->nheld++;
    evbuffer_add_printf(b, "{\"t\":\"task\",\"id\":");
    put_json_str(b, t->id);
    evbuffer_add_printf(b, ",\"type\":");
    put_json_str(b, t->type);
    evbuffer_add_printf(b, ",\"queue\":");
    put_json_str(b, call->queue);
    evbuffer_add_printf(
        b, ",\"attempt\":%lld,\"max_attempts\":%lld,\"deadline_ms\":%lld,\"payload\":",
        (long long)call->attempt, (long long)call->max_attempts, (long long)t->deadline_ms);
    put_json_value(b, call->payload, call->payload_len);
    if (call->parent_results) {
        evbuffer_add_printf(b, ",\"parent_results\":");
        put_json_value(b, call->parent_results, call->parent_results_len);
    }
    evbuffer_add(b, "}\n", 2);
    schedule_flush(pr);
}

/* Defers a task the pool cannot run now: back to the schedule at the same attempt. */
static void defer_task(ptask *t) {
    char *msg =
        dtq_xasprintf("pool_unavailable: pool %s has no process running%s%s", t->pool->conf.name,
                      t->pool->last_failure[0] ? ": " : "", t->pool->last_failure);
    ptask_complete(t, DTQ_HANDLER_DEFER, NULL, 0, msg);
    free(msg);
    ptask_free(t);
}

/* Hands backlogged tasks to free slots, in order; those no process can take any more
 * are deferred. */
static void pump(dtq_pool *p) {
    ptask **pp = &p->backlog, *prev = NULL;
    while (*pp) {
        ptask *t = *pp;
        proc *pr = pick(p, t);
        if (!pr && may_wait(p, t->type) && !p->ps->stopping) {
            prev = t;
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        if (p->backlog_tail == t) p->backlog_tail = prev;
        p->nbacklog--;
        t->next = NULL;
        if (pr)
            send_task(pr, t);
        else
            defer_task(t);
    }
}

static void start_timer_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    reconcile(arg);
}

/* What the pools' owner waits for: the start gate, and the end of the stop. */
static void notify(dtq_pools *ps) {
    int settled = dtq_pools_settled(ps); /* a pool added by a reload unsettles them again */
    if (settled && !ps->was_settled && ps->settled_fn) {
        ps->was_settled = 1;
        ps->settled_fn(ps->settled_arg);
    }
    ps->was_settled = settled;
    if (ps->stopping && ps->stopped_fn) {
        for (const dtq_pool *p = ps->pools; p; p = p->next)
            if (p->procs) return;
        void (*fn)(void *) = ps->stopped_fn;
        ps->stopped_fn = NULL;
        fn(ps->stopped_arg);
    }
}

static void reconcile(dtq_pool *p) {
    dtq_pools *ps = p->ps;
    reconcile_one(p);
    notify(ps);
}

/* The one decision of which processes run: the wanted number of the current generation,
 * replacing older ones one at a time (a new one ready before an old one retires), after
 * the back-off of failures. Then the backlog moves. */
static void reconcile_one(dtq_pool *p) {
    int cur = 0, cur_starting = 0, cur_ready = 0, old = 0, wanted = (int)p->conf.processes;
    int64_t now = dtq_monotonic_ms();
    if (p->ps->stopping || p->removed) {
        for (proc *pr = p->procs; pr; pr = pr->next)
            if (pr->state == P_READY || pr->state == P_STARTING) proc_retire(pr, -1);
        pump(p);
        return;
    }
    for (proc *pr = p->procs; pr; pr = pr->next) {
        if (pr->state != P_STARTING && pr->state != P_READY) continue;
        if (pr->gen == p->gen) {
            cur++;
            cur_starting += pr->state == P_STARTING;
            cur_ready += pr->state == P_READY;
        } else {
            old++;
        }
    }
    /* an old process retires once a new one is ready to take its place */
    while (old > 0 && cur_ready > 0 && cur + old > wanted) {
        proc *victim = NULL;
        for (proc *pr = p->procs; pr; pr = pr->next)
            if (pr->gen != p->gen && (pr->state == P_READY || pr->state == P_STARTING) &&
                (!victim || pr->nheld < victim->nheld))
                victim = pr;
        if (!victim) break;
        proc_retire(victim, -1);
        old--;
    }
    if (cur > wanted) { /* fewer processes wanted: the least busy go */
        for (int extra = cur - wanted; extra > 0; extra--) {
            proc *victim = NULL;
            for (proc *pr = p->procs; pr; pr = pr->next)
                if (pr->gen == p->gen && (pr->state == P_READY || pr->state == P_STARTING) &&
                    (!victim || pr->nheld < victim->nheld))
                    victim = pr;
            if (!victim) break;
            proc_retire(victim, -1);
        }
    }
    /* start: during a roll one new process at a time, else every missing one */
    while (cur < wanted && (old == 0 || cur_starting == 0)) {
        if (now < p->next_start_ms) {
            struct timeval tv = ms_tv(p->next_start_ms - now);
            evtimer_del(p->start_ev);
            evtimer_add(p->start_ev, &tv);
            break;
        }
        if (proc_start(p) != 0) continue; /* counted: the back-off decides the next try */
        cur++;
        cur_starting++;
        if (old) break;
    }
    pump(p);
}

static void pool_free(dtq_pool *p) {
    while (p->backlog) {
        ptask *t = p->backlog;
        p->backlog = t->next;
        ptask_free(t);
    }
    while (p->procs) {
        proc *pr = p->procs;
        kill(-pr->pid, SIGKILL);
        waitpid(pr->pid, NULL, 0);
        while (pr->held) {
            ptask *t = pr->held;
            pr->held = t->next;
            ptask_free(t);
        }
        proc_free(pr);
    }
    if (p->start_ev) event_free(p->start_ev);
    free_types(p->ctypes, p->nctypes);
    free_types(p->known, p->nknown);
    dtq_program_deinit(&p->prog);
    free(p->conf.name);
    free(p->conf.command);
    free(p->conf.env);
    free(p->conf.workdir);
    free(p->conf.types);
    free(p);
}

static void conf_copy(dtq_pool_conf *dst, const dtq_pool_conf *src) {
    free(dst->name);
    free(dst->command);
    free(dst->env);
    free(dst->workdir);
    free(dst->types);
    *dst = *src;
    dst->name = dtq_xstrdup(src->name);
    dst->command = dtq_xstrdup(src->command);
    dst->env = src->env ? dtq_xstrdup(src->env) : NULL;
    dst->workdir = src->workdir ? dtq_xstrdup(src->workdir) : NULL;
    dst->types = src->types ? dtq_xstrdup(src->types) : NULL;
}

static const char *const fixed_env[] = {
    "DTQ_TASKS_FD=", "DTQ_REPLIES_FD=", "DTQ_PROTOCOL=", "DTQ_POOL=", "DTQ_INFLIGHT="};

static int program_of(const dtq_pool_conf *c, dtq_program *prog, char *err, size_t errlen) {
    char section[160];
    snprintf(section, sizeof(section), "pool:%s", c->name);
    return dtq_program_init(prog, section, "command", c->command, c->env, c->workdir, fixed_env,
                            (int)(sizeof(fixed_env) / sizeof(fixed_env[0])), err, errlen);
}

/* (Re)sets a pool from its section: a new generation when what runs changed. */
static void pool_apply(dtq_pool *p, const dtq_pool_conf *c, int fresh) {
    char err[512];
    dtq_program prog;
    int roll =
        !fresh && (strcmp(p->conf.command, c->command) ||
                   strcmp(p->conf.env ? p->conf.env : "", c->env ? c->env : "") ||
                   strcmp(p->conf.workdir ? p->conf.workdir : "", c->workdir ? c->workdir : "") ||
                   p->conf.inflight != c->inflight);
    if (program_of(c, &prog, err, sizeof(err)) != 0) {
        /* checked at load (dtq_pools_check); the program went away since */
        dtq_error("pool %s: %s", c->name, err);
        memset(&prog, 0, sizeof(prog));
        prog.argv = dtq_xcalloc(2, sizeof(char *));
        prog.argv[0] = dtq_xstrdup(c->command);
        prog.base_env = dtq_xcalloc(1, sizeof(char *));
    }
    dtq_program_deinit(&p->prog);
    p->prog = prog;
    conf_copy(&p->conf, c);
    free_types(p->ctypes, p->nctypes);
    p->ctypes = split_types(c->types, &p->nctypes);
    if (roll) {
        p->gen++;
        p->failures = 0;
        p->next_start_ms = 0;
        p->gen_started_wall = dtq_now_ms();
        for (proc *pr = p->procs; pr; pr = pr->next)
            if (pr->state == P_READY || pr->state == P_STARTING) p->restarts[R_RELOAD]++;
        dtq_info("pool %s: changed; replacing its processes one at a time", c->name);
    }
}

/* ----------------------------------------------------------------- the API */

dtq_pools *dtq_pools_new(struct event_base *base, dtq_spawner *spawner) {
    dtq_pools *ps = dtq_xcalloc(1, sizeof(*ps));
    ps->base = base;
    ps->spawner = spawner;
    ps->error_max_bytes = 4096;
    return ps;
}

void dtq_pools_free(dtq_pools *ps) {
    if (!ps) return;
    while (ps->pools) {
        dtq_pool *p = ps->pools;
        ps->pools = p->next;
        pool_free(p);
    }
    free(ps);
}

int dtq_pools_check(const dtq_config *cfg, char *err, size_t errlen) {
    for (int i = 0; i < cfg->npools; i++) {
        dtq_program prog;
        if (program_of(&cfg->pools[i], &prog, err, errlen) != 0) return -1;
        dtq_program_deinit(&prog);
    }
    return 0;
}

void dtq_pools_configure(dtq_pools *ps, const dtq_config *cfg) {
    dtq_pool **tail = &ps->pools;
    dtq_pool *old = ps->pools, *kept = NULL;
    ps->error_max_bytes = cfg->error_max_bytes;
    ps->pools = NULL;
    /* the config's order, which routing follows; removed pools after them until empty */
    for (int i = 0; i < cfg->npools; i++) {
        const dtq_pool_conf *c = &cfg->pools[i];
        dtq_pool *p = NULL, **pp;
        for (pp = &old; *pp; pp = &(*pp)->next)
            if (!strcmp((*pp)->conf.name, c->name)) {
                p = *pp;
                *pp = p->next;
                break;
            }
        if (!p) {
            p = dtq_xcalloc(1, sizeof(*p));
            p->ps = ps;
            p->start_ev = evtimer_new(ps->base, start_timer_cb, p);
            p->gen_started_wall = dtq_now_ms();
            pool_apply(p, c, 1);
        } else {
            p->removed = 0;
            pool_apply(p, c, 0);
        }
        p->next = NULL;
        *tail = p;
        tail = &p->next;
    }
    for (dtq_pool *p = old; p; p = kept) {
        kept = p->next;
        p->next = NULL;
        if (!p->removed)
            dtq_info("pool %s: removed from the config; retiring its processes", p->conf.name);
        p->removed = 1;
        *tail = p;
        tail = &p->next;
    }
    for (dtq_pool *p = ps->pools; p; p = p->next) reconcile(p);
}

int dtq_pools_settled(const dtq_pools *ps) {
    for (const dtq_pool *p = ps->pools; p; p = p->next)
        if (!p->removed && !p->settled) return 0;
    return 1;
}

void dtq_pools_on_progress(dtq_pools *ps, dtq_pool_progress_fn *fn, void *arg) {
    ps->progress_fn = fn;
    ps->progress_arg = arg;
}

void dtq_pools_on_settled(dtq_pools *ps, void (*fn)(void *arg), void *arg) {
    ps->settled_fn = fn;
    ps->settled_arg = arg;
}

dtq_pool *dtq_pools_route(dtq_pools *ps, const char *task_type) {
    for (dtq_pool *p = ps->pools; p; p = p->next) {
        if (p->removed) continue;
        if (has_type(p->ctypes, p->nctypes, task_type) || has_type(p->known, p->nknown, task_type))
            return p;
        for (proc *pr = p->procs; pr; pr = pr->next)
            if (pr->state != P_DEAD && has_type(pr->types, pr->ntypes, task_type)) return p;
    }
    return NULL;
}

static void pool_cancel_shutdown(dtq_handler_call *call) {
    dtq_pool_cancel(call, "shutdown");
}

void dtq_pool_run(dtq_pool *p, dtq_handler_call *call, int64_t deadline_ms) {
    ptask *t;
    proc *pr;
    if (call->payload_len > DTQ_POOL_LINE_MAX - 4096) { /* the task line would pass the limit */
        call->complete(call, DTQ_HANDLER_FAIL_INVALID, NULL, 0,
                       "invalid_payload: the payload is larger than a pool's 16 MiB line");
        return;
    }
    if (call->payload_len) {
        cJSON *j = cJSON_ParseWithLength(call->payload, call->payload_len);
        cJSON_Delete(j);
        if (!j) {
            call->complete(call, DTQ_HANDLER_FAIL_INVALID, NULL, 0,
                           "invalid_payload: the payload is not a JSON text");
            return;
        }
    }
    t = dtq_xcalloc(1, sizeof(*t));
    t->pool = p;
    t->call = call;
    t->id = dtq_xstrdup(call->task_id);
    t->type = dtq_xstrdup(call->task_type);
    t->deadline_ms = deadline_ms;
    call->handler_data = t;
    call->cancel = pool_cancel_shutdown;
    if ((pr = pick(p, t)) != NULL) {
        send_task(pr, t);
    } else if (may_wait(p, t->type) && !p->ps->stopping) {
        if (p->backlog_tail)
            p->backlog_tail->next = t;
        else
            p->backlog = t;
        p->backlog_tail = t;
        p->nbacklog++;
    } else {
        defer_task(t);
    }
}

static void grace_cb(evutil_socket_t fd, short what, void *arg) {
    ptask *t = arg;
    char what_[160];
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    snprintf(what_, sizeof(what_), "did not answer a cancelled task within %lld ms (kill_grace_ms)",
             (long long)t->pool->conf.kill_grace_ms);
    proc_fault(t->pr, R_TIMEOUT, what_);
}

void dtq_pool_cancel(dtq_handler_call *call, const char *reason) {
    ptask *t = call->handler_data;
    dtq_pool *p = t->pool;
    struct timeval tv;
    t->call = NULL;
    if (t->grace_ev) return; /* cancelled already */
    if (!t->pr) {            /* still in the backlog */
        ptask *prev = NULL;
        for (ptask **pp = &p->backlog; *pp; prev = *pp, pp = &(*pp)->next)
            if (*pp == t) {
                *pp = t->next;
                if (p->backlog_tail == t) p->backlog_tail = prev;
                p->nbacklog--;
                break;
            }
        ptask_free(t);
        return;
    }
    evbuffer_add_printf(t->pr->outq, "{\"t\":\"cancel\",\"id\":");
    put_json_str(t->pr->outq, t->id);
    evbuffer_add_printf(t->pr->outq, ",\"reason\":\"%s\"}\n", reason);
    schedule_flush(t->pr);
    tv = ms_tv(p->conf.kill_grace_ms);
    t->grace_ev = evtimer_new(p->ps->base, grace_cb, t);
    evtimer_add(t->grace_ev, &tv);
}

int dtq_pools_reaped(dtq_pools *ps, pid_t pid, int status) {
    for (dtq_pool *p = ps->pools; p; p = p->next)
        for (proc *pr = p->procs; pr; pr = pr->next)
            if (pr->pid == pid) {
                proc_reaped(pr, status);
                return 1;
            }
    return 0;
}

int dtq_pools_restart(dtq_pools *ps, const char *name) {
    for (dtq_pool *p = ps->pools; p; p = p->next) {
        if (p->removed || strcmp(p->conf.name, name)) continue;
        p->gen++;
        p->failures = 0;
        p->next_start_ms = 0;
        p->gen_started_wall = dtq_now_ms();
        for (proc *pr = p->procs; pr; pr = pr->next)
            if (pr->state == P_READY || pr->state == P_STARTING) p->restarts[R_RESTART]++;
        dtq_info("pool %s: restart requested; replacing its processes one at a time", name);
        reconcile(p);
        return 1;
    }
    return 0;
}

void dtq_pools_restart_stamp(dtq_pools *ps, const char *name, int64_t stamp_ms) {
    for (dtq_pool *p = ps->pools; p; p = p->next) {
        if (p->removed || strcmp(p->conf.name, name)) continue;
        if (stamp_ms > p->gen_started_wall && stamp_ms != p->stamp_applied) {
            p->stamp_applied = stamp_ms;
            dtq_pools_restart(ps, name);
        }
        return;
    }
}

void dtq_pools_each_name(const dtq_pools *ps, void (*fn)(const char *name, void *arg), void *arg) {
    for (const dtq_pool *p = ps->pools; p; p = p->next)
        if (!p->removed) fn(p->conf.name, arg);
}

void dtq_pools_stop(dtq_pools *ps, void (*done)(void *arg), void *arg) {
    int alive = 0;
    ps->stopping = 1;
    for (dtq_pool *p = ps->pools; p; p = p->next) {
        evtimer_del(p->start_ev);
        for (proc *pr = p->procs; pr; pr = pr->next) {
            alive++;
            arm_stop_kill(pr); /* retired before the stop: its grace starts now at the latest */
        }
        reconcile(p);
    }
    if (!alive) {
        done(arg);
        return;
    }
    ps->stopped_fn = done;
    ps->stopped_arg = arg;
}

void dtq_pools_render_metrics(const dtq_pools *ps, FILE *out) {
    if (!ps->pools) return;
    fprintf(out, "# HELP dtq_pool_processes Processes of a pool by state.\n"
                 "# TYPE dtq_pool_processes gauge\n");
    for (const dtq_pool *p = ps->pools; p; p = p->next) {
        int n[3] = {0, 0, 0};
        for (const proc *pr = p->procs; pr; pr = pr->next)
            if (pr->state != P_DEAD) n[pr->state]++;
        for (int s = 0; s < 3; s++)
            fprintf(out, "dtq_pool_processes{pool=\"%s\",state=\"%s\"} %d\n", p->conf.name,
                    state_names[s], n[s]);
    }
    fprintf(out, "# HELP dtq_pool_slots Tasks the ready processes of a pool may hold at once.\n"
                 "# TYPE dtq_pool_slots gauge\n");
    for (const dtq_pool *p = ps->pools; p; p = p->next) {
        int slots = 0;
        for (const proc *pr = p->procs; pr; pr = pr->next)
            if (pr->state == P_READY) slots += pr->slots;
        fprintf(out, "dtq_pool_slots{pool=\"%s\"} %d\n", p->conf.name, slots);
    }
    fprintf(out, "# HELP dtq_pool_busy_slots Tasks a pool's processes hold now.\n"
                 "# TYPE dtq_pool_busy_slots gauge\n");
    for (const dtq_pool *p = ps->pools; p; p = p->next) {
        int busy = 0;
        for (const proc *pr = p->procs; pr; pr = pr->next) busy += pr->nheld;
        fprintf(out, "dtq_pool_busy_slots{pool=\"%s\"} %d\n", p->conf.name, busy);
    }
    fprintf(out, "# HELP dtq_pool_backlog Tasks waiting for a free process of a pool.\n"
                 "# TYPE dtq_pool_backlog gauge\n");
    for (const dtq_pool *p = ps->pools; p; p = p->next)
        fprintf(out, "dtq_pool_backlog{pool=\"%s\"} %d\n", p->conf.name, p->nbacklog);
    fprintf(out, "# HELP dtq_pool_restarts_total Processes of a pool replaced, by reason.\n"
                 "# TYPE dtq_pool_restarts_total counter\n");
    for (const dtq_pool *p = ps->pools; p; p = p->next)
        for (int r = 0; r < R_COUNT; r++)
            fprintf(out, "dtq_pool_restarts_total{pool=\"%s\",reason=\"%s\"} %lld\n", p->conf.name,
                    reason_names[r], (long long)p->restarts[r]);
    fprintf(out, "# HELP dtq_pool_up 1 while a pool has a ready process, else 0.\n"
                 "# TYPE dtq_pool_up gauge\n");
    for (const dtq_pool *p = ps->pools; p; p = p->next) {
        int up = 0;
        for (const proc *pr = p->procs; pr; pr = pr->next) up |= pr->state == P_READY;
        fprintf(out, "dtq_pool_up{pool=\"%s\"} %d\n", p->conf.name, up);
    }
}

int dtq_pools_unready(const dtq_pools *ps, char *why, size_t len) {
    int n = 0;
    for (const dtq_pool *p = ps->pools; p; p = p->next) {
        int up = 0;
        if (p->removed || !p->settled) continue;
        for (const proc *pr = p->procs; pr; pr = pr->next) up |= pr->state == P_READY;
        if (up) continue;
        if (!n++)
            snprintf(why, len, "pool %s has no ready process (%s)", p->conf.name,
                     p->last_failure[0] ? p->last_failure : "starting");
    }
    return n;
}

void dtq_pools_summary(const dtq_pools *ps, char *buf, size_t len) {
    size_t off = 0;
    buf[0] = '\0';
    for (const dtq_pool *p = ps->pools; p && off < len; p = p->next) {
        int ready = 0;
        if (p->removed) continue;
        for (const proc *pr = p->procs; pr; pr = pr->next) ready += pr->state == P_READY;
        off += (size_t)snprintf(buf + off, len - off, "%s%s:%d/%lld", off ? " " : "", p->conf.name,
                                ready, (long long)p->conf.processes);
    }
}
