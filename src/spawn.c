/* spawn.c: the child's side runs between clone and execve on the parent's memory: only
 * system calls, no malloc, no stdio, no locks. */
#include "spawn.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define SPAWN_MAX_FDS 8

extern char **environ;

static char **split_blanks(const char *s) {
    char **v = dtq_xcalloc(strlen(s) / 2 + 2, sizeof(char *));
    int n = 0;
    while (*s) {
        const char *start;
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) break;
        start = s;
        while (*s && !isspace((unsigned char)*s)) s++;
        v[n++] = dtq_xstrndup(start, (size_t)(s - start));
    }
    v[n] = NULL;
    return v;
}

static void free_strv(char **v) {
    for (char **p = v; p && *p; p++) free(*p);
    free(v);
}

/* Whether env[0..n) already sets the variable that `entry` (NAME=VALUE) names. */
static int env_has(char *const *env, size_t n, const char *entry) {
    size_t len = strcspn(entry, "=");
    for (size_t k = 0; k < n; k++)
        if (!strncmp(env[k], entry, len) && env[k][len] == '=') return 1;
    return 0;
}

/* Every child's environment after the caller's own variables, each name once. With a name
 * twice, getenv() would take the first and a shell the last, so precedence is by order and
 * duplicates are dropped: the reserved variables (a section cannot forge a task id), then
 * the section's env, then what the daemon inherited. Built once per section: the daemon's
 * environment does not change, and scanning it for every spawn was a tenth of the daemon's
 * time per exec task. */
static char **base_env(const char *const *reserved, size_t nreserved, char *const *extra) {
    size_t n = nreserved, i, k = 0;
    char **all, **env;
    for (char **e = environ; *e; e++) n++;
    for (char *const *e = extra; *e; e++) n++;
    all = dtq_xcalloc(n + 1, sizeof(char *));
    for (i = 0; i < nreserved; i++) all[i] = (char *)reserved[i];
    for (char *const *e = extra; *e; e++)
        if (!env_has(all, i, *e)) all[i++] = *e;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "DTQ_", 4) && strncmp(*e, "NOTIFY_SOCKET=", 14) &&
            strncmp(*e, "WATCHDOG_", 9) && !env_has(all, i, *e))
            all[i++] = *e;
    env = dtq_xcalloc(i - nreserved + 1, sizeof(char *));
    for (size_t j = nreserved; j < i; j++) env[k++] = dtq_xstrdup(all[j]);
    free(all);
    return env;
}

int dtq_program_init(dtq_program *p, const char *section, const char *cmdkey, const char *cmdline,
                     const char *env, const char *workdir, const char *const *reserved,
                     int nreserved, char *err, size_t errlen) {
    char why[128];
    memset(p, 0, sizeof(*p));
    p->argv = dtq_split_words(cmdline, why, sizeof(why));
    p->env = split_blanks(env ? env : "");
    p->workdir = workdir ? dtq_xstrdup(workdir) : NULL;
    if (!p->argv)
        snprintf(err, errlen, "[%s] %s: %s", section, cmdkey, why);
    else if (!p->argv[0] || p->argv[0][0] != '/')
        snprintf(err, errlen, "[%s] %s: needs an absolute program path", section, cmdkey);
    else if (access(p->argv[0], X_OK) != 0)
        snprintf(err, errlen, "[%s] %s: %s is not executable: %s", section, cmdkey, p->argv[0],
                 strerror(errno));
    else {
        for (char **e = p->env; *e; e++) {
            if (!strchr(*e, '=') || **e == '=') {
                snprintf(err, errlen, "[%s] env: '%s' is not NAME=VALUE", section, *e);
                dtq_program_deinit(p);
                return -1;
            }
        }
        p->base_env = base_env(reserved, (size_t)nreserved, p->env);
        return 0;
    }
    dtq_program_deinit(p);
    return -1;
}

void dtq_program_deinit(dtq_program *p) {
    free_strv(p->argv);
    free_strv(p->env);
    free_strv(p->base_env);
    free(p->workdir);
    memset(p, 0, sizeof(*p));
}

/* The stack every child runs on from its clone to its execve: mapped once, with a guard
 * page below it. A fresh stack per spawn, as posix_spawn maps, costs an mmap and an
 * munmap, and the munmap a flush of the TLB of every core the child ran on. */
#define CHILD_STACK_BYTES (64 * 1024)

struct dtq_spawner {
    char *stack;      /* CHILD_STACK_BYTES with a guard page below */
    size_t stack_map; /* the bytes mapped, guard page included */
};

/* What the child needs between its clone and its execve, in the parent's memory. */
typedef struct {
    char *const *argv;
    char *const *env;
    const char *workdir;
    int fds[SPAWN_MAX_FDS];
    int nfds;
    int err; /* the errno of the step that failed; 0 when execve ran */
} spawn_args;

/* Closes every descriptor from `first` up: close_range, or on kernels before 5.9 a walk of
 * /proc/self/fd with getdents64 (no malloc). Descriptors are listed by number, so closing
 * one does not disturb the walk. No AddressSanitizer code in the child's functions: they
 * run on a stack ASan does not know (a frame it tracked there would stay on its books
 * after the execve). */
__attribute__((no_sanitize_address)) static int close_from(int first) {
    char buf[1024];
    long n;
    int dir;
    if (syscall(SYS_close_range, (unsigned)first, ~0U, 0U) == 0) return 0;
    /* Any failure: ENOSYS before Linux 5.9, and EPERM from seccomp profiles (containers)
     * that do not know the call. */
    dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    while ((n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
        for (long off = 0; off < n;) {
            const struct dirent64 *d = (const struct dirent64 *)(void *)(buf + off);
            int fd = 0;
            off += d->d_reclen;
            if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
            for (const char *c = d->d_name; *c >= '0' && *c <= '9'; c++) fd = fd * 10 + (*c - '0');
            if (fd >= first && fd != dir) close(fd);
        }
    }
    close(dir);
    return n < 0 ? -1 : 0;
}

/* Every signal is blocked when the child starts (dtq_spawn), so none of the daemon's
 * handlers can run here; they are all reset before the mask is emptied. */
__attribute__((no_sanitize_address)) static int child_main(void *arg) {
    spawn_args *a = arg;
    struct sigaction dfl;
    sigset_t none;
    int src[SPAWN_MAX_FDS];
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
    if (setpgid(0, 0) != 0) goto fail;
    /* A source below nfds moves up first, so that no dup2 onto 0..nfds-1 overwrites
     * another's source (the child has its own descriptor table: the parent's stays). */
    for (int i = 0; i < a->nfds; i++) {
        src[i] = a->fds[i];
        if (src[i] < a->nfds && (src[i] = fcntl(a->fds[i], F_DUPFD, a->nfds)) < 0) goto fail;
    }
    for (int i = 0; i < a->nfds; i++)
        if (dup2(src[i], i) != i) goto fail;
    if (close_from(a->nfds) != 0) goto fail;
    if (a->workdir && chdir(a->workdir) != 0) goto fail;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->argv[0], a->argv, a->env);
fail:
    a->err = errno;
    _exit(127);
}

int dtq_spawn(dtq_spawner *sp, char *const argv[], char *const env[], const char *workdir,
              const int *fds, int nfds, pid_t *pid) {
    spawn_args a = {argv, env, workdir, {0}, nfds, 0};
    sigset_t all, old;
    int rc;
    if (nfds < 0 || nfds > SPAWN_MAX_FDS) return EINVAL;
    memcpy(a.fds, fds, sizeof(int) * (size_t)nfds);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    *pid = clone(child_main, sp->stack + sp->stack_map, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    rc = *pid < 0 ? errno : a.err;
    if (*pid > 0 && rc != 0) waitpid(*pid, NULL, 0); /* it exited 127: nothing to report */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

dtq_spawner *dtq_spawner_new(void) {
    dtq_spawner *sp = dtq_xcalloc(1, sizeof(*sp));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    sp->stack_map = CHILD_STACK_BYTES + page;
    sp->stack = mmap(NULL, sp->stack_map, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (sp->stack == MAP_FAILED) { /* as any allocation failure */
        fprintf(stderr, "dtq: out of memory mapping %zu bytes\n", sp->stack_map);
        abort();
    }
    mprotect(sp->stack, page, PROT_NONE); /* the guard page: an overflow faults */
    return sp;
}

void dtq_spawner_free(dtq_spawner *sp) {
    if (!sp) return;
    munmap(sp->stack, sp->stack_map);
    free(sp);
}
