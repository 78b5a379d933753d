/* fuzz_config: an INI configuration file, through the daemon's loader with all its checks
 * (dtq_config_load: inih, the key table, the cross-key checks, the [redis] url, [web]
 * allowed_hosts), then what a loaded config is used for at start: every exec handler's
 * command line, env and workdir (dtq_exec_spec_new), the key prefix and the published
 * fields. The text reaches the loader as a file (a memfd), the way it reads one. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "handler_exec.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    dtq_config *cfg;
    int fd = memfd_create("fuzz_config", MFD_CLOEXEC);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    cfg = dtq_config_load(path, err, sizeof(err));
    close(fd);
    if (!cfg) {
        if (!memchr(err, '\0', sizeof(err)) || !*err) abort(); /* a failure says why */
        return 0;
    }
    for (int i = 0; i < cfg->nhandlers; i++) {
        const dtq_handler_conf *h = &cfg->handlers[i];
        if (dtq_config_handler(cfg, h->task_type) == NULL) abort();
        if (h->kind == DTQ_HANDLER_KIND_EXEC) {
            dtq_exec_spec *spec = dtq_exec_spec_new(h, err, sizeof(err));
            if (spec && (!spec->prog.argv || !spec->prog.argv[0])) abort();
            dtq_exec_spec_free(spec);
        }
    }
    {
        char *prefix = dtq_config_prefix(cfg);
        dtq_argv a;
        dtq_argv_init(&a);
        dtq_config_publish_args(cfg, &a);
        if (a.argc % 2) abort(); /* field/value pairs */
        dtq_argv_deinit(&a);
        free(prefix);
    }
    dtq_config_free(cfg);
    return 0;
}
