/* registry.c: resolves each configured task type to a function: a builtin by name or a
 * plugin symbol through dlopen. */
#include "registry.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler_builtin.h"
#include "handler_exec.h"
#include "util.h"

dtq_handler_registry *dtq_handler_registry_new(const dtq_config *cfg, char *err, size_t errlen) {
    dtq_handler_registry *reg = dtq_xcalloc(1, sizeof(*reg));
    reg->entries = dtq_xcalloc((size_t)cfg->nhandlers + 1, sizeof(dtq_handler_entry));
    for (int i = 0; i < cfg->nhandlers; i++) {
        const dtq_handler_conf *h = &cfg->handlers[i];
        dtq_handler_fn *fn = NULL;
        if (h->kind == DTQ_HANDLER_KIND_BUILTIN) {
            fn = dtq_handler_builtin(h->target);
        } else if (h->kind == DTQ_HANDLER_KIND_PLUGIN) {
            void *lib = dlopen(h->target, RTLD_NOW | RTLD_LOCAL);
            if (!lib) {
                snprintf(err, errlen, "[handler:%s] plugin: cannot load %s: %s", h->task_type,
                         h->target, dlerror());
                dtq_handler_registry_free(reg, 1);
                return NULL;
            }
            reg->libs = dtq_xrealloc(reg->libs, sizeof(void *) * (size_t)(reg->nlibs + 1));
            reg->libs[reg->nlibs++] = lib;
            *(void **)(&fn) = dlsym(lib, h->symbol);
            if (!fn) {
                snprintf(err, errlen, "[handler:%s] symbol: %s not found in %s", h->task_type,
                         h->symbol, h->target);
                dtq_handler_registry_free(reg, 1);
                return NULL;
            }
        } else {
            dtq_exec_spec *spec = dtq_exec_spec_new(h, err, errlen);
            if (!spec) {
                dtq_handler_registry_free(reg, 1);
                return NULL;
            }
            reg->entries[reg->n].exec_spec = spec;
        }
        if (!fn && !reg->entries[reg->n].exec_spec) {
            snprintf(err, errlen, "[handler:%s] builtin: unknown builtin %s", h->task_type,
                     h->target);
            dtq_handler_registry_free(reg, 1);
            return NULL;
        }
        reg->entries[reg->n].task_type = dtq_xstrdup(h->task_type);
        reg->entries[reg->n].target = dtq_xstrdup(h->target);
        reg->entries[reg->n].fn = fn;
        reg->n++;
    }
    return reg;
}

void dtq_handler_registry_free(dtq_handler_registry *reg, int close_libs) {
    if (!reg) return;
    for (int i = 0; i <= reg->n; i++) { /* <= : a half-built last entry may hold a spec */
        free(reg->entries[i].task_type);
        free(reg->entries[i].target);
        dtq_exec_spec_free(reg->entries[i].exec_spec);
    }
    free(reg->entries);
    for (int i = 0; close_libs && i < reg->nlibs; i++) dlclose(reg->libs[i]);
    free(reg->libs);
    free(reg);
}

const dtq_handler_entry *dtq_handler_lookup(const dtq_handler_registry *reg,
                                            const char *task_type) {
    for (int i = 0; i < reg->n; i++)
        if (!strcmp(reg->entries[i].task_type, task_type)) return &reg->entries[i];
    return NULL;
}
