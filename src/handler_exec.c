/* handler_exec.c: one `job` per child. A job completes when all three have happened: the
 * child was reaped, stdout hit EOF, stderr hit EOF; whichever comes last finishes it. A
 * cancelled job stops reporting but lives on until its child is reaped, so every signal
 * death that is reported was sent by someone other than the daemon. */
#include "handler_exec.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "spawn.h"
#include "util.h"

/* The descriptor a program reports progress on, one line per report: a fraction in [0, 1]
 * or "-" for none, then optionally blanks and a message ("0.4 page 2 of 5"). A longer line
 * than PROGRESS_LINE_MAX is cut; a line that does not parse is ignored. */
#define PROGRESS_FD 3
#define PROGRESS_LINE_MAX 256

typedef struct job {
    struct job *next;
    dtq_exec *ex;
    dtq_handler_call *call; /* NULL once cancelled */
    pid_t pid;
    int in_fd, out_fd, err_fd, prog_fd;
    struct event *in_ev, *out_ev, *err_ev, *prog_ev, *kill_ev;
    char prog_line[PROGRESS_LINE_MAX + 1]; /* the progress line being read */
    size_t prog_len;
    int prog_cut; /* the line went past PROGRESS_LINE_MAX: the rest up to its end is dropped */
    const char *payload; /* borrowed from the call; unused after cancel */
    size_t payload_len, payload_off;
    char *out;
    size_t out_len, out_cap;
    size_t out_max;    /* result_max_bytes when the job started: never more is kept */
    int out_truncated; /* stdout went past out_max; the rest was read and dropped */
    char *err;
    size_t err_len;
    int reaped, status;
    int64_t kill_grace_ms;
    unsigned char retry_exit_codes[32]; /* the spec's: a reload may free it meanwhile */
} job;

struct dtq_exec {
    struct event_base *base;
    int64_t error_max_bytes;
    int64_t result_max_bytes;
    job *jobs;
    dtq_spawner *spawner; /* borrowed */
};

/* ----------------------------------------------------------------- spec */

/* The task variables child_env() puts first, by name; the last only for a task that
 * waited for others (their results). */
#define DTQ_EXEC_TASK_VARS 7
static const char *const task_vars[DTQ_EXEC_TASK_VARS] = {
    "DTQ_TASK_ID=",      "DTQ_TASK_TYPE=",      "DTQ_QUEUE=",      "DTQ_ATTEMPT=",
    "DTQ_MAX_ATTEMPTS=", "DTQ_PARENT_RESULTS=", "DTQ_PROGRESS_FD="};

dtq_exec_spec *dtq_exec_spec_new(const dtq_handler_conf *h, char *err, size_t errlen) {
    dtq_exec_spec *spec = dtq_xcalloc(1, sizeof(*spec));
    char section[160];
    snprintf(section, sizeof(section), "handler:%s", h->task_type);
    if (dtq_program_init(&spec->prog, section, "exec", h->target, h->env, h->workdir, task_vars,
                         DTQ_EXEC_TASK_VARS, err, errlen) != 0) {
        free(spec);
        return NULL;
    }
    spec->kill_grace_ms = h->kill_grace_ms;
    memcpy(spec->retry_exit_codes, h->retry_exit_codes, sizeof(spec->retry_exit_codes));
    spec->keep_stdout = h->result_mode != DTQ_RESULT_MODE_IGNORE;
    return spec;
}

void dtq_exec_spec_free(dtq_exec_spec *spec) {
    if (!spec) return;
    dtq_program_deinit(&spec->prog);
    free(spec);
}

/* ----------------------------------------------------------------- jobs */

static void close_ev(struct event **ev, int *fd) {
    if (*ev) {
        event_free(*ev);
        *ev = NULL;
    }
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void job_free(job *j) {
    dtq_exec *ex = j->ex;
    for (job **p = &ex->jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    close_ev(&j->in_ev, &j->in_fd);
    close_ev(&j->out_ev, &j->out_fd);
    close_ev(&j->err_ev, &j->err_fd);
    close_ev(&j->prog_ev, &j->prog_fd);
    if (j->kill_ev) event_free(j->kill_ev);
    free(j->out);
    free(j->err);
    free(j);
}

/* Reports the outcome once the child is reaped and both pipes are drained. */
static void job_maybe_done(job *j) {
    dtq_handler_call *call = j->call;
    char msg[128];
    if (!j->reaped || j->out_fd >= 0 || j->err_fd >= 0) return;
    if (!call) { /* cancelled earlier: nothing to report */
        job_free(j);
        return;
    }
    j->call = NULL;
    close_ev(&j->prog_ev, &j->prog_fd); /* a report after the end would be of nothing */
    if (WIFSIGNALED(j->status)) {
        /* Not our signal (a cancelled job reports nothing): a unit stop, the OOM killer or
         * an operator. The executor and outcome.c decide what that means. */
        snprintf(msg, sizeof(msg), "signal:%d", WTERMSIG(j->status));
        call->complete(call, DTQ_HANDLER_FAIL_SIGNAL, NULL, 0, msg);
    } else if (WEXITSTATUS(j->status) == 0) {
        call->complete(call, j->out_truncated ? DTQ_HANDLER_OK_TRUNCATED : DTQ_HANDLER_OK, j->out,
                       j->out_len, NULL);
    } else {
        int code = WEXITSTATUS(j->status);
        const char *text = j->err_len ? j->err : NULL;
        if (!text) {
            snprintf(msg, sizeof(msg), "exit %d", code);
            text = msg;
        }
        int retry = (j->retry_exit_codes[code / 8] >> (code % 8)) & 1u;
        call->complete(call, retry ? DTQ_HANDLER_RETRY : DTQ_HANDLER_FAIL, NULL, 0, text);
    }
    job_free(j);
}

/* Writes what the pipe takes of the payload; closes stdin once it is all written or the
 * program closed its end. Returns 0 when more must wait for the pipe to drain. */
static int feed_stdin(job *j) {
    while (j->payload_off < j->payload_len) {
        ssize_t n = write(j->in_fd, j->payload + j->payload_off, j->payload_len - j->payload_off);
        if (n > 0) {
            j->payload_off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
        break; /* EPIPE: the program does not read its stdin, which is its right */
    }
    close_ev(&j->in_ev, &j->in_fd);
    return 1;
}

static void stdin_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    feed_stdin(arg);
}

/* Reads once from stdout. Returns 1 after data, 0 once the pipe is closed (EOF or error),
 * -1 when nothing is available now. Never finishes the job itself. Keeps at most out_max
 * bytes: the rest would only be cut away when the result is stored, and a chatty program
 * must not make the daemon buffer its whole output. The pipe is still read to its end, so
 * the program never blocks on a full pipe. */
static int read_stdout(job *j) {
    char buf[65536];
    size_t keep;
    ssize_t n = read(j->out_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return -1;
    if (n <= 0) {
        close_ev(&j->out_ev, &j->out_fd);
        return 0;
    }
    keep = j->out_max - j->out_len;
    if ((size_t)n > keep)
        j->out_truncated = 1;
    else
        keep = (size_t)n;
    if (!keep) return 1;
    if (j->out_len + keep + 1 > j->out_cap) {
        j->out_cap = (j->out_len + keep + 1) * 2;
        if (j->out_cap > j->out_max + 1) j->out_cap = j->out_max + 1;
        j->out = dtq_xrealloc(j->out, j->out_cap);
    }
    memcpy(j->out + j->out_len, buf, keep);
    j->out_len += keep;
    j->out[j->out_len] = '\0';
    return 1;
}

/* Closes stderr; a message's trailing newline is not part of last_error. */
static void close_stderr(job *j) {
    while (j->err_len && (j->err[j->err_len - 1] == '\n' || j->err[j->err_len - 1] == '\r'))
        j->err[--j->err_len] = '\0';
    close_ev(&j->err_ev, &j->err_fd);
}

/* Like read_stdout, for stderr, keeping only its last error_max_bytes: the end of the
 * output says what finally went wrong. */
static int read_stderr(job *j) {
    size_t max = (size_t)j->ex->error_max_bytes;
    char buf[8192];
    ssize_t n = read(j->err_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return -1;
    if (n <= 0) {
        close_stderr(j);
        return 0;
    }
    j->err = dtq_xrealloc(j->err, j->err_len + (size_t)n + 1);
    memcpy(j->err + j->err_len, buf, (size_t)n);
    j->err_len += (size_t)n;
    if (j->err_len > max) {
        memmove(j->err, j->err + (j->err_len - max), max);
        j->err_len = max;
    }
    j->err[j->err_len] = '\0';
    return 1;
}

static void stdout_cb(evutil_socket_t fd, short what, void *arg) {
    job *j = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (read_stdout(j) == 0) job_maybe_done(j);
}

static void stderr_cb(evutil_socket_t fd, short what, void *arg) {
    job *j = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (read_stderr(j) == 0) job_maybe_done(j);
}

/* One progress line: "<fraction>|- [message]" to the call's progress, if the daemon gave one. */
static void progress_line(job *j) {
    char *line = j->prog_line, *end, *msg;
    double f = -1;
    j->prog_line[j->prog_len] = 0;
    while (*line == ' ' || *line == '\t') line++;
    if (!*line) return;
    if (*line == '-' && (line[1] == 0 || line[1] == ' ' || line[1] == '\t')) {
        end = line + 1;
    } else {
        errno = 0;
        f = strtod(line, &end);
        if (end == line || errno || !(f >= 0 && f <= 1) || (*end && *end != ' ' && *end != '\t'))
            return;
    }
    msg = end;
    while (*msg == ' ' || *msg == '\t') msg++;
    if (j->call && j->call->progress) j->call->progress(j->call, f, *msg ? msg : NULL);
}

/* Reads once from the progress pipe and reports each complete line. Returns 1 after data,
 * 0 once the pipe is closed (its end or an error: the program may close it early, the
 * attempt goes on), -1 when nothing is there now. */
static int read_progress(job *j) {
    char buf[4096];
    ssize_t n = read(j->prog_fd, buf, sizeof(buf));
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return -1;
        close_ev(&j->prog_ev, &j->prog_fd);
        return 0;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            if (!j->prog_cut) progress_line(j);
            j->prog_len = 0;
            j->prog_cut = 0;
        } else if (j->prog_len < PROGRESS_LINE_MAX) {
            j->prog_line[j->prog_len++] = buf[i] == '\r' ? ' ' : buf[i];
        } else if (!j->prog_cut) {
            progress_line(j); /* the first PROGRESS_LINE_MAX bytes */
            j->prog_cut = 1;
        }
    }
    return 1;
}

static void progress_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    read_progress(arg);
}

static void kill_cb(evutil_socket_t fd, short what, void *arg) {
    job *j = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!j->reaped) {
        dtq_warn("exec pid %d ignored SIGTERM for %lld ms; sending SIGKILL", (int)j->pid,
                 (long long)j->kill_grace_ms);
        kill(-j->pid, SIGKILL);
    }
}

static void job_cancel(dtq_handler_call *call) {
    job *j = call->handler_data;
    struct timeval tv = {j->kill_grace_ms / 1000, (j->kill_grace_ms % 1000) * 1000};
    j->call = NULL;
    j->payload = NULL;
    close_ev(&j->in_ev, &j->in_fd);
    if (!j->reaped) {
        kill(-j->pid, SIGTERM);
        j->kill_ev = evtimer_new(j->ex->base, kill_cb, j);
        evtimer_add(j->kill_ev, &tv);
    }
}

/* The child's environment: the task's DTQ_ variables, then the spec's base_env (which
 * names none of them). Returns how many of the first entries are the task's (to free). */
static char **child_env(const dtq_exec_spec *spec, const dtq_handler_call *call, int *own) {
    size_t n = 0;
    char **env;
    int k = 6;
    while (spec->prog.base_env[n]) n++;
    env = dtq_xcalloc(n + DTQ_EXEC_TASK_VARS + 1, sizeof(char *));
    env[0] = dtq_xasprintf("%s%s", task_vars[0], call->task_id);
    env[1] = dtq_xasprintf("%s%s", task_vars[1], call->task_type);
    env[2] = dtq_xasprintf("%s%s", task_vars[2], call->queue);
    env[3] = dtq_xasprintf("%s%lld", task_vars[3], call->attempt);
    env[4] = dtq_xasprintf("%s%lld", task_vars[4], call->max_attempts);
    env[5] = dtq_xasprintf("%s%d", task_vars[6], PROGRESS_FD);
    if (call->parent_results) /* at most 64 KiB (the Functions' bound): an argument's limit is 128
                               */
        env[k++] = dtq_xasprintf("%s%.*s", task_vars[5], (int)call->parent_results_len,
                                 call->parent_results);
    memcpy(env + k, spec->prog.base_env, (n + 1) * sizeof(char *));
    *own = k;
    return env;
}

/* Frees what child_env() allocated: its own variables, not the spec's. */
static void free_child_env(char **env, int own) {
    for (int i = 0; i < own; i++) free(env[i]);
    free(env);
}

static void close_pipe(int p[2]) {
    close(p[0]);
    close(p[1]);
}

/* The four pipes (stdin, stdout, stderr, progress), close-on-exec from birth: a plugin's
 * thread may fork and exec at any moment, and a program that inherited a write end would
 * hold back our EOF. On failure, the pipes already made are closed and msg says which one
 * failed. */
static int make_pipes(int p[4][2], char *msg, size_t msglen) {
    static const char *const names[4] = {"stdin", "stdout", "stderr", "progress"};
    for (int i = 0; i < 4; i++)
        if (pipe2(p[i], O_CLOEXEC) != 0) {
            snprintf(msg, msglen, "exec: cannot create the %s pipe: %s", names[i], strerror(errno));
            while (i-- > 0) close_pipe(p[i]);
            return -1;
        }
    return 0; /* an end below 3 (the daemon started with 0-2 closed) is dtq_spawn's care */
}

/* A fresh pipe end has no status flag set, so there is nothing to read back first. */
static void set_nonblock(int fd) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
}

void dtq_exec_start(dtq_exec *ex, const dtq_exec_spec *spec, dtq_handler_call *call) {
    int p[4][2]; /* stdin, stdout, stderr, progress: [0] read end, [1] write end */
    char **env, msg[320];
    job *j;
    pid_t pid;
    size_t written = 0;
    int rc, own;
    if (make_pipes(p, msg, sizeof(msg)) != 0) {
        call->complete(call, DTQ_HANDLER_RETRY, NULL, 0, msg);
        return;
    }
    /* A payload of at most PIPE_BUF bytes goes into the empty pipe before the child
     * exists: the write cannot block and is whole, and the child finds its stdin complete
     * and closed. The usual case, as payloads are far smaller than a pipe; a larger one
     * goes in through an event as the program reads (feed_stdin). */
    if (call->payload_len <= PIPE_BUF &&
        (call->payload_len == 0 ||
         write(p[0][1], call->payload, call->payload_len) == (ssize_t)call->payload_len)) {
        close(p[0][1]);
        p[0][1] = -1;
        written = call->payload_len;
    }
    env = child_env(spec, call, &own);
    rc = dtq_spawn(ex->spawner, spec->prog.argv, env, spec->prog.workdir,
                   (const int[4]){p[0][0], p[1][1], p[2][1], p[3][1]}, 4, &pid);
    free_child_env(env, own);
    close(p[0][0]);
    close(p[1][1]);
    close(p[2][1]);
    close(p[3][1]);
    if (rc != 0) {
        /* The program or its directory cannot be used: permanent, as an exit 127 was. A
         * lack of resources (EAGAIN, ENOMEM) is the machine's, so it is retried. */
        int transient = rc == EAGAIN || rc == ENOMEM;
        snprintf(msg, sizeof(msg), "exec: cannot run %s%s%s: %s", spec->prog.argv[0],
                 spec->prog.workdir ? " in " : "", spec->prog.workdir ? spec->prog.workdir : "",
                 strerror(rc));
        if (p[0][1] >= 0) close(p[0][1]);
        close(p[1][0]);
        close(p[2][0]);
        close(p[3][0]);
        call->complete(call, transient ? DTQ_HANDLER_RETRY : DTQ_HANDLER_FAIL, NULL, 0, msg);
        return;
    }
    j = dtq_xcalloc(1, sizeof(*j));
    j->ex = ex;
    j->call = call;
    j->pid = pid;
    j->in_fd = p[0][1];
    j->out_fd = p[1][0];
    j->err_fd = p[2][0];
    j->prog_fd = p[3][0];
    j->out_max = spec->keep_stdout ? (size_t)ex->result_max_bytes : 0;
    j->payload = call->payload;
    j->payload_len = call->payload_len;
    j->payload_off = written;
    j->kill_grace_ms = spec->kill_grace_ms;
    memcpy(j->retry_exit_codes, spec->retry_exit_codes, sizeof(j->retry_exit_codes));
    set_nonblock(j->out_fd);
    set_nonblock(j->err_fd);
    set_nonblock(j->prog_fd);
    /* A larger payload: what the pipe takes goes in at once, the rest as it drains. */
    if (j->in_fd >= 0) {
        set_nonblock(j->in_fd);
        if (!feed_stdin(j)) {
            j->in_ev = event_new(ex->base, j->in_fd, EV_WRITE | EV_PERSIST, stdin_cb, j);
            event_add(j->in_ev, NULL);
        }
    }
    j->out_ev = event_new(ex->base, j->out_fd, EV_READ | EV_PERSIST, stdout_cb, j);
    j->err_ev = event_new(ex->base, j->err_fd, EV_READ | EV_PERSIST, stderr_cb, j);
    j->prog_ev = event_new(ex->base, j->prog_fd, EV_READ | EV_PERSIST, progress_cb, j);
    event_add(j->out_ev, NULL);
    event_add(j->err_ev, NULL);
    event_add(j->prog_ev, NULL);
    j->next = ex->jobs;
    ex->jobs = j;
    call->handler_data = j;
    call->cancel = job_cancel;
}

/* After the child exits, whatever is already in the pipes is read and they are closed: a
 * grandchild that inherited them must not keep the attempt open. */
static void drain_pipes(job *j) {
    while (j->prog_fd >= 0) /* the last reports first; a grandchild's open end is not waited for */
        if (read_progress(j) < 0) close_ev(&j->prog_ev, &j->prog_fd);
    while (j->out_fd >= 0)
        if (read_stdout(j) < 0) close_ev(&j->out_ev, &j->out_fd);
    while (j->err_fd >= 0)
        if (read_stderr(j) < 0) {
            close_stderr(j);
        }
}

int dtq_exec_reaped(dtq_exec *ex, pid_t pid, int status) {
    for (job *j = ex->jobs; j; j = j->next) {
        if (j->pid != pid) continue;
        j->reaped = 1;
        j->status = status;
        if (j->kill_ev) evtimer_del(j->kill_ev);
        drain_pipes(j);
        job_maybe_done(j);
        return 1;
    }
    return 0;
}

dtq_exec *dtq_exec_new(struct event_base *base, dtq_spawner *spawner, int64_t error_max_bytes,
                       int64_t result_max_bytes) {
    dtq_exec *ex = dtq_xcalloc(1, sizeof(*ex));
    ex->base = base;
    ex->spawner = spawner;
    dtq_exec_set_limits(ex, error_max_bytes, result_max_bytes);
    return ex;
}

void dtq_exec_set_limits(dtq_exec *ex, int64_t error_max_bytes, int64_t result_max_bytes) {
    ex->error_max_bytes = error_max_bytes;
    ex->result_max_bytes = result_max_bytes;
}

int dtq_exec_children(const dtq_exec *ex) {
    int n = 0;
    for (const job *j = ex->jobs; j; j = j->next) n += !j->reaped;
    return n;
}

void dtq_exec_free(dtq_exec *ex) {
    if (!ex) return;
    while (ex->jobs) {
        job *j = ex->jobs;
        if (!j->reaped) {
            kill(-j->pid, SIGKILL);
            waitpid(j->pid, NULL, 0);
        }
        job_free(j);
    }
    free(ex);
}
