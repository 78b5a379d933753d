/* keys.h: the one place that names dtq's Redis keys and Functions, for the daemon, dtqctl
 * and (through the prefix it hands to scripts.c) the Functions library. A key is
 * "<prefix>:<suffix>"; the prefix is the namespace, or "{namespace}" with
 * cluster_hash_tag so that every key hashes to one Redis Cluster slot. */
#ifndef DTQ_KEYS_H
#define DTQ_KEYS_H

#include <stdarg.h>

/* "ns" or "{ns}". Caller-owned. */
char *dtq_keys_prefix(const char *ns, int cluster_hash_tag);
/* "<prefix>:<suffix>" with the suffix formatted from fmt. Caller-owned. */
char *dtq_key(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dtq_key with a va_list, for the wrappers that know their prefix (ctx, dtq-web). */
char *dtq_keyv(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* "<ns>_<name>", the registered name of a Function. Caller-owned. */
char *dtq_keys_function(const char *ns, const char *name);

#endif
