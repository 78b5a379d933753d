/* spawn_floor: what the OS alone manages: posix_spawn + waitpid of a program, `parallel`
 * children at a time, `n` in all. The floor beside which bench/exec.sh reports dtq's exec
 * handlers. Usage: spawn_floor [n] [parallel] [program] */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5000, parallel = argc > 2 ? atol(argv[2]) : 64;
    char *prog = argc > 3 ? argv[3] : (char *)"/bin/true";
    char *child_argv[] = {prog, NULL};
    long started = 0, done = 0;
    double t0 = now_s(), dt;
    while (done < n) {
        while (started < n && started - done < parallel) {
            pid_t pid;
            if (posix_spawn(&pid, prog, NULL, NULL, child_argv, environ) != 0) {
                perror("posix_spawn");
                return 1;
            }
            started++;
        }
        if (waitpid(-1, NULL, 0) > 0) done++;
    }
    dt = now_s() - t0;
    printf("spawn floor: %ld x %s, %ld at a time: %.0f/s\n", n, prog, parallel, (double)n / dt);
    return 0;
}
