/* scope.h: the scopes of a Function call, for the daemon, dtqctl and dtq-web: the one place
 * that knows how a call names its slot in each layout (docs/reference.md 5.9).
 *
 * The single layout (one Redis, Sentinel): one scope, the namespace; a call passes no
 * key of its own. The cluster layout (redis-cluster://): a call's first key is a bare hash
 * tag, its scope: "{ns:q}" for a call about queue q (its slot), "{ns}" for the global
 * state (the workers, the scheduler lock, the queue index, the layout marker); the
 * Functions take it as the prefix of the call's keys (lua/lib/call.lua). A read or a write
 * over every queue calls once per queue of the index {ns}:queues and, for the global
 * parts, once with "{ns}"; the index's names are checked here, for every program. */
#ifndef DTQ_SCOPE_H
#define DTQ_SCOPE_H

#include <hiredis/hiredis.h>

#include "util.h"

/* The tag of a call about `queue` (NULL: the namespace's global state): "{ns:q}" or
 * "{ns}" in the cluster layout, NULL in the single layout (no key). Caller-owned. */
char *dtq_scope_tag(const char *ns, int cluster, const char *queue);

/* Starts `a` (dtq_argv_init) as FCALL (ro: FCALL_RO) of the registered Function `fn`
 * ("<ns>_<name>", dtq_keys_function) in the scope `tag`: numkeys 1 and the tag, or with tag
 * NULL (the single layout) numkeys 0. The caller adds the ARGV. */
void dtq_scope_fcall(dtq_argv *a, int ro, const char *fn, const char *tag);

/* Makes the call built in `a` (FCALL fn numkeys KEYS... ARGV...) one in the scope `tag`:
 * the tag goes first among the KEYS and numkeys counts it; the other keys and the ARGV are
 * unchanged. tag NULL (the single layout): nothing changes. */
void dtq_scope_tag_call(dtq_argv *a, const char *tag);

/* Starts `a` as the read of the cluster layout's queue index: SMEMBERS {ns}:queues. */
void dtq_scope_index_read(dtq_argv *a, const char *ns);

/* The queues of an answer to dtq_scope_index_read, sorted by name: the members that are
 * valid queue names (dtq_valid_queue_name; others are skipped: a name the Functions could
 * not have written is not called about), *n of them, in an array of *n + 1 (caller-owned,
 * dtq_scope_names_free). NULL with *n 0 when the answer is not an array; then an error
 * reply's text goes to *error (caller-owned) when error is not NULL. */
char **dtq_scope_index_names(const redisReply *r, int *n, char **error);
void dtq_scope_names_free(char **names, int n);

/* The layout check: <ns>_layout says whether the namespace is laid out the way this client
 * is (its marker {ns}:layout, or <p>:layout, written when there is none). Every program
 * calls it before it writes (dtqctl: before any call in the cluster layout) and judges the
 * answer by this one rule; what each then does (exit, stop, 503) is its own. */
typedef enum dtq_scope_layout {
    DTQ_SCOPE_LAYOUT_OK,         /* laid out as this client is */
    DTQ_SCOPE_LAYOUT_WRONG,      /* WRONG_LAYOUT: laid out the other way (the reply says how
                                  * to move): nothing may go on */
    DTQ_SCOPE_LAYOUT_UNCHECKED,  /* NOPERM (a role without <ns>_layout: the monitor role, or
                                  * one made before it existed), or in the single layout a
                                  * library older than <ns>_layout (it can only hold that
                                  * layout): go on unchecked, with a warning */
    DTQ_SCOPE_LAYOUT_NOT_LOADED, /* the cluster layout: the Functions are not loaded */
    DTQ_SCOPE_LAYOUT_FAILED      /* any other answer: not checked (try again, or refuse) */
} dtq_scope_layout;

/* Starts `a` as the check: FCALL <ns>_layout in the scope {ns} (none in the single layout),
 * with "cluster" or "single". */
void dtq_scope_layout_call(dtq_argv *a, const char *ns, int cluster);
/* The verdict on the check's reply. */
dtq_scope_layout dtq_scope_layout_verdict(const redisReply *r, int cluster);

#endif
