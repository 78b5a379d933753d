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

#endif
