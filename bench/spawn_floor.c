/* spawn_floor: what the OS alone manages: posix_spawn + waitpid of a program, `parallel`
 * children at a time, `n` in all. The floor beside which bench/exec.sh reports dtq's exec
 * handlers. With "pipes", each child also gets what any runner that passes a payload and
 * keeps the output must give it: stdin, stdout and stderr pipes, the payload written and
 * the output read after the exit (so only for programs that write less than a pipe holds).
 * With "clean", the pipes and also the clean slate dtq gives every exec child: its own
 * process group, every signal at its default and none blocked, no descriptor above 2.
 * Usage: spawn_floor [n] [parallel] [program] [pipes|clean] */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5000, parallel = argc > 2 ? atol(argv[2]) : 64;
    char *prog = argc > 3 ? argv[3] : (char *)"/bin/true";
    int clean = argc > 4 && !strcmp(argv[4], "clean");
    int pipes = clean || (argc > 4 && !strcmp(argv[4], "pipes"));
    char *child_argv[] = {prog, NULL};
    child *kids = calloc((size_t)parallel, sizeof *kids);
    long started = 0, done = 0;
    double t0 = now_s(), dt;
    signal(SIGPIPE, SIG_IGN); /* a child that exits before reading its stdin */
    while (done < n) {
        while (started < n && started - done < parallel) {
            child c = {0, -1, -1};
            if (pipes ? spawn_piped(prog, child_argv, &c, clean) != 0
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
    printf("spawn floor%s: %ld x %s, %ld at a time: %.0f/s\n",
           clean   ? " with stdio pipes and a clean slate"
           : pipes ? " with stdio pipes"
                   : "",
           n, prog, parallel, (double)n / dt);
    free(kids);
    return 0;
}
