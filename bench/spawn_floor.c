/* spawn_floor: what the OS alone manages: posix_spawn + waitpid of a program, `parallel`
 * children at a time, `n` in all. The floor beside which bench/exec.sh reports dtq's exec
 * handlers. With "pipes", each child also gets what any runner that passes a payload and
 * keeps the output must give it: stdin, stdout and stderr pipes, the payload written and
 * the output read after the exit (so only for programs that write less than a pipe holds).
 * With "clean", the pipes and also the clean slate dtq gives every exec child: its own
 * process group, every signal at its default and none blocked, no descriptor above 2.
 * With "clone", the same child started the way dtq starts it (src/handler_exec.c): a
 * clone(CLONE_VM | CLONE_VFORK) on a stack mapped once, where glibc's posix_spawn maps
 * and unmaps a stack per child. The payload is written before the spawn, as dtq does.
 * Usage: spawn_floor [n] [parallel] [program] [pipes|clean|clone] */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct {
    pid_t pid;
    int out, err;
} child;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void drain_close(int fd) {
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
}

static int spawn_piped(char *prog, char **child_argv, child *c, int clean) {
    int p[3][2];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t all, none;
    for (int i = 0; i < 3; i++)
        if (pipe2(p[i], O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[0][0], 0);
    posix_spawn_file_actions_adddup2(&fa, p[1][1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[2][1], 2);
    posix_spawnattr_init(&attr);
    if (clean) {
        sigfillset(&all);
        sigemptyset(&none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETSIGMASK);
        posix_spawnattr_setpgroup(&attr, 0);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    }
    int rc = posix_spawn(&c->pid, prog, &fa, &attr, child_argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(p[0][0]);
    close(p[1][1]);
    close(p[2][1]);
    if (rc != 0) return -1;
    if (write(p[0][1], "{}", 2) != 2) { /* the child may be gone already: not an error */
    }
    close(p[0][1]);
    c->out = p[1][0];
    c->err = p[2][0];
    return 0;
}

typedef struct {
    char *prog;
    char **argv;
    int fds[3];
    int err;
} clone_args;

static int clone_child(void *arg) {
    clone_args *a = arg;
    struct sigaction dfl;
    sigset_t none;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
    setpgid(0, 0);
    for (int i = 0; i < 3; i++) dup2(a->fds[i], i);
    syscall(SYS_close_range, 3U, ~0U, 0U);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->prog, a->argv, environ);
    a->err = errno;
    _exit(127);
}

static int spawn_cloned(char *prog, char **child_argv, child *c, char *stack_top) {
    int p[3][2];
    sigset_t all, old;
    for (int i = 0; i < 3; i++)
        if (pipe2(p[i], O_CLOEXEC) != 0) return -1;
    if (write(p[0][1], "{}", 2) != 2) return -1;
    close(p[0][1]);
    clone_args a = {prog, child_argv, {p[0][0], p[1][1], p[2][1]}, 0};
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    c->pid = clone(clone_child, stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(p[0][0]);
    close(p[1][1]);
    close(p[2][1]);
    if (c->pid < 0 || a.err) return -1;
    c->out = p[1][0];
    c->err = p[2][0];
    return 0;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5000, parallel = argc > 2 ? atol(argv[2]) : 64;
    char *prog = argc > 3 ? argv[3] : (char *)"/bin/true";
    int cloned = argc > 4 && !strcmp(argv[4], "clone");
    int clean = cloned || (argc > 4 && !strcmp(argv[4], "clean"));
    int pipes = clean || (argc > 4 && !strcmp(argv[4], "pipes"));
    size_t stack_size = 64 * 1024;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    char *child_argv[] = {prog, NULL};
    child *kids = calloc((size_t)parallel, sizeof *kids);
    long started = 0, done = 0;
    double t0 = now_s(), dt, cpu;
    struct rusage ru;
    signal(SIGPIPE, SIG_IGN); /* a child that exits before reading its stdin */
    while (done < n) {
        while (started < n && started - done < parallel) {
            child c = {0, -1, -1};
            if (cloned  ? spawn_cloned(prog, child_argv, &c, stack + stack_size) != 0
                : pipes ? spawn_piped(prog, child_argv, &c, clean) != 0
                        : posix_spawn(&c.pid, prog, NULL, NULL, child_argv, environ) != 0) {
                perror("spawn");
                return 1;
            }
            for (long k = 0; k < parallel; k++)
                if (!kids[k].pid) {
                    kids[k] = c;
                    break;
                }
            started++;
        }
        pid_t pid = waitpid(-1, NULL, 0);
        if (pid <= 0) continue;
        for (long k = 0; k < parallel; k++)
            if (kids[k].pid == pid) {
                if (kids[k].out >= 0) drain_close(kids[k].out);
                if (kids[k].err >= 0) drain_close(kids[k].err);
                kids[k].pid = 0;
                break;
            }
        done++;
    }
    dt = now_s() - t0;
    getrusage(RUSAGE_SELF, &ru); /* this process alone, as bench/exec.sh's daemon CPU */
    cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
          (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    printf("spawn floor%s: %ld x %s, %ld at a time: %.0f/s, spawner CPU %.0f us/child\n",
           cloned  ? " with stdio pipes and a clean slate, cloned as dtq does"
           : clean ? " with stdio pipes and a clean slate"
           : pipes ? " with stdio pipes"
                   : "",
           n, prog, parallel, (double)n / dt, cpu / (double)n);
    free(kids);
    munmap(stack, stack_size);
    return 0;
}
