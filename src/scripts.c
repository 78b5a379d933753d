/* scripts.c: namespacing of the embedded library. The file has exactly one shebang line
 * and one `local NS, PREFIX = ...` line; both are rewritten here. */
#include "scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

extern const unsigned char dtq_lua_library[];
extern const size_t dtq_lua_library_len;

#define NS_LINE "local NS, PREFIX = 'dtq', 'dtq'"

char *dtq_scripts_library(const char *ns, const char *prefix, size_t *len) {
    const char *src = (const char *)dtq_lua_library;
    const char *first_nl = strchr(src, '\n');
    const char *ns_line = strstr(src, NS_LINE);
    char *out;
    if (!first_nl || !ns_line) abort(); /* the build embedded a file without the markers */
    out = dtq_xasprintf("#!lua name=%s\n%.*slocal NS, PREFIX = '%s', '%s'%s", ns,
                        (int)(ns_line - first_nl - 1), first_nl + 1, ns, prefix,
                        ns_line + strlen(NS_LINE));
    *len = strlen(out);
    return out;
}

enum dtq_script_error dtq_scripts_error_code(const char *e) {
    static const struct {
        const char *word;
        enum dtq_script_error code;
    } codes[] = {{"INVALID_ARGUMENT", DTQ_SCRIPT_ERR_INVALID_ARGUMENT},
                 {"PAYLOAD_TOO_LARGE", DTQ_SCRIPT_ERR_PAYLOAD_TOO_LARGE},
                 {"QUEUE_FULL", DTQ_SCRIPT_ERR_QUEUE_FULL},
                 {"IDEMPOTENCY_IN_PROGRESS", DTQ_SCRIPT_ERR_IDEMPOTENCY_IN_PROGRESS},
                 {"ID_EXISTS", DTQ_SCRIPT_ERR_ID_EXISTS},
                 {"NOT_FOUND", DTQ_SCRIPT_ERR_NOT_FOUND},
                 {"WRONG_STATE", DTQ_SCRIPT_ERR_WRONG_STATE}};
    size_t n;
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        n = strlen(codes[i].word);
        if (!strncmp(e, codes[i].word, n) && (e[n] == ' ' || e[n] == '\0')) return codes[i].code;
    }
    if (strstr(e, "Function not found")) return DTQ_SCRIPT_ERR_NO_FUNCTION;
    return DTQ_SCRIPT_ERR_OTHER;
}
