/* spawn.h: starting a handler program (exec handlers, pool processes) the one way dtq
 * starts one: clone(CLONE_VM | CLONE_VFORK) like posix_spawn, in its own process group,
 * every signal at its default disposition and none blocked, the given descriptors on
 * 0..n-1 and none above, in the given working directory. */
#ifndef DTQ_SPAWN_H
#define DTQ_SPAWN_H

#include <sys/types.h>

#include <stddef.h>

/* A program a section names (exec = ..., command = ...), checked once when the section is
 * loaded, with the environment every start of it shares. */
typedef struct dtq_program {
    char **argv;     /* split like a command line (dtq_split_words); argv[0] absolute */
    char **env;      /* the section's NAME=VALUE entries */
    char **base_env; /* the environment after the caller's own variables, each name once */
    char *workdir;   /* NULL = the daemon's */
} dtq_program;

/* Parses and checks a section's program (cmdline under key `cmdkey` of [section]) with its
 * env and workdir. `reserved`: the NAME= prefixes of the variables the caller puts first
 * at each start (a section cannot set them). base_env is, each name once: the section's
 * env, then the daemon's environment without its own DTQ_* settings (which may hold a
 * Redis password) and the systemd variables meant for the daemon alone. Returns 0, or -1
 * with err "[section] key: why". */
int dtq_program_init(dtq_program *p, const char *section, const char *cmdkey, const char *cmdline,
                     const char *env, const char *workdir, const char *const *reserved,
                     int nreserved, char *err, size_t errlen);
void dtq_program_deinit(dtq_program *p);

typedef struct dtq_spawner dtq_spawner;

dtq_spawner *dtq_spawner_new(void);
void dtq_spawner_free(dtq_spawner *sp);

/* Starts argv[0] (an absolute path) with env. fds[i] becomes descriptor i for i < nfds
 * (nfds <= 8); the caller's descriptors stay open and are its to close. Returns 0 with
 * *pid set, or the errno of the step that failed (clone, setpgid, dup2, chdir, execve),
 * the child already reaped. Called from the event loop's thread only: one child at a time
 * uses the spawner's stack. */
int dtq_spawn(dtq_spawner *sp, char *const argv[], char *const env[], const char *workdir,
              const int *fds, int nfds, pid_t *pid);

#endif
