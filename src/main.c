/* main.c: dtq-worker's entry point: arguments, config (exit 78 on any error), logging,
 * then the worker's loop. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "registry.h"
#include "log.h"
#include "pool.h"
#include "tls.h"
#include "util.h"
#include "worker.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dtq-worker [-c FILE] [--check-config] [--version] [--help]\n"
               "  -c, --config FILE   INI configuration (default: defaults + DTQ_* environment)\n"
               "      --check-config  validate the configuration and exit (0 ok, 78 invalid)\n");
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"check-config", no_argument, NULL, 'k'},
                                         {"version", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int check = 0, opt, rc;
    char err[1024];
    dtq_config *cfg;
    dtq_worker *w;
    enum dtq_log_level lvl;
    enum dtq_log_format fmt;

    dtq_hide_credentials(); /* before any exec child, and before the config reads them */
    while ((opt = getopt_long(argc, argv, "c:hv", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': path = optarg; break;
        case 'k': check = 1; break;
        case 'v': printf("dtq-worker %s\n", DTQ_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dtq-worker: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    cfg = dtq_config_load(path, err, sizeof(err));
    if (!cfg) {
        fprintf(stderr, "dtq-worker: config error: %s\n", err);
        return DTQ_EX_CONFIG;
    }
    dtq_log_level_from_string(cfg->log_level, &lvl);
    dtq_log_format_from_string(cfg->log_format, &fmt);
    dtq_log_setup(lvl, fmt);
    if (check) {
        dtq_handler_registry *reg = NULL;
        if (dtq_pools_check(cfg, err, sizeof(err)) != 0 ||
            !(reg = dtq_handler_registry_new(cfg, err, sizeof(err)))) {
            fprintf(stderr, "dtq-worker: config error: %s: %s\n", path ? path : "(defaults)", err);
            dtq_config_free(cfg);
            return DTQ_EX_CONFIG;
        }
        dtq_handler_registry_free(reg, 1);
        if (!strncmp(cfg->redis_url, "rediss://", 9) ||
            !strncmp(cfg->redis_url, "rediss-sentinel://", 18)) { /* the TLS material loads */
            dtq_tls *tls = dtq_tls_from_config(cfg, err, sizeof(err));
            if (!tls) {
                fprintf(stderr, "dtq-worker: config error: %s: %s\n", path ? path : "(defaults)",
                        err);
                dtq_config_free(cfg);
                return DTQ_EX_CONFIG;
            }
            dtq_tls_unref(tls);
        }
        printf("%s: configuration ok\n", path ? path : "(defaults)");
        dtq_config_free(cfg);
        return 0;
    }
    dtq_config_warn_exposed_secrets(cfg, "dtq-worker", 0);
    w = dtq_worker_new(cfg, err, sizeof(err));
    if (!w) {
        fprintf(stderr, "dtq-worker: config error: %s: %s\n", path ? path : "(defaults)", err);
        dtq_config_free(cfg);
        return DTQ_EX_CONFIG;
    }
    rc = dtq_worker_run(w);
    dtq_worker_free(w);
    return rc;
}
