/* fuzz_web_tokens: dtq-web's token files ([web] token_file, read_token_file) through
 * dtq_web_tokens_parse, and a request's Authorization value through dtq_web_tokens_check.
 * Input: file text NUL Authorization value. */
#include <stdio.h>

#include "fuzz.h"
#include "web_auth.h"

DTQ_FUZZ_QUIET_LOGS()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *part[2], err[256];
    dtq_web_tokens *t;
    fuzz_split(data, size, part, 2);
    t = dtq_web_tokens_parse(part[0], err, sizeof(err));
    if (t) {
        const char *actor = dtq_web_tokens_check(t, part[1]);
        int n = dtq_web_tokens_count(t);
        if (n < 1 || n > DTQ_WEB_TOKENS_MAX) abort();
        if (actor && strncmp(actor, "dtq-web", 7)) abort();
        if (dtq_web_tokens_check(t, NULL) || dtq_web_tokens_check(t, "Bearer ")) abort();
        dtq_web_tokens_free(t);
    } else if (!*err) {
        abort();
    }
    free(part[0]);
    free(part[1]);
    return 0;
}
