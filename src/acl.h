/* acl.h: the Redis ACL roles of dtq (producer, producer-raw, worker, admin, monitor), as the
 * rule tokens `dtqctl acl` prints for `ACL SETUSER <name> on ><password> <tokens>`. Each
 * role gets the least it needs: the Functions it may call (first-argument rules such as
 * +fcall|<ns>_enqueue), every command those Functions run (a Function's redis.call runs
 * with the caller's permissions), and the key and channel patterns of its namespace. */
#ifndef DTQ_ACL_H
#define DTQ_ACL_H

/* The role names, NULL-terminated, in the order they are documented. */
extern const char *const dtq_acl_roles[];

/* The tokens of the union of `nroles` roles for namespace `ns` and key prefix `prefix`
 * ("<ns>" or "{<ns>}"), space-separated on one line (no newline): first
 * `resetkeys resetchannels clearselectors -@all`, so that the result does not depend on
 * what the user held before, then the rules, each token once. Caller-owned; NULL when a
 * role is unknown (*bad names it).
 *
 * cluster: the cluster layout (reference 5.9): every key pattern is given twice, for the
 * shared keys under "{<ns>}" and for every queue's under "{<ns>:*}" (prefix is ignored);
 * the events channel is "{<ns>}:events"; every role also gets CLUSTER SLOTS and ASKING,
 * which the routers send, the bare tags "{<ns>}" and "{<ns>:*}" that the Function calls
 * name as their first key, and read access to the never-written "<tag>:moving" that the
 * Functions' resharding check reads. */
char *dtq_acl_tokens(const char *const *roles, int nroles, const char *ns, const char *prefix,
                     int cluster, const char **bad);

#endif
