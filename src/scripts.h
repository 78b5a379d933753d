/* scripts.h: the embedded Functions library (lua/, assembled and compiled in at build time) and
 * its per-namespace form: the library name and the Function names carry the namespace. */
#ifndef DTQ_SCRIPTS_H
#define DTQ_SCRIPTS_H

#include <stddef.h>

/* Returns the library text for FUNCTION LOAD REPLACE (caller-owned); *len gets its size. */
char *dtq_scripts_library(const char *ns, const char *prefix, size_t *len);
/* The library's version marker, "<DTQ_VERSION>-<16 hex digits of a hash of the library>":
 * what FCALL_RO <ns>_version answers once this build's library is loaded. Static. */
const char *dtq_scripts_version(void);

/* Error codes the Functions reply with, by first word. */
enum dtq_script_error {
    DTQ_SCRIPT_ERR_OTHER,
    DTQ_SCRIPT_ERR_INVALID_ARGUMENT,
    DTQ_SCRIPT_ERR_PAYLOAD_TOO_LARGE,
    DTQ_SCRIPT_ERR_QUEUE_FULL,
    DTQ_SCRIPT_ERR_IDEMPOTENCY_IN_PROGRESS,
    DTQ_SCRIPT_ERR_ID_EXISTS,
    DTQ_SCRIPT_ERR_NOT_FOUND,
    DTQ_SCRIPT_ERR_WRONG_STATE,
    DTQ_SCRIPT_ERR_NOT_EMPTY,  /* <ns>_queue_remove: the queue holds tasks */
    DTQ_SCRIPT_ERR_NO_FUNCTION /* the library is not loaded */
};

enum dtq_script_error dtq_scripts_error_code(const char *errstr);

#endif
