/* registry.h: the task_type -> handler registry, built from the [handler:*] sections.
 * Builtins and plugins share the ABI of include/dtq/handler.h. */
#ifndef DTQ_REGISTRY_H
#define DTQ_REGISTRY_H

#include <stddef.h>

#include "config.h"
#include "dtq/handler.h"

struct dtq_exec_spec;

typedef struct dtq_handler_entry {
    char *task_type;
    dtq_handler_fn *fn;              /* builtin or plugin; NULL for exec */
    struct dtq_exec_spec *exec_spec; /* exec handlers */
    char *target; /* builtin name or plugin path, handed to the call as `config` */
} dtq_handler_entry;

typedef struct dtq_handler_registry {
    dtq_handler_entry *entries;
    int n;
    void **libs; /* dlopen handles */
    int nlibs;
} dtq_handler_registry;

/* Builds a registry for cfg; NULL with err filled when a plugin or symbol cannot be loaded
 * or an exec program is not executable. */
dtq_handler_registry *dtq_handler_registry_new(const dtq_config *cfg, char *err, size_t errlen);
/* close_libs = 0 keeps plugins mapped (a reload: calls may still be running in them). */
void dtq_handler_registry_free(dtq_handler_registry *reg, int close_libs);
const dtq_handler_entry *dtq_handler_lookup(const dtq_handler_registry *reg, const char *task_type);

#endif
