/* keys.c: key and Function names. */
#include "keys.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

char *dtq_keys_prefix(const char *ns, int cluster_hash_tag) {
    return cluster_hash_tag ? dtq_xasprintf("{%s}", ns) : dtq_xstrdup(ns);
}

char *dtq_keyv(const char *prefix, const char *fmt, va_list ap) {
    char *suffix = NULL, *key;
    if (vasprintf(&suffix, fmt, ap) < 0) abort();
    key = dtq_xasprintf("%s:%s", prefix, suffix);
    free(suffix);
    return key;
}

char *dtq_key(const char *prefix, const char *fmt, ...) {
    va_list ap;
    char *key;
    va_start(ap, fmt);
    key = dtq_keyv(prefix, fmt, ap);
    va_end(ap);
    return key;
}

char *dtq_keys_function(const char *ns, const char *name) {
    return dtq_xasprintf("%s_%s", ns, name);
}
