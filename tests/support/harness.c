/* harness.c: see harness.h. */
#include "harness.h"

#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "calls.h"
#include "scripts.h"
#include "streams.h"
#include "task.h"

#define MAX_CHILDREN 32

/* What the atexit hook stops and removes, each with the process that started it: a
 * Check test runs in a fork of the suite's process, and its exit must not take what the
 * suite's process started (an unchecked fixture's servers) with it. */
static pid_t children[MAX_CHILDREN];
static pid_t child_owner[MAX_CHILDREN];
static int nchildren;
static char cleanup_dirs[8][256];
static pid_t dir_owner[8];
static int ndirs;
static int hooked;

static void cleanup(void) {
    pid_t me = getpid();
    for (int i = 0; i < nchildren; i++)
        if (children[i] > 0 && child_owner[i] == me) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
        }
    for (int i = 0; i < ndirs; i++) {
        char cmd[1100];
        if (dir_owner[i] != me) continue;
        snprintf(cmd, sizeof(cmd), "rm -rf '%.255s'", cleanup_dirs[i]);
        if (system(cmd) != 0) { /* best effort */
        }
    }
    nchildren = ndirs = 0;
}

static void track(pid_t pid) {
    if (!hooked) {
        atexit(cleanup);
        hooked = 1;
    }
    for (int i = 0; i < nchildren; i++)
        if (children[i] <= 0) {
            children[i] = pid;
            child_owner[i] = getpid();
            return;
        }
    if (nchildren < MAX_CHILDREN) {
        child_owner[nchildren] = getpid();
        children[nchildren++] = pid;
    }
}

/* A temp dir removed at exit. */
static void track_dir(const char *dir) {
    if (!hooked) {
        atexit(cleanup);
        hooked = 1;
    }
    if (ndirs < 8) {
        dir_owner[ndirs] = getpid();
        snprintf(cleanup_dirs[ndirs++], sizeof(cleanup_dirs[0]), "%s", dir);
    }
}

static void untrack(pid_t pid) {
    for (int i = 0; i < nchildren; i++)
        if (children[i] == pid) children[i] = 0;
}

void th_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int64_t th_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

pid_t th_spawn_child(char *const argv[], const char *log_path) {
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        int fd = open("/dev/null", O_RDONLY);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd >= 0) {
            dup2(fd, 0);
            close(fd);
        }
        if (log_path) {
            fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(argv[0], argv);
        fprintf(stderr, "harness: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

pid_t th_spawn(char *const argv[], const char *log_path) {
    pid_t pid = th_spawn_child(argv, log_path);
    ck_assert_msg(pid >= 0, "fork failed");
    track(pid);
    return pid;
}

static char harness_password[128];

pid_t th_redis_launch(th_redis *r) {
    char log[400], port[16], extra[512];
    /* execvp takes char *const[]; the strings are never written. */
    const char *fixed[] = {r->bin ? r->bin : REDIS_SERVER_BIN,
                           "--port",
                           port,
                           "--bind",
                           "127.0.0.1",
                           "--unixsocket",
                           r->sock,
                           "--dir",
                           r->dir,
                           "--save",
                           "",
                           "--appendonly",
                           r->persist ? "yes" : "no",
                           "--appendfsync",
                           "always",
                           "--daemonize",
                           "no",
                           "--loglevel",
                           "warning"};
    char *argv[64];
    int argc = 0;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) argv[argc++] = (char *)fixed[i];
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(extra, sizeof(extra), "%s", r->extra);
    for (char *save = NULL, *tok = strtok_r(extra, " ", &save); tok && argc < 62;
         tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    argv[argc] = NULL;
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    r->pid = th_spawn_child(argv, log);
    return r->pid;
}

static void redis_spawn(th_redis *r) {
    char log[400];
    redisContext *c;
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    ck_assert_msg(th_redis_launch(r) > 0, "fork failed");
    track(r->pid);
    for (int i = 0, moves = 0; i < 200; i++) {
        /* A server that exited at once could not listen on its TCP port (another process
         * holds it, e.g. as the local port of a connection): try another one. */
        if (r->port > 0 && moves < 20 && waitpid(r->pid, NULL, WNOHANG) == r->pid) {
            untrack(r->pid);
            r->port = 30000 + (r->port - 30000 + 997) % 20000;
            snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
            ck_assert_msg(th_redis_launch(r) > 0, "fork failed");
            track(r->pid);
            moves++;
        }
        c = redisConnectUnix(r->sock);
        if (c && !c->err) {
            redisReply *rep;
            if (harness_password[0]) freeReplyObject(redisCommand(c, "AUTH %s", harness_password));
            rep = redisCommand(c, "PING");
            if (rep) {
                freeReplyObject(rep);
                redisFree(c);
                return;
            }
        }
        if (c) redisFree(c);
        th_sleep_ms(25);
    }
    ck_abort_msg("redis-server (%s) did not start; see %s", REDIS_SERVER_BIN, log);
}

void th_redis_start(th_redis *r, int persist) {
    memset(r, 0, sizeof(*r));
    if (access(REDIS_SERVER_BIN, X_OK) != 0)
        ck_abort_msg("redis-server not found at %s: run scripts/test, which installs it",
                     REDIS_SERVER_BIN);
    snprintf(r->dir, sizeof(r->dir), "/tmp/dtq-test-XXXXXX");
    ck_assert_msg(mkdtemp(r->dir) != NULL, "mkdtemp failed");
    track_dir(r->dir);
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->url, sizeof(r->url), "unix://%s", r->sock);
    r->persist = persist;
    redis_spawn(r);
}

void th_redis_start_tcp(th_redis *r, const char *extra, const char *password) {
    memset(r, 0, sizeof(*r));
    snprintf(harness_password, sizeof(harness_password), "%s", password ? password : "");
    snprintf(r->dir, sizeof(r->dir), "/tmp/dtq-test-XXXXXX");
    ck_assert_msg(mkdtemp(r->dir) != NULL, "mkdtemp failed");
    track_dir(r->dir);
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->extra, sizeof(r->extra), "%s", extra ? extra : "");
    /* a port from the pid spreads parallel test processes; redis fails fast if taken */
    r->port = 30000 + (int)(getpid() % 20000);
    snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
    redis_spawn(r);
}

void th_redis_start_port(th_redis *r, int port, const char *extra) {
    memset(r, 0, sizeof(*r));
    harness_password[0] = '\0';
    snprintf(r->dir, sizeof(r->dir), "/tmp/dtq-test-XXXXXX");
    ck_assert_msg(mkdtemp(r->dir) != NULL, "mkdtemp failed");
    track_dir(r->dir);
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->extra, sizeof(r->extra), "%s", extra ? extra : "");
    r->port = port;
    snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
    redis_spawn(r);
}

void th_stop_child(pid_t pid, int sig) {
    int64_t end = th_now_ms() + 10000;
    if (pid <= 0) return;
    kill(pid, sig);
    while (waitpid(pid, NULL, WNOHANG) == 0) {
        if (th_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            break;
        }
        th_sleep_ms(20);
    }
    untrack(pid);
}

void th_redis_stop(th_redis *r) {
    if (r->pid <= 0) return;
    kill(r->pid, SIGTERM);
    waitpid(r->pid, NULL, 0);
    untrack(r->pid);
    r->pid = 0;
}

void th_redis_restart(th_redis *r) {
    th_redis_stop(r);
    redis_spawn(r);
}

redisContext *th_connect(const th_redis *r) {
    redisContext *c = redisConnectUnix(r->sock);
    ck_assert_msg(c && !c->err, "cannot connect to test redis at %s", r->sock);
    if (harness_password[0]) {
        redisReply *rep = redisCommand(c, "AUTH %s", harness_password);
        ck_assert_msg(rep && rep->type != REDIS_REPLY_ERROR, "harness AUTH failed");
        freeReplyObject(rep);
    }
    return c;
}

redisReply *th_cmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    redisReply *r;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis command failed: %s", c->errstr);
    return r;
}

void th_expect_status(redisContext *c, const char *task_id, const char *status, int timeout_ms) {
    if (!th_wait_status(c, task_id, status, timeout_ms)) {
        char *s = th_task_field(c, task_id, "status"), *e = th_task_field(c, task_id, "last_error");
        ck_abort_msg("task %s: want status %s within %d ms, have %s (last_error %s)", task_id,
                     status, timeout_ms, s ? s : "(nil)", e ? e : "(nil)");
    }
}

void th_enqueue(redisContext *c, const char *queue, const char *id, const char *type,
                const char *payload, const char *opts) {
    char cmd[512];
    redisReply *r;
    snprintf(cmd, sizeof(cmd), "FCALL dtq_enqueue 0 %s %s %%s task_id %s %s", queue, type, id,
             opts ? opts : "");
    r = th_cmd(c, cmd, payload);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue %s: %s", id, r->str);
    freeReplyObject(r);
}

void th_expect_str(redisReply *r, const char *want) {
    ck_assert_msg(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS,
                  "want %s, got type %d %s", want, r->type, r->str ? r->str : "");
    ck_assert_str_eq(r->str, want);
    freeReplyObject(r);
}

void th_expect_refused(redisReply *r, const char *prefix) {
    ck_assert_msg(r->type == REDIS_REPLY_ERROR, "not refused (want %s): type %d %s", prefix,
                  r->type, r->str ? r->str : "");
    ck_assert_msg(!strncmp(r->str, prefix, strlen(prefix)), "%s, want %s", r->str, prefix);
    freeReplyObject(r);
}

void th_queue_groups(redisContext *c, const char *queue) {
    for (int b = 0; b < DTQ_BANDS; b++)
        freeReplyObject(th_cmd(c, "XGROUP CREATE dtq:stream:%s:p%d workers 0 MKSTREAM", queue, b));
}

const cJSON *th_overview_queue(const cJSON *ov, const char *name) {
    const cJSON *q;
    cJSON_ArrayForEach(q, cJSON_GetObjectItem(ov, "queues")) {
        if (!strcmp(cJSON_GetObjectItem(q, "name")->valuestring, name)) return q;
    }
    ck_abort_msg("queue %s is not in the overview", name);
    return NULL;
}

const char *th_entry_field(const redisReply *entry, const char *name) {
    const redisReply *f = entry->element[1];
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (!strcmp(f->element[i]->str, name)) return f->element[i + 1]->str;
    return NULL;
}

int th_events_subscribed(void *arg) {
    redisReply *r = th_cmd(arg, "PUBSUB NUMSUB dtq:events");
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer > 0;
    freeReplyObject(r);
    return ok;
}

int64_t th_redis_ms(redisContext *c) {
    redisReply *r = th_cmd(c, "TIME");
    int64_t ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

cJSON *th_read_json(redisContext *c, char **text, const char *fmt, ...) {
    char cmd[512];
    va_list ap;
    redisReply *r;
    cJSON *o;
    snprintf(cmd, sizeof(cmd), "FCALL_RO %s", fmt);
    va_start(ap, fmt);
    r = redisvCommand(c, cmd, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "%s: %s", cmd, c->errstr);
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "%s: type %d %s", cmd, r->type,
                  r->str ? r->str : "");
    o = cJSON_Parse(r->str);
    ck_assert_msg(o != NULL, "%s: not JSON: %s", cmd, r->str);
    if (text) *text = strdup(r->str);
    freeReplyObject(r);
    return o;
}

const cJSON *th_json_at(const cJSON *o, const char *path) {
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
        if (cJSON_IsArray(o))
            o = cJSON_GetArrayItem(o, atoi(k));
        else
            o = cJSON_GetObjectItemCaseSensitive(o, k);
    }
    ck_assert_msg(o != NULL, "no %s in the answer", path);
    return o;
}

double th_json_num(const cJSON *o, const char *path) {
    const cJSON *v = th_json_at(o, path);
    ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", path);
    return v->valuedouble;
}

long long th_json_int(const cJSON *o, const char *path) {
    return (long long)th_json_num(o, path);
}

const char *th_json_str(const cJSON *o, const char *path) {
    const cJSON *v = th_json_at(o, path);
    ck_assert_msg(cJSON_IsString(v), "%s is not a string", path);
    return v->valuestring;
}

int th_json_size(const cJSON *o, const char *path) {
    const cJSON *v = th_json_at(o, path);
    ck_assert_msg(cJSON_IsArray(v), "%s is not an array", path);
    return cJSON_GetArraySize(v);
}

void th_load_library(redisContext *c) {
    size_t len;
    char *lib = dtq_scripts_library("dtq", "dtq", &len);
    redisReply *r = th_cmd(c, "FUNCTION LOAD REPLACE %b", lib, len);
    ck_assert_msg(r->type != REDIS_REPLY_ERROR, "FUNCTION LOAD: %s", r->str);
    freeReplyObject(r);
    free(lib);
}

void th_fixture_start(th_redis *r, redisContext **c, int flags, const char *tcp_extra) {
    if (tcp_extra)
        th_redis_start_tcp(r, tcp_extra, NULL);
    else
        th_redis_start(r, flags & TH_PERSIST);
    *c = th_connect(r);
    if (flags & TH_LIBRARY) th_load_library(*c);
}

void th_fixture_stop(th_redis *r, redisContext **c) {
    if (*c) redisFree(*c);
    *c = NULL;
    th_redis_stop(r);
}

void th_path(const th_redis *r, const char *name, char *out, size_t outlen) {
    snprintf(out, outlen, "%s/%s", r->dir, name);
}

void th_daemon_start(th_daemon *d, const th_redis *r, const char *ini) {
    static int seq;
    FILE *f;
    char name[64];
    char *argv[] = {(char *)DTQ_WORKER_BIN, (char *)"-c", d->cfg, NULL};
    snprintf(name, sizeof(name), "worker%d.ini", seq);
    th_path(r, name, d->cfg, sizeof(d->cfg));
    snprintf(name, sizeof(name), "worker%d.log", seq++);
    th_path(r, name, d->log, sizeof(d->log));
    f = fopen(d->cfg, "w");
    ck_assert(f != NULL);
    fprintf(f, "[redis]\nurl = %s\n%s\n", r->url, ini);
    fclose(f);
    d->pid = th_spawn(argv, d->log);
}

void th_process_start(th_daemon *d, char *const argv[], const char *log) {
    snprintf(d->log, sizeof(d->log), "%s", log);
    d->cfg[0] = '\0';
    d->pid = th_spawn(argv, d->log);
}

void th_daemon_wait_ready(redisContext *c, const char *worker_id, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        redisReply *r = th_cmd(c, "HGET dtq:worker:%s status", worker_id);
        int ok = r->type == REDIS_REPLY_STRING && !strcmp(r->str, "running");
        freeReplyObject(r);
        if (ok) return;
        th_sleep_ms(20);
    }
    ck_abort_msg("worker %s did not become ready within %d ms", worker_id, timeout_ms);
}

/* A sanitizer report in a daemon's log fails the test even if the daemon exited 0. */
static void assert_log_clean(const th_daemon *d) {
    FILE *f = fopen(d->log, "r");
    char line[1024];
    if (!f) return;
    while (fgets(line, sizeof(line), f))
        ck_assert_msg(!strstr(line, "Sanitizer") && !strstr(line, "runtime error:"),
                      "sanitizer report in %s: %s", d->log, line);
    fclose(f);
}

int th_daemon_stop(th_daemon *d, int sig, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    int status;
    if (d->pid <= 0) return -1;
    kill(d->pid, sig);
    while (th_now_ms() < end) {
        pid_t p = waitpid(d->pid, &status, WNOHANG);
        if (p == d->pid) {
            untrack(d->pid);
            d->pid = 0;
            assert_log_clean(d);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        th_sleep_ms(20);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &status, 0);
    untrack(d->pid);
    d->pid = 0;
    return -1;
}

int th_run_worker(char **stderr_out, ...) {
    char path[] = "/tmp/dtq-test-stderr-XXXXXX";
    int fd = mkstemp(path), status, n = 1;
    char *args[32] = {(char *)"dtq-worker"};
    const char *a;
    pid_t pid;
    va_list ap;
    ck_assert(fd >= 0);
    va_start(ap, stderr_out);
    while ((a = va_arg(ap, const char *)) != NULL && n < 31) args[n++] = (char *)a;
    va_end(ap);
    args[n] = NULL;
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that times out takes the worker with it */
        dup2(fd, 2);
        dup2(fd, 1);
        execv(DTQ_WORKER_BIN, args);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    if (stderr_out) {
        off_t size = lseek(fd, 0, SEEK_END);
        *stderr_out = calloc(1, (size_t)size + 1);
        if (pread(fd, *stderr_out, (size_t)size, 0) < 0) (*stderr_out)[0] = '\0';
    }
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int th_ctl(const th_redis *r, char **out, const char *args) {
    char env[600];
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", r->url);
    return th_run_dtqctl(r, out, env, args);
}

int th_free_port(void) {
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, len), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

cJSON *th_metrics_parse(const th_redis *r, const char *body) {
    char in[512], out[512], cmd[1600], *json;
    FILE *f;
    cJSON *fams;
    th_path(r, "metrics.txt", in, sizeof(in));
    th_path(r, "metrics.json", out, sizeof(out));
    f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    fputs(body, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/support/prom_parse.py < %s > %s",
             DTQ_SOURCE_DIR, in, out);
    ck_assert_msg(system(cmd) == 0,
                  "prometheus_client cannot parse /metrics (is python3-prometheus-client "
                  "installed? scripts/test installs it): %s",
                  in);
    json = th_read_file(out);
    fams = cJSON_Parse(json);
    free(json);
    ck_assert_ptr_nonnull(fams);
    return fams;
}

double th_metrics_value(cJSON *fams, const char *name, const char *labels) {
    cJSON *f, *s;
    cJSON_ArrayForEach(f, fams) {
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(f, "samples")) {
            cJSON *l = cJSON_GetObjectItem(s, "labels"), *v = cJSON_GetObjectItem(s, "value");
            char want[512], *save = NULL, *tok;
            int n = 0, match = 1;
            if (strcmp(cJSON_GetObjectItem(s, "name")->valuestring, name)) continue;
            snprintf(want, sizeof(want), "%s", labels);
            for (tok = strtok_r(want, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(tok, '=');
                cJSON *have;
                *eq = '\0';
                have = cJSON_GetObjectItem(l, tok);
                if (!have || strcmp(have->valuestring, eq + 1)) match = 0;
                n++;
            }
            if (match && n == cJSON_GetArraySize(l))
                return cJSON_IsNumber(v) ? v->valuedouble : INFINITY;
        }
    }
    return NAN;
}

int th_run_dtqctl(const th_redis *r, char **out, const char *env, const char *args) {
    char cmd[4096], path[400];
    int status;
    th_path(r, "ctl.out", path, sizeof(path));
    snprintf(cmd, sizeof(cmd),
             "env -u DTQ_REDIS_URL -u DTQ_REDIS_NAMESPACE -u DTQ_REDIS_CLUSTER_HASH_TAG </dev/null "
             "%s %s %s >%s 2>&1", /* stdin: /dev/null unless args redirect it ("< file") */
             env, DTQCTL_BIN, args, path);
    status = system(cmd);
    *out = th_read_file(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int th_notify_socket(const th_redis *r, char *path, size_t pathlen, int timeout_s) {
    struct sockaddr_un sa;
    struct timeval tv = {timeout_s, 0};
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    th_path(r, "notify.sock", path, pathlen);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ck_assert_int_lt(strlen(path), sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

char *th_task_field(redisContext *c, const char *task_id, const char *field) {
    redisReply *r = th_cmd(c, "HGET dtq:task:%s %s", task_id, field);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

int th_wait_until(int (*pred)(void *arg), void *arg, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        if (pred(arg)) return 1;
        if (th_now_ms() >= end) return 0;
        th_sleep_ms(20);
    }
}

typedef struct cmd_poll {
    redisContext *c;
    const char *cmd, *want;
} cmd_poll;

static int cmd_matches(void *arg) {
    cmd_poll *p = arg;
    redisReply *r = redisCommand(p->c, p->cmd);
    int ok = 0;
    if (!r) return 0;
    if (!p->want)
        ok = r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        ok = !strcmp(r->str, p->want);
    else if (r->type == REDIS_REPLY_INTEGER)
        ok = r->integer == atoll(p->want) && *p->want;
    freeReplyObject(r);
    return ok;
}

int th_wait_until_cmd_str(redisContext *c, const char *cmd, const char *want, int timeout_ms) {
    cmd_poll p = {c, cmd, want};
    return th_wait_until(cmd_matches, &p, timeout_ms);
}

int th_count_in_file(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    char *buf;
    long n;
    int count = 0;
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
    fclose(f);
    for (const char *p = strstr(buf, needle); p; p = strstr(p + 1, needle)) count++;
    free(buf);
    return count;
}

typedef struct log_probe {
    const char *path, *needle;
    int count;
} log_probe;

static int log_has(void *arg) {
    const log_probe *p = arg;
    return th_count_in_file(p->path, p->needle) >= p->count;
}

int th_wait_log(const char *path, const char *needle, int count, int timeout_ms) {
    log_probe p = {path, needle, count};
    return th_wait_until(log_has, &p, timeout_ms);
}

int th_wait_status(redisContext *c, const char *task_id, const char *status, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        char *s = th_task_field(c, task_id, "status");
        int ok = s && !strcmp(s, status);
        free(s);
        if (ok) return 1;
        th_sleep_ms(20);
    }
    return 0;
}

long long th_int(redisReply *r) {
    long long v;
    ck_assert_msg(r->type == REDIS_REPLY_INTEGER, "not an integer reply (type %d: %s)", r->type,
                  r->type == REDIS_REPLY_ERROR ? r->str : "");
    v = r->integer;
    freeReplyObject(r);
    return v;
}

void th_assert_field(redisContext *c, const char *task_id, const char *field, const char *want) {
    char *v = th_task_field(c, task_id, field);
    ck_assert_msg(v && !strcmp(v, want), "task %s %s: want %s, got %s", task_id, field, want,
                  v ? v : "(nil)");
    free(v);
}

void th_assert_no_field(redisContext *c, const char *task_id, const char *field) {
    char *v = th_task_field(c, task_id, field);
    ck_assert_msg(v == NULL, "task %s: %s is '%s', want none", task_id, field, v ? v : "");
}

long long th_intf(redisContext *c, const char *fmt, ...) {
    va_list ap;
    redisReply *r;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "%s: %s", fmt, c->errstr);
    return th_int(r);
}

void th_enqueue_with_id(redisContext *c, const char *queue, const char *type, const char *id,
                        const char *opts) {
    char cmd[256];
    redisReply *r;
    snprintf(cmd, sizeof(cmd), "FCALL dtq_enqueue 0 %s %s {} task_id %s %s", queue, type, id,
             opts ? opts : "");
    r = th_cmd(c, cmd);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue %s: %s", id, r->str);
    freeReplyObject(r);
}

cJSON *th_limit_list(redisContext *c) {
    redisReply *r = th_cmd(c, "FCALL_RO dtq_limit_list 0");
    cJSON *o;
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "limit_list: %s", r->str ? r->str : "");
    o = cJSON_Parse(r->str);
    ck_assert_msg(cJSON_IsArray(o), "limit_list: not a JSON array: %s", r->str);
    freeReplyObject(r);
    return o;
}

int th_cron_fire_times(redisContext *c, const char *name, int64_t *out, int max) {
    redisReply *keys = th_cmd(c, "KEYS dtq:task:*");
    int n = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *f = th_cmd(c, "HMGET %s cron fire_time", keys->element[i]->str);
        if (f->element[0]->type == REDIS_REPLY_STRING && !strcmp(f->element[0]->str, name)) {
            ck_assert_int_lt(n, max);
            out[n++] = atoll(f->element[1]->str);
        }
        freeReplyObject(f);
    }
    freeReplyObject(keys);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

int th_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

char *th_read_file(const char *path) {
    FILE *f = fopen(path, "r");
    char *buf;
    long n;
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
    fclose(f);
    return buf;
}

/* Copies [b, e) into out without surrounding blanks. */
static void trimmed(const char *b, const char *e, char *out, size_t outlen) {
    while (b < e && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    snprintf(out, outlen, "%.*s", (int)(e - b), b);
}

static void lua_item(const char *b, const char *e, th_lua_item *it) {
    const char *eq = NULL;
    char quote = 0;
    for (const char *p = b; p < e; p++) {
        if (quote) {
            if (*p == '\\')
                p++;
            else if (*p == quote)
                quote = 0;
        } else if (*p == '\'' || *p == '"') {
            quote = *p;
        } else if (*p == '=') {
            eq = p;
            break;
        }
    }
    memset(it, 0, sizeof(*it));
    if (!eq) {
        trimmed(b, e, it->value, sizeof(it->value));
        return;
    }
    trimmed(b, eq, it->name, sizeof(it->name));
    trimmed(eq + 1, e, it->value, sizeof(it->value));
    if (it->name[0] == '[') { /* ['x'] or ["x"] */
        size_t n = strlen(it->name);
        ck_assert_msg(n >= 4 && it->name[n - 1] == ']', "bad Lua key %s", it->name);
        memmove(it->name, it->name + 2, n - 4);
        it->name[n - 4] = '\0';
    }
}

int th_lua_table(const char *table, th_lua_item *items, int max) {
    size_t len;
    char *src = dtq_scripts_library("dtq", "dtq", &len), want[128];
    const char *p = src, *open = NULL;
    char *body, *out, *item, quote = 0;
    int n = 0, depth = 0;
    /* a module's `local NAME = {` at the start of a line, or a field of the generated CONST
     * table (` NAME = {` on its one line, scripts.c) */
    snprintf(want, sizeof(want), "local %s", table);
    while (!open && (p = strstr(p, want)) != NULL) {
        const char *q = p + strlen(want);
        if (p == src || p[-1] == '\n') {
            while (*q == ' ') q++;
            if (*q++ == '=') {
                while (*q == ' ') q++;
                if (*q == '{') {
                    open = q;
                    break;
                }
            }
        }
        p += strlen(want);
    }
    snprintf(want, sizeof(want), " %s = {", table);
    if (!open && (p = strstr(src, "\nlocal CONST = {")) != NULL && (p = strstr(p, want)) != NULL &&
        p < strchr(strstr(src, "\nlocal CONST = {") + 1, '\n'))
        open = p + strlen(want) - 1;
    ck_assert_msg(open != NULL, "the library has no 'local %s = {'", table);
    /* the constructor's text up to its closing brace, without comments */
    body = out = calloc(1, strlen(open) + 1);
    for (p = open + 1;; p++) {
        ck_assert_msg(*p, "the library's table %s is not closed", table);
        if (quote) {
            if (*p == '\\')
                *out++ = *p++;
            else if (*p == quote)
                quote = 0;
        } else if (*p == '\'' || *p == '"') {
            quote = *p;
        } else if (p[0] == '-' && p[1] == '-') {
            while (p[1] && p[1] != '\n') p++;
            continue;
        } else if (*p == '{') {
            ck_assert_msg(depth++ == 0, "the library's table %s nests too deep", table);
        } else if (*p == '}') {
            if (depth == 0) break;
            depth--;
        }
        *out++ = *p;
    }
    *out++ = ',';
    *out = '\0';
    /* items end at commas outside quotes; a trailing comma leaves an empty one */
    quote = 0;
    item = body;
    for (char *c = body; *c; c++) {
        if (quote) {
            if (*c == '\\')
                c++;
            else if (*c == quote)
                quote = 0;
        } else if (*c == '\'' || *c == '"') {
            quote = *c;
        } else if (*c == '{' || *c == '}') {
            depth += *c == '{' ? 1 : -1;
        } else if (depth == 0 && (*c == ',' || *c == ';')) {
            const char *b = item;
            while (b < c && isspace((unsigned char)*b)) b++;
            if (b < c) {
                ck_assert_msg(n < max, "the library's table %s has more than %d items", table, max);
                lua_item(item, c, &items[n++]);
            }
            item = c + 1;
        }
    }
    free(body);
    free(src);
    return n;
}

void th_fetch_argv(dtq_argv *a, const char *worker, int count, const char *queue,
                   const char *policy) {
    dtq_streams st = {0};
    char *queues[1] = {(char *)queue};
    dtq_streams_build(&st, "dtq", queues, 1);
    dtq_call_fetch(a, "dtq_fetch", &st, worker, count, policy);
    dtq_streams_clear(&st);
}

static redisReply *new_reply(int type) {
    redisReply *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->type = type;
    return r;
}

static redisReply *str_reply(const char *s, size_t len) {
    redisReply *r = new_reply(REDIS_REPLY_STRING);
    r->str = malloc(len + 1);
    ck_assert_ptr_nonnull(r->str);
    memcpy(r->str, s, len);
    r->str[len] = '\0';
    r->len = len;
    return r;
}

static redisReply *int_reply(long long v) {
    redisReply *r = new_reply(REDIS_REPLY_INTEGER);
    r->integer = v;
    return r;
}

/* A task of the lean-claims or full-claims, appended to the claimed list as the claim array
 * of that task (what reap and recover answer for one: 10 elements, the last 1, for a lean
 * task; 9 for a full one). */
static void append_claim(dtq_task *t, void *arg) {
    redisReply *list = arg, *e = new_reply(REDIS_REPLY_ARRAY);
    e->elements = t->lean ? 10 : 9;
    e->element = calloc(e->elements, sizeof(*e->element));
    e->element[0] = str_reply(t->stream, strlen(t->stream));
    e->element[1] = str_reply(t->entry_id, strlen(t->entry_id));
    e->element[2] = str_reply(t->id, strlen(t->id));
    e->element[3] = str_reply(t->queue, strlen(t->queue));
    e->element[4] = str_reply(t->task_type, strlen(t->task_type));
    e->element[5] = str_reply(t->payload, t->payload_len);
    e->element[6] = int_reply(t->attempt);
    e->element[7] = int_reply(t->max_attempts);
    e->element[8] = int_reply(t->timeout_ms);
    if (t->lean) e->element[9] = int_reply(1);
    list->element = realloc(list->element, (list->elements + 1) * sizeof(*list->element));
    ck_assert_ptr_nonnull(list->element);
    list->element[list->elements++] = e;
    dtq_task_free(t);
}

/* The serving order of one queue's claims: band p9 first, then entry ids in order. */
static int claim_order(const void *a, const void *b) {
    const redisReply *x = *(redisReply *const *)a, *y = *(redisReply *const *)b;
    const char *sx = x->element[0]->str, *sy = y->element[0]->str;
    unsigned long long mx, my, nx = 0, ny = 0;
    char bx = sx[strlen(sx) - 1], by = sy[strlen(sy) - 1];
    if (bx != by) return bx > by ? -1 : 1;
    mx = strtoull(x->element[1]->str, NULL, 10);
    my = strtoull(y->element[1]->str, NULL, 10);
    if (strchr(x->element[1]->str, '-'))
        nx = strtoull(strchr(x->element[1]->str, '-') + 1, NULL, 10);
    if (strchr(y->element[1]->str, '-'))
        ny = strtoull(strchr(y->element[1]->str, '-') + 1, NULL, 10);
    if (mx != my) return mx < my ? -1 : 1;
    return nx < ny ? -1 : nx > ny;
}

void th_fetch_claims(redisReply *r) {
    char err[128];
    ck_assert_msg(dtq_fetch_reply_ok(r) && r->elements == 5, "fetch: not the fetch reply's shape");
    ck_assert_msg(
        dtq_lean_claims_decode(r->element[3], append_claim, r->element[0], err, sizeof(err)) >= 0,
        "fetch: %s", err);
    ck_assert_msg(
        dtq_full_claims_decode(r->element[4], append_claim, r->element[0], err, sizeof(err)) >= 0,
        "fetch: %s", err);
    if (r->element[0]->elements > 1)
        qsort(r->element[0]->element, r->element[0]->elements, sizeof(redisReply *), claim_order);
}

redisReply *th_fetch(redisContext *c, const char *worker, int count, const char *queue,
                     const char *policy) {
    dtq_argv a;
    redisReply *r;
    th_fetch_argv(&a, worker, count, queue, policy);
    r = redisCommandArgv(c, a.argc, (const char **)a.argv, a.lens);
    dtq_argv_deinit(&a);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "fetch: %s", r->str);
    th_fetch_claims(r);
    return r;
}

redisReply *th_sched_claim(redisContext *c, int batch, long long claim_timeout_ms, size_t *nids) {
    dtq_sched_claim_reply cr;
    redisReply *r, *z;
    long long scheduled = th_int(th_cmd(c, "ZCARD dtq:retry:schedule"));
    long long claimed = th_int(th_cmd(c, "ZCARD dtq:retry:claimed"));
    int64_t before = th_redis_ms(c), after;
    r = th_cmd(c, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed %d %lld", batch,
               claim_timeout_ms);
    after = th_redis_ms(c);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "sched_claim: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
    ck_assert_msg(dtq_sched_claim_reply_parse(r, &cr), "sched_claim: not its reply's shape");
    for (size_t i = 0; i < cr.nids; i++) ck_assert_int_eq(r->element[i]->type, REDIS_REPLY_STRING);
    ck_assert_int_eq(r->element[cr.nids]->type, REDIS_REPLY_INTEGER);
    ck_assert_int_eq(r->element[cr.nids]->integer, scheduled);
    ck_assert_int_eq(r->element[cr.nids + 1]->integer, claimed);
    z = th_cmd(c, "ZRANGE dtq:retry:schedule 0 0 WITHSCORES");
    ck_assert_int_eq(z->type, REDIS_REPLY_ARRAY);
    if (z->elements == 0) {
        ck_assert_int_eq(r->element[cr.nids + 2]->type, REDIS_REPLY_NIL);
    } else {
        ck_assert_int_eq(r->element[cr.nids + 2]->type, REDIS_REPLY_INTEGER);
        ck_assert_int_eq(r->element[cr.nids + 2]->integer,
                         (long long)strtod(z->element[1]->str, NULL));
    }
    freeReplyObject(z);
    ck_assert_int_ge(r->element[cr.nids + 3]->integer, before);
    ck_assert_int_le(r->element[cr.nids + 3]->integer, after);
    if (nids) *nids = cr.nids;
    return r;
}

dtq_finish_record th_finish_record(const redisReply *claimed) {
    dtq_finish_record rec = {0};
    rec.task_id = claimed->element[2]->str;
    rec.attempt = claimed->element[6]->integer;
    rec.stream = claimed->element[0]->str;
    rec.entry_id = claimed->element[1]->str;
    rec.outcome = DTQ_OUTCOME_SUCCEEDED;
    rec.result_state = DTQ_RESULT_NONE;
    rec.result = (char *)"";
    rec.error = (char *)"";
    rec.error_class = "";
    return rec;
}

redisReply *th_finish(redisContext *c, const char *worker, const dtq_finish_record *recs,
                      size_t n) {
    dtq_argv a;
    redisReply *r;
    dtq_call_finish(&a, "dtq_finish", worker, (int)n);
    for (size_t i = 0; i < n; i++) dtq_finish_record_encode(&a, &recs[i]);
    ck_assert_int_eq(a.argc, 5 + (int)n * DTQ_FINISH_RECORD_FIELDS);
    r = redisCommandArgv(c, a.argc, (const char **)a.argv, a.lens);
    dtq_argv_deinit(&a);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "finish: %s", r->str);
    return r;
}

/* ----------------------------------------------------------------- a local cluster */

#ifndef REDIS_CLI_BIN
#define REDIS_CLI_BIN "redis-cli"
#endif

/* 1 when nothing listens on 127.0.0.1:port (a bind succeeds). */
static int port_free(int port) {
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
    if (fd < 0) return 0;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* The next port from *next (in 20000-29999, wrapping) that is free with its bus port. */
static int cluster_port(int *next) {
    for (int tries = 0; tries < 10000; tries++) {
        int p = *next;
        *next = p >= 29999 ? 20000 : p + 1;
        if (port_free(p) && port_free(p + 10000)) return p;
    }
    ck_abort_msg("no free port pair for a cluster node in 20000-29999");
    return 0;
}

/* Launches node i on a free port; 1 once it answers PING on its socket, 0 when it exited
 * at once (its port was taken in between). */
static int cluster_node_up(th_cluster *cl, int i, int *next) {
    th_redis *r = &cl->node[i];
    char dir[sizeof(r->dir)]; /* a copy: source and destination in one object upset -Wrestrict */
    r->port = cluster_port(next);
    snprintf(dir, sizeof(dir), "%.200s/node-%d", cl->dir, r->port);
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    ck_assert_msg(mkdir(r->dir, 0700) == 0, "mkdir %s failed", r->dir);
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", dir);
    snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
    snprintf(r->extra, sizeof(r->extra),
             "--cluster-enabled yes --cluster-config-file nodes-%d.conf --cluster-node-timeout "
             "2000 --cluster-require-full-coverage no --repl-diskless-sync-delay 0 "
             "--repl-ping-replica-period 1",
             r->port);
    ck_assert_msg(th_redis_launch(r) > 0, "fork failed");
    track(r->pid);
    for (int k = 0; k < 200; k++) {
        redisContext *c;
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
            untrack(r->pid);
            r->pid = 0;
            return 0;
        }
        c = redisConnectUnix(r->sock);
        if (c && !c->err) {
            redisReply *rep = redisCommand(c, "PING");
            redisFree(c);
            if (rep) {
                freeReplyObject(rep);
                return 1;
            }
        } else if (c) {
            redisFree(c);
        }
        th_sleep_ms(10);
    }
    ck_abort_msg("cluster node on port %d did not start; see %s/redis.log", r->port, r->dir);
    return 0;
}

redisContext *th_cluster_connect(const th_cluster *cl, int i) {
    redisContext *c = redisConnectUnix(cl->node[i].sock);
    ck_assert_msg(c && !c->err, "cannot connect to cluster node %d at %s", i, cl->node[i].sock);
    return c;
}

int th_cluster_node_index(const th_cluster *cl, int port) {
    for (int i = 0; i < cl->n; i++)
        if (cl->node[i].port == port) return i;
    return -1;
}

dtq_cluster_map *th_cluster_map(const th_cluster *cl, int i) {
    redisContext *c = th_cluster_connect(cl, i);
    redisReply *r = th_cmd(c, "CLUSTER SLOTS");
    char why[256];
    dtq_cluster_map *m = dtq_cluster_map_from_slots(r, "127.0.0.1", why, sizeof(why));
    ck_assert_msg(m != NULL, "map: %s", why);
    freeReplyObject(r);
    redisFree(c);
    return m;
}

int th_cluster_owner_port(const th_cluster *cl, const char *key) {
    for (int i = 0; i < cl->n; i++) {
        dtq_cluster_map *m;
        int port;
        if (cl->node[i].pid <= 0 || kill(cl->node[i].pid, 0) != 0) continue;
        m = th_cluster_map(cl, i);
        port = dtq_cluster_map_primary(m, dtq_cluster_keyslot(key, strlen(key)))->port;
        dtq_cluster_map_free(m);
        return port;
    }
    ck_abort_msg("no live node");
    return 0;
}

char *th_cluster_node_id(const th_cluster *cl, int port) {
    redisContext *c = th_cluster_connect(cl, th_cluster_node_index(cl, port));
    redisReply *r = th_cmd(c, "CLUSTER MYID");
    char *id;
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    id = strdup(r->str);
    freeReplyObject(r);
    redisFree(c);
    return id;
}

void th_cluster_node_ok(const th_cluster *cl, int port, const char *fmt, ...) {
    redisContext *c = th_cluster_connect(cl, th_cluster_node_index(cl, port));
    redisReply *r;
    va_list ap;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s on %d: %s", fmt, port,
                  r ? r->str : c->errstr);
    freeReplyObject(r);
    redisFree(c);
}

int th_cluster_other_primary(const th_cluster *cl, int port) {
    dtq_cluster_map *m = th_cluster_map(cl, th_cluster_node_index(cl, port));
    int other = 0;
    for (int k = 0; k < m->nprimaries; k++)
        if (m->nodes[m->primaries[k]].port != port) other = m->nodes[m->primaries[k]].port;
    dtq_cluster_map_free(m);
    ck_assert_int_ne(other, 0);
    return other;
}

void th_cluster_migrate_start(const th_cluster *cl, const char *key, int src, int dst) {
    int slot = dtq_cluster_keyslot(key, strlen(key));
    char *sid = th_cluster_node_id(cl, src), *did = th_cluster_node_id(cl, dst), dport[16];
    snprintf(dport, sizeof(dport), "%d", dst);
    th_cluster_node_ok(cl, dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, sid);
    th_cluster_node_ok(cl, src, "CLUSTER SETSLOT %d MIGRATING %s", slot, did);
    th_cluster_node_ok(cl, src, "MIGRATE 127.0.0.1 %s %s 0 5000", dport, key);
    free(sid);
    free(did);
}

void th_cluster_migrate_finish(const th_cluster *cl, const char *key, int src, int dst) {
    int slot = dtq_cluster_keyslot(key, strlen(key)), third = 0;
    char *did = th_cluster_node_id(cl, dst);
    dtq_cluster_map *m = th_cluster_map(cl, th_cluster_node_index(cl, dst));
    for (int k = 0; k < m->nprimaries; k++) {
        int p = m->nodes[m->primaries[k]].port;
        if (p != src && p != dst) third = p;
    }
    dtq_cluster_map_free(m);
    th_cluster_node_ok(cl, dst, "CLUSTER SETSLOT %d NODE %s", slot, did);
    th_cluster_node_ok(cl, src, "CLUSTER SETSLOT %d NODE %s", slot, did);
    if (third) th_cluster_node_ok(cl, third, "CLUSTER SETSLOT %d NODE %s", slot, did);
    free(did);
}

typedef struct cluster_ready {
    th_cluster *cl;
    int primaries, replicas;
    char why[512];
} cluster_ready;

/* One node's CLUSTER SLOTS as "start-end:port ..." sorted by start, or "" on an error; the
 * distinct primaries and the fewest replicas a range has. */
static void slots_signature(redisContext *c, char *out, size_t len, int *nprimaries,
                            int *min_replicas) {
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    int ports[TH_CLUSTER_MAX], np = 0;
    long long starts[64];
    char parts[64][48];
    int n = 0;
    out[0] = '\0';
    *nprimaries = 0;
    *min_replicas = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return;
    }
    for (size_t i = 0; i < r->elements && n < 64; i++) {
        const redisReply *e = r->element[i];
        int port = (int)e->element[2]->element[1]->integer, seen = 0;
        if (i == 0 || (int)e->elements - 3 < *min_replicas) *min_replicas = (int)e->elements - 3;
        starts[n] = e->element[0]->integer;
        snprintf(parts[n++], sizeof(parts[0]), "%lld-%lld:%d ", e->element[0]->integer,
                 e->element[1]->integer, port);
        for (int k = 0; k < np; k++) seen |= ports[k] == port;
        if (!seen && np < TH_CLUSTER_MAX) ports[np++] = port;
    }
    freeReplyObject(r);
    for (int i = 0; i < n; i++) /* a selection sort of a handful of ranges */
        for (int j = i + 1; j < n; j++)
            if (starts[j] < starts[i]) {
                long long t = starts[i];
                char tp[48];
                starts[i] = starts[j];
                starts[j] = t;
                memcpy(tp, parts[i], sizeof(tp));
                memcpy(parts[i], parts[j], sizeof(tp));
                memcpy(parts[j], tp, sizeof(tp));
            }
    for (int i = 0, off = 0; i < n && (size_t)off < len; i++)
        off += snprintf(out + off, len - (size_t)off, "%s", parts[i]);
    *nprimaries = np;
}

static int cluster_is_ready(void *arg) {
    cluster_ready *cr = arg;
    th_cluster *cl = cr->cl;
    char first[2048] = "", sig[2048];
    for (int i = 0; i < cl->n; i++) {
        redisContext *c = redisConnectUnix(cl->node[i].sock);
        redisReply *r;
        int np, nr, ok;
        if (!c || c->err) {
            snprintf(cr->why, sizeof(cr->why), "node %d: cannot connect", cl->node[i].port);
            if (c) redisFree(c);
            return 0;
        }
        r = redisCommand(c, "CLUSTER INFO");
        ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        if (r) freeReplyObject(r);
        if (!ok) {
            snprintf(cr->why, sizeof(cr->why), "node %d: cluster_state not ok", cl->node[i].port);
            redisFree(c);
            return 0;
        }
        r = redisCommand(c, "CLUSTER NODES");
        ok = r && r->type == REDIS_REPLY_STRING && !strstr(r->str, "fail") &&
             !strstr(r->str, "handshake") && !strstr(r->str, "noaddr");
        if (ok) {
            int lines = 0;
            for (const char *p = r->str; *p; p++) lines += *p == '\n';
            ok = lines == cl->n;
        }
        if (r) freeReplyObject(r);
        if (!ok) {
            snprintf(cr->why, sizeof(cr->why), "node %d: CLUSTER NODES does not list %d healthy",
                     cl->node[i].port, cl->n);
            redisFree(c);
            return 0;
        }
        r = redisCommand(c, "INFO replication");
        ok = r && r->type == REDIS_REPLY_STRING &&
             (strstr(r->str, "role:master") || strstr(r->str, "master_link_status:up"));
        if (r) freeReplyObject(r);
        if (!ok) {
            snprintf(cr->why, sizeof(cr->why), "node %d: replica link not up", cl->node[i].port);
            redisFree(c);
            return 0;
        }
        slots_signature(c, sig, sizeof(sig), &np, &nr);
        redisFree(c);
        if (np != cr->primaries || nr != cr->replicas) {
            snprintf(cr->why, sizeof(cr->why),
                     "node %d: CLUSTER SLOTS names %d primaries, %d replicas for a range",
                     cl->node[i].port, np, nr);
            return 0;
        }
        if (i == 0) {
            snprintf(first, sizeof(first), "%s", sig);
        } else if (strcmp(first, sig)) {
            snprintf(cr->why, sizeof(cr->why), "nodes disagree on the slots: %.200s vs %.200s",
                     first, sig);
            return 0;
        }
    }
    return 1;
}

void th_cluster_start(th_cluster *cl, int primaries, int replicas_per) {
    int total = primaries * (1 + replicas_per), next, off;
    char log[400], *argv[TH_CLUSTER_MAX + 8], addrs[TH_CLUSTER_MAX][32], reps[16];
    pid_t pid;
    int status = 0, argc = 0;
    int64_t end;
    cluster_ready cr;
    memset(cl, 0, sizeof(*cl));
    ck_assert_msg(primaries >= 3 && total <= TH_CLUSTER_MAX,
                  "a cluster needs 3 primaries or more (redis-cli), at most %d nodes",
                  TH_CLUSTER_MAX);
    if (access(REDIS_SERVER_BIN, X_OK) != 0)
        ck_abort_msg("redis-server not found at %s: run scripts/test, which installs it",
                     REDIS_SERVER_BIN);
    harness_password[0] = '\0';
    snprintf(cl->dir, sizeof(cl->dir), "/tmp/dtq-test-XXXXXX");
    ck_assert_msg(mkdtemp(cl->dir) != NULL, "mkdtemp failed");
    track_dir(cl->dir);
    /* ports from the pid spread parallel test processes over 20000-29999 */
    next = 20000 + (int)((getpid() * 37) % 10000);
    for (int i = 0; i < total; i++) {
        int tries = 0;
        while (!cluster_node_up(cl, i, &next)) {
            char old[300];
            ck_assert_msg(++tries < 20, "cluster node %d could not start on a free port", i);
            snprintf(old, sizeof(old), "rm -rf '%s'", cl->node[i].dir);
            if (system(old) != 0) { /* best effort */
            }
        }
        cl->n++;
    }
    off = snprintf(cl->url, sizeof(cl->url), "redis-cluster://");
    for (int i = 0; i < cl->n; i++)
        off += snprintf(cl->url + off, sizeof(cl->url) - (size_t)off, "%s127.0.0.1:%d",
                        i ? "," : "", cl->node[i].port);
    argv[argc++] = (char *)REDIS_CLI_BIN;
    argv[argc++] = (char *)"--cluster";
    argv[argc++] = (char *)"create";
    for (int i = 0; i < cl->n; i++) {
        snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", cl->node[i].port);
        argv[argc++] = addrs[i];
    }
    snprintf(reps, sizeof(reps), "%d", replicas_per);
    argv[argc++] = (char *)"--cluster-replicas";
    argv[argc++] = reps;
    argv[argc++] = (char *)"--cluster-yes";
    argv[argc] = NULL;
    snprintf(log, sizeof(log), "%s/create.log", cl->dir);
    pid = th_spawn_child(argv, log);
    ck_assert_msg(pid > 0, "fork failed");
    end = th_now_ms() + 30000;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (th_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            ck_abort_msg("redis-cli --cluster create did not finish in 30 s; see %s", log);
        }
        th_sleep_ms(20);
    }
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "redis-cli --cluster create failed; see %s", log);
    cr.cl = cl;
    cr.primaries = primaries;
    cr.replicas = replicas_per;
    snprintf(cr.why, sizeof(cr.why), "not asked");
    ck_assert_msg(th_wait_until(cluster_is_ready, &cr, 30000),
                  "the cluster did not settle in 30 s: %s", cr.why);
}

void th_cluster_stop(th_cluster *cl) {
    for (int i = 0; i < cl->n; i++)
        if (cl->node[i].pid > 0) {
            th_stop_child(cl->node[i].pid, SIGKILL);
            cl->node[i].pid = 0;
        }
}

void th_cluster_pick_queues(const th_cluster *cl, const char *ns, int shards, int per,
                            char (*out)[16]) {
    int port_of[TH_CLUSTER_MAX] = {0}, count[TH_CLUSTER_MAX] = {0}, n = 0;
    for (int i = 1; n < shards * per && i < 1000; i++) {
        char name[16], tag[192];
        int port, s;
        snprintf(name, sizeof(name), "q%d", i);
        snprintf(tag, sizeof(tag), "{%s:%s}", ns, name);
        port = th_cluster_owner_port(cl, tag);
        for (s = 0; s < shards && port_of[s] && port_of[s] != port; s++) continue;
        if (s == shards || count[s] == per || (s > 0 && count[s - 1] < per)) continue;
        port_of[s] = port;
        count[s]++;
        snprintf(out[n], 16, "%s", name);
        printf("queue %s: slot %d, node %d\n", name, dtq_cluster_keyslot(tag, strlen(tag)), port);
        n++;
    }
    if (n != shards * per) {
        fprintf(stderr, "no %d queues over %d shards of namespace %s\n", shards * per, shards, ns);
        exit(1);
    }
}

int th_read_until(int fd, const char *needle, int timeout_ms, char *buf, size_t cap) {
    size_t len = strlen(buf);
    int64_t end = th_now_ms() + timeout_ms;
    while (!strstr(buf, needle)) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = end - th_now_ms();
        ssize_t n;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) return 0;
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0) return 0;
        len += (size_t)n;
        buf[len] = '\0';
    }
    return 1;
}
