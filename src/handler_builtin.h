/* handler_builtin.h: the builtin handlers (noop, echo, sleep, fail, flaky), for demos,
 * tests and benchmarks. They use the plugin ABI of include/dtq/handler.h; the registry
 * (registry.c) resolves `builtin = NAME` here, as it resolves `exec =` in handler_exec.h. */
#ifndef DTQ_HANDLER_BUILTIN_H
#define DTQ_HANDLER_BUILTIN_H

#include "dtq/handler.h"

/* The builtin of that name; NULL for an unknown name. */
dtq_handler_fn *dtq_handler_builtin(const char *name);

#endif
