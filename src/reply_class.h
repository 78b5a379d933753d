/* reply_class.h: the one reader of an error reply's text. Every caller that branches on
 * what Redis or a dtq Function refused branches on the class this answers, so a word is
 * matched in one place, one way (the first word, whole), and a new one is added once. */
#ifndef DTQ_REPLY_CLASS_H
#define DTQ_REPLY_CLASS_H

typedef enum dtq_reply_class {
    DTQ_REPLY_OTHER, /* an error of no word known here (ERR ..., WRONGTYPE, OOM, ...) */
    /* the Functions' refusals (lua/fn), by first word */
    DTQ_REPLY_INVALID_ARGUMENT,
    DTQ_REPLY_NOT_FOUND,
    DTQ_REPLY_WRONG_STATE,
    DTQ_REPLY_PAYLOAD_TOO_LARGE,
    DTQ_REPLY_QUEUE_FULL,
    DTQ_REPLY_IDEMPOTENCY_IN_PROGRESS,
    DTQ_REPLY_ID_EXISTS,
    DTQ_REPLY_NOT_EMPTY,    /* <ns>_queue_remove: the queue holds tasks */
    DTQ_REPLY_WRONG_LAYOUT, /* <ns>_layout: the namespace is laid out the other way */
    DTQ_REPLY_TRYAGAIN,     /* a Function's keys are mid-migration (or Redis's own) */
    /* Redis's own */
    DTQ_REPLY_NO_FUNCTION,      /* "ERR Function not found": the library is not loaded */
    DTQ_REPLY_NOSCRIPT,         /* EVALSHA of an unknown script */
    DTQ_REPLY_NOPERM,           /* ACL: the user may not run this command or touch this key */
    DTQ_REPLY_NOPERM_IN_SCRIPT, /* ACL: a command run by a Function was refused its caller */
    DTQ_REPLY_NOAUTH,           /* authentication required */
    DTQ_REPLY_WRONGPASS,        /* AUTH refused */
    DTQ_REPLY_BUSYGROUP,        /* XGROUP CREATE of a group that exists */
    DTQ_REPLY_READONLY,         /* a replica (or a demoted primary) */
    DTQ_REPLY_LOADING,          /* the server is loading its data */
    DTQ_REPLY_MASTERDOWN,       /* a replica without its primary */
    DTQ_REPLY_MOVED,            /* Redis Cluster: the slot lives on another node */
    DTQ_REPLY_ASK,              /* Redis Cluster: the slot is migrating; ask there once */
    DTQ_REPLY_CLUSTERDOWN       /* Redis Cluster: the cluster cannot serve */
} dtq_reply_class;

/* The class of the error reply text err (NULL is DTQ_REPLY_OTHER). */
dtq_reply_class dtq_reply_class_of(const char *err);
/* The text after err's first word and its space ("" when there is none): the subject of a
 * refusal (a Function's "NOT_FOUND queue q ..." gives "queue q ..."), the slot and
 * address of a redirect. Points into err. */
const char *dtq_reply_detail(const char *err);
/* Whether the class says the server cannot serve at all (READONLY, LOADING, MASTERDOWN):
 * a failure of the connection, not of the command. */
int dtq_reply_class_unavailable(dtq_reply_class c);
/* The class's word, as the reply spells it ("NOT_FOUND"); "OTHER" for DTQ_REPLY_OTHER. */
const char *dtq_reply_class_name(dtq_reply_class c);

#endif
