/* it_exec_faults.c: exec handlers against what the infrastructure does to them. A program
 * killed from outside (an operator, the OOM killer, a unit stop that signals every process)
 * is retried or handed back, never failed; the systemd units stop the daemon alone; and a
 * program starts clean (descriptors 0-2 only, default signals, its section's environment)
 * and cannot make the daemon buffer more stdout than result_max_bytes. */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

static th_redis R;
static redisContext *C;

#define FAST_RETRY "[retry]\nbase_delay = 0.2\nmax_delay = 0.5\njitter = 0\n"
#define FAST_SCHED "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

/* `worker` goes into [worker]; `sections` (handlers, [limits]) after it. */
static void start(th_daemon *d, const char *id, const char *worker, const char *sections) {
    char ini[8192];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\n%s\n" FAST_RETRY FAST_SCHED "%s",
             id, worker ? worker : "", sections ? sections : "");
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

/* GET dtq:result:<id>, caller-owned ("" when there is none). */
static char *result_of(const char *id) {
    redisReply *r = th_cmd(C, "GET dtq:result:%s", id);
    char *v = strdup(r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return v;
}

/* A script in the test dir; the path goes to out. */
static void script(const char *name, const char *body, char *out, size_t outlen) {
    FILE *f;
    th_path(&R, name, out, outlen);
    f = fopen(out, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    ck_assert_int_eq(chmod(out, 0755), 0);
}

/* Processes whose parent is `ppid` and whose name is `comm` (scanning /proc: the kernel
 * may lack /proc/<pid>/task/<tid>/children). Returns how many, at most max in pids. */
static int children_of(pid_t ppid, const char *comm, pid_t *pids, int max) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        char path[300], line[512], *close_paren;
        FILE *f;
        int pp;
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        if (!(f = fopen(path, "r"))) continue; /* gone meanwhile */
        if (!fgets(line, sizeof(line), f)) line[0] = '\0';
        fclose(f);
        /* "pid (comm) state ppid ...": comm may hold blanks and parentheses */
        close_paren = strrchr(line, ')');
        if (!close_paren || sscanf(close_paren + 1, " %*c %d", &pp) != 1 || pp != ppid) continue;
        *close_paren = '\0';
        if (strcmp(strchr(line, '(') + 1, comm)) continue;
        if (n < max) pids[n] = (pid_t)atoi(e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

typedef struct kids {
    pid_t ppid;
    const char *comm;
    int want;
    pid_t pids[8];
} kids;

static int has_kids(void *arg) {
    kids *k = arg;
    return children_of(k->ppid, k->comm, k->pids, 8) == k->want;
}

/* A field of /proc/<pid>/status ("VmHWM", "SigIgn") as text, caller-owned. */
static char *proc_status(pid_t pid, const char *field) {
    char path[64], line[256], *v = NULL;
    size_t flen = strlen(field);
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, field, flen) && line[flen] == ':') {
            char *s = line + flen + 1;
            while (isspace((unsigned char)*s)) s++;
            s[strcspn(s, "\n")] = '\0';
            v = strdup(s);
            break;
        }
    fclose(f);
    ck_assert_msg(v != NULL, "no %s in %s", field, path);
    return v;
}

static long vm_hwm_kb(pid_t pid) {
    char *v = proc_status(pid, "VmHWM");
    long kb = atol(v);
    free(v);
    return kb;
}

/* ----------------------------------------------------------------- signals from outside */

/* An operator's or the OOM killer's SIGKILL is not the task's doing: the attempt is a
 * retryable `signal` failure and the next attempt succeeds. A program that kills itself on
 * every attempt still runs out of attempts: that is its own behaviour. */
START_TEST(test_external_kill_is_retried) {
    th_daemon d;
    char victim[400], suicide[400], ini[2048];
    kids k = {0, "sleep", 1, {0}};
    script("victim.sh", "[ \"$DTQ_ATTEMPT\" -ge 2 ] && exit 0\nexec /bin/sleep 30", victim,
           sizeof(victim));
    script("suicide.sh", "kill -9 $$", suicide, sizeof(suicide));
    snprintf(ini, sizeof(ini),
             "[handler:victim]\nexec = %s\n[handler:suicide]\nexec = %s\nmax_attempts = 2\n",
             victim, suicide);
    start(&d, "w-kill", NULL, ini);
    th_enqueue(C, "default", "a1", "victim", "{\"n\":1}", NULL);
    th_expect_status(C, "a1", "running", 5000);
    k.ppid = d.pid;
    ck_assert_msg(th_wait_until(has_kids, &k, 5000), "the daemon's sleep child never appeared");
    ck_assert_int_eq(kill(k.pids[0], SIGKILL), 0);
    th_expect_status(C, "a1", "succeeded", 10000);
    th_assert_field(C, "a1", "attempt", "2");
    th_assert_field(C, "a1", "last_error", "signal:9");
    th_assert_field(C, "a1", "last_error_class", "signal");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);

    th_enqueue(C, "default", "a2", "suicide", "{\"n\":1}", NULL);
    th_expect_status(C, "a2", "dead_lettered", 10000);
    th_assert_field(C, "a2", "attempt", "2"); /* retried once, then max_attempts */
    th_assert_field(C, "a2", "last_error_class", "signal");
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* systemd's default KillMode=control-group: SIGTERM reaches the daemon and every child at
 * once. The children die of it while the daemon drains: their tasks go back to the queue
 * (attempt 2) at once, long before drain_timeout_s, and another daemon finishes them. */
START_TEST(test_unit_stop_hands_back) {
    th_daemon a, b;
    char prog[400], ini[1024];
    const char *ids[] = {"s1", "s2", "s3"};
    kids k = {0, "sleep", 3, {0}};
    int64_t t0;
    script("stop.sh",
           "[ \"$DTQ_ATTEMPT\" -ge 2 ] && { printf '\"again\"'; exit 0; }\n"
           "exec /bin/sleep 30",
           prog, sizeof(prog));
    snprintf(ini, sizeof(ini), "[handler:stop]\nexec = %s\n", prog);
    start(&a, "w-stop", "concurrency = 4\ndrain_timeout_s = 30", ini);
    for (int i = 0; i < 3; i++) th_enqueue(C, "default", ids[i], "stop", "{\"n\":1}", NULL);
    for (int i = 0; i < 3; i++) th_expect_status(C, ids[i], "running", 5000);
    k.ppid = a.pid;
    ck_assert_msg(th_wait_until(has_kids, &k, 5000), "three sleep children never appeared");
    t0 = th_now_ms();
    /* the main PID first, then the rest of the cgroup, as systemd does */
    ck_assert_int_eq(kill(a.pid, SIGTERM), 0);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kill(-k.pids[i], SIGTERM), 0);
    ck_assert_int_eq(th_daemon_stop(&a, 0, 15000), 0); /* signal 0: only wait for the exit */
    ck_assert_int_lt(th_now_ms() - t0, 10000);         /* not the drain timeout's doing */
    for (int i = 0; i < 3; i++) {
        th_assert_field(C, ids[i], "status", "queued");
        th_assert_field(C, ids[i], "attempt", "2");
        th_assert_field(C, ids[i], "last_error_class", "interrupted");
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    start(&b, "w-stop-2", NULL, ini);
    for (int i = 0; i < 3; i++) {
        char *res;
        th_expect_status(C, ids[i], "succeeded", 10000);
        th_assert_field(C, ids[i], "attempt", "2");
        res = result_of(ids[i]);
        ck_assert_str_eq(res, "\"again\"");
        free(res);
    }
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
}
END_TEST

/* The value of `key=` in a unit file, or NULL. */
static char *unit_value(const char *text, const char *key) {
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, klen) && p[klen] == '=')
            return strndup(p + klen + 1, strcspn(p + klen + 1, "\n"));
    return NULL;
}

/* The units SIGTERM the daemon only, and give a default drain (30 s) plus the hard-stop
 * grace (15 s) room before systemd's SIGKILL. */
START_TEST(test_units_stop_the_daemon_only) {
    const char *units[] = {DTQ_SOURCE_DIR "/systemd/dtq-worker.service",
                           DTQ_SOURCE_DIR "/systemd/dtq-worker@.service"};
    for (int i = 0; i < 2; i++) {
        char *text = th_read_file(units[i]), *mode = unit_value(text, "KillMode"),
             *stop = unit_value(text, "TimeoutStopSec"), *end;
        long secs;
        ck_assert_msg(mode && !strcmp(mode, "mixed"), "%s: KillMode=%s", units[i],
                      mode ? mode : "(unset)");
        ck_assert_msg(stop != NULL, "%s: no TimeoutStopSec", units[i]);
        secs = strtol(stop, &end, 10);
        ck_assert_msg(end != stop && (!*end || !strcmp(end, "s")), "%s: TimeoutStopSec=%s",
                      units[i], stop);
        ck_assert_msg(secs > 45, "%s: TimeoutStopSec=%s is not above 45 s", units[i], stop);
        free(mode);
        free(stop);
        free(text);
    }
}
END_TEST

/* Whether one of text's lines is `line`. */
static int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0')) return 1;
    return 0;
}

/* A drain longer than the unit's TimeoutStopSec is announced to systemd with the stop
 * notification: drain_timeout_s + 15 s hard-stop grace + 5 s for the exit. */
START_TEST(test_drain_extends_the_stop_timeout) {
    th_daemon d;
    char sock[400], buf[512], got[2048] = "";
    int fd;
    fd = th_notify_socket(&R, sock, sizeof(sock), 5);
    setenv("NOTIFY_SOCKET", sock, 1);
    start(&d, "w-extend", "drain_timeout_s = 100", NULL);
    unsetenv("NOTIFY_SOCKET");
    kill(d.pid, SIGTERM);
    while (!strstr(got, "STOPPING=1")) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        ck_assert_msg(n > 0, "no STOPPING=1; got: %s", got);
        buf[n] = '\0';
        snprintf(got, sizeof(got), "%s", buf); /* the last datagram */
    }
    ck_assert_msg(has_line(got, "EXTEND_TIMEOUT_USEC=120000000"), "stop datagram: %s", got);
    ck_assert_int_eq(th_daemon_stop(&d, 0, 10000), 0);
    close(fd);
}
END_TEST

/* ----------------------------------------------------------------- output and a clean start */

/* 10 MB of stdout with result_max_bytes = 1024: the daemon keeps the first 1024 bytes as
 * they are (JSON or not), marks the result truncated, and its memory does not grow with the
 * output. Output under the cap is still checked for JSON. */
START_TEST(test_stdout_capped_while_read) {
    th_daemon d;
    char big[400], raw[400], small[400], ini[2048], *res;
    long hwm0, hwm1;
    script("big.sh",
           "printf '\"'; /usr/bin/head -c 10000000 /dev/zero | /usr/bin/tr '\\000' a; printf '\"'",
           big, sizeof(big));
    script("raw.sh", "/usr/bin/head -c 10000000 /dev/zero | /usr/bin/tr '\\000' b", raw,
           sizeof(raw));
    script("small.sh", "echo not json", small, sizeof(small));
    snprintf(ini, sizeof(ini),
             "[limits]\nresult_max_bytes = 1024\n[handler:big]\nexec = %s\n"
             "[handler:raw]\nexec = %s\n[handler:small]\nexec = %s\nmax_attempts = 1\n",
             big, raw, small);
    start(&d, "w-big", NULL, ini);
    hwm0 = vm_hwm_kb(d.pid);
    th_enqueue(C, "default", "o1", "big", "{\"n\":1}", NULL);
    th_expect_status(C, "o1", "succeeded", 30000);
    th_assert_field(C, "o1", "result_truncated", "1");
    res = result_of("o1");
    ck_assert_int_eq(strlen(res), 1024);
    ck_assert_int_eq(strspn(res + 1, "a"), 1023);
    free(res);
    hwm1 = vm_hwm_kb(d.pid);
    ck_assert_msg(hwm1 - hwm0 < 8 * 1024, "VmHWM grew from %ld kB to %ld kB", hwm0, hwm1);
#if !defined(__SANITIZE_ADDRESS__)
    ck_assert_msg(hwm1 < 30 * 1024, "VmHWM %ld kB", hwm1);
#endif
    th_enqueue(C, "default", "o2", "raw", "{\"n\":1}",
               NULL); /* not JSON, and too long to tell: kept as it is */
    th_expect_status(C, "o2", "succeeded", 30000);
    th_assert_field(C, "o2", "result_truncated", "1");
    res = result_of("o2");
    ck_assert_int_eq(strspn(res, "b"), 1024);
    ck_assert_int_eq(strlen(res), 1024);
    free(res);
    th_enqueue(C, "default", "o3", "small", "{\"n\":1}", NULL);
    th_expect_status(C, "o3", "dead_lettered", 10000);
    th_assert_field(C, "o3", "last_error_class", "bad_result");
    ck_assert_int_lt(vm_hwm_kb(d.pid) - hwm0, 8 * 1024);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* Whether the daemon's descriptor fd, a socket or a pipe the test process does not also
 * hold (so the daemon made it), is close-on-exec. 1 when it is or does not apply. */
static int made_cloexec(pid_t pid, const char *fd) {
    char path[300], mine[300], target[256] = "", own[256] = "", line[256];
    FILE *f;
    long fl = 0;
    snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid, fd);
    if (readlink(path, target, sizeof(target) - 1) < 0) return 1;
    if (strncmp(target, "socket:", 7) && strncmp(target, "pipe:", 5)) return 1;
    snprintf(mine, sizeof(mine), "/proc/self/fd/%s", fd);
    if (readlink(mine, own, sizeof(own) - 1) > 0 && !strcmp(own, target)) return 1; /* inherited */
    snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, fd);
    f = fopen(path, "r");
    if (!f) return 1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "flags:", 6)) fl = strtol(line + 6, NULL, 8);
    fclose(f);
    return (fl & O_CLOEXEC) != 0;
}

/* A program sees only 0, 1, 2 and its progress descriptor 3: nothing of the daemon's (Redis
 * connections, libevent's descriptors, another child's pipes) nor what the daemon
 * inherited, however high. The daemon's own sockets and pipes are close-on-exec. */
START_TEST(test_child_sees_only_0_1_2_3) {
    th_daemon d;
    char prog[400], ini[1024], *res;
    struct rlimit rl;
    int high = 1500, nullfd = open("/dev/null", O_RDONLY);
    DIR *dir;
    struct dirent *e;
    char fddir[64];
    /* The program's descriptors without close-on-exec, i.e. those it was given: the shell
     * opens its own (the script, the glob's directory) close-on-exec, and reads the flags
     * with a redirection, which makes no new descriptor above 2 that lasts. */
    script("fds.sh",
           "out=\nfor f in /proc/$$/fd/*; do\n  n=${f##*/}; fl=\n"
           "  { while read -r k v; do [ \"$k\" = flags: ] && fl=$v; done; } "
           "2>/dev/null </proc/$$/fdinfo/$n\n"
           "  [ -n \"$fl\" ] || continue\n"
           "  [ $(( fl & 02000000 )) -eq 0 ] && out=\"$out${out:+,}$n\"\ndone\n"
           "printf '\"%s\"' \"$out\"",
           prog, sizeof(prog));
    snprintf(ini, sizeof(ini), "[handler:fds]\nexec = %s\n", prog);
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur <= (rlim_t)high && rl.rlim_max > (rlim_t)high) {
        rl.rlim_cur = (rlim_t)high + 1;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    ck_assert_int_eq(dup2(nullfd, high), high); /* not close-on-exec: the daemon inherits it */
    start(&d, "w-fds", NULL, ini);
    close(high);
    close(nullfd);
    th_enqueue(C, "default", "f1", "fds", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "f2", "fds", "{\"n\":1}", NULL);
    th_expect_status(C, "f1", "succeeded", 10000);
    th_expect_status(C, "f2", "succeeded", 10000);
    res = result_of("f1");
    ck_assert_str_eq(res, "\"0,1,2,3\"");
    free(res);
    res = result_of("f2");
    ck_assert_str_eq(res, "\"0,1,2,3\"");
    free(res);
    /* the daemon is non-dumpable: only root (CAP_SYS_PTRACE) reads its descriptors */
    snprintf(fddir, sizeof(fddir), "/proc/%d/fd", (int)d.pid);
    dir = opendir(fddir);
    if (!dir && errno == EACCES && geteuid() != 0) {
        fprintf(stderr, "test_child_sees_only_0_1_2_3: not root: the daemon's own descriptors "
                        "are not checked\n");
        ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
        return;
    }
    ck_assert_ptr_nonnull(dir);
    while ((e = readdir(dir)) != NULL)
        if (isdigit((unsigned char)e->d_name[0]))
            ck_assert_msg(made_cloexec(d.pid, e->d_name),
                          "daemon descriptor %s is not close-on-exec", e->d_name);
    closedir(dir);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A program starts with every signal at its default and none blocked, even when the
 * daemon was started with some ignored (systemd ignores SIGPIPE; nohup SIGHUP) or blocked. */
START_TEST(test_child_signals_default) {
    th_daemon d;
    char prog[400], ini[1024], *res, *ign;
    sigset_t usr2, old;
    script("sig.sh",
           "b=$(/usr/bin/sed -n 's/^SigBlk:[[:space:]]*//p' /proc/$$/status)\n"
           "i=$(/usr/bin/sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)\n"
           "printf '{\"blk\":\"%s\",\"ign\":\"%s\"}' \"$b\" \"$i\"",
           prog, sizeof(prog));
    snprintf(ini, sizeof(ini), "[handler:sig]\nexec = %s\n", prog);
    /* the daemon inherits these two, as from a parent that set them up */
    signal(SIGUSR1, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, &old);
    start(&d, "w-sig", NULL, ini);
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    ign = proc_status(d.pid, "SigIgn");
    ck_assert_msg(strtoull(ign, NULL, 16) & (1ULL << (SIGUSR1 - 1)),
                  "the daemon does not ignore SIGUSR1 (SigIgn %s): the test proves nothing", ign);
    free(ign);
    th_enqueue(C, "default", "g1", "sig", "{\"n\":1}", NULL);
    th_expect_status(C, "g1", "succeeded", 10000);
    res = result_of("g1");
    {
        /* glibc's posix_spawn leaves its two internal signals (32 and 33, which no glibc
         * program can use) ignored; every signal a program can use must be at default. */
        unsigned long long blk = 1, igni = 1;
        ck_assert_int_eq(sscanf(res, "{\"blk\":\"%llx\",\"ign\":\"%llx\"}", &blk, &igni), 2);
        ck_assert_msg(blk == 0, "blocked signals in the child: %s", res);
        ck_assert_msg((igni & ~(3ULL << 31)) == 0, "ignored signals in the child: %s", res);
    }
    free(res);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* The section's env = NAME=VALUE replaces what the daemon inherited (each name once in the
 * program's environment block), but cannot forge the daemon's DTQ_ variables. */
START_TEST(test_section_env_overrides_inherited) {
    th_daemon d;
    char prog[400], ini[1024], *res;
    script("env.sh",
           "/usr/bin/tr '\\000' '\\n' < /proc/$$/environ | /usr/bin/grep -E "
           "'^(PATH|DTQ_TASK_ID)=' | /usr/bin/sort | { o=; while read -r l; do "
           "o=\"$o${o:+ }$l\"; done; printf '\"%s|%s\"' \"$o\" \"$PATH\"; }",
           prog, sizeof(prog));
    snprintf(ini, sizeof(ini), "[handler:env]\nexec = %s\nenv = PATH=/custom DTQ_TASK_ID=forged\n",
             prog);
    setenv("PATH", "/usr/local/bin:/usr/bin:/bin", 0); /* the daemon inherits a PATH */
    start(&d, "w-env", NULL, ini);
    th_enqueue(C, "default", "e1", "env", "{\"n\":1}", NULL);
    th_expect_status(C, "e1", "succeeded", 10000);
    res = result_of("e1");
    ck_assert_str_eq(res, "\"DTQ_TASK_ID=e1 PATH=/custom|/custom\"");
    free(res);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A handler cannot read the daemon's credentials in /proc/$PPID/environ (EnvironmentFile=
 * puts DTQ_REDIS_URL with its password there) or cmdline. As root (these tests) the child
 * may read a non-dumpable parent's environ: the wiped environment block is what it finds. */
START_TEST(test_child_cannot_read_the_daemons_credentials) {
    th_daemon d;
    char prog[400], ini[1024], *res;
    script("peek.sh",
           "/usr/bin/grep -q dtq-worker /proc/$PPID/cmdline || { printf '\"not the daemon\"'; "
           "exit 0; }; if /usr/bin/cat /proc/$PPID/environ /proc/$PPID/cmdline 2>/dev/null | "
           "/usr/bin/tr '\\000' '\\n' | /usr/bin/grep -q s3cret-in-env; then "
           "printf '\"leaked\"'; else printf '\"no secret\"'; fi",
           prog, sizeof(prog));
    snprintf(ini, sizeof(ini), "[handler:peek]\nexec = %s\n", prog);
    setenv("DTQ_REDIS_SENTINEL_PASSWORD", "s3cret-in-env", 1);
    start(&d, "w-peek", NULL, ini);
    unsetenv("DTQ_REDIS_SENTINEL_PASSWORD");
    th_enqueue(C, "default", "p1", "peek", "{}", NULL);
    th_expect_status(C, "p1", "succeeded", 10000);
    res = result_of("p1");
    ck_assert_str_eq(res, "\"no secret\"");
    free(res);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* ----------------------------------------------------------------- retry and result choices */

/* The lifecycle events of task `id` in the events stream, as "TYPE:attempt TYPE:attempt...",
 * caller-owned. Needs [limits] events_stream_maxlen > 0. */
static char *trail_of(const char *id) {
    redisReply *r = th_cmd(C, "XRANGE dtq:stream:events - +");
    size_t cap = 64, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < r->elements; i++) {
        const char *json = r->element[i]->element[1]->element[1]->str;
        char want[96], type[64] = "";
        const char *t, *a;
        snprintf(want, sizeof(want), "\"task_id\":\"%s\"", id);
        if (!strstr(json, want) || !(t = strstr(json, "\"type\":\"")) ||
            !(a = strstr(json, "\"attempt\":")))
            continue;
        sscanf(t + 8, "%63[^\"]", type);
        while (len + strlen(type) + 24 > cap) out = realloc(out, cap *= 2);
        len += (size_t)sprintf(out + len, "%s%s:%d", len ? " " : "", type, atoi(a + 10));
    }
    freeReplyObject(r);
    return out;
}

/* retry_exit_codes: a listed exit code is retried (curl's 7, "cannot connect"), the
 * default retries 75 alone, so the same program's exit 7 is dead-lettered at once, and
 * `any` retries every non-zero exit. */
START_TEST(test_retry_exit_codes) {
    th_daemon d;
    char curl[400], one[400], ini[2048];
    script("curl7.sh",
           "[ \"$DTQ_ATTEMPT\" -ge 2 ] && { printf '\"fetched\"'; exit 0; }\n"
           "echo 'curl: (7) Failed to connect' >&2\nexit 7",
           curl, sizeof(curl));
    script("one.sh", "[ \"$DTQ_ATTEMPT\" -ge 2 ] && exit 0\nexit 1", one, sizeof(one));
    snprintf(ini, sizeof(ini),
             "[handler:listed]\nexec = %s\nretry_exit_codes = 75 7\nmax_attempts = 3\n"
             "[handler:plain]\nexec = %s\nmax_attempts = 3\n"
             "[handler:anyexit]\nexec = %s\nretry_exit_codes = any\nmax_attempts = 3\n",
             curl, curl, one);
    start(&d, "w-codes", NULL, ini);
    th_enqueue(C, "default", "c1", "listed", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "c2", "plain", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "c3", "anyexit", "{\"n\":1}", NULL);
    th_expect_status(C, "c1", "succeeded", 10000);
    th_assert_field(C, "c1", "attempt", "2");
    th_assert_field(C, "c1", "last_error", "curl: (7) Failed to connect");
    th_assert_field(C, "c1", "last_error_class", "retryable");
    th_expect_status(C, "c2", "dead_lettered", 10000);
    th_assert_field(C, "c2", "attempt", "1"); /* not retried: 7 is not in the default */
    th_assert_field(C, "c2", "last_error_class", "permanent");
    th_expect_status(C, "c3", "succeeded", 10000);
    th_assert_field(C, "c3", "attempt", "2");
    th_assert_field(C, "c3", "last_error", "exit 1");
    th_assert_field(C, "c3", "last_error_class", "retryable");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* The child starts in the section's workdir, leads its own process group and finds its
 * payload on stdin; a workdir that does not exist is a permanent failure whose message
 * (the child's errno, from between its clone and its execve) says why, and the daemon
 * goes on starting children. */
START_TEST(test_workdir_and_spawn_failure) {
    th_daemon d;
    char where[400], dir[400], ini[2048], want[1024], *res;
    script("where.sh",
           "read -r l </proc/$$/stat; set -- ${l##*) }; in=$(cat); echo \"$(pwd) $3 $$ $in\"",
           where, sizeof(where));
    th_path(&R, "", dir, sizeof(dir));
    if (strlen(dir) > 1 && dir[strlen(dir) - 1] == '/') dir[strlen(dir) - 1] = '\0';
    snprintf(ini, sizeof(ini),
             "[handler:here]\nexec = %s\nresult = text\nworkdir = %s\n"
             "[handler:nodir]\nexec = %s\nworkdir = /nonexistent-dtq-dir\nmax_attempts = 3\n",
             where, dir, where);
    start(&d, "w-workdir", NULL, ini);
    th_enqueue(C, "default", "w1", "nodir", "{}", NULL);
    th_enqueue(C, "default", "w2", "here", "{\"n\":1}", NULL);
    th_expect_status(C, "w1", "dead_lettered", 10000);
    th_assert_field(C, "w1", "attempt", "1");
    snprintf(want, sizeof(want),
             "exec: cannot run %s in /nonexistent-dtq-dir: No such file or directory", where);
    th_assert_field(C, "w1", "last_error", want);
    th_expect_status(C, "w2", "succeeded", 10000);
    res = result_of("w2");
    {
        char wd[400];
        long pgrp = 0, pid = -1;
        /* "<workdir> <pgrp> <pid> {\"n\":1}\n" as a JSON string */
        ck_assert_int_eq(sscanf(res, "\"%399s %ld %ld", wd, &pgrp, &pid), 3);
        ck_assert_str_eq(wd, dir);
        ck_assert_int_eq(pgrp, pid);
        ck_assert_ptr_nonnull(strstr(res, " {\\\"n\\\":1}\\n\""));
    }
    free(res);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* result = text stores stdout as a JSON string, result = ignore stores nothing (and the
 * task succeeds, though "done" is no JSON), and text that is not UTF-8 is a bad_result. */
START_TEST(test_result_text_and_ignore) {
    th_daemon d;
    char done[400], latin1[400], ini[2048], *res;
    script("done.sh", "echo done", done, sizeof(done));
    script("latin1.sh", "printf 'caf\\351\\n'", latin1, sizeof(latin1));
    snprintf(ini, sizeof(ini),
             "[handler:text]\nexec = %s\nresult = text\n"
             "[handler:ignore]\nexec = %s\nresult = ignore\n"
             "[handler:latin1]\nexec = %s\nresult = text\nmax_attempts = 3\n",
             done, done, latin1);
    start(&d, "w-text", NULL, ini);
    th_enqueue(C, "default", "t1", "text", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "t2", "ignore", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "t3", "latin1", "{\"n\":1}", NULL);
    th_expect_status(C, "t1", "succeeded", 10000);
    res = result_of("t1");
    ck_assert_str_eq(res, "\"done\\n\"");
    free(res);
    {
        char *trunc = th_task_field(C, "t1", "result_truncated");
        ck_assert_ptr_null(trunc);
    }
    th_expect_status(C, "t2", "succeeded", 10000);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:t2")), 0);
    th_expect_status(C, "t3", "dead_lettered", 10000);
    th_assert_field(C, "t3", "attempt", "1");
    th_assert_field(C, "t3", "last_error_class", "bad_result");
    th_assert_field(C, "t3", "last_error", "result is not UTF-8 text (byte 4 of stdout)");
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* unknown_task_type = hand_back: a worker without a handler for the task's type gives it
 * back without using an attempt (max_attempts = 1 here, so one used attempt would have
 * ended it), again and again; a worker that knows the type then runs it at attempt 1. */
START_TEST(test_unknown_type_handed_back) {
    th_daemon a, b;
    char *trail;
    redisReply *r;
    start(&a, "w-old", "unknown_task_type = hand_back",
          "[limits]\nevents_stream_maxlen = 10000\n[handler:echo]\nbuiltin = echo\n");
    r = th_cmd(C, "FCALL dtq_enqueue 0 default newtype {} task_id u1 max_attempts 1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_sleep_ms(3000); /* two or more hand-backs, about a second apart */
    trail = trail_of("u1");
    ck_assert_msg(strstr(trail, "TASK_STARTED:1 TASK_DEFERRED:1 TASK_QUEUED:1 TASK_STARTED:1 "
                                "TASK_DEFERRED:1") == trail + strlen("TASK_QUEUED:1 "),
                  "trail: %s", trail);
    ck_assert_ptr_null(strstr(trail, "DEAD_LETTERED"));
    free(trail);
    th_assert_field(C, "u1", "attempt", "1");
    th_assert_field(C, "u1", "last_error", "unknown_task_type:newtype");
    th_assert_field(C, "u1", "last_error_class", "unknown_task_type");
    {
        char *st = th_task_field(C, "u1", "status");
        ck_assert_msg(!strcmp(st, "pending") || !strcmp(st, "queued") || !strcmp(st, "running"),
                      "status %s", st);
        free(st);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    {
        /* the bounces are logged once for the type (then counted for a minute), not a line
         * each */
        char *log = th_read_file(a.log);
        const char *first = strstr(log, "task type unknown here");
        ck_assert_ptr_nonnull(first);
        ck_assert_ptr_null(strstr(first + 1, "task type unknown here"));
        free(log);
    }
    start(&b, "w-new", NULL, "[handler:newtype]\nbuiltin = echo\n");
    th_expect_status(C, "u1", "succeeded", 30000);
    th_assert_field(C, "u1", "attempt", "1");
    th_assert_field(C, "u1", "worker_id", "w-new");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
    /* at its stop, w-old wrote the count of the bounces after the first */
    ck_assert(
        th_wait_log(a.log, "handed back without using an attempt (unknown_task_type", 2, 1000));
}
END_TEST

/* Past unknown_task_type_grace_s since its enqueue (Redis's clock), a task no worker knows
 * is dead-lettered as with unknown_task_type = dead_letter, still at attempt 1. */
START_TEST(test_unknown_type_grace_over) {
    th_daemon a;
    char *trail, *created, *finished;
    start(&a, "w-old", "unknown_task_type = hand_back\nunknown_task_type_grace_s = 2",
          "[limits]\nevents_stream_maxlen = 10000\n");
    th_enqueue(C, "default", "u2", "newtype", "{\"n\":1}", NULL);
    th_expect_status(C, "u2", "dead_lettered", 10000);
    th_assert_field(C, "u2", "attempt", "1");
    th_assert_field(C, "u2", "last_error", "unknown_task_type:newtype");
    th_assert_field(C, "u2", "last_error_class", "unknown_task_type");
    created = th_task_field(C, "u2", "created_at");
    finished = th_task_field(C, "u2", "finished_at");
    ck_assert_int_ge(atoll(finished) - atoll(created), 2000);
    free(created);
    free(finished);
    trail = trail_of("u2");
    ck_assert_msg(!strncmp(trail, "TASK_QUEUED:1 TASK_STARTED:1 TASK_DEFERRED:1 ", 45), "trail: %s",
                  trail);
    ck_assert_msg(strstr(trail, "TASK_STARTED:1 TASK_DEAD_LETTERED:1") ==
                      trail + strlen(trail) - strlen("TASK_STARTED:1 TASK_DEAD_LETTERED:1"),
                  "trail: %s", trail);
    free(trail);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
}
END_TEST

/* exec command lines are split into words as a shell would (quotes, backslashes), and run
 * without a shell: a quoted argument with blanks and quotes inside reaches the program as
 * one argv entry, and a JSON text written inside single quotes is the task's result. */
START_TEST(test_exec_quoted_words) {
    th_daemon d;
    char *res;
    start(&d, "w-quotes", NULL,
          "[handler:json]\nexec = /bin/sh -c 'echo \"{\\\"a\\\": 1}\"'\n"
          "[handler:py]\nexec = /usr/bin/python3 -c \"print(1)\"\n"
          "[handler:args]\nexec = /bin/sh -c 'printf \"<%s>\" \"$@\"' sh 'a b' \"c\\\"d $HOME\" "
          "e\\ f ''\n"
          "result = text\n");
    th_enqueue(C, "default", "q1", "json", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "q2", "py", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "q3", "args", "{\"n\":1}", NULL);
    th_expect_status(C, "q1", "succeeded", 10000);
    res = result_of("q1");
    ck_assert_str_eq(res, "{\"a\": 1}\n");
    free(res);
    th_expect_status(C, "q2", "succeeded", 10000);
    res = result_of("q2");
    ck_assert_str_eq(res, "1\n");
    free(res);
    th_expect_status(C, "q3", "succeeded", 10000);
    res = result_of("q3");
    /* four arguments: "a b", c"d $HOME (no variable expansion), "e f", "" */
    ck_assert_str_eq(res, "\"<a b><c\\\"d $HOME><e f><>\"");
    free(res);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("exec_faults");
    TCase *tc = tcase_create("signals");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_external_kill_is_retried);
    tcase_add_test(tc, test_unit_stop_hands_back);
    tcase_add_test(tc, test_drain_extends_the_stop_timeout);
    suite_add_tcase(s, tc);
    tc = tcase_create("units"); /* files only: no Redis */
    tcase_add_test(tc, test_units_stop_the_daemon_only);
    suite_add_tcase(s, tc);
    tc = tcase_create("child");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stdout_capped_while_read);
    tcase_add_test(tc, test_child_sees_only_0_1_2_3);
    tcase_add_test(tc, test_child_signals_default);
    tcase_add_test(tc, test_section_env_overrides_inherited);
    tcase_add_test(tc, test_child_cannot_read_the_daemons_credentials);
    tcase_add_test(tc, test_workdir_and_spawn_failure);
    suite_add_tcase(s, tc);
    tc = tcase_create("choices");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_retry_exit_codes);
    tcase_add_test(tc, test_result_text_and_ignore);
    tcase_add_test(tc, test_unknown_type_handed_back);
    tcase_add_test(tc, test_unknown_type_grace_over);
    suite_add_tcase(s, tc);
    tc = tcase_create("command_line");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_exec_quoted_words);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
