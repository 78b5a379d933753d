/* scripts.c: namespacing of the embedded library. The file has exactly one shebang line,
 * one `local NS, PREFIX = ...` line and, after it, one `local VERSION = ...` line; all three
 * are rewritten here. */
#include "scripts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

extern const unsigned char dtq_lua_library[];
extern const size_t dtq_lua_library_len;

#define NS_LINE "local NS, PREFIX = 'dtq', 'dtq'"
#define VERSION_LINE "local VERSION = 'unversioned'"

const char *dtq_scripts_version(void) {
    static char version[64];
    if (!version[0]) {
        /* FNV-1a (64 bit) of the embedded text: a marker, not a signature */
        uint64_t h = 14695981039346656037ULL;
        for (size_t i = 0; i < dtq_lua_library_len; i++) {
            h ^= dtq_lua_library[i];
            h *= 1099511628211ULL;
        }
        snprintf(version, sizeof(version), "%s-%016llx", DTQ_VERSION, (unsigned long long)h);
    }
    return version;
}

char *dtq_scripts_library(const char *ns, const char *prefix, size_t *len) {
    const char *src = (const char *)dtq_lua_library;
    const char *first_nl = strchr(src, '\n');
    const char *ns_line = strstr(src, NS_LINE);
    const char *version_line = strstr(src, VERSION_LINE);
    char *out;
    /* the build embedded a file without the markers, or not in this order */
    if (!first_nl || !ns_line || !version_line || version_line < ns_line) abort();
    out = dtq_xasprintf("#!lua name=%s\n%.*slocal NS, PREFIX = '%s', '%s'%.*slocal VERSION = "
                        "'%s'%s",
                        ns, (int)(ns_line - first_nl - 1), first_nl + 1, ns, prefix,
                        (int)(version_line - ns_line - strlen(NS_LINE)), ns_line + strlen(NS_LINE),
                        dtq_scripts_version(), version_line + strlen(VERSION_LINE));
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
